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
  exits, dumps of live stacks), shown on the timeline when asked.
"""

from __future__ import annotations

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

    def __str__(self) -> str:          # f-strings and JSON show the value
        return self.value


OWN_FAILURE = frozenset({Kind.CUDA_ERROR, Kind.OOM, Kind.FATAL_SIGNAL, Kind.EXCEPTION, Kind.DEVICE_ASSERT})
DEVICE_EVIDENCE = frozenset({Kind.DEVICE_ASSERT, Kind.SANITIZER, Kind.CUDA_GDB, Kind.CORE_DUMP, Kind.XID})
RELAY = frozenset({Kind.PEER_FAILURE, Kind.COLLECTIVE_TIMEOUT, Kind.NCCL, Kind.WORKER_EXCEPTION,
                   Kind.WORKER_DIED, Kind.ENGINE_FATAL, Kind.ENGINE_WORKER_FAILED, Kind.ENGINE_DEAD,
                   Kind.PARENT_EXITED, Kind.SIGNAL_RECEIVED, Kind.SCHEDULER_DUMP, Kind.HTTP,
                   Kind.CHILD_FAILED})
CONTEXT = frozenset({Kind.LOG, Kind.CONFIG, Kind.PROCESS_IDENTITY, Kind.EXIT, Kind.SHUTDOWN,
                     Kind.STACK_DUMP, Kind.LAUNCHER_SUMMARY, Kind.ENVIRONMENT})
# What the failure story is made of: shown on every timeline.
STORY = OWN_FAILURE | DEVICE_EVIDENCE | RELAY | {Kind.EXIT, Kind.STACK_DUMP, Kind.LAUNCHER_SUMMARY}


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

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line else self.source

    @property
    def chain(self) -> tuple[PyException, ...]:
        """The Python exception chain when this event is a traceback, else ()."""
        return self.attrs.get("chain") or ()
