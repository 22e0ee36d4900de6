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


def test_cuda_oom_is_an_oom_verdict_not_a_fault():
    ctx = analyze(str(DATA / "handmade/oom_during_prefill")).context      # hand-made, see README
    assert ctx.failure_kind == "oom" and not ctx.error.sticky
    assert ctx.first_failure.rank == 1 and ctx.origin is None
    assert {v.rank: v.status for v in ctx.ranks.values() if v.role == "worker"}[0] == "collateral"
    assert not any("compute-sanitizer" in s for s in ctx.next_steps)     # nothing to find in kernels


def test_startup_failure():
    ctx = analyze(str(DATA / "handmade/startup_failure")).context         # hand-made, see README
    assert ctx.failure_kind == "startup" and ctx.environment["phase"] == "startup"
    assert "failed while starting" in ctx.summary and "No available memory" in ctx.summary


def test_missing_rank_logs_are_said_not_guessed(tmp_path):
    # hand-made: TP=4 promised, only ranks 0 and 2 in the inputs, rank 2 reports the error
    (tmp_path / "server.log").write_text(
        "(EngineCore_DP0 pid=1) INFO 11-20 08:00:01 [core.py:140] Initializing a V1 LLM engine (v0.30.0) with config: "
        "model='m', tensor_parallel_size=4\n"
        "(Worker_TP0 pid=10) INFO 11-20 08:00:02 [a.py:1] up\n"
        "(Worker_TP2 pid=12) ERROR 11-20 08:00:05 [a.py:1] Failed: Cuda error /x/custom_all_reduce.cuh:9 'an illegal memory access was encountered'\n")
    ctx = analyze(str(tmp_path)).context
    assert ctx.first_failure.rank == 2
    assert "logs of ranks 1, 3 are missing" in ctx.first_failure.basis
    assert any("collect the console" in s for s in ctx.next_steps)
