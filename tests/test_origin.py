"""Origin attribution on every real recording with device evidence: the verdict names the
planted kernel, the fault kind, the faulting rank and pid, as each truth file says; and
with the device evidence removed the origin becomes unknown and the next steps ask for it."""

import shutil

import pytest

from forensics.case import analyze
from tests.conftest import DATA

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

DEVICE_EVIDENCE = ("compute-sanitizer", "cuda-gdb", ".nvcudmp", "dmesg")


def _name(kernel: str) -> str:
    return kernel.split("(")[0]


@pytest.mark.parametrize("name", ["s1a_tp4_prefill_crash", "s2a_memcheck_all_processes"])
def test_shared_tp4_origin(shared_case, name):
    case, truth = shared_case(name)
    o = case.context.origin
    f = truth["fault"]
    assert o.kernel == f["kernel"] and (o.rank, o.pid) == (f["faulting_rank"], f["faulting_pid"])
    assert "write" in o.fault.lower()


def test_shared_s2a_sanitizer_gives_high_confidence_and_address(shared_case):
    case, truth = shared_case("s2a_memcheck_all_processes")
    o = case.context.origin
    assert o.confidence == "high"
    assert o.address == truth["sanitizer"]["reported_addresses"][0]


def test_shared_cuda_gdb_replay(shared_case):
    case, truth = shared_case("s3_cuda_gdb_replay")
    o = case.context.origin
    assert o.kernel == truth["fault"]["kernel"] and o.fault == "Warp Illegal Address"


def test_shared_racecheck(shared_case):
    case, truth = shared_case("s7_racecheck")
    o = case.context.origin
    assert o.kernel == truth["bug"]["kernel"] and "Race" in o.fault
    assert case.context.error is None


FAULT_CLASS = {"illegal_address_write": "illegal-address", "misaligned_address": "misaligned-address",
               "device_assert": "device-assert", "shared_memory_race": "data-race",
               "uninitialized_global_read": "uninitialized-read"}
RECORDED = ["tp4_oob_write_del_cumemfree", "tp4_oob_write_coredump", "tp4_oob_write_memcheck",
            "tp4_oob_write_memcheck_xml", "misaligned_address", "device_assert", "shared_race", "uninit_read",
            "torch_item_after_oob"]


@pytest.mark.parametrize("bundle", RECORDED)
def test_our_recordings(bundle):
    path = DATA / "gpu" / bundle
    truth = tomllib.loads((DATA / "gpu" / f"{bundle}.truth.toml").read_text())
    case = analyze(str(path))
    o = case.context.origin
    f = truth["fault"]
    assert _name(o.kernel) == _name(f["kernel"])
    fault = {p["part"]: p["value"] for p in case.context.signature_parts}["fault"]
    assert fault == FAULT_CLASS[f["kind"]], (fault, o.fault)
    if "faulting_rank" in f:
        assert (o.rank, o.pid) == (f["faulting_rank"], f["faulting_pid"])
        collateral = {v.rank for v in case.context.ranks.values() if v.status == "collateral" and v.rank is not None}
        assert collateral == {r["rank"] for r in truth["ranks"]["other_ranks"]}
    surface = truth.get("surface", {})
    if "file" in surface and case.context.surfaces:
        s = case.context.surfaces[0]
        assert (s.file.rsplit("/", 1)[-1], s.line) == (surface["file"].rsplit("/", 1)[-1], surface["line"])
        # a native check line does not name its function; a sanitizer frame at the same
        # place does when the sanitizer printed one (not past its --print-limit)
        assert s.function in (surface["function"], None)


def test_tp4_surface_is_the_finalizer_not_the_kernel():
    truth = tomllib.loads((DATA / "gpu/tp4_oob_write_del_cumemfree.truth.toml").read_text())
    case = analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree"))
    first = truth["surfaces"][0]
    (s,) = case.context.surfaces
    assert (s.file, s.line, s.function, s.api) == (first["file"], first["line"], first["function"], first["api_call"])
    assert case.context.error.code == first["error_code"]


@pytest.mark.parametrize("bundle", ["tp4_oob_write_coredump", "misaligned_address", "tp4_oob_write_del_cumemfree"])
def test_without_device_evidence_origin_is_unknown(tmp_path, bundle):
    src = DATA / "gpu" / bundle
    dst = tmp_path / bundle
    dst.mkdir()
    for item in src.iterdir():
        if not any(marker in item.name for marker in DEVICE_EVIDENCE):
            shutil.copy2(item, dst / item.name)
    # the driver's core-dump progress lines are device evidence too: drop them
    for log in dst.glob("*.log"):
        log.write_text("".join(l for l in log.read_text().splitlines(True) if "coredump:" not in l))
    case = analyze(str(dst))
    assert case.context.origin is None
    if case.context.error is not None and case.context.error.sticky:
        assert any("compute-sanitizer" in step for step in case.context.next_steps)
        assert any("CUDA_ENABLE_COREDUMP_ON_EXCEPTION" in step for step in case.context.next_steps)


def test_shared_triton_single_process_names_the_launched_kernel_with_low_confidence(shared_case):
    case, truth = shared_case("s5a_triton_oob_async")
    o = case.context.origin
    assert o.kernel == truth["fault"]["kernel"] and o.pid == truth["kernel_log"]["xid"][0]["pid"]
    assert o.confidence == "low"                  # only a log line names the kernel
    assert any("compute-sanitizer" in step for step in case.context.next_steps)
