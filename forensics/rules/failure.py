"""Who failed first, and how every other process went down."""

from __future__ import annotations

from forensics.events import Event, Kind, Severity, as_int
from forensics.rules.base import Context, FirstFailure, RankVerdict, Rule

# A process's own failure (as opposed to noticing someone else's).
PRIMARY = (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM, Kind.FATAL_SIGNAL, Kind.XID,
           Kind.SANITIZER, Kind.CUDA_GDB, Kind.CORE_DUMP)
# Failures that only report that a peer or the parent went away.
COLLATERAL = (Kind.PEER_FAILURE, Kind.NCCL, Kind.PARENT_EXITED, Kind.ENGINE_WORKER_FAILED,
              Kind.ENGINE_DEAD, Kind.ENGINE_FATAL)
SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS", 4: "SIGILL"}


class CollectiveHang(Rule):
    """A hang, not a crash: NCCL watchdog timeouts and no fault of a process's own.  The
    ranks that report the timeout were waiting in the collective; the rank that never
    reports it (or is behind in sequence numbers) is the one that did not join, and is
    named as the first failure.  When every rank timed out in the same collective, the
    logs cannot tell who is late and the verdict says so."""

    name = "collective-hang"

    def apply(self, ctx: Context) -> None:
        timeouts = [e for e in ctx.events if e.attrs.get("message_id") == "nccl-watchdog-timeout"]
        if not timeouts or any(e.kind in (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM) for e in ctx.events):
            return
        ctx.failure_kind = "nccl-timeout"
        waited: dict[int, tuple[int, str]] = {}
        for e in timeouts:
            if e.rank is not None:
                waited.setdefault(e.rank, (int(e.attrs["seq"]), e.attrs["op"]))
        tp = ctx.environment.get("tensor_parallel_size")
        ranks = {p.rank for p in ctx.processes.processes() if p.role == "worker" and p.rank is not None}
        if isinstance(tp, int):
            ranks |= set(range(tp))
        ranks |= set(waited)
        seq, op = max(waited.values()) if waited else (None, None)
        behind = sorted(r for r, (s, _) in waited.items() if s < (seq or 0))
        silent = sorted(ranks - set(waited))
        suspects = silent or behind
        ctx.hang = {"collective": op, "seq": seq, "waited": sorted(waited), "suspects": suspects}
        first = timeouts[0]
        waited_text = f"ranks {', '.join(map(str, sorted(waited)))} timed out waiting in {op} SeqNum={seq}"
        if len(suspects) == 1:
            rank = suspects[0]
            why = "never reported that collective" if silent else "was behind in collective sequence numbers"
            what = f"rank {rank} never joined {op} SeqNum={seq}"
            ctx.first_failure = FirstFailure(rank, ctx.processes.pid_of_rank(rank), first.time,
                                             f"{waited_text}; rank {rank} {why}: it is the one that did not "
                                             f"join (hung or dead before it)", what)
        else:
            what = f"collective timeout in {op} SeqNum={seq}"
            ctx.first_failure = FirstFailure(None, None, first.time,
                                             f"{waited_text}; the logs cannot tell which rank is late"
                                             + (f" (candidates: {', '.join(map(str, suspects))})" if suspects else ""),
                                             what)
        ctx.explain(self, f"Hang: {waited_text}; suspected late rank(s): {', '.join(map(str, suspects)) or 'unknown'}.")


class FirstFailureRule(Rule):
    """Decides which rank failed first.  The origin, when known, wins.  Otherwise the
    earliest failure of a process's *own* (CUDA error, device assert, OOM, fatal signal,
    a worker reported dead with a signal exit code) - never a rank that merely detected
    a failure (peer closed the connection, parent exited, engine relayed a worker error).
    Equal one-second stamps are broken by the kind of failure, then by log order."""

    name = "first-failure"

    def apply(self, ctx: Context) -> None:
        if ctx.first_failure is not None:
            return          # decided by a more specific rule (collective hang)
        if ctx.origin is not None:
            ctx.first_failure = FirstFailure(ctx.origin.rank, ctx.origin.pid, _time_of_pid(ctx, ctx.origin.pid),
                                             f"origin evidence: {ctx.origin.fault} in {ctx.origin.kernel}",
                                             ctx.origin.kernel)
            ctx.explain(self, f"Rank {ctx.origin.rank} failed first: its own kernel faulted (origin evidence).")
            return
        candidates = []
        for event in ctx.events:
            if event.kind in PRIMARY and (event.role in (None, "worker") or event.kind == Kind.XID):
                candidates.append((event, event.pid, event.rank, _describe(event)))
            elif event.kind == Kind.WORKER_DIED:
                pid = ctx.processes.pid_of_name(event.attrs.get("subject_process"))
                rank = ctx.processes.rank_of(pid) if pid else _rank_from_name(event.attrs.get("subject_process"))
                code = as_int(event.attrs.get("exit_code"))
                candidates.append((event, pid, rank, _death(event.attrs.get("subject_process"), code)))
        if not candidates:
            # an exception traceback is a failure of its own too, when nothing better exists
            candidates = [(e, e.pid, e.rank, e.message) for e in ctx.events
                          if e.kind == Kind.TRACEBACK and e.role in (None, "worker", "engine-core")]
        if not candidates:
            ctx.explain(self, "No process shows a failure of its own; first failure unknown.")
            return
        key = lambda c: (c[0].time is None, c[0].time, _weight(c[0]))  # noqa: E731
        earliest = min(candidates, key=key)
        event, pid, rank, what = earliest
        tied = sorted({c[2] for c in candidates if key(c) == key(earliest) and c[2] is not None and c[2] != rank})
        others = sorted({c[2] for c in candidates if c[2] is not None and c[2] != rank} - set(tied))
        basis = f"earliest failure of its own ({what}) at {event.where}"
        if tied:
            # one-second stamps: equal times say nothing about order
            basis += (f"; ranks {', '.join(map(str, tied))} reported the same within the same second, so "
                      f"rank {rank} is first only in log order - not evidence that it faulted first")
        if others:
            basis += f"; ranks {', '.join(map(str, others))} failed later"
        if not tied and not others:
            basis += "; no other rank failed on its own"
        missing = _missing_ranks(ctx)
        if missing:
            basis += (f"; the logs of ranks {', '.join(map(str, missing))} are missing, so one of them "
                      "may have failed earlier - this cannot be ruled out")
        ctx.first_failure = FirstFailure(rank, pid, event.time, basis, what)
        if ctx.environment.get("phase") == "startup":
            ctx.failure_kind = "startup"
        elif ctx.failure_kind is None:
            ctx.failure_kind = _failure_kind(event)
        ctx.explain(self, f"Rank {rank} (pid {pid}) failed first: {basis}.")


class RankStatuses(Rule):
    """Gives every known process a status: origin (its own kernel faulted), surfaced (it
    reported the sticky error and the origin is not shown elsewhere), collateral (it died
    because a peer or its parent did: gloo/NCCL peer errors, parent exited, engine relayed
    a worker failure, API server saw the engine die), healthy (no failure at all) or
    unknown; with its exit code and first error line."""

    name = "rank-statuses"

    def apply(self, ctx: Context) -> None:
        exit_codes = _exit_codes(ctx)
        for info in ctx.processes.processes():
            mine = [e for e in ctx.events if e.pid == info.pid or
                    (e.pid is None and info.role == "worker" and info.rank is not None and e.rank == info.rank)]
            verdict = RankVerdict(pid=info.pid, rank=info.rank, role=info.role or "unknown",
                                  name=info.name, exit_code=exit_codes.get(info.pid))
            first_bad = next((e for e in mine if e.kind in PRIMARY + COLLATERAL + (Kind.WORKER_EXCEPTION,)
                              and e.kind != Kind.WORKER_EXCEPTION), None) or \
                next((e for e in mine if e.severity >= Severity.ERROR and e.kind != Kind.WORKER_EXCEPTION), None)
            if first_bad:
                verdict.first_error = first_bad.message[:160]
                verdict.first_error_source = first_bad.where
            own = [e for e in mine if e.kind in PRIMARY]
            relays = [e for e in mine if e.kind in COLLATERAL]
            killed = _killed(ctx)
            origin_pid = ctx.origin.pid if ctx.origin else None
            nonzero_exit = verdict.exit_code not in (None, 0)
            hang = ctx.hang
            if hang and info.role == "worker" and info.rank in hang["suspects"]:
                verdict.status = "unknown"
                verdict.failure = f"never joined {hang['collective']} SeqNum={hang['seq']}: suspected hung or dead rank"
            elif hang and info.role == "worker" and info.rank in hang["waited"]:
                verdict.status = "collateral"
                verdict.failure = f"timed out waiting for a peer in {hang['collective']} SeqNum={hang['seq']}"
            elif ctx.first_failure is None and ctx.error is None and not own and not nonzero_exit:
                # Nothing failed: parent-exited and shutdown lines are an orderly stop.
                verdict.status = "healthy" if mine else "unknown"
            elif origin_pid is not None and info.pid == origin_pid:
                verdict.status = "origin"
                verdict.failure = f"its kernel {ctx.origin.kernel} faulted"
            elif own and any(e.kind == Kind.CUDA_ERROR for e in own):
                if origin_pid is not None:
                    verdict.status = "collateral"
                    verdict.failure = "reported the CUDA error after the origin rank's fault"
                else:
                    verdict.status = "surfaced"
                    verdict.failure = "reported the sticky CUDA error; origin not shown elsewhere"
            elif relays:
                verdict.status = "collateral"
                verdict.failure = _collateral_reason(relays[0])
            elif info.pid in killed:
                code = killed[info.pid]
                first = ctx.first_failure
                if first and first.pid == info.pid:
                    verdict.status = "unknown"
                    verdict.failure = f"killed by {_signal_name(code)} from outside the server (first failure)"
                else:
                    verdict.status = "collateral"
                    verdict.failure = f"ended by {_signal_name(code)} during shutdown"
            elif own:
                verdict.status = "unknown"
                verdict.failure = _describe(own[0])
            elif any(e.kind == Kind.SHUTDOWN and e.attrs.get("subject_pid") and as_int(e.attrs["subject_pid"]) == info.pid
                     for e in ctx.events):
                verdict.status = "collateral"
                verdict.failure = "killed by the server's shutdown after the failure"
            elif mine and not nonzero_exit and not any(e.severity >= Severity.ERROR for e in mine):
                verdict.status = "healthy"
            if verdict.exit_code is None and info.pid in killed:
                verdict.exit_code = killed[info.pid]
            ctx.ranks[info.pid] = verdict
        collateral = [v for v in ctx.ranks.values() if v.status == "collateral"]
        if collateral:
            names = ", ".join(_label(v) for v in collateral)
            ctx.explain(self, f"Collateral: {names} went down because another process failed.")


def _missing_ranks(ctx: Context) -> list[int]:
    """TP ranks the configuration promises but no input shows."""
    tp = ctx.environment.get("tensor_parallel_size")
    if not isinstance(tp, int) or tp < 2:
        return []
    seen = {p.rank for p in ctx.processes.processes() if p.role == "worker" and p.rank is not None}
    return [r for r in range(tp) if r not in seen] if seen else []


def _collateral_reason(event: Event) -> str:
    return {
        Kind.PEER_FAILURE: "its collective failed: a peer closed the connection",
        Kind.NCCL: "NCCL collective failed or timed out waiting for a peer",
        Kind.PARENT_EXITED: "its parent (EngineCore) exited",
        Kind.ENGINE_WORKER_FAILED: "relayed a worker's failure and shut the engine down",
        Kind.ENGINE_FATAL: "engine core stopped after a worker failed",
        Kind.ENGINE_DEAD: "saw the engine core die (EngineDeadError, HTTP 500)",
    }.get(event.kind, event.kind)


def _label(v: RankVerdict) -> str:
    return f"rank {v.rank}" if v.rank is not None else f"{v.name or v.role} (pid {v.pid})"


def _exit_codes(ctx: Context) -> dict[int, int]:
    codes: dict[int, int] = {}
    for event in ctx.of_kind(Kind.EXIT):
        code = as_int(event.attrs.get("exit_code"))
        if event.pid is not None and code is not None:
            codes.setdefault(event.pid, code)
    for pid, code in _killed(ctx).items():
        codes.setdefault(pid, code)
    return codes


def _killed(ctx: Context) -> dict[int, int]:
    """pid -> negative exit code for workers the executor reported dead."""
    out = {}
    for event in ctx.of_kind(Kind.WORKER_DIED):
        pid = ctx.processes.pid_of_name(event.attrs.get("subject_process"))
        code = as_int(event.attrs.get("exit_code"))
        if pid is not None and code is not None:
            out[pid] = code
    return out


def _describe(event: Event) -> str:
    if event.kind == Kind.CUDA_ERROR and event.attrs.get("cuda_error"):
        return f"{event.attrs['cuda_error'].name} reported"
    return f"{event.kind}: {event.message[:80]}"


def _death(name: str | None, code: int | None) -> str:
    if code is not None and code < 0:
        return f"{name} killed by {_signal_name(code)}"
    return f"{name} died unexpectedly (exit code {code})"


def _signal_name(code: int | None) -> str:
    if code is None:
        return "an unknown signal"
    return SIGNALS.get(-code, f"signal {-code}") if code < 0 else f"exit code {code}"


def _weight(event: Event) -> int:
    order = {Kind.XID: 0, Kind.CUDA_ERROR: 1, Kind.DEVICE_ASSERT: 1, Kind.WORKER_DIED: 2}
    return order.get(event.kind, 3)


def _failure_kind(event: Event) -> str:
    if event.kind == Kind.WORKER_DIED:
        return "worker-killed"
    if event.kind == Kind.OOM:
        return "oom"
    if event.kind == Kind.TRACEBACK:
        return "python-exception"
    return event.kind


def _rank_from_name(name: str | None) -> int | None:
    from forensics import knowledge
    return knowledge.role_and_rank(name)[1]


def _time_of_pid(ctx: Context, pid: int | None):
    for event in ctx.events:
        if event.pid == pid and event.kind in PRIMARY:
            return event.time
    return None

