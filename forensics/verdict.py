"""What the analysis concludes, as typed, frozen values.

The rules write these (rules/base.py's runner builds the ``Verdict`` from what each
rule wrote); the report document and every renderer only read them.  Absent findings
are ``None`` or empty tuples and are *said* by the renderers ("unknown - how to get
it"), never shown as if they were values.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from forensics.knowledge import CudaError


class Confidence(str, enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    def __str__(self) -> str:
        return self.value


class Status(str, enum.Enum):
    """How a process went down (the values of the JSON contract)."""

    ORIGIN = "origin"          # its own device work faulted
    SURFACED = "surfaced"      # it reported the (sticky) error; its origin is not shown elsewhere
    FAILED = "failed"          # it failed on its own without a CUDA error (a crash signal, OOM, an exception)
    COLLATERAL = "collateral"  # it went down because a peer or its parent did
    HEALTHY = "healthy"        # no failure at all
    UNKNOWN = "unknown"        # killed from outside, hung, or the inputs cannot tell

    def __str__(self) -> str:
        return self.value


class FailureKind(str, enum.Enum):
    CUDA_ERROR = "cuda-error"
    DEVICE_ASSERT = "device-assert"
    OOM = "oom"
    HANG = "hang"
    NCCL_TIMEOUT = "nccl-timeout"
    PYTHON_EXCEPTION = "python-exception"
    FATAL_SIGNAL = "fatal-signal"
    WORKER_KILLED = "worker-killed"
    STARTUP = "startup"
    RELAY_ONLY = "relay-only"     # the engine died; its own failure is not in the inputs

    def __str__(self) -> str:
        return self.value


class Check(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


def who(rank: int | None, pid: int | None, name: str | None = None, *, brief: bool = False) -> str:
    """A process as a reader names it: "rank 2 (pid 667)" ("rank 2" when ``brief``),
    "EngineCore (pid 12)", "pid 12", or "an unidentified process" - never "pid None"."""
    if rank is not None:
        return f"rank {rank}" + (f" (pid {pid})" if pid is not None and not brief else "")
    if name:
        return f"{name} (pid {pid})" if pid is not None else name
    return f"pid {pid}" if pid is not None else "an unidentified process"


def rank_list(ranks, limit: int = 16) -> str:
    """Ranks as a reader scans them: sorted, runs as ranges ("0-3, 6"), and past
    ``limit`` items cut with the count ("0, 60, 120 ... (334 ranks)")."""
    ordered = sorted({r for r in ranks if r is not None})
    items: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        items.append(str(ordered[i]) if j - i < 2 else f"{ordered[i]}-{ordered[j]}")
        if j - i == 1:
            items.append(str(ordered[j]))
        i = j + 1
    if len(items) > limit:
        return ", ".join(items[:limit - 1]) + f" ... {items[-1]} ({len(ordered)} ranks)"
    return ", ".join(items)


def ranks_phrase(ranks) -> str:
    """"rank 3" or "ranks 0-2, 5": the noun agrees with the list."""
    listed = {r for r in ranks if r is not None}
    return ("rank " if len(listed) == 1 else "ranks ") + (rank_list(listed) or "?")


@dataclass(frozen=True)
class ErrorInfo:
    """The error the crash is about."""

    error: CudaError
    reported_at: str               # source:line of the report used
    relayed_only: bool = False     # known only from a relay (the engine quoting a worker)
    cause_of: str | None = None    # a library status (cuBLAS ...) this error surfaced as
    from_device: str | None = None  # no host call reported it: the device exception it follows from

    @property
    def code(self) -> int | None:
        return self.error.code

    @property
    def name(self) -> str:
        return self.error.name


@dataclass(frozen=True)
class Surface:
    """Where a process *noticed* the error (for a sticky error: not where it happened)."""

    rank: int | None
    pid: int | None
    api: str | None
    file: str | None
    line: int | None
    function: str | None
    time: datetime | None
    source: str                    # evidence location: relative path:line
    exception: str
    error_code: int | None
    error_name: str | None
    how: str                       # "raised", "unraisable exception in <obj>", "logged", ...
    also_seen_in: tuple[str, ...] = ()
    site_kind: str = "none"        # python (frames) | native (an error line's file:line or API) | library (a library's own check) | none
    graph_replay: bool = False     # the call was a CUDA graph replay (or under one)
    name: str | None = None        # the process's name when it has neither rank nor pid
    caller: str | None = None      # "file:line in function": the innermost frame outside torch, triton and the
                                   # standard library, when the surface frame is inside them


@dataclass(frozen=True)
class EvidenceRef:
    kind: str
    source: str
    text: str


@dataclass(frozen=True)
class Origin:
    """The kernel and rank that faulted, from device evidence only."""

    rank: int | None
    pid: int | None
    kernel: str | None             # None: device evidence names the rank, not the kernel
    fault: str
    address: str | None
    evidence: tuple[EvidenceRef, ...]
    confidence: Confidence
    notes: tuple[str, ...] = ()
    name: str | None = None        # the process's name when it has neither rank nor pid (a paste's main process)
    location: str | None = None    # the kernel's source line a tool named (sanitizer, cuda-gdb, device assert)
    launch_site: str | None = None # the host code that launched the kernel, when a tool named it


@dataclass(frozen=True)
class FirstFailure:
    rank: int | None
    pid: int | None
    time: datetime | None
    basis: str
    what: str
    launcher_opinion: str | None = None     # torchrun's "Root Cause", when it differs
    key: str | None = None                  # the process's identity (its story's key); None: undecided
    name: str | None = None                 # its name, for a process with neither rank nor pid


@dataclass(frozen=True)
class RankVerdict:
    key: str                        # the process's identity in this report (pid:N or rank:N@host)
    pid: int | None
    rank: int | None
    role: str
    name: str | None
    status: Status
    exit_code: int | None = None
    first_error: str | None = None
    first_error_source: str | None = None
    failure: str | None = None      # how it went down, in words
    other_pids: tuple[int, ...] = ()  # the same process seen under other pids (a tool's front end)
    host: str | None = None
    in_inputs: bool = True          # False: a rank the configuration promises but no input shows


@dataclass(frozen=True)
class RankStep:
    """The engine step a worker was in when the capture plugin's snapshot was written
    (forensics/capture/): what that rank was running when it went down - never what
    faulted (only device evidence names an origin)."""

    key: str | None                 # the RankVerdict this joins (by pid, else by rank); None: no process matched
    rank: int | None
    pid: int | None
    step: int | None
    phase: str | None               # prefill | decode | mixed | idle
    tokens: int | None
    requests: tuple[tuple[str, int | None, int | None], ...]   # (request id, tokens scheduled, first position)
    in_flight: bool                 # False: between steps (the last step had completed)
    reason: str                     # exception | exit | live (the file is what the worker wrote before the step)
    text: str                       # "in step 12 (prefill, 1 request: ...)"
    source: str


@dataclass(frozen=True)
class Hang:
    collective: str | None
    seq: int | None
    waited: tuple[int, ...]         # ranks that reported timing out (Flight Recorder: that wait in it)
    suspects: tuple[int, ...]       # ranks that did not (or were behind)
    culprit_doing: str | None = None  # what the stalled rank was doing, from a stack dump or its dump
    basis: str = "logs"             # logs | flight-recorder: what named the suspects
    group: str | None = None        # the process group (Flight Recorder)
    culprit_how: str | None = None  # never-entered | stuck-earlier | mismatch | no-dump (Flight Recorder)
    called_at: str | None = None    # where the waiting ranks' program called the collective
    evidence: tuple[str, ...] = ()  # the dumps read
    waits: tuple[tuple[int, str], ...] = ()  # (rank, the collective it waits in) of every waiting rank (Flight Recorder)


@dataclass(frozen=True)
class ChecklistItem:
    check: str
    status: Check
    finding: str
    evidence: str | None = None


@dataclass(frozen=True)
class KnownIssueMatch:
    id: str
    title: str
    likelihood: str                 # likely | possible
    matched: tuple[str, ...]
    unknown: tuple[str, ...]
    status: str
    references: tuple[str, ...]
    workaround: str
    does_not_prove: str


@dataclass(frozen=True)
class NextStep:
    id: str
    why: str
    command: str | None             # None: an action, not a command
    warnings: tuple[str, ...] = ()  # values from the logs that were not used (did not look right)
    title: str = ""                 # the action, as an imperative ("Re-run one request under compute-sanitizer ...")


@dataclass(frozen=True)
class HardwareOpinion:
    """Whether the evidence points at the GPU or at a program's kernel."""

    opinion: str                    # hardware | software | undecided
    basis: str
    settle: str                     # what would settle it


@dataclass(frozen=True)
class SignaturePart:
    part: str
    value: str | None
    contributed: bool
    why: str


@dataclass(frozen=True)
class Verdict:
    """Everything the rules concluded."""

    error: ErrorInfo | None = None
    failure_kind: FailureKind | None = None
    surfaces: tuple[Surface, ...] = ()
    origin: Origin | None = None
    first_failure: FirstFailure | None = None
    ranks: tuple[RankVerdict, ...] = ()
    hang: Hang | None = None
    steps: tuple[RankStep, ...] = ()        # the capture plugin's step in flight, per rank
    hardware: HardwareOpinion | None = None
    environment: Mapping[str, Any] = field(default_factory=dict)
    environment_sources: Mapping[str, str] = field(default_factory=dict)
    signature: str | None = None
    signature_parts: tuple[SignaturePart, ...] = ()
    signature_site: str | None = None   # fault class + surface site: compare joins runs that share it
    known_issues: tuple[KnownIssueMatch, ...] = ()
    checklist: tuple[ChecklistItem, ...] = ()
    next_steps: tuple[NextStep, ...] = ()
    notes: tuple[str, ...] = ()              # what the reader should know (graph replay, launcher opinion ...)
    headline: str = ""
    summary: str = ""
    explanations: tuple[tuple[str, str], ...] = ()
    rule_failures: tuple[str, ...] = ()

    @property
    def collateral(self) -> tuple[int, ...]:
        return tuple(sorted({v.rank for v in self.ranks if v.status == Status.COLLATERAL and v.rank is not None}))

    @property
    def failed(self) -> bool:
        return self.failure_kind is not None
