"""Fragments as users paste them: the part of a crash that made it into an issue, read for
what it still says.  Every text here is hand-made in the shape of the public issue cited
beside it; none is copied from one."""

from __future__ import annotations

from forensics.events import Kind
from forensics.timeline import MAIN_PROCESS
from forensics.verdict import FailureKind, Status
from tests.helpers import analyze_text


def _rows(case):
    return {r.name or r.key: r for r in case.verdict.ranks}


def test_an_nccl_error_of_the_process_own_is_where_it_surfaced():
    # pynccl's communicator set-up failing at start-up, the traceback's header above the
    # paste (https://github.com/vllm-project/vllm/issues/16707 shape)
    text = ('[rank0]:   File "/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/'
            'pynccl_wrapper.py", line 277, in ncclCommInitRank\n'
            '[rank0]:     self.NCCL_CHECK(self._funcs["ncclCommInitRank"](ctypes.byref(comm),\n'
            '[rank0]:   File "/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/'
            'pynccl_wrapper.py", line 256, in NCCL_CHECK\n'
            '[rank0]:     raise RuntimeError(f"NCCL error: {error_str}")\n'
            "[rank0]: RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n")
    v = analyze_text(text).verdict
    (surface,) = v.surfaces
    assert (surface.file.rsplit("/", 1)[-1], surface.line, surface.function) == \
        ("pynccl_wrapper.py", 277, "ncclCommInitRank")
    assert v.first_failure.rank == 0


def test_a_peer_nccl_failure_is_no_surface_of_the_process_that_saw_it():
    text = ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/srv/train.py", line 40, in step\n'
            "[rank1]:     dist.all_reduce(t)\n"
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
            "exited or there was a network error, NCCL version 2.21.5\n")
    case = analyze_text(text)
    (event,) = [e for e in case.events if e.kind == Kind.NCCL]
    assert case.verdict.surfaces == ()
    assert _rows(case)["rank:1"].status == Status.COLLATERAL
    assert case.verdict.failure_kind == FailureKind.RELAY_ONLY


def test_a_cut_after_the_cuda_error_does_not_hide_where_it_surfaced():
    # a CUDA graph replay raising, then a second exception while a stream context exits,
    # the paste cut inside it (https://github.com/sgl-project/sglang/issues/3423 shape);
    # its quotes escaped as a JSON log field escapes them
    text = ('  File \\"/srv/model/layers.py\\", line 88, in forward\n'
            "    y = self.proj(x)\n"
            "torch.AcceleratorError: CUDA error: an illegal instruction was encountered\n"
            "\n"
            "During handling of the above exception, another exception occurred:\n"
            "\n"
            "Traceback (most recent call last):\n"
            '  File \\"/srv/sglang/managers/tp_worker_overlap_thread.py\\", line 140, in forward_thread_func\n'
            "    with torch.get_device_module(self.device).stream(self.forward_stream):\n"
            '  File \\"/usr/lib/python3.12/site-packages/torch/cuda/')
    v = analyze_text(text).verdict
    assert v.error.code == 715
    (surface,) = v.surfaces
    assert (surface.file.rsplit("/", 1)[-1], surface.line, surface.function) == ("layers.py", 88, "forward")


def test_an_allocation_is_where_out_of_memory_surfaced_even_in_an_engine_cores_cut_traceback():
    # vLLM's engine core failing to start while it creates weights, the paste cut inside a
    # torch frame (https://github.com/vllm-project/vllm/issues/28266 shape)
    head = "(EngineCore_DP0 pid=4242) ERROR 11-05 12:19:32 [core.py:708] "
    text = ("(EngineCore_DP0 pid=4242) ERROR 11-05 12:19:32 [linear.py:210] Failed to create unquantized linear "
            "weights: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 93.09 GiB\n"
            + head + "EngineCore failed to start.\n"
            + head + "Traceback (most recent call last):\n"
            + head + '  File "/venv/lib/python3.10/site-packages/vllm/model_executor/layers/linear.py", line 202, '
                     "in create_weights\n"
            + head + "    weight = ModelWeightParameter(data=torch.empty(\n"
            + head + '  File "/venv/lib/python3.10/site-packages/torch/utils/_device.')
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.OOM
    (surface,) = v.surfaces
    assert (surface.file.rsplit("/", 1)[-1], surface.line, surface.function, surface.api) == \
        ("linear.py", 202, "create_weights", "torch.empty")


def test_python_logging_with_a_pid_column_names_the_process():
    # a logging config of "%(asctime)s %(levelname)s %(process)d [%(filename)s:%(lineno)d]"
    # (https://github.com/vllm-project/vllm/issues/11366 shape)
    text = ("2024-12-19 21:40:35 WARNING 56542 [model_runner_base.py:143] Failed to pickle inputs of failed "
            "execution: CUDA error: an illegal memory access was encountered\n"
            "2024-12-19 21:40:35 ERROR 56542 [async_llm_engine.py:64] Engine background task failed\n")
    v = analyze_text(text).verdict
    assert v.first_failure.pid == 56542 and v.error.code == 700


def test_deepspeeds_launcher_names_the_failed_child_by_its_local_rank():
    # https://github.com/hiyouga/LLaMA-Factory/issues/2934 shape: only the launcher speaks
    text = ("[2024-03-20 20:31:29,210] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3353707\n"
            "[2024-03-20 20:31:29,269] [ERROR] [launch.py:321:sigkill_handler] ['/venv/bin/python', '-u', "
            "'src/train_bash.py', '--local_rank=4', '--stage', 'sft'] exits with return code = 1\n")
    case = analyze_text(text)
    child = _rows(case)["rank:4"]
    assert child.rank == 4 and child.status == Status.FAILED
    assert case.verdict.first_failure.rank == 4
    # an exit code, not a signal: the child raised, its own error is not in the inputs
    assert case.verdict.failure_kind == FailureKind.RELAY_ONLY


def test_torchs_advice_alone_is_a_cuda_error_of_unknown_code_and_no_second_error_under_one():
    # the line naming the error above the paste, a Ray actor host known by name
    # (https://github.com/volcengine/verl/issues/1157 shape)
    prefix = "(WorkerDict pid=1052, ip=train-job-worker-0) "
    alone = (prefix + "CUDA kernel errors might be asynchronously reported at some other API call, so the "
             "stacktrace below might be incorrect.\n"
             + prefix + "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
             + prefix.rstrip() + "\n"
             + prefix + "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/"
                        "CUDAException.cpp:43 (most recent call first):\n")
    case = analyze_text(alone)
    v = case.verdict
    assert v.failure_kind == FailureKind.CUDA_ERROR and v.error is None
    assert v.first_failure.pid == 1052
    assert len([e for e in case.events if e.kind == Kind.CUDA_ERROR]) == 1
    # under the error line itself the advice is its continuation: one error, with its code
    under = prefix + "RuntimeError: CUDA error: an illegal memory access was encountered\n" + alone
    case = analyze_text(under)
    errors = [e for e in case.events if e.kind == Kind.CUDA_ERROR]
    assert len(errors) == 1 and case.verdict.error.code == 700


def test_a_native_stack_that_shows_the_process_going_down_is_its_fatal_end():
    # the banner above the stack not in the paste: Ray's terminate hook then libstdc++
    # (https://github.com/vllm-project/vllm/issues/13236 shape)
    going_down = ("/venv/lib/python3.10/dist-packages/ray/_raylet.so(+0x10bc932) [0x7f3da67f5932] "
                  "ray::TerminateHandler()\n"
                  "/usr/lib/x86_64-linux-gnu/libstdc++.so.6(+0xaa37c) [0x7f3eecc6e37c]\n"
                  "/usr/lib/x86_64-linux-gnu/libstdc++.so.6(+0xaa3e7) [0x7f3eecc6e3e7]\n")
    case = analyze_text(going_down)
    assert case.verdict.failure_kind == FailureKind.FATAL_SIGNAL
    assert _rows(case)[MAIN_PROCESS].status == Status.FAILED
    # frames of an ordinary call (a live thread's stack, an exception a caller may catch):
    # no failure of their own
    ordinary = ("/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so(+0xe427c9) [0x7fd15b3007c9] "
                "c10d::ProcessGroupNCCL::ncclCommWatchdog()\n"
                "/lib/x86_64-linux-gnu/libstdc++.so.6(+0xdc253) [0x7fdb8764e253]\n"
                "/lib/x86_64-linux-gnu/libc.so.6(+0x94ac3) [0x7fdb899c4ac3]\n")
    assert analyze_text(ordinary).verdict.failure_kind is None


def test_the_drivers_core_dump_start_makes_a_cut_traceback_a_cuda_error():
    # the exception line naming the error cut off, the driver's first core dump line above
    # the scheduler's traceback (https://github.com/sgl-project/sglang/issues/6732 shape)
    text = ("Starting GPU coredump generation, set the CUDA_COREDUMP_SHOW_PROGRESS environment variable to 1 to "
            "enable more detailed output\n"
            "[2025-05-27 04:36:06 DP1 TP4] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/srv/sglang/managers/tp_worker_overlap_thread.py", line 193, in resolve_last_batch_result\n'
            "    copy_done.synchronize()\n"
            '  File "/venv/lib/python3.10/site-packages/torch/cuda/streams.py", line 224, in synchronize\n'
            "    super().synchronize()\n")
    case = analyze_text(text)
    v = case.verdict
    assert v.failure_kind == FailureKind.CUDA_ERROR and v.error is None
    assert v.first_failure.rank == 4
    (row,) = [r for r in v.ranks if r.rank == 4]
    assert row.status == Status.SURFACED
    (surface,) = v.surfaces
    assert (surface.file.rsplit("/", 1)[-1], surface.line) == ("streams.py", 224)


def test_an_engines_timeout_on_its_workers_is_its_own_failure_of_kind_hang_where_the_cause_raised():
    # vLLM's engine core: the shm_broadcast read times out, the busy loop dies of it, the
    # paste cut inside that second traceback (https://github.com/vllm-project/vllm/issues/23068 shape)
    head = "(EngineCore pid=222) ERROR 08-15 11:20:19 [core.py:1361] "
    text = "".join(head + line + "\n" for line in (
        '  File "/venv/lib/python3.12/site-packages/vllm/distributed/device_communicators/shm_broadcast.py", '
        "line 647, in timeout_ms",
        "    raise TimeoutError",
        "TimeoutError",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1352, in run_engine_core',
        "    engine_core.run_busy_loop()",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1393, in run_busy_loop'))
    case = analyze_text(text)
    v = case.verdict
    assert v.failure_kind == FailureKind.HANG
    assert v.first_failure.pid == 222
    (surface,) = v.surfaces
    assert (surface.file.rsplit("/", 1)[-1], surface.line, surface.function) == ("shm_broadcast.py", 647, "timeout_ms")
    (event,) = [e for e in case.events if e.chain]
    assert event.message.startswith("TimeoutError") and event.attrs["cut"]


def test_a_lone_process_whose_own_watchdog_says_it_stalled_is_the_hangs_first_failure():
    # SGLang's scheduler watchdog on TP0 and the parent's sigquit, nothing else
    # (https://github.com/sgl-project/sglang/issues/7400 shape)
    text = ("[2025-06-22 16:13:55 TP0] Watchdog timeout (self.watchdog_timeout=300)\n"
            "[2025-06-22 16:13:55 TP0] Pyspy failed to dump PID 1234. Error: No such file or directory\n"
            "[2025-06-22 16:14:00] Received sigquit from a child process. It usually means the child failed.\n")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.HANG and v.first_failure.rank == 0
    # a process that only waits on others below it (vLLM's engine core on its workers'
    # message queue) is no culprit: the stalled one is not shown
    waits = ("(EngineCore_DP0 pid=2025) WARNING 01-02 03:04:05 [shm_broadcast.py:466] No available shared memory "
             "broadcast block found in 60 seconds. This typically happens when some processes are hanging.\n")
    v = analyze_text(waits).verdict
    assert v.first_failure is None or v.first_failure.pid is None


def test_a_process_announcing_its_own_failure_failed_even_when_its_traceback_is_cut_away():
    # vLLM V0's driver worker: "Error executing method init_device", the paste ends there
    # (https://github.com/vllm-project/vllm/issues/7939 shape)
    text = ("ERROR 08-27 05:12:18 worker_base.py:382] Error executing method init_device. This might cause "
            "deadlock in distributed execution.\n"
            "ERROR 08-27 05:12:18 worker_base.py:382]\n")
    v = analyze_text(text).verdict
    assert v.first_failure.name == MAIN_PROCESS
    assert _rows(analyze_text(text))[MAIN_PROCESS].status == Status.FAILED


def test_an_announcement_is_no_rival_of_an_error_shown_in_the_same_second():
    # rank 6's NCCL init error in full; rank 3 only says it failed to start, the same second
    # (https://github.com/vllm-project/vllm/issues/21384 shape)
    text = ('(VllmWorker rank=6 pid=409) ERROR 07-23 19:34:51 [multiproc_executor.py:511]   File "/venv/lib/python3.12/'
            'site-packages/vllm/distributed/device_communicators/pynccl_wrapper.py", line 286, in ncclCommInitRank\n'
            "(VllmWorker rank=6 pid=409) ERROR 07-23 19:34:51 [multiproc_executor.py:511]     self.NCCL_CHECK(self._funcs"
            '["ncclCommInitRank"](ctypes.byref(comm),\n'
            "(VllmWorker rank=6 pid=409) ERROR 07-23 19:34:51 [multiproc_executor.py:511] RuntimeError: NCCL error: "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n"
            "(VllmWorker rank=3 pid=406) ERROR 07-23 19:34:51 [multiproc_executor.py:485] WorkerProc failed to start.\n")
    case = analyze_text(text)
    assert case.verdict.first_failure.rank == 6
    rows = {r.rank: r for r in case.verdict.ranks if r.rank is not None}
    assert rows[6].status == Status.FAILED and rows[3].status == Status.UNKNOWN


def test_rays_unhandled_task_error_hands_the_frames_below_it_to_the_worker_it_names():
    # the engine actor printing the worker's error nobody retrieved, the frames cut
    # (https://github.com/triton-inference-server/server/issues/6246 shape)
    prefix = "(_AsyncLLMEngine pid=10245) "
    text = (prefix + "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::RayWorkerVllm."
            "execute_method() (pid=10360, ip=10.42.0.27, actor_id=f9f1b309, repr=<vllm.engine.ray_utils.RayWorkerVllm "
            "object at 0x7f>)\n"
            + prefix + '  File "/venv/lib/python3.10/site-packages/vllm/engine/ray_utils.py", line 31, in execute_method\n'
            + prefix + "    return executor(*args, **kwargs)\n"
            + prefix + '  File "/venv/lib/python3.10/site-packages/vllm/worker/worker.py", line 147, in execute_model\n')
    case = analyze_text(text)
    (tb,) = [e for e in case.events if e.chain]
    assert tb.pid == 10360 and tb.process == "RayWorkerVllm"
    assert case.verdict.first_failure.pid == 10360
    assert {r.pid: r.status for r in case.verdict.ranks}[10245] == Status.COLLATERAL


def test_a_consoles_own_records_beside_the_processes_it_relays_are_its_main_process():
    # Ray's driver console: the actors' lines prefixed, the driver's own logger record bare
    # (https://github.com/triton-inference-server/server/issues/6246 shape)
    text = ("I0606 07:44:10.297581 8157 model.py:275] [vllm] Error generating stream: Task finished unexpectedly.\n"
            "(_AsyncLLMEngine pid=10245) Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): "
            "ray::RayWorkerVllm.execute_method() (pid=10360, ip=10.42.0.27, actor_id=f9f1b309)\n"
            '(_AsyncLLMEngine pid=10245)   File "/venv/lib/python3.10/site-packages/vllm/worker/worker.py", line 147, '
            "in execute_model\n")
    case = analyze_text(text)
    rows = _rows(case)
    assert rows[MAIN_PROCESS].status == Status.COLLATERAL
    # raw lines (no logger's record header) stay unsigned: a child's stderr comes through bare
    bare = ("(APIServer pid=7) INFO 01-02 03:04:05 [api_server.py:1] ready\n"
            "Segmentation fault (core dumped)\n")
    assert MAIN_PROCESS not in _rows(analyze_text(bare))


def test_in_a_hang_a_process_that_says_nothing_of_how_it_fared_is_unknown_not_healthy():
    # NCCL set-up lines from two processes and one rank's watchdog timeout between them
    # (https://github.com/sgl-project/sglang/issues/4296 shape)
    text = ("host:190:190 [2] NCCL INFO ncclCommSplit comm 0x5601dc4ed8b0 rank 2 nranks 16 cudaDev 2 busId 41000 - "
            "Init COMPLETE\n"
            "host:192:192 [4] NCCL INFO Channel 00/0 : 4[4] -> 5[5] via P2P/CUMEM\n"
            "[rank4]:[E226 11:16:37.104512 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, NumelIn=58720256, NumelOut=58720256, Timeout(ms)=600000) "
            "ran for 600010 milliseconds before timing out.\n")
    case = analyze_text(text)
    assert case.verdict.first_failure.rank == 4
    statuses = {r.pid: r.status for r in case.verdict.ranks if r.pid is not None}
    assert statuses and all(s == Status.UNKNOWN for s in statuses.values()), statuses
