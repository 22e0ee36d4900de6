"""forensics.sig/2: stable across reruns of one bug (pids, addresses, times, install paths,
a rerun under compute-sanitizer), different for another kernel, another error, another
surface site or another engine phase."""

from __future__ import annotations

import re

import pytest

from forensics import names
from forensics.case import analyze
from forensics.rules.advice import SIGNATURE_VERSION, fault_class
from tests.conftest import DATA
from tests.helpers import analyze_text, analyze_texts

SIGNATURE = re.compile(r"^forensics\.sig/2:[0-9a-f]{12}$")


def parts(verdict) -> dict:
    return {p.part: p for p in verdict.signature_parts}


@pytest.mark.parametrize("raw, expected", [
    ("mnnvl_oneshot_allreduce_kernel+0x140", "mnnvl_oneshot_allreduce_kernel"),
    ("block_reduce_sum_kernel(const float *, float *)", "block_reduce_sum_kernel"),
    ("void flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel<__nv_bfloat16, 4, true>(Params)",
     "flashinfer::trtllm_mnnvl_allreduce::twoshotAllreduceKernel"),
    ("far_write<<<(1,1,1),(32,1,1)>>>", "far_write"),
    ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul"),
    ("reshape_and_cache_kernel_0d1d2de3de4f5a6b7c8d9e0f", "reshape_and_cache_kernel"),
    ("void vllm::paged_attention_v2_kernel<float, 128, 16, true>(float *, const float *, int)+0x2c0",
     "vllm::paged_attention_v2_kernel"),
    ("/work/csrc/kv.cu:75:void scatter_kernel<int>(int *)", "scatter_kernel"),
])
def test_kernel_normalisation(raw, expected):
    assert names.normalise(raw) == expected


def test_normalisation_keeps_different_kernels_apart():
    assert names.normalise("triton_poi_fused_add_mul_0") != names.normalise("triton_poi_fused_add_0")
    assert names.normalise("ns::k<float>(float*)") != names.normalise("ns::j<float>(float*)")


@pytest.mark.parametrize("fault, expected", [
    ("Invalid __global__ write of size 4 bytes: address is out of bounds", "illegal-address"),
    ("Xid 31 GPU memory page fault (MMU fault), write access", "illegal-address"),
    ("Warp Illegal Address", "illegal-address"),
    ("Invalid __global__ write of size 4 bytes: address is misaligned", "misaligned-address"),
    ("Warp Misaligned Address", "misaligned-address"),
    ("Error: Race reported between Write access at k+0x100", "data-race"),
    ("Potential WAR hazard detected at __shared__ 0x680", "data-race"),
    ("Warp Assert", "device-assert"),
    ("device-side assert `id < n`", "device-assert"),
    ("Warp Illegal Instruction", "illegal-instruction"),
    ("Uninitialized __global__ memory read of size 4 bytes", "uninitialized-read"),
    ("something nobody catalogued", "other-fault"),
])
def test_fault_classes(fault, expected):
    assert fault_class(fault) == expected


# --- reruns of one bug, hand-made -------------------------------------------------------------

def vllm_crash(*, pid0=5101, minute="20", venv="/opt/venv/lib/python3.12/site-packages", kernel="paged_kv_scatter_kernel",
               address="0x7f21c0000040", error="an illegal memory access was encountered", function="execute_model",
               with_kernel=True, computed=4096):
    """One rerun of the same crash: TP=2, rank 1 faults in ``kernel`` and reports the error
    at ``function``; pids, times, addresses and install paths vary per rerun."""
    def line(r, level, msg, second="31"):
        return f"(Worker_TP{r} pid={pid0 + r}) {level} 07-21 16:{minute}:{second} [multiproc_executor.py:671] {msg}\n"
    text = (f"(EngineCore_DP0 pid={pid0 - 50}) INFO 07-21 16:00:01 [core.py:93] Initializing a V1 LLM engine "
            "(v0.10.0) with config: model='acme/chat-34b', tensor_parallel_size=2, max_num_batched_tokens=2048\n")
    for r in range(2):
        text += line(r, "INFO", f"world_size=2 rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:4 "
                     "backend=nccl", "00")
    text += (f"(EngineCore_DP0 pid={pid0 - 50}) ERROR 07-21 16:{minute}:30 [dump_input.py:72] Dumping scheduler "
             "output for model execution: SchedulerOutput(scheduled_new_reqs=[], scheduled_cached_reqs="
             f"CachedRequestData(req_ids=['cmpl-9'], num_computed_tokens=[{computed}]), num_scheduled_tokens="
             "{cmpl-9: 2048}, total_num_scheduled_tokens=2048)\n")
    for msg in ("WorkerProc hit an exception.", "Traceback (most recent call last):",
                f'  File "{venv}/vllm/v1/worker/gpu_model_runner.py", line 2301, in {function}',
                "    valid_sampled_token_ids = sampled_token_ids.tolist()",
                f"torch.AcceleratorError: CUDA error: {error}"):
        text += line(1, "ERROR", msg)
    files = {"server.log": text}
    if with_kernel:
        files["compute-sanitizer.log"] = (
            "========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 8 bytes\n"
            f"=========     at void {kernel}<__nv_bfloat16, 128>(const __nv_bfloat16 *, long)+0x2c0 in kv.cu:88\n"
            "=========     by thread (3,0,0) in block (41,0,0)\n"
            f"=========     Access to {address} is out of bounds\n=========\n")
        files["dmesg.txt"] = (f"[ 1912.337102] NVRM: Xid (PCI:0000:5e:00): 31, pid={pid0 + 1}, name=python3, channel "
                              "0x00000012, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_2 faulted @ "
                              "0x7f21_c0000000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_WRITE\n")
    return analyze_texts(files).verdict


BASE = vllm_crash()


def test_signature_is_versioned_and_short():
    assert SIGNATURE.match(BASE.signature)
    assert BASE.signature.startswith(SIGNATURE_VERSION + ":")
    p = parts(BASE)
    assert (p["fault"].value, p["origin"].value, p["phase"].value) == ("illegal-address", "paged_kv_scatter_kernel",
                                                                        "chunked-prefill")


@pytest.mark.parametrize("rerun", [
    dict(pid0=9301), dict(minute="47"), dict(address="0x7f9900000100"),
    dict(venv="/usr/local/lib/python3.11/dist-packages"), dict(pid0=120, minute="05", address="0x7e0000000008"),
], ids=["pids", "times", "addresses", "install-path", "all-at-once"])
def test_signature_is_stable_across_reruns(rerun):
    again = vllm_crash(**rerun)
    assert again.origin.kernel == BASE.origin.kernel
    assert again.signature == BASE.signature


@pytest.mark.parametrize("change, differs_in", [
    (dict(kernel="rms_norm_kernel"), "origin"),
    (dict(computed=0, error="an illegal memory access was encountered"), "phase"),
])
def test_signature_differs_for_another_kernel_or_phase(change, differs_in):
    other = vllm_crash(**change)
    assert other.signature != BASE.signature
    assert parts(other)[differs_in].value != parts(BASE)[differs_in].value


def test_without_origin_the_surface_and_error_make_the_signature():
    plain = vllm_crash(with_kernel=False)
    assert plain.origin is None and plain.signature != BASE.signature
    p = parts(plain)
    assert p["fault"].value == "illegal-address" and not p["origin"].contributed
    assert p["surface"].value == "gpu_model_runner.py:execute_model@Tensor.tolist"
    # stable across reruns without the kernel too
    assert vllm_crash(with_kernel=False, pid0=777, minute="59", venv="/srv/env").signature == plain.signature
    # another error at the same site, or the same error at another site, is another signature
    misaligned = vllm_crash(with_kernel=False, error="misaligned address")
    assert misaligned.error.name == "CUDA_ERROR_MISALIGNED_ADDRESS" and misaligned.signature != plain.signature
    elsewhere = vllm_crash(with_kernel=False, function="sample_tokens")
    assert elsewhere.signature != plain.signature


def test_no_pids_times_addresses_or_paths_in_the_parts():
    text = str([(p.part, p.value) for p in BASE.signature_parts])
    for volatile in ("5101", "5102", "16:20", "0x7f21", "/opt/venv"):
        assert volatile not in text


# --- recordings -----------------------------------------------------------------------------------

def test_recordings_of_one_bug_agree_across_tools_and_runs():
    # a core dump run (700) and two compute-sanitizer runs (719): new pids, addresses, times
    signatures = {analyze(str(DATA / "gpu" / b)).verdict.signature
                  for b in ("tp4_oob_write_coredump", "tp4_oob_write_memcheck", "tp4_oob_write_memcheck_xml")}
    assert len(signatures) == 1 and SIGNATURE.match(signatures.pop())


def test_another_kernel_of_the_same_shape_has_another_signature(shared_case):
    ours = analyze(str(DATA / "gpu/tp4_oob_write_memcheck")).verdict
    other, _ = shared_case("s2a_memcheck_all_processes")        # same bug shape, another kernel
    assert parts(other.verdict)["fault"].value == parts(ours)["fault"].value == "illegal-address"
    assert other.verdict.signature != ours.signature


def test_signature_parts_explain_themselves():
    v = analyze(str(DATA / "gpu/tp4_oob_write_coredump")).verdict
    p = parts(v)
    assert p["fault"].value == "illegal-address" and p["fault"].contributed
    assert p["origin"].value == "oneshot_allreduce_flag_kernel"
    assert p["phase"].value == "chunked-prefill"
    assert all(part.why for part in v.signature_parts)


def test_signature_without_origin_uses_the_surface_site(shared_case):
    case, _ = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    p = parts(case.verdict)
    assert not p["origin"].contributed
    assert p["surface"].value == "__init__.py:forward"
    assert "25690" not in str(case.verdict.signature_parts)       # no pids, times, paths


def test_a_surface_in_torchs_own_files_does_not_feed_the_signature():
    text = ("Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.11/site-packages/torch/cuda/__init__.py", line 985, in synchronize\n'
            "    return torch._C._cuda_synchronize()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    v = analyze_text(text).verdict
    p = parts(v)
    assert p["surface"].value is None and not p["surface"].contributed
    assert v.signature is not None and p["fault"].value == "illegal-address"


def test_no_failure_no_signature():
    v = analyze_text("(APIServer pid=900) INFO 04-01 10:00:00 [api_server.py:1100] vLLM API server version 0.10.2\n"
                     '(APIServer pid=900) INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 200 OK\n').verdict
    assert v.signature is None
    assert not any(p.contributed for p in v.signature_parts)
