"""Every rank's Flight Recorder dump lined up: which collective the ranks wait in, and who
never came.

A hang shows in the logs only from the waiting side: peers time out in collective N, and
the rank they waited for prints nothing (docs/reasoning.md, "A hang").  Log order can
then only guess who is late.  A Flight Recorder dump is each rank's own record of the
collectives it enqueued, numbered per process group (``collective_seq_id``): lined up
by (group, sequence number), the dumps say which rank never entered collective N -
first-hand, in the late rank's own record - and where each rank's program called it.

Settled here, once, from the events the reader made (``FLIGHT_RECORDER`` and
``COLLECTIVE_RECORD``): the stories carry the result (forensics/story.py), and the hang
rule names its culprit from it (rules/failure.py).  ``line_up`` is a pure function of
the dumps; ``from_events`` only gathers them.

Per group and rank:

- *done*: the highest collective it completed (state ``completed``; for a backend
  whose records carry no events, such as gloo, ``retired``; pg_status's
  ``last_completed_collective`` for any);
- *waiting in*: the lowest collective it entered and did not complete;
- *entered*: the highest collective it recorded or enqueued (pg_status).

Collective N of a group is the furthest one some rank waits in.  Every other member is
then: waiting in N too; **stuck in an earlier** collective M < N (it waits in M, which
the others completed); one that **never entered** N (nothing open, its records end
before N) - possibly because it waits in another group's collective; or, at N itself, a
rank whose op or shapes differ from the others' (**mismatch**).  When no member is
behind, a rank whose record of N is still "scheduled" while NCCL records states
(**not started**: its GPU never reached the collective) is the late one.  A member without a dump
in the inputs is listed as such: no dump cannot say what it did.  The culprit is the
rank behind that waits in nothing itself (a rank stuck in another group waits for that
group's culprit); when every rank behind waits somewhere (a cycle), or there are
several, the dumps leave it undecided.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Sequence

from forensics import knowledge
from forensics.events import Event, Frame, Kind


@functools.lru_cache(maxsize=None)
def _catalogue() -> dict:
    return knowledge.load("flightrec")


# --- what the line-up reads ---------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One collective record of one rank's dump."""

    rank: int
    source: str
    group: str
    group_desc: str | None
    pg_id: int | None
    seq: int
    op: str
    profiling_name: str
    backend: str | None
    state: str | None
    retired: bool | None
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    frames: tuple[Frame, ...] = ()
    stack_top: str | None = None
    created: datetime | None = None

    @property
    def label(self) -> str:
        return f"{self.op} #{self.seq}"


@dataclass(frozen=True)
class Group:
    name: str
    desc: str | None
    ranks: tuple[int, ...] | None


@dataclass(frozen=True)
class RankDump:
    """One rank's dump: its groups as it knows them, its progress, its records."""

    rank: int
    source: str
    groups: tuple[Group, ...]
    completed: Mapping[int, int]          # pg_id -> last_completed_collective (pg_status)
    enqueued: Mapping[int, int]           # pg_id -> last_enqueued_collective
    entries: tuple[Entry, ...]
    with_frames: bool = False


# --- what it finds --------------------------------------------------------------------------

@dataclass(frozen=True)
class Behind:
    """A member of the group that did not come to collective N."""

    rank: int
    how: str                      # never-entered | stuck-earlier | not-started | mismatch | no-dump
    source: str | None            # its dump
    last: Entry | None = None     # never-entered: its last record in the group; stuck-earlier: the one it waits in
    elsewhere: Entry | None = None  # never-entered: a collective of another group it waits in
    detail: str | None = None     # mismatch: what differs
    last_done: bool = False       # never-entered: its last record is of a collective it completed

    @property
    def waits_elsewhere(self) -> bool:
        """It waits for other ranks in another group's collective: the culprit is who it
        waits for.  (A rank stuck in a collective its peers completed waits for no one.)"""
        return self.elsewhere is not None

    def doing(self) -> str:
        """What its own dump says it was doing, in words."""
        if self.how == "no-dump":
            return f"rank {self.rank} has no dump in the inputs"
        if self.how == "mismatch":
            return self.detail or "its collective differs from its peers'"
        if self.how == "not-started" and self.last is not None:
            return (f"its record of {self.last.label} is still {_state_words(self.last)} (the work queued before it "
                    "on its GPU stream had not finished)"
                    + (f", called at {self.last.stack_top}" if self.last.stack_top else "") + f" [{self.source}]")
        if self.how == "stuck-earlier" and self.last is not None:
            return (f"it is still in {self.last.label} ({_state_words(self.last)}), which its peers completed"
                    + (f", called at {self.last.stack_top}" if self.last.stack_top else "") + f" [{self.source}]")
        words = "its dump has no record in that group" if self.last is None else (
            f"its last record there is {self.last.label} ({'completed' if self.last_done else _state_words(self.last)})"
            + (f", called at {self.last.stack_top}" if self.last.stack_top else ""))
        if self.elsewhere is not None:
            e = self.elsewhere
            words += (f"; it waits in {e.label} of process group {_group_words(e.group, e.group_desc)}"
                      + (f", called at {e.stack_top}" if e.stack_top else ""))
        return words + f" [{self.source}]"


@dataclass(frozen=True)
class GroupHang:
    """Collective N of one group: who waits in it, and who is behind."""

    group: str
    desc: str | None
    members: tuple[int, ...]
    members_from: str             # pg_config | records (the dumps' own records only)
    seq: int
    op: str
    waiting: tuple[int, ...]
    behind: tuple[Behind, ...]
    called_at: str | None         # where a waiting rank's program called it
    frames: tuple[Frame, ...]
    since: datetime | None        # when the first waiting rank enqueued it
    sources: tuple[str, ...]      # the dumps of the waiting ranks

    @property
    def group_words(self) -> str:
        return _group_words(self.group, self.desc)

    @property
    def collective(self) -> str:
        return f"{self.op} #{self.seq} of process group {self.group_words}"


@dataclass(frozen=True)
class Lineup:
    """Every dump lined up: the hangs found and the ranks they name."""

    ranks: tuple[int, ...]                # ranks with a dump
    sources: tuple[str, ...]              # the dumps read (one per rank)
    hangs: tuple[GroupHang, ...]          # longest waiting first
    suspects: tuple[int, ...]             # the ranks named: one is the culprit, several undecided
    culprit_hang: GroupHang | None        # the hang its culprit is behind in
    notes: tuple[str, ...] = ()
    timed_out: tuple[Entry, ...] = ()     # records a watchdog retired before they completed

    @property
    def hung(self) -> bool:
        """Whether the dumps alone show a hang: a rank behind, or a collective that timed
        out.  Ranks that all wait in the same collective, none of it timed out, may only
        be in flight (a dump on demand while the job runs)."""
        return bool(self.suspects) or bool(self.timed_out)

    @property
    def culprit(self) -> Behind | None:
        if len(self.suspects) != 1 or self.culprit_hang is None:
            return None
        return next((b for b in self.culprit_hang.behind if b.rank == self.suspects[0]), None)


def _group_words(name: str, desc: str | None) -> str:
    return name + (f" ({desc})" if desc and desc != name else "")


def _state_words(entry: Entry) -> str:
    """A record's state as the line-up can vouch for it: gloo's records stay "scheduled"
    whatever happened, so that its state says nothing."""
    if _eventless(entry):
        return "retired" if entry.retired else "not retired"
    return (entry.state or "no state") + (", retired: timed out" if _timed_out(entry) else "")


# --- completion ---------------------------------------------------------------------------

def _eventless(entry: Entry) -> bool:
    return (entry.backend or "") in _catalogue()["states"]["eventless_backends"]


def _completed(entry: Entry, status_done: int | None) -> bool:
    """Whether the rank's own record says it completed the collective."""
    if entry.state == _catalogue()["states"]["completed"]:
        return True
    if status_done is not None and status_done >= entry.seq:
        return True
    # gloo records no events: retired (taken off the work list) is all it says
    return _eventless(entry) and bool(entry.retired)


@dataclass(frozen=True)
class _Progress:
    done: int
    waiting_in: Entry | None       # the lowest collective entered and not completed
    entered: int
    last: Entry | None             # its highest record in the group


def _progress(dump: RankDump, entries: list[Entry]) -> _Progress:
    pg_ids = {e.pg_id for e in entries if e.pg_id is not None}
    status_done = max((dump.completed[p] for p in pg_ids if p in dump.completed), default=None)
    status_enqueued = max((dump.enqueued[p] for p in pg_ids if p in dump.enqueued), default=None)
    done = max([e.seq for e in entries if _completed(e, status_done)] + [status_done or 0, 0])
    open_ = [e for e in entries if e.seq > done and not _completed(e, status_done)]
    waiting_in = min(open_, key=lambda e: e.seq) if open_ else None
    entered = max([e.seq for e in entries] + [status_enqueued or 0, 0])
    last = max(entries, key=lambda e: e.seq) if entries else None
    return _Progress(done, waiting_in, entered, last)


# --- the line-up ----------------------------------------------------------------------------

def _one_per_rank(dumps: Sequence[RankDump]) -> tuple[dict[int, RankDump], list[str]]:
    """The dump of each rank: the one whose newest record is newest (a dump taken later
    says more); of equal ones, the one with more still open (taken during the hang, not
    after the collectives were retired), then the one with stack frames (the pickle
    beside its JSON form)."""
    by_rank: dict[int, list[RankDump]] = {}
    for dump in dumps:
        by_rank.setdefault(dump.rank, []).append(dump)
    chosen, notes = {}, []
    for rank, several in sorted(by_rank.items()):
        def newest(d: RankDump):
            times = [e.created for e in d.entries if e.created is not None]
            still_open = sum(1 for e in d.entries if not e.retired and e.state != _catalogue()["states"]["completed"])
            return (max(times) if times else datetime.min, len(d.entries), still_open, d.with_frames, d.source)
        best = max(several, key=newest)
        chosen[rank] = best
        if len(several) > 1:
            others = ", ".join(d.source for d in several if d is not best)
            notes.append(f"rank {rank} has {len(several)} Flight Recorder dumps: {best.source} is read (the latest "
                         f"records; of equal ones, the dump taken while more was still open), not {others}")
    return chosen, notes


def _members(name: str, desc: str | None, pg_ids: set[int | None], dumps: Mapping[int, RankDump],
             recorded: set[int]) -> tuple[tuple[int, ...], str]:
    """A group's members: as pg_config lists it; for the default group whose pg_config
    entry carries no name (gloo in PyTorch 2.13 registers it before its name is set), the
    world; else the ranks that recorded it."""
    listed: set[int] = set()
    for dump in dumps.values():
        for group in dump.groups:
            if group.name == name and group.ranks is not None:
                listed.update(group.ranks)
    if listed:
        return tuple(sorted(listed | recorded)), "pg_config"
    if desc == "default_pg" or pg_ids == {0}:
        world: set[int] = set()
        for dump in dumps.values():
            for group in dump.groups:
                if not group.name and group.ranks is not None:
                    world.update(group.ranks)
        if world:
            return tuple(sorted(world | recorded | set(dumps))), "pg_config"
        return tuple(sorted(recorded | set(dumps))), "records"
    return tuple(sorted(recorded)), "records"


def _signature(entry: Entry) -> tuple:
    if entry.op in _catalogue()["sizes"]["must_match"]:
        return entry.op, entry.input_sizes, entry.output_sizes
    return (entry.op,)


def _mismatches(at_n: Mapping[int, Entry]) -> list[Behind]:
    """Ranks whose record of collective N differs (op, or shapes where they must match)
    from what a strict majority of the ranks that recorded it called."""
    if len(at_n) < 2:
        return []
    counts = Counter(_signature(e) for e in at_n.values())
    (common, n), = counts.most_common(1)
    if len(counts) == 1 or n * 2 <= len(at_n):
        return []
    majority = next(e for e in at_n.values() if _signature(e) == common)
    out = []
    for rank, e in sorted(at_n.items()):
        if _signature(e) == common:
            continue
        if e.op != majority.op:
            detail = f"its {e.label} is {e.op} where its peers called {majority.op}"
        else:
            detail = (f"its {e.label} has shapes {list(map(list, e.input_sizes))} where its peers' have "
                      f"{list(map(list, majority.input_sizes))}")
        detail += (f", called at {e.stack_top}" if e.stack_top else "") + f" [{e.source}]"
        out.append(Behind(rank, "mismatch", e.source, last=e, detail=detail))
    return out


def _not_started(waiting: Mapping[int, Entry]) -> list[Behind]:
    """Of the ranks waiting in N (nobody behind), those whose GPU never started it: with
    a backend that records events (NCCL), "started" means the rank's kernel runs and
    waits for its peers, "scheduled" that the work queued before it on the rank's stream
    has not finished - that rank is the late one.  When every rank's kernel started, the
    collective itself does not finish (the network, the library): nobody is named."""
    scheduled = {r: e for r, e in waiting.items() if not _eventless(e) and e.state == _scheduled()}
    if not scheduled:
        return []
    return [Behind(r, "not-started", e.source, last=e) for r, e in sorted(scheduled.items())]


def _scheduled() -> str:
    return _catalogue()["states"]["scheduled"]


def line_up(dumps: Sequence[RankDump]) -> Lineup:
    """Every rank's collectives lined up by (process group, sequence number): for each
    group in which some rank waits, the furthest collective waited in and the members
    behind it; the suspects are the ranks behind that wait in nothing themselves."""
    chosen, notes = _one_per_rank(dumps)
    per_group: dict[str, dict[int, list[Entry]]] = {}
    descs: dict[str, str | None] = {}
    pg_ids: dict[str, set[int | None]] = {}
    for rank, dump in chosen.items():
        for e in dump.entries:
            per_group.setdefault(e.group, {}).setdefault(rank, []).append(e)
            descs.setdefault(e.group, e.group_desc)
            pg_ids.setdefault(e.group, set()).add(e.pg_id)
    progress = {(g, r): _progress(chosen[r], entries) for g, ranks in per_group.items() for r, entries in ranks.items()}
    hangs = []
    for group, ranks in sorted(per_group.items()):
        waiting_at = {r: p.waiting_in for (g, r), p in progress.items() if g == group and p.waiting_in is not None}
        if not waiting_at:
            continue
        n = max(e.seq for e in waiting_at.values())
        members, basis = _members(group, descs[group], pg_ids[group], chosen, set(ranks))
        waiting = tuple(sorted(r for r, e in waiting_at.items() if e.seq == n))
        behind: list[Behind] = []
        for rank in members:
            p = progress.get((group, rank))
            if rank not in chosen:
                behind.append(Behind(rank, "no-dump", None))
            elif p is None or p.waiting_in is None and p.entered < n:
                elsewhere = next((q.waiting_in for (g, r), q in sorted(progress.items(), key=lambda kv: kv[0])
                                  if r == rank and g != group and q.waiting_in is not None), None)
                behind.append(Behind(rank, "never-entered", chosen[rank].source, last=p.last if p else None,
                                     elsewhere=elsewhere, last_done=p is not None and p.last is not None
                                     and p.last.seq <= p.done))
            elif p.waiting_in is not None and p.waiting_in.seq < n:
                behind.append(Behind(rank, "stuck-earlier", chosen[rank].source, last=p.waiting_in))
        at_n = {r: next(e for e in entries if e.seq == n) for r, entries in ranks.items()
                if any(e.seq == n for e in entries)}
        late = {b.rank for b in behind}
        behind += [b for b in _mismatches(at_n) if b.rank not in late]
        if not any(b.how != "no-dump" for b in behind):
            behind += _not_started({r: waiting_at[r] for r in waiting})
        waiting = tuple(r for r in waiting if r not in {b.rank for b in behind})
        first = [waiting_at[r] for r in waiting if r in waiting_at] or list(at_n.values())
        ops = Counter(e.op for e in first)
        op = ops.most_common(1)[0][0] if ops else "?"
        shown = next((e for e in first if e.op == op and e.frames), None) or next((e for e in first if e.op == op), None)
        times = [e.created for e in first if e.created is not None]
        hangs.append(GroupHang(group=group, desc=descs[group], members=members, members_from=basis, seq=n, op=op,
                               waiting=waiting, behind=tuple(behind), called_at=shown.stack_top if shown else None,
                               frames=shown.frames if shown else (), since=min(times) if times else None,
                               sources=tuple(sorted({chosen[r].source for r in waiting}))))
    hangs.sort(key=lambda h: (not any(b.how != "no-dump" for b in h.behind), h.since or datetime.max, h.group))
    suspects, culprit_hang = _suspects(hangs)
    timed_out = tuple(e for r in sorted(chosen) for e in chosen[r].entries if _timed_out(e))
    return Lineup(ranks=tuple(sorted(chosen)), sources=tuple(chosen[r].source for r in sorted(chosen)),
                  hangs=tuple(hangs), suspects=suspects, culprit_hang=culprit_hang, notes=tuple(notes),
                  timed_out=timed_out)


def _timed_out(entry: Entry) -> bool:
    """NCCL retires a record that never completed when its watchdog times it out."""
    return not _eventless(entry) and bool(entry.retired) and entry.state != _catalogue()["states"]["completed"]


def _suspects(hangs: list[GroupHang]) -> tuple[tuple[int, ...], GroupHang | None]:
    dumped = [(h, b) for h in hangs for b in h.behind if b.how != "no-dump"]
    if not dumped:
        undumped = sorted({b.rank for h in hangs for b in h.behind})
        return tuple(undumped), (hangs[0] if hangs and undumped else None)
    waiting_somewhere = {r for h in hangs for r in h.waiting} | {b.rank for _h, b in dumped if b.waits_elsewhere}
    root = [(h, b) for h, b in dumped if b.rank not in waiting_somewhere]
    named = root or dumped
    ranks = tuple(sorted({b.rank for _h, b in named}))
    return ranks, named[0][0]


# --- from the events ------------------------------------------------------------------------

def _entry(event: Event) -> Entry | None:
    a = event.attrs
    seq, group = a.get("seq"), a.get("group")
    # p2p ops are numbered apart (p2p_seq_id) and pair two ranks, not the group: not lined up here
    if event.rank is None or a.get("is_p2p") or not isinstance(seq, int) or not isinstance(group, str):
        return None
    return Entry(rank=event.rank, source=event.source, group=group, group_desc=a.get("group_desc"),
                 pg_id=a.get("pg_id"), seq=seq, op=a.get("op") or "?", profiling_name=a.get("profiling_name") or "?",
                 backend=a.get("backend"), state=a.get("state"), retired=a.get("retired"),
                 input_sizes=tuple(a.get("input_sizes") or ()), output_sizes=tuple(a.get("output_sizes") or ()),
                 frames=tuple(a.get("frames") or ()), stack_top=a.get("stack_top"), created=event.time)


def _status(rows, key: str) -> dict[int, int]:
    out = {}
    for row in rows or ():
        pg, value = row.get("pg_id"), row.get(key)
        if isinstance(value, int) and value >= 0 and isinstance(pg, str) and pg.isdigit():
            out[int(pg)] = value
    return out


def from_events(events: Iterable[Event]) -> Lineup | None:
    """The line-up of the Flight Recorder dumps among ``events`` (None: there are none)."""
    dumps: dict[str, dict] = {}
    entries: dict[str, list[Entry]] = {}
    for event in events:
        if event.kind == Kind.FLIGHT_RECORDER and event.rank is not None:
            dumps[event.source] = {"event": event}
        elif event.kind == Kind.COLLECTIVE_RECORD:
            entry = _entry(event)
            if entry is not None:
                entries.setdefault(event.source, []).append(entry)
    if not dumps:
        return None
    read = []
    for source, found in dumps.items():
        event = found["event"]
        groups = tuple(Group(g.get("name") or "", g.get("desc"), tuple(g["ranks"]) if g.get("ranks") is not None else None)
                       for g in event.attrs.get("groups") or ())
        mine = tuple(entries.get(source, ()))
        read.append(RankDump(rank=event.rank, source=source, groups=groups,
                             completed=_status(event.attrs.get("status"), "last_completed"),
                             enqueued=_status(event.attrs.get("status"), "last_enqueued"), entries=mine,
                             with_frames=any(e.frames for e in mine)))
    return line_up(read)
