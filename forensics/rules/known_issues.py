"""Matching the crash against the known-issue knowledge base."""

from __future__ import annotations

import re

from forensics import kb
from forensics.rules.base import Context, Rule

ENV_ALIASES = {"flashinfer_allreduce_backend": ("flashinfer_allreduce_backend", "all_reduce_backend",
                                                "allreduce_backend")}


class KnownIssues(Rule):
    """Matches the verdict against each knowledge-base entry: the entry's error names
    and failure kinds must fit, one of its evidence alternatives must hold (surface
    site, origin kernel, a log message, the phase, a worker's exit code), and every
    environment condition that the inputs reveal must hold (version ranges, backends).
    Conditions the inputs cannot answer leave the match "possible" rather than "likely".
    Each match carries what it does not prove."""

    name = "known-issues"

    def apply(self, ctx: Context) -> None:
        entries = ctx.kb_entries if ctx.kb_entries is not None else kb.builtin()
        for entry in entries:
            result = match(entry, ctx)
            if result:
                ctx.known_issues.append(result)
                ctx.explain(self, f"Matches known issue {entry.id} ({result['likelihood']}): "
                                  f"{'; '.join(result['matched'])}.")


def match(entry: kb.KnownIssue, ctx: Context) -> dict | None:
    matched, unknown = [], []
    if entry.errors:
        if ctx.error is None or ctx.error.name not in entry.errors:
            return None
        matched.append(f"error {ctx.error.name}")
    if entry.failure_kinds:
        if ctx.failure_kind not in entry.failure_kinds:
            return None
        matched.append(f"failure {ctx.failure_kind}")
    if entry.alternatives:
        hit = next((alt for alt in entry.alternatives if _alternative_holds(alt, ctx)), None)
        if hit is None:
            return None
        matched.append(hit.get("why", "evidence"))
    phase = ctx.environment.get("phase")
    if entry.phases:
        if phase in entry.phases:
            matched.append(f"phase {phase}")
        elif phase in (None, "unknown"):
            unknown.append("phase")
        else:
            return None
    for key, condition in entry.environment.items():
        value = _env_value(ctx, key)
        if value is None:
            unknown.append(key)
            continue
        ok = kb.version_in(str(value), condition) if key in kb.VERSION_KEYS else \
            bool(re.search(condition, str(value)))
        if not ok:
            return None
        matched.append(f"{key}={value}")
    return {
        "id": entry.id, "title": entry.title, "likelihood": "possible" if unknown else "likely",
        "matched": matched, "unknown": unknown, "status": entry.status, "references": list(entry.references),
        "workaround": entry.workaround, "does_not_prove": entry.does_not_prove,
    }


def _env_value(ctx: Context, key: str):
    for alias in ENV_ALIASES.get(key, (key,)):
        if ctx.environment.get(alias) not in (None, ""):
            return ctx.environment[alias]
    return None


def _alternative_holds(alt: dict, ctx: Context) -> bool:
    checks = []
    if any(k in alt for k in ("surface_file", "surface_function", "surface_api")):
        checks.append(any(
            (not alt.get("surface_file") or (s.file and re.search(alt["surface_file"], s.file)))
            and (not alt.get("surface_function") or (s.function and re.search(alt["surface_function"], s.function)))
            and (not alt.get("surface_api") or s.api == alt["surface_api"])
            for s in ctx.surfaces))
    if "origin_kernel" in alt:
        checks.append(bool(ctx.origin and re.search(alt["origin_kernel"], ctx.origin.kernel)))
    if "message" in alt:
        pattern = re.compile(alt["message"])
        checks.append(any(pattern.search(e.message) for e in ctx.events))
    if "phase" in alt:
        checks.append(ctx.environment.get("phase") == alt["phase"])
    if "worker_exit_code" in alt:
        checks.append(any(v.exit_code == alt["worker_exit_code"] for v in ctx.ranks.values() if v.role == "worker"))
    return bool(checks) and all(checks)
