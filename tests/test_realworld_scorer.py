"""realworld/: the corpus's case files are well formed, and the scorer grades claims as
it says (on hand-made cases and reports: the excerpts themselves stay out of git)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "realworld"))

import rebuild  # noqa: E402
import score  # noqa: E402
from fingerprint import excerpt_lines, fingerprints  # noqa: E402

from forensics.verdict import FailureKind, Status  # noqa: E402

FAMILIES = {"vllm", "sglang", "trtllm", "pytorch", "sanitizer", "kernel", "other", "control"}
SHA = re.compile(r"^[0-9a-f]{64}$")


def test_every_case_file_is_well_formed():
    cases = rebuild.load_cases()
    assert len(cases) >= 200
    ids = set()
    for case in cases:
        assert case["id"] not in ids
        ids.add(case["id"])
        assert case["family"] in FAMILIES, case["id"]
        assert case["url"].startswith("https://github.com/") and re.search(r"/(issues|pull|discussions)/\d+", case["url"])
        assert case["found_by"] and case["location"] and case["collected"]
        for key in ("sha256", "first_line_sha256", "last_line_sha256"):
            assert SHA.match(case[key]), (case["id"], key)
        assert 1 <= case["lines"] <= 400
        truth = case["truth"]
        assert truth["written_before_run"] is True, case["id"]
        if truth.get("failure", True):
            assert truth["failure_kind"] in {k.value for k in FailureKind}, case["id"]
        for proc in truth.get("process", []):
            assert proc["status"] in {s.value for s in Status}, case["id"]
            assert any(proc.get(k) is not None for k in ("rank", "pid", "name")), case["id"]
        first = truth.get("first_failure")
        assert first in ("undecided", "none") or isinstance(first, dict), case["id"]


def test_the_corpus_has_each_family_it_promises():
    families = [c["family"] for c in rebuild.load_cases()]
    wants = {"vllm": 70, "sglang": 25, "trtllm": 20, "pytorch": 25, "sanitizer": 15, "kernel": 10,
             "other": 15, "control": 20}
    for family, n in wants.items():
        assert families.count(family) >= n, family


def test_no_excerpt_is_tracked_by_git():
    tracked = subprocess.run(["git", "ls-files", "realworld"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "excerpts/" not in tracked


def test_fingerprints_ignore_line_endings_and_blank_edges():
    a = fingerprints(excerpt_lines("\n\nline one\r\nline two  \r\n\n"))
    b = fingerprints(excerpt_lines("line one\nline two  \n"))
    assert a == b and a["lines"] == 2
    assert fingerprints(excerpt_lines("line one\nline two\n"))["sha256"] != a["sha256"]   # trailing blanks count


def test_rebuild_finds_an_excerpt_inside_a_saved_thread():
    excerpt = ["(Worker pid=1) ERROR boom", "Traceback (most recent call last):", "RuntimeError: x"]
    case = {"id": "t-1", **fingerprints(excerpt)}
    thread = ["Some prose the user wrote.", "```", *excerpt, "```", "More prose."]
    assert rebuild.find_excerpt(case, thread) == excerpt
    assert rebuild.find_excerpt(case, thread[:4]) is None
    assert rebuild.check(case, "\n".join(excerpt) + "\n") == "ok"
    assert rebuild.check(case, "\n".join(excerpt[:2]) + "\n").startswith("mismatch")


# -- grading, on a hand-made case and hand-made reports ----------------------------------------

CASE = {"id": "hand-1", "family": "vllm", "truth": {
    "failure": True, "failure_kind": "cuda-error", "error_code": 700, "origin": "none shown",
    "first_failure": {"rank": 1}, "collateral": [{"name": "EngineCore_DP0"}],
    "surface": {"file": "gpu_model_runner.py", "line": 1374, "function": "execute_model"},
    "process": [{"rank": 1, "pid": 11, "status": "surfaced"}, {"rank": 0, "pid": 10, "status": "healthy"},
                {"pid": 5, "name": "EngineCore_DP0", "status": "collateral"}],
    "environment": {"vllm": "0.9.1"}}}


def _report(**change) -> dict:
    report = {
        "verdict": {"failure_kind": "cuda-error", "error": {"code": 700}, "origin": None,
                    "surfaces": [{"file": "/x/vllm/v1/worker/gpu_model_runner.py", "line": 1374,
                                  "function": "execute_model", "rank": 1}],
                    "first_failure": {"who": "rank 1 (pid 11)", "rank": 1, "pid": 11}},
        "ranks": [{"who": "rank 1", "rank": 1, "pid": 11, "status": "surfaced", "name": "VllmWorker"},
                  {"who": "rank 0", "rank": 0, "pid": 10, "status": "healthy", "name": "VllmWorker"},
                  {"who": "EngineCore_DP0 (pid 5)", "rank": None, "pid": 5, "status": "collateral",
                   "name": "EngineCore_DP0", "role": "engine"}],
        "environment": {"vllm": "0.9.1"},
    }
    for path, value in change.items():
        *keys, last = path.split("__")
        target = report
        for key in keys:
            target = target[key]
        target[last] = value
    return report


def _wrong(report: dict) -> list[str]:
    return [g.claim for g in score.grade(CASE, report) if not g.right]


def test_a_right_report_is_right_on_every_claim():
    grades = score.grade(CASE, _report())
    assert {g.claim for g in grades} == {"failure", "kind", "error", "surface", "origin", "first_failure",
                                          "process", "collateral", "environment"}
    assert all(g.right for g in grades), [g for g in grades if not g.right]


@pytest.mark.parametrize("change, wrong", [
    ({"verdict__failure_kind": "oom"}, ["kind"]),
    ({"verdict__error": {"code": 719}}, ["error"]),
    ({"verdict__error": None}, ["error"]),
    ({"verdict__surfaces": [{"file": "mnnvl.py", "line": 836, "function": "__del__"}]}, ["surface"]),
    ({"verdict__origin": {"kernel": "oneshot_allreduce"}}, ["origin"]),
    ({"verdict__first_failure": {"who": "rank 0", "rank": 0, "pid": 10}}, ["first_failure"]),
    ({"verdict__first_failure": None}, ["first_failure"]),
    ({"environment": {"vllm": "0.8.0"}}, ["environment"]),
])
def test_each_wrong_claim_is_caught_alone(change, wrong):
    assert _wrong(_report(**change)) == wrong


def test_a_wrong_status_is_a_wrong_process_and_may_be_a_wrong_collateral():
    report = _report()
    report["ranks"][1]["status"] = "collateral"               # a healthy rank called collateral
    assert sorted(_wrong(report)) == ["collateral", "process"]
    report = _report()
    report["ranks"] = report["ranks"][:2]                      # the engine not found at all
    assert sorted(_wrong(report)) == ["collateral", "process"]


def test_a_control_is_right_only_without_a_failure():
    control = {"id": "hand-2", "family": "control", "truth": {"failure": False, "first_failure": "none",
                                                              "process": [{"name": "main", "status": "healthy"}]}}
    quiet = {"verdict": {"failure_kind": None, "error": None, "surfaces": [], "first_failure": None},
             "ranks": [{"who": "main", "rank": None, "pid": None, "status": "healthy", "name": "server"}]}
    assert all(g.right for g in score.grade(control, quiet))
    loud = _report()
    assert "failure" in [g.claim for g in score.grade(control, loud) if not g.right]


def test_undecided_is_right_only_when_the_tool_names_no_one():
    case = {"id": "hand-3", "family": "vllm", "truth": {"failure": True, "first_failure": "undecided"}}
    assert [g.right for g in score.grade(case, _report()) if g.claim == "first_failure"] == [False]
    assert [g.right for g in score.grade(case, _report(verdict__first_failure={"who": "undecided"}))
            if g.claim == "first_failure"] == [True]


def test_the_held_back_part_is_a_quarter_by_a_fixed_rule():
    ids = [f"x-{n:03d}" for n in range(400)]
    held = [i for i in ids if score.held_back(i)]
    assert 60 < len(held) < 140
    assert score.held_back("x-001") == score.held_back("x-001")


def test_the_summary_counts_parts_and_families():
    results = [{"id": "a", "family": "vllm", "held": False, "missing": False,
                "grades": [{"claim": "kind", "right": True, "said": "", "truth": ""}]},
               {"id": "b", "family": "sglang", "held": True, "missing": False,
                "grades": [{"claim": "kind", "right": False, "said": "", "truth": ""}]},
               {"id": "c", "family": "vllm", "held": False, "missing": True, "grades": []}]
    s = score.summary(results)
    assert s["dev"]["cases"] == 1 and s["dev"]["fully_right"] == 1 and s["dev"]["missing"] == 1
    assert s["held"]["claims_right"] == 0 and s["held"]["claims"] == 1
    assert s["families"]["vllm"]["cases"] == 1
