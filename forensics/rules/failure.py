"""Who failed first, and how every other process went down."""

from __future__ import annotations

from dataclasses import dataclass

from forensics import knowledge
from forensics.events import RELAY, Event, Kind, Severity, clip
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.rules.errors import reported
from forensics.story import ANNOUNCEMENTS, FIRST_HAND, NOTICED, Seen, Story, crash_signal, first_timeout_event, signal_number
from forensics.verdict import FailureKind, FirstFailure, Hang, RankVerdict, Status, rank_list, ranks_phrase, who

_WEIGHT = {Kind.XID: 0, Kind.CORE_DUMP: 0, Kind.SANITIZER: 0, Kind.CUDA_GDB: 0, Kind.DEVICE_ASSERT: 1,
           Kind.CUDA_ERROR: 1, Kind.OOM: 2, Kind.FATAL_SIGNAL: 3, Kind.WORKER_DIED: 4, Kind.CHILD_FAILED: 4,
           Kind.EXCEPTION: 5}


def origin_story(stories, origin) -> Story | None:
    """The story of the process the origin names: by pid, by rank, or - for a process
    with neither (the main process of a paste) - the one whose device fault is the
    origin's evidence."""
    if origin is None:
        return None
    cited = {ref.source for ref in origin.evidence}
    for story in stories:
        if origin.pid is not None:
            if story.has(origin.pid):
                return story
        elif origin.rank is not None:
            if story.rank == origin.rank and story.role in (None, "worker"):
                return story
        elif any(o.event.where in cited for o in story.all(Seen.DEVICE_FAULT)):
            return story
    return None


def _own_failures(evidence: Evidence) -> list[Event]:
    """Every first-hand failure of the run (the stories' device faults and own errors,
    signed or not), in timeline order; with none, a GPU fault no process owns."""
    stories = evidence.stories
    found = [o.event for s in stories.stories for o in s.all(*FIRST_HAND)]
    found += [o.event for o in stories.unattributed if o.seen in FIRST_HAND]
    return sorted(found, key=lambda e: e.seq) or _gpu_fault_alone(evidence)


def _gpu_fault_alone(evidence: Evidence) -> list[Event]:
    """A kernel log alone (or beside logs that show nothing failing): a GPU that fell off
    the bus or asks for a reset is the failure, whoever used it."""
    gpu = [e for e in evidence.of_kind(Kind.XID) if not e.attrs.get("earlier_run")
           and knowledge.xid_catalogue().get(e.attrs.get("xid"), {}).get("lean") in ("hardware", "driver")]
    return gpu[:1]


def _death(observation) -> bool:
    """Whether a line about a process says it died on its own: a crash signal, a SIGKILL
    from outside (the OOM killer), a non-zero exit code (a child that raised: its own
    traceback tells more when it is in the inputs), a worker reported dead.  SIGTERM is
    the launcher stopping the others, no death of its own."""
    event = observation.event
    if event.kind == Kind.WORKER_DIED:
        return True
    code = event.attrs.get("exit_code")
    if not isinstance(code, int) or code == 0:
        return False
    return signal_number(code) not in knowledge.stop_signals()     # data/signals.toml: SIGINT, SIGTERM




def _deaths(evidence: Evidence) -> list[tuple[Event, int | None, int | None, str]]:
    """(event, pid, rank, words) for processes a relay reports dead on their own: one per
    process (a launcher summary first, its times are the failures' own)."""
    out = []
    stories = evidence.stories
    for s in stories.stories:
        killed = [o for o in s.all(Seen.KILLED) if _death(o)]
        killed.sort(key=lambda o: not o.event.attrs.get("from_summary"))
        if killed:
            e = killed[0].event
            name = e.attrs.get("subject_process") or s.name or (f"pid {s.pid}" if s.pid else None) \
                or (f"rank {s.rank}" if s.rank is not None else "a worker")
            out.append((e, s.pid if s.pid is not None else e.attrs.get("subject_pid"),
                        s.rank if s.rank is not None else e.attrs.get("subject_rank"),
                        death_words(name.split("::")[-1], e.attrs.get("exit_code"))))
    for o in stories.unattributed:
        if o.seen == Seen.KILLED and _death(o):
            e = o.event
            name = e.attrs.get("subject_process") or "a worker"
            out.append((e, e.attrs.get("subject_pid"), e.attrs.get("subject_rank"),
                        death_words(name.split("::")[-1], e.attrs.get("exit_code"))))
    return out


def death_words(name: str | None, code: int | None) -> str:
    if isinstance(code, int) and code < 0:
        return f"{name} killed by {knowledge.signal_name(code)}"
    if isinstance(code, int) and code > 128:
        return f"{name} killed by {knowledge.signal_name(code - 128)} (exit code {code})"
    return f"{name} died unexpectedly" + (f" (exit code {code})" if code is not None else "")


class CollectiveHang(Rule):
    """A hang, not a crash: peers timed out in a collective (NCCL watchdog
    ``WorkNCCL(SeqNum=N, OpType=...)``, gloo ``Timed out waiting Nms``) and no process
    shows a fault of its own.  The ranks that report the timeout were waiting; the rank
    that never reports it (or is behind in sequence numbers) is the one that did not
    join, and is named, with what its stack dump says it was doing.  When every rank
    timed out in the same collective the logs cannot tell who is late, and the verdict
    says so.  Flight Recorder dumps, when the inputs hold them, decide instead: lined up
    by process group and sequence number (forensics/collectives.py), they name the rank
    that never entered the collective the others wait in, from its own record."""

    name = "collective-hang"
    reads = ("environment", "error")
    writes = ("hang",)

    def predicate(self, evidence: Evidence, verdict: VerdictView) -> bool:  # noqa: D102
        timeouts = hang_timeouts(evidence)
        return (bool(timeouts) or _flight_hangs(evidence)) and not _own_failures(evidence) and \
            not [d for d in _deaths(evidence) if not _timeout_death(d[0], _first_timeout(evidence), bool(timeouts))]

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        if _flight_hangs(evidence):
            self._flight(evidence, verdict)
            return
        timeouts = hang_timeouts(evidence)
        waited: dict[int, tuple[int, str]] = {}
        for e in timeouts:
            if e.rank is not None:
                seq = e.attrs.get("seq")
                prev = waited.get(e.rank)
                if prev is None or (isinstance(seq, int) and seq > prev[0]):
                    waited[e.rank] = (seq if isinstance(seq, int) else -1, e.attrs.get("op") or "a collective")
        ranks = expected_ranks(evidence, verdict.environment) | set(waited)
        seq, op = max(waited.values()) if waited else (None, None)
        behind = sorted(r for r, (s, _) in waited.items() if seq is not None and 0 <= s < seq)
        silent = sorted(ranks - set(waited))
        suspects = tuple(silent or behind)
        doing = None
        if len(suspects) == 1:
            doing = stalled_at(evidence, suspects[0])
        verdict.hang = Hang(collective=op, seq=seq if seq is not None and seq >= 0 else None,
                            waited=tuple(sorted(waited)), suspects=suspects, culprit_doing=doing)
        verdict.explain(f"Hang: {ranks_phrase(waited)} timed out waiting in "
                        f"{op or 'a collective'}; suspected late rank(s): {', '.join(map(str, suspects)) or 'unknown'}"
                        + (f"; it was {doing}" if doing else "") + ".")

    def _flight(self, evidence: Evidence, verdict: VerdictView) -> None:
        """The hang as every rank's Flight Recorder dump shows it (forensics/collectives.py):
        its own record says which rank never entered the collective the others wait in,
        evidence stronger than which rank's log is silent."""
        lineup = evidence.stories.collectives
        hang = lineup.culprit_hang or lineup.hangs[0]
        culprit = lineup.culprit
        sources = sorted(set(hang.sources) | ({culprit.source} if culprit is not None and culprit.source else set()))
        # every rank that waits, in this collective or in another group's (for the statuses)
        waits = tuple(sorted({(r, h.collective) for h in lineup.hangs for r in h.waiting}))
        verdict.hang = Hang(collective=hang.op, seq=hang.seq, waited=hang.waiting, suspects=lineup.suspects,
                            culprit_doing=culprit.doing() if culprit else None, basis="flight-recorder",
                            group=hang.group_words, culprit_how=culprit.how if culprit else None,
                            called_at=hang.called_at, evidence=tuple(sources), waits=waits)
        verdict.explain(f"Hang (Flight Recorder dumps of ranks {', '.join(map(str, lineup.ranks))}): "
                        f"{ranks_phrase(hang.waiting)} wait in {hang.collective}; suspected late rank(s): "
                        f"{', '.join(map(str, lineup.suspects)) or 'unknown'}"
                        + (f" - {culprit.doing()}" if culprit else "") + ".")


_HOW = {"never-entered": "never entered", "stuck-earlier": "was stuck before", "mismatch": "called something else at",
        "not-started": "never started", "no-dump": "left no dump of"}


def _flight_hangs(evidence: Evidence) -> bool:
    """Whether the Flight Recorder dumps show a hang: ranks wait in a collective and one
    is behind or it timed out - or the logs say collectives timed out (ranks that all wait
    in one collective may otherwise just be in flight when the dump was taken)."""
    lineup = evidence.stories.collectives
    return lineup is not None and bool(lineup.hangs) and (lineup.hung or bool(hang_timeouts(evidence)))


def hang_timeouts(evidence: Evidence) -> list[Event]:
    """The collective timeouts that say the run hung: every error-level timeout (a
    watchdog's), and a notice-level one ("no shared memory broadcast block found in 60
    seconds") only when its process kept printing it - one notice is a slow step (a
    long warm-up), a hang keeps printing.  "A dump signal from rank N" says N timed
    out, not this one."""
    timeouts = [e for e in evidence.of_kind(Kind.COLLECTIVE_TIMEOUT) if not e.attrs.get("earlier_run")
                and e.attrs.get("from_rank") is None]
    notices: dict = {}
    for e in timeouts:
        if e.severity < Severity.ERROR:
            info = evidence.processes.info_of(e)
            notices[info.key if info else e.source] = notices.get(info.key if info else e.source, 0) + 1
    return [e for e in timeouts if e.severity >= Severity.ERROR or notices.get(
        (info.key if (info := evidence.processes.info_of(e)) else e.source), 0) >= 2]


def _first_timeout(evidence: Evidence):
    times = [e.time for e in evidence.of_kind(Kind.COLLECTIVE_TIMEOUT) if e.time is not None]
    return min(times) if times else None


def _first_timeout_event(evidence: Evidence) -> Event | None:
    return first_timeout_event(evidence.of_kind(Kind.COLLECTIVE_TIMEOUT))


def _timeout_death(event: Event, first_timeout=None, timeouts_seen: bool = False) -> bool:
    """A worker that aborted (SIGABRT: the watchdog takes the process down after a
    timeout), was stopped (SIGTERM) by its launcher, or was reported dead after the
    collectives had already timed out; or one that exited with an error code while
    collectives timed out (the timeout it raised): part of a hang, not a cause."""
    if first_timeout is not None and event.time is not None and event.time >= first_timeout:
        return True
    code = event.attrs.get("exit_code")
    if timeouts_seen and isinstance(code, int) and 0 < code < 128:
        return True
    return isinstance(code, int) and code in (-6, -15, 134, 143)


def expected_ranks(evidence: Evidence, environment) -> set[int]:
    """The ranks the run should have: the world/TP size printed, the launcher's list,
    and every rank seen."""
    ranks = {p.rank for p in evidence.processes.processes() if p.role in (None, "worker") and p.rank is not None}
    size = environment.get("world_size") or environment.get("tensor_parallel_size")
    if isinstance(size, int) and 1 < size <= 4096:
        ranks |= set(range(size))
    return ranks | stopped_ranks(evidence, ranks)


def stopped_ranks(evidence: Evidence, known: set[int] = frozenset()) -> set[int]:
    """Ranks a launcher shows going down with the job: those its summary lists, and
    the ranks of a node whose agent stopped the other workers after one failed (torchrun
    "Sending process N closing signal", DeepSpeed "Killing subprocess N",
    torch.multiprocessing "Terminating process N")."""
    table = evidence.processes
    ranks: set[int] = set()
    offset = None           # global rank of the node's local rank 0, when a summary says both
    summaries = evidence.of_kind(Kind.LAUNCHER_SUMMARY)
    for event in summaries:
        for failure in [event.attrs.get("root_cause") or {}] + list(event.attrs.get("failures") or []):
            if isinstance(failure.get("rank"), int):
                ranks.add(failure["rank"])
                if isinstance(failure.get("local_rank"), int):
                    offset = failure["rank"] - failure["local_rank"]
    failed = [e for e in evidence.of_kind(Kind.CHILD_FAILED) if isinstance(e.attrs.get("local_rank"), int)]
    failed_local = {e.attrs["local_rank"] for e in failed}
    # torch.multiprocessing.spawn says which process index (its rank) raised
    failed_local |= {e.rank for e in evidence.events if e.attrs.get("quoted_by") == "torch-spawn"
                     and e.rank is not None}
    failed_pids = {e.attrs.get("subject_pid") for e in failed}
    signalled = {e.attrs["subject_pid"] for e in evidence.of_kind(Kind.SHUTDOWN)
                 if e.attrs.get("subject_pid") is not None} - failed_pids
    if not failed_local or not signalled or len(summaries) > 1:
        return ranks
    local_of = {pid: table.rank_of(pid) for pid in signalled}
    if None not in local_of.values():        # every stopped pid's rank is known
        return ranks | set(local_of.values()) | {(offset or 0) + r for r in failed_local}
    else:
        count = len(signalled - {p for p, r in local_of.items() if r in failed_local}) + len(failed_local)
        if max(failed_local) >= count or (offset is None and any(r >= count for r in ranks | set(known))):
            return ranks            # another node's ranks, with no offset to place them
        local = set(range(count))
    return ranks | {(offset or 0) + r for r in local}


def stalled_at(evidence: Evidence, rank: int) -> str | None:
    """What a stack dump of that rank shows it doing: its innermost own frame."""
    for event in evidence.of_kind(Kind.STACK_DUMP, Kind.FATAL_SIGNAL):
        if event.rank != rank and not (event.rank is None and len({e.rank for e in evidence.events
                                                                     if e.source == event.source}) <= 1
                                           and _file_rank(evidence, event) == rank):
            continue
        threads = event.attrs.get("threads") or []
        current = event.attrs.get("current_thread") or (threads[0] if threads else None)
        frames = current.get("frames") if current else ()
        if frames:
            top = frames[0] if event.attrs.get("tool") == "faulthandler" else frames[0]
            return f"blocked in {top.function} ({top.file}:{top.line})"
    return None


def _file_rank(evidence: Evidence, event: Event) -> int | None:
    info = evidence.processes.info_of(event)
    return info.rank if info else None


@dataclass(frozen=True)
class Candidate:
    event: Event
    pid: int | None
    rank: int | None
    what: str
    key: str | None = None          # the story it comes from (None: a line no process signed)
    name: str | None = None


def _candidates(evidence: Evidence) -> list[Candidate]:
    """Every first-hand failure of every story, and every death a relay reports.  A
    process that noticed another's failure before it failed itself (a peer closed the
    connection, then it raised) is no candidate: its failure followed another's."""
    stories = evidence.stories
    found = [Candidate(o.event, story.pid, story.rank, describe(o.event), story.key, story.name)
             for story in stories.stories if story.noticed_before_failing is None
             for o in story.all(*FIRST_HAND)]
    found += [Candidate(o.event, o.event.pid, o.event.rank, describe(o.event)) for o in stories.unattributed
              if o.seen in FIRST_HAND]
    if not found and not any(story.own_failure for story in stories.stories):
        found = [Candidate(e, e.pid, e.rank, describe(e)) for e in _gpu_fault_alone(evidence)]
    deaths = []
    for e, pid, rank, words in _deaths(evidence):
        dead = next((s for s in stories.stories if s.has(pid) or
                     (pid is None and rank is not None and s.rank == rank and s.role in (None, "worker"))), None)
        if dead is not None and not crash_signal(e.attrs.get("exit_code")) and any(
                o.seen in NOTICED and o.event.kind not in ANNOUNCEMENTS for o in dead.observations):
            continue            # it exited after noticing another's failure: a consequence
        if dead is not None and dead.own_failure is not None and not crash_signal(e.attrs.get("exit_code")):
            continue            # how its own failure ended (it raised, then exited 1)
        deaths.append(Candidate(e, pid, rank, words, dead.key if dead else None, dead.name if dead else None))
    return found + deaths


class FirstFailureRule(Rule):
    """Decides which rank failed first and the kind of failure.  The origin, when known,
    wins; a hang's late rank, when the hang rule found one.  Otherwise the earliest
    failure of a process's *own* (CUDA error, device assert, OOM, fatal signal, an
    exception of its own, a worker reported dead by a signal) - never a rank that merely
    noticed a failure (peer closed the connection, parent exited, engine relayed a
    worker error, a collective timed out).  Equal one-second stamps are broken by the
    kind of failure, then log order, and the tie is said.  When only relays are in the
    inputs (EngineDeadError, HTTP 500, a scheduler dump), the engine died but its own
    failure is not in these inputs: that is the verdict, not "no failure".  A launcher's
    "Root Cause (first observed failure)" is only its opinion (the earliest timestamp)."""

    name = "first-failure"
    reads = ("origin", "hang", "error", "environment", "surfaces")
    writes = ("first_failure", "failure_kind")

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        launcher = _launcher_opinion(evidence)
        env = verdict.environment
        own = _own_failures(evidence)
        story = origin_story(evidence.stories.stories, verdict.origin)
        if verdict.origin is not None and (verdict.origin.rank is not None or verdict.origin.pid or story is not None):
            o = verdict.origin
            what = f"{o.fault} in {o.kernel}" if o.kernel else o.fault
            time = next((e.time for e in own if (o.pid is not None and e.pid == o.pid) or
                         (o.pid is None and e.rank == o.rank)), None)
            verdict.first_failure = FirstFailure(o.rank, o.pid, time, f"origin evidence: {what}", what,
                                                 _differs(launcher, o.rank), key=story.key if story else None,
                                                 name=story.name if story else None)
            verdict.failure_kind = _kind(evidence, verdict, own[0] if own else None)
            verdict.explain(f"{who(o.rank, o.pid, story.name if story else None).capitalize()} failed first: "
                            "its own kernel faulted (origin evidence).")
            return
        hang = verdict.hang
        if hang is not None:
            self._hang(evidence, verdict, hang, launcher)
            return
        candidates = _candidates(evidence)
        if not candidates:
            # relays by kind, and what the stories read as relays besides (a launcher's own traceback)
            told = {id(o.event) for s in evidence.stories.stories for o in s.observations if o.seen == Seen.RELAY}
            told |= {id(o.event) for o in evidence.stories.unattributed if o.seen == Seen.RELAY}
            relays = [e for e in evidence.events if id(e) in told or e.kind in RELAY and not e.attrs.get("earlier_run")
                      and not (e.kind == Kind.HTTP and (e.attrs.get("status") or 0) < 500)]
            # the driver tearing processes' GPU work down after an earlier fault (Xid 45):
            # a fault happened, its own line is not in these inputs
            relays = relays or [e for e in evidence.of_kind(Kind.XID) if not e.attrs.get("earlier_run") and
                                knowledge.xid_catalogue().get(e.attrs.get("xid"), {}).get("lean") == "collateral"]
            timeouts = hang_timeouts(evidence)
            # a notice that a step is slow, printed once, is no failure (hang_timeouts)
            relays = [e for e in relays if e.kind != Kind.COLLECTIVE_TIMEOUT or e in timeouts
                      or e.severity >= Severity.ERROR]
            if relays and not timeouts and _after_a_requested_shutdown(evidence, relays):
                verdict.explain("The relays follow a requested shutdown (the server stopping its own processes); "
                                "no process shows a failure.")
                return
            if relays or timeouts:
                self._relay_only(evidence, verdict, relays or timeouts, launcher)
                return
            verdict.explain("No process shows a failure, and no relay of one.")
            return
        key = lambda c: (c.event.time is None, c.event.time or 0, _WEIGHT.get(c.event.kind, 6), c.event.seq)  # noqa: E731
        earliest = min(candidates, key=key)
        unsigned_same_time = None
        kind_event = None
        if earliest.rank is None and earliest.pid is None:
            # a line no rank signed (a native library's stderr, the engine core relaying a
            # worker's native error): when a rank's own failure follows it closely, that
            # is the one to name
            # (a death another process reports names the rank only for an unsigned crash
            # dump - how that death happened; beside an unsigned error it is how one of the
            # failing processes ended, not which one failed first)
            signed = [c for c in candidates if c.rank is not None and (
                earliest.event.kind == Kind.FATAL_SIGNAL or c.event.kind not in (Kind.WORKER_DIED, Kind.CHILD_FAILED))]
            if signed:
                best = min(signed, key=key)
                if _close_after(earliest.event, best.event):
                    # (both stamped: an unstamped line right above a rank's own report of the
                    # same failure, in the same file, is that rank's)
                    if earliest.event.time is not None and best.event.time is not None and \
                            _same_time(earliest.event, best.event) and earliest.event.kind == best.event.kind and \
                            earliest.pid != best.pid and \
                            earliest.event.source == best.event.source and earliest.event.line < best.event.line:
                        unsigned_same_time = earliest
                    if earliest.event.kind == Kind.FATAL_SIGNAL and best.event.kind in (Kind.WORKER_DIED,
                                                                                        Kind.CHILD_FAILED):
                        # the unsigned crash dump is how the dead worker died
                        kind_event = earliest.event
                    earliest = best
        event = earliest.event
        tied = sorted({c.rank for c in candidates if _same_time(c.event, event)
                       and c.rank is not None and c.rank != earliest.rank})
        others = sorted({c.rank for c in candidates if c.rank is not None and c.rank != earliest.rank} - set(tied))
        basis = f"earliest failure of its own ({earliest.what}) at {event.where}"
        rank = earliest.rank
        undecided = False       # the logs cannot tell which process failed first: name none
        if tied:
            basis += (f"; ranks {rank_list(tied)} reported the same within the same second, so rank "
                      f"{rank} is first only in log order - not evidence that it faulted first")
            if _same_failure(candidates, event):
                rank, undecided = None, True
                basis = (f"ranks {rank_list({earliest.rank} | set(tied))} reported the same "
                         f"failure ({earliest.what}) within the same second: the logs cannot tell which failed first")
        peers = sorted({c.pid for c in candidates if c is not earliest and c.rank is None and c.pid is not None
                        and c.pid != earliest.pid and c.event.kind == event.kind and _same_time(c.event, event)})
        if peers and rank is not None:
            rank, undecided = None, True
            basis = (f"processes {', '.join(f'pid {p}' for p in peers)} (rank unknown) reported the same failure "
                     f"({earliest.what}) in the same second as rank {earliest.rank}: the logs cannot tell which "
                     "failed first")
        if unsigned_same_time is not None and rank is not None:
            rank, undecided = None, True
            basis = (f"a process that signed no rank reported the same failure ({unsigned_same_time.what}) at "
                     f"{unsigned_same_time.event.where}, in the same second as rank {earliest.rank}'s report at "
                     f"{event.where}: the logs cannot tell which failed first")
        rivals = _rivals(candidates, earliest)
        if rivals and not undecided:
            # another process's own failure in the same second, as strong as this one (two
            # host reports, or two pieces of device evidence): which came first is unknown
            rank, undecided = None, True
            basis = (f"{earliest.what} at {event.where} and {rivals[0].what} at {rivals[0].event.where}"
                     + (f" (and {len(rivals) - 1} more)" if len(rivals) > 1 else "")
                     + " were reported within the same second by different processes: the logs cannot tell which "
                     "failed first")
        if others:
            basis += f"; {ranks_phrase(others)} failed later"
        if not tied and not others and rank is not None:
            basis += "; no other rank failed on its own"
        missing = missing_ranks(evidence, env)
        if missing and rank is not None:
            basis += (f"; the logs of {ranks_phrase(missing)} are missing, so one of them may have "
                      "failed earlier - this cannot be ruled out")
        # a process without a rank (a single-process run) is still named by its pid;
        # only a tie leaves both unnamed
        verdict.first_failure = FirstFailure(rank, None if undecided else earliest.pid, event.time, basis,
                                             earliest.what, _differs(launcher, rank),
                                             key=None if undecided else earliest.key,
                                             name=None if undecided else earliest.name)
        verdict.failure_kind = _kind(evidence, verdict, kind_event or event)
        verdict.explain(f"Rank {rank} (pid {earliest.pid}) failed first: {basis}.")

    def _hang(self, evidence: Evidence, verdict: VerdictView, hang: Hang, launcher) -> None:
        if hang.basis == "flight-recorder":
            self._flight_hang(evidence, verdict, hang, launcher)
            return
        timeouts = evidence.of_kind(Kind.COLLECTIVE_TIMEOUT)
        first = timeouts[0]
        nccl = any(e.attrs.get("message_id") in ("nccl-watchdog-timeout", "nccl-timeout-work") for e in timeouts)
        what_op = f"{hang.collective} SeqNum={hang.seq}" if hang.seq is not None else (hang.collective or "a collective")
        if len(hang.suspects) == 1:
            rank = hang.suspects[0]
            what = f"rank {rank} never joined {what_op}"
            basis = (f"{ranks_phrase(hang.waited)} timed out waiting in {what_op}; rank {rank} did not: it is the one that did not "
                     "join (hung or dead before it)" + (f"; it was {hang.culprit_doing}" if hang.culprit_doing else ""))
            info = evidence.processes.by_rank(rank)
            verdict.first_failure = FirstFailure(rank, info.pid if info else None, first.time, basis, what,
                                                 _differs(launcher, rank), key=info.key if info else None)
        elif len(timed_out := _timed_out_stories(evidence)) == 1 and not any(
                c.key != timed_out[0].key for c in _candidates(evidence)):
            # one process's watchdog timed out, and no other process failed or died in the
            # inputs: it is the first (and only) failure shown; the rank it waited for is not
            # in these inputs
            story = timed_out[0]
            basis = (f"{who(story.rank, story.pid, story.name)} timed out waiting in {what_op}, the only process "
                     "whose collective timed out in the inputs; which peer it waited for is not shown")
            verdict.first_failure = FirstFailure(story.rank, story.pid, first.time, basis,
                                                 f"collective timeout in {what_op}", _differs(launcher, story.rank),
                                                 key=story.key, name=story.name)
        elif not _timed_out_stories(evidence) and len(stuck := _stuck_stories(evidence)) == 1 and not any(
                c.key != stuck[0].key for c in _candidates(evidence)) and not any(
                s.key != stuck[0].key and s.all(Seen.WAITING) for s in evidence.stories.stories):
            # one process's own watchdog says it made no progress, no other process is shown
            # waiting (a timeout, a stack dump), and nothing else failed: the stall shown is
            # that process's
            story = stuck[0]
            basis = (f"{who(story.rank, story.pid, story.name)} reports that it made no progress (its own "
                     "watchdog), the only process the inputs show stalled; why it stalled is not shown")
            verdict.first_failure = FirstFailure(story.rank, story.pid, first.time, basis, "stalled",
                                                 _differs(launcher, story.rank), key=story.key, name=story.name)
        else:
            basis = (f"{ranks_phrase(hang.waited)} timed out waiting in {what_op}; the logs cannot tell which rank is late"
                     + (f" (candidates: {', '.join(map(str, hang.suspects))})" if hang.suspects else ""))
            verdict.first_failure = FirstFailure(None, None, first.time, basis, f"collective timeout in {what_op}",
                                                 launcher[1] if launcher else None)
        verdict.failure_kind = FailureKind.NCCL_TIMEOUT if nccl else FailureKind.HANG
        verdict.explain(f"Hang: {basis}.")

    def _flight_hang(self, evidence: Evidence, verdict: VerdictView, hang: Hang, launcher) -> None:
        """The first failure of a hang the Flight Recorder dumps show: the one rank they
        name, or undecided between the ones they name."""
        lineup = evidence.stories.collectives
        shown = lineup.culprit_hang or lineup.hangs[0]
        what_op = f"{hang.collective} #{hang.seq} of process group {hang.group}"
        dumps = ", ".join(hang.evidence)
        waiting = (f"{ranks_phrase(hang.waited)} wait in {what_op}" if hang.waited else f"{what_op} never completed") + \
            (f" (called at {hang.called_at})" if hang.called_at else "")
        if len(hang.suspects) == 1:
            rank = hang.suspects[0]
            how = _HOW.get(hang.culprit_how or "", "never entered")
            what = f"rank {rank} {how} {what_op}"
            basis = f"Flight Recorder dumps ({dumps}): {waiting}; rank {rank} {how} it: {hang.culprit_doing}"
            info = evidence.processes.by_rank(rank)
            verdict.first_failure = FirstFailure(rank, info.pid if info else None, shown.since, basis, what,
                                                 _differs(launcher, rank), key=info.key if info else None)
        else:
            basis = (f"Flight Recorder dumps ({dumps}): {waiting}; the dumps cannot tell which rank is late"
                     + (f" (candidates: {', '.join(map(str, hang.suspects))})" if hang.suspects else ""))
            verdict.first_failure = FirstFailure(None, None, shown.since, basis, f"hang in {what_op}",
                                                 launcher[1] if launcher else None)
        nccl = any(e.attrs.get("message_id") in ("nccl-watchdog-timeout", "nccl-timeout-work")
                   for e in evidence.of_kind(Kind.COLLECTIVE_TIMEOUT))
        verdict.failure_kind = FailureKind.NCCL_TIMEOUT if nccl else FailureKind.HANG
        verdict.explain(f"Hang: {basis}.")

    def _relay_only(self, evidence: Evidence, verdict: VerdictView, relays: list[Event], launcher) -> None:
        kinds = sorted({e.kind.value for e in relays})
        first = relays[0]
        # an engine's relays say the engine died; a peer's or a launcher's, only that some
        # other process failed
        died = "the engine died" if any(e.kind in _ENGINE_RELAYS for e in relays) else \
            "an earlier GPU fault" if all(e.kind == Kind.XID for e in relays) else "another process failed"
        basis = (f"only relays of a failure are in the inputs ({', '.join(kinds)}, first at {first.where}): {died}, "
                 "but the failing process's own error is not in these inputs")
        verdict.first_failure = FirstFailure(None, None, first.time, basis, died, launcher[1] if launcher else None)
        # (a relay while the engine starts is still only a relay: the phase says when)
        verdict.failure_kind = FailureKind.CUDA_ERROR if all(e.kind == Kind.XID for e in relays) else \
            FailureKind.RELAY_ONLY
        verdict.explain(f"Relay only: {basis}.")


_ENGINE_RELAYS = frozenset({Kind.ENGINE_DEAD, Kind.ENGINE_FATAL, Kind.ENGINE_WORKER_FAILED, Kind.WORKER_EXCEPTION,
                            Kind.SCHEDULER_DUMP, Kind.HTTP})

# Relays a shutdown produces by itself: children told their parent left, signals sent.
_SHUTDOWN_ECHOES = frozenset({Kind.PARENT_EXITED, Kind.SIGNAL_RECEIVED, Kind.WORKER_DIED})


def _after_a_requested_shutdown(evidence: Evidence, relays: list[Event]) -> bool:
    """Whether every relay is an echo of a shutdown the server was already carrying out
    (an operator's Ctrl-C, a rolling restart): the first shutdown line comes no later
    than the first relay, and no relay says a process failed."""
    shutdowns = [e for e in evidence.of_kind(Kind.SHUTDOWN) if not e.attrs.get("earlier_run")]
    if not shutdowns or any(e.kind not in _SHUTDOWN_ECHOES for e in relays):
        return False
    first_shutdown, first_relay = shutdowns[0], relays[0]
    if first_shutdown.time is not None and first_relay.time is not None:
        return first_shutdown.time <= first_relay.time
    return first_shutdown.source == first_relay.source and first_shutdown.line <= first_relay.line


# The ProcessGroupNCCL watchdog polls its work items; the time it reports a CUDA error is
# when it looked, not when the kernel faulted.  Two ranks' watchdog reports closer than
# this are not ordered.
WATCHDOG_POLL_S = 1.0


def _same_time(a: Event, b: Event) -> bool:
    """Whether two events cannot be ordered by their times: equal; in one second when
    either stamp has no sub-second part; both the watchdog's, within its polling."""
    if a.time is None and b.time is None:
        # two untimed lines: the order they were printed in is not when they happened
        return True
    if a.time is None or b.time is None:
        return False
    if a.time == b.time:
        return True
    if a.time_inferred or b.time_inferred:
        # an unstamped line lies somewhere between the stamps around it
        a_end = a.attrs.get("not_after", a.time) if a.time_inferred else a.time
        b_end = b.attrs.get("not_after", b.time) if b.time_inferred else b.time
        if a.time <= b_end and b.time <= a_end:
            return True
    coarse = a.time.microsecond == 0 or b.time.microsecond == 0
    if coarse and a.time.replace(microsecond=0) == b.time.replace(microsecond=0):
        return True
    watchdog = a.attrs.get("error_form") == "nccl-watchdog" and b.attrs.get("error_form") == "nccl-watchdog"
    return watchdog and abs((a.time - b.time).total_seconds()) < WATCHDOG_POLL_S


def _close_after(first: Event, then: Event, seconds: float = 30) -> bool:
    if first.time is None or then.time is None:
        return first.source == then.source
    return 0 <= (then.time - first.time).total_seconds() <= seconds


_DEVICE = (Kind.XID, Kind.SANITIZER, Kind.CUDA_GDB, Kind.CORE_DUMP, Kind.DEVICE_ASSERT)
_ENDINGS = (Kind.FATAL_SIGNAL, Kind.WORKER_DIED, Kind.CHILD_FAILED)


def _rivals(candidates: list[Candidate], earliest: Candidate) -> list[Candidate]:
    """Other processes' reported failures that cannot be ordered after ``earliest``: in
    the same second, and as strong (device evidence beats a host report: it is where the
    fault happened, not where it was noticed; a shown error beats an announcement of one).  A crash signal or a death is how a failure
    ended, often one already reported under another identity (an abort's dump adopted by
    the pid its launcher names): no rival."""
    def process(c: Candidate):
        return c.key or (("pid", c.pid) if c.pid is not None else ("rank", c.rank) if c.rank is not None else None)
    mine = process(earliest)
    device = earliest.event.kind in _DEVICE
    # a process announcing its own failure ("WorkerProc failed to start.") without its
    # error in view is no rival of one whose error is shown
    shown = earliest.event.kind not in ANNOUNCEMENTS
    return [c for c in candidates if c is not earliest and process(c) is not None and process(c) != mine
            and c.event.kind not in _ENDINGS and _same_time(c.event, earliest.event)
            and (c.event.kind in _DEVICE) == device and not (shown and c.event.kind in ANNOUNCEMENTS)]


def _same_failure(candidates: list[Candidate], event: Event) -> bool:
    """Several ranks reporting one same failure at one same second: no rank is first."""
    same = [c for c in candidates if _same_time(c.event, event) and c.event.kind == event.kind and c.rank is not None]
    return len({c.rank for c in same}) > 1 and event.kind not in (Kind.XID, Kind.DEVICE_ASSERT, Kind.SANITIZER)


def _launcher_opinion(evidence: Evidence) -> tuple[int, str] | None:
    for event in evidence.of_kind(Kind.LAUNCHER_SUMMARY):
        root = event.attrs.get("root_cause") or {}
        if isinstance(root.get("rank"), int):
            return root["rank"], (f"torchrun's summary names rank {root['rank']} as \"Root Cause (first observed "
                                  "failure)\": the failure with the earliest timestamp, which can be a victim")
    return None


def _differs(launcher, rank) -> str | None:
    if launcher is None:
        return None
    if rank is None or launcher[0] != rank:
        return launcher[1] + (f"; the evidence points at rank {rank}" if rank is not None else "")
    return None


def describe(event: Event) -> str:
    err = event.attrs.get("cuda_error")
    if event.kind == Kind.CUDA_ERROR and err is not None:
        return f"{err.name} reported"
    if event.kind == Kind.SANITIZER and event.attrs.get("api") and err is not None:
        return f"{event.attrs['api']} returned {err.name} (seen by compute-sanitizer)"
    if event.kind == Kind.DEVICE_ASSERT:
        return f"device-side assert in {event.attrs.get('function') or 'a kernel'}"
    if event.kind == Kind.OOM:
        # a catalogued message says which memory ran out (the KV cache at start-up)
        text = event.attrs.get("exception_message") or event.message
        first = text.splitlines()[0] if text else ""
        return f"out of memory: {_short(first, 90)}" if event.attrs.get("message_id") and first else "out of memory"
    if event.kind == Kind.XID:
        entry = knowledge.xid_catalogue().get(event.attrs.get("xid"), {})
        return f"Xid {event.attrs.get('xid')} ({entry.get('name', 'unknown')}) on its GPU"
    if event.kind == Kind.FATAL_SIGNAL:
        signal = event.attrs.get("signal_name")
        text = event.attrs.get("signal_text")
        crash = event.attrs.get("crash_frame")
        where = f" in {crash.function}" if crash is not None and crash.function else ""
        if signal or text:
            name = f"{text} ({signal})" if text and signal and text != signal else (signal or text)
            return f"killed by {name}{where}"
        return _short(event.message) + where
    if event.kind == Kind.EXCEPTION and event.attrs.get("exception_type"):
        first = (event.attrs.get("exception_message") or "").splitlines()[:1]
        return _short(f"{event.attrs['exception_type']}: {first[0]}" if first and first[0] else
                      event.attrs["exception_type"])
    return f"{event.kind.value}: {_short(event.message)}"


def _short(text: str, limit: int = 100) -> str:
    """A message cut at a word boundary, marked when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


def _kind(evidence: Evidence, verdict: VerdictView, event: Event | None) -> FailureKind:
    """What kind of failure, the most specific cause first: a device-side assert (it
    explains the CUDA error it raises), out of memory (CUDA_ERROR_OUT_OF_MEMORY is one),
    a CUDA error or device evidence, then a failure while the program started (whatever
    failed there), then crash signals, kills and exceptions (docs/reasoning.md)."""
    env = verdict.environment
    error = verdict.error
    if evidence.of_kind(Kind.DEVICE_ASSERT) or (error is not None and error.name == "CUDA_ERROR_ASSERT"):
        return FailureKind.DEVICE_ASSERT
    if (event is not None and event.kind == Kind.OOM) or (error is not None and error.name in _OOM_ERRORS):
        return FailureKind.OOM
    if error is None and event is not None and event.kind == Kind.XID and \
            knowledge.xid_catalogue().get(event.attrs.get("xid"), {}).get("hang"):
        return FailureKind.HANG         # the GPU stopped answering (a GSP or context-switch timeout)
    if (error is not None and error.error.family != "nccl") or (event is not None and (event.kind in _DEVICE or (
            event.kind == Kind.CUDA_ERROR and _a_cuda_error(event)))) or _own_cuda_error_beside(evidence, event):
        return FailureKind.CUDA_ERROR
    if env.get("phase") == "startup":
        # the program never started serving (whatever failed while it started)
        return FailureKind.STARTUP
    if event is None:
        return FailureKind.PYTHON_EXCEPTION
    if event.kind in (Kind.WORKER_DIED, Kind.CHILD_FAILED):
        # a crash signal (segfault, abort, bus error...) is the process's own fatal
        # signal; SIGKILL and SIGTERM came from outside (the OOM killer, a launcher); an
        # exit code is a child that raised, whose own error is not in these inputs
        code = event.attrs.get("exit_code")
        if crash_signal(code):
            return FailureKind.FATAL_SIGNAL
        if isinstance(code, int) and code > 0 and signal_number(code) is None:
            return FailureKind.RELAY_ONLY
        return FailureKind.WORKER_KILLED
    if event.kind == Kind.FATAL_SIGNAL:
        signal = event.attrs.get("signal_name") or event.attrs.get("signal_text")
        return FailureKind.WORKER_KILLED if signal in ("Killed", "SIGKILL") else FailureKind.FATAL_SIGNAL
    if event.kind == Kind.EXCEPTION and (str(event.attrs.get("exception_type") or "").endswith("TimeoutError")
                                         or hang_timeouts(evidence)):
        # what it raised is a wait that ran out (on its workers, in a collective): something
        # below it stopped answering - a hang seen from above
        return FailureKind.HANG
    return FailureKind.PYTHON_EXCEPTION


def _stuck_stories(evidence: Evidence) -> list[Story]:
    """The processes whose own report says their own progress stopped (data/messages.toml
    stuck = "own"), not that they wait on a peer or on processes below them."""
    return [s for s in evidence.stories.stories
            if any(o.event.kind == Kind.COLLECTIVE_TIMEOUT and o.event.attrs.get("stuck") == "own"
                   for o in s.all(Seen.WAITING))]


def _timed_out_stories(evidence: Evidence) -> list[Story]:
    """The processes whose own watchdog timed out in a collective (not only stuck)."""
    return [s for s in evidence.stories.stories
            if any(o.event.kind == Kind.COLLECTIVE_TIMEOUT and not o.event.attrs.get("stuck")
                   for o in s.all(Seen.WAITING))]


CASCADE_S = 10.0    # a device fault this soon after another process's is taken as its consequence


def _in_cascade(first: Event, then: Event) -> bool:
    """Whether the fault ``then`` follows the origin's fault ``first`` as a cascade does
    (Xid 13 on one GPU, Xid 31 on its peers in the same second); faults minutes or hours
    apart are each their own.  By their times, else by the kernel's seconds since boot."""
    if first.time is not None and then.time is not None:
        gap = (then.time - first.time).total_seconds()
    elif isinstance(first.attrs.get("uptime"), (int, float)) and isinstance(then.attrs.get("uptime"), (int, float)):
        gap = then.attrs["uptime"] - first.attrs["uptime"]
    else:
        return False
    return 0 <= gap <= CASCADE_S


_OOM_ERRORS = frozenset({"CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation"})


def _out_of_memory(event: Event) -> bool:
    error = event.attrs.get("cuda_error")
    return error is not None and getattr(error, "name", None) in _OOM_ERRORS


def _own_cuda_error_beside(evidence: Evidence, event: Event | None) -> bool:
    """Whether the process whose failure ``event`` is also reported a CUDA error of its own
    (its traceback cut before the error's line, the driver's core dump start above it):
    what it failed of is that error."""
    if event is None:
        return False
    story = next((s for s in evidence.stories.stories if any(o.event is event for o in s.observations)), None)
    return story is not None and any(o.event.kind == Kind.CUDA_ERROR and _a_cuda_error(o.event)
                                     for o in story.all(Seen.OWN_ERROR))


def _a_cuda_error(event: Event) -> bool:
    """A CUDA error of the process: one the line names, or one whose name it does not say
    but whose family it does (torch's advice printed under a CUDA error: data/messages.toml
    error_family)."""
    return _names_a_cuda_error(event) or event.attrs.get("error_family") == "cuda"


def _names_a_cuda_error(event: Event) -> bool:
    """A CUDA error line that names which error (NCCL's "unhandled cuda error" says only
    that some CUDA call inside NCCL failed: the process failed, what surfaced is unknown)."""
    error = event.attrs.get("cuda_error")
    if error is None:
        return False
    if getattr(error, "family", "cuda") != "nccl":
        return True
    # NCCL's "Last error:" detail may name the CUDA failure ("Cuda failure 1 'invalid argument'")
    detail = " ".join(str(event.attrs.get(k) or "") for k in ("detail", "exception_message"))
    found = knowledge.find_cuda_error(detail) if "uda" in detail else None
    return found is not None and found.error.family == "cuda"


def missing_ranks(evidence: Evidence, environment) -> list[int]:
    """TP ranks the configuration promises but no input shows."""
    tp = environment.get("tensor_parallel_size")
    if not isinstance(tp, int) or tp < 2:
        return []
    seen = {p.rank for p in evidence.processes.processes() if p.role in (None, "worker") and p.rank is not None}
    return [r for r in range(tp) if r not in seen] if seen else []


_RELAY_ORDER = (Kind.PEER_FAILURE, Kind.COLLECTIVE_TIMEOUT, Kind.NCCL, Kind.PARENT_EXITED, Kind.ENGINE_WORKER_FAILED,
                Kind.ENGINE_FATAL, Kind.ENGINE_DEAD, Kind.SIGNAL_RECEIVED, Kind.SHUTDOWN, Kind.WORKER_EXCEPTION,
                Kind.CHILD_FAILED, Kind.HTTP, Kind.SCHEDULER_DUMP, Kind.EXCEPTION)

_COLLATERAL_WORDS = {
    Kind.PEER_FAILURE: "its collective failed: a peer closed the connection",
    Kind.COLLECTIVE_TIMEOUT: "it timed out waiting in a collective for a peer",
    Kind.NCCL: "NCCL failed waiting for a peer",
    Kind.PARENT_EXITED: "its parent (EngineCore) exited",
    Kind.ENGINE_WORKER_FAILED: "relayed a worker's failure and shut the engine down",
    Kind.ENGINE_FATAL: "the engine stopped after a worker failed",
    Kind.ENGINE_DEAD: "saw the engine die (EngineDeadError, HTTP 500)",
    Kind.WORKER_EXCEPTION: "raised after another process failed",
    Kind.SIGNAL_RECEIVED: "was told to stop after another process failed",
    Kind.SHUTDOWN: "was shut down after another process failed",
    Kind.HTTP: "answered clients with errors after the engine died",
    Kind.CHILD_FAILED: "its child process failed",
    Kind.SCHEDULER_DUMP: "the engine stopped after a worker failed",
    Kind.EXCEPTION: "raised after another process failed",
    Kind.CUDA_ERROR: "reported the error after a worker failed",
    Kind.OOM: "reported the failure after a worker failed",
    Kind.FATAL_SIGNAL: "went down after a worker failed",
}


class RankStatuses(Rule):
    """Gives every known process a status: origin (its own kernel faulted), surfaced (it
    reported the sticky error and the origin is not shown elsewhere), collateral (it died
    because a peer or its parent did: gloo/NCCL peer errors and timeouts while another
    rank is to blame, parent exited, engine relays, API server saw the engine die, a
    launcher's SIGTERM), healthy (no failure at all) or unknown (killed from outside,
    the rank that never joined a collective); with its exit code and first error line.
    Decided from each process's story (forensics/story.py, docs/reasoning.md section 4):
    a process that noticed another's failure before its own error is collateral."""

    name = "rank-statuses"
    reads = ("origin", "first_failure", "surfaces", "hang", "error", "failure_kind", "environment")
    writes = ("ranks",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        exit_codes = _exit_codes(evidence)
        deaths: dict[int, str] = {}
        rank_deaths: dict[int, str] = {}    # a launcher reports a rank dead without its pid (TGI "Shard 1 crashed")
        for e, pid, rank, words in _deaths(evidence):
            if verdict.hang is not None and _timeout_death(e, _first_timeout(evidence), True):
                continue
            if pid is not None:
                deaths.setdefault(pid, words)
            elif rank is not None:
                rank_deaths.setdefault(rank, words)
        first = verdict.first_failure
        out = []
        shutdown_seen = bool(evidence.of_kind(Kind.SHUTDOWN))
        origin = origin_story(evidence.stories.stories, verdict.origin)
        origin_fault = origin.first(Seen.DEVICE_FAULT) if origin is not None else None
        for story in evidence.stories.stories:
            rank_death = rank_deaths.get(story.rank) if story.role in (None, "worker") else None
            out.append(self._status(story, exit_codes, deaths, first, verdict.origin, verdict.hang, verdict,
                                    shutdown_seen, rank_death,
                                    origin_fault.event if origin_fault and origin is not story else None))
        out = self._went_down_with_the_job(evidence, verdict, out)
        verdict.ranks = tuple(out)
        for v in out:
            # which observation of its story decided each status (forensics analyze --explain)
            verdict.explain(f"{label(v)}: {v.status} - {v.failure or 'nothing failed in its lines'}"
                            + (f" [{v.first_error_source}]" if v.first_error_source else ""))
        collateral = [v for v in out if v.status == Status.COLLATERAL]
        if collateral:
            verdict.explain("Collateral: " + ", ".join(label(v) for v in collateral)
                            + " went down because another process failed.")

    def _status(self, story: Story, exit_codes, deaths, first, origin, hang, verdict, shutdown_seen: bool = False,
                rank_death: str | None = None, origin_fault: Event | None = None) -> RankVerdict:
        """The status of one process, from its story (docs/reasoning.md, "Statuses")."""
        own = _most_telling([o.event for o in story.all(*FIRST_HAND)])
        relays = [o.event for o in story.observations
                  if o.seen in NOTICED | {Seen.SHUTDOWN} or (o.seen == Seen.WAITING and o.event.kind in RELAY and not (
                      hang is None and o.event.severity < Severity.ERROR))      # a slow step's notice, no hang
                  or (o.seen == Seen.KILLED and o.event.kind == Kind.SHUTDOWN)]
        relays.sort(key=lambda e: _RELAY_ORDER.index(e.kind) if e.kind in _RELAY_ORDER else len(_RELAY_ORDER))
        pids = set(story.pids)
        code = next((exit_codes[p] for p in story.pids if p in exit_codes), None)
        base = dict(key=story.key, pid=story.pid, rank=story.rank, role=story.role or "unknown", name=story.name,
                    exit_code=code, other_pids=tuple(p for p in story.pids if p != story.pid), host=story.host)
        is_first = first is not None and (first.key == story.key if first.key is not None else
                                          (first.pid is not None and first.pid in pids) or
                                          (first.pid is None and first.rank is not None and first.rank == story.rank
                                           and story.role in (None, "worker")))
        if story.role in ("engine-core", "api-server", "launcher") and own and not is_first and first is not None:
            relays = relays or own
            own = []
        if origin is not None and origin_story((story,), origin) is not None:
            where = own[0] if own else (story.observations[0].event if story.observations else None)
            fault = f"its kernel {origin.kernel} faulted" if origin.kernel else f"its device work faulted ({origin.fault})"
            return RankVerdict(status=Status.ORIGIN, first_error=clip(where.message, 200) if where else None,
                               first_error_source=where.where if where else None, failure=fault, **base)
        fault = story.first(Seen.DEVICE_FAULT)
        if fault is not None and origin_fault is not None and _in_cascade(origin_fault, fault.event):
            fault = None        # its GPU faulted right after the origin's: the cascade, not an origin
        if fault is not None:
            # device evidence of its own kernel faulting (an Xid naming its pid beside
            # another process's): each process whose own GPU work faulted is an origin
            return RankVerdict(status=Status.ORIGIN, first_error=clip(fault.event.message, 200),
                               first_error_source=fault.event.where,
                               failure=f"its device work faulted ({describe(fault.event)})", **base)
        if hang is not None and story.rank in hang.suspects and len(hang.suspects) == 1:
            failure = "never joined the collective its peers waited in" if hang.basis != "flight-recorder" else \
                f"{_HOW.get(hang.culprit_how or '', 'never entered')} {hang.collective} #{hang.seq} (Flight Recorder)"
            failure += f"; {hang.culprit_doing}" if hang.culprit_doing else ""
            return RankVerdict(status=Status.UNKNOWN, failure=failure, **base)
        waits = next((what for r, what in (hang.waits if hang is not None else ()) if r == story.rank), None)
        if waits is not None and not own and story.role in (None, "worker"):
            # its own dump shows it waiting in a collective (it may have no line of its own to say so)
            late = f"rank {hang.suspects[0]}" if len(hang.suspects) == 1 else "a rank the dumps cannot tell"
            return RankVerdict(status=Status.COLLATERAL if len(hang.suspects) == 1 else Status.UNKNOWN,
                               failure=f"waited in {waits} for {late} (its Flight Recorder dump)", **base)
        if hang is not None and len(hang.suspects) != 1 and not own:
            # a hang whose late rank the logs cannot tell: a rank whose own watchdog timed
            # out failed (that is all its lines show); one only seen stuck is unknown
            waited = [o.event for o in story.all(Seen.WAITING)]
            # (the heartbeat monitor's report is of the watchdog itself stuck: the rank is stuck)
            timed_out = next((e for e in waited if e.kind == Kind.COLLECTIVE_TIMEOUT
                              and not e.attrs.get("stuck")), None)
            if timed_out is not None and is_first:
                return RankVerdict(status=Status.FAILED, first_error=clip(timed_out.message, 200),
                                   first_error_source=timed_out.where,
                                   failure="its watchdog timed out waiting in a collective; the peer it waited "
                                           "for is not in the inputs", **base)
            if timed_out is not None:
                return RankVerdict(status=Status.FAILED, first_error=clip(timed_out.message, 200),
                                   first_error_source=timed_out.where,
                                   failure="its watchdog timed out waiting in a collective", **base)
            if waited:
                return RankVerdict(status=Status.UNKNOWN, first_error=clip(waited[0].message, 200),
                                   first_error_source=waited[0].where,
                                   failure="seen waiting while the job hung", **base)
        noticed = story.noticed_before_failing
        if own and noticed is not None and not is_first and first is not None:
            # it noticed a peer's or the engine's failure, then raised in its turn (a
            # broken pipe, a closed connection): a consequence, not a failure of its own
            e = noticed.event
            return RankVerdict(status=Status.COLLATERAL, first_error=clip(e.message, 200), first_error_source=e.where,
                               failure=_COLLATERAL_WORDS.get(e.kind, e.kind.value) + f"; then {describe(own[0])}",
                               **base)
        if own:
            e = own[0]
            reported_error = e.kind in (Kind.CUDA_ERROR,) and verdict.error is not None
            if reported_error and origin is not None:
                status, failure = Status.COLLATERAL, (f"reported {verdict.error.name} after "
                                                      f"{who(origin.rank, origin.pid, brief=True)} faulted")
            elif reported_error and first is not None and first.rank is not None and not is_first \
                    and first.time is not None and e.time is not None and e.time > first.time:
                # the same error, later, on a rank that shares memory or a collective with
                # the one that failed first: its kernels read what the failed rank left
                status, failure = (Status.COLLATERAL, f"reported {verdict.error.name} after rank {first.rank} "
                                   "failed (through memory or a collective they share)")
            elif (e.kind == Kind.CUDA_ERROR and _a_cuda_error(e)) or e.kind == Kind.DEVICE_ASSERT or \
                    (e.kind == Kind.SANITIZER and reported(e) is not None):    # a host call failing, seen by the tool
                status, failure = Status.SURFACED, describe(e)
            elif e.kind in (Kind.OOM, Kind.FATAL_SIGNAL) or is_first or first is None or first.rank is None:
                status, failure = Status.FAILED, describe(e)
            else:
                status, failure = Status.UNKNOWN, describe(e)    # an exception after another rank failed
            if e.kind == Kind.OOM or _out_of_memory(e):
                status, failure = (Status.FAILED if status == Status.SURFACED else status), "ran out of memory"
            return RankVerdict(status=status, first_error=clip(e.message, 200), first_error_source=e.where,
                               failure=failure, **base)
        quiet = first is None and hang is None and verdict.failure_kind is None
        if quiet and shutdown_seen and (relays or pids & set(deaths)) and \
                all(e.kind in _SHUTDOWN_ECHOES | {Kind.SHUTDOWN} for e in relays):
            # nothing failed: what this process shows is the server stopping itself
            return RankVerdict(status=Status.HEALTHY, failure="stopped by a requested shutdown", **base)
        crashed = code is not None and crash_signal(code)
        if (pids & set(deaths) or rank_death is not None) and (crashed or is_first or not story.all(*NOTICED)):
            # (a child that exited after noticing another's failure is collateral: below);
            # one SIGKILLed from outside (the OOM killer, Ray's memory monitor) is unknown
            words = deaths.get(story.pid) or next((deaths[p] for p in story.pids if p in deaths), rank_death)
            # an error exit code is a child that raised an error of its own: failed
            raised = isinstance(code, int) and code > 0 and signal_number(code) is None
            failed = crashed or raised or (is_first and signal_number(code) != 9)
            return RankVerdict(status=Status.FAILED if failed else Status.UNKNOWN, failure=words, **base)
        if relays:
            e = relays[0]
            if first is None and hang is None and verdict.failure_kind is None:
                return RankVerdict(status=Status.UNKNOWN, first_error=clip(e.message, 200), first_error_source=e.where,
                                   failure=_COLLATERAL_WORDS.get(e.kind, e.kind.value), **base)
            failure = _COLLATERAL_WORDS.get(e.kind, e.kind.value)
            if e.kind == Kind.SHUTDOWN and e.attrs.get("signal"):
                failure = f"the launcher sent it {e.attrs['signal']} after another process failed"
            elif e.kind == Kind.SHUTDOWN and e.attrs.get("subject_pid") is not None:
                failure = "killed by the shutdown after another process failed"
            return RankVerdict(status=Status.COLLATERAL, first_error=clip(e.message, 200), first_error_source=e.where,
                               failure=failure, **base)
        torn = next((o.event for o in story.all(Seen.KILLED) if o.event.kind == Kind.XID), None)
        if torn is not None:
            # the driver ended its GPU work after a fault elsewhere: how it fared, unknown
            return RankVerdict(status=Status.UNKNOWN, first_error=clip(torn.message, 200), first_error_source=torn.where,
                               failure=describe(torn), **base)
        if isinstance(code, int) and code != 0:
            return RankVerdict(status=Status.UNKNOWN, failure=death_words(story.name or who(story.rank, story.pid), code),
                               **base)
        if (hang is not None or verdict.failure_kind in (FailureKind.HANG, FailureKind.NCCL_TIMEOUT)) and \
                story.role not in ("api-server", "launcher") and not story.observations and \
                (first is None or story.key != first.key):
            # in a hang, a rank that says nothing of how it fared is no healthy one: it may
            # be the one the others waited for
            return RankVerdict(status=Status.UNKNOWN, failure="nothing of its own about the hang in the inputs: it may "
                                                              "be the rank the others waited for", **base)
        return RankVerdict(status=Status.HEALTHY, **base)


    @staticmethod
    def _went_down_with_the_job(evidence: Evidence, verdict: VerdictView, out: list[RankVerdict]) -> list[RankVerdict]:
        """When one rank's failure took the job down, the ranks that show no failure of
        their own (and the ranks the configuration promises but no input shows) went
        down with it: collateral."""
        from dataclasses import replace
        first = verdict.first_failure
        if first is None or first.rank is None or verdict.hang is not None:
            return out
        culprit = f"rank {first.rank}"
        words = f"no failure of its own in the inputs: it went down with the job after {culprit} failed"
        result = []
        for v in out:
            if v.status == Status.HEALTHY and v.role == "worker" and v.rank is not None and v.rank != first.rank:
                v = replace(v, status=Status.COLLATERAL, failure=words)
            result.append(v)
        seen = {v.rank for v in result if v.role == "worker" and v.rank is not None}
        stopped = stopped_ranks(evidence, seen)
        for rank in sorted(expected_ranks(evidence, verdict.environment) - seen - {first.rank}):
            if rank in stopped:
                result.append(RankVerdict(key=f"rank:{rank}", pid=None, rank=rank, role="worker", name=None,
                                          status=Status.COLLATERAL,
                                          failure=f"no lines of its own in the inputs; the launcher stopped it after "
                                                  f"{culprit} failed", in_inputs=False))
            else:
                result.append(RankVerdict(key=f"rank:{rank}", pid=None, rank=rank, role="worker", name=None,
                                          status=Status.COLLATERAL,
                                          failure=f"no lines of this rank in the inputs; it went down with the job "
                                                  f"after {culprit} failed", in_inputs=False))
        return result


_TELLING = (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM, Kind.FATAL_SIGNAL, Kind.EXCEPTION)


def _most_telling(own: list[Event]) -> list[Event]:
    """A process's first-hand failures with the one that says most first: a CUDA error
    over the "WorkerProc hit an exception" header printed above it, in time order otherwise."""
    if any(e.kind in _TELLING[:2] for e in own):
        # (a CUDA error that names which one before NCCL's "unhandled cuda error" around it)
        return sorted(own, key=lambda e: (e.kind not in _TELLING[:2],
                                          e.kind == Kind.CUDA_ERROR and not _names_a_cuda_error(e)))
    return sorted(own, key=lambda e: e.kind not in _TELLING)


def label(v: RankVerdict) -> str:
    return f"rank {v.rank}" if v.rank is not None else who(None, v.pid, v.name or v.role)


def _exit_codes(evidence: Evidence) -> dict[int, int]:
    codes: dict[int, int] = {}
    table = evidence.processes
    for event in evidence.of_kind(Kind.CHILD_FAILED, Kind.WORKER_DIED, Kind.EXIT):
        code = event.attrs.get("exit_code")
        pid = event.attrs.get("subject_pid")
        if pid is None and event.attrs.get("subject_process"):
            info = table.by_name(event.attrs.get("subject_process"))
            pid = info.pid if info else None
        if isinstance(pid, int) and isinstance(code, int):
            codes.setdefault(pid, code)
    for event in evidence.of_kind(Kind.LAUNCHER_SUMMARY):
        for failure in [event.attrs.get("root_cause") or {}] + list(event.attrs.get("failures") or []):
            if isinstance(failure.get("pid"), int) and isinstance(failure.get("exit_code"), int):
                codes.setdefault(failure["pid"], failure["exit_code"])
    return codes
