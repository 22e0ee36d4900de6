"""The known-issue knowledge base: one TOML file per issue (forensics/data/known_issues/
and any ``--kb DIR`` a user adds), validated on load, matched by rules/known_issues.py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from forensics.knowledge import tomllib

REQUIRED = ("id", "title", "status", "references", "workaround", "does_not_prove", "match")
ALTERNATIVE_KEYS = {"why", "surface_file", "surface_function", "surface_api", "origin_kernel", "message",
                    "phase", "worker_exit_code"}
VERSION_KEYS = {"vllm", "flashinfer", "torch", "cuda", "driver"}


class KnowledgeBaseError(ValueError):
    """A knowledge-base entry that cannot be used; the message says which and how to fix it."""


@dataclass(frozen=True)
class KnownIssue:
    id: str
    title: str
    status: str
    references: tuple[str, ...]
    workaround: str
    does_not_prove: str
    errors: tuple[str, ...] = ()
    failure_kinds: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    alternatives: tuple[dict, ...] = ()
    environment: dict = field(default_factory=dict)
    path: str = ""


def load_entry(text: str, origin: str) -> KnownIssue:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KnowledgeBaseError(f"{origin}: not valid TOML ({exc}); fix the syntax") from None
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise KnowledgeBaseError(f"{origin}: missing {', '.join(missing)}; every entry needs {', '.join(REQUIRED)}")
    match = data["match"]
    alternatives = tuple(match.get("any", ()))
    for alt in alternatives:
        unknown = set(alt) - ALTERNATIVE_KEYS
        if unknown:
            raise KnowledgeBaseError(f"{origin}: unknown match key(s) {', '.join(sorted(unknown))}; "
                                     f"use {', '.join(sorted(ALTERNATIVE_KEYS))}")
        for key in ("surface_file", "surface_function", "origin_kernel", "message"):
            if key in alt:
                _compile(alt[key], origin, key)
    environment = dict(match.get("environment", {}))
    for key, value in environment.items():
        if key in VERSION_KEYS:
            try:
                SpecifierSet(value)
            except InvalidSpecifier:
                raise KnowledgeBaseError(f"{origin}: environment.{key} = {value!r} is not a version range "
                                         "such as '>=0.25,<0.31.1'") from None
        else:
            _compile(value, origin, f"environment.{key}")
    if not (alternatives or match.get("errors") or match.get("failure_kinds")):
        raise KnowledgeBaseError(f"{origin}: [match] names no evidence (errors, failure_kinds or [[match.any]])")
    return KnownIssue(id=data["id"], title=data["title"], status=data["status"],
                      references=tuple(data["references"]), workaround=data["workaround"],
                      does_not_prove=data["does_not_prove"], errors=tuple(match.get("errors", ())),
                      failure_kinds=tuple(match.get("failure_kinds", ())), phases=tuple(match.get("phases", ())),
                      alternatives=alternatives, environment=environment, path=origin)


def _compile(pattern: str, origin: str, key: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise KnowledgeBaseError(f"{origin}: {key} is not a valid regular expression ({exc})") from None


@functools.lru_cache(maxsize=None)
def builtin() -> tuple[KnownIssue, ...]:
    folder = resources.files("forensics.data").joinpath("known_issues")
    entries = [load_entry(item.read_text(encoding="utf-8"), f"known_issues/{item.name}")
               for item in sorted(folder.iterdir(), key=lambda i: i.name) if item.name.endswith(".toml")]
    return tuple(entries)


def load_dirs(dirs: list[str]) -> tuple[KnownIssue, ...]:
    """Built-in entries plus every *.toml in the user's directories (theirs win on id)."""
    entries = {e.id: e for e in builtin()}
    for folder in dirs:
        path = Path(folder)
        if not path.is_dir():
            raise KnowledgeBaseError(f"--kb {folder}: not a directory; give a folder of *.toml entries")
        for item in sorted(path.glob("*.toml")):
            entry = load_entry(item.read_text(encoding="utf-8"), str(item))
            entries[entry.id] = entry
    return tuple(entries.values())


def version_in(value: str, spec: str) -> bool:
    try:
        return SpecifierSet(spec).contains(value, prereleases=True)
    except Exception:  # noqa: BLE001 - an unparsable version is "unknown", not a crash
        return False
