"""What one engine step was, read from vLLM's scheduler output by attribute access.

The scheduler output is vLLM's own object and changes between releases, so every field
is read with ``getattr`` and a default: a field that is missing leaves a fact out, and
one of another shape that makes this raise loses the step's facts (Recorder.begin
catches it), never the step.  Nothing here
touches a tensor or the device (the context may be dead when a snapshot is written).

A step's facts, as plain JSON values:

- ``step``: the worker's own count of execute_model calls (1 = the first);
- ``phase``: ``prefill`` (every request scheduled more than one token past its
  speculative ones), ``decode`` (every request one), ``mixed``, or ``idle`` (none);
- ``requests``: ``[req_id, scheduled tokens, first position]`` per request, the first
  position being the request's computed tokens before this step (so a chunked prefill's
  chunk is ``[first, first + tokens)``), or None where vLLM did not say;
- ``new`` and ``prompt``: the requests first scheduled in this step, and their prompt
  lengths (a request whose chunk ends before its prompt does is still prefilling);
- ``tokens``: the step's total scheduled tokens; ``more``: requests left out past the cap;
- ``collectives``: ``{name: count}`` of the group coordinator's calls made during it;
- ``t0``/``t1``: wall-clock start and end (seconds since 1970), ``t1`` absent while in
  flight; ``error``: the exception type when the step raised;
- ``capture_us``: what recording this step cost the worker (microseconds, perf_counter
  around the plugin's own work): every real run measures the plugin's overhead.
"""

from __future__ import annotations

import itertools
import time

_NONE = object()


def _get(obj, name, default=None):
    try:
        value = getattr(obj, name, default)
    except Exception:       # a property of vLLM's that raises
        return default
    return default if value is _NONE else value


def _ids(value, cap: int) -> list:
    try:
        return list(value)[:cap] if value is not None else []
    except Exception:
        return []


def step_facts(step: int, scheduler_output, max_requests: int) -> dict:
    """The facts of step ``step`` from its scheduler output (module docstring).  This
    runs before every step, so the usual step (decodes of requests already running) costs
    a few attribute reads and C-level passes; the per-request Python work is for the
    requests new in the step and for the first ``max_requests`` of it.  Values are kept
    as vLLM gave them (the snapshot's serialiser and the reader check them)."""
    facts: dict = {"step": step, "t0": time.time()}
    if scheduler_output is None:
        return facts
    scheduled = getattr(scheduler_output, "num_scheduled_tokens", None)
    if not isinstance(scheduled, dict):
        scheduled = {}
    starts: dict = {}
    new_reqs = getattr(scheduler_output, "scheduled_new_reqs", None)
    if new_reqs:
        new, prompts = [], {}
        for req in _ids(new_reqs, max_requests):
            rid = _get(req, "req_id")
            if rid is None:
                continue
            new.append(rid)
            starts[rid] = _get(req, "num_computed_tokens")
            try:
                prompts[rid] = len(_get(req, "prompt_token_ids"))
            except Exception:
                pass
        if new:
            facts["new"] = new
            facts["prompt"] = prompts
    cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
    ids = getattr(cached, "req_ids", None)
    if ids:
        try:
            # one C-level pass, however many requests are decoding
            starts = {**dict(zip(ids, getattr(cached, "num_computed_tokens", None) or ())), **starts}
        except Exception:
            pass
    get = starts.get
    items = scheduled.items() if len(scheduled) <= max_requests else itertools.islice(scheduled.items(), max_requests)
    facts["requests"] = [[rid, tokens, get(rid)] for rid, tokens in items]
    if len(scheduled) > max_requests:
        facts["more"] = len(scheduled) - max_requests
    total = getattr(scheduler_output, "total_num_scheduled_tokens", None)
    facts["tokens"] = total if total is not None else _sum(scheduled)
    facts["phase"] = phase(scheduled, getattr(scheduler_output, "scheduled_spec_decode_tokens", None))
    return facts


def _sum(scheduled: dict):
    try:
        return sum(scheduled.values())
    except Exception:
        return None


def phase(scheduled: dict, spec: dict) -> str:
    """prefill | decode | mixed | idle, from the tokens scheduled per request less its
    speculative ones (a decode with k draft tokens schedules 1 + k).  Without draft
    tokens (the usual step) min and max over the counts decide it in C: a per-request
    Python loop over a batch of 256 decodes would cost more than the rest of the step's
    record."""
    if not scheduled:
        return "idle"
    if not isinstance(spec, dict):
        spec = {}
    if not spec:
        try:
            counts = scheduled.values()
            low, high = min(counts), max(counts)
            return "decode" if high <= 1 else "prefill" if low > 1 else "mixed"
        except Exception:
            pass
    kinds = set()
    for rid, tokens in scheduled.items():
        if not isinstance(tokens, int):
            continue
        try:
            drafts = len(spec.get(rid) or ())
        except Exception:
            drafts = 0
        kinds.add("decode" if tokens - drafts <= 1 else "prefill")
    if not kinds:
        return "idle"
    return kinds.pop() if len(kinds) == 1 else "mixed"
