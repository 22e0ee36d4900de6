"""Verdicts for failures other than a CUDA fault: hangs, killed workers, segfaults."""

from forensics.case import analyze
from tests.conftest import DATA


def test_nccl_hang_names_the_rank_that_never_joined():
    # hand-made fixture (tests/data/handmade/README.md): ranks 0, 1, 3 time out, rank 2 never joins
    ctx = analyze(str(DATA / "handmade/nccl_watchdog_hang")).context
    assert ctx.failure_kind == "nccl-timeout"
    assert ctx.first_failure.rank == 2
    assert "never reported that collective" in ctx.first_failure.basis
    statuses = {v.rank: v.status for v in ctx.ranks.values() if v.role == "worker"}
    assert statuses == {0: "collateral", 1: "collateral", 2: "unknown", 3: "collateral"}
    assert ctx.error is None and ctx.origin is None


def test_killed_worker_is_first_failure_not_a_cuda_verdict(shared_case):
    case, truth = shared_case("C_sigkill_worker_tp1_mid_stream_tp2")
    ctx = case.context
    assert ctx.failure_kind == "worker-killed"
    assert ctx.environment["phase"] == "decode"
    assert ctx.first_failure.pid == truth["injection"]["pid"]


def test_segfault_with_core(tmp_path):
    ctx = analyze(str(DATA / "gpu/cpu_segv_core")).context
    assert ctx.failure_kind == "fatal-signal"
    assert ctx.first_failure.pid == 1032


def test_equal_second_reports_are_called_a_tie():
    ctx = analyze(str(DATA / "handmade/mnnvl_incident")).context
    assert "same second" in ctx.first_failure.basis and "not evidence" in ctx.first_failure.basis
