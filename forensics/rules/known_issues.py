"""Matching the crash against the known-issue knowledge base."""

from __future__ import annotations

import re

from forensics import kb
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.verdict import KnownIssueMatch

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
    reads = ("error", "failure_kind", "surfaces", "origin", "environment", "ranks")
    writes = ("known_issues",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        entries = evidence.kb_entries or kb.builtin()
        found = []
        for entry in entries:
            result = match(entry, evidence, verdict)
            if result is not None:
                found.append(result)
                verdict.explain(f"Matches known issue {entry.id} ({result.likelihood}): {'; '.join(result.matched)}.")
        found.sort(key=lambda m: m.likelihood != "likely")
        verdict.known_issues = tuple(found)


def match(entry: kb.KnownIssue, evidence: Evidence, verdict) -> KnownIssueMatch | None:
    matched: list[str] = []
    unknown: list[str] = []
    error, kind = verdict.error, verdict.failure_kind
    if entry.errors:
        if error is None or error.name not in entry.errors:
            return None
        matched.append(f"error {error.name}")
    if entry.failure_kinds:
        if kind is None or kind.value not in entry.failure_kinds:
            return None
        matched.append(f"failure {kind.value}")
    if entry.alternatives:
        hit = next((alt for alt in entry.alternatives if _alternative_holds(alt, evidence, verdict)), None)
        if hit is None:
            return None
        matched.append(hit.get("why", "evidence"))
    phase = verdict.environment.get("phase")
    if entry.phases:
        if phase in entry.phases:
            matched.append(f"phase {phase}")
        elif phase is None:
            unknown.append("phase")
        else:
            return None
    for key, condition in entry.environment.items():
        value = _env_value(verdict.environment, key)
        if value is None:
            unknown.append(key)
            continue
        ok = kb.version_in(str(value), condition) if key in kb.VERSION_KEYS else bool(re.search(condition, str(value)))
        if not ok:
            return None
        matched.append(f"{key}={value}")
    return KnownIssueMatch(id=entry.id, title=entry.title, likelihood="possible" if unknown else "likely",
                           matched=tuple(matched), unknown=tuple(unknown), status=entry.status,
                           references=tuple(entry.references), workaround=entry.workaround,
                           does_not_prove=entry.does_not_prove)


def _env_value(environment, key: str):
    for alias in ENV_ALIASES.get(key, (key,)):
        if environment.get(alias) not in (None, ""):
            return environment[alias]
    return None


def _alternative_holds(alt: dict, evidence: Evidence, verdict) -> bool:
    checks = []
    if any(k in alt for k in ("surface_file", "surface_function", "surface_api")):
        checks.append(any(
            (not alt.get("surface_file") or (s.file and re.search(alt["surface_file"], s.file)))
            and (not alt.get("surface_function") or (s.function and re.search(alt["surface_function"], s.function)))
            and (not alt.get("surface_api") or s.api == alt["surface_api"])
            for s in verdict.surfaces))
    if "origin_kernel" in alt:
        origin = verdict.origin
        checks.append(bool(origin and origin.kernel and re.search(alt["origin_kernel"], origin.kernel)))
    if "message" in alt:
        pattern = re.compile(alt["message"])
        checks.append(any(pattern.search(e.message) for e in evidence.events))
    if "phase" in alt:
        checks.append(verdict.environment.get("phase") == alt["phase"])
    if "worker_exit_code" in alt:
        checks.append(any(v.exit_code == alt["worker_exit_code"] for v in verdict.ranks if v.role == "worker"))
    return bool(checks) and all(checks)
