"""compute-sanitizer text reports (grammars/compute_sanitizer.lark) on real recordings,
and the collapse of many identical reports."""

import io
import time
import tracemalloc
from pathlib import Path

import pytest

from forensics.events import Kind, Severity
from forensics.parsers.text import TextLogParser
from forensics.sources import Source, sniff
from tests.conftest import DATA, RECORDINGS

S2A = RECORDINGS / "gpu/s2a_memcheck_all_processes/compute-sanitizer.1753.log"
S7 = RECORDINGS / "gpu/s7_racecheck/compute-sanitizer_racecheck.log"
MISALIGNED = DATA / "gpu/misaligned_address/compute-sanitizer_memcheck.txt"


def parse(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    return TextLogParser().parse(sniff(path, path.name))


def findings(parsed, report):
    return [e for e in parsed.events if e.kind == Kind.SANITIZER and e.attrs.get("report") == report]


def test_memcheck_multi_process_log_collapses_per_kernel_and_pc():
    parsed = parse(S2A)
    assert parsed.kind == "compute-sanitizer"
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert (a["kernel"], a["pc_offset"], a["kernel_source"]) == ("mnnvl_oneshot_allreduce_kernel", "0x140", "mnnvl_allreduce.cu:26")
    assert a["fault"] == "Invalid __global__ write of size 4 bytes" and a["address_note"] == "is out of bounds"
    assert a["count"] == 4
    assert a["threads"] == {"first": [0, 0, 0], "last": [3, 0, 0], "distinct": 4}
    assert a["address_range"] == ["0x8ef9dec00008", "0x8ef9ded80008"]
    assert a["launch_site"] == "_launch in mnnvl_allreduce.py:94"
    assert a["processes_in_log"] == [1768, 1771, 1774, 1777]
    assert access.pid is None          # one front end for four processes: pid not knowable here
    api = findings(parsed, "api_error")
    benign = [e for e in api if e.attrs["api"] == "cuGetProcAddress_v2"]
    assert benign[0].attrs["count"] == 136 and benign[0].severity == Severity.INFO
    after = [e.attrs["api"] for e in api if e.attrs.get("error_code") == 719]
    assert after == ["cudaMemcpyAsync", "cudaGetLastError"]
    assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines
    assert parsed.unparsed_lines == 0


def test_racecheck_report():
    parsed = parse(S7)
    (race,) = findings(parsed, "race")
    assert race.attrs["kernel"] == "block_reduce_sum_kernel"
    assert race.attrs["kernel_signature"] == "block_reduce_sum_kernel(const float *, float *)"
    assert race.attrs["hazards"] == 32768
    assert race.attrs["tool"] == "racecheck"


def test_misaligned_address_report_from_our_recording():
    parsed = parse(MISALIGNED)
    access = findings(parsed, "access")
    assert access and access[0].attrs["kernel"].startswith("pack_kv_header_kernel")
    assert access[0].attrs["address_note"] == "is misaligned"
    assert access[0].attrs["count"] > 1
    assert access[0].attrs["launch_site"] == "main in misaligned_address.cu:22"


def _repeated_report_log(n: int) -> bytes:
    """A log of n reports cloned from the real s2a report, thread ids varied: hand-made
    from a real record, for the collapse and speed property."""
    lines = S2A.read_text().splitlines()[4805:4812]
    head = "\n".join(lines[:2])
    rest = "\n".join(lines[3:])
    out = io.StringIO()
    out.write("========= COMPUTE-SANITIZER\n")
    for i in range(n):
        out.write(f"{head}\n=========     by thread ({i % 1024},0,0) in block ({i // 1024},0,0)\n{rest}\n=========\n")
    out.write("========= ERROR SUMMARY: %d errors\n" % n)
    return out.getvalue().encode()


def _parse_log(n: int):
    data = _repeated_report_log(n)
    return TextLogParser().parse(Source("big.log", None, "compute-sanitizer", size=len(data), data=data))


def test_100k_identical_reports_collapse_in_seconds():
    if not S2A.exists():
        pytest.skip("shared recordings not available")
    started = time.perf_counter()
    parsed = _parse_log(100_000)
    elapsed = time.perf_counter() - started
    (access,) = findings(parsed, "access")
    assert access.attrs["count"] == 100_000
    assert access.attrs["threads"]["distinct"] == 1024
    assert access.attrs["blocks"]["last"] == [97, 0, 0]
    assert parsed.lines == parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines
    assert elapsed < 30, elapsed


def test_memory_stays_flat_as_reports_repeat(tmp_path):
    if not S2A.exists():
        pytest.skip("shared recordings not available")
    peaks = []
    for n in (60_000, 180_000):                  # 33 and 100 MB: several 8 MB blocks each
        path = tmp_path / f"cs.{n}.log"
        path.write_bytes(_repeated_report_log(n))
        source = sniff(path, path.name)
        tracemalloc.start()
        TextLogParser().parse(source)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.3 * peaks[0] + (4 << 20), peaks     # 3x the reports, not 3x the memory


XML = DATA / "gpu/misaligned_address/compute-sanitizer_memcheck.xml"


def test_xml_report_matches_the_text_report():
    from forensics.parsers.sanitizer_xml import SanitizerXmlParser
    if not XML.exists():
        pytest.skip("recording not available")
    parsed = SanitizerXmlParser().parse(sniff(XML, XML.name))
    (finding,) = [e for e in parsed.events if e.attrs.get("report") == "access"]
    text = findings(parse(MISALIGNED), "access")[0]
    for key in ("kernel", "pc_offset", "kernel_source", "fault", "address_note", "launch_site"):
        assert finding.attrs[key] == text.attrs[key], key
    assert finding.attrs["count"] == 100     # the XML run's own count (its --print-limit)


def test_truncated_xml_keeps_the_records_before_the_cut(tmp_path):
    from forensics.parsers.sanitizer_xml import SanitizerXmlParser
    if not XML.exists():
        pytest.skip("recording not available")
    data = XML.read_bytes()
    cut = tmp_path / "cut.xml"
    cut.write_bytes(data[: len(data) // 2])
    parsed = SanitizerXmlParser().parse(sniff(cut, cut.name))
    assert any("cut short" in p for p in parsed.problems)
    (finding,) = [e for e in parsed.events if e.attrs.get("report") == "access"]
    assert 0 < finding.attrs["count"] < 100
