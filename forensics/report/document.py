"""The report document: built once from a Case, read by every renderer.

It is the JSON report (schema forensics.report/1, shared/contract/report.schema.json:
at least what the contract requires, extra fields beside the required ones).  Terminal,
Markdown and HTML only turn it into output; none of them recomputes the verdict, picks
its own timeline or splits strings the rules built.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from forensics import __version__
from forensics.events import STORY, Event, Kind, Severity, clip
from forensics.verdict import Verdict, who

if TYPE_CHECKING:
    from forensics.case import Case

SCHEMA = "forensics.report/1"
TIMELINE_LIMIT = 400


def iso(value) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def build(case: "Case", timeline_limit: int | None = TIMELINE_LIMIT) -> dict:
    v = case.verdict
    return {
        "schema": SCHEMA,
        "tool": {"name": "forensics", "version": __version__},
        "headline": v.headline,
        "sources": [s.to_json() for s in case.sources],
        "inputs": {"given": case.walk.given, "files_seen": case.walk.files_seen, "readable": case.walk.readable,
                   "empty": case.walk.empty, "links_not_followed": case.walk.skipped_links},
        "ranks": [_rank(r, v.steps) for r in v.ranks],
        "verdict": _verdict(v),
        "environment": {k: _plain(val) for k, val in v.environment.items()},
        "environment_sources": dict(v.environment_sources),
        "signature": v.signature,
        "signature_site": v.signature_site,
        "signature_parts": [{"part": p.part, "value": p.value, "contributed": p.contributed, "why": p.why}
                            for p in v.signature_parts],
        "known_issues": [{"id": k.id, "title": k.title, "likelihood": k.likelihood, "matched": list(k.matched),
                          "unknown": list(k.unknown), "status": k.status, "references": list(k.references),
                          "workaround": k.workaround, "does_not_prove": k.does_not_prove} for k in v.known_issues],
        "next_steps": [f"{s.why}: {s.command}" if s.command else s.why for s in v.next_steps],
        "next_actions": [{"id": s.id, "title": s.title, "why": s.why, "command": s.command, "warnings": list(s.warnings)}
                         for s in v.next_steps],
        "checklist": [{"check": c.check, "status": c.status.value, "finding": c.finding, "evidence": c.evidence}
                      for c in v.checklist],
        "traffic": [t.to_json() for s in case.sources for t in s.traffic[:20]],
        "evidence": evidence_excerpts(case),
        "timeline": [event_json(e) for e in select_timeline(case.events, timeline_limit)],
        "stories": _stories(case),
        "input_summary": input_summary(case),
    }


def input_summary(case: "Case") -> dict:
    """What was read, in one sentence, and the inputs' problems (a pickle never loaded,
    a file cut short): when nothing was recognised, it says so and asks whether this is
    the right file."""
    sources = case.sources
    lines = sum(s.lines or 0 for s in sources)
    unparsed = sum(s.unparsed_lines or 0 for s in sources)
    events = sum(len(s.events) for s in sources)
    files = f"{len(sources)} input{'s' if len(sources) != 1 else ''}"
    if lines and not events and unparsed == lines:
        sentence = (f"Nothing recognised ({unparsed:,} of {lines:,} lines unparsed): is this the right file? "
                    "forensics formats lists what it reads")
    elif lines:
        sentence = f"Read {files}: {lines:,} lines, {events:,} events, {unparsed:,} lines unparsed"
    else:
        sentence = f"Read {files}: {events:,} events"
    problems = [p for s in sources for p in s.problems]
    return {"sentence": sentence, "inputs": len(sources), "lines": lines, "events": events, "unparsed": unparsed,
            "recognised": bool(events), "problems": problems[:20], "more_problems": max(0, len(problems) - 20)}


STORY_OBSERVATIONS = 40     # per process in the document; the rest are counted


def _stories(case: "Case") -> list[dict]:
    """Each process's story as the rules read it (--explain): which observation decided
    its status."""
    if case.stories is None:
        return []
    status = {r.key: r.status.value for r in case.verdict.ranks}
    out = []
    for story in case.stories.stories:
        seen = story.observations
        out.append({"key": story.key, "who": who(story.rank, story.pid, story.name or story.role),
                    "status": status.get(story.key),
                    "observations": [{"seen": o.seen.value, "what": o.event.message[:200], "source": o.event.where,
                                      "time": iso(o.event.time), "reported_by": o.reported_by}
                                     for o in seen[:STORY_OBSERVATIONS]],
                    "more": max(0, len(seen) - STORY_OBSERVATIONS)})
    return out


ORIGIN_UNKNOWN = ("the calls that reported it only reported an earlier asynchronous fault; no device evidence "
                  "names the kernel")


def _verdict(v: Verdict) -> dict:
    origin = v.origin
    return {
        "headline": v.headline,
        "failure_kind": v.failure_kind.value if v.failure_kind else None,
        "error": ({"code": v.error.code, "name": v.error.name, "sticky": v.error.error.sticky,
                   "runtime_name": v.error.error.runtime_name, "message": v.error.error.message,
                   "meaning": v.error.error.meaning, "reported_at": v.error.reported_at,
                   "relayed_only": v.error.relayed_only, "surfaced_as": v.error.cause_of,
                   "from_device_exception": v.error.from_device} if v.error else None),
        "surfaces": [{"who": who(s.rank, s.pid, s.name), "rank": s.rank, "pid": s.pid, "api": s.api, "file": s.file, "line": s.line,
                      "function": s.function, "time": iso(s.time), "source": s.source, "exception": s.exception,
                      "how": s.how, "also_seen_in": list(s.also_seen_in), "error_code": s.error_code,
                      "graph_replay": s.graph_replay, "caller": s.caller} for s in v.surfaces],
        # the capture plugin's step in flight per rank: what each ran, never an origin
        "steps": [{"who": who(s.rank, s.pid), "key": s.key, "rank": s.rank, "pid": s.pid, "step": s.step,
                   "phase": s.phase, "tokens": s.tokens, "requests": [list(r) for r in s.requests],
                   "in_flight": s.in_flight, "reason": s.reason, "text": s.text, "source": s.source}
                  for s in v.steps],
        # the contract: origin is null unless evidence names the kernel
        "origin": ({"who": who(origin.rank, origin.pid, origin.name), "rank": origin.rank, "pid": origin.pid, "kernel": origin.kernel, "fault": origin.fault,
                    "location": origin.location, "launch_site": origin.launch_site,
                    "address": origin.address, "confidence": origin.confidence.value, "notes": list(origin.notes),
                    "evidence": [{"kind": e.kind, "source": e.source, "text": e.text} for e in origin.evidence]}
                   if origin is not None and origin.kernel else None),
        # the one sentence every renderer shows when no origin is known (none writes its own)
        "origin_unknown": (ORIGIN_UNKNOWN + (" (see next steps)" if v.next_steps else "")
                           if origin is None and v.error is not None and v.error.error.sticky else None),
        "faulting_process": ({"who": who(origin.rank, origin.pid, origin.name), "rank": origin.rank, "pid": origin.pid, "fault": origin.fault, "address": origin.address,
                              "confidence": origin.confidence.value, "notes": list(origin.notes),
                              "evidence": [{"kind": e.kind, "source": e.source, "text": e.text} for e in origin.evidence]}
                             if origin is not None and not origin.kernel else None),
        "first_failure": ({"who": (who(v.first_failure.rank, v.first_failure.pid, v.first_failure.name)
                                   if v.first_failure.key is not None or v.first_failure.rank is not None
                                   or v.first_failure.pid is not None else "undecided"), "key": v.first_failure.key, "rank": v.first_failure.rank, "pid": v.first_failure.pid, "time": iso(v.first_failure.time),
                           "basis": v.first_failure.basis, "what": v.first_failure.what,
                           "launcher_opinion": v.first_failure.launcher_opinion} if v.first_failure else None),
        "collateral": list(v.collateral),
        "hang": ({"collective": v.hang.collective, "seq": v.hang.seq, "waited": list(v.hang.waited),
                  "suspects": list(v.hang.suspects), "culprit_doing": v.hang.culprit_doing, "basis": v.hang.basis,
                  "group": v.hang.group, "culprit_how": v.hang.culprit_how, "called_at": v.hang.called_at,
                  "evidence": list(v.hang.evidence)} if v.hang else None),
        "hardware": ({"opinion": v.hardware.opinion, "basis": v.hardware.basis, "settle": v.hardware.settle}
                     if v.hardware else None),
        "summary": v.summary,
        "notes": list(v.notes),
        "rule_failures": list(v.rule_failures),
        "explanation": [{"rule": rule, "text": text} for rule, text in v.explanations],
    }


def _rank(r, steps=()) -> dict:
    step = next((s for s in steps if s.key == r.key), None)
    return {"in_step": step.text if step else None, "who": who(r.rank, r.pid, r.name or r.role), "key": r.key, "rank": r.rank, "pid": r.pid, "role": r.role, "status": r.status.value, "exit_code": r.exit_code,
            "name": r.name, "host": r.host, "other_pids": list(r.other_pids), "first_error": r.first_error,
            "first_error_source": r.first_error_source, "failure": r.failure}


def select_timeline(events: list[Event], limit: int | None) -> list[Event]:
    """The story: every failure-related event and every warning or error, each once (a
    per-rank log repeats what the server console relayed), up to ``limit`` entries
    around the first failure."""
    chosen, seen = [], set()
    for e in events:
        if e.kind not in STORY and e.severity < Severity.WARNING:
            continue
        key = (e.pid, e.rank, e.kind, e.message, e.time)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(e)
    if limit is not None and len(chosen) > limit:
        first = next((i for i, e in enumerate(chosen) if e.kind in (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM,
                                                                      Kind.FATAL_SIGNAL, Kind.XID)), 0)
        start = max(0, min(first - limit // 4, len(chosen) - limit))
        chosen = chosen[start:start + limit]
    return chosen


def event_json(e: Event) -> dict:
    return {"time": iso(e.time), "rank": e.rank, "pid": e.pid, "role": e.role, "process": e.process,
            "kind": e.kind.value, "severity": e.severity.name, "message": clip(e.message, 500), "source": e.where,
            "time_inferred": e.time_inferred, "untimed": e.time is None}


def _plain(value: Any):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


EXCERPT_LINES = 40


def evidence_excerpts(case: "Case") -> list[dict]:
    """The lines behind the verdict, most important first: origin evidence, each
    surface, the first error of each collateral or unknown process."""
    v = case.verdict
    by_where = {e.where: e for e in case.events}
    wanted: list[tuple[str, Event]] = []
    seen: set[str] = set()

    def add(label: str, where: str | None) -> None:
        event = by_where.get(where) if where else None
        if event is not None and event.where not in seen:
            seen.add(event.where)
            wanted.append((label, event))

    if v.origin is not None:
        for ref in v.origin.evidence:
            add(f"origin evidence ({ref.kind})", ref.source)
    for s in v.surfaces:
        add(f"surface on {who(s.rank, s.pid, s.name)}", s.source)
    for r in v.ranks:
        if r.first_error_source and r.status.value in ("collateral", "unknown", "surfaced", "failed"):
            add(f"{'rank ' + str(r.rank) if r.rank is not None else (r.name or r.role)}: {r.status.value}",
                r.first_error_source)
    # the same report from several processes (every collateral rank's "Connection closed
    # by peer") is shown once, under all their labels
    out: list[dict] = []
    by_shape: dict[str, dict] = {}
    for label, event in wanted:
        text = excerpt(event)
        shape = _DIGITS.sub("0", text)
        if shape in by_shape and not label.startswith(("origin", "surface")):
            merged = by_shape[shape]
            merged["label"] += f", {label}"
            merged.setdefault("also", []).append(event.where)
            continue
        entry = {"label": label, "source": event.where, "text": text}
        by_shape.setdefault(shape, entry)
        out.append(entry)
    return out[:24]


_DIGITS = re.compile(r"\d+")


def excerpt(event: Event) -> str:
    chain = event.chain
    if not chain:
        return clip(event.message, 4000)
    lines = []
    for exc in chain:
        if exc.chained_by == "cause":
            lines += ["", "The above exception was the direct cause of the following exception:", ""]
        elif exc.chained_by == "context":
            lines += ["", "During handling of the above exception, another exception occurred:", ""]
        if exc.unraisable_in:
            lines.append(f"Exception ignored in: {exc.unraisable_in}")
        if not exc.header_missing:
            lines.append("Traceback (most recent call last):")
        for f in exc.frames:
            lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
            if f.code:
                lines.append(f"    {f.code}")
        if exc.type:
            lines.append(f"{exc.type}: {exc.message}".rstrip(": ") if exc.message else exc.type)
    return "\n".join(lines[-EXCERPT_LINES:])
