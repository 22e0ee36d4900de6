"""What every parser hands to the next stage: its events and an account of its lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from forensics import knowledge
from forensics.columns import EventColumns
from forensics.events import Event, clip, number_out_of_range

# the name a source's dominant format is shown under (JSON sources[].kind)
KIND_NAMES = {"vllm": "vllm-log", "sglang": "sglang-log", "glog": "c10-log", "nccl": "nccl-log",
              "trtllm": "tensorrt-llm-log", "pylog": "python-log", "uvicorn": "vllm-log", "kernel": "kernel-log",
              "python-traceback": "python-traceback", "compute-sanitizer": "compute-sanitizer",
              "cuda-gdb": "cuda-gdb", "faulthandler": "faulthandler", "py-spy": "py-spy",
              "torchrun-summary": "torchrun-log", "launcher-record": "torchrun-log", "native-exception": "native-crash", "segfault-banner": "native-crash",
              "nvidia-smi": "nvidia-smi", "collect-env": "collect-env", "pip-freeze": "pip-freeze",
              "env-vars": "environment", "collect-clock": "collect-clock", "collect-manifest": "collect-manifest", "plain": "text"}


@dataclass
class Traffic:
    """Ordinary lines of one process and template: counted, with times and examples."""

    process: str | None
    pid: int | None
    rank: int | None
    template: str
    source: str = ""
    host: str | None = None
    count: int = 0
    first: datetime | None = None
    last: datetime | None = None
    first_line: int = 0
    last_line: int = 0
    examples: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)      # last values of environment fields it carries

    def to_json(self) -> dict:
        return {"process": self.process, "pid": self.pid, "rank": self.rank, "template": self.template,
                "count": self.count, "first_line": self.first_line, "last_line": self.last_line,
                "first": self.first.isoformat() if self.first else None,
                "last": self.last.isoformat() if self.last else None, "examples": list(self.examples)}


@dataclass
class ParsedSource:
    """Events of one source plus the line accounting the report shows.

    Invariant for text sources:
        event_lines + noise_lines + counted_lines + unparsed_lines == lines
    counted_lines: ordinary traffic counted per template (``traffic``), and lines of a
    large input that the scanner counted without parsing (no anchor near them).
    """

    relpath: str
    kind: str
    events: list[Event] = field(default_factory=list)
    lines: int | None = 0
    event_lines: int = 0
    noise_lines: int = 0
    counted_lines: int = 0
    unparsed_lines: int | None = 0
    problems: list[str] = field(default_factory=list)
    unparsed_samples: list[tuple[int, str]] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)
    traffic: list[Traffic] = field(default_factory=list)
    size: int | None = None

    def __getstate__(self) -> dict:
        # a worker process sends its events as columns (forensics/columns.py), not as
        # one pickled object per event
        state = dict(self.__dict__)
        state["events"] = EventColumns.from_events(self.events)
        return state

    def __setstate__(self, state: dict) -> None:
        events = state["events"]
        state["events"] = events.to_events() if isinstance(events, EventColumns) else events
        self.__dict__.update(state)

    def set_aside_out_of_range(self) -> None:
        """Events and traffic that claim a number past the bounds of forensics/events.py
        (a 20-digit rank) become problem lines: their lines are counted as unparsed, so
        the line accounting still adds up, and nothing downstream (the columns a worker
        sends, the pandas timeline) meets a number it cannot hold."""
        kept, moved, example = [], set(), None
        for event in self.events:
            # the rank a process name implies (Worker_TP<n>) is read from it later: checked now
            found = event.out_of_range() or number_out_of_range(knowledge.role_and_rank(event.process)[1], "rank")
            if found is None:
                kept.append(event)
                continue
            example = example or f"{found} in the record at line {event.line}"
            if event.line not in moved:
                moved.add(event.line)
                if self.lines is not None and self.event_lines > 0:
                    self.event_lines -= 1
                    self.unparsed_lines = (self.unparsed_lines or 0) + 1
        self.events = kept
        traffic, counted = [], 0
        for entry in self.traffic:
            found = number_out_of_range({"pid": entry.pid, "rank": entry.rank, "count": entry.count,
                                         "facts": entry.facts, "process_rank": knowledge.role_and_rank(entry.process)[1]})
            if found is None:
                traffic.append(entry)
                continue
            example = example or f"{found} at line {entry.first_line}"
            counted += entry.count
        if counted:
            self.traffic = traffic
            moved_count = min(counted, self.counted_lines)
            self.counted_lines -= moved_count
            self.unparsed_lines = (self.unparsed_lines or 0) + moved_count
        if example is not None:
            n = len(moved) + counted
            self.problems.append(f"{n:,} line(s) claim a number too large to be real ({example}): counted as "
                                 "unparsed, not read as events (ranks must be below 2**31, pids below 2**32, "
                                 "other numbers must fit in 64 bits)")

    def count_unparsed(self, lineno: int, text: str, keep: int = 5) -> None:
        self.unparsed_lines = (self.unparsed_lines or 0) + 1
        if len(self.unparsed_samples) < keep:
            self.unparsed_samples.append((lineno, clip(text, 200)))

    def to_json(self) -> dict:
        return {
            "path": self.relpath,
            "kind": self.kind,
            "lines": self.lines,
            "events": len(self.events),
            "event_lines": self.event_lines,
            "noise_lines": self.noise_lines,
            "counted_lines": self.counted_lines,
            "unparsed_lines": self.unparsed_lines,
            "formats": dict(self.formats),
            "problems": list(self.problems),
        }


def dominant_kind(formats: dict[str, int]) -> str:
    """The source's kind: its most frequent format other than plain lines."""
    ranked = sorted(((n, f) for f, n in formats.items() if f != "plain" and n > 0), reverse=True)
    if not ranked:
        return "text"
    return KIND_NAMES.get(ranked[0][1], ranked[0][1])
