"""Native crash reports and native stacks (forensics/parsers/text/native.py,
grammars/native_crash.lark): every frame form read into events.Frame fields, the crash
frame of a signal handler's report, a TllmException's throw site, fragments without a
banner.  Every input here is hand-made in the printed shape of the issue it cites (other
names, addresses and paths); none is a user's text.
"""

from __future__ import annotations

import re

from forensics import knowledge
from forensics.events import Frame, Kind, Severity
from forensics.parsers.text import native
from tests.helpers import parse_text


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


# the shape of https://github.com/NVIDIA/TensorRT-LLM/issues/1826 (a TllmException reaching
# std::terminate: the throw site ends its text, numbered frames follow, the last one cut)
TLLM_TERMINATE = (
    "terminate called after throwing an instance of 'tensorrt_llm::common::TllmException'\n"
    "  what():  [TensorRT-LLM][ERROR] Assertion failed: world size 3 is not a multiple of 2 "
    "(/src/cpp/tensorrt_llm/runtime/worldConfig.cpp:88)\n"
    "1       0x7f11aa0b1c22 tensorrt_llm::common::throwRuntimeError(char const*, int, std::string const&) + 82\n"
    "2       0x7f11aa0b2d33 /opt/venv/lib/python3.12/site-packages/tensorrt_llm/libs/libtensorrt_llm.so(+0x5a1d33) "
    "[0x7f11aa0b2d33]\n"
    "3       0x7f11ab0c3e44 tensorrt_llm::runtime::WorldConfig::mpi(int, std::optional<int>) + 311\n"
    "4            0x5d2bac python3() [0x5d2bac]\n"
    "5       0x7f11ab0c4f55 /opt/venv/lib/python3.12/site-pack\n")


def test_a_tllm_exception_gives_its_throw_site_and_frames():
    parsed = parse_text(TLLM_TERMINATE)
    (event,) = parsed.events
    a = event.attrs
    assert (event.kind, a["crash"]) == (Kind.FATAL_SIGNAL, "cxx-exception")
    assert (a["raised_file"], a["raised_line"]) == ("/src/cpp/tensorrt_llm/runtime/worldConfig.cpp", 88)
    assert a["what"].endswith("(/src/cpp/tensorrt_llm/runtime/worldConfig.cpp:88)")   # as printed
    stack = a["native_stack"]
    assert [f.function for f in stack] == ["tensorrt_llm::common::throwRuntimeError", None,
                                           "tensorrt_llm::runtime::WorldConfig::mpi", None, None]
    assert stack[1] == Frame("/opt/venv/lib/python3.12/site-packages/tensorrt_llm/libs/libtensorrt_llm.so", None, None)
    assert stack[3].file == "python3"
    assert stack[4].file == "/opt/venv/lib/python3.12/site-pack"       # the cut line keeps its module part
    assert a["raised_function"] == native.innermost_named(stack).function
    assert parsed.unparsed_lines == 0 and accounted(parsed)


def test_the_throw_site_function_skips_error_raising_helpers(monkeypatch):
    helpers = knowledge.error_check_frames() + (re.compile("^throwRuntimeError$"),)
    monkeypatch.setattr(knowledge, "error_check_frames", lambda: helpers)
    (event,) = parse_text(TLLM_TERMINATE).events
    assert event.attrs["raised_function"] == "tensorrt_llm::runtime::WorldConfig::mpi"


def test_c10_frames_give_symbol_and_module():
    parsed = parse_text(
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "  what():  [PG ID 1 PG GUID 1 Rank 3] Process group watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered\n"
        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
        "(most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f2200000001 in "
        "/opt/venv/lib/python3.11/site-packages/torch/lib/libc10.so)\n"
        "frame #1: <unknown function> + 0x1a2b (0x7f2200000002 in /opt/venv/lib/python3.11/site-packages/torch/lib/"
        "libc10_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::WorkNCCL::isCompleted() + 0x58 (0x7f2200000003 in "
        "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #3: c10d::ProcessGroupNCCL::watch\n")
    (event,) = parsed.events
    stack = event.attrs["native_stack"]
    assert [f.function for f in stack] == ["c10::Error::Error", None, "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted",
                                           "c10d::ProcessGroupNCCL::watch"]
    assert stack[2].file.endswith("/torch/lib/libtorch_cuda.so") and stack[2].line is None
    assert event.attrs["raised_function"] == "c10_cuda_check_implementation"      # c10's own line says it
    assert parsed.unparsed_lines == 0


# the shape of https://github.com/Tlntin/Qwen-TensorRT-LLM/issues/60 (UCX's signal handler:
# "[host:pid:thread:tid] Caught signal", then "N 0xaddr symbol()  file:line" frames)
def test_ucx_signal_handler_report():
    parsed = parse_text("[gpu-node-3:5150:0:5161] Caught signal 7 (Bus error: nonexistent physical address)\n"
                        "==== backtrace (tid:   5161) ====\n"
                        " 0 0x000000000003c050 __restore_rt()  ???:0\n"
                        " 1 0x00000000000a1b2c ncclShmOpen()  shmutils.cc:114\n"
                        " 2 0x0000000000098765 ncclProxyConnect()  ???:0\n"
                        "=================================\n")
    (event,) = parsed.events
    a = event.attrs
    assert (event.kind, event.severity, a["crash"]) == (Kind.FATAL_SIGNAL, Severity.CRITICAL, "ucx")
    assert (a["signal_name"], a["signal_text"], a["signal_detail"]) == ("SIGBUS", "Bus error",
                                                                         "nonexistent physical address")
    assert event.pid == 5150 and a["tid"] == 5161
    # the first frame is the signal trampoline, not the code that faulted
    assert a["crash_frame"] == Frame("shmutils.cc", 114, "ncclShmOpen")
    assert "ncclShmOpen" in event.message
    assert parsed.unparsed_lines == 0 and accounted(parsed)


# the shape of https://github.com/NVIDIA/GenerativeAIExamples/issues/129 (Open MPI's handler:
# glibc backtrace_symbols() frames; its "[host:pid] " prefix is an envelope)
def test_open_mpi_signal_handler_report():
    parsed = parse_text("*** Process received signal ***\n"
                        "Signal: Segmentation fault (11)\n"
                        "Signal code: Address not mapped (1)\n"
                        "Failing at address: 0x28\n"
                        "[ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f0a1c23c050]\n"
                        "[ 1] /opt/hpcx/ucc/lib/libucc.so.1(ucc_context_create+0x1a4)[0x7f0a0b1e21a4]\n"
                        "[ 2] /usr/lib/libfoo.so(_ZN3foo3barEv+0x1c)[0x7f0a0b1e3000]\n"
                        "*** End of error message ***\n")
    (event,) = parsed.events
    a = event.attrs
    assert (a["crash"], a["signal_name"], a["signal_number"]) == ("ompi", "SIGSEGV", 11)
    assert a["crash_frame"] == Frame("/opt/hpcx/ucc/lib/libucc.so.1", None, "ucc_context_create")
    assert a["native_stack"][2].function == "foo::bar"            # a mangled symbol, read
    assert a["signal_details"] == ["Signal code: Address not mapped (1)", "Failing at address: 0x28"]
    assert parsed.unparsed_lines == 0


def test_open_mpi_report_without_its_first_line():
    parsed = parse_text("Signal: Aborted (6)\n"
                        "[ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f0a1c23c050]\n"
                        "[ 1] /lib/x86_64-linux-gnu/libc.so.6(gsignal+0x10)[0x7f0a1c23c060]\n")
    (event,) = parsed.events
    assert (event.attrs["signal_name"], event.attrs["crash_frame"].function) == ("SIGABRT", "gsignal")


# the shape of https://github.com/vllm-project/vllm/issues/44780 (PyTorch's segfault handler
# lists the native stack as 'File "<unknown>", line 0, in symbol', innermost first)
def test_segfault_banner_frames_name_the_crash_frame():
    parsed = parse_text("!!!!!!! Segfault encountered !!!!!!!\n"
                        '  File "<unknown>", line 0, in cuStreamSynchronize\n'
                        '  File "<unknown>", line 0, in at::native::copy_(at::Tensor&, at::Tensor const&, bool)\n'
                        '  File "/srv/app/model.py", line 41, in forward\n')
    (event,) = parsed.events
    a = event.attrs
    assert a["crash_frame"] == Frame("<unknown>", None, "cuStreamSynchronize")
    assert a["native_stack"][1].function == "at::native::copy_"
    assert a["native_stack"][2] == Frame("/srv/app/model.py", 41, "forward")
    assert event.message == "Segfault encountered (PyTorch signal handler) in cuStreamSynchronize"
    assert parsed.unparsed_lines == 0


def test_a_native_stack_fragment_is_no_python_traceback():
    """Frames of PyTorch's native stack whose banner is not in the paste: what they show,
    not an exception of the process (and no surface at a frame named by an address)."""
    parsed = parse_text('  File "<unknown>", line 0, in Py_RunMain\n'
                        '  File "<unknown>", line 0, in _start\n'
                        '  File "<unknown>", line 0, in 0xffffffffffffffff\n')
    (event,) = parsed.events
    assert (event.kind, event.severity) == (Kind.LOG, Severity.INFO)
    assert [f.function for f in event.attrs["native_stack"]] == ["Py_RunMain", "_start", None]
    assert event.attrs["top_frame"].function == "Py_RunMain"
    assert not [e for e in parsed.events if e.kind == Kind.EXCEPTION]


# the shape of https://github.com/NVIDIA/TensorRT-LLM/issues/5389 (TRT-LLM's numbered
# backtrace printed raw under the error record that carries its exception text)
def test_a_numbered_backtrace_under_a_record_is_read():
    parsed = parse_text("1       0x7fac00000001 tensorrt_llm::common::throwRuntimeError(char const*, int, char const*) + 97\n"
                        "2       0x7fac00000002 tensorrt_llm::kernels::fusedMoe::Runner::run(void*, int, CUstream_st*) + 241\n"
                        "3       0x7fac00000003 /usr/lib/python3/dist-packages/ray/_raylet.so(+0x1a2b3c) [0x7fac00000003] "
                        "ray::core::CoreWorker::Exit()\n")
    (event,) = parsed.events
    assert event.kind == Kind.LOG and event.attrs["native_frame_count"] == 3
    assert [f.function for f in event.attrs["native_stack"]] == [
        "tensorrt_llm::common::throwRuntimeError", "tensorrt_llm::kernels::fusedMoe::Runner::run",
        "ray::core::CoreWorker::Exit"]
    assert parsed.unparsed_lines == 0 and accounted(parsed)


def test_a_crash_block_ends_where_its_shape_ends():
    parsed = parse_text("!!!!!!! Segfault encountered !!!!!!!\n"
                        '  File "<unknown>", line 0, in ncclGroupEnd\n'
                        "INFO 06-01 10:00:00 [core.py:1] next record\n")
    fatal = [e for e in parsed.events if e.kind == Kind.FATAL_SIGNAL]
    assert len(fatal) == 1 and fatal[0].attrs["crash_frame"].function == "ncclGroupEnd"


def test_a_crash_report_whose_last_line_is_cut_keeps_the_rest():
    parsed = parse_text("!!!!!!! Segfault encountered !!!!!!!\n"
                        '  File "<unknown>", line 0, in ncclCommInitRank\n'
                        '  File "<unknown>", lin')
    (event,) = parsed.events
    assert event.attrs["crash_frame"].function == "ncclCommInitRank"
    assert parsed.unparsed_lines == 1 and accounted(parsed)
    assert any("cut mid-line" in p for p in parsed.problems)
