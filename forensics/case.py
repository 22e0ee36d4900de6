"""The pipeline end to end: sources -> parsers -> events -> timeline -> rules -> Case.

``analyze(paths)`` is the Python API (notebooks live on it); the CLI is a thin shell
around it.  A ``Case`` holds everything a renderer needs and nothing renders here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pandas as pd

from forensics import engines, kb, rules, timeline
from forensics.kinds import FORCEABLE
from forensics.events import Event
from forensics.parsers.base import ParsedSource
from forensics.rules.base import Context
from forensics.sources import Source, discover

SCHEMA = "forensics.report/1"
TOOL_KINDS = {"compute-sanitizer", "compute-sanitizer-xml", "cuda-gdb"}


def _text_parser():
    from forensics.parsers.text import TextLogParser
    return TextLogParser()


def _cuda_gdb_parser():
    from forensics.parsers.cuda_gdb import CudaGdbParser
    return CudaGdbParser()


def _cuda_coredump_parser():
    from forensics.parsers.nvcudmp import CudaCoredumpParser
    return CudaCoredumpParser()


def _elf_core_parser():
    from forensics.parsers.elfcore import ElfCoreParser
    return ElfCoreParser()


def _sanitizer_xml_parser():
    from forensics.parsers.sanitizer_xml import SanitizerXmlParser
    return SanitizerXmlParser()


# kind -> factory of an object with .parse(Source) -> ParsedSource
PARSERS: dict[str, Callable[[], Any]] = {
    "text": _text_parser,
    "compute-sanitizer": _text_parser,    # sanitizer reports are blocks inside text
    "cuda-gdb": _cuda_gdb_parser,
    "compute-sanitizer-xml": _sanitizer_xml_parser,
    "cuda-coredump": _cuda_coredump_parser,
    "elf-core": _elf_core_parser,
}


def register(kind: str, factory: Callable[[], Any]) -> None:
    PARSERS[kind] = factory


@dataclass
class Case:
    sources: list[ParsedSource]
    events: list[Event]
    context: Context
    _frame: Any = field(repr=False, default=None)

    @property
    def timeline(self) -> "pd.DataFrame":
        """Every event as a pandas DataFrame (built on first use: pandas is slow to import)."""
        if self._frame is None:
            self._frame = timeline.dataframe(self.events)
        return self._frame

    @property
    def verdict(self) -> dict:
        return self.to_dict()["verdict"]

    def to_dict(self, timeline_limit: int | None = 400, redact: bool = False) -> dict:
        from forensics.report.json_report import build
        report = build(self, timeline_limit=timeline_limit)
        if redact:
            from forensics.redact import Redactor
            redactor = Redactor()
            report = redactor.data(report)
            report["redaction"] = {"enabled": True, "counts": redactor.summary()}
        else:
            report["redaction"] = {"enabled": False, "counts": {}}
        return report

    def to_json(self, indent: int | None = 2, timeline_limit: int | None = 400, redact: bool = False) -> str:
        return json.dumps(self.to_dict(timeline_limit, redact), indent=indent, default=str)


def parse_source(source: Source, parsers: dict[str, Any]) -> ParsedSource:
    """One source -> its events; a parser failure becomes a problem, never a crash."""
    if source.problems and source.kind == "unknown":
        return ParsedSource(source.relpath, "unknown", lines=None, unparsed_lines=None,
                            problems=list(source.problems))
    factory = PARSERS.get(source.kind)
    if factory is None:
        return ParsedSource(source.relpath, source.kind, lines=None, unparsed_lines=None,
                            problems=[f"{source.relpath}: {source.kind} input recognised, but no "
                                      "parser for it is installed"])
    parser = parsers.setdefault(source.kind, factory())
    try:
        parsed = parser.parse(source)
    except Exception as exc:  # noqa: BLE001 - one bad input must not stop the others
        parsed = ParsedSource(source.relpath, source.kind, lines=None, unparsed_lines=None,
                              problems=[f"{source.relpath}: parser failed ({type(exc).__name__}: {exc}); "
                                        "input skipped - please report this with the file"])
    parsed.problems[:0] = [p for p in source.problems if p not in parsed.problems]
    if source.compression:
        parsed.problems.append(f"read through {source.compression} decompression")
    return parsed


def _parse_fresh(source: Source) -> ParsedSource:
    """parse_source with its own parser instances (for worker processes)."""
    return parse_source(source, {})


def analyze(*paths: str, kb_dirs: list[str] | None = None,
            on_source: Callable[[Source, ParsedSource], None] | None = None,
            kind: str | None = None, engine: str = "local", scheduler: str | None = None) -> Case:
    """Analyse files, directories (recursively) or ``-`` (stdin); returns a Case.

    ``kb_dirs``: folders of extra known-issue entries (``--kb``), added to the built-in ones.
    ``on_source``: called after each input is parsed (progress display).
    ``kind``: read every input as this format instead of detecting it (see FORCEABLE).
    ``engine``: "local" (this machine's cores) or "dask" (``scheduler`` address, or a
    local cluster); the report is the same either way."""
    flat = [p for group in paths for p in ([group] if isinstance(group, str) else list(group))]
    parsers: dict[str, Any] = {}

    def forced(source: Source) -> Source:
        readable = source.path is not None or source.data is not None or source.opener is not None
        if kind is not None and readable and not source.kind.startswith("archive-"):
            return dataclasses.replace(source, kind=FORCEABLE[kind],
                                       problems=(f"{source.relpath}: read as {kind} (--kind), not detected",))
        return source

    # An archive member is a stream that must be read before the next member is opened:
    # it is parsed at once, here.  Files are parsed afterwards, by the chosen engine.
    listed: list = []
    for source in (forced(s) for s in discover([str(p) for p in flat])):
        if source.opener is not None:
            listed.append((source, parse_source(source, parsers)))
            if on_source is not None:
                on_source(source, listed[-1][1])
        else:
            listed.append(source)
    files = [x for x in listed if isinstance(x, Source)]
    if engine == "dask":
        done = iter(engines.parse_dask(files, _parse_fresh, scheduler, on_source))
    else:
        done = iter(engines.parse_processes(files, _parse_fresh, on_source=on_source))
    parsed = [next(done) if isinstance(x, Source) else x[1] for x in listed]
    events = timeline.order([p.events for p in parsed])
    current = [e for e in events if not e.attrs.get("earlier_run")]
    table = timeline.ProcessTable.learn(current)
    events = [table.resolve(e) for e in events]
    current = [e for e in events if not e.attrs.get("earlier_run")]
    tool_sources = {p.relpath for p in parsed if p.kind in TOOL_KINDS}
    entries = kb.load_dirs(kb_dirs) if kb_dirs else None
    ctx = rules.run(Context(events=current, processes=table, tool_sources=tool_sources, kb_entries=entries))
    return Case(sources=parsed, events=events, context=ctx)
