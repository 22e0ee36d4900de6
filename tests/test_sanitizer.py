"""compute-sanitizer reports: the text form (forensics/parsers/sanitizer/text.py,
grammars/compute_sanitizer.lark) collected from a whole input and collapsed per kernel
and PC, and the XML form (forensics/parsers/sanitizer/xml.py).

Real recordings: tests/data/gpu (memcheck, racecheck, initcheck on the H200; see its
README.md) and, when present, ../shared/recordings.  Reports typed here are hand-made
in the tool's printed shape.
"""

from __future__ import annotations

import functools
import io
import time
from pathlib import Path

import pytest

from forensics.events import Kind, Severity
from forensics.inputs.sources import sniff
from forensics.parsers.sanitizer.text import parse_report
from forensics.parsers.sanitizer.xml import SanitizerXmlParser
from forensics.parsers.text import stream
from tests.conftest import DATA, RECORDINGS
from tests.helpers import parse_text

GPU = DATA / "gpu"
S2A = RECORDINGS / "gpu/s2a_memcheck_all_processes/compute-sanitizer.1753.log"
S7 = RECORDINGS / "gpu/s7_racecheck/compute-sanitizer_racecheck.log"


def parse(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    return parse_text(path.read_bytes(), path.name)


def parse_xml(path: Path):
    return SanitizerXmlParser().parse(sniff(path, path.name))


def findings(parsed, report: str):
    return [e for e in parsed.events if e.kind == Kind.SANITIZER and e.attrs.get("report") == report]


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


# --- memcheck --------------------------------------------------------------------------------

def test_memcheck_out_of_bounds_write_real():
    parsed = parse(GPU / "tp4_oob_write_memcheck/compute-sanitizer.866.log")
    assert parsed.kind == "compute-sanitizer" and parsed.unparsed_lines == 0 and accounted(parsed)
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert (a["kernel"], a["pc_offset"], a["kernel_source"]) == ("oneshot_allreduce_flag_kernel", "0x110",
                                                                 "tp_signal_kernels.cu:43")
    assert a["fault"] == "Invalid __global__ write of size 4 bytes"            # the access and its size
    assert (a["address"], a["address_note"]) == ("0x8fdd0ac00100", "is out of bounds")
    assert a["nearest_allocation"].endswith("nearest allocation at 0x7fdd12c00000 of size 512 bytes")
    # four faulting threads, one report each: one finding
    assert a["count"] == 4 and a["first_lines"] == [2, 29, 56, 83]
    assert a["threads"] == {"first": [0, 0, 0], "last": [3, 0, 0], "distinct": 4}
    assert a["blocks"] == {"first": [0, 0, 0], "last": [0, 0, 0], "distinct": 1}
    assert a["address_range"] == ["0x8fdd0ac00100", "0x8fdd0aef4100"]
    # the host backtrace: the innermost frame with a source location launched the kernel
    assert a["launch_site"] == "_launch_flags in signal_pad.py:99"
    assert "main in gpu_worker.py:134" in a["host_frames"]
    assert (access.severity, access.line) == (Severity.ERROR, 2)
    assert access.message.endswith("(x4)")


def test_memcheck_api_errors_after_the_fault_real():
    parsed = parse(GPU / "tp4_oob_write_memcheck/compute-sanitizer.866.log")
    api = findings(parsed, "api_error")
    assert [(e.attrs["api"], e.attrs["error_code"], e.attrs["error_name"]) for e in api] == [
        ("cuMemFree_v2", 719, "CUDA_ERROR_LAUNCH_FAILED"), ("cuMemAlloc_v2", 719, "CUDA_ERROR_LAUNCH_FAILED")]
    assert all(e.attrs["cuda_error"].sticky and e.severity == Severity.ERROR for e in api)
    assert api[0].attrs["launch_site"] == "__del__ in signal_pad.py:29"
    (summary,) = findings(parsed, "summary")
    assert summary.message == "ERROR SUMMARY: 6 errors" and summary.severity == Severity.INFO


def test_misaligned_address_report_real():
    parsed = parse(GPU / "misaligned_address/compute-sanitizer_memcheck.txt")
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert a["kernel"] == "pack_kv_header_kernel"
    assert a["kernel_signature"] == "pack_kv_header_kernel(char *, int, int)"
    assert a["address_note"] == "is misaligned"
    assert a["count"] == 100                     # the tool's --print-limit
    assert a["blocks"]["distinct"] == 2 and a["threads"]["distinct"] == 96
    assert a["launch_site"] == "main in misaligned_address.cu:22"
    assert any("--print-limit" in p for p in parsed.problems)
    # the program's own lines among the tool's: the CUDA error it printed is an event too
    (err,) = [e for e in parsed.events if e.kind == Kind.CUDA_ERROR]
    assert (err.attrs["error_form"], err.attrs["cuda_error"].code) == ("cuda-samples", 719)
    assert accounted(parsed)


def test_host_frames_hold_only_frames():
    parsed = parse(GPU / "misaligned_address/compute-sanitizer_memcheck.txt")
    (access,) = findings(parsed, "access")
    assert access.attrs["host_frames"] == ["main in misaligned_address.cu:22 [0x8e54] in misaligned_address"]


def test_memcheck_multi_process_log_real():
    parsed = parse(S2A)
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert (a["kernel"], a["pc_offset"], a["kernel_source"]) == ("mnnvl_oneshot_allreduce_kernel", "0x140",
                                                                 "mnnvl_allreduce.cu:26")
    assert a["count"] == 4 and a["address_range"] == ["0x8ef9dec00008", "0x8ef9ded80008"]
    assert a["launch_site"] == "_launch in mnnvl_allreduce.py:94"
    assert a["processes_in_log"] == [1768, 1771, 1774, 1777]
    assert access.pid is None        # one front end for four processes: the pid is not knowable here
    api = findings(parsed, "api_error")
    (benign,) = [e for e in api if e.attrs["api"] == "cuGetProcAddress_v2"]
    assert benign.attrs["count"] == 136 and benign.severity == Severity.INFO    # not sticky: probing noise
    assert [e.attrs["api"] for e in api if e.attrs.get("error_code") == 719] == ["cudaMemcpyAsync", "cudaGetLastError"]
    assert parsed.unparsed_lines == 0 and accounted(parsed)


def test_single_process_session_header_gives_the_pid():
    parsed = parse_text("========= COMPUTE-SANITIZER\n"
                        "========= Process ID:             4242\n"
                        "========= Target application:     /usr/bin/python3 serve.py\n"
                        "=========\n"
                        "========= Invalid __shared__ read of size 16 bytes\n"
                        "=========     at attn_kernel<float>(float *, int)+0x1c0 in /srv/attn.cu:41\n"
                        "=========     by thread (7,0,0) in block (2,1,0)\n"
                        "=========     Address 0x400 is out of bounds\n"
                        "=========\n"
                        "========= ERROR SUMMARY: 1 error\n")
    (access,) = findings(parsed, "access")
    assert access.pid == 4242 and access.attrs["processes_in_log"] == [4242]
    assert access.attrs["fault"] == "Invalid __shared__ read of size 16 bytes"
    assert access.attrs["kernel"] == "attn_kernel<float>"
    assert (access.attrs["threads"]["first"], access.attrs["blocks"]["first"]) == ([7, 0, 0], [2, 1, 0])
    assert parsed.unparsed_lines == 0 and not parsed.problems


def test_a_benign_api_error_is_info():
    parsed = parse_text("========= COMPUTE-SANITIZER\n"
                        '========= Program hit CUDA_ERROR_NOT_FOUND (error 500) due to "named symbol not found" on '
                        "CUDA API call to cuGetProcAddress.\n"
                        "=========     Saved host backtrace up to driver entry point at error\n"
                        "=========         Host Frame: cudaGetDriverEntryPoint [0x4d1e2] in libcudart.so.12\n"
                        "=========\n"
                        "========= ERROR SUMMARY: 1 error\n")
    (api,) = findings(parsed, "api_error")
    assert api.severity == Severity.INFO and api.attrs["cuda_error"].name == "CUDA_ERROR_NOT_FOUND"
    assert (api.attrs["api"], api.attrs["error_code"]) == ("cuGetProcAddress", 500)


# --- repeated reports ------------------------------------------------------------------------

def _repeated_report_log(n: int) -> bytes:
    """n reports cloned from the first report of our TP=4 memcheck recording, thread,
    block and address varied per report (hand-made from a real record)."""
    lines = (GPU / "tp4_oob_write_memcheck/compute-sanitizer.866.log").read_text().splitlines()[1:28]
    head, at = lines[0], lines[1]
    rest = "\n".join(lines[4:])
    out = io.StringIO()
    out.write("========= COMPUTE-SANITIZER\n")
    for i in range(n):
        out.write(f"{head}\n{at}\n=========     by thread ({i % 256},0,0) in block ({i // 256},0,0)\n"
                  f"=========     Access to 0x{0x8fdd0ac00100 + 4 * i:x} is out of bounds\n{rest}\n")
    out.write(f"========= ERROR SUMMARY: {n} errors\n")
    return out.getvalue().encode()


def test_thousands_of_identical_reports_collapse_into_one_finding_quickly():
    data = _repeated_report_log(2500)
    started = time.perf_counter()
    parsed = parse_text(data, "big.log")
    elapsed = time.perf_counter() - started
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert a["count"] == 2500
    assert a["threads"]["distinct"] == 256 and a["blocks"]["last"] == [9, 0, 0]
    assert a["address_range"] == ["0x8fdd0ac00100", hex(0x8fdd0ac00100 + 4 * 2499)]
    assert len(a["first_lines"]) == 5
    assert accounted(parsed) and parsed.unparsed_lines == 0
    assert elapsed < 15, elapsed


def test_reports_at_another_pc_are_another_finding():
    one = ("========= Invalid __global__ write of size 4 bytes\n"
           "=========     at k(int *)+0x{pc} in /srv/k.cu:{line}\n"
           "=========     by thread ({t},0,0) in block (0,0,0)\n"
           "=========     Address 0x7f00000010{t:02x} is out of bounds\n"
           "=========\n")
    text = ("========= COMPUTE-SANITIZER\n" + one.format(pc="70", line=7, t=1) + one.format(pc="70", line=7, t=2)
            + one.format(pc="90", line=9, t=3) + "========= ERROR SUMMARY: 3 errors\n")
    parsed = parse_text(text)
    counts = {e.attrs["pc_offset"]: e.attrs["count"] for e in findings(parsed, "access")}
    assert counts == {"0x70": 2, "0x90": 1}


@functools.lru_cache(maxsize=None)
def _large_log_with_a_report() -> bytes:
    """Over 8 MB (the fast path): training lines that hold no anchor, a report, a few more."""
    def filler(a: int, b: int) -> str:
        return "".join(f"train step {i:07d}: loss 0.{i % 1000:03d} lr 1e-4 grad_norm 1.25 tok/s 8124.4 mem 61.2G "
                       f"xxxxxxxxxxxxxxxxxxx\n" for i in range(a, b))
    report = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
              "=========     at oob_kernel(float *, int)+0x70 in /srv/oob.cu:7\n"
              "=========     by thread (3,0,0) in block (4,0,0)\n"
              "=========     Address 0x7f0000001000 is out of bounds\n"
              "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
              "=========         Host Frame: launch in run.py:12 [0x1] in python3\n"
              "=========\n========= ERROR SUMMARY: 1 error\n")
    return (filler(0, 88000) + report + filler(88000, 92000)).encode()


def test_a_report_inside_a_large_log_is_found_by_the_fast_path():
    data = _large_log_with_a_report()
    assert len(data) > stream.FAST_PATH_BYTES
    parsed = parse_text(data, "train.log")
    (access,) = findings(parsed, "access")
    assert (access.line, access.attrs["kernel"], access.attrs["launch_site"]) == (88002, "oob_kernel",
                                                                                  "launch in run.py:12")
    assert parsed.lines == 92009 and accounted(parsed)
    assert parsed.counted_lines >= 87000          # the lines before it were counted, not parsed


def test_the_fast_path_resumes_after_a_finished_report():
    parsed = parse_text(_large_log_with_a_report(), "train.log")
    # the head of the file (start-up) is parsed whole, then only anchors and their windows
    from forensics.parsers import scan
    assert parsed.unparsed_lines <= scan.HEAD_LINES + 300 and parsed.counted_lines >= 90000


# --- other tools -----------------------------------------------------------------------------

def test_racecheck_hazards_real():
    parsed = parse(GPU / "shared_race/compute-sanitizer_racecheck.txt")
    hazards = findings(parsed, "hazard")
    assert {e.attrs["kernel"] for e in hazards} == {"block_sum_missing_sync_kernel"}
    assert all(e.attrs["tool"] == "racecheck" for e in hazards)
    war = next(e for e in hazards if "WAR" in e.attrs["fault"])
    assert war.attrs["accesses"][0].startswith("Read Thread (32,0,0)")
    assert (war.attrs["pc_offset"], war.attrs["kernel_source"]) == ("0x1a0", "shared_race.cu:14")
    assert sum(e.attrs["count"] for e in hazards) == 100          # "100 hazards displayed"
    (summary,) = findings(parsed, "summary")
    assert summary.message.startswith("RACECHECK SUMMARY: 100 hazards displayed")


def test_racecheck_race_report_shared_recording():
    parsed = parse(S7)
    (race,) = findings(parsed, "race")
    assert race.attrs["kernel"] == "block_reduce_sum_kernel"
    assert race.attrs["kernel_signature"] == "block_reduce_sum_kernel(const float *, float *)"
    assert race.attrs["hazards"] == 32768 and race.attrs["tool"] == "racecheck"


def test_race_report_hand_made():
    parsed = parse_text("========= COMPUTE-SANITIZER\n"
                        "========= Error: Race reported between Write access at reduce(float *)+0x100 in r.cu:13\n"
                        "=========     and Read access at reduce(float *)+0x170 in r.cu:18 [512 hazards]\n"
                        "=========\n"
                        "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    (race,) = findings(parsed, "race")
    a = race.attrs
    assert (a["kernel"], a["pc_offset"], a["kernel_source"]) == ("reduce", "0x100", "r.cu:13")
    assert race.attrs["hazards"] == 512 and len(race.attrs["accesses"]) == 2


def test_initcheck_uninitialised_read_real():
    parsed = parse(GPU / "uninit_read/compute-sanitizer_initcheck.txt")
    (uninit,) = findings(parsed, "uninit")
    a = uninit.attrs
    assert (a["tool"], a["kernel"], a["kernel_source"]) == ("initcheck", "add_bias_kernel", "uninit_read.cu:10")
    assert a["fault"] == "Uninitialized __global__ memory read of size 4 bytes"
    assert a["count"] == 100 and uninit.severity == Severity.ERROR


def test_device_assert_lines_inside_a_memcheck_log_real():
    parsed = parse(GPU / "device_assert/compute-sanitizer_memcheck.txt")
    asserts = [e for e in parsed.events if e.kind == Kind.DEVICE_ASSERT]
    assert [(e.attrs["block"], e.attrs["thread"]) for e in asserts] == [("1,0,0", "5,0,0"), ("5,0,0", "60,0,0")]
    (api,) = findings(parsed, "api_error")
    assert api.attrs["cuda_error"].name == "CUDA_ERROR_ASSERT"


def test_warp_assert_report_real():
    parsed = parse(GPU / "device_assert/compute-sanitizer_memcheck.txt")
    (warp,) = findings(parsed, "warp_assert")
    assert warp.attrs["kernel"] == "validate_token_ids_kernel" and warp.attrs["count"] == 2
    assert not [t for _, t in parsed.unparsed_samples if t.startswith("=========")]


# --- cut, look-alikes --------------------------------------------------------------------------

def test_cut_sanitizer_output_keeps_the_findings_before_the_cut():
    parsed = parse(DATA / "hostile/cut_sanitizer.log")
    (access,) = findings(parsed, "access")
    assert access.attrs["kernel"] == "k" and access.attrs["count"] == 1
    assert any("ends before its ERROR SUMMARY" in p for p in parsed.problems)


def test_the_access_at_address_line_and_a_backtrace_cut_at_its_header_are_read():
    # compute-sanitizer's "Access at 0x0 is out of bounds" address line, in a paste that
    # ends at the host backtrace's header (realworld sanitizer-002's shape, hand-made)
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Invalid __global__ write of size 8 bytes\n"
            "=========     at compress(const unsigned int *, uint2 *, int)+0x4bd0\n"
            "=========     by thread (16,0,0) in block (0,0,0)\n"
            "=========     Access at 0x0 is out of bounds\n"
            "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
            "=========         Host Frame: cudaLaun")
    parsed = parse_text(text, "paste.txt")
    (access,) = findings(parsed, "access")
    assert access.attrs["kernel"].startswith("compress") and access.attrs["address"] == "0x0"
    assert parsed.unparsed_lines == 0


def test_device_frames_after_the_address_and_host_frames_indented_by_five_are_read():
    # hand-made in the shapes of realworld sanitizer-012 (Device Frame: in an access record)
    # and sanitizer-006 (5-space Host Frame lines with their "in" on the next line).  The
    # PC is in a device function; the device frames are its callers, up to the kernel.
    text = ("========= Invalid __shared__ read of size 16 bytes\n"
            "=========     at warp_reduce(float)+0x6320 in reduce.cuh:40\n"
            "=========     by thread (0,0,0) in block (0,0,0)\n"
            "=========     Address 0x8 is misaligned\n"
            "=========     Device Frame:reduce_kernel(float *)+0xc0 in reduce.cuh:118\n"
            "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
            "=========     Host Frame: [0x334640]\n"
            "=========                in /lib/x86_64-linux-gnu/libcuda.so.1\n"
            "=========     Host Frame:cudaLaunchKernel [0x6bedb]\n"
            "=========                in /usr/lib/libcudart.so.12\n"
            "=========\n")
    parsed = parse_text(text, "paste.txt")
    (access,) = findings(parsed, "access")
    assert access.attrs["kernel"] == "reduce_kernel" and parsed.unparsed_lines == 0
    assert access.attrs["kernel_signature"] == "reduce_kernel(float *)"
    assert (access.attrs["device_function"], access.attrs["kernel_source"]) == ("warp_reduce", "reduce.cuh:40")
    assert access.attrs["device_frames"] == ["device:reduce_kernel(float *)+0xc0 in reduce.cuh:118"]
    assert access.attrs["host_frames"] == ["[0x334640] in /lib/x86_64-linux-gnu/libcuda.so.1",
                                           "cudaLaunchKernel [0x6bedb] in /usr/lib/libcudart.so.12"]


def test_parse_report_refuses_what_is_not_a_report():
    no_at_line = [" Invalid __global__ write of size 4 bytes", "     by thread (0,0,0) in block (0,0,0)"]
    assert parse_report(no_at_line) is None
    report = parse_report([" Invalid __global__ write of size 4 bytes", "     at k+0x10 in k.cu:3",
                           "     by thread (1,2,3) in block (4,5,6)", "     Address 0x10 is out of bounds"])
    assert (report.kind, report.at, report.thread, report.block) == ("access", "k+0x10 in k.cu:3", (1, 2, 3), (4, 5, 6))
    assert (report.address, report.address_note) == ("0x10", "is out of bounds")


# --- XML ----------------------------------------------------------------------------------

def test_xml_report_matches_the_text_report_real():
    (finding,) = findings(parse_xml(GPU / "misaligned_address/compute-sanitizer_memcheck.xml"), "access")
    (text,) = findings(parse(GPU / "misaligned_address/compute-sanitizer_memcheck.txt"), "access")
    for key in ("kernel", "pc_offset", "kernel_source", "fault", "address_note", "launch_site"):
        assert finding.attrs[key] == text.attrs[key], key
    assert finding.attrs["count"] == 100                 # the XML run's own count (its --print-limit)
    assert finding.attrs["threads"]["distinct"] == 96


def test_xml_multi_report_file_real():
    parsed = parse_xml(GPU / "tp4_oob_write_memcheck_xml/compute-sanitizer.1106.xml")
    assert parsed.kind == "compute-sanitizer-xml" and not parsed.problems
    (access,) = findings(parsed, "access")
    assert (access.attrs["kernel"], access.attrs["count"]) == ("oneshot_allreduce_flag_kernel", 4)
    assert access.attrs["launch_site"] == "_launch_flags in signal_pad.py:99"
    assert [e.attrs["api"] for e in findings(parsed, "api_error")] == ["cuMemFree_v2", "cuMemAlloc_v2"]


def test_truncated_xml_keeps_the_records_before_the_cut(tmp_path):
    data = (GPU / "misaligned_address/compute-sanitizer_memcheck.xml").read_bytes()
    cut = tmp_path / "cut.xml"
    cut.write_bytes(data[: len(data) // 2])
    parsed = parse_xml(cut)
    assert any("cut short" in p for p in parsed.problems)
    (finding,) = findings(parsed, "access")
    assert 0 < finding.attrs["count"] < 100


def test_xml_without_records_says_so(tmp_path):
    path = tmp_path / "empty.xml"
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n</ComputeSanitizerOutput>\n')
    parsed = parse_xml(path)
    assert parsed.events == [] and any("without any <record>" in p for p in parsed.problems)


def test_xml_initcheck_matches_the_text_report_real():
    (xml,) = [e for e in parse_xml(GPU / "uninit_read/compute-sanitizer_initcheck.xml").events]
    (text,) = findings(parse(GPU / "uninit_read/compute-sanitizer_initcheck.txt"), "uninit")
    for key in ("report", "tool", "kernel", "kernel_source", "fault"):
        assert xml.attrs[key] == text.attrs[key], key
    assert xml.severity == text.severity


def test_xml_racecheck_names_the_kernel_real():
    (race,) = parse_xml(GPU / "shared_race/compute-sanitizer_racecheck.xml").events
    assert race.attrs["tool"] == "racecheck"
    assert race.attrs.get("kernel") == "block_sum_missing_sync_kernel"


def test_xml_warp_assert_names_the_launched_kernel_real():
    parsed = parse_xml(GPU / "device_assert/compute-sanitizer_memcheck.xml")
    (warp,) = [e for e in parsed.events if e.attrs.get("pc_offset") == "0x19a0"]
    assert warp.attrs["kernel"] == "validate_token_ids_kernel"


def test_a_fragment_of_sanitizer_api_errors_alone_is_a_failure():
    """Only compute-sanitizer's view of the program's failing call (a paste cut before
    the program's own traceback): the error, where it surfaced, and a failure."""
    from tests.helpers import analyze_text
    text = ("=========         Host Frame: _start [0xb2e5] in python3.12\n"
            "========= \n"
            '========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA '
            "API call to cudaDeviceSynchronize.\n"
            "=========     Saved host backtrace up to driver entry point at error\n"
            "=========         Host Frame: c10::cuda::device_synchronize() [0x2e1a4] in libc10_cuda.so\n")
    v = analyze_text(text).verdict
    assert v.failed and v.error.code == 719
    assert "cudaDeviceSynchronize" in v.first_failure.basis + v.first_failure.what
