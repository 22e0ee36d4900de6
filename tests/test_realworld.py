"""Every case in tests/data/realworld: the verdict is fully right against its
expected.toml (scored by tests/realworld.py, the same code `python -m tests.realworld`
runs while developing).  One test per case, so a regression names the case."""

from __future__ import annotations

import pytest

from tests import realworld

CASES = realworld.cases()
EXPECTED_CASES = 136


def test_every_case_folder_has_an_answer_key():
    """A folder without expected.toml would be skipped silently by cases()."""
    folders = sorted(p.name for p in realworld.ROOT.iterdir() if p.is_dir())
    assert folders == [c.name for c in CASES]
    assert len(CASES) == EXPECTED_CASES


def test_every_case_declares_what_it_feeds_and_has_one_input_for_stdin():
    for case in CASES:
        spec = realworld.expected_of(case)
        assert spec.get("feed") in ("stdin", "folder"), case.name
        assert "expect" in spec, case.name
        inputs = realworld.inputs_of(case)
        assert inputs, case.name
        if spec["feed"] == "stdin":
            assert len(inputs) == 1, (case.name, inputs)


def test_the_scorer_catches_a_wrong_verdict(tmp_path):
    """The scorer itself must be able to fail: a verdict checked against a deliberately
    wrong answer key is reported, field by field."""
    case = next(c for c in CASES if "error_code" in realworld.expected_of(c)["expect"]
                and isinstance(realworld.expected_of(c)["expect"].get("first_failing_rank"), int))
    spec = realworld.expected_of(case)
    result = realworld.run_case(case, tmp_path)
    assert realworld.mismatches(result, spec) == []
    wrong = {**spec, "expect": {**spec["expect"], "error_code": spec["expect"]["error_code"] + 1,
                                "first_failing_rank": spec["expect"]["first_failing_rank"] + 1,
                                "origin": "some_other_kernel"}}
    bad = realworld.mismatches(result, wrong)
    assert any(b.startswith("error_code") for b in bad), bad
    assert any(b.startswith("first rank") for b in bad), bad
    assert any(b.startswith("origin") for b in bad), bad


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_case_is_fully_right(case, tmp_path):
    spec = realworld.expected_of(case)
    result = realworld.run_case(case, tmp_path)
    assert realworld.mismatches(result, spec) == [], result.verdict.headline
    want, verdict = spec["expect"], result.verdict
    # beyond the scorer: the error's CUresult name, and a failure never reported as none
    if "error_name" in want:
        assert verdict.error is not None and verdict.error.name == want["error_name"]
    if want.get("failure", True):
        assert verdict.failed
        assert verdict.headline and verdict.headline != "No failure found in the inputs."
