"""Knowledge as data: the catalogues under forensics/data/*.toml, loaded once.

Nothing in here knows about a particular crash; each catalogue is reviewed like code and
has its own tests (tests/test_knowledge.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    text = resources.files("forensics.data").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


# --- CUDA errors -----------------------------------------------------------------------

@dataclass(frozen=True)
class CudaError:
    code: int
    name: str              # CUresult name, CUDA_ERROR_ILLEGAL_ADDRESS
    runtime_name: str      # cudaError name, cudaErrorIllegalAddress
    message: str           # cudaGetErrorString text
    sticky: bool
    meaning: str = ""


@functools.lru_cache(maxsize=None)
def cuda_errors() -> tuple[CudaError, ...]:
    return tuple(CudaError(**entry) for entry in load("cuda_errors")["error"])


def find_cuda_error(text: str) -> CudaError | None:
    """The catalogue entry a message names, by code, either name, or runtime string."""
    for pattern in _cuda_error_patterns():
        match = pattern.search(text)
        if match:
            return _lookup(match.group("key"))
    return None


@functools.lru_cache(maxsize=None)
def _cuda_error_patterns() -> tuple[re.Pattern, ...]:
    patterns = [re.compile(p) for p in load("cuda_errors")["recognise"]["patterns"]]
    # Last resort: the runtime's own message strings, wherever they appear.
    messages = sorted((re.escape(e.message) for e in cuda_errors()), key=len, reverse=True)
    patterns.append(re.compile("(?P<key>" + "|".join(messages) + ")"))
    return tuple(patterns)


@functools.lru_cache(maxsize=None)
def _index() -> dict[str, CudaError]:
    index: dict[str, CudaError] = {}
    for err in cuda_errors():
        for key in (str(err.code), err.name, err.runtime_name, err.message):
            index.setdefault(key.lower(), err)
    return index


def _lookup(key: str) -> CudaError | None:
    key = key.strip().strip("'\"").lower()
    return _index().get(key)


# --- Surface APIs and frames to skip -------------------------------------------------

@dataclass(frozen=True)
class SurfaceApi:
    api: str
    pattern: re.Pattern
    what: str


@functools.lru_cache(maxsize=None)
def surface_apis() -> tuple[SurfaceApi, ...]:
    return tuple(SurfaceApi(e["api"], re.compile(e["pattern"]), e["what"])
                 for e in load("surface_apis")["api"])


@functools.lru_cache(maxsize=None)
def error_check_frames() -> tuple[re.Pattern, ...]:
    """Functions that only translate an error into an exception (checkCudaErrors ...)."""
    return tuple(re.compile(p) for p in load("surface_apis")["skip"]["functions"])


@functools.lru_cache(maxsize=None)
def library_internal_files() -> tuple[re.Pattern, ...]:
    """Library files whose caller is the more useful surface site."""
    return tuple(re.compile(p) for p in load("surface_apis")["skip"]["files"])


# --- Log messages ------------------------------------------------------------------------

@dataclass(frozen=True)
class MessagePattern:
    id: str
    kind: str
    pattern: re.Pattern
    triggers: tuple[str, ...]
    severity: str | None = None
    applies_to: str = "any"        # any | raw | record


@functools.lru_cache(maxsize=None)
def message_patterns() -> tuple[MessagePattern, ...]:
    out = []
    for entry in load("messages")["message"]:
        out.append(MessagePattern(
            id=entry["id"], kind=entry["kind"], pattern=re.compile(entry["pattern"]),
            triggers=tuple(entry["triggers"]), severity=entry.get("severity"),
            applies_to=entry.get("applies_to", "any")))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def message_continuations() -> tuple[str, ...]:
    return tuple(load("messages")["continuations"]["prefixes"])


@functools.lru_cache(maxsize=None)
def noise_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((e["id"], re.compile(e["pattern"])) for e in load("noise")["noise"])


# --- Processes ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def process_roles() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(e["pattern"]), e["role"]) for e in load("processes")["role"])


def role_and_rank(process_name: str | None) -> tuple[str | None, int | None]:
    """Role and TP rank a process name implies (``Worker_TP2`` -> worker, 2)."""
    if not process_name:
        return None, None
    for pattern, role in process_roles():
        match = pattern.fullmatch(process_name)
        if match:
            rank = match.groupdict().get("rank")
            return role, int(rank) if rank is not None else None
    return None, None
