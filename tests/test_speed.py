"""The fast path for large inputs: the same verdict as the full parse, every line
accounted for, error storms collapsed, and time in proportion to what matters."""

from __future__ import annotations

import json
import time

import pytest

from bench import realistic
from forensics.case import analyze
from forensics.parsers import scan
from forensics.parsers.text import stream


def _summary(case):
    v = case.verdict
    return (v.headline, v.error.code if v.error else None, v.first_failure.rank if v.first_failure else None,
            v.collateral)


@pytest.fixture(scope="module")
def crash_alone():
    return _summary(analyze(str(realistic.SOURCE)))


@pytest.mark.parametrize("mode", realistic.MODES)
def test_generated_bundles_give_the_verdict_of_the_crash_alone(tmp_path, mode, crash_alone):
    target = realistic.generate(tmp_path / mode, 12 << 20, mode)
    started = time.monotonic()
    case = analyze(str(target))
    took = time.monotonic() - started
    assert _summary(case) == crash_alone
    for source in case.sources:
        s = source.to_json()
        assert s["event_lines"] + s["noise_lines"] + s["counted_lines"] + s["unparsed_lines"] == s["lines"], s
    assert took < 60, took


def test_the_fast_path_takes_over_above_its_threshold(tmp_path, monkeypatch):
    target = realistic.generate(tmp_path / "r", 12 << 20, "realistic")
    case = analyze(str(target))
    source = case.sources[0].to_json()
    # most lines are counted, not parsed: ordinary traffic is not an event each
    assert source["counted_lines"] > 0.8 * source["lines"]
    # and the same file read whole gives the same verdict
    monkeypatch.setattr(stream, "FAST_PATH_BYTES", 1 << 40)
    assert _summary(analyze(str(target))) == _summary(case)


def test_an_error_storm_is_counted_with_its_first_and_last_lines_parsed(tmp_path):
    target = realistic.generate(tmp_path / "d", 12 << 20, "dense")
    case = analyze(str(target))
    source = case.sources[0]
    assert any("error template(s) more than" in p for p in source.problems)
    storms = [e for e in case.events if "maximum context length" in e.message]
    assert 0 < len(storms) <= scan.REPEAT_CAP + 1
    # the last occurrence is parsed too
    last_line = max(i for i, line in enumerate(target.read_text().splitlines(), 1) if "maximum context length" in line)
    # (a traceback's event sits at its first line, up to four lines before its exception line)
    assert any(last_line - 4 <= e.line <= last_line for e in storms)


def test_compressed_and_streamed_inputs_take_the_fast_path_by_decompressed_size(tmp_path):
    target = realistic.generate(tmp_path / "g", 12 << 20, "gzip")
    case = analyze(str(target))
    assert case.sources[0].to_json()["counted_lines"] > 0


def test_line_numbers_after_newline_free_runs_are_right(tmp_path):
    target = realistic.generate(tmp_path / "l", 12 << 20, "longline")
    case = analyze(str(target))
    with open(target, "rb") as fh:
        wanted = next(n for n, line in enumerate(fh, 1) if b"WorkerProc hit an exception" in line)
    assert any(e.line == wanted and "WorkerProc hit an exception" in e.message for e in case.events)


def test_json_report_of_a_large_input_stays_small(tmp_path):
    from forensics.report import Options, render
    from forensics.report.document import build
    import io
    case = analyze(str(realistic.generate(tmp_path / "r", 12 << 20, "realistic")))
    out = io.StringIO()
    render(build(case), "json", out, Options())
    assert len(out.getvalue()) < 2_000_000
    assert json.loads(out.getvalue())["verdict"]["error"]["code"] == 700


def test_parallel_anchor_search_finds_what_the_sequential_scan_finds(tmp_path, monkeypatch):
    target = realistic.generate(tmp_path / "p", 12 << 20, "dense")
    monkeypatch.setattr(scan, "PARALLEL_SCAN_BYTES", 1 << 20)
    monkeypatch.setattr(scan, "BLOCK_BYTES", 1 << 20)       # many ranges and blocks: boundaries get tested
    offsets = list(scan.parallel_hits(str(target), target.stat().st_size, workers=2))
    data = target.read_bytes()
    # one offset per line that holds an anchor (the Scanner needs the line, not the column)
    lines_found = [data.rfind(b"\n", 0, i) + 1 for i in offsets]
    expected = sorted({data.rfind(b"\n", 0, i) + 1 for anchor in scan.anchors() for i in _all(data, anchor)})
    assert lines_found == expected
    parallel = analyze(str(target))
    monkeypatch.setattr(scan, "PARALLEL_SCAN_BYTES", 1 << 40)
    sequential = analyze(str(target))
    assert [(e.line, e.kind, e.message) for e in parallel.events] == \
        [(e.line, e.kind, e.message) for e in sequential.events]
    assert _summary(parallel) == _summary(sequential)


def _all(data: bytes, needle: bytes):
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)
