"""Typed events: the one currency every parser produces and every later stage consumes.

A parser turns input lines into ``Event`` records; it never decides what they mean for
the crash (that is the rules' job).  Events are frozen: a later stage can only derive new
ones (``dataclasses.replace``), never edit what a parser saw.

Event kinds are one enum with named groups, defined here and nowhere else:

- ``OWN_FAILURE``: a process failed on its own (a CUDA error it reported, a device
  assert, out of memory, a fatal signal, an exception of its own);
- ``DEVICE_EVIDENCE``: what a device-side tool or the driver says about a kernel
  (sanitizer, cuda-gdb, core dump, Xid, device assert);
- ``RELAY``: a process noticed that *another* one failed (a peer closed the connection,
  the engine relayed a worker's error, the API server saw the engine die, a launcher saw
  a child exit, a collective timed out waiting);
- ``CONTEXT``: what the rules read to understand the run (configuration, identities,
  exits, dumps of live stacks, Flight Recorder dumps and their records), shown on the
  timeline when asked.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a token boundary.

    Reports are redacted after the rules have cut messages; a cut through the middle
    of an e-mail address or a token would leave a fragment the redactor no longer
    recognises.  So the cut falls on whitespace: back to the last space before
    ``limit`` when there is one in the last quarter, else forward to the end of the
    token (at most ``4 * limit``)."""
    if len(text) <= limit:
        return text
    back = text.rfind(" ", limit * 3 // 4, limit + 1)
    if back > 0:
        return text[:back] + " …"
    ahead = re.search(r"\s", text[limit:limit * 4])
    end = limit + ahead.start() if ahead else limit * 4
    return text[:end] + (" …" if end < len(text) else "")


class Severity(enum.IntEnum):
    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    CRITICAL = 50

    @classmethod
    def from_level(cls, level: str | None) -> "Severity":
        name = (level or "INFO").upper()
        name = _LEVEL_ALIASES.get(name, name)
        return cls.__members__.get(name, cls.INFO)


_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "E": "ERROR", "W": "WARNING",
                  "I": "INFO", "F": "CRITICAL", "D": "DEBUG", "ERR": "ERROR", "CRIT": "CRITICAL",
                  "V": "DEBUG", "TRACE": "DEBUG", "NOTICE": "INFO"}


class Kind(str, enum.Enum):
    """What an event is.  The value is what JSON and the timeline show."""

    # -- a process's own failure
    CUDA_ERROR = "cuda-error"              # a CUDA error reported by a host call or a log line
    OOM = "oom"                            # out of memory (device or host), not a fault
    FATAL_SIGNAL = "fatal-signal"          # segfault banners, faulthandler, terminate/abort
    EXCEPTION = "exception"                # a Python exception of its own (not CUDA)
    # -- device-side evidence
    DEVICE_ASSERT = "device-assert"        # a device-side assert() line printed by a kernel
    SANITIZER = "sanitizer"                # compute-sanitizer finding
    CUDA_GDB = "cuda-gdb"                  # cuda-gdb exception stop
    CORE_DUMP = "core-dump"                # GPU or CPU core dump facts
    XID = "xid"                            # NVRM Xid kernel-log line
    # -- noticing another process's failure
    PEER_FAILURE = "peer-failure"          # a collective failed because a peer went away
    COLLECTIVE_TIMEOUT = "collective-timeout"  # a collective timed out waiting (NCCL watchdog, gloo)
    NCCL = "nccl"                          # NCCL errors and warnings that name no peer
    WORKER_EXCEPTION = "worker-exception"  # "WorkerProc hit an exception."
    WORKER_DIED = "worker-died"            # an executor/launcher saw a worker process die
    ENGINE_FATAL = "engine-fatal"          # EngineCore / scheduler stopped after a failure
    ENGINE_WORKER_FAILED = "engine-worker-failed"  # "Worker failed with error '...'"
    ENGINE_DEAD = "engine-dead"            # API server: EngineDeadError / engine core died
    PARENT_EXITED = "parent-exited"        # a worker noticed its parent died
    SIGNAL_RECEIVED = "signal-received"    # a process told to stop (SIGTERM/SIGQUIT relays)
    SCHEDULER_DUMP = "scheduler-dump"      # the engine dumped the step in flight
    HTTP = "http"                          # an HTTP status seen by a client or access log
    CHILD_FAILED = "child-failed"          # a launcher's record of a child's failure
    # -- context
    LOG = "log"                            # an ordinary record kept for context
    CONFIG = "config"                      # configuration / versions / backends
    PROCESS_IDENTITY = "process-identity"  # pid <-> rank / role
    EXIT = "exit"                          # a process exit status
    SHUTDOWN = "shutdown"                  # orderly or forced shutdown lines
    STACK_DUMP = "stack-dump"              # py-spy / faulthandler dump of a live process
    LAUNCHER_SUMMARY = "launcher-summary"  # torchrun's ChildFailedError summary
    ENVIRONMENT = "environment"            # collect_env / nvidia-smi / pip freeze facts
    FLIGHT_RECORDER = "flight-recorder"    # a Flight Recorder dump: one rank's process groups and progress
    COLLECTIVE_RECORD = "collective-record"  # one entry of that dump: a collective the rank enqueued
    CAPTURE_SNAPSHOT = "capture-snapshot"  # the capture plugin's snapshot of a worker: the step it was in
    CAPTURE_STEP = "capture-step"          # one engine step of that snapshot's ring (completed)

    def __str__(self) -> str:          # f-strings and JSON show the value
        return self.value


OWN_FAILURE = frozenset({Kind.CUDA_ERROR, Kind.OOM, Kind.FATAL_SIGNAL, Kind.EXCEPTION, Kind.DEVICE_ASSERT})
DEVICE_EVIDENCE = frozenset({Kind.DEVICE_ASSERT, Kind.SANITIZER, Kind.CUDA_GDB, Kind.CORE_DUMP, Kind.XID})
RELAY = frozenset({Kind.PEER_FAILURE, Kind.COLLECTIVE_TIMEOUT, Kind.NCCL, Kind.WORKER_EXCEPTION,
                   Kind.WORKER_DIED, Kind.ENGINE_FATAL, Kind.ENGINE_WORKER_FAILED, Kind.ENGINE_DEAD,
                   Kind.PARENT_EXITED, Kind.SIGNAL_RECEIVED, Kind.SCHEDULER_DUMP, Kind.HTTP,
                   Kind.CHILD_FAILED})
CONTEXT = frozenset({Kind.LOG, Kind.CONFIG, Kind.PROCESS_IDENTITY, Kind.EXIT, Kind.SHUTDOWN,
                     Kind.STACK_DUMP, Kind.LAUNCHER_SUMMARY, Kind.ENVIRONMENT, Kind.FLIGHT_RECORDER,
                     Kind.COLLECTIVE_RECORD, Kind.CAPTURE_SNAPSHOT, Kind.CAPTURE_STEP})
# What the failure story is made of: shown on every timeline.
STORY = OWN_FAILURE | DEVICE_EVIDENCE | RELAY | {Kind.EXIT, Kind.STACK_DUMP, Kind.LAUNCHER_SUMMARY, Kind.FLIGHT_RECORDER,
                                                 Kind.CAPTURE_SNAPSHOT}


class FrozenAttrs(dict):
    """A read-only dict: events stay immutable, and still pickle (to worker processes
    and Dask workers), which a mappingproxy cannot."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("event attributes are read-only; derive a new event with dataclasses.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self):
        return (FrozenAttrs, (dict(self),))

    def __hash__(self):  # pragma: no cover - events are compared, not hashed
        raise TypeError("unhashable: FrozenAttrs")


def freeze(attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Attributes without empty values, read-only."""
    return FrozenAttrs({k: v for k, v in (attrs or {}).items() if v is not None and v != ""})


@dataclass(frozen=True)
class Frame:
    """One Python stack frame as printed in a traceback or a stack dump."""

    file: str
    line: int | None
    function: str | None
    code: str | None = None


@dataclass(frozen=True)
class PyException:
    """One exception of a (possibly chained) traceback."""

    type: str
    message: str
    frames: tuple[Frame, ...] = ()
    unraisable_in: str | None = None   # "<function X.__del__ at 0x..>" for "Exception ignored in"
    chained_by: str | None = None      # "cause" | "context" | "remote" (quoted in the previous one's message)
    header_missing: bool = False       # a fragment: the "Traceback (most recent call last):" was not in the input
    cut: bool = False                  # the input ends before the exception line


# --- numbers a line can claim -------------------------------------------------------------
#
# A log line is data: "rank 99999999999999999999" parses, and a Python int holds it, but the
# timeline's columns (forensics/columns.py: 8-byte arrays, pandas/numpy int64, Parquet) do
# not - a worker process died of OverflowError sending it (issue 20).  Nothing real comes
# near these bounds, so an event that claims a number past them is set aside as a problem
# line of its input (ParsedSource.set_aside_out_of_range), never carried on:
#
# - ranks: 0 <= rank < 2**31 (torch.distributed keeps ranks in a C int);
# - pids: 0 <= pid < 2**32 (Linux caps pids at 2**22; a Windows process id is a DWORD);
# - every other integer an event carries (line numbers, counts, exit and error codes,
#   sizes), at any depth of its attributes (a traceback's frames too): a signed 64-bit
#   integer.
RANK_LIMIT = 1 << 31
PID_LIMIT = 1 << 32
INT64_MIN, INT64_MAX = -(1 << 63) + 1, (1 << 63) - 1     # -2**63 itself is the columns' "no value"


def _limit_for(key: str) -> tuple[str, int, int] | None:
    """(what, lowest, highest) for an integer under ``key`` when the key names a rank or
    a pid (``subject_pid``, ``local_rank``, ``parallel_ranks``), else None."""
    low = key.lower()
    if low == "pid" or low.endswith(("_pid", "pids")):
        return "pid", 0, PID_LIMIT - 1
    if low == "rank" or low.endswith(("_rank", "ranks")):
        return "rank", 0, RANK_LIMIT - 1
    return None


def _digits(value: int) -> str:
    """``value`` for a problem line, cut: a claimed number may have thousands of digits."""
    if value.bit_length() <= 80:
        return str(value)
    return "of more than 24 digits"


def number_out_of_range(value: Any, key: str = "") -> str | None:
    """What is out of range in ``value`` (an int, or a JSON-like structure of them, or a
    dataclass such as a traceback's frames, read under ``key``; a dict's keys and a
    dataclass's fields name what their values are where they name a rank or a pid, else
    the values are what ``key`` says), e.g. "rank 99999999999999999999"; None when every
    number fits.  Every event passes through here: the common leaves are tested first."""
    kind = type(value)
    if kind is str or value is None or kind is float or kind is bool:
        return None
    if isinstance(value, int):          # bool is out of the way above
        what, lowest, highest = _limit_for(key) or ("number", INT64_MIN, INT64_MAX)
        return None if lowest <= value <= highest else f"{what} {_digits(value)}"
    if isinstance(value, (list, tuple)):
        for v in value:
            if type(v) is not str:
                found = number_out_of_range(v, key)
                if found:
                    return found
        return None
    if isinstance(value, Mapping):
        items = value.items()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        # a traceback's exceptions and frames (attrs["chain"]): a frame's line number too
        fields = getattr(value, "__dict__", None)
        items = fields.items() if fields is not None else \
            ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    else:
        return None
    for k, v in items:
        if type(v) is not str and v is not None:
            found = number_out_of_range(v, k if isinstance(k, str) and _limit_for(k) else key)
            if found:
                return found
    return None


@dataclass(frozen=True)
class Event:
    """One thing that happened, on one process, seen at one place in one input."""

    kind: Kind
    message: str
    source: str                        # input path relative to the analysed root
    line: int                          # 1-based line in that source (0 for binary inputs)
    severity: Severity = Severity.INFO
    time: datetime | None = None
    time_inferred: bool = False        # True when the line had no stamp of its own
    pid: int | None = None
    process: str | None = None         # process name as the log prefix shows it
    rank: int | None = None
    role: str | None = None            # worker | engine-core | api-server | launcher | ...
    host: str | None = None            # node / container the line came from, when a wrapper said
    seq: int = 0                       # position in the source, for stable ordering
    attrs: Mapping[str, Any] = field(default_factory=FrozenAttrs)

    def out_of_range(self) -> str | None:
        """The first number this event claims past the bounds above, or None."""
        for key in ("rank", "pid", "line", "seq"):
            found = number_out_of_range(getattr(self, key), key)
            if found:
                return found
        return number_out_of_range(self.attrs)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source

    @property
    def chain(self) -> tuple[PyException, ...]:
        """The Python exception chain when this event is a traceback, else ()."""
        return self.attrs.get("chain") or ()
