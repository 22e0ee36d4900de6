"""The rule pipeline's shared state and the Rule contract.

A rule reads the ordered events and the process table, and fills in one part of the
verdict.  It must explain what it concluded in words (``ctx.explain``); a rule that
cannot conclude says why instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.events import Event
from forensics.knowledge import CudaError
from forensics.timeline import ProcessTable


@dataclass
class Surface:
    rank: int | None
    pid: int | None
    api: str | None
    file: str | None
    line: int | None
    function: str | None
    time: Any
    source: str
    exception: str
    error: CudaError | None
    how: str                      # "unraisable in __del__", "raised", "logged"
    also_seen_in: list[str] = field(default_factory=list)


@dataclass
class Origin:
    rank: int | None
    pid: int | None
    kernel: str
    fault: str
    address: str | None
    evidence: list[dict]
    confidence: str               # high | medium | low
    notes: list[str] = field(default_factory=list)


@dataclass
class FirstFailure:
    rank: int | None
    pid: int | None
    time: Any
    basis: str
    what: str


@dataclass
class RankVerdict:
    pid: int
    rank: int | None
    role: str
    name: str | None
    status: str = "unknown"       # origin | surfaced | collateral | healthy | unknown
    exit_code: int | None = None
    first_error: str | None = None
    first_error_source: str | None = None
    failure: str | None = None    # how it went down, in words


@dataclass
class Context:
    events: list[Event]
    processes: ProcessTable
    error: CudaError | None = None
    error_event: Event | None = None
    surfaces: list[Surface] = field(default_factory=list)
    origin: Origin | None = None
    first_failure: FirstFailure | None = None
    ranks: dict[int, RankVerdict] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    environment_sources: dict[str, str] = field(default_factory=dict)
    next_steps: list[str] = field(default_factory=list)
    signature: str | None = None
    signature_parts: list[dict] = field(default_factory=list)
    summary: str = ""
    failure_kind: str | None = None   # cuda-error | worker-killed | oom | hang | startup | none
    explanations: list[tuple[str, str]] = field(default_factory=list)
    tool_sources: set[str] = field(default_factory=set)   # inputs printed under a debugging tool
    kb_entries: tuple | None = None                         # None: the built-in knowledge base
    known_issues: list[dict] = field(default_factory=list)
    checklist: list[dict] = field(default_factory=list)
    hang: dict | None = None          # collective-hang findings (seq, op, waited, suspects)

    def explain(self, rule: "Rule", text: str) -> None:
        self.explanations.append((rule.name, text))

    def of_kind(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]


class Rule:
    """Base class: subclasses set ``name`` and implement ``apply``; the docstring is
    the rule's documentation and is shown by ``forensics rules``."""

    name = "rule"

    def apply(self, ctx: Context) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        return " ".join((cls.__doc__ or "").split())
