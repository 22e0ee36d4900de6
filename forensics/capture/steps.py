"""What one engine step was, read from vLLM's scheduler output by attribute access.

The scheduler output is vLLM's own object and changes between releases, so every field
is read with ``getattr`` and a default, and every container is walked defensively: a
field that is missing or of another shape leaves a fact out, never raises.  Nothing here
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
  flight; ``error``: the exception type when the step raised.
"""

from __future__ import annotations

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


def _num(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def step_facts(step: int, scheduler_output, max_requests: int) -> dict:
    """The facts of step ``step`` from its scheduler output (module docstring)."""
    facts: dict = {"step": step, "t0": round(time.time(), 6)}
    if scheduler_output is None:
        return facts
    scheduled = _get(scheduler_output, "num_scheduled_tokens")
    if not isinstance(scheduled, dict):
        scheduled = {}
    spec = _get(scheduler_output, "scheduled_spec_decode_tokens")
    if not isinstance(spec, dict):
        spec = {}
    starts: dict = {}
    prompts: dict = {}
    new = []
    for req in _ids(_get(scheduler_output, "scheduled_new_reqs"), 4 * max_requests):
        rid = _get(req, "req_id")
        if rid is None:
            continue
        new.append(str(rid))
        starts[rid] = _num(_get(req, "num_computed_tokens"))
        prompt = _get(req, "prompt_token_ids")
        try:
            prompts[str(rid)] = len(prompt) if prompt is not None else None
        except Exception:
            prompts[str(rid)] = None
    cached = _get(scheduler_output, "scheduled_cached_reqs")
    cached_ids = _ids(_get(cached, "req_ids"), 1 << 20)
    cached_computed = _ids(_get(cached, "num_computed_tokens"), 1 << 20)
    for i, rid in enumerate(cached_ids):
        starts[rid] = _num(cached_computed[i]) if i < len(cached_computed) else None
    requests = []
    for rid, tokens in scheduled.items():
        if len(requests) >= max_requests:
            break
        requests.append([str(rid), _num(tokens), starts.get(rid)])
    facts["requests"] = requests
    if len(scheduled) > len(requests):
        facts["more"] = len(scheduled) - len(requests)
    total = _num(_get(scheduler_output, "total_num_scheduled_tokens"))
    facts["tokens"] = total if total is not None else sum(t for t in scheduled.values() if _num(t) is not None)
    if new:
        facts["new"] = new[:max_requests]
        facts["prompt"] = {r: n for r, n in list(prompts.items())[:max_requests] if n is not None}
    facts["phase"] = phase(scheduled, spec)
    return facts


def phase(scheduled: dict, spec: dict) -> str:
    """prefill | decode | mixed | idle, from the tokens scheduled per request less its
    speculative ones (a decode with k draft tokens schedules 1 + k)."""
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
