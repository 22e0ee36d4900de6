"""Shared fixtures: real recordings, copied without their answer keys.

The recordings under ../shared/recordings carry README.md and truth.toml (the answers)
and some a side-channel file written by the fault injector; those are never given to
the analyzer.  Tests read the truth themselves and compare.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FORENSICS_SHARED", REPO.parent / "shared"))
RECORDINGS = SHARED / "recordings"
DATA = Path(__file__).resolve().parent / "data"
ANSWER_FILES = {"README.md", "truth.toml", "fault_record.jsonl"}


def shared_bundles() -> list[Path]:
    if not RECORDINGS.is_dir():
        return []
    return sorted(p for p in RECORDINGS.glob("*/*") if (p / "truth.toml").is_file())


def copy_without_answers(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.name not in ANSWER_FILES and item.is_file():
            shutil.copy2(item, dst / item.name)
    return dst


def truth_of(bundle: Path) -> dict:
    return tomllib.loads((bundle / "truth.toml").read_text())


@pytest.fixture(scope="session")
def shared_case(tmp_path_factory):
    """name -> (Case, truth) for a shared recording, analysed once per session."""
    from forensics.case import analyze
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            matches = [b for b in shared_bundles() if b.name == name]
            if not matches:
                pytest.skip(f"shared recording {name} not available")
            bundle = matches[0]
            copy = copy_without_answers(bundle, tmp_path_factory.mktemp(name))
            cache[name] = (analyze(str(copy)), truth_of(bundle))
        return cache[name]

    return get
