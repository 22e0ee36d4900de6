"""The pipeline end to end: inputs -> parsers -> events -> timeline -> rules -> Case.

``analyze(paths)`` runs it; the CLI and the Python API (forensics/api.py) are thin
shells around it.  A ``Case`` holds what the analysis found; it renders nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

if TYPE_CHECKING:
    import pandas as pd

from forensics import engines, kb, rules, timeline
from forensics.events import Event
from forensics.inputs.discover import discover
from forensics.inputs.sources import OutputIsInput, Source, Walk, display_name  # noqa: F401 - re-exported
from forensics.parsers import registry
from forensics.parsers.base import ParsedSource
from forensics.rules import Evidence, SourceFacts
from forensics.verdict import Verdict

TOOL_FORMATS = {"compute-sanitizer", "cuda-gdb"}
BULK_BYTES = 64 << 20          # inputs together past this: a large bundle
BULK_FILE_BYTES = 64 << 10     # in a large bundle, text files past this take the fast path


class NothingToAnalyse(ValueError):
    """No input could be read: the message says what was given and why nothing was read."""


@dataclass
class Case:
    """What one analysis found: its inputs, every event, and the verdict."""

    sources: list[ParsedSource]
    events: list[Event]
    verdict: Verdict
    processes: timeline.ProcessTable
    walk: Walk = field(default_factory=Walk)
    stories: Any = None              # forensics.story.Stories: what the rules read each process's lines as
    _frame: Any = field(default=None, repr=False)

    @property
    def timeline(self) -> "pd.DataFrame":
        """Every event as a pandas DataFrame (built on first use: pandas is slow to import)."""
        if self._frame is None:
            self._frame = timeline.dataframe(self.events)
        return self._frame

    def __repr__(self) -> str:
        return f"<Case {len(self.sources)} inputs, {len(self.events)} events: {self.verdict.headline}>"


def parse_source(source: Source) -> ParsedSource:
    """One source -> its events.  A reader that raises on malformed content is a bug:
    it is reported as a problem line (this input only) and the analysis goes on."""
    if not source.readable:
        return ParsedSource(source.relpath, "unknown", lines=None, unparsed_lines=None,
                            problems=list(source.problems), size=source.size)
    reader = registry.reader_for(source.kind)
    if reader is None:
        return ParsedSource(source.relpath, source.kind, lines=None, unparsed_lines=None,
                            problems=[f"{source.relpath}: no reader for {source.kind}"], size=source.size)
    try:
        parsed = reader.parse(source)
    except Exception as exc:  # noqa: BLE001 - one bad input must not stop the others
        parsed = ParsedSource(source.relpath, source.kind, lines=None, unparsed_lines=None, size=source.size,
                              problems=[f"{source.relpath}: the reader failed ({type(exc).__name__}: {exc}); "
                                        "this input was skipped - please report it with the file"])
    # here, in whichever process parsed it (a worker, a Dask task or this one), before the
    # events are packed into columns: one gate for every reader and every engine
    parsed.set_aside_out_of_range()
    parsed.problems[:0] = [p for p in source.problems if p not in parsed.problems]
    if source.compression:
        parsed.problems.append(f"read through {source.compression} decompression")
    return parsed


def analyze(*paths, kb_dirs: list[str] | None = None, on_source: Callable[[Source, ParsedSource], None] | None = None,
            kind: str | None = None, engine: str = "local", scheduler: str | None = None,
            follow_links: bool = False, stdin: BinaryIO | None = None, outputs: tuple = ()) -> Case:
    """Analyse files, folders (recursively) or ``-`` (stdin); returns a Case.

    ``outputs``: the files the caller will write (a report, a CSV); an input that is one
    of them (found by walking a folder, through symbolic or hard links) raises
    OutputIsInput while the inputs are listed, before anything is written.
    Raises NothingToAnalyse when nothing given can be read (missing paths, empty
    folders, only binary files), KnowledgeBaseError for a bad ``kb_dirs`` entry."""
    flat = [str(p) for group in paths for p in ([group] if isinstance(group, (str, bytes)) or not
                                                hasattr(group, "__iter__") else list(group))]
    if not flat:
        raise NothingToAnalyse("nothing to analyse: give a folder, files, or - for stdin")
    entries = kb.load_dirs(kb_dirs) if kb_dirs else None
    walk = Walk(paths=tuple(flat))
    walk.protect(*outputs)

    def forced(source: Source) -> Source:
        if kind is None or not source.readable or source.kind.startswith("archive-"):
            return source
        reader = registry.forceable()[kind]
        return dataclasses.replace(source, kind=reader, forced=kind,
                                   problems=source.problems + (f"{source.relpath}: read as {kind} (--kind)",))

    # A stream (stdin, an archive member) must be read before the next one opens: it is
    # parsed at once, here.  Files are parsed afterwards, by the chosen engine.
    listed: list = []
    for source in (forced(s) for s in discover(flat, follow_links=follow_links, walk=walk, stdin=stdin)):
        if source.opener is not None:
            listed.append((source, parse_source(source)))
            if on_source is not None:
                on_source(source, listed[-1][1])
        else:
            listed.append(source)
    files = [x for x in listed if isinstance(x, Source)]
    if sum(s.size or 0 for s in files) >= BULK_BYTES:
        # a large bundle of many files (rotated per-rank logs): each text file of some
        # size takes the fast path, not only the ones past its own threshold
        bulk = {id(s) for s in files if s.kind == "text" and (s.size or 0) >= BULK_FILE_BYTES}
        listed = [dataclasses.replace(x, in_bulk=True) if isinstance(x, Source) and id(x) in bulk else x
                  for x in listed]
        files = [x for x in listed if isinstance(x, Source)]
    if engine == "dask":
        done = iter(engines.parse_dask(files, parse_source, scheduler, on_source))
    else:
        done = iter(engines.parse_processes(files, parse_source, on_source=on_source))
    parsed = [next(done) if isinstance(x, Source) else x[1] for x in listed]
    _refuse_if_empty(flat, parsed)
    return analyze_parsed(parsed, entries, walk)


def analyze_parsed(parsed: list[ParsedSource], kb_entries=None, walk: Walk | None = None) -> Case:
    """The stages after parsing: timeline, identities, rules."""
    events = timeline.order(timeline.place_uptimes([p.events for p in parsed]))
    events, notes = timeline.set_aside_earlier_runs(events)
    current = [e for e in events if not e.attrs.get("earlier_run")]
    traffic = tuple(t for p in parsed for t in p.traffic)
    table = timeline.ProcessTable.learn(current, traffic)
    events = timeline.adopt_crash_dumps([table.resolve(e) for e in events], table)
    current = tuple(e for e in events if not e.attrs.get("earlier_run"))
    notes = notes + timeline.unrelated_runs(list(current), table)
    facts = tuple(SourceFacts(p.relpath, p.kind, tuple(p.formats), bool(set(p.formats) & TOOL_FORMATS))
                  for p in parsed)
    evidence = Evidence(events=current, processes=table, sources=facts, kb_entries=tuple(kb_entries or ()),
                        traffic=traffic, notes=tuple(notes), inputs=walk.paths if walk is not None else ())
    verdict = rules.run(evidence)
    return Case(sources=parsed, events=events, verdict=verdict, processes=table, walk=walk or Walk(),
                stories=evidence.stories)


def _refuse_if_empty(given: list[str], parsed: list[ParsedSource]) -> None:
    readable = [p for p in parsed if p.kind != "unknown" and (p.lines or p.events or p.lines is None and p.kind != "unknown")]
    if any((p.lines or 0) > 0 or p.events for p in readable):
        return
    problems = [q for p in parsed for q in p.problems]
    what = ", ".join(display_name(g) for g in given)
    if not parsed:
        raise NothingToAnalyse(f"nothing to analyse in {what}: no files found")
    if problems:
        raise NothingToAnalyse(f"nothing readable in {what}: {problems[0]}"
                               + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    raise NothingToAnalyse(f"nothing to analyse in {what}: every input is empty")
