"""Timeline: who is who, then every event on one ordered list.

Who is who: a process is known by its pid (from a vLLM or Ray prefix, a journald
stamp, an NCCL line) and/or by its rank (from a process name ``Worker_TP2``, torch's
``[rank2]:``, SGLang's ``TP2``, an identity line ``world_size=4 rank=2 ...``, a
per-rank file such as ``worker_TP2.log`` or torchrun's ``attempt_0/2/stderr.log``).
Identities seen under a pid and under a rank are joined when the rank is unique.

Order: by time, then by position in the source; lines of one stream are never
reordered, even when its clock jumps backwards.  A file holding several server starts
(restarts appended to one log) keeps its earlier runs on the timeline, marked, out of
the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from forensics import knowledge
from forensics.columns import FRAME_COLUMNS, EventColumns
from forensics.events import Event, Kind, freeze, number_out_of_range

# vLLM V0 (LLMEngine, "Initializing an LLM engine (v0.x)"): the engine process prints its
# records without a process prefix and runs the driver worker, rank 0, in-process.
V0_ENGINE = "rank:0"

# The process that wrote a file whose lines name no process (a console pasted as it was)
STREAM = "stream:"
MAIN_PROCESS = "main process"
# A process that announces its failure ("Scheduler hit an exception:") goes on with the
# failure in the lines right below, which may carry no prefix of their own
ANNOUNCING = frozenset({Kind.WORKER_EXCEPTION, Kind.ENGINE_FATAL})
CONTINUED = frozenset({Kind.CUDA_ERROR, Kind.OOM, Kind.EXCEPTION, Kind.FATAL_SIGNAL, Kind.DEVICE_ASSERT})

# Lines no program prints about itself: the kernel's log, facts about the machine, a core
# file's contents
NOT_A_PROGRAMS_LINE = frozenset({Kind.XID, Kind.ENVIRONMENT, Kind.CORE_DUMP})
# a debugger's lines are about the program it debugs, not about itself
DEBUGGER_LINES = ("gdb-", "cuda-gdb-")

ROLE_PRIORITY = {"worker": 0, "engine-core": 1, "api-server": 2, "launcher": 3}

# Per-rank files, as launchers and users name them: worker_TP2.log, rank2.log, rank-2,
# rank_02.txt, torchrun's <log_dir>/<run>/attempt_0/<local_rank>/stderr.log.
_RANK_FILE = (
    re.compile(r"(?:^|[/_.-])(?:worker_)?(?:tp|rank)[_-]?(?P<rank>\d{1,4})(?=[/_.-]|$)", re.I),
    re.compile(r"attempt_\d+/(?P<rank>\d{1,4})/(?:stdout|stderr|error)\.(?:log|json)$"),
)


@dataclass
class ProcessInfo:
    key: str
    pid: int | None = None
    pids: set[int] = field(default_factory=set)
    host: str | None = None
    name: str | None = None
    role: str | None = None
    rank: int | None = None
    rank_basis: str | None = None
    sources: set[str] = field(default_factory=set)


def _debuggers_line(event: Event) -> bool:
    """A debugger's line about the program it debugs (cuda-gdb's stops, gdb's "Program
    terminated with signal ...")."""
    return event.kind == Kind.CUDA_GDB or str(event.attrs.get("message_id") or "").startswith(DEBUGGER_LINES)


def _process_of_frames(event: Event) -> str | None:
    """The process a raw traceback's (or crash dump's) frames can only have run in."""
    if event.pid is not None or event.rank is not None:
        return None
    frames = [f for exc in event.chain for f in exc.frames]
    if not frames and isinstance(event.attrs.get("current_thread"), dict):
        frames = list(event.attrs["current_thread"].get("frames") or ())
    return knowledge.process_of_frames(frames) if frames else None


def _programs_line(event: Event, inferior: bool = False) -> bool:
    """A line a program prints about itself (not the kernel's or facts about the machine;
    a debugger's about its inferior only when ``inferior``: the one program in view)."""
    if _debuggers_line(event):
        return inferior
    return event.kind not in NOT_A_PROGRAMS_LINE


def _vllm_v0(event: Event) -> bool:
    """A line that says the engine is vLLM's V0 LLMEngine: its config line without
    "V1", or a version before 0.8 (V1 became the default engine in 0.8)."""
    message_id = event.attrs.get("message_id")
    if message_id == "engine-config" and event.attrs.get("engine") in (None, "V0"):
        return True
    if any(marker in event.message for marker in knowledge.vllm_v0_markers()):
        return True
    if message_id in ("api-server-version", "logo-version"):
        match = re.match(r"0\.(\d+)\.", str(event.attrs.get("vllm_version") or ""))
        return bool(match) and int(match.group(1)) < 8
    return False


def _vllm_v1(event: Event) -> bool:
    """A line only vLLM's V1 engine prints: its config line, its process names."""
    if event.attrs.get("message_id") == "engine-config" and str(event.attrs.get("engine") or "").startswith("V1"):
        return True
    return bool(event.process) and event.process.startswith(("EngineCore", "VllmWorker rank=", "Worker_", "VllmWorker TP"))


def pci_bus(text: str) -> int | None:
    """A GPU's PCI address as one number, whichever way it is printed: the kernel's
    "PCI:0000:bd:00", nvidia-smi's "00000000:BD:00.0", NCCL's busId "bd000"."""
    value = str(text).removeprefix("PCI:").strip().lower()
    try:
        if ":" not in value:
            return int(value, 16)
        parts = value.replace(".", ":").split(":")      # domain, bus, device[, function]
        if len(parts) == 3:
            parts.append("0")
        if len(parts) != 4:
            return None
        domain, bus, device, function = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return (domain << 20) | (bus << 12) | (device << 4) | function


def rank_from_path(path: str) -> int | None:
    for pattern in _RANK_FILE:
        match = pattern.search(path)
        if match:
            rank = knowledge.claimed_int(match.group("rank"))
            # a file name is no line to set aside: a rank no process can have is no hint
            return rank if number_out_of_range(rank, "rank") is None else None
    return None


class ProcessTable:
    """Identities learned from every event before any rule runs."""

    def __init__(self) -> None:
        self.by_key: dict[str, ProcessInfo] = {}
        self._pid_key: dict[tuple[str | None, int], str] = {}
        self._file_rank: dict[str, int] = {}
        self._v0_sources: set[str] = set()
        self._shared_pids: set[tuple[str | None, int]] = set()
        self._died: dict[int, datetime | None] = {}     # id(info) -> when a launcher reported it dead
        self._bus_rank: dict[tuple[str | None, int], int] = {}  # (host, PCI bus id) -> rank, from NCCL's init
        # files no line of which says who wrote it (a paste of one program's console):
        # one process wrote them, "the main process" of that file
        self._stream_sources: set[str] = set()
        self._inferior = False          # the one input is a debugger's transcript
        self._follows: dict[tuple[str, int], str] = {}   # (source, line) of a report's unprefixed lines -> its writer
        self._sole: str | None = None   # the one process the inputs name, when they name one (see _settle_sole_process)
        self._unprefixed: set[str] = set()  # files no line of which names its process
        self._relaying_sources: set[str] = set()  # consoles that prefix relayed processes' lines (Ray's driver)

    # -- learning ------------------------------------------------------------------

    @classmethod
    def learn(cls, events: list[Event], traffic=()) -> "ProcessTable":
        """Identities from every event, and from the writers of ordinary traffic (a rank
        that printed only INFO lines is still a process of the run)."""
        table = cls()
        writers = [Event(kind=Kind.LOG, message="", source=t.source, line=t.first_line, pid=t.pid, process=t.process,
                         rank=t.rank, host=t.host) for t in traffic if t.pid is not None or t.process or t.rank is not None]
        table._learn_files(list(events) + writers)
        for event in list(events) + writers:
            table._learn(event)
        table._learn_continuations(events)
        table._settle_v0_engine(events)
        table._join_ranks()
        table._join_same_failure(events)
        table._settle_sole_process(events)
        return table

    def _settle_sole_process(self, events: list[Event]) -> None:
        """Inputs that name one process only, by lines of its own (a program's console
        beside compute-sanitizer's log of it, which gives its pid): the program's
        unsigned lines are that process's - there is no other one they could be.  Not a
        process known only from another's report of it (a launcher's record of its
        child): the unsigned lines are then the reporter's.  The kernel's Xid line naming a
        pid counts: it is the driver saying whose GPU work that was."""
        known = self.processes()
        if len(known) == 1 and known[0].pid is not None and \
                any(e.pid in known[0].pids and (e.kind == Kind.XID or not e.attrs.get("subject_pid")) for e in events):
            self._sole = known[0].key

    def _settle_v0_engine(self, events: list[Event]) -> None:
        """The V0 engine process is rank 0 only when the run has other ranks (a TP size
        above 1 or worker processes); a single-GPU V0 engine has no rank."""
        info = self.by_key.get(V0_ENGINE)
        if info is None or not (info.rank_basis or "").startswith("vLLM V0"):
            return
        others = any(i is not info and i.role == "worker" for i in self.by_key.values())
        sizes = [e.attrs["config"].get("tensor_parallel_size") for e in events
                 if isinstance(e.attrs.get("config"), dict)] + [e.attrs.get("world_size") for e in events]
        if others or any(isinstance(s, int) and s > 1 for s in sizes) or \
                any(isinstance(s, str) and s.isdigit() and int(s) > 1 for s in sizes):
            return
        info.rank, info.rank_basis, info.role = None, None, "engine-core"

    def _learn_files(self, events: list[Event]) -> None:
        """A file written by one process without prefixes: its identity line (or its
        name) gives the rank of all its lines."""
        per_file: dict[str, dict] = {}
        ranks_of_pid: dict[tuple, set[int]] = {}
        v1_sources: set[str] = set()
        for event in events:
            if _vllm_v1(event):
                v1_sources.add(event.source)
            if event.pid is not None and event.rank is not None:
                ranks_of_pid.setdefault((event.host, event.pid), set()).add(event.rank)
            if _vllm_v0(event):
                self._v0_sources.add(event.source)
            facts = per_file.setdefault(event.source, {"prefixed": False, "ranks": set(), "program": False,
                                                       "debugger": False})
            if event.pid is not None or event.process or event.rank is not None:
                facts["prefixed"] = True
            if event.process and event.pid is not None and event.host:
                self._relaying_sources.add(event.source)    # "(Name pid=N, ip=A) ...": Ray relaying an actor's line
            if _programs_line(event):
                facts["program"] = True
            if _debuggers_line(event):
                facts["debugger"] = True
            if event.kind == Kind.PROCESS_IDENTITY and isinstance(event.attrs.get("rank"), int) \
                    and event.pid is None and not event.process:
                facts["ranks"].add(event.attrs["rank"])
        # one pid printing for several ranks is a parent relaying its children's output
        # (a Ray actor's prefix over SGLang's schedulers): the ranks are the processes
        self._shared_pids = {key for key, ranks in ranks_of_pid.items() if len(ranks) > 1}
        self._v0_sources -= v1_sources
        # a debugger's transcript alone (a cuda-gdb session pasted): the program it debugs
        # is the one process in view, and the transcript is its story
        self._inferior = len(per_file) == 1 and any(f["debugger"] for f in per_file.values())
        for facts in per_file.values():
            facts["program"] = facts["program"] or (self._inferior and facts["debugger"])
        self._unprefixed = {source for source, facts in per_file.items() if not facts["prefixed"]}
        for source, facts in per_file.items():
            if facts["prefixed"]:
                continue
            if len(facts["ranks"]) == 1:
                self._file_rank[source] = next(iter(facts["ranks"]))
            else:
                hinted = rank_from_path(source)
                if hinted is not None and not facts["ranks"]:
                    self._file_rank[source] = hinted
                elif source not in self._v0_sources and facts["program"]:
                    self._stream_sources.add(source)
        if len(self._stream_sources) > 1:
            # several files whose lines name no process: one program's console and its
            # sanitizer log, or per-rank files not named by rank - which, the lines
            # cannot tell
            self._stream_sources.clear()

    def _learn_continuations(self, events: list[Event]) -> None:
        """Failure lines without a prefix right below a process's announcement of its
        failure (SGLang's "[TP1] Scheduler hit an exception:" over the exception printed
        raw): that process went on writing its report.  Only the very next lines, and only
        after an announcement: a raw traceback below another traceback is often another
        process's (an API server printing why its engine died)."""
        per_source: dict[str, list[Event]] = {}
        for event in events:
            per_source.setdefault(event.source, []).append(event)
        for source, found in per_source.items():
            if source in self._stream_sources or source in self._file_rank:
                continue
            last_key, last_end = None, -1
            for event in sorted(found, key=lambda e: (e.line, e.seq)):
                end = event.line + max(int(event.attrs.get("lines") or 1), 1) - 1
                signed = event.pid is not None or event.process or event.rank is not None
                if signed:
                    key = self._key_of(event)
                    last_key, last_end = (key, end) if event.kind in ANNOUNCING and key else (None, -1)
                elif last_key is not None and event.kind in CONTINUED and event.line <= last_end + 1:
                    self._follows[(source, event.line)] = last_key
                    last_end = end
                elif event.kind in CONTINUED:
                    last_key = None

    def _key_of(self, event: Event) -> str | None:
        if self._v0_engine(event):
            return V0_ENGINE
        if event.pid is not None and event.rank is not None and (event.host, event.pid) in self._shared_pids:
            return f"rank:{event.rank}" + (f"@{event.host}" if event.host else "")
        if event.pid is not None:
            return self._pid_key.get((event.host, event.pid)) or self._pid_key.get((None, event.pid)) or \
                f"pid:{event.pid}" + (f"@{event.host}" if event.host else "")
        rank = event.rank if event.rank is not None else self._file_rank.get(event.source)
        if rank is None and event.process:
            rank = knowledge.role_and_rank(event.process)[1]
        if rank is not None:
            return f"rank:{rank}" + (f"@{event.host}" if event.host else "")
        if event.process:
            return f"name:{event.process}" + (f"@{event.host}" if event.host else "")
        ran_in = _process_of_frames(event)
        if ran_in is not None and not event.attrs.get("untagged_record") and \
                (event.source, event.line) not in self._follows:       # (an announcer's own report goes on)
            # a raw traceback through code only one process runs (SGLang's scheduler)
            return f"name:{ran_in}" + (f"@{event.host}" if event.host else "")
        if event.source in self._stream_sources and _programs_line(event, self._inferior):
            return STREAM + event.source
        follows = self._follows.get((event.source, event.line))
        if follows is None and event.attrs.get("untagged_record"):
            # a program that tags its children's records and not its main process's (SGLang):
            # an untagged record is the main process's
            return STREAM + event.source
        if follows is None and self._sole is not None and event.source in self._unprefixed and \
                _programs_line(event, self._inferior):
            return self._sole           # (a file with prefixes: its unprefixed lines are another writer's)
        if follows is None and event.source in self._relaying_sources and event.attrs.get("level") and \
                self._sole is None:
            # a console that prefixes the lines of the processes it relays (Ray's driver over
            # its actors, each named with pid and node): a logger's record without a prefix
            # is the console owner's own - its main process.  (Not vLLM's own prefixes: its
            # engine core may print bare beside its prefixed workers.  Raw lines without a
            # record header stay unsigned: a child's stderr comes through bare.)
            return STREAM + event.source
        return follows

    def _info(self, key: str) -> ProcessInfo:
        info = self.by_key.get(key)
        if info is None:
            info = self.by_key[key] = ProcessInfo(key)
        return info

    def _v0_engine(self, event: Event) -> bool:
        return event.pid is None and not event.process and event.source in self._v0_sources \
            and bool(event.attrs.get("logged_at")) and event.rank in (None, 0)

    def _learn(self, event: Event) -> None:
        self._learn_subjects(event)
        key = self._key_of(event)
        if key is None:
            return
        info = self._info(key)
        info.sources.add(event.source)
        if key.startswith(STREAM):
            info.name = info.name or MAIN_PROCESS
            if event.kind == Kind.CUDA_GDB and event.attrs.get("thread_name") and info.name == MAIN_PROCESS:
                # the debugged program, by the name its threads carry (cuda-gdb's
                # 'Thread 1 "decoding_exampl" received signal ...': the comm, 15 characters)
                info.name = event.attrs["thread_name"]
            if event.kind == Kind.PROCESS_IDENTITY and event.attrs.get("program") and info.name == MAIN_PROCESS:
                info.name = event.attrs["program"]      # the command the paste starts with names it
        if (event.host, event.pid) in self._shared_pids and event.rank is not None:
            event = replace(event, pid=None)          # the relaying parent's pid is not this rank's
        if key == V0_ENGINE and self._v0_engine(event):
            info.name, info.role = info.name or "LLMEngine", info.role or "worker"
            if info.rank is None:
                info.rank, info.rank_basis = 0, ("vLLM V0: records without a process prefix come from the engine "
                                                 "process, whose driver worker is rank 0")
        if event.pid is not None:
            info.pid = info.pid or event.pid
            info.pids.add(event.pid)
            self._pid_key.setdefault((event.host, event.pid), key)
            self._pid_key.setdefault((None, event.pid), key)
            info.host = info.host or event.host
        if event.process:
            self._from_name(info, event.process)
        elif key.startswith("name:") and info.name is None:
            self._from_name(info, key[len("name:"):].split("@", 1)[0])      # named by its code (frame_process)
        if event.rank is not None and info.rank is None:
            info.rank, info.rank_basis = event.rank, "prefix"
            info.role = info.role or "worker"
        if event.source in self._file_rank and info.rank is None:
            info.rank, info.rank_basis = self._file_rank[event.source], f"{event.source}: one rank's own log"
            info.role = info.role or "worker"
        if event.kind == Kind.PROCESS_IDENTITY and event.attrs.get("bus_id") and isinstance(event.attrs.get("rank"), int):
            bus = pci_bus(event.attrs["bus_id"])
            if bus is not None:
                self._bus_rank[(event.host, bus)] = event.attrs["rank"]
                self._bus_rank.setdefault((None, bus), event.attrs["rank"])
        if event.kind == Kind.PROCESS_IDENTITY:
            rank = event.attrs.get("rank")
            # a line stating the process's rank beats a rank read from its name (the TP
            # rank of Worker_PP1_TP4 is not its global rank)
            if isinstance(rank, int) and (info.rank is None or info.rank_basis == "name"):
                info.rank, info.rank_basis = rank, f"{event.where}: {event.attrs.get('message_id')}"
            if isinstance(rank, int) or not event.attrs.get("program"):
                info.role = info.role or "worker"

    def _learn_subjects(self, event: Event) -> None:
        """Processes a line is about, written by another (a launcher's record of a child,
        the executor's "force killing ... pid N")."""
        subject, subject_pid = event.attrs.get("subject_process"), event.attrs.get("subject_pid")
        if subject and isinstance(subject_pid, int):
            self._from_name(self._subject(subject_pid), subject.split("::")[-1])
        if event.kind == Kind.LAUNCHER_SUMMARY:
            for failure in [event.attrs.get("root_cause") or {}] + list(event.attrs.get("failures") or []):
                if isinstance(failure.get("pid"), int):
                    # an entry with a pid is a child, with its rank when the entry kept it
                    # (a paste can cut the entry's "rank :" line)
                    other = self._subject(failure["pid"])
                    if isinstance(failure.get("rank"), int) and (
                            other.rank is None or "local rank" in (other.rank_basis or "")):
                        other.rank, other.rank_basis = failure["rank"], f"{event.where}: launcher summary"
                    other.role = other.role or "worker"
        if event.kind == Kind.PROCESS_IDENTITY and isinstance(subject_pid, int) and \
                isinstance(event.attrs.get("local_rank"), int):
            other = self._subject(subject_pid)          # a launcher's "process N spawned ... --local_rank=R"
            if other.rank is None:
                other.rank, other.rank_basis = event.attrs["local_rank"], f"{event.where}: local rank at spawn"
            other.role = other.role or "worker"
        if event.kind in (Kind.SHUTDOWN, Kind.WORKER_DIED, Kind.EXIT) and isinstance(subject_pid, int):
            self._subject(subject_pid)                  # "Sending process N closing signal SIGTERM"
        if event.kind in (Kind.WORKER_DIED, Kind.CHILD_FAILED) and subject and subject_pid is None:
            # "Worker proc VllmWorker-3 died unexpectedly": a process known by its name (and
            # the rank in it) even when none of its own lines is in the inputs
            name = subject.split("::")[-1]
            rank = knowledge.role_and_rank(name)[1]
            known = self.by_name(name)
            self._from_name(known or self._info(f"rank:{rank}" if rank is not None else f"name:{name}"), name)
        subject_rank = event.attrs.get("subject_rank")
        if event.kind == Kind.CHILD_FAILED and subject_rank is None and subject_pid is None and \
                isinstance(event.attrs.get("local_rank"), int):
            # a launcher quoting the command of the child that failed, by its --local_rank
            # (DeepSpeed, torch.distributed.launch): that rank of the node, known only so
            other = self._info(f"rank:{event.attrs['local_rank']}")
            other.rank, other.role = event.attrs["local_rank"], other.role or "worker"
            other.rank_basis = other.rank_basis or f"{event.where}: local rank of a failed child's command"
            self._died.setdefault(id(other), event.time)
        if event.kind in (Kind.WORKER_DIED, Kind.CHILD_FAILED) and isinstance(subject_rank, int) and subject_pid is None:
            other = self._info(f"rank:{subject_rank}")      # "MPI_ABORT was invoked on rank 2", "Shard 1 crashed"
            other.rank, other.role = subject_rank, other.role or "worker"
            other.rank_basis = other.rank_basis or f"{event.where}: reported dead"
            self._died.setdefault(id(other), event.time)
        if event.kind == Kind.CHILD_FAILED and isinstance(subject_pid, int):
            other = self._subject(subject_pid)
            if other.rank is None and isinstance(subject_rank, int):
                other.rank, other.rank_basis = subject_rank, f"{event.where}: the launcher's rank of a failed child"
            if other.rank is None and isinstance(event.attrs.get("local_rank"), int):
                other.rank, other.rank_basis = event.attrs["local_rank"], f"{event.where}: local rank of a failed child"
            other.role = other.role or "worker"

    def _subject(self, pid: int) -> ProcessInfo:
        key = self._pid_key.get((None, pid)) or f"pid:{pid}"
        self._pid_key.setdefault((None, pid), key)
        info = self._info(key)
        info.pid = info.pid or pid
        info.pids.add(pid)
        return info

    def _from_name(self, info: ProcessInfo, name: str) -> None:
        role, rank = knowledge.role_and_rank(name)
        # keep the most specific name seen ("Worker_TP1" over the early "Worker")
        if info.name is None or (rank is not None and knowledge.role_and_rank(info.name)[1] is None):
            info.name = name
        if role and (not info.role or (rank is not None and role != info.role)):
            info.role = role        # a name with a rank ("Worker_TP1") beats a generic one ("MainProcess")
        if rank is not None and (info.rank is None or info.rank_basis == "name" and info.rank != rank):
            info.rank, info.rank_basis = rank, "name"

    def _join_ranks(self) -> None:
        """rank:N identities (a per-rank file, [rankN]: lines) joined to the one pid
        identity with that rank."""
        by_rank: dict[tuple[int, str | None], list[ProcessInfo]] = {}
        for info in self.by_key.values():
            if info.pid is not None and info.rank is not None and info.role in (None, "worker"):
                by_rank.setdefault((info.rank, info.host), []).append(info)
                if info.host is not None:
                    by_rank.setdefault((info.rank, None), []).append(info)
        for key, info in list(self.by_key.items()):
            if info.pid is not None or info.rank is None:
                continue
            targets = by_rank.get((info.rank, info.host)) or (by_rank.get((info.rank, None)) if info.host is None else None)
            if targets and len({t.key for t in targets}) == 1:
                target = targets[0]
                target.sources |= info.sources
                target.name = target.name or info.name
                self.by_key[key] = target            # the rank key now resolves to the pid identity

    def _join_same_failure(self, events: list[Event]) -> None:
        """One process seen under two identities that share nothing: a vLLM V0 worker's
        Python traceback carries the executor's prefix (a pid, no rank) while c10's C++
        lines from the same process carry only torch's ``[rankN]:``.  When exactly one
        pid-only worker and one rank-only identity report the same CUDA error within
        two seconds, they are one process."""
        first: dict[int, tuple[ProcessInfo, int, datetime | None]] = {}
        for event in events:
            err = event.attrs.get("cuda_error")
            if event.kind != Kind.CUDA_ERROR or err is None:
                continue
            key = self._key_of(event)
            info = self.by_key.get(key) if key else None
            if info is not None:
                first.setdefault(id(info), (info, err.code, event.time))
        pid_only = [v for v in first.values() if v[0].pid is not None and v[0].rank is None
                    and v[0].role in (None, "worker")]
        rank_only = [v for v in first.values() if v[0].pid is None and v[0].rank is not None]
        if len(pid_only) != 1:
            return
        proc, code, when = pid_only[0]
        if len(rank_only) == 1:
            ranked, other_code, other_when = rank_only[0]
            if code != other_code or when is None or other_when is None or \
                    abs((when - other_when).total_seconds()) > 2:
                return
            basis = f"reported the same error as rank {ranked.rank}'s lines, at the same time"
        else:
            # the one failing process and the one rank a launcher reported dead after it
            dead = [info for info in {id(i): i for i in self.by_key.values()}.values()
                    if id(info) in self._died and info.pid is None and info.rank is not None]
            if len(dead) != 1 or rank_only:
                return
            ranked, died = dead[0], self._died[id(dead[0])]
            if died is not None and when is not None and (died - when).total_seconds() < -2:
                return
            basis = f"the only failing process, and rank {ranked.rank} is the only rank reported dead after it"
        proc.rank, proc.rank_basis = ranked.rank, basis
        proc.role = proc.role or "worker"
        proc.sources |= ranked.sources
        for key, info in list(self.by_key.items()):
            if info is ranked:
                self.by_key[key] = proc

    # -- reading ---------------------------------------------------------------------

    def info_of(self, event: Event) -> ProcessInfo | None:
        key = self._key_of(event)
        return self.by_key.get(key) if key else None

    def by_pid(self, pid: int | None) -> ProcessInfo | None:
        if pid is None:
            return None
        key = self._pid_key.get((None, pid)) or next((k for (h, p), k in self._pid_key.items() if p == pid), None)
        return self.by_key.get(key or f"pid:{pid}")

    def rank_of(self, pid: int | None) -> int | None:
        info = self.by_pid(pid)
        return info.rank if info else None

    def by_rank(self, rank: int | None) -> ProcessInfo | None:
        """The one worker with this rank, if exactly one."""
        found = {i.key: i for i in self.by_key.values() if i.rank == rank and i.role in (None, "worker")}
        return next(iter(found.values())) if len(found) == 1 else None

    def pid_of_rank(self, rank: int | None) -> int | None:
        info = self.by_rank(rank)
        return info.pid if info else None

    def by_name(self, name: str | None) -> ProcessInfo | None:
        """A worker named in a message (``VllmWorker-1``) -> its identity."""
        if not name:
            return None
        name = name.split("::")[-1]
        for info in self.processes():
            if info.name == name:
                return info
        role, rank = knowledge.role_and_rank(name)
        if role == "worker" and rank is not None:
            return self.by_rank(rank)
        return None

    def processes(self) -> list[ProcessInfo]:
        unique = {id(i): i for i in self.by_key.values()}.values()
        return sorted(unique, key=lambda p: (ROLE_PRIORITY.get(p.role or "", 4),
                                              p.rank if p.rank is not None else 1 << 30, p.pid or 0, p.key))

    def resolve(self, event: Event) -> Event:
        """The event with its rank, role and pid filled in from what the table knows."""
        if event.kind == Kind.XID and event.rank is None and event.pid is None and event.attrs.get("pci"):
            # a kernel line about a GPU names its PCI address: NCCL's init said which rank drives it
            bus = pci_bus(event.attrs["pci"])
            rank = self._bus_rank.get((event.host, bus), self._bus_rank.get((None, bus)))
            if rank is not None:
                info = self.by_rank(rank)
                return replace(event, rank=rank, pid=info.pid if info else None, role="worker",
                               attrs=freeze({**event.attrs, "identity_from": "the GPU's PCI address (NCCL busId)"}))
        info = self.info_of(event)
        if info is None:
            return event
        rank = event.rank if event.rank is not None else info.rank
        role = event.role or info.role
        pid = event.pid if event.pid is not None else info.pid
        if rank == event.rank and role == event.role and pid == event.pid:
            return event
        return replace(event, rank=rank, role=role, pid=pid)


def adopt_crash_dumps(events: list[Event], table: ProcessTable) -> list[Event]:
    """A crash dump printed without any prefix (faulthandler's "Fatal Python error:
    Segmentation fault", PyTorch's segfault banner) takes the identity of the one
    process a launcher or an executor reports killed by that signal.  With several such
    processes (or none) it stays unsigned."""
    died: dict[str, set[int]] = {}
    for event in events:
        pids_codes = []
        if event.kind in (Kind.CHILD_FAILED, Kind.WORKER_DIED, Kind.EXIT):
            pids_codes.append((event.attrs.get("subject_pid"), event.attrs.get("exit_code")))
        elif event.kind == Kind.LAUNCHER_SUMMARY:
            for failure in [event.attrs.get("root_cause") or {}] + list(event.attrs.get("failures") or []):
                pids_codes.append((failure.get("pid"), failure.get("exit_code")))
        for pid, code in pids_codes:
            if isinstance(pid, int) and isinstance(code, int) and (code < 0 or 128 < code < 160):
                died.setdefault(knowledge.signal_name(-code if code < 0 else code - 128), set()).add(pid)
    events = _adopt_for_the_only_failed_child(events, table)
    if not died:
        return events
    out = []
    for event in events:
        signal = event.attrs.get("signal_name")
        if event.kind == Kind.FATAL_SIGNAL and event.pid is None and event.rank is None and not event.process \
                and len(died.get(signal, ())) == 1:
            pid = next(iter(died[signal]))
            info = table.by_pid(pid)
            event = replace(event, pid=pid, rank=info.rank if info else None, role=info.role if info else None,
                            attrs=freeze({**event.attrs, "identity_from": f"the only process killed by {signal}"}))
        out.append(event)
    return out


_OWN = (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM, Kind.EXCEPTION, Kind.FATAL_SIGNAL)


def _adopt_for_the_only_failed_child(events: list[Event], table: ProcessTable) -> list[Event]:
    """A console where no failure line says who wrote it (workers printing without
    prefixes) and a launcher reports exactly one child failed: the failures are that
    child's."""
    # a launcher's own traceback (ChildFailedError) is the launcher's, not its child's
    own = [e for e in events if e.kind in _OWN and not knowledge.launchers_traceback(e)]
    if not own or any(e.pid is not None or e.rank is not None or e.process for e in own):
        return events
    failed = {e.attrs.get("subject_pid") for e in events if e.kind == Kind.CHILD_FAILED
              and isinstance(e.attrs.get("subject_pid"), int) and e.attrs.get("exit_code") not in (None, 0)}
    if len(failed) != 1:
        return events
    pid = failed.pop()
    info = table.by_pid(pid)
    rank = info.rank if info else None
    note = f"the only child its launcher reported failed (pid {pid})"
    adopted = {id(e) for e in own}
    return [replace(e, pid=pid, rank=rank, role=info.role if info else "worker",
                    attrs=freeze({**e.attrs, "identity_from": note})) if id(e) in adopted else e for e in events]


def place_uptimes(events_by_source: list[list[Event]]) -> list[list[Event]]:
    """Kernel lines stamped in seconds since boot (raw ``dmesg``) placed on the wall
    clock, when the inputs give the boot time: the clock `forensics collect` records
    (boot time = date - /proc/uptime), or the same kernel line seen in both ``dmesg``
    and ``dmesg -T`` (the offset between the two stamps).  Without either they stay
    untimed (and go last)."""
    flat = [e for events in events_by_source for e in events]
    boots = {e.attrs["facts"]["boot_time"] for e in flat
             if e.kind == Kind.ENVIRONMENT and isinstance(e.attrs.get("facts"), dict) and e.attrs["facts"].get("boot_time")}
    boot, basis = None, ""
    if len(boots) == 1:
        try:
            boot = datetime.fromisoformat(boots.pop())
            basis = "boot time from forensics collect's clock"
        except ValueError:
            boot = None
    if boot is None:
        walled = {e.message: e.time for e in flat if e.kind == Kind.XID and e.time is not None and "uptime" not in e.attrs}
        offsets = sorted((walled[e.message] - timedelta(seconds=float(e.attrs["uptime"])))
                         for e in flat if e.time is None and "uptime" in e.attrs and e.message in walled)
        if offsets:
            boot, basis = offsets[len(offsets) // 2], "boot time from the same kernel line in dmesg and dmesg -T"
    if boot is None:
        return events_by_source
    if boot.tzinfo is not None:
        # the host's own wall clock, as its logs and dmesg -T print it
        boot = boot.replace(tzinfo=None)
    return [[replace(e, time=boot + timedelta(seconds=float(e.attrs["uptime"])), time_inferred=True,
                     attrs=freeze({**e.attrs, "time_from": basis}))
             if e.time is None and isinstance(e.attrs.get("uptime"), (int, float)) else e for e in events]
            for events in events_by_source]


def unrelated_runs(events: list[Event], table: "ProcessTable") -> list[str]:
    """A warning when the inputs seem to hold several unrelated runs: the same rank
    held by different processes whose lines come from different folders (two crash
    bundles given together).  Their verdicts would merge; each run should be analysed
    on its own."""
    folders: dict[int, dict[int, str]] = {}
    for info in table.processes():
        if info.rank is None or info.role not in (None, "worker") or info.pid is None:
            continue
        where = next((e.source for e in events if e.pid in info.pids), None)
        if where is None:
            continue
        folder = where.split("!", 1)[0].rsplit("/", 1)[0] if "/" in where else ""
        folders.setdefault(info.rank, {})[info.pid] = folder
    clashes = {rank: pids for rank, pids in folders.items() if len(set(pids.values())) > 1}
    if not clashes:
        return []
    rank, pids = min(clashes.items())
    shown = ", ".join(f"pid {pid} in {folder or '.'}/" for pid, folder in sorted(pids.items()))
    return [f"these inputs seem to hold {len(set(pids.values()))} unrelated runs (rank {rank} is {shown}): "
            "their findings are merged here; analyse each run's folder on its own"]


def order(events_by_source: list[list[Event]]) -> list[Event]:
    """All events in one order: time, then source position; per-stream order kept."""
    keyed = []
    for file_index, events in enumerate(events_by_source):
        running: dict = {}          # per stream: one process's lines in one file
        for event in events:
            stream = (event.pid, event.process, event.rank)
            last = running.get(stream)
            if event.time is not None and (last is None or event.time > last):
                running[stream] = last = event.time
            # A file with no stamps at all (an HTTP reply, dmesg uptimes) was written after
            # the fact: it goes after everything that has a time.
            keyed.append(((last or datetime.max), file_index, event.line, event.seq, event))
    keyed.sort(key=lambda k: k[:4])
    return [k[4] for k in keyed]


def set_aside_earlier_runs(events: list[Event]) -> tuple[list[Event], list[str]]:
    """A file with several server starts (restarts appended to one log): the events of
    the earlier runs are marked ``earlier_run`` (kept on the timeline, out of the
    verdict); pids of earlier runs may have been reused."""
    notes = []
    starts: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        if event.attrs.get("message_id") in ("engine-config", "api-server-version", "vllm-args-namespace",
                                              "sglang-server-args") and \
                not event.message.startswith("Dumping"):
            starts.setdefault(event.source, []).append(i)
    cut_by_source = {}
    for source, idx in starts.items():
        runs = _distinct_runs(events, idx)
        if len(runs) >= 2:
            # by line, not seq: a record is emitted when it ends, so the earlier run's last
            # record can be emitted after the next start's first line
            cut_by_source[source] = events[runs[-1]].line
            notes.append(f"{source}: {len(runs)} server starts in this file (restarts appended to one log); the "
                         f"verdict uses the last run, from line {events[runs[-1]].line}; the earlier events stay on "
                         "the timeline only (pids may have been reused)")
    if not cut_by_source:
        return events, notes
    out = [replace(e, attrs=freeze({**e.attrs, "earlier_run": True}))
           if e.source in cut_by_source and e.line < cut_by_source[e.source] else e for e in events]
    return out, notes


def _distinct_runs(events: list[Event], idx: list[int]) -> list[int]:
    """Start events that open a new run: the same start repeated by several processes
    of one run (version and config lines of one start) count once."""
    runs: list[int] = []
    for i in idx:
        if runs and events[runs[-1]].attrs.get("message_id") != events[i].attrs.get("message_id"):
            continue
        runs.append(i)
    return runs


def failure_time(events: list[Event], pid: int | None, kinds) -> datetime | None:
    for event in events:
        if event.pid == pid and event.kind in kinds:
            return event.time
    return None


COLUMNS = FRAME_COLUMNS


def dataframe(events: list[Event]):
    """The events as a pandas DataFrame, one row each, in timeline order (sub-second
    times kept), built from their columns (forensics/columns.py)."""
    return EventColumns.from_events(events).frame()
