"""Timeline: who is who (pid -> rank/role), then every event on one ordered table.

Ranks come from process prefixes (``Worker_TP2`` -> 2), from identity lines
(``rank=N ... pid=P``) and from names in messages about other processes
(``VllmWorker-1 died``).  Order is by time, then by position in the source; lines of one
stream are never reordered, even when its clock jumps backwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from forensics import knowledge
from forensics.events import Event, Kind, as_int

ROLE_PRIORITY = {"worker": 0, "engine-core": 1, "api-server": 2}


@dataclass
class ProcessInfo:
    pid: int
    name: str | None = None
    role: str | None = None
    rank: int | None = None
    rank_basis: str | None = None
    sources: set[str] = field(default_factory=set)


class ProcessTable:
    """pid -> process facts, learned from every event before any rule runs."""

    def __init__(self) -> None:
        self.by_pid: dict[int, ProcessInfo] = {}

    @classmethod
    def learn(cls, events: list[Event]) -> "ProcessTable":
        table = cls()
        # Strongest first: names in prefixes, then TP-rank assignments, then plain ranks.
        for event in events:
            if event.pid is not None and event.process:
                table._from_name(event.pid, event.process, event.source)
        for message_id in ("rank-assignment", "worker-init", "dist-init"):
            for event in events:
                if event.attrs.get("message_id") != message_id:
                    continue
                pid = as_int(event.attrs.get("subject_pid")) or event.pid
                rank = as_int(event.attrs.get("rank"))
                if pid is not None and rank is not None:
                    info = table._info(pid)
                    info.sources.add(event.source)
                    if info.rank is None:
                        info.rank = rank
                        info.rank_basis = f"{event.where}: {message_id}"
                    info.role = info.role or "worker"
        for event in events:
            subject = event.attrs.get("subject_process")
            pid = as_int(event.attrs.get("subject_pid"))
            if subject and pid is not None:
                table._from_name(pid, subject, event.source)
        return table

    def _info(self, pid: int) -> ProcessInfo:
        return self.by_pid.setdefault(pid, ProcessInfo(pid))

    def _from_name(self, pid: int, name: str, source: str) -> None:
        info = self._info(pid)
        info.sources.add(source)
        role, rank = knowledge.role_and_rank(name)
        # Keep the most specific name seen ("Worker_TP1" over the early "Worker").
        if info.name is None or (rank is not None and knowledge.role_and_rank(info.name)[1] is None):
            info.name = name
        if role and not info.role:
            info.role = role
        if rank is not None and (info.rank is None or info.rank_basis == "name" and info.rank != rank):
            info.rank = rank
            info.rank_basis = "name"

    def rank_of(self, pid: int | None) -> int | None:
        info = self.by_pid.get(pid) if pid is not None else None
        return info.rank if info else None

    def role_of(self, pid: int | None) -> str | None:
        info = self.by_pid.get(pid) if pid is not None else None
        return info.role if info else None

    def pid_of_rank(self, rank: int | None) -> int | None:
        pids = [p.pid for p in self.by_pid.values() if p.rank == rank and p.role in (None, "worker")]
        return pids[0] if len(pids) == 1 else None

    def pid_of_name(self, name: str | None) -> int | None:
        """A worker named in a message (``VllmWorker-1``) -> its pid, via its rank."""
        if not name:
            return None
        for info in self.by_pid.values():
            if info.name == name:
                return info.pid
        role, rank = knowledge.role_and_rank(name)
        if role == "worker" and rank is not None:
            return self.pid_of_rank(rank)
        return None

    def processes(self) -> list[ProcessInfo]:
        return sorted(self.by_pid.values(),
                      key=lambda p: (ROLE_PRIORITY.get(p.role or "", 3),
                                     p.rank if p.rank is not None else 1 << 30, p.pid))

    def resolve(self, event: Event) -> Event:
        """The event with its rank and role filled in from what the table knows."""
        rank, role = event.rank, event.role
        if event.pid is not None:
            info = self.by_pid.get(event.pid)
            if info:
                rank = rank if rank is not None else info.rank
                role = role or info.role
        if rank is None and "glog_rank" in event.attrs:
            rank = event.attrs["glog_rank"]
        if rank == event.rank and role == event.role:
            return event
        return replace(event, rank=rank, role=role)


def order(events_by_source: list[list[Event]]) -> list[Event]:
    """All events in one order: time, then source position; per-stream order kept."""
    keyed = []
    for file_index, events in enumerate(events_by_source):
        running: dict = {}          # per stream: one process's lines in one file
        for event in events:
            stream = event.pid if event.pid is not None else event.process
            last = running.get(stream)
            if event.time is not None and (last is None or event.time > last):
                running[stream] = last = event.time
            # A file with no stamps at all (exit codes, an HTTP reply, dmesg uptimes) was
            # written after the fact: it goes after everything that has a time.
            keyed.append(((last or datetime.max), file_index, event.seq, event))
    keyed.sort(key=lambda k: k[:3])
    return [k[3] for k in keyed]


COLUMNS = ["time", "rank", "pid", "role", "process", "kind", "severity", "message", "source",
           "line", "time_inferred"]


def dataframe(events: list[Event]):
    """The events as a pandas DataFrame, one row each, in timeline order."""
    import pandas as pd        # imported here: the CLI's report paths never need it

    rows = [{
        "time": e.time, "rank": e.rank, "pid": e.pid, "role": e.role, "process": e.process,
        "kind": e.kind, "severity": e.severity.name, "message": e.message, "source": e.source,
        "line": e.line, "time_inferred": e.time_inferred,
    } for e in events]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["rank"] = frame["rank"].astype("Int64")
    frame["pid"] = frame["pid"].astype("Int64")
    frame["line"] = frame["line"].astype("Int64")
    frame["time"] = pd.to_datetime(frame["time"])
    return frame


def failure_kinds() -> set[str]:
    return {Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.XID, Kind.OOM, Kind.FATAL_SIGNAL,
            Kind.SANITIZER, Kind.CUDA_GDB, Kind.CORE_DUMP}

