"""cuda-gdb transcripts (forensics/parsers/text/cuda_gdb.py, grammars/cuda_gdb.lark): the
exception stop (fault, kernel, PC, launch dimensions, focus) and the `info cuda` tables,
read wherever the transcript appears in an input.

Real transcripts: tests/data/gpu (cuda-gdb 13.0 on the H200, live and on a GPU core
dump) and, when present, ../shared/recordings.  Others are hand-made in cuda-gdb's shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.events import Kind, Severity
from forensics.parsers.text.cuda_gdb import CudaGdbCollector
from tests.conftest import DATA, RECORDINGS
from tests.helpers import analyze_text, parse_text

GPU = DATA / "gpu"
S3 = RECORDINGS / "gpu/s3_cuda_gdb_replay"


def stop_of(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    parsed = parse_text(path.read_bytes(), path.name)
    assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines
    assert parsed.kind == "cuda-gdb"
    (event,) = [e for e in parsed.events if e.kind == Kind.CUDA_GDB]
    return event, parsed


def test_live_stop_misaligned_address_real():
    event, _ = stop_of(GPU / "misaligned_address/cuda-gdb.txt")
    a = event.attrs
    assert (a["fault"], a["signal"], a["kernel"]) == ("Warp Misaligned Address", "CUDA_EXCEPTION_6",
                                                      "pack_kv_header_kernel")
    assert (a["pc"], a["kernel_source"]) == ("0x7ffddb7a15d0", "misaligned_address.cu:12")
    assert a["function"] == "pack_kv_header_kernel(char*, int, int)"
    assert (a["grid"], a["block"]) == ((2, 1, 1), (128, 1, 1))
    assert a["focus"] == {"kernel": "0", "grid": "1", "block": "(0,0,0)", "thread": "(0,0,0)", "device": "0",
                          "sm": "124", "warp": "0", "lane": "0"}
    assert a["thread_name"] == "misaligned_addr"
    assert a["invocation"] == "pack_kv_header_kernel()"
    assert a["lanes_with_exception"] == 32
    assert (event.severity, event.line) == (Severity.ERROR, 9)
    assert event.message == ("CUDA Exception: Warp Misaligned Address in pack_kv_header_kernel at "
                             "misaligned_address.cu:12")


def test_target_cudacore_transcript_real():
    event, parsed = stop_of(GPU / "tp4_oob_write_coredump/cuda-gdb_cudacore.txt")
    a = event.attrs
    assert a["coredump"].endswith("core_885.nvcudmp")
    assert (a["fault"], a["kernel"], a["kernel_source"]) == ("Warp Illegal Address", "oneshot_allreduce_flag_kernel",
                                                             "tp_signal_kernels.cu:43")
    assert a["pc"] == "0x7f0a877a1b10"
    assert (a["grid"], a["block"]) == ((1, 1, 1), (32, 1, 1))
    assert (a["device"], a["sm_arch"]) == ("NVIDIA H200", "sm_90")
    assert a["lanes_with_exception"] == 4
    assert parsed.unparsed_lines == 0


def test_cudacore_focus_before_the_exception_real():
    event, _ = stop_of(GPU / "tp4_oob_write_coredump/cuda-gdb_cudacore.txt")
    assert event.attrs["focus"]["sm"] == "124" and event.attrs["focus"]["warp"] == "1"


def test_live_native_stop_shared_recording():
    event, _ = stop_of(S3 / "cuda-gdb_native.txt")
    a = event.attrs
    assert (a["fault"], a["signal"], a["kernel"]) == ("Warp Illegal Address", "CUDA_EXCEPTION_14",
                                                      "mnnvl_oneshot_allreduce_kernel")
    assert a["pc"] == "0x7ffddb7a1b20" and a["kernel_source"] == "mnnvl_allreduce.cu:26"
    assert a["grid"] == (1, 1, 1) and a["block"] == (32, 1, 1)
    assert a["focus"]["sm"] == "124" and a["focus"]["block"] == "(0,0,0)"
    assert "rank=2" in a["invocation"] and "rank=2" in a["args"]
    assert (a["device"], a["sm_arch"]) == ("NVIDIA H200", "sm_90")
    assert event.pid == 1655        # thread 1's LWP


def test_python_inferior_stop_shared_recording():
    event, _ = stop_of(S3 / "cuda-gdb_python.txt")
    assert event.attrs["kernel"] == "mnnvl_oneshot_allreduce_kernel"
    assert event.attrs["lanes_with_exception"] == 4 and event.attrs["thread_name"] == "python3"


def test_a_gdb_backtrace_of_a_cpu_core_is_no_cuda_exception_real():
    parsed = parse_text((GPU / "cpu_segv_core/cuda-gdb_core.txt").read_bytes())
    assert not [e for e in parsed.events if e.kind == Kind.CUDA_GDB]
    (signal,) = [e for e in parsed.events if e.kind == Kind.FATAL_SIGNAL]
    assert signal.attrs["signal_name"] == "SIGSEGV"


STOP = """\
CUDA Exception: Warp Illegal Address
The exception was triggered at PC 0x7ffddb7a1b20  k  (k.cu:26)

Thread 1 "python3" received signal CUDA_EXCEPTION_14, Warp Illegal Address.
[Switching focus to CUDA kernel 0, grid 3, block (0,0,0), thread (0,0,0), device 0, sm 124, warp 1, lane 0]
#0  k<<<(4,1,1),(64,1,1)>>> (p=0x7fffc0000000, n=512) at k.cu:26
"""


def test_a_transcript_inside_a_console_and_two_stops():
    text = ("INFO 06-03 14:01:00 [api_server.py:1] vLLM API server version 0.9.2\n" + STOP
            + STOP.replace("Warp Illegal Address", "Warp Misaligned Address").replace("CUDA_EXCEPTION_14",
                                                                                     "CUDA_EXCEPTION_6"))
    parsed = parse_text(text)
    stops = [e for e in parsed.events if e.kind == Kind.CUDA_GDB]
    assert [(e.attrs["fault"], e.line) for e in stops] == [("Warp Illegal Address", 2), ("Warp Misaligned Address", 8)]
    assert all(e.attrs["kernel"] == "k" and e.attrs["args"] == "p=0x7fffc0000000, n=512" for e in stops)
    assert stops[0].attrs["grid"] == (4, 1, 1)
    assert [e.kind for e in parsed.events if e.kind != Kind.CUDA_GDB] == [Kind.CONFIG]
    assert parsed.unparsed_lines == 0


def test_a_transcript_without_an_exception_stop_is_a_problem():
    parsed = parse_text("(cuda-gdb) info cuda kernels\nNo CUDA kernels.\n")
    assert not [e for e in parsed.events if e.kind == Kind.CUDA_GDB]
    assert any("without a CUDA exception stop" in p for p in parsed.problems)


def test_ordinary_lines_do_not_start_a_transcript():
    gdb = CudaGdbCollector()
    for line in ("#0 is a fine channel name", "[rank0]: hello", "Thread 5 started", "Program output: 3"):
        assert not gdb.claims(line)
    assert gdb.claims("CUDA Exception: Warp Illegal Address")
    assert gdb.claims("#1  0x00007ffff7a1 in main () at main.cu:12")        # now that a transcript is under way


def test_error_lines_after_a_transcript_are_still_read():
    parsed = parse_text(STOP + "[rank1]:[E1103 04:05:06.123456789 ProcessGroupNCCL.cpp:1619] [PG ID 0 PG GUID "
                               "0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA "
                               "error: an illegal memory access was encountered\n")
    (error,) = [e for e in parsed.events if e.kind == Kind.CUDA_ERROR]
    assert error.rank == 1 and error.attrs["error_form"] == "nccl-watchdog"


def test_older_cuda_gdb_stop_lines():
    parsed = parse_text("CUDA Exception: Warp Illegal Address\n"
                        "The exception was triggered at PC 0x7fffd3a1b2c0 (oob.cu:7)\n"
                        "\n"
                        'Thread 1 "python" received signal CUDA_EXCEPTION_14, Warp Illegal Address.\n'
                        "[Switching focus to CUDA kernel 0, grid 1, block (4,0,0), thread (0,0,0), device 0, sm 0, "
                        "warp 0, lane 0]\n"
                        "0x00007fffd3a1b2d0 in oob_kernel<<<(8,1,1),(128,1,1)>>> (p=0x7fffc0000000, n=512) "
                        "at oob.cu:7\n")
    (event,) = parsed.events
    assert (event.attrs.get("pc"), event.attrs.get("kernel_source")) == ("0x7fffd3a1b2c0", "oob.cu:7")
    assert event.attrs["kernel"] == "oob_kernel" and event.attrs["grid"] == (8, 1, 1)
    assert parsed.unparsed_lines == 0


# hand-made in the shapes of realworld sanitizer-013 (parameter types before the launch)
# and sanitizer-004 (a backtrace frame whose argument list gdb wrapped onto the next line)
NEWER_STOP = """CUDA Exception: Warp Out-of-range Address
The exception was triggered at PC 0x7fffcc5cb920

Thread 6 "hashminer" received signal CUDA_EXCEPTION_5, Warp Out-of-range Address.
[Switching focus to CUDA kernel 0, grid 2, block (0,0,57), thread (0,0,4), device 0, sm 17, warp 22, lane 0]
0x00007fffcc5cb930 in hashKernel(block_g*, unsigned int, unsigned int)<<<(1,1,480),(32,1,16)>>> ()
"""
WRAPPED_FRAME = """CUDA Exception: Warp Illegal Address
The exception was triggered at PC 0x56204c84ebf0 (cuda_fp16.hpp:255)

Thread 1 "decoding_exampl" received signal CUDA_EXCEPTION_14, Warp Illegal Address.
(cuda-gdb) bt
#0  0x000056204c84ec00 in operator* (lh=0x7f45aad14300, rh=0x7f45d4fffdb8)
    at /usr/local/cuda/include/cuda_fp16.hpp:255
#1  ft::embeddingLookup<__half><<<(4,1,1),(512,1,1)>>> (from_tensor=0x7f45869a3400,
    embedding_table=0x7f45a7c00000, step=0)
"""


@pytest.mark.parametrize(("text", "kernel", "name"), [(NEWER_STOP, "hashKernel", "hashminer"),
                                                      (WRAPPED_FRAME, "ft::embeddingLookup<__half>", "decoding_exampl")])
def test_the_kernel_of_newer_stop_lines_and_wrapped_frames_and_the_host_error(text, kernel, name):
    (stop,) = [e for e in parse_text(text).events if e.kind == Kind.CUDA_GDB]
    assert stop.attrs["kernel"] == kernel
    v = analyze_text(text).verdict
    # no host call's error is in a debugger transcript: the error is what the host sees after
    # the device exception, and the exception is kept as its detail
    assert v.error.code == 700 and v.error.from_device == stop.attrs["fault"]
    (row,) = v.ranks
    assert row.name == name and row.status.value == "origin" and v.first_failure.key == row.key
