"""Stories: what every process's lines say happened to it, settled once.

The stage between the timeline and the rules (docs/reasoning.md is the model).  Each
event is read here, once, as an *observation* about one process:

- ``DEVICE_FAULT``: device evidence names its own kernel (compute-sanitizer, cuda-gdb, a
  GPU core dump, a device assert, an Xid naming its pid);
- ``OWN_ERROR``: it raised or logged a failure first-hand (a CUDA error, out of memory, a
  crash signal, an exception of its own, an NCCL error of its own: data/nccl.toml);
- ``RELAY``: it quotes another process's failure (EngineDeadError, "Worker failed with
  error", a launcher's ChildFailedError, HTTP 500 to a client);
- ``PEER_LOSS``: its collective or its pipe failed because a peer or its parent went away;
- ``WAITING``: it was blocked in a collective (a watchdog timeout, a live stack dump);
- ``KILLED``: another process's line says it died (an exit code, a signal, force-killed);
- ``SHUTDOWN``: it was stopping because it was asked to;
- ``EXITED``: it exited with status 0.

A process's story is its observations in timeline order.  Statuses, the first failure,
collateral and the hang's culprit are decided from stories (rules/failure.py); no later
stage reads an event's text to decide them.  A file whose lines name no process at all
(a console pasted as it was) is the story of one process, "the main process"
(timeline.py).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, replace

from forensics import knowledge
from forensics.collectives import Lineup, from_events as line_up_dumps
from forensics.events import Event, Kind, Severity, freeze
from forensics.timeline import ProcessInfo, ProcessTable


class Seen(str, enum.Enum):
    """What one line says about one process."""

    DEVICE_FAULT = "device-fault"
    OWN_ERROR = "own-error"
    RELAY = "relay"
    PEER_LOSS = "peer-loss"
    WAITING = "waiting"
    KILLED = "killed"
    SHUTDOWN = "shutdown"
    EXITED = "exited"

    def __str__(self) -> str:
        return self.value


# A failure of the process's own, first-hand
FIRST_HAND = frozenset({Seen.DEVICE_FAULT, Seen.OWN_ERROR})
# It learned that someone else failed
NOTICED = frozenset({Seen.RELAY, Seen.PEER_LOSS})

# Lines a process prints about its own failure, over its own traceback ("WorkerProc hit an
# exception.", "EngineCore failed to start.", the step in flight dumped): they relay when
# nothing of its own follows, and say nothing of another process when something does
ANNOUNCEMENTS = frozenset({Kind.WORKER_EXCEPTION, Kind.ENGINE_FATAL, Kind.SCHEDULER_DUMP})

_TIMEOUT_WORDS = ("timeout", "timed out", "Timeout")
# Roles whose exceptions quote a failure elsewhere: the API server sees the engine die,
# a launcher sees its child fail
_RELAYING_ROLES = ("api-server", "launcher")


@dataclass(frozen=True)
class Observation:
    seen: Seen
    event: Event
    reported_by: str | None = None     # the key of the process whose line it is, when not this one's


@dataclass(frozen=True)
class Story:
    """One process and what its lines (and lines about it) say, in timeline order."""

    key: str
    pid: int | None
    rank: int | None
    role: str | None
    name: str | None
    host: str | None
    pids: tuple[int, ...]
    observations: tuple[Observation, ...]

    def first(self, *seen: Seen) -> Observation | None:
        return next((o for o in self.observations if o.seen in seen), None)

    def all(self, *seen: Seen) -> tuple[Observation, ...]:
        return tuple(o for o in self.observations if o.seen in seen)

    @property
    def own_failure(self) -> Observation | None:
        """Its first first-hand failure (device fault or own error)."""
        return self.first(*FIRST_HAND)

    @property
    def noticed_before_failing(self) -> Observation | None:
        """A relay or peer loss of its own printed before its first first-hand failure:
        its error then followed someone else's (a broken pipe raising in its turn)."""
        own = self.own_failure
        noticed = next((o for o in self.observations if o.seen in NOTICED and o.event.kind not in ANNOUNCEMENTS),
                       None)
        if own is None or noticed is None:
            return None
        return noticed if _before(noticed.event, own.event) else None

    def has(self, pid: int | None) -> bool:
        return pid is not None and pid in self.pids


@dataclass(frozen=True)
class Stories:
    stories: tuple[Story, ...]
    unattributed: tuple[Observation, ...]     # failure lines no process signed
    # every rank's Flight Recorder dump lined up (forensics/collectives.py): who never
    # entered the collective its peers wait in; None without dumps
    collectives: Lineup | None = None


def _before(a: Event, b: Event) -> bool:
    if a.time is not None and b.time is not None and a.time != b.time:
        return a.time < b.time
    if a.source == b.source:
        return a.line < b.line
    return a.seq < b.seq


# --- what an event means --------------------------------------------------------------------

def signal_number(code) -> int | None:
    """The signal an exit status says killed the process: -N (Python's returncode) or
    128+N (a shell's)."""
    if not isinstance(code, int):
        return None
    if code < 0:
        return -code
    return code - 128 if 128 < code < 160 else None


def crash_signal(code) -> bool:
    return signal_number(code) in knowledge.crash_signals()     # data/signals.toml


def consequence_of_timeout(event: Event, first_timeout: Event | None = None) -> bool:
    """An abort or exception that only reports a collective timeout (the watchdog taking
    the process down after the timeout): part of the hang, not a failure of its own.
    ``first_timeout`` is the earliest collective timeout of the run: the watchdog's abort
    printed after it is its consequence even when the abort's what() line - the one that
    would quote the timeout - is missing (cut by the process dying, or never flushed)."""
    if event.kind not in (Kind.FATAL_SIGNAL, Kind.EXCEPTION, Kind.NCCL):
        return False
    text = event.message + " " + str(event.attrs.get("what") or "")
    if any(w in text for w in _TIMEOUT_WORDS):
        # an exception that timed out with no collective timing out anywhere in the run
        # (an engine's TimeoutError waiting on its workers' message queue) is the
        # process's own failure: what stopped answering is below it
        return event.kind != Kind.EXCEPTION or first_timeout is not None
    return (event.kind == Kind.FATAL_SIGNAL and not event.attrs.get("what") and first_timeout is not None
            and event.attrs.get("cxx_type") in knowledge.watchdog_exceptions() and after(event, first_timeout))


def after(event: Event, earlier: Event) -> bool:
    """Whether ``event`` was printed no earlier than ``earlier``: by their times, or by
    line order in one file when either has no time."""
    if event.time is not None and earlier.time is not None:
        return event.time >= earlier.time
    return event.source == earlier.source and event.line > earlier.line


def first_timeout_event(events) -> Event | None:
    """The earliest collective timeout of the last run (by time, then log order)."""
    timeouts = [e for e in events if e.kind == Kind.COLLECTIVE_TIMEOUT and not e.attrs.get("earlier_run")]
    if not timeouts:
        return None
    stamped = [e for e in timeouts if e.time is not None]
    return min(stamped, key=lambda e: (e.time, e.seq)) if stamped else timeouts[0]


def _device_fault(event: Event) -> bool | None:
    """True: device evidence of this process's own kernel; False: device evidence that is
    no fault of a process (a summary, a leak, an Xid of the GPU alone); None: not device
    evidence."""
    if event.kind == Kind.XID:
        entry = knowledge.xid_catalogue().get(event.attrs.get("xid"), {})
        # an application fault names its process; a hardware Xid counts when the GPU it
        # names is known to be a rank's (NCCL's busId, nvidia-smi)
        hardware = entry.get("lean") == "hardware" and (event.rank is not None or event.pid is not None)
        return bool(entry.get("app_fault") or hardware)
    if event.kind == Kind.SANITIZER:
        return event.attrs.get("report") not in ("summary", "leak", "api_error", "other")
    if event.kind == Kind.CORE_DUMP:
        return bool(event.attrs.get("kernel")) or event.attrs.get("message_id") == "coredump-exception"
    if event.kind in (Kind.CUDA_GDB, Kind.DEVICE_ASSERT):
        return True
    return None


@functools.cache
def _nccl_words() -> dict:
    return knowledge.load("nccl")


def nccl_own_error(event: Event) -> bool:
    """Whether an NCCL line is the process's own error (its communicator, a CUDA or
    system call inside NCCL) rather than a peer's failure seen from here
    (data/nccl.toml)."""
    words = _nccl_words()
    text = " ".join((event.message, str(event.attrs.get("what") or ""), str(event.attrs.get("detail") or "")))
    if event.attrs.get("nccl_result") in words["peer"]["results"]:
        return False
    return not any(w in text for w in words["peer"]["words"])


def seen_in(event: Event, role: str | None, first_timeout: Event | None, nothing_else_failed: bool = False) -> Seen | None:
    """What ``event`` says about the process that printed it (None: nothing that
    decides how it went down).  ``nothing_else_failed``: no line of the run is an error,
    so an API error that does not stick (a warning) is the failure (as the reported
    error is then: rules/errors.py tool_reported_errors)."""
    kind = event.kind
    if kind == Kind.SANITIZER and event.attrs.get("report") == "api_error":
        # compute-sanitizer's "Program hit <error> on CUDA API call to <api>": the
        # program's own host call failing, seen by the tool (not a probe it expects to fail)
        level = Severity.WARNING if nothing_else_failed else Severity.ERROR
        return Seen.OWN_ERROR if event.severity >= level and event.attrs.get("cuda_error") else None
    device = _device_fault(event)
    if device is not None:
        if device:
            return Seen.DEVICE_FAULT
        # the kernel's line about a process whose GPU work it tore down (Xid 45 after
        # another fault, a channel reset): something outside the process ended its work
        return Seen.KILLED if kind == Kind.XID and event.pid is not None else None
    if kind in (Kind.CUDA_ERROR, Kind.OOM, Kind.FATAL_SIGNAL, Kind.EXCEPTION):
        if consequence_of_timeout(event, first_timeout):
            return Seen.WAITING
        if kind == Kind.EXCEPTION and (role in _RELAYING_ROLES or knowledge.launchers_traceback(event)):
            return Seen.RELAY
        return Seen.OWN_ERROR
    if kind == Kind.NCCL:
        if consequence_of_timeout(event, first_timeout):
            return Seen.WAITING
        return Seen.OWN_ERROR if nccl_own_error(event) else Seen.PEER_LOSS
    if kind in (Kind.PEER_FAILURE, Kind.PARENT_EXITED):
        return Seen.PEER_LOSS
    if kind in (Kind.COLLECTIVE_TIMEOUT, Kind.STACK_DUMP):
        return Seen.WAITING
    if kind == Kind.HTTP:
        return Seen.RELAY if (event.attrs.get("status") or 0) >= 500 else None
    if kind in (Kind.ENGINE_WORKER_FAILED, Kind.ENGINE_FATAL, Kind.ENGINE_DEAD, Kind.WORKER_EXCEPTION,
                Kind.SCHEDULER_DUMP, Kind.WORKER_DIED, Kind.CHILD_FAILED):
        return Seen.RELAY
    if kind == Kind.SIGNAL_RECEIVED:
        return Seen.SHUTDOWN
    if kind == Kind.SHUTDOWN:
        return None if event.attrs.get("subject_pid") is not None else Seen.SHUTDOWN
    if kind == Kind.EXIT:
        code = event.attrs.get("exit_code")
        if event.attrs.get("subject_pid") is None and code == 0:
            return Seen.EXITED
    return None


def subjects(event: Event, table: ProcessTable) -> list[tuple[ProcessInfo | None, Event]]:
    """(process, event as about it) for each process a line says died or was
    killed: an executor's "worker died", a launcher's record or summary of a child, a
    forced kill.  The event is the line's own, or one derived per process from a summary
    (its time the failure's)."""
    out = []
    if event.kind == Kind.LAUNCHER_SUMMARY:
        seen: set[int] = set()
        for failure in [event.attrs.get("root_cause") or {}] + list(event.attrs.get("failures") or []):
            pid = failure.get("pid")
            if not isinstance(pid, int) or pid in seen:
                continue
            seen.add(pid)
            info = table.by_pid(pid)
            rank = info.rank if info and info.rank is not None else failure.get("rank")
            derived = replace(event, kind=Kind.CHILD_FAILED, time=failure.get("failed_at") or event.time,
                              attrs=freeze({"exit_code": failure.get("exit_code"), "subject_pid": pid,
                                            "subject_rank": rank, "from_summary": event.where}))
            out.append((info, derived))
        return out
    if event.kind in (Kind.WORKER_DIED, Kind.CHILD_FAILED, Kind.EXIT) or \
            (event.kind == Kind.SHUTDOWN and event.attrs.get("subject_pid") is not None):
        pid = event.attrs.get("subject_pid")
        info = table.by_pid(pid) if pid is not None else table.by_name(event.attrs.get("subject_process"))
        rank = event.attrs.get("subject_rank")
        if rank is None and pid is None and event.kind == Kind.CHILD_FAILED:
            rank = event.attrs.get("local_rank")   # the child's command line gave its --local_rank
        if info is None and isinstance(rank, int):
            info = table.by_rank(rank)
        if info is None and pid is None and rank is None and not event.attrs.get("subject_process"):
            return []
        if event.kind == Kind.EXIT and event.attrs.get("exit_code") in (None, 0):
            return []
        out.append((info, event))
    return out


def _lone_announcement(observations: list[Observation]) -> list[Observation]:
    """A worker's announcement of its own failure ("WorkerProc hit an exception.", "Error
    executing method init_device", "Scheduler hit an exception") with nothing else of its
    own in view - its traceback cut away - is its own failure, cause unknown.  Beside its
    traceback (or anything else it says) it adds nothing."""
    if not observations or any(o.event.kind != Kind.WORKER_EXCEPTION for o in observations
                               if o.seen != Seen.EXITED and o.reported_by is None):
        return observations
    return [replace(o, seen=Seen.OWN_ERROR) if o.event.kind == Kind.WORKER_EXCEPTION else o for o in observations]


def tell(events, table: ProcessTable) -> Stories:
    """Every process's story, from the events of the run (earlier runs left out)."""
    current = [e for e in events if not e.attrs.get("earlier_run")]
    first_timeout = first_timeout_event(current)
    nothing_else_failed = not any(e.severity >= Severity.ERROR for e in current)
    per_key: dict[str, list[Observation]] = {}
    unattributed: list[Observation] = []
    for event in current:
        info = table.info_of(event)
        seen = seen_in(event, info.role if info else event.role, first_timeout, nothing_else_failed)
        if seen is not None:
            observation = Observation(seen, event)
            if info is None:
                unattributed.append(observation)
            else:
                per_key.setdefault(info.key, []).append(observation)
        for subject, about in subjects(event, table):
            killed = Observation(Seen.KILLED, about, reported_by=info.key if info else None)
            if subject is None:
                unattributed.append(killed)        # about a process the table does not hold
            elif info is None or subject.key != info.key:
                per_key.setdefault(subject.key, []).append(killed)
    stories = []
    for info in table.processes():
        observations = _lone_announcement(per_key.get(info.key, []))      # in timeline order
        stories.append(Story(key=info.key, pid=info.pid, rank=info.rank, role=info.role, name=info.name,
                             host=info.host, pids=tuple(sorted(info.pids)), observations=tuple(observations)))
    return Stories(tuple(stories), tuple(unattributed), line_up_dumps(current))
