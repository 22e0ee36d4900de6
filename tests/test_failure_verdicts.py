"""Whole-pipeline verdicts: who failed first, who is collateral, and what kind of failure.

CUDA faults across ranks, hangs (a collective that one rank never joined), fatal
signals, killed workers, OOM, start-up failures, a single process's fragment, a device
assert that surfaces as a cuBLAS status, and runs with no failure at all.  Inputs are
the hand-made fixtures of tests/data/handmade, real recordings, and texts written here
in the shapes vLLM, torch (ProcessGroupNCCL, gloo, faulthandler, torchrun) print.
"""

from __future__ import annotations

import pytest

from forensics.case import analyze
from forensics.verdict import FailureKind, Status
from tests.conftest import DATA
from tests.helpers import analyze_text

HANDMADE = DATA / "handmade"


def statuses(verdict, role="worker") -> dict:
    return {v.rank: v.status for v in verdict.ranks if v.role == role}


def vllm_line(rank: int, pid: int, level: str, time: str, where: str, message: str) -> str:
    return f"(Worker_TP{rank} pid={pid}) {level} 03-14 {time} [{where}] {message}\n"


def vllm_tp(size: int, pids: int = 4201) -> str:
    text = ("(EngineCore_DP0 pid=4100) INFO 03-14 09:12:01 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with "
            f"config: model='acme/chat-13b', tensor_parallel_size={size}, enforce_eager=False\n")
    for r in range(size):
        text += vllm_line(r, pids + r, "INFO", "09:12:09", "parallel_state.py:1165",
                          f"world_size={size} rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:41233 "
                          "backend=nccl")
    return text


def worker_traceback(rank: int, pid: int, time: str, exception: str) -> str:
    lines = ("WorkerProc hit an exception.", "Traceback (most recent call last):",
             '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2301, '
             'in execute_model', "    valid_sampled_token_ids = sampled_token_ids.tolist()", exception)
    return "".join(vllm_line(rank, pid, "ERROR", time, "multiproc_executor.py:671", m) for m in lines)


def nccl_peer_gone(rank: int, time: str = "09:20:33") -> str:
    return (f"[rank{rank}]:[E314 {time}.{rank}12345000 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 Rank {rank}] "
            "Process group watchdog thread terminated with exception: NCCL error: remote process exited or there "
            "was a network error, NCCL version 2.21.5\n")


def nccl_timeout(rank: int, seq: int = 877) -> str:
    return (f"[rank{rank}]:[E502 11:10:12.40000{rank}000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
            f"Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
            "NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.\n")


ILLEGAL = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


# --- a CUDA fault across ranks ---------------------------------------------------------------

def tp4_rank2_faults_first() -> str:
    text = vllm_tp(4) + worker_traceback(2, 4203, "09:20:31", ILLEGAL)
    for r in (0, 1, 3):
        text += nccl_peer_gone(r)
        text += vllm_line(r, 4201 + r, "ERROR", "09:20:34", "multiproc_executor.py:671",
                          "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed "
                          "by peer [127.0.0.1]:12675")
    return text + "(EngineCore_DP0 pid=4100) ERROR 03-14 09:20:35 [core.py:1512] EngineCore encountered a fatal error.\n"


def test_the_rank_that_reported_first_is_first_its_peers_are_collateral():
    v = analyze_text(tp4_rank2_faults_first()).verdict
    assert v.failed and v.failure_kind == FailureKind.CUDA_ERROR
    assert v.error.name == "CUDA_ERROR_ILLEGAL_ADDRESS" and v.error.error.sticky
    assert (v.first_failure.rank, v.first_failure.pid) == (2, 4203)
    assert "no other rank failed on its own" in v.first_failure.basis
    assert statuses(v) == {0: Status.COLLATERAL, 1: Status.COLLATERAL, 2: Status.SURFACED, 3: Status.COLLATERAL}
    assert v.collateral == (0, 1, 3)
    (core,) = [r for r in v.ranks if r.role == "engine-core"]
    assert core.status == Status.COLLATERAL
    # no device evidence: the kernel is unknown and said to be
    assert v.origin is None and "faulting kernel unknown" in v.headline
    (s,) = v.surfaces
    assert (s.rank, s.function, s.api) == (2, "execute_model", "Tensor.tolist")


def test_the_same_error_reported_later_by_a_peer_is_collateral():
    text = vllm_tp(2, pids=801) + worker_traceback(1, 802, "09:20:31", ILLEGAL) + \
        worker_traceback(0, 801, "09:20:34", ILLEGAL)
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 1 and "rank 0 failed later" in v.first_failure.basis
    by_rank = {r.rank: r for r in v.ranks if r.role == "worker"}
    assert by_rank[1].status == Status.SURFACED
    assert by_rank[0].status == Status.COLLATERAL and "after rank 1 failed" in by_rank[0].failure


def test_order_in_the_file_does_not_decide_time_does():
    # rank 3's later report printed first in the paste (two files concatenated)
    text = vllm_tp(4) + worker_traceback(3, 4204, "09:20:39", ILLEGAL) + worker_traceback(1, 4202, "09:20:31", ILLEGAL)
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 1


def test_equal_second_reports_are_called_a_tie():
    v = analyze(str(HANDMADE / "mnnvl_incident")).verdict
    assert v.first_failure.rank is None
    assert "same second" in v.first_failure.basis and "cannot tell" in v.first_failure.basis
    assert statuses(v) == {r: Status.SURFACED for r in range(4)}
    assert "first failing rank unknown" in v.headline


def test_a_launchers_root_cause_is_only_its_opinion():
    def failure(i, rank, pid, time):
        return (f"[{i}]:\n  time      : {time}\n  host      : node-a\n  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : 1 (pid: {pid})\n  error_file: <N/A>\n"
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n")
    text = ("[rank1]:[E910 07:30:01.000000000 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0 Rank 1] Process group "
            "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
            + nccl_peer_gone(0).replace("E314 09:20:33", "E910 07:30:09") +
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\nloop.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n"
            + failure(1, 1, 5512, "2025-09-10_07:30:10") +
            "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
            + failure(0, 0, 5511, "2025-09-10_07:30:09") +
            "============================================================\n")
    v = analyze_text(text).verdict
    assert (v.first_failure.rank, v.first_failure.pid) == (1, 5512)
    assert "names rank 0" in v.first_failure.launcher_opinion
    assert "the evidence points at rank 1" in v.first_failure.launcher_opinion
    assert statuses(v) == {0: Status.COLLATERAL, 1: Status.SURFACED}
    assert {r.rank: r.exit_code for r in v.ranks} == {0: 1, 1: 1}


def test_missing_rank_logs_are_said_not_guessed():
    text = ("(EngineCore_DP0 pid=1) INFO 11-20 08:00:01 [core.py:140] Initializing a V1 LLM engine (v0.30.0) with "
            "config: model='m', tensor_parallel_size=4\n"
            "(Worker_TP0 pid=10) INFO 11-20 08:00:02 [a.py:1] up\n"
            "(Worker_TP2 pid=12) ERROR 11-20 08:00:05 [a.py:1] Failed: Cuda error /x/custom_all_reduce.cuh:9 "
            "'an illegal memory access was encountered'\n")
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 2
    assert "the logs of ranks 1, 3 are missing" in v.first_failure.basis
    missing = {r.rank: r for r in v.ranks if r.pid is None}
    assert set(missing) == {1, 3} and all("no lines of this rank" in r.failure for r in missing.values())


# --- hangs ----------------------------------------------------------------------------------

def tp4_hang(extra: str = "", *, waiting=(0, 1, 3)) -> str:
    text = vllm_tp(4, pids=3401).replace("03-14", "05-02")
    return text + "".join(nccl_timeout(r) for r in waiting) + extra


def test_collective_timeout_names_the_rank_that_never_joined():
    v = analyze_text(tp4_hang()).verdict
    assert v.failure_kind == FailureKind.NCCL_TIMEOUT and v.failed
    assert (v.hang.collective, v.hang.seq, v.hang.waited, v.hang.suspects) == ("ALLREDUCE", 877, (0, 1, 3), (2,))
    assert (v.first_failure.rank, v.first_failure.pid) == (2, 3403)
    assert "never joined ALLREDUCE SeqNum=877" in v.first_failure.what
    assert statuses(v) == {0: Status.COLLATERAL, 1: Status.COLLATERAL, 2: Status.UNKNOWN, 3: Status.COLLATERAL}
    assert v.error is None and v.origin is None
    assert "rank 2 never joined" in v.headline
    steps = {s.id for s in v.next_steps}
    assert {"hang-stacks", "nccl-flight-recorder"} <= steps and "sanitizer" not in steps


@pytest.mark.parametrize("aftermath", [
    "terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0(default_pg) "
    "Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=877, OpType=ALLREDUCE, NumelIn=4096, "
    "NumelOut=4096, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.\n"
    "(EngineCore_DP0 pid=4100) ERROR 05-02 11:10:13 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: -6), shutting down executor.\n",
    "(EngineCore_DP0 pid=4100) ERROR 05-02 11:10:13 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
    "unexpectedly (exit code: -6), shutting down executor.\n",
], ids=["watchdog-abort-with-what", "worker-died-sigabrt"])
def test_the_watchdog_taking_a_waiting_rank_down_is_part_of_the_hang(aftermath):
    v = analyze_text(tp4_hang(aftermath)).verdict
    assert v.failure_kind == FailureKind.NCCL_TIMEOUT
    assert v.first_failure.rank == 2 and v.hang.suspects == (2,)
    assert statuses(v)[0] == Status.COLLATERAL


def test_hand_made_nccl_hang_names_the_rank_that_never_joined():
    # tests/data/handmade/nccl_watchdog_hang: ranks 0, 1, 3 time out, rank 2 never joins
    v = analyze(str(HANDMADE / "nccl_watchdog_hang")).verdict
    assert v.failure_kind == FailureKind.NCCL_TIMEOUT
    assert v.first_failure.rank == 2
    assert statuses(v) == {0: Status.COLLATERAL, 1: Status.COLLATERAL, 2: Status.UNKNOWN, 3: Status.COLLATERAL}


def test_every_rank_timing_out_in_one_collective_names_nobody():
    v = analyze_text(tp4_hang(waiting=(0, 1, 2, 3))).verdict
    assert v.failure_kind == FailureKind.NCCL_TIMEOUT
    assert v.hang.suspects == () and v.first_failure.rank is None
    assert "cannot tell which rank is late" in v.first_failure.basis
    assert "the late rank is unknown" in v.headline


def test_gloo_timeouts_are_a_hang_not_an_nccl_timeout():
    text = "".join(f"[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                   "Timed out waiting 1800000ms for recv operation to complete\n" for r in (0, 1))
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.HANG
    assert v.hang.collective == "recv" and v.hang.waited == (0, 1)
    assert "nccl-flight-recorder" not in {s.id for s in v.next_steps}


# --- fatal signals and killed workers ------------------------------------------------------------

def torchrun_summary(root_rank: int, root_code: int, root_signal: str, others: dict[int, int]) -> str:
    def failure(i, rank, code, signal):
        pid = 5511 + rank
        return (f"[{i}]:\n  time      : 2025-09-10_07:31:44\n  host      : node-a\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {pid})\n"
                f"  error_file: <N/A>\n  traceback : Signal {-code} ({signal}) received by PID {pid}\n")
    return ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\nloop.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n"
            + "".join(failure(i, r, code, "SIGTERM") for i, (r, code) in enumerate(others.items(), 1)) +
            "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
            + failure(0, root_rank, root_code, root_signal) +
            "============================================================\n")


def test_segfault_under_torchrun_blames_the_segfaulting_rank():
    text = ("W0910 07:31:02.118000 5500 torch/distributed/run.py:793] *****************************************\n"
            "Fatal Python error: Segmentation fault\n\n"
            "Current thread 0x00007fa1c2d3e740 (most recent call first):\n"
            '  File "/srv/train/ops.py", line 31 in gather_rows\n'
            '  File "/srv/train/loop.py", line 77 in step\n'
            '  File "/srv/train/loop.py", line 120 in <module>\n\n'
            "W0910 07:31:44.512000 5500 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 5511 "
            "closing signal SIGTERM\n"
            "W0910 07:31:44.513000 5500 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 5512 "
            "closing signal SIGTERM\n"
            "E0910 07:31:44.901000 5500 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) "
            "local_rank: 2 (pid: 5513) of binary: /usr/bin/python3\n"
            + torchrun_summary(2, -11, "SIGSEGV", {0: -15, 1: -15}))
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.FATAL_SIGNAL and v.error is None
    assert (v.first_failure.rank, v.first_failure.pid) == (2, 5513) and "SIGSEGV" in v.first_failure.what
    by_rank = {r.rank: r for r in v.ranks if r.role == "worker"}
    assert by_rank[2].status == Status.FAILED and by_rank[2].exit_code == -11
    assert "gather_rows" in by_rank[2].failure          # the unsigned faulthandler dump is its crash
    for r in (0, 1):
        assert by_rank[r].status == Status.COLLATERAL and "SIGTERM" in by_rank[r].failure
    (s,) = v.surfaces
    assert (s.rank, s.file, s.line, s.function) == (2, "/srv/train/ops.py", 31, "gather_rows")


def test_a_child_that_exited_with_an_error_code_is_the_first_failure_of_a_relay_only_verdict():
    """torchrun's table alone: rank 3 exited with code 1, the others were stopped.  The
    child raised (its own error is not in the inputs): it failed first, the verdict is a
    relay of its failure; SIGTERMed siblings are collateral."""
    text = torchrun_summary(3, 1, "", {0: -15, 1: -15}).replace("Signal -1 () received by PID 5514", "<N/A>")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.RELAY_ONLY
    assert (v.first_failure.rank, v.first_failure.pid) == (3, 5514)
    by_rank = {r.rank: r for r in v.ranks if r.role == "worker"}
    assert by_rank[3].status == Status.FAILED and by_rank[3].exit_code == 1


def test_a_child_killed_by_sigkill_alone_is_a_killed_worker_of_unknown_cause():
    text = torchrun_summary(0, -9, "SIGKILL", {})
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.WORKER_KILLED
    assert (v.first_failure.rank, v.first_failure.pid) == (0, 5511)


def test_a_worker_that_died_of_sigabrt_is_a_fatal_signal():
    text = (vllm_tp(2, pids=701) +
            "(EngineCore_DP0 pid=4100) ERROR 03-14 11:05:13 [multiproc_executor.py:315] Worker proc VllmWorker-1 died "
            "unexpectedly (exit code: -6), shutting down executor.\n"
            "(EngineCore_DP0 pid=4100) ERROR 03-14 11:05:13 [core.py:1512] EngineCore encountered a fatal error.\n"
            "(Worker_TP0 pid=701) INFO 03-14 11:05:13 [multiproc_executor.py:500] Parent process exited, terminating "
            "worker\n")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.FATAL_SIGNAL
    assert (v.first_failure.rank, v.first_failure.pid) == (1, 702) and "SIGABRT" in v.first_failure.what
    by_rank = {r.rank: r for r in v.ranks if r.role == "worker"}
    assert by_rank[1].status == Status.FAILED and by_rank[1].exit_code == -6
    assert by_rank[0].status == Status.COLLATERAL and "parent" in by_rank[0].failure


def test_a_killed_worker_is_first_failure_not_a_cuda_verdict(shared_case):
    case, truth = shared_case("C_sigkill_worker_tp1_mid_stream_tp2")
    v = case.verdict
    assert v.failure_kind == FailureKind.WORKER_KILLED and v.error is None
    assert v.environment["phase"] == "decode"
    assert v.first_failure.pid == truth["injection"]["pid"]
    assert {r.pid: r.exit_code for r in v.ranks}[truth["injection"]["pid"]] == -9


def test_segfault_with_a_core_file_is_a_fatal_signal():
    v = analyze(str(DATA / "gpu/cpu_segv_core")).verdict
    assert v.failure_kind == FailureKind.FATAL_SIGNAL and v.error is None
    (proc,) = v.ranks
    assert (proc.pid, proc.status) == (1032, Status.FAILED) and "Segmentation fault" in proc.failure


def test_single_process_segfault_keeps_the_pid_of_the_process_that_failed():
    v = analyze(str(DATA / "gpu/cpu_segv_core")).verdict
    assert v.first_failure.rank is None
    assert v.first_failure.pid == 1032


def test_a_shard_reported_crashed_is_not_healthy():
    text = ("2025-05-26T09:02:11.102901Z  INFO text_generation_launcher: Sharding model on 2 processes\n"
            "2025-05-26T09:02:14.881533Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n"
            "2025-05-26T09:02:14.881611Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n"
            "2025-05-26T09:05:00.200000Z ERROR text_generation_launcher: Shard 1 crashed\n")
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 1
    assert statuses(v)[1] != Status.HEALTHY


# --- OOM, start-up ---------------------------------------------------------------------------

def test_cuda_oom_is_an_oom_verdict_not_a_fault():
    v = analyze(str(HANDMADE / "oom_during_prefill")).verdict
    assert v.failure_kind == FailureKind.OOM and v.error is None
    assert v.first_failure.rank == 1 and v.origin is None
    assert statuses(v) == {0: Status.COLLATERAL, 1: Status.FAILED}
    steps = {s.id for s in v.next_steps}
    assert "oom-memory" in steps and "sanitizer" not in steps      # nothing to find in kernels


def test_startup_failure():
    v = analyze(str(HANDMADE / "startup_failure")).verdict
    # out of memory for the KV cache while starting: the most specific cause, out of memory
    # (docs/reasoning.md, the kind), in the phase the engine was in
    assert v.failure_kind == FailureKind.OOM and v.environment["phase"] == "startup"
    assert "No available memory" in v.first_failure.what and "No available memory" in v.headline
    assert {"sanitizer", "coredump"}.isdisjoint(s.id for s in v.next_steps)


def test_startup_failure_summary_says_what_failed():
    v = analyze(str(HANDMADE / "startup_failure")).verdict
    assert "No available memory" in v.summary


# --- a single process, no ranks -----------------------------------------------------------------

FRAGMENT = '''Traceback (most recent call last):
  File "/app/bench/run_decode.py", line 64, in <module>
    out = runner.step(batch)
  File "/app/bench/runner.py", line 140, in step
    torch.cuda.synchronize()
  File "/usr/local/lib/python3.11/site-packages/torch/cuda/__init__.py", line 985, in synchronize
    return torch._C._cuda_synchronize()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
'''


def test_a_single_process_fragment_without_rank_information():
    v = analyze_text(FRAGMENT).verdict
    assert v.failed and v.failure_kind == FailureKind.CUDA_ERROR
    assert v.error.code == 700
    assert v.first_failure.rank is None and v.first_failure.pid is None
    assert not [r for r in v.ranks if r.role == "worker"] and v.collateral == ()
    (s,) = v.surfaces
    # the innermost frame (torch's own, which called the runtime), and the user's call beside it
    assert (s.rank, s.file, s.line, s.function, s.api) == \
        (None, "/usr/local/lib/python3.11/site-packages/torch/cuda/__init__.py", 985, "synchronize",
         "torch.cuda.synchronize")
    assert s.caller == "runner.py:140 in step"
    assert "__init__.py:985" in v.headline and "runner.py:140" in v.headline


# --- a device assert surfacing as a cuBLAS status -------------------------------------------------

ASSERT_THEN_CUBLAS = "".join(
    f"/opt/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1237: indexSelectSmallIndex: block: [7,0,0], thread: "
    f"[{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n" for t in range(3)) + '''Traceback (most recent call last):
  File "/home/dev/finetune/run_lora.py", line 88, in <module>
    loss = train_step(model, batch)
  File "/home/dev/finetune/run_lora.py", line 51, in train_step
    logits = model(input_ids=batch["input_ids"]).logits
  File "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", line 1736, in _call_impl
    return forward_call(*args, **kwargs)
  File "/usr/lib/python3/dist-packages/transformers/models/mistral/modeling_mistral.py", line 212, in forward
    query_states = self.q_proj(hidden_states)
  File "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", line 125, in forward
    return F.linear(input, self.weight, self.bias)
RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`
'''
LATER_ASSERT_ERROR = '''Exception ignored in: <function StagingBuffer.__del__ at 0x7f00aa11c0>
Traceback (most recent call last):
  File "/home/dev/finetune/buffers.py", line 12, in __del__
    torch.cuda.synchronize()
RuntimeError: CUDA error: device-side assert triggered
'''


def test_device_assert_surfacing_as_cublas_status():
    v = analyze_text(ASSERT_THEN_CUBLAS).verdict
    assert v.failure_kind == FailureKind.DEVICE_ASSERT
    # the cause is the assert: its kernel is the origin ...
    assert v.origin.kernel == "indexSelectSmallIndex" and "srcIndex < srcSelectDimSize" in v.origin.fault
    # ... and the surface is the cuBLAS call that noticed it
    (s,) = v.surfaces
    assert s.api == "cublasGemmEx"
    assert (s.file.rsplit("/", 1)[-1], s.line, s.function, s.caller) == \
        ("linear.py", 125, "forward", "modeling_mistral.py:212 in forward")
    assert v.error.name == "CUBLAS_STATUS_EXECUTION_FAILED" and v.error.code is None
    assert {p.part: p.value for p in v.signature_parts}["fault"] == "device-assert"


def test_device_assert_error_reported_beside_the_cublas_status_is_the_error():
    v = analyze_text(ASSERT_THEN_CUBLAS + LATER_ASSERT_ERROR).verdict
    assert v.failure_kind == FailureKind.DEVICE_ASSERT
    assert (v.error.name, v.error.code) == ("CUDA_ERROR_ASSERT", 710)
    assert v.origin.kernel == "indexSelectSmallIndex"
    assert v.surfaces[0].api == "cublasGemmEx"


def test_device_assert_verdict_says_it_surfaced_as_the_cublas_status():
    v = analyze_text(ASSERT_THEN_CUBLAS + LATER_ASSERT_ERROR).verdict
    assert v.error.cause_of == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert "surfaced as CUBLAS_STATUS_EXECUTION_FAILED" in v.summary


def test_summary_of_a_native_error_surface_does_not_print_none():
    text = ("(Worker_TP2 pid=12) ERROR 11-20 08:00:05 [a.py:1] Failed: Cuda error /x/custom_all_reduce.cuh:9 "
            "'an illegal memory access was encountered'\n")
    v = analyze_text(text).verdict
    assert "custom_all_reduce.cuh:9" in v.summary
    assert "None" not in v.summary


# --- no failure ---------------------------------------------------------------------------------

HEALTHY = '''(APIServer pid=900) INFO 04-01 10:00:00 [api_server.py:1100] vLLM API server version 0.10.2
(EngineCore_DP0 pid=910) INFO 04-01 10:00:05 [core.py:93] Initializing a V1 LLM engine (v0.10.2) with config: model='acme/tiny', tensor_parallel_size=1
(APIServer pid=900) INFO 04-01 10:00:30 [launcher.py:44] Route: /v1/completions, Methods: POST
(APIServer pid=900) INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 200 OK
(APIServer pid=900) INFO 04-01 10:00:41 [loggers.py:123] Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 30.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
'''


def test_no_failure_is_no_failure():
    v = analyze_text(HEALTHY).verdict
    assert not v.failed and v.failure_kind is None
    assert v.error is None and v.first_failure is None and v.origin is None and v.hang is None
    assert v.headline == "No failure found in the inputs."
    assert v.signature is None and v.next_steps == () and v.known_issues == ()
    assert {r.role: r.status for r in v.ranks} == {"engine-core": Status.HEALTHY, "api-server": Status.HEALTHY}
    assert v.environment["vllm"] == "0.10.2"


def test_a_clean_shutdown_of_a_healthy_server_is_no_failure(shared_case):
    case, truth = shared_case("A_healthy_tp2_chunked_prefill")
    assert truth["injection"]["kind"] == "none"
    assert not case.verdict.failed
    assert case.verdict.signature is None


def test_a_watchdog_abort_alone_quoting_the_timeout_is_a_hang():
    text = ("terminate called after throwing an instance of 'c10::DistBackendError'\n"
            "  what():  [PG 0 (default_pg) Rank 2] Process group watchdog thread terminated with exception: [Rank 2] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5512, OpType=ALLREDUCE, NumelIn=1024, "
            "NumelOut=1024, Timeout(ms)=1800000) ran for 1800092 milliseconds before timing out.\n")
    v = analyze_text(text).verdict
    assert v.failed and v.failure_kind.value == "nccl-timeout"


def test_a_kernel_log_alone_with_a_gpu_that_fell_off_the_bus_is_a_failure():
    text = ("[Thu Oct 23 11:52:07 2025] NVRM: Xid (PCI:0000:9d:00): 79, GPU has fallen off the bus.\n"
            "[Thu Oct 23 11:52:09 2025] NVRM: Xid (PCI:0000:9d:00): 154, GPU recovery action changed from 0x0 "
            "(None) to 0x2 (Node Reboot Required)\n")
    v = analyze_text(text).verdict
    assert v.failed and "Xid 79" in v.headline
    assert v.hardware.opinion == "hardware"
