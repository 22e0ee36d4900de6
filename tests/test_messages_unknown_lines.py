"""Failure lines the message catalogue (forensics/data/messages.toml) learned to read: each
one becomes the event kind of what it *means* - a process's own error, a relay of another
process's failure, a death another process reports, waiting, a shutdown - and so the
observation the stories are made of (forensics/story.py seen_in).

Every line here is hand-made in the shape of the public issue the catalogue entry cites;
no user's text is copied.
"""

from __future__ import annotations

import pytest

from forensics.events import Kind
from forensics.parsers.text import classify
from forensics.story import Seen, seen_in
from forensics.verdict import FailureKind, Status
from tests.helpers import analyze_text, event, parse_text


def kind_of(line: str, level: str = "ERROR"):
    decided = classify.message_kind(line, level)
    assert decided is not None, line
    kind, _severity, attrs, traffic = decided
    assert traffic is None
    return kind, attrs


# --- what each line is -----------------------------------------------------------------------

@pytest.mark.parametrize("line, kind, message_id", [
    # shutdown
    ("Canceling waiting reads on SHM Buffer", Kind.SHUTDOWN, "vllm-shm-cancel"),
    # relays: the line quotes a failure elsewhere
    ("', please check the stack trace above for the root cause", Kind.ENGINE_WORKER_FAILED, "engine-worker-failed"),
    ("Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for "
     "root cause.", Kind.ENGINE_WORKER_FAILED, "worker-init-failed"),
    ("Step aborted. See the stack trace above for the root cause.", Kind.ENGINE_WORKER_FAILED, "stack-trace-above"),
    ("[vllm] Error generating stream: Background task exited", Kind.ENGINE_DEAD, "triton-stream-error"),
    ("Rank 3 scheduler is dead. Please check if there are relevant logs.", Kind.WORKER_DIED, "sglang-scheduler-dead"),
    ("Received sigquit from a child process. It usually means the child failed.", Kind.CHILD_FAILED,
     "sglang-child-sigquit"),
    ("SIGQUIT received. signum=None, frame=None. It usually means one child failed.", Kind.CHILD_FAILED,
     "sglang-child-sigquit"),
    ("Subprocess scheduler_1 (pid=7310) crashed with exit code -6.", Kind.WORKER_DIED, "sglang-subprocess-crashed"),
    # killed: another process's line says a worker died
    ("Task was killed due to the node running low on memory.", Kind.WORKER_DIED, "ray-memory-monitor-kill"),
    ("Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: the node ran low on memory", Kind.WORKER_DIED,
     "worker-died"),
    ("Worker unexpectedly exits with a connection error code 2. End of file.", Kind.WORKER_DIED, "worker-died"),
    # waiting / hang
    ("No available shared memory broadcast block found in 60 seconds.", Kind.COLLECTIVE_TIMEOUT,
     "vllm-shm-broadcast-wait"),
    ("Engine iteration timed out. This should never happen!", Kind.COLLECTIVE_TIMEOUT, "vllm-engine-iteration-timeout"),
    ("Scheduler watchdog timeout (self.watchdog_timeout=90, self.soft=False)", Kind.COLLECTIVE_TIMEOUT,
     "sglang-watchdog-timeout"),
    ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     Kind.COLLECTIVE_TIMEOUT, "sglang-detokenizer-silent"),
    ("[PG ID 0 PG GUID 0(default_pg) Rank 6] Heartbeat monitor timed out! Process will be terminated after dumping "
     "debug info. workMetaList_.size()=3", Kind.COLLECTIVE_TIMEOUT, "nccl-heartbeat"),
    # start-up failures of its own
    ("The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache "
     "(90112). Try increasing `gpu_memory_utilization`", Kind.OOM, "vllm-kv-cache-too-small"),
    ("[TRT] [E] [resizingAllocator.cpp::allocate::62] Error Code 2: OutOfMemory (Requested size was 1073741824 "
     "bytes.)", Kind.OOM, "tensorrt-out-of-memory"),
    ("failed to load 'preproc' version 3: Not found: unable to load shared library: libfoo.so", Kind.EXCEPTION,
     "triton-model-load-failed"),
    ("Failed to initialize executor on rank 0: [TensorRT-LLM][ERROR] Assertion failed: engine plan mismatch",
     Kind.EXCEPTION, "trtllm-executor-init-failed"),
    # fatal signals printed by other runtimes
    ("[gpu7:30211:0:30290] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
     Kind.FATAL_SIGNAL, "ucx-caught-signal"),
    ("[host-a:00417] Signal: Aborted (6)", Kind.FATAL_SIGNAL, "openmpi-signal"),
    ("[2025-03-04 05:06:07,890 E 51 51] logging.cc:440: *** SIGABRT received at time=1741064767 on cpu 3 ***",
     Kind.FATAL_SIGNAL, "absl-signal"),
])
def test_a_line_the_catalogue_did_not_know_becomes_its_kind(line, kind, message_id):
    got, attrs = kind_of(line)
    assert (got, attrs["message_id"]) == (kind, message_id)


@pytest.mark.parametrize("kind, seen", [
    (Kind.SHUTDOWN, Seen.SHUTDOWN), (Kind.ENGINE_WORKER_FAILED, Seen.RELAY), (Kind.ENGINE_DEAD, Seen.RELAY),
    (Kind.WORKER_DIED, Seen.RELAY), (Kind.CHILD_FAILED, Seen.RELAY), (Kind.COLLECTIVE_TIMEOUT, Seen.WAITING),
    (Kind.OOM, Seen.OWN_ERROR), (Kind.EXCEPTION, Seen.OWN_ERROR), (Kind.FATAL_SIGNAL, Seen.OWN_ERROR),
])
def test_the_kinds_chosen_are_the_observations_meant(kind, seen):
    assert seen_in(event(kind, "x"), None, None) == seen


def test_an_own_error_line_that_quotes_a_cuda_error_stays_that_cuda_error():
    # the catalogue's "exception" entries leave a quoted CUDA error to the error forms
    kind, attrs = kind_of("Failed to initialize executor on rank 1: [TensorRT-LLM][ERROR] CUDA runtime error in "
                          "cudaMalloc(&p, n): out of memory (/src/runtime/buffers.cpp:55)")
    assert kind == Kind.OOM and attrs.get("message_id") != "trtllm-executor-init-failed"
    kind, attrs = kind_of("failed to load 'llm' version 1: Internal: CUDA runtime error in cudaGetDevice(&d): "
                          "initialization error")
    assert kind == Kind.CUDA_ERROR and attrs["cuda_error"].name == "CUDA_ERROR_NOT_INITIALIZED"


def test_fields_are_read():
    _, attrs = kind_of("Memory on the node (IP: 10.0.0.9, ID: ab12) where the task (actor ID: cd34, "
                       "name=RayWorkerWrapper.__init__, pid=9120, memory used=7.10GB) was running was 30.50GB / "
                       "32.00GB (0.953125), which exceeds the memory usage threshold of 0.95.")
    assert (attrs["subject_pid"], attrs["subject_process"]) == (9120, "RayWorkerWrapper.__init__")
    _, attrs = kind_of(" [ip-10-0-0-9:7    :0:88] Caught signal 7 (Bus error: nonexistent physical address)")
    assert (attrs["subject_pid"], attrs["signal"], attrs["signal_text"]) == (7, 7, "Bus error")
    _, attrs = kind_of("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLGATHER, "
                       "Timeout(ms)=1800000) ran for 1800123 milliseconds before timing out.")
    assert (attrs["op"], attrs["ran_ms"], attrs.get("seq")) == ("ALLGATHER", 1800123, None)
    _, attrs = kind_of("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
                       "OpType=BROADCAST, NumelIn=1, NumelOut=1, Time")        # a line cut in the paste
    assert (attrs["seq"], attrs["op"]) == (12, "BROADCAST")
    _, attrs = kind_of("[PG 0 Rank 2] Exception (either an error or timeout) detected by watchdog at work: 40, "
                       "last enqueued NCCL work: 41, last completed NCCL work: 39.")
    assert (attrs["seq"], attrs["last_enqueued"], attrs["last_completed"]) == (40, 41, 39)


def test_a_traceback_ending_in_a_relay_line_is_that_relay():
    text = ("Traceback (most recent call last):\n"
            '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/executor/multiproc_executor.py", line 97, in '
            "_init_executor\n"
            "    self.workers = WorkerProc.wait_for_ready(unready_workers)\n"
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
            "trace for root cause.\n")
    (e,) = parse_text(text).events
    assert e.kind == Kind.ENGINE_WORKER_FAILED and e.attrs["message_id"] == "worker-init-failed"


# --- what the verdict makes of them ---------------------------------------------------------------

_KV_TOO_SMALL = ("The model's max seq len (40960) is larger than the maximum number of tokens that can be stored in "
                 "KV cache (20480). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                 "initializing the engine.")


def test_kv_cache_too_small_is_the_engines_own_out_of_memory():
    v = analyze_text("Available KV cache memory: 3.10 GiB\n" + _KV_TOO_SMALL + "\n").verdict
    assert v.failure_kind == FailureKind.OOM and v.first_failure is not None
    assert v.environment.get("max_model_len") == 40960


def test_kv_cache_too_small_as_an_exception_is_out_of_memory_too():
    v = analyze_text("ERROR 02-03 04:05:07 [core.py:1] ValueError: " + _KV_TOO_SMALL + "\n").verdict
    assert v.failure_kind == FailureKind.OOM


def test_tensorrt_out_of_memory_is_out_of_memory():
    v = analyze_text("[02/03/2025-04:05:06] [TRT] [E] [virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: "
                     "OutOfMemory (Requested size was 8589934592 bytes.)\n"
                     "[02/03/2025-04:05:06] [TRT-LLM] [E] Engine building failed, please check the error log.\n"
                     ).verdict
    assert v.failure_kind == FailureKind.OOM


def test_a_worker_the_ray_memory_monitor_killed_is_the_first_failure():
    v = analyze_text("Memory on the node (IP: 10.2.0.4, ID: 77aa) where the task (actor ID: 88bb, "
                     "name=RayWorkerWrapper.__init__, pid=5120, memory used=40.00GB) was running was 120.00GB / "
                     "125.00GB (0.96), which exceeds the memory usage threshold of 0.95. Ray killed this worker "
                     "(ID: 99cc) because it was the most recently scheduled task\n").verdict
    assert v.failure_kind == FailureKind.WORKER_KILLED and v.first_failure.pid == 5120


def test_a_ucx_signal_banner_is_the_processs_own_crash():
    v = analyze_text("[TensorRT-LLM][INFO] Loaded engine size: 12000 MiB\n"
                     "[node-4:8812:0:8830] Caught signal 11 (Segmentation fault: address not mapped to object at "
                     "address (nil))\n").verdict
    assert v.failure_kind == FailureKind.FATAL_SIGNAL and v.first_failure.pid == 8812


def test_sglang_parent_relays_its_childs_failure():
    case = analyze_text("[2025-03-04 05:06:07 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
                        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 99, in event_loop\n'
                        "    self.run_batch(batch)\n"
                        "RuntimeError: boom in rank one\n"
                        "[2025-03-04 05:06:08] Received sigquit from a child process. It usually means the child "
                        "failed.\n")
    v = case.verdict
    assert v.first_failure.rank == 1
    statuses = {r.rank: r.status for r in v.ranks}
    assert statuses[1] == Status.FAILED


def test_shm_cancel_is_a_worker_being_shut_down():
    case = analyze_text("(APIServer pid=1) ERROR 06-01 02:03:04 [async_llm.py:1] AsyncLLM output_handler failed.\n"
                        "(Worker_TP0 pid=51) DEBUG 06-01 02:03:04 [shm_broadcast.py:1] Canceling waiting reads on "
                        "SHM Buffer\n"
                        "(Worker_TP1 pid=52) DEBUG 06-01 02:03:04 [shm_broadcast.py:1] Canceling waiting reads on "
                        "SHM Buffer\n")
    v = case.verdict
    assert v.failure_kind == FailureKind.RELAY_ONLY
    statuses = {r.pid: r.status for r in v.ranks}
    assert statuses[51] == statuses[52] == Status.COLLATERAL
