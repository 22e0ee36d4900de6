"""Scoring a realworld case (tests/data/realworld/<case>/expected.toml) against the
verdict: used by tests/test_realworld.py and by `python -m tests.realworld` (a score
table while developing)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent / "data" / "realworld"


def cases() -> list[Path]:
    return sorted(p for p in ROOT.iterdir() if (p / "expected.toml").is_file())


def expected_of(case: Path) -> dict:
    return tomllib.loads((case / "expected.toml").read_text(encoding="utf-8"))


def inputs_of(case: Path) -> list[Path]:
    return sorted(p for p in case.rglob("*") if p.is_file() and p.name != "expected.toml")


def run_case(case: Path, tmp: Path):
    """The analysis of one case as a user would run it: the paste piped to stdin, or the
    folder (without its answer key) given by path."""
    from forensics.case import analyze
    spec = expected_of(case)
    if spec.get("feed") == "stdin":
        (only,) = inputs_of(case)
        return analyze("-", stdin=io.BytesIO(only.read_bytes()))
    dest = tmp / case.name
    for path in inputs_of(case):
        target = dest / path.relative_to(case)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return analyze(str(dest))


def mismatches(case_result, spec: dict) -> list[str]:
    """What the verdict gets wrong against expected.toml (empty: fully right)."""
    from forensics import names
    v = case_result.verdict
    want = spec["expect"]
    bad = []
    if want.get("failure", True) and v.failure_kind is None:
        bad.append("no failure found")
    if "failure_kind" in want and (v.failure_kind.value if v.failure_kind else None) != want["failure_kind"]:
        bad.append(f"failure_kind {v.failure_kind.value if v.failure_kind else None} != {want['failure_kind']}")
    code = v.error.code if v.error else None
    if "error_code" in want:
        if code != want["error_code"]:
            bad.append(f"error_code {code} != {want['error_code']}")
    elif code is not None:
        bad.append(f"error_code {code} claimed, input shows none")
    first = v.first_failure
    rank = want.get("first_failing_rank")
    if isinstance(rank, int):
        if first is None or first.rank != rank:
            bad.append(f"first rank {first.rank if first else None} != {rank}")
    elif rank in ("unknown", "none"):
        if first is not None and first.rank is not None:
            bad.append(f"first rank {first.rank} claimed, expected {rank}")
    if "collateral_ranks" in want and sorted(v.collateral) != sorted(want["collateral_ranks"]):
        bad.append(f"collateral {list(v.collateral)} != {want['collateral_ranks']}")
    origin = want.get("origin", "none")
    kernel = v.origin.kernel if v.origin is not None and v.origin.kernel else None
    if origin == "none":
        if kernel:
            bad.append(f"origin {kernel} claimed")
    elif kernel is None or (names.plain(kernel) != origin and names.strip_templates(names.plain(kernel)) != origin
                            and kernel != origin):
        bad.append(f"origin {kernel} != {origin}")
    if "surface_file" in want:
        site = (want["surface_file"], want.get("surface_line"), want.get("surface_function"))
        candidates = list(v.surfaces)
        if first is not None and first.rank is not None:
            candidates = [s for s in v.surfaces if s.rank == first.rank] or candidates
        got = [(s.file, s.line, s.function) for s in candidates[:1]]
        if not any(_site_matches(g, site) for g in got):
            bad.append(f"surface {got[0] if got else None} != {site}")
        elif want.get("surface_api") and not any(s.api and want["surface_api"].split(".")[-1] in s.api
                                                 for s in candidates[:1]):
            bad.append(f"surface api {[s.api for s in candidates[:1]]} != {want['surface_api']}")
        elif "surface_caller" in want and candidates[0].caller != want["surface_caller"]:
            bad.append(f"surface caller {candidates[0].caller} != {want['surface_caller']}")
    return bad


def _site_matches(got, want) -> bool:
    file, line, function = got
    wfile, wline, wfunction = want
    if file is None or (file != wfile and not file.endswith(wfile) and not wfile.endswith(file)):
        return False
    if wline is not None and line != wline:
        return False
    return wfunction is None or function == wfunction


def main(argv: list[str]) -> int:
    import tempfile
    selected = [c for c in cases() if not argv or any(a in c.name for a in argv)]
    right = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in selected:
            spec = expected_of(case)
            try:
                result = run_case(case, Path(tmp))
                bad = mismatches(result, spec)
            except Exception as exc:  # noqa: BLE001 - a development report
                bad = [f"CRASH {type(exc).__name__}: {exc}"]
            right += not bad
            print(("OK   " if not bad else "FAIL ") + case.name + ("" if not bad else "  " + "; ".join(bad)))
    print(f"{right}/{len(selected)} fully right")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
