"""The JSON report (``forensics analyze --format json``), schema forensics.report/1.

Carries at least what shared/contract/report.schema.json requires; extra fields are
added beside the required ones, never in their place.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from forensics import __version__
from forensics.events import Event, Kind, Severity

if TYPE_CHECKING:
    from forensics.case import Case

SCHEMA = "forensics.report/1"
TIMELINE_KINDS_ALWAYS = {Kind.CUDA_ERROR, Kind.TRACEBACK, Kind.XID, Kind.SANITIZER, Kind.CUDA_GDB,
                         Kind.CORE_DUMP, Kind.WORKER_DIED, Kind.ENGINE_FATAL, Kind.ENGINE_DEAD,
                         Kind.PEER_FAILURE, Kind.NCCL, Kind.HTTP, Kind.EXIT, Kind.DEVICE_ASSERT,
                         Kind.OOM, Kind.FATAL_SIGNAL, Kind.SCHEDULER_DUMP, Kind.ENGINE_WORKER_FAILED,
                         Kind.WORKER_EXCEPTION, Kind.PARENT_EXITED}


def iso(value) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def build(case: "Case", timeline_limit: int | None = 400) -> dict:
    ctx = case.context
    verdict = {
        "error": ({"code": ctx.error.code, "name": ctx.error.name, "sticky": ctx.error.sticky,
                   "runtime_name": ctx.error.runtime_name, "message": ctx.error.message,
                   "meaning": ctx.error.meaning,
                   "reported_at": ctx.error_event.where if ctx.error_event else None}
                  if ctx.error else None),
        "failure_kind": ctx.failure_kind,
        "surfaces": [{
            "rank": s.rank, "pid": s.pid, "api": s.api, "file": s.file, "line": s.line,
            "function": s.function, "time": iso(s.time), "source": s.source,
            "exception": s.exception, "how": s.how, "also_seen_in": s.also_seen_in,
            "error_code": s.error.code if s.error else None,
        } for s in ctx.surfaces],
        "origin": ({"rank": ctx.origin.rank, "pid": ctx.origin.pid, "kernel": ctx.origin.kernel,
                    "fault": ctx.origin.fault, "address": ctx.origin.address,
                    "evidence": ctx.origin.evidence, "confidence": ctx.origin.confidence,
                    "notes": ctx.origin.notes} if ctx.origin else None),
        "first_failure": ({"rank": ctx.first_failure.rank, "pid": ctx.first_failure.pid,
                           "time": iso(ctx.first_failure.time), "basis": ctx.first_failure.basis}
                          if ctx.first_failure else None),
        "collateral": sorted({v.rank for v in ctx.ranks.values()
                              if v.status == "collateral" and v.rank is not None}),
        "summary": ctx.summary,
        "explanation": [{"rule": rule, "text": text} for rule, text in ctx.explanations],
    }
    return {
        "schema": SCHEMA,
        "tool": {"name": "forensics", "version": __version__},
        "sources": [s.to_json() for s in case.sources],
        "ranks": [{
            "rank": v.rank, "pid": v.pid, "role": v.role, "status": v.status,
            "exit_code": v.exit_code, "name": v.name, "first_error": v.first_error,
            "first_error_source": v.first_error_source, "failure": v.failure,
        } for v in ctx.ranks.values()],
        "verdict": verdict,
        "environment": {k: _plain(v) for k, v in ctx.environment.items()},
        "environment_sources": ctx.environment_sources,
        "signature": ctx.signature,
        "signature_parts": ctx.signature_parts,
        "known_issues": ctx.known_issues,
        "next_steps": ctx.next_steps,
        "checklist": ctx.checklist,
        "timeline": [_event(e) for e in select_timeline(case.events, timeline_limit)],
    }


def select_timeline(events: list[Event], limit: int | None) -> list[Event]:
    """Every failure-related event, plus warnings and errors, up to ``limit`` entries."""
    chosen = [e for e in events if e.kind in TIMELINE_KINDS_ALWAYS or e.severity >= Severity.WARNING]
    if limit is not None and len(chosen) > limit:
        chosen = chosen[:limit // 2] + chosen[-(limit - limit // 2):]
    return chosen


def _event(e: Event) -> dict:
    return {"time": iso(e.time), "rank": e.rank, "pid": e.pid, "role": e.role, "kind": e.kind,
            "severity": e.severity.name, "message": e.message[:500], "source": e.where,
            "time_inferred": e.time_inferred}


def _plain(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)
