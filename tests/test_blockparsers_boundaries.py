"""Where a block ends and what a cut block keeps (forensics/parsers/text/traceback.py,
stackdump.py): a traceback ends where another block starts instead of swallowing it, a
traceback without its exception line is marked cut, a faulthandler or py-spy dump whose
last line is cut keeps the rest, and only the crashing thread's stack names the crash
frame.  Every input here is hand-made in the printed shape of the issue it cites.
"""

from __future__ import annotations

from forensics.events import Frame, Kind, Severity
from tests.helpers import parse_text


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


def tracebacks(parsed):
    return [e for e in parsed.events if e.attrs.get("chain")]


# --- a traceback ends where another block starts ------------------------------------------

def test_a_cut_traceback_ends_at_the_next_traceback():
    parsed = parse_text("Traceback (most recent call last):\n"
                        '  File "/srv/a.py", line 3, in step\n'
                        "    run()\n"
                        '  File "/srv/b.py", line 9, in run\n'
                        "    k()\n"
                        "Traceback (most recent call last):\n"
                        '  File "/srv/c.py", line 1, in <module>\n'
                        "    main()\n"
                        "ValueError: bad shape\n")
    first, second = tracebacks(parsed)
    assert first.attrs["cut"] is True and first.chain[-1].type == ""
    assert [f.function for f in first.chain[-1].frames] == ["step", "run"]
    assert (second.line, second.attrs["exception_type"], second.attrs["cut"]) == (6, "ValueError", False)
    assert parsed.unparsed_lines == 0 and accounted(parsed)


# the shape of https://github.com/vllm-project/vllm/issues/44780 (frames, then a crash banner)
def test_a_cut_traceback_ends_at_a_crash_banner():
    parsed = parse_text('  File "/srv/engine.py", line 120, in step\n'
                        '  File "/srv/offload.py", line 77, in swap\n'
                        "!!!!!!! Segfault encountered !!!!!!!\n"
                        '  File "<unknown>", line 0, in cuMemcpyAsync\n')
    (tb,) = tracebacks(parsed)
    assert tb.attrs["cut"] is True and len(tb.chain[-1].frames) == 2
    (fatal,) = [e for e in parsed.events if e.kind == Kind.FATAL_SIGNAL]
    assert fatal.line == 3 and fatal.attrs["crash_frame"].function == "cuMemcpyAsync"
    assert parsed.unparsed_lines == 0


# the shape of https://github.com/sgl-project/sglang/issues/10216 (a faulthandler dump after
# the tail of another listing)
def test_a_cut_traceback_ends_at_a_faulthandler_dump():
    parsed = parse_text("Traceback (most recent call last):\n"
                        '  File "/srv/a.py", line 3, in step\n'
                        "Fatal Python error: Aborted\n"
                        "\n"
                        "Current thread 0x00007f0011223344 (most recent call first):\n"
                        '  File "/srv/b.py", line 12 in quant\n')
    (tb,) = tracebacks(parsed)
    assert tb.attrs["cut"] is True
    (fatal,) = [e for e in parsed.events if e.kind == Kind.FATAL_SIGNAL]
    assert fatal.line == 3 and fatal.attrs["crash_frame"] == Frame("/srv/b.py", 12, "quant")


def test_a_complete_traceback_keeps_its_message_lines():
    """c10's frame lines after the exception line are its message, not a native block."""
    parsed = parse_text("Traceback (most recent call last):\n"
                        '  File "/srv/a.py", line 3, in step\n'
                        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                        "stacktrace below might be incorrect.\n"
                        "Exception raised from c10_cuda_check_implementation at /src/c10/cuda/CUDAException.cpp:44 "
                        "(most recent call first):\n"
                        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7f01 in /opt/libc10.so)\n"
                        "frame #1: <unknown function> + 0x4c (0x7f02 in /opt/libc10_cuda.so)\n")
    (event,) = parsed.events
    assert event.kind == Kind.CUDA_ERROR and not event.attrs["cut"]
    assert "frame #1: <unknown function>" in event.attrs["exception_message"]
    assert parsed.unparsed_lines == 0


# --- faulthandler and py-spy dumps ----------------------------------------------------------

def test_a_faulthandler_dump_whose_last_line_is_cut_is_kept():
    parsed = parse_text("Fatal Python error: Segmentation fault\n"
                        "\n"
                        "Current thread 0x00007f00aabbccdd (most recent call first):\n"
                        '  File "/srv/comm.py", line 51 in init_comm\n'
                        '  File "/srv/worker.py", line 20 in start\n'
                        '  File "/srv/wor')
    (event,) = parsed.events
    assert event.kind == Kind.FATAL_SIGNAL and event.attrs["cut"] is True
    assert event.attrs["crash_frame"] == Frame("/srv/comm.py", 51, "init_comm")
    assert parsed.unparsed_lines == 1 and accounted(parsed)
    assert any("cut mid-line" in p for p in parsed.problems)


def test_a_py_spy_dump_whose_last_line_is_cut_is_kept():
    parsed = parse_text("Process 7001: python3 serve.py\n"
                        "Python v3.11.9 (/usr/bin/python3.11)\n"
                        'Thread 7001 (idle): "MainThread"\n'
                        "    wait (threading.py:320)\n"
                        "    all_gather (dist.py:2\n")
    (event,) = parsed.events
    assert event.kind == Kind.STACK_DUMP and event.attrs["cut"] is True
    assert [f.function for f in event.attrs["threads"][0]["frames"]] == ["wait"]
    assert parsed.unparsed_lines == 1


# the shape of https://github.com/sgl-project/sglang/issues/10216 (other threads only)
def test_only_the_current_thread_names_the_crash_frame():
    parsed = parse_text("Fatal Python error: Aborted\n"
                        "\n"
                        "Thread 0x00007f0000000011 (most recent call first):\n"
                        '  File "/srv/sched.py", line 90 in watchdog\n'
                        "\n"
                        "Thread 0x00007f0000000022 (most recent call first):\n"
                        '  File "/srv/quant.py", line 14 in quantize\n')
    (event,) = parsed.events
    assert event.kind == Kind.FATAL_SIGNAL and "crash_frame" not in event.attrs
    assert "current_thread" not in event.attrs and len(event.attrs["threads"]) == 2
    assert event.message == "Fatal Python error: Aborted"


# the shape of https://github.com/sgl-project/sglang/issues/3451 (the tail of one dump, then
# another process's dump)
def test_faulthandler_frames_without_their_head_are_a_fragment_not_a_traceback():
    parsed = parse_text('  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120 in spawn_main\n'
                        '  File "<string>", line 1 in <module>\n'
                        "Fatal Python error: Segmentation fault\n"
                        "\n"
                        "Current thread 0x00007f0000000033 (most recent call first):\n"
                        '  File "/srv/pynccl.py", line 300 in comm_init\n')
    fragment, fatal = parsed.events
    assert (fragment.kind, fragment.severity) == (Kind.LOG, Severity.INFO)
    assert [f.function for f in fragment.attrs["fragment_frames"]] == ["spawn_main", "<module>"]
    assert fatal.kind == Kind.FATAL_SIGNAL and fatal.attrs["crash_frame"].function == "comm_init"
    assert not tracebacks(parsed) and parsed.unparsed_lines == 0
