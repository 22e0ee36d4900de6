"""Typed events: the one currency every parser produces and every later stage consumes.

A parser turns input lines into ``Event`` records; it never decides what they mean for
the crash (that is the rules' job).  Events are frozen so a later stage can only derive
new ones (``dataclasses.replace``), never edit what a parser saw.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping


class Severity(enum.IntEnum):
    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    CRITICAL = 50

    @classmethod
    def from_level(cls, level: str | None) -> "Severity":
        name = _LEVEL_ALIASES.get((level or "INFO").upper(), (level or "INFO").upper())
        return cls.__members__.get(name, cls.INFO)


_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "E": "ERROR", "W": "WARNING",
                  "I": "INFO", "F": "CRITICAL", "D": "DEBUG"}


class Kind:
    """Event kinds.  Strings, so the timeline and JSON stay readable."""

    LOG = "log"                          # an ordinary log record kept for context
    PROCESS_IDENTITY = "process-identity"  # a line revealing pid <-> rank/role
    CONFIG = "config"                    # a line revealing environment / configuration
    TRACEBACK = "traceback"              # an assembled Python traceback (any exception)
    CUDA_ERROR = "cuda-error"            # a CUDA error reported by a host call or a log line
    DEVICE_ASSERT = "device-assert"      # device-side assert printf line
    PEER_FAILURE = "peer-failure"        # a collective failed because a peer went away
    NCCL = "nccl"                        # NCCL / ProcessGroupNCCL warnings and watchdog lines
    WORKER_EXCEPTION = "worker-exception"  # "WorkerProc hit an exception."
    WORKER_DIED = "worker-died"          # executor saw a worker process die
    ENGINE_FATAL = "engine-fatal"        # EngineCore encountered a fatal error
    ENGINE_WORKER_FAILED = "engine-worker-failed"  # Worker failed with error '...'
    ENGINE_DEAD = "engine-dead"          # API server: EngineDeadError / engine core died
    PARENT_EXITED = "parent-exited"      # worker noticed its parent died
    SCHEDULER_DUMP = "scheduler-dump"    # EngineCore dumped the step in flight
    HTTP = "http"                        # an HTTP status seen by a client or access log
    EXIT = "exit"                        # a process exit status
    SHUTDOWN = "shutdown"                # orderly or forced shutdown lines
    XID = "xid"                          # NVRM Xid kernel-log line
    OOM = "oom"                          # out of memory (not sticky)
    SANITIZER = "sanitizer"              # compute-sanitizer finding
    CUDA_GDB = "cuda-gdb"                # cuda-gdb exception stop
    CORE_DUMP = "core-dump"              # GPU or CPU core dump facts
    FATAL_SIGNAL = "fatal-signal"        # faulthandler / signal death
    STACK_DUMP = "stack-dump"            # py-spy dump of a live (often hung) process


class FrozenAttrs(dict):
    """A read-only dict: events stay immutable, and still pickle (to worker processes
    and Dask workers), which a mappingproxy cannot."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("event attributes are read-only; derive a new event with dataclasses.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (FrozenAttrs, (dict(self),))

    def __hash__(self):  # pragma: no cover - events are compared, not hashed
        raise TypeError("unhashable: FrozenAttrs")


def as_int(value: Any) -> int | None:
    """An event attribute as an int (they arrive as text from the grammars), or None."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def freeze(attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return FrozenAttrs(attrs or {})


@dataclass(frozen=True)
class Frame:
    """One Python stack frame as printed in a traceback."""

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
    chained_by: str | None = None      # "cause" | "context" linking it to the previous one


@dataclass(frozen=True)
class Event:
    """One thing that happened, on one process, seen at one place in one input."""

    kind: str
    message: str
    source: str                        # input path relative to the analysed root
    line: int                          # 1-based line in that source (0 for binary inputs)
    severity: Severity = Severity.INFO
    time: datetime | None = None
    time_inferred: bool = False        # True when the line had no stamp of its own
    pid: int | None = None
    process: str | None = None         # process name as the log prefix shows it
    rank: int | None = None
    role: str | None = None            # worker | engine-core | api-server | launcher | unknown
    seq: int = 0                       # position in the source, for stable ordering
    attrs: Mapping[str, Any] = field(default_factory=FrozenAttrs)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source
