"""Grade the tool on the real-world corpus, claim by claim.

    python realworld/score.py                 # every case with an excerpt; dev and held parts
    python realworld/score.py --part dev      # only the development part
    python realworld/score.py --case vllm-001 -v
    python realworld/score.py --json scores.json

Each case's excerpt (realworld/excerpts/<id>.txt; rebuild.py) is fed to the tool as a user
pastes it: ``forensics analyze -``.  Its report is graded against the truth written before
the tool ever ran on it, one claim at a time:

    failure        did it see a failure at all (controls: none)
    kind           the failure kind
    error          the CUDA error code (or that there is none)
    surface        where the first failing process reported it (base name and line)
    origin         the faulting kernel, or that none is shown
    first_failure  who failed first (or undecided / none)
    process        each process's status (origin surfaced failed collateral healthy unknown)
    collateral     the set of processes that went down because another did
    environment    each environment fact the excerpt shows

A claim the truth does not make is not graded.  A wrong claim is listed with what the
tool said and what the truth says; a case is fully right when all its claims are.
The held-back part (README.md) is measured, never designed on.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from rebuild import EXCERPTS, load_cases  # noqa: E402

CLAIMS = ("failure", "kind", "error", "surface", "origin", "first_failure", "process", "collateral", "environment")


def held_back(case_id: str) -> bool:
    return hashlib.sha256(f"forensics-realworld-1:{case_id}".encode()).digest()[0] < 64


@dataclasses.dataclass(frozen=True)
class Grade:
    claim: str
    right: bool
    said: str          # what the tool said
    truth: str         # what the truth says


# -- reading the report ----------------------------------------------------------------------

def report_of(text: bytes) -> dict:
    """The JSON report document of ``forensics analyze -`` on ``text``."""
    from forensics.case import analyze
    from forensics.report.document import build
    case = analyze("-", stdin=io.BytesIO(text))
    return json.loads(json.dumps(build(case, timeline_limit=0).to_json(), default=str))


def _base(path: str | None) -> str | None:
    return re.split(r"[\\/]", path)[-1] if path else None


def _norm(name: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (name or "").lower())


def find_process(ident: dict, processes: list[dict]) -> dict | None:
    """The report's process for a truth's {rank, pid, name}: by rank, then pid, then name."""
    if ident.get("rank") is not None:
        hit = [p for p in processes if p.get("rank") == ident["rank"]]
        if hit:
            return hit[0]
    if ident.get("pid") is not None:
        hit = [p for p in processes if p.get("pid") == ident["pid"] or ident["pid"] in (p.get("other_pids") or [])]
        if hit:
            return hit[0]
    if ident.get("name") and ident.get("rank") is None and ident.get("pid") is None:
        want = _norm(ident["name"])
        hit = [p for p in processes if want and (want in _norm(p.get("name")) or _norm(p.get("name")) in want and
                                                 _norm(p.get("name")))] or \
              [p for p in processes if want and want in _norm(p.get("role"))]
        if hit:
            return hit[0]
        if want == "main" and len(processes) == 1:
            return processes[0]
    return None


def _who(ident) -> str:
    if isinstance(ident, str):
        return ident
    return ", ".join(f"{k}={ident[k]}" for k in ("rank", "pid", "name") if ident.get(k) is not None) or "?"


def _same(ident: dict, process: dict | None) -> bool:
    """Does the report's process (or first_failure record) stand for the truth's identity?"""
    if process is None:
        return False
    if ident.get("key") is not None and process.get("key") is not None:
        return process["key"] == ident["key"]
    if ident.get("rank") is not None and process.get("rank") is not None:
        return process["rank"] == ident["rank"]
    if ident.get("pid") is not None and process.get("pid") is not None:
        return process["pid"] == ident["pid"]
    return False


# -- grading ---------------------------------------------------------------------------------

def grade(case: dict, report: dict) -> list[Grade]:
    truth = case["truth"]
    verdict = report.get("verdict") or {}
    processes = report.get("ranks") or []
    out: list[Grade] = []
    failed = truth.get("failure", True)
    kind = verdict.get("failure_kind")
    out.append(Grade("failure", bool(kind) == failed, str(kind or "no failure"),
                     "a failure" if failed else "no failure"))
    if failed and truth.get("failure_kind"):
        out.append(Grade("kind", kind == truth["failure_kind"], str(kind), truth["failure_kind"]))
    code = (verdict.get("error") or {}).get("code")
    if "error_code" in truth:
        out.append(Grade("error", code == truth["error_code"], str(code), str(truth["error_code"])))
    elif failed or code is not None:
        out.append(Grade("error", code is None, str(code), "no CUDA error"))
    out += _grade_surface(truth, verdict)
    out += _grade_origin(truth, verdict)
    out += _grade_first(truth, verdict, processes)
    for proc in truth.get("process", []):
        found = find_process(proc, processes)
        said = found.get("status") if found else "not found"
        out.append(Grade("process", said == proc["status"], f"{_who(proc)}: {said}", f"{_who(proc)}: {proc['status']}"))
    if "collateral" in truth:
        want = [c for c in truth["collateral"]]
        said = [p for p in processes if p.get("status") == "collateral"]
        matched = [find_process(c, processes) for c in want]
        right = all(m is not None and m.get("status") == "collateral" for m in matched) and \
            len(said) == len([m for m in matched if m is not None])
        out.append(Grade("collateral", right, ", ".join(p.get("who") or "?" for p in said) or "none",
                         ", ".join(_who(c) for c in want) or "none"))
    env = report.get("environment") or {}
    for key, value in (truth.get("environment") or {}).items():
        got = env.get(key)
        out.append(Grade("environment", got is not None and str(got).lower() == str(value).lower(),
                         f"{key}={got}", f"{key}={value}"))
    return out


def _grade_surface(truth: dict, verdict: dict) -> list[Grade]:
    surfaces = [s for s in verdict.get("surfaces") or [] if s.get("file") or s.get("function")]
    shown = ", ".join(f"{_base(s.get('file'))}:{s.get('line')} {s.get('function')}" for s in surfaces) or "none"
    surface = truth.get("surface")
    if surface is None:
        return []
    if surface == "none shown":
        return [Grade("surface", not surfaces, shown, "none shown")]
    def hit(s: dict) -> bool:
        if surface.get("file") and surface.get("line") is not None:
            return _base(s.get("file")) == surface["file"] and s.get("line") == surface["line"]
        if surface.get("function"):
            return s.get("function") == surface["function"]
        return _base(s.get("file")) == surface.get("file")
    want = f"{surface.get('file')}:{surface.get('line')} {surface.get('function')}"
    return [Grade("surface", any(hit(s) for s in surfaces), shown, want)]


def _grade_origin(truth: dict, verdict: dict) -> list[Grade]:
    if "origin" not in truth:
        return []
    origin = verdict.get("origin") or {}
    kernel = origin.get("kernel")
    if truth["origin"] == "none shown":
        return [Grade("origin", not kernel, str(kernel or "none"), "none shown")]
    want = _norm(re.split(r"[<(\s]", truth["origin"])[0])
    got = _norm(re.split(r"[<(\s]", kernel or "")[0])
    return [Grade("origin", bool(got) and (want in got or got in want), str(kernel or "none"), truth["origin"])]


def _grade_first(truth: dict, verdict: dict, processes: list[dict]) -> list[Grade]:
    if "first_failure" not in truth:
        return []
    first = verdict.get("first_failure") or {}
    named = first.get("rank") is not None or first.get("pid") is not None or first.get("key") is not None
    said = first.get("who") if named else "undecided" if first else "none"
    want = truth["first_failure"]
    if want == "none":
        return [Grade("first_failure", not named, said, "none")]
    if want == "undecided":
        return [Grade("first_failure", not named, said, "undecided")]
    if want.get("rank") is None and want.get("pid") is None:       # by name: through the process table
        found = find_process(want, processes)
        right = named and found is not None and _same({"key": found.get("key"), "rank": found.get("rank"),
                                                       "pid": found.get("pid")}, first)
    else:
        right = named and _same(want, first)
    return [Grade("first_failure", right, said, _who(want))]


# -- the table -------------------------------------------------------------------------------

def run(cases: list[dict], verbose: bool = False) -> dict:
    results = []
    for case in cases:
        path = EXCERPTS / f"{case['id']}.txt"
        if not path.exists():
            results.append({"id": case["id"], "family": case["family"], "held": held_back(case["id"]),
                            "missing": True, "grades": []})
            continue
        try:
            report = report_of(path.read_bytes())
            grades = grade(case, report)
            crash = None
        except Exception as exc:  # noqa: BLE001 - a crash is a result, graded as all wrong
            grades, crash = [Grade("failure", False, f"crash: {type(exc).__name__}: {exc}", "a report")], str(exc)
        results.append({"id": case["id"], "family": case["family"], "held": held_back(case["id"]), "missing": False,
                        "crash": crash, "grades": [dataclasses.asdict(g) for g in grades]})
        if verbose:
            for g in grades:
                print(f"  {case['id']:14} {g.claim:14} {'ok ' if g.right else 'BAD'} said {g.said!r} truth {g.truth!r}")
    return {"results": results}


def summary(results: list[dict]) -> dict:
    def table(rows: list[dict]) -> dict:
        graded = [r for r in rows if not r["missing"]]
        claims = defaultdict(lambda: [0, 0])
        for r in graded:
            for g in r["grades"]:
                claims[g["claim"]][0] += g["right"]
                claims[g["claim"]][1] += 1
        right = sum(all(g["right"] for g in r["grades"]) for r in graded)
        total_right = sum(v[0] for v in claims.values())
        total = sum(v[1] for v in claims.values())
        return {"cases": len(graded), "missing": len(rows) - len(graded), "fully_right": right,
                "claims_right": total_right, "claims": total,
                "by_claim": {k: {"right": v[0], "of": v[1]} for k, v in sorted(claims.items())}}
    parts = {"dev": [r for r in results if not r["held"]], "held": [r for r in results if r["held"]], "all": results}
    out = {name: table(rows) for name, rows in parts.items()}
    out["families"] = {fam: table([r for r in results if r["family"] == fam])
                       for fam in sorted({r["family"] for r in results})}
    return out


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"


def print_summary(s: dict, results: list[dict], wrong: bool) -> None:
    print(f"{'part':10} {'cases':>5} {'fully right':>16} {'claims right':>18}")
    for name in ("dev", "held", "all"):
        t = s[name]
        print(f"{name:10} {t['cases']:5} {_pct(t['fully_right'], t['cases']):>16} {_pct(t['claims_right'], t['claims']):>18}")
    print()
    print(f"{'family':10} {'cases':>5} {'fully right':>16} {'claims right':>18}")
    for fam, t in s["families"].items():
        print(f"{fam:10} {t['cases']:5} {_pct(t['fully_right'], t['cases']):>16} {_pct(t['claims_right'], t['claims']):>18}")
    print()
    print("by claim (all):  " + "  ".join(f"{k} {_pct(v['right'], v['of'])}" for k, v in s["all"]["by_claim"].items()))
    if wrong:
        print("\nwrong claims (dev part only; the held-back part is not shown):")
        for r in results:
            if r["held"]:
                continue
            for g in r["grades"]:
                if not g["right"]:
                    print(f"  {r['id']:14} {g['claim']:14} said {g['said']!r}; truth {g['truth']!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("dev", "held", "all"), default="all")
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    parser.add_argument("--family", help="only this family")
    parser.add_argument("--json", dest="json_out", help="write every grade and the summary here")
    parser.add_argument("--wrong", action="store_true", help="list the wrong claims of the dev part")
    parser.add_argument("-v", "--verbose", action="store_true", help="every grade of every case")
    args = parser.parse_args(argv)
    cases = load_cases()
    if args.case:
        cases = [c for c in cases if c["id"] in args.case]
    if args.family:
        cases = [c for c in cases if c["family"] == args.family]
    if args.part != "all":
        cases = [c for c in cases if held_back(c["id"]) == (args.part == "held")]
    scored = run(cases, verbose=args.verbose)
    s = summary(scored["results"])
    print_summary(s, scored["results"], args.wrong)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"summary": s, **scored}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
