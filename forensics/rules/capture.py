"""The capture plugin's snapshots (forensics/parsers/capture.py) on the verdict."""

from __future__ import annotations

from forensics.events import Kind
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.verdict import RankStep, who


class StepsInFlight(Rule):
    """Says which engine step each worker was in when it went down, from the snapshots
    the capture plugin wrote (forensics/capture/, FORENSICS_CAPTURE=1): the step number,
    its phase and the requests in it with their tokens, joined to the process by pid
    (else by rank). It decides nothing: a step in flight is what a rank was running, not
    which kernel faulted, so it never names an origin and no status depends on it."""

    name = "steps-in-flight"
    reads = ("ranks",)
    writes = ("steps",)

    def predicate(self, evidence: Evidence, verdict: VerdictView) -> bool:
        return bool(evidence.of_kind(Kind.CAPTURE_SNAPSHOT))

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        latest: dict = {}
        for e in evidence.of_kind(Kind.CAPTURE_SNAPSHOT):
            ident = (e.pid, e.rank, e.attrs.get("host"))
            if ident not in latest or (e.attrs.get("written") or "") >= (latest[ident].attrs.get("written") or ""):
                latest[ident] = e
        by_pid = {}
        for r in verdict.ranks:
            for pid in (r.pid, *r.other_pids):
                if pid is not None:
                    by_pid.setdefault(pid, r)
        out = []
        for e in sorted(latest.values(), key=lambda e: (e.rank is None, e.rank or 0, e.pid or 0)):
            match = by_pid.get(e.pid) if e.pid is not None else None
            if match is None and e.rank is not None:
                same = [r for r in verdict.ranks if r.rank == e.rank and r.role in ("worker", "unknown")]
                match = same[0] if len(same) == 1 else None
            flight = e.attrs.get("in_flight")
            step = flight or e.attrs.get("last_step") or {}
            text = (f"in {e.attrs['in_flight_text']}" if flight else
                    f"between steps (step {step.get('step')} had completed)" if step else "before its first step")
            out.append(RankStep(key=match.key if match else None, rank=e.rank, pid=e.pid, step=step.get("step"),
                                phase=step.get("phase"), tokens=step.get("tokens"),
                                requests=tuple(tuple(r) for r in step.get("requests") or ()),
                                in_flight=bool(flight), reason=str(e.attrs.get("reason") or "?"), text=text,
                                source=e.source))
            verdict.explain(f"{who(e.rank, e.pid)} was {text} (capture snapshot {e.source}, written "
                            f"{'when execute_model raised' if e.attrs.get('reason') == 'exception' else e.attrs.get('reason')})"
                            + ("" if match else "; no process of the logs has its pid or rank"))
        verdict.steps = tuple(out)
