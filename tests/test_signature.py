"""forensics.sig/1: stable across re-recordings of one bug, different for another bug."""

import pytest

from forensics.case import analyze
from forensics.rules.advice import fault_class, normalise_kernel
from tests.conftest import DATA


@pytest.mark.parametrize("raw, expected", [
    ("mnnvl_oneshot_allreduce_kernel+0x140", "mnnvl_oneshot_allreduce_kernel"),
    ("block_reduce_sum_kernel(const float *, float *)", "block_reduce_sum_kernel"),
    ("void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<__nv_bfloat16, 4, true>(Params)",
     "void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel"),
    ("far_write<<<(1,1,1),(32,1,1)>>>", "far_write"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul"),
    ("reshape_and_cache_kernel_0d1d2de3de4f5a6b7c8d9e0f", "reshape_and_cache_kernel"),
])
def test_kernel_normalisation(raw, expected):
    assert normalise_kernel(raw) == expected


@pytest.mark.parametrize("fault, expected", [
    ("Invalid __global__ write of size 4 bytes: address is out of bounds", "illegal-address"),
    ("Xid 31 GPU memory page fault (MMU fault), write access", "illegal-address"),
    ("Warp Illegal Address", "illegal-address"),
    ("Invalid __global__ write of size 4 bytes: address is misaligned", "misaligned-address"),
    ("Warp Misaligned Address", "misaligned-address"),
    ("Error: Race reported between Write access at k+0x100", "data-race"),
    ("Warp Assert", "device-assert"),
])
def test_fault_classes(fault, expected):
    assert fault_class(fault) == expected


def test_same_planted_bug_recorded_twice_has_one_signature(shared_case):
    # s1a (plain run, Xid) and s2a (the same bug under compute-sanitizer: error 719, not 700)
    a, _ = shared_case("s1a_tp4_prefill_crash")
    b, _ = shared_case("s2a_memcheck_all_processes")
    assert a.context.signature == b.context.signature
    assert a.context.signature.startswith("forensics.sig/1:")


def test_our_two_recordings_of_one_bug_agree_and_differ_from_the_other_kernel(shared_case):
    plain = analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree")).context
    dumped = analyze(str(DATA / "gpu/tp4_oob_write_coredump")).context
    assert plain.signature == dumped.signature              # new pids, addresses, times
    other, _ = shared_case("s1a_tp4_prefill_crash")         # same bug shape, another kernel
    assert other.context.signature != plain.signature


def test_signature_parts_explain_themselves():
    ctx = analyze(str(DATA / "gpu/tp4_oob_write_coredump")).context
    parts = {p["part"]: p for p in ctx.signature_parts}
    assert parts["fault"]["value"] == "illegal-address" and parts["fault"]["contributed"]
    assert parts["origin"]["value"] == "oneshot_allreduce_flag_kernel"
    assert parts["phase"]["value"] == "chunked-prefill"
    assert all(p["why"] for p in ctx.signature_parts)


def test_signature_without_origin_uses_the_surface_site(shared_case):
    case, _ = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    parts = {p["part"]: p for p in case.context.signature_parts}
    assert not parts["origin"]["contributed"]
    assert parts["surface"]["value"] == "__init__.py:forward"
    assert "25690" not in str(case.context.signature_parts)   # no pids, times, paths


def test_no_failure_no_signature(shared_case):
    case, _ = shared_case("A_healthy_tp2_chunked_prefill")
    assert case.context.signature is None
