"""Origin attribution: which kernel on which rank faulted, from device evidence only.

On real recordings (tests/data/gpu, ../shared/recordings) the verdict names the planted
kernel, the fault, the faulting rank and pid, as each truth file says; with the device
evidence removed the origin becomes unknown and the next steps ask for it.  On hand-made
multi-rank bundles (vLLM V1 TP=4, lines in the shapes vLLM, compute-sanitizer, cuda-gdb,
the driver's core-dump progress and the kernel's NVRM Xid lines print) each kind of
device evidence is joined to its rank, with the confidence it deserves.
"""

from __future__ import annotations

import shutil

import pytest

from forensics import names
from forensics.case import analyze
from forensics.report.document import build
from forensics.verdict import Confidence, Status
from tests.conftest import DATA
from tests.helpers import analyze_texts

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

DEVICE_EVIDENCE_FILES = ("compute-sanitizer", "cuda-gdb", ".nvcudmp", "dmesg")


def truth(bundle: str) -> dict:
    return tomllib.loads((DATA / "gpu" / f"{bundle}.truth.toml").read_text())


def signature_part(verdict, part: str):
    return {p.part: p.value for p in verdict.signature_parts}[part]


# --- our GPU recordings ----------------------------------------------------------------------

FAULT_CLASS = {"illegal_address_write": "illegal-address", "misaligned_address": "misaligned-address",
               "device_assert": "device-assert", "shared_memory_race": "data-race",
               "uninitialized_global_read": "uninitialized-read"}
KERNEL_EVIDENCE = ["tp4_oob_write_coredump", "tp4_oob_write_memcheck", "tp4_oob_write_memcheck_xml",
                   "misaligned_address", "device_assert", "shared_race", "uninit_read", "torch_item_after_oob"]


@pytest.mark.parametrize("bundle", KERNEL_EVIDENCE)
def test_recording_with_kernel_evidence_names_the_planted_kernel(bundle):
    v = analyze(str(DATA / "gpu" / bundle)).verdict
    fault = truth(bundle)["fault"]
    assert v.origin is not None and v.origin.kernel is not None
    assert names.plain(v.origin.kernel) == names.plain(fault["kernel"])
    assert signature_part(v, "fault") == FAULT_CLASS[fault["kind"]], v.origin.fault
    assert signature_part(v, "origin") == names.normalise(fault["kernel"])
    assert v.failed
    if "faulting_rank" in fault:
        assert (v.origin.rank, v.origin.pid) == (fault["faulting_rank"], fault["faulting_pid"])
        assert v.origin.confidence == Confidence.HIGH
        # the faulting rank is first, its peers went down with it
        assert v.first_failure.rank == fault["faulting_rank"]
        statuses = {r.rank: r.status for r in v.ranks if r.role == "worker"}
        assert statuses == {0: Status.COLLATERAL, 1: Status.COLLATERAL, 2: Status.ORIGIN, 3: Status.COLLATERAL}
        assert v.collateral == (0, 1, 3)


def test_sanitizer_recording_gives_the_fault_and_its_address():
    v = analyze(str(DATA / "gpu/tp4_oob_write_memcheck")).verdict
    fault = truth("tp4_oob_write_memcheck")["fault"]
    assert v.origin.fault == "Invalid __global__ write of size 4 bytes: address is out of bounds"
    assert v.origin.address == fault["target_addresses"][0]
    # under compute-sanitizer the sticky error reads 719; the origin says what really happened
    assert v.error.code == 719
    assert any(ref.kind == "compute-sanitizer" for ref in v.origin.evidence)


def test_core_dump_recording_agrees_across_the_dump_tools():
    v = analyze(str(DATA / "gpu/tp4_oob_write_coredump")).verdict
    assert v.origin.fault == "Warp Illegal Address"
    assert any("agree on the kernel" in n for n in v.origin.notes)
    assert {ref.kind for ref in v.origin.evidence} >= {"cuda-coredump", "coredump-progress"}


def test_xid_only_recording_names_the_faulting_rank_but_not_the_kernel():
    # the plain run: the Xid line's pid is the only device evidence
    case = analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree"))
    v, fault = case.verdict, truth("tp4_oob_write_del_cumemfree")["fault"]
    assert v.origin.kernel is None
    assert (v.origin.rank, v.origin.pid) == (fault["faulting_rank"], fault["faulting_pid"])
    assert v.origin.confidence == Confidence.MEDIUM and v.origin.fault.startswith("Xid 31")
    assert signature_part(v, "origin") is None
    # the report's contract: "origin" only when a kernel is named; the process is said apart
    report = build(case).to_json()["verdict"]
    assert report["origin"] is None
    assert report["faulting_process"]["rank"] == fault["faulting_rank"]


def test_tp4_surface_is_the_finalizer_not_the_kernel():
    t = truth("tp4_oob_write_del_cumemfree")
    v = analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree")).verdict
    first = t["surfaces"][0]
    (s,) = v.surfaces
    assert (s.file, s.line, s.function, s.api) == (first["file"], first["line"], first["function"], first["api_call"])
    assert s.rank == t["ranks"]["first_failing_rank"]
    assert v.error.code == first["error_code"]


@pytest.mark.parametrize("bundle, host_error", [("tp4_oob_write_coredump", False), ("misaligned_address", True),
                                                ("tp4_oob_write_memcheck", True)])
def test_without_device_evidence_origin_is_unknown(tmp_path, bundle, host_error):
    src, dst = DATA / "gpu" / bundle, tmp_path / bundle
    dst.mkdir()
    for item in src.iterdir():
        if not any(marker in item.name for marker in DEVICE_EVIDENCE_FILES):
            shutil.copy2(item, dst / item.name)
    # the driver's core-dump progress lines are device evidence too: drop them
    for log in dst.glob("*.log"):
        log.write_text("".join(line for line in log.read_text().splitlines(True) if "coredump:" not in line))
    v = analyze(str(dst)).verdict
    assert v.origin is None and v.failed
    assert signature_part(v, "origin") is None
    if host_error:          # the core-dump run died while dumping: no host call reported the error
        assert v.error is not None and v.error.error.sticky
        assert {"sanitizer", "coredump"} <= {s.id for s in v.next_steps}
    else:
        assert v.error is None


# --- the shared recordings -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["s2a_memcheck_all_processes"])
def test_shared_tp4_sanitizer_origin(shared_case, name):
    case, t = shared_case(name)
    o, f = case.verdict.origin, t["fault"]
    assert o.kernel == f["kernel"] and (o.rank, o.pid) == (f["faulting_rank"], f["faulting_pid"])
    assert "write" in o.fault.lower() and o.confidence == Confidence.HIGH
    assert o.address == f["target_addresses"][0]


def test_shared_tp4_plain_run_has_only_the_xid(shared_case):
    case, t = shared_case("s1a_tp4_prefill_crash")
    o, f = case.verdict.origin, t["fault"]
    assert o.kernel is None                        # no tool named it: never a guess
    assert (o.rank, o.pid) == (f["faulting_rank"], f["faulting_pid"])
    assert case.verdict.first_failure.rank == t["ranks"]["first_failing_rank"]
    assert set(case.verdict.collateral) == {r["rank"] for r in t["ranks"]["other_ranks"]}


def test_shared_cuda_gdb_replay(shared_case):
    case, t = shared_case("s3_cuda_gdb_replay")
    o = case.verdict.origin
    assert o.kernel == t["fault"]["kernel"] and o.fault == "Warp Illegal Address"
    assert o.confidence == Confidence.HIGH


def test_shared_racecheck_is_a_race_not_an_error(shared_case):
    case, t = shared_case("s7_racecheck")
    o = case.verdict.origin
    assert o.kernel == t["bug"]["kernel"] and "Race" in o.fault
    assert case.verdict.error is None
    assert signature_part(case.verdict, "fault") == "data-race"


def test_shared_triton_single_process_names_no_kernel_from_a_log_line(shared_case):
    case, t = shared_case("s5a_triton_oob_async")
    o = case.verdict.origin
    # only the Xid's pid is device evidence; the kernel a log line mentions is not
    assert o.kernel is None and o.pid == t["kernel_log"]["xid"][0]["pid"]
    assert {"sanitizer", "coredump"} <= {s.id for s in case.verdict.next_steps}


# --- hand-made multi-rank bundles ----------------------------------------------------------------

def vllm_tp4(failing_rank: int = 2) -> str:
    """A vLLM V1 TP=4 console: rank ``failing_rank`` reports the sticky error first, the
    others see their peer go away two seconds later."""
    def line(r, level, t, src, msg):
        return f"(Worker_TP{r} pid={5101 + r}) {level} 07-21 {t} [{src}] {msg}\n"
    text = ("(EngineCore_DP0 pid=5050) INFO 07-21 16:00:01 [core.py:93] Initializing a V1 LLM engine (v0.10.0) "
            "with config: model='acme/chat-34b', tensor_parallel_size=4, max_num_batched_tokens=4096\n")
    for r in range(4):
        text += line(r, "INFO", "16:00:09", "parallel_state.py:1165",
                     f"world_size=4 rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:41233 backend=nccl")
    for msg in ("WorkerProc hit an exception.", "Traceback (most recent call last):",
                '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 2301, '
                'in execute_model',
                "    valid_sampled_token_ids = sampled_token_ids.tolist()",
                "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"):
        text += line(failing_rank, "ERROR", "16:20:31", "multiproc_executor.py:671", msg)
    for r in sorted(set(range(4)) - {failing_rank}):
        text += line(r, "ERROR", "16:20:33", "multiproc_executor.py:671",
                     "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed "
                     "by peer [127.0.0.1]:23117")
    return text


SANITIZER = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 8 bytes
=========     at void paged_kv_scatter_kernel<__nv_bfloat16, 128>(const __nv_bfloat16 *, __nv_bfloat16 *, const long *, int)+0x2c0 in kv_scatter.cu:88
=========     by thread (3,0,0) in block (41,0,0)
=========     Access to 0x7f21c0000040 is out of bounds
=========
"""
CUDA_GDB = """CUDA Exception: Warp Illegal Address
The exception was triggered at PC 0x7ffdcc1a2b40  paged_kv_scatter_kernel  (kv_scatter.cu:88)

Thread 1 "python3" received signal CUDA_EXCEPTION_14, Warp Illegal Address.
[Switching focus to CUDA kernel 0, grid 7, block (41,0,0), thread (0,0,0), device 0, sm 12, warp 1, lane 0]
"""
CUDA_GDB_OTHER_KERNEL = CUDA_GDB.replace("paged_kv_scatter_kernel", "rms_norm_kernel")


def xid(pid: int) -> str:
    return (f"[ 1912.337102] NVRM: Xid (PCI:0000:5e:00): 31, pid={pid}, name=python3, channel 0x00000012, intr "
            "00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_2 faulted @ 0x7f21_c0000000. Fault is of type "
            "FAULT_PTE ACCESS_TYPE_VIRT_WRITE\n")


def core_dump_progress(rank: int, pid: int, kernel: str = "paged_kv_scatter_kernel") -> str:
    steps = ["Starting GPU coredump generation",
             "Detected an exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)", "  - Device: 0",
             "Stack trace (lane masks: active 0x0000000F, valid 0x0000000F):", f"  #0\t0x7f0a877a1b20\t{kernel}",
             "All done (took 00s)"]
    return "".join(f"(Worker_TP{rank} pid={pid}) [16:20:30.{i:06d}] coredump: {m}\n" for i, m in enumerate(steps))


@pytest.mark.parametrize("extra, kernel, fault, confidence, note", [
    ({"compute-sanitizer.log": SANITIZER, "dmesg.txt": xid(5103)}, "paged_kv_scatter_kernel<__nv_bfloat16, 128>",
     "Invalid __global__ write of size 8 bytes: address is out of bounds", Confidence.HIGH,
     "rank joined by the Xid line's pid"),
    ({"compute-sanitizer.log": SANITIZER}, "paged_kv_scatter_kernel<__nv_bfloat16, 128>",
     "Invalid __global__ write of size 8 bytes: address is out of bounds", Confidence.MEDIUM,
     "only process that reported the error"),
    ({"cuda-gdb.txt": CUDA_GDB, "dmesg.txt": xid(5103)}, "paged_kv_scatter_kernel", "Warp Illegal Address",
     Confidence.HIGH, "Xid"),
    ({"cuda-gdb.txt": CUDA_GDB}, "paged_kv_scatter_kernel", "Warp Illegal Address", Confidence.MEDIUM,
     "only process that reported the error"),
    ({"compute-sanitizer.log": SANITIZER, "cuda-gdb.txt": CUDA_GDB, "dmesg.txt": xid(5103)},
     "paged_kv_scatter_kernel<__nv_bfloat16, 128>", "Invalid __global__ write of size 8 bytes: address is out of bounds",
     Confidence.HIGH, "compute-sanitizer and cuda-gdb agree on the kernel"),
], ids=["sanitizer+xid", "sanitizer-alone", "cuda-gdb+xid", "cuda-gdb-alone", "sanitizer+cuda-gdb+xid"])
def test_device_evidence_in_separate_files_is_joined_to_the_faulting_rank(extra, kernel, fault, confidence, note):
    v = analyze_texts({"server.log": vllm_tp4(2), **extra}).verdict
    o = v.origin
    assert (o.kernel, o.fault, o.rank, o.pid) == (kernel, fault, 2, 5103)
    assert o.confidence == confidence
    assert any(note in n for n in o.notes), o.notes
    assert signature_part(v, "origin") == "paged_kv_scatter_kernel"
    assert {r.rank: r.status for r in v.ranks if r.role == "worker"}[2] == Status.ORIGIN
    assert v.first_failure.rank == 2 and v.collateral == (0, 1, 3)


def test_core_dump_progress_lines_in_the_ranks_own_output_name_kernel_and_rank():
    v = analyze_texts({"server.log": vllm_tp4(2) + core_dump_progress(2, 5103)}).verdict
    o = v.origin
    assert (o.kernel, o.rank, o.pid, o.fault, o.confidence) == ("paged_kv_scatter_kernel", 2, 5103,
                                                              "Warp Illegal Address", Confidence.HIGH)
    assert o.notes == ()


def test_tools_that_disagree_on_the_kernel_lower_the_confidence_and_say_so():
    v = analyze_texts({"server.log": vllm_tp4(2), "compute-sanitizer.log": SANITIZER,
                       "cuda-gdb.txt": CUDA_GDB_OTHER_KERNEL, "dmesg.txt": xid(5103)}).verdict
    assert v.origin.confidence == Confidence.MEDIUM
    assert any(" kernels: " in n and "rms_norm_kernel" in n for n in v.origin.notes)


def test_an_xid_naming_another_process_than_the_kernel_evidence_gives_low_confidence():
    # the core dump says rank 2, the kernel's Xid line says rank 0's pid
    v = analyze_texts({"server.log": vllm_tp4(2) + core_dump_progress(2, 5103), "dmesg.txt": xid(5101)}).verdict
    assert (v.origin.rank, v.origin.confidence) == (2, Confidence.LOW)
    assert any("an Xid names pid 5101" in n for n in v.origin.notes)


def test_an_xid_alone_names_the_rank_with_medium_confidence_and_no_kernel():
    case = analyze_texts({"server.log": vllm_tp4(1), "dmesg.txt": xid(5102)})
    o = case.verdict.origin
    assert (o.kernel, o.rank, o.pid, o.confidence) == (None, 1, 5102, Confidence.MEDIUM)
    assert "write access" in o.fault and o.address == "0x7f21c0000000"
    assert case.verdict.first_failure.rank == 1
    assert {"sanitizer", "coredump"} <= {s.id for s in case.verdict.next_steps}


def test_the_surface_is_where_the_error_was_noticed_not_the_origin():
    v = analyze_texts({"server.log": vllm_tp4(2), "compute-sanitizer.log": SANITIZER, "dmesg.txt": xid(5103)}).verdict
    (s,) = v.surfaces
    assert (s.rank, s.function, s.api) == (2, "execute_model", "Tensor.tolist")
    assert s.file.endswith("vllm/v1/worker/gpu_model_runner.py") and s.line == 2301
    assert "paged_kv_scatter_kernel" in v.headline and "rank 2" in v.headline
    # with the kernel known, no next step asks for device evidence
    assert not {"sanitizer", "coredump", "launch-blocking"} & {s.id for s in v.next_steps}


def test_a_kernel_named_only_by_an_ordinary_log_line_is_no_origin():
    text = vllm_tp4(2).replace(
        "(EngineCore_DP0 pid=5050) INFO", "(Worker_TP2 pid=5103) INFO 07-21 16:00:10 [custom_op.py:40] Using "
        "paged_kv_scatter_kernel for the KV cache writes\n(EngineCore_DP0 pid=5050) INFO", 1)
    v = analyze_texts({"server.log": text}).verdict
    assert v.origin is None
    assert "faulting kernel unknown" in v.headline
    assert signature_part(v, "origin") is None


def test_the_origin_does_not_follow_who_reported_first():
    # rank 0 reports first, but the device evidence says rank 3 faulted
    v = analyze_texts({"server.log": vllm_tp4(0) + core_dump_progress(3, 5104), "dmesg.txt": xid(5104)}).verdict
    assert (v.origin.rank, v.origin.pid) == (3, 5104)
    assert v.first_failure.rank == 3 and v.first_failure.basis.startswith("origin evidence")
    statuses = {r.rank: r.status for r in v.ranks if r.role == "worker"}
    assert statuses[3] == Status.ORIGIN and statuses[0] == Status.COLLATERAL
