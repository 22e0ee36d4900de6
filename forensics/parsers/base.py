"""What every parser hands to the next stage: its events and an account of its lines."""

from __future__ import annotations

from dataclasses import dataclass, field

from forensics.events import Event


@dataclass
class ParsedSource:
    """Events of one source plus the line accounting the report shows.

    Invariant for text sources:
        event_lines + noise_lines + counted_lines + unparsed_lines == lines
    where counted_lines are the lines of a large input that the prefilter counted without
    parsing (no anchor near them; see parsers/prefilter.py).
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

    def count_unparsed(self, lineno: int, text: str, keep: int = 5) -> None:
        self.unparsed_lines += 1
        if len(self.unparsed_samples) < keep:
            self.unparsed_samples.append((lineno, text[:200]))

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
            "problems": list(self.problems),
        }
