"""cuda-gdb transcripts (grammars/cuda_gdb.lark) on real recordings."""

import pytest

from forensics.events import Kind
from forensics.parsers.cuda_gdb import CudaGdbParser
from forensics.sources import sniff
from tests.conftest import DATA, RECORDINGS


def stop_of(path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    parsed = CudaGdbParser().parse(sniff(path, path.name))
    assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines
    (event,) = [e for e in parsed.events if e.kind == Kind.CUDA_GDB]
    return event


def test_live_native_stop():
    e = stop_of(RECORDINGS / "gpu/s3_cuda_gdb_replay/cuda-gdb_native.txt")
    a = e.attrs
    assert (a["fault"], a["signal"], a["kernel"]) == ("Warp Illegal Address", "CUDA_EXCEPTION_14", "mnnvl_oneshot_allreduce_kernel")
    assert a["pc"] == "0x7ffddb7a1b20" and a["kernel_source"] == "mnnvl_allreduce.cu:26"
    assert a["grid"] == (1, 1, 1) and a["block"] == (32, 1, 1)
    assert a["focus"]["sm"] == "124" and a["focus"]["block"] == "(0,0,0)"
    assert "rank=2" in a["invocation"]
    assert (a["device"], a["sm_arch"]) == ("NVIDIA H200", "sm_90")
    assert e.pid == 1655        # thread 1's LWP


def test_python_inferior_stop():
    e = stop_of(RECORDINGS / "gpu/s3_cuda_gdb_replay/cuda-gdb_python.txt")
    assert e.attrs["kernel"] == "mnnvl_oneshot_allreduce_kernel" and e.attrs["lanes_with_exception"] == 4


def test_target_cudacore_transcript():
    e = stop_of(DATA / "gpu/tp4_oob_write_coredump/cuda-gdb_cudacore.txt")
    assert e.attrs["coredump"].endswith("core_885.nvcudmp")
    assert e.attrs["fault"] == "Warp Illegal Address"
    assert e.attrs["kernel"] == "oneshot_allreduce_flag_kernel"


def test_misaligned_stop():
    e = stop_of(DATA / "gpu/misaligned_address/cuda-gdb.txt")
    assert e.attrs["fault"] == "Warp Misaligned Address"
    assert e.attrs["kernel"].startswith("pack_kv_header_kernel")
