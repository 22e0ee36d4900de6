"""Rebuild realworld/excerpts/ from saved copies of the threads, checked by fingerprint.

    python realworld/rebuild.py SAVED/      # find each case's excerpt in any saved file
    python realworld/rebuild.py --check     # check realworld/excerpts/ in place

A saved file may hold a whole comment or issue: the run of ``lines`` lines whose first
line, last line and whole text match a case's fingerprints is the excerpt.  Prints one
line per case: ok, missing, or mismatch (and which fingerprint failed); exits 1 when a
case is not ok.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fingerprint import excerpt_lines, fingerprints, sha  # noqa: E402

CASES = HERE / "cases"
EXCERPTS = HERE / "excerpts"


def load_cases(folder: Path = CASES) -> list[dict]:
    return [tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.toml"))]


def find_excerpt(case: dict, lines: list[str]) -> list[str] | None:
    """The run of the case's lines inside ``lines`` whose fingerprints all match."""
    n, first, last = case["lines"], case["first_line_sha256"], case["last_line_sha256"]
    for start in range(0, len(lines) - n + 1):
        if sha(lines[start]) != first or sha(lines[start + n - 1]) != last:
            continue
        run = lines[start:start + n]
        if fingerprints(run)["sha256"] == case["sha256"]:
            return run
    return None


def check(case: dict, text: str) -> str:
    """ok, or what does not match, for an excerpt file's text."""
    got = fingerprints(excerpt_lines(text))
    bad = [key for key in ("lines", "first_line_sha256", "last_line_sha256", "sha256") if got[key] != case[key]]
    return "ok" if not bad else "mismatch (" + ", ".join(bad) + ")"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("saved", nargs="?", help="a folder of saved threads or excerpts")
    parser.add_argument("--check", action="store_true", help="check realworld/excerpts/ in place")
    args = parser.parse_args(argv)
    cases = load_cases()
    failed = 0
    if args.check or not args.saved:
        for case in cases:
            path = EXCERPTS / f"{case['id']}.txt"
            status = check(case, path.read_text(encoding="utf-8", errors="replace")) if path.exists() else "missing"
            failed += status != "ok"
            print(f"{case['id']}: {status}")
        return 1 if failed else 0
    saved = [excerpt_lines(p.read_bytes().decode("utf-8", errors="replace"))
             for p in sorted(Path(args.saved).rglob("*")) if p.is_file()]
    EXCERPTS.mkdir(exist_ok=True)
    for case in cases:
        found = next((run for lines in saved if (run := find_excerpt(case, lines)) is not None), None)
        if found is None:
            failed += 1
            print(f"{case['id']}: missing")
            continue
        (EXCERPTS / f"{case['id']}.txt").write_text("\n".join(found) + "\n", encoding="utf-8")
        print(f"{case['id']}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
