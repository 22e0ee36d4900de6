"""The capture plugin's snapshots (forensics/capture/) -> events.

One ``CAPTURE_SNAPSHOT`` event per snapshot: the rank and pid that wrote it, the step it
was in (number, phase, requests with their tokens and first positions) and why it was
written; and one ``CAPTURE_STEP`` event per completed step of its ring, for the timeline
when asked.  The snapshot's own exception is kept as an attribute, never made an
exception event: the worker's console already reports it first-hand, and a snapshot is
what the worker was running, not evidence of what faulted - so it never names an origin.

A snapshot is JSON that this project's plugin wrote, but a file is data: it is read whole
under a size cap (data/capture.toml [snapshot]), its nesting bounded, its numbers checked,
and a snapshot that is not of the schema is a problem line of its input, nothing kept.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from forensics import knowledge
from forensics.events import Event, Frame, Kind, Severity, freeze
from forensics.inputs.sources import Source
from forensics.parsers import boundedjson
from forensics.parsers.base import ParsedSource

KIND = "vllm-capture"
_EPOCH = datetime(1970, 1, 1)


class SnapshotRefused(ValueError):
    pass


@functools.lru_cache(maxsize=None)
def _spec() -> dict:
    return knowledge.load("capture")["snapshot"]


def _time(seconds) -> datetime | None:
    """Seconds since 1970 (the worker's wall clock) as the UTC reading; None outside the
    years a log could be from."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 946_684_800 <= seconds < 7_258_118_400:
        return None
    return _EPOCH + timedelta(microseconds=int(seconds * 1_000_000))


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and -(1 << 62) < value < (1 << 62) else None


def _text(value, limit: int = 200) -> str | None:
    return str(value)[:limit] if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def load(data: bytes) -> dict:
    """The snapshot ``data`` holds; SnapshotRefused when it is not one."""
    spec = _spec()
    try:
        value = boundedjson.loads(data, spec["max_depth"])
    except boundedjson.JsonRefused as exc:
        raise SnapshotRefused(str(exc)) from None
    if not isinstance(value, dict) or value.get("schema") != spec["schema"]:
        raise SnapshotRefused(f"not a {spec['schema']} snapshot")
    return value


@dataclass(frozen=True)
class Step:
    """One engine step as the snapshot gives it (forensics/capture/steps.py)."""

    number: int | None
    phase: str | None
    tokens: int | None
    requests: tuple[tuple[str, int | None, int | None], ...]   # (request id, tokens scheduled, first position)
    more: int = 0                  # requests past the plugin's cap
    prompts: tuple[tuple[str, int], ...] = ()   # (request id, prompt length) of the requests new in it
    started: datetime | None = None
    ended: datetime | None = None
    error: str | None = None
    collectives: tuple[tuple[str, int], ...] = ()

    def text(self) -> str:
        """"step 12 (prefill, 1 request: cmpl-1 512 tokens from 512)"."""
        count = len(self.requests) + self.more
        words = [self.phase or "phase unknown", f"{count} request{'s' if count != 1 else ''}"]
        if self.requests:
            shown = ", ".join(f"{rid} {tokens if tokens is not None else '?'} token{'s' if tokens != 1 else ''}"
                              + (f" from {start}" if start is not None else "")
                              for rid, tokens, start in self.requests[:3])
            rest = count - min(3, len(self.requests))
            words[-1] += ": " + shown + (f" and {rest} more" if rest > 0 else "")
        return f"step {self.number if self.number is not None else '?'} ({', '.join(words)})"


def step_of(value) -> Step | None:
    if not isinstance(value, dict):
        return None
    requests = []
    for item in value.get("requests") or ():
        if isinstance(item, list) and item and _text(item[0]) is not None:
            requests.append((_text(item[0]), _int(item[1]) if len(item) > 1 else None,
                             _int(item[2]) if len(item) > 2 else None))
    prompts = value.get("prompt") if isinstance(value.get("prompt"), dict) else {}
    collectives = value.get("collectives") if isinstance(value.get("collectives"), dict) else {}
    return Step(number=_int(value.get("step")), phase=_text(value.get("phase"), 16), tokens=_int(value.get("tokens")),
                requests=tuple(requests), more=max(0, _int(value.get("more")) or 0),
                prompts=tuple((str(k)[:200], n) for k, n in prompts.items() if _int(n) is not None),
                started=_time(value.get("t0")), ended=_time(value.get("t1")), error=_text(value.get("error"), 120),
                collectives=tuple((str(k)[:64], n) for k, n in collectives.items() if _int(n) is not None))


def _frames(value) -> tuple[Frame, ...]:
    out = []
    for item in (value or ())[:128] if isinstance(value, list) else ():
        if isinstance(item, list) and len(item) >= 3:
            out.append(Frame(file=_text(item[0], 500) or "?", line=_int(item[1]), function=_text(item[2])))
    return tuple(out)


# why the snapshot was written, in words (data: the plugin's reasons)
REASONS = {
    "exception": "when execute_model raised",
    "exit": "at exit",
    "live": "before the step ran (the process wrote nothing after it: killed, a fatal signal, or still running)",
}


class CaptureSnapshotParser:
    """``vllm-capture`` inputs (forensics-snapshot-rank<R>-pid<P>.json) -> events."""

    def parse(self, source: Source) -> ParsedSource:
        out = ParsedSource(source.relpath, KIND, lines=None, unparsed_lines=None, size=source.size)
        cap = _spec()["max_bytes"]
        try:
            with source.open_binary() as stream:
                data = stream.read(cap + 1)
            if len(data) > cap:
                raise SnapshotRefused(f"larger than the {cap:,} bytes a snapshot may have")
            doc = load(data)
        except SnapshotRefused as exc:
            out.problems.append(f"{source.relpath}: capture snapshot refused: {exc}")
            return out
        except (OSError, EOFError) as exc:
            out.problems.append(f"{source.relpath}: cannot read the capture snapshot ({exc})")
            return out
        out.events.extend(events(doc, source.relpath))
        return out


def events(doc: dict, relpath: str) -> list[Event]:
    """The snapshot's events: the snapshot (the step in flight) and its ring's steps."""
    rank, pid = _int(doc.get("rank")), _int(doc.get("pid"))
    reason = _text(doc.get("reason"), 32) or "?"
    in_flight = step_of(doc.get("in_flight"))
    steps = [s for s in (step_of(v) for v in (doc.get("steps") or ())[:4096]) if s is not None] \
        if isinstance(doc.get("steps"), list) else []
    if reason == "live" and doc.get("done") == 1 and in_flight is not None:
        # the live record's step had returned: the worker was between steps
        steps.append(in_flight)
        in_flight = None
    error = doc.get("error") if isinstance(doc.get("error"), dict) else {}
    written = _time(doc.get("written"))
    who = f"rank {rank}" if rank is not None else f"pid {pid}" if pid is not None else "a worker"
    if in_flight is not None:
        message = f"{who} was in {in_flight.text()} - capture snapshot written {REASONS.get(reason, reason)}"
    else:
        last = steps[-1] if steps else None
        message = (f"{who} was between steps (the last, {last.text()}, had completed) - capture snapshot written "
                   f"{REASONS.get(reason, reason)}" if last else
                   f"{who} had run no step - capture snapshot written {REASONS.get(reason, reason)}")
    if error:
        message += f" ({_text(error.get('type'), 120) or 'an exception'})"
    startup = doc.get("startup") if isinstance(doc.get("startup"), dict) else {}
    threads = doc.get("threads") if isinstance(doc.get("threads"), list) else []
    attrs = {
        "reason": reason, "written": written.isoformat() if written else None, "host": _text(doc.get("host")),
        "local_rank": _int(doc.get("local_rank")), "steps_seen": _int(doc.get("steps_seen")),
        "in_flight": _plain(in_flight), "in_flight_text": in_flight.text() if in_flight else None,
        "last_step": _plain(steps[-1]) if steps else None, "ring_steps": len(steps),
        "error_type": _text(error.get("type"), 120), "error_message": _text(error.get("message"), 500),
        "error_frames": _frames(error.get("frames")) or None,
        "threads": tuple({"name": _text(t.get("name")), "frames": _frames(t.get("frames"))}
                         for t in threads[:64] if isinstance(t, dict)) or None,
        "capture_cost": _flat(doc.get("cost")),
        "versions": _flat(startup.get("versions")), "config": _flat(startup.get("config")),
        "startup_environment": _flat(startup.get("environment")),
    }
    time = (in_flight.started if in_flight else None) or written
    out = [Event(kind=Kind.CAPTURE_SNAPSHOT, message=message, source=relpath, line=0,
                 severity=Severity.WARNING if in_flight is not None else Severity.INFO,
                 rank=rank, pid=pid, role="worker", seq=0, time=time, attrs=freeze(attrs))]
    for i, step in enumerate(steps, start=1):
        out.append(Event(kind=Kind.CAPTURE_STEP, message=f"{who} ran {step.text()}"
                         + (f", raised {step.error}" if step.error else ""), source=relpath, line=0,
                         severity=Severity.INFO, rank=rank, pid=pid, role="worker", seq=i, time=step.started,
                         attrs=freeze({"step": _plain(step)})))
    return out


def _plain(step: Step | None) -> dict | None:
    if step is None:
        return None
    return {"step": step.number, "phase": step.phase, "tokens": step.tokens,
            "requests": tuple(step.requests), "more": step.more, "prompts": step.prompts,
            "started": step.started.isoformat() if step.started else None,
            "ended": step.ended.isoformat() if step.ended else None, "error": step.error,
            "collectives": step.collectives}


def _flat(value) -> dict | None:
    if not isinstance(value, dict):
        return None
    out = {str(k)[:64]: v for k, v in list(value.items())[:64] if isinstance(v, (str, int, float, bool))}
    return {k: (v[:200] if isinstance(v, str) else v) for k, v in out.items()} or None
