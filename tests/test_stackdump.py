"""Whole-process stack dumps and native crash reports: CPython faulthandler and py-spy
(forensics/parsers/text/stackdump.py, grammars/python_faulthandler.lark, py_spy.lark),
std::terminate / PyTorch's segfault banner / absl's handler (parsers/text/native.py).

Real recordings: tests/data/cpu (see its README.md: faulthandler on a NULL read,
py-spy on a hung process).  Other inputs are hand-made in the tools' printed shapes.
"""

from __future__ import annotations


from forensics.events import Kind, Severity
from forensics.parsers.text import stackdump
from tests.conftest import DATA
from tests.helpers import analyze_text, parse_text


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


# --- faulthandler ----------------------------------------------------------------------

def test_faulthandler_segfault_real():
    parsed = parse_text((DATA / "cpu/faulthandler_segv/console.txt").read_bytes(), "console.txt")
    (event,) = parsed.events
    assert (event.kind, event.severity) == (Kind.FATAL_SIGNAL, Severity.CRITICAL)
    assert (event.attrs["signal_text"], event.attrs["signal_name"]) == ("Segmentation fault", "SIGSEGV")
    current = event.attrs["current_thread"]
    assert current["thread"] == "0x00007fa7b9816b80" and current["current"] is True
    assert [f.function for f in current["frames"]] == ["string_at", "engine_step", "busy_loop", "<module>"]
    assert [(f.file, f.line) for f in current["frames"]][1] == ("/tmp/rec/fh_demo.py", 5)
    other, _ = event.attrs["threads"]
    assert other["current"] is False and other["frames"][0].function == "heartbeat"
    assert len(event.attrs["threads"]) == 2
    # the innermost frame outside the standard library is where it crashed
    assert event.attrs["crash_frame"].function == "engine_step"
    assert "engine_step" in event.message
    assert parsed.kind == "faulthandler" and parsed.unparsed_lines == 0 and accounted(parsed)


def test_faulthandler_segfault_real_is_the_first_failure():
    case = analyze_text((DATA / "cpu/faulthandler_segv/console.txt").read_bytes())
    assert case.verdict.failure_kind is not None
    assert [e.kind for e in case.events] == [Kind.FATAL_SIGNAL]


def test_faulthandler_timeout_is_a_stack_dump_not_a_crash():
    parsed = parse_text("Timeout (0:10:00)!\n"
                        "Thread 0x00007f1a2b3c4700 (most recent call first):\n"
                        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
                        "line 2501 in all_reduce\n"
                        '  File "/srv/train.py", line 77 in step\n'
                        "\n"
                        "Current thread 0x00007f1a2b3c5800 (most recent call first):\n"
                        "  <no Python frame>\n")
    (event,) = parsed.events
    assert (event.kind, event.severity) == (Kind.STACK_DUMP, Severity.WARNING)
    assert event.attrs["timeout"] == "0:10:00"
    assert event.attrs["current_thread"]["frames"] == ()
    waiting = event.attrs["threads"][0]
    assert [f.function for f in waiting["frames"]] == ["all_reduce", "step"]
    assert "signal_name" not in event.attrs
    assert parsed.unparsed_lines == 0


def test_faulthandler_single_stack_and_extension_modules():
    parsed = parse_text("Fatal Python error: Aborted\n"
                        "\n"
                        "Stack (most recent call first):\n"
                        '  File "/srv/c.py", line 5 in crash\n'
                        '  File "/srv/c.py", line 9 in <module>\n'
                        "\n"
                        "Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)\n")
    (event,) = parsed.events
    assert event.attrs["signal_name"] == "SIGABRT"
    assert event.attrs["crash_frame"].function == "crash"
    assert event.attrs["current_thread"]["thread"] is None
    assert parsed.formats == {"faulthandler": 7} and parsed.unparsed_lines == 0


def test_faulthandler_dumps_of_two_ranks_interleaved():
    parsed = parse_text("[rank0]: Fatal Python error: Aborted\n"
                        "[rank1]: Fatal Python error: Segmentation fault\n"
                        "[rank0]: \n"
                        "[rank1]: \n"
                        "[rank0]: Thread 0x00007f0000000001 (most recent call first):\n"
                        "[rank1]: Current thread 0x00007f0000000002 (most recent call first):\n"
                        '[rank0]:   File "/srv/a.py", line 3 in wait_all\n'
                        '[rank1]:   File "/srv/b.py", line 9 in crash_here\n'
                        '[rank1]:   File "/srv/b.py", line 20 in main\n')
    by_rank = {e.rank: e for e in parsed.events}
    assert set(by_rank) == {0, 1}
    # rank 0's dump shows another thread only: what it was doing, not where rank 0 died
    assert by_rank[0].attrs["signal_name"] == "SIGABRT" and "crash_frame" not in by_rank[0].attrs
    assert by_rank[0].attrs["threads"][0]["frames"][0].function == "wait_all"
    assert (by_rank[1].attrs["signal_name"], by_rank[1].attrs["crash_frame"].function) == ("SIGSEGV", "crash_here")
    assert [f.line for f in by_rank[1].attrs["current_thread"]["frames"]] == [9, 20]
    assert parsed.unparsed_lines == 0


def test_dump_block_ends_at_the_first_line_of_another_shape():
    lines = ["Fatal Python error: Aborted", "", "Current thread 0x00007f (most recent call first):",
             '  File "a.py", line 3 in f', "", "after the dump"]
    block = stackdump.start(lines[0])
    taken = [block.accepts(line, n, None) for n, line in enumerate(lines, 1)]
    assert taken == [True, True, True, True, True, False]
    assert stackdump.start("INFO something") is None


def test_a_dump_that_does_not_parse_is_counted_not_lost():
    parsed = parse_text("Fatal Python error: Aborted\n\nThread 0x1 (most recent call first):\n"
                        '  File "a.py", line x in f\n  File "b.py", line 3 in g\n')
    assert parsed.events == []
    assert parsed.unparsed_lines == 4 and accounted(parsed)
    assert any("faulthandler dump that does not parse" in p for p in parsed.problems)


# --- py-spy -------------------------------------------------------------------------------

def test_py_spy_dump_of_a_hung_process_real():
    parsed = parse_text((DATA / "cpu/pyspy_hang/py-spy_dump.txt").read_bytes(), "py-spy_dump.txt")
    (event,) = parsed.events
    assert (event.kind, event.severity) == (Kind.STACK_DUMP, Severity.INFO)
    assert event.pid == 13474 and event.attrs["subject_pid"] == 13474
    assert event.attrs["command"] == "/root/.pyenv/versions/3.11.7/bin/python3 hang_demo.py"
    main, heartbeat = event.attrs["threads"]
    assert (main["thread"], main["state"], main["name"]) == ("13474", "idle", "MainThread")
    assert [f.function for f in main["frames"]][:3] == ["Condition.wait", "Queue.get", "all_reduce_wait"]
    assert (main["frames"][2].file, main["frames"][2].line) == ("hang_demo.py", 7)
    assert heartbeat["name"] == "heartbeat"
    assert event.message == "py-spy dump of pid 13474 - 13474 in Condition.wait"
    assert parsed.kind == "py-spy" and parsed.unparsed_lines == 0 and accounted(parsed)


PYSPY_LOCALS = """\
Process 4242: python3 -m vllm.entrypoints.openai.api_server
Python v3.12.3 (/usr/bin/python3.12)

Thread 4242 (active+gil): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2501)
        Arguments:
            tensor: <Tensor at 0x7f3a>
        Locals:
            work: None
    forward (vllm/model.py:120)
Thread 4300 (idle): "Thread-3"
    wait (threading.py:355)
Thread 4301 (active)
    <native> (libc.so.6)
"""


def test_py_spy_with_locals_and_a_native_frame():
    parsed = parse_text(PYSPY_LOCALS)
    (event,) = parsed.events
    main, other, native = event.attrs["threads"]
    assert [f.function for f in main["frames"]] == ["all_reduce", "forward"]
    assert other["state"] == "idle" and native["name"] is None
    assert native["frames"][0].line is None and native["frames"][0].file == "libc.so.6"
    assert parsed.unparsed_lines == 0 and not parsed.problems


def test_py_spy_hex_thread_ids():
    parsed = parse_text(PYSPY_LOCALS.replace("Thread 4242 (active+gil)", "Thread 0x7F3A2B1C4740 (active+gil)"))
    (event,) = parsed.events
    assert event.attrs["threads"][0]["thread"] == "0x7F3A2B1C4740"
    assert parsed.unparsed_lines == 0


# --- native crash reports ---------------------------------------------------------------

def test_std_terminate_with_a_cuda_error_in_what():
    parsed = parse_text("terminate called after throwing an instance of 'c10::DistBackendError'\n"
                        "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated "
                        "with exception: CUDA error: an illegal memory access was encountered\n"
                        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
                        "(most recent call first):\n"
                        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f1 in "
                        "/opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so)\n"
                        "frame #1: <unknown function> + 0x1234 (0x7f2 in "
                        "/opt/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so)\n"
                        "\n"
                        "INFO next\n")
    (event,) = parsed.events
    assert (event.kind, event.severity) == (Kind.CUDA_ERROR, Severity.CRITICAL)
    a = event.attrs
    assert (a["crash"], a["cxx_type"], a["signal_name"]) == ("cxx-exception", "c10::DistBackendError", "SIGABRT")
    assert a["cuda_error"].code == 700 and a["error_form"] == "nccl-watchdog"
    assert (a["raised_function"], a["raised_file"], a["raised_line"]) == (
        "c10_cuda_check_implementation", "/pytorch/c10/cuda/CUDAException.cpp", 43)
    assert a["native_frame_count"] == 2
    assert parsed.formats["native-exception"] == 6 and parsed.unparsed_lines == 0


def test_std_terminate_without_a_cuda_error_is_a_fatal_signal():
    parsed = parse_text("terminate called after throwing an instance of 'std::runtime_error'\n"
                        "  what():  bad config\n")
    (event,) = parsed.events
    assert event.kind == Kind.FATAL_SIGNAL
    assert event.message == "terminate called after throwing std::runtime_error: bad config"


def test_pytorch_segfault_banner_and_absl_handler():
    parsed = parse_text("!!!!!!! Segfault encountered !!!!!!!\n")
    (event,) = parsed.events
    assert (event.kind, event.attrs["crash"], event.attrs["signal_name"]) == (
        Kind.FATAL_SIGNAL, "segfault-banner", "SIGSEGV")
    parsed = parse_text("*** SIGSEGV received at time=1717000000 on cpu 12 ***\n"
                        "PC: @     0x7f00deadbeef  (unknown)  ncclProxyService()\n"
                        "    @     0x7f00deadbe00        144  (unknown)\n")
    (event,) = parsed.events
    assert (event.attrs["crash"], event.attrs["signal_name"], event.attrs["cpu"]) == ("absl", "SIGSEGV", 12)
    assert parsed.unparsed_lines == 0
