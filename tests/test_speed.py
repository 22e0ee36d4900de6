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
from forensics.report.document import build


def _summary(case, offset: int = 0):
    """The verdict field by field, positions relative to the crash (bench/realistic.py)."""
    return realistic.verdict_fields(build(case).to_json(), offset)


@pytest.fixture(scope="module")
def crash_alone():
    return _summary(analyze(str(realistic.SOURCE)))


@pytest.mark.parametrize("mode", realistic.MODES)
def test_generated_bundles_give_the_verdict_of_the_crash_alone(tmp_path, mode, crash_alone):
    """Field by field - the error, each surface and its line, the first failure, the
    collateral, every process's status - not only the headline: an error storm that
    counts away the crash's traceback header keeps the headline and loses the rest."""
    target = realistic.generate(tmp_path / mode, 12 << 20, mode)
    started = time.monotonic()
    case = analyze(str(target))
    took = time.monotonic() - started
    got = _summary(case, realistic.crash_offset(target))
    assert {k: v for k, v in got.items() if v != crash_alone.get(k)} == {}
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
    monkeypatch.setattr(scan, "_hyperscan", lambda: None)    # the ranges pay for the Python matchers only
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


def _matchers():
    """Every matcher this machine can run: Hyperscan and Aho-Corasick when installed, and
    the bytes.find fallback always."""
    found = ["bytes.find"]
    if scan._automaton() is not None:
        found.append("pyahocorasick")
    if scan._hyperscan() is not None:
        found.append("hyperscan")
    return found


@pytest.mark.parametrize("matcher", _matchers())
def test_every_matcher_finds_the_same_hit_lines(matcher, monkeypatch):
    anchors = scan.anchors()
    lines = [b"ordinary traffic line %d" % i for i in range(50)]
    lines[3] = anchors[0] + b" at the very start"
    lines[10] = b"two anchors " + anchors[1] + b" and " + anchors[-1] + b" on one line"
    lines[20] = b"x" * 300 + anchors[len(anchors) // 2]
    lines[49] = b"the last line without its newline " + anchors[2]
    block = b"\n".join(lines)
    expected = [block.index(lines[i]) for i in (3, 10, 20, 49)]
    if matcher != "hyperscan":
        monkeypatch.setattr(scan, "_hyperscan", lambda: None)
    if matcher == "bytes.find":
        monkeypatch.setattr(scan, "_automaton", lambda: None)
    assert scan.scanner_name() == matcher
    assert scan._hit_lines(block) == expected
    # a range's limit: only matches that start before it count
    assert scan._hit_lines(block, limit=expected[2]) == expected[:2]


@pytest.mark.parametrize("matcher", _matchers())
def test_a_line_of_a_million_matches_costs_like_a_line(matcher, monkeypatch):
    """A line of "=" is a match of the sanitizer's "=========" at every byte: the search
    skips the rest of such a line instead of reporting each (it took 49 s and 470 MB on
    100 lines of 1 MB)."""
    if matcher != "hyperscan":
        monkeypatch.setattr(scan, "_hyperscan", lambda: None)
    if matcher == "bytes.find":
        monkeypatch.setattr(scan, "_automaton", lambda: None)
    block = (b"=" * 200_000 + b"\n") * 5 + b"ordinary\n" + b"NCCL " * 40_000 + b"\n"
    found = scan._matches(block)
    assert len(found) < 1_000, len(found)          # of 1.04 million matches in the block
    starts = [i * 200_001 for i in range(5)] + [5 * 200_001 + len(b"ordinary\n")]
    assert scan._hit_lines(block) == starts


def test_templates_mask_what_varies_and_keep_the_words():
    a = scan.template_of(b"(APIServer pid=812) ERROR 11-04 10:00:01 [serving.py:88] Error in request "
                         b"chatcmpl-9xQbTzKpLm3: prompt too long (4097 > 4096) at 0x7f3a2b1c")
    b = scan.template_of(b"(APIServer pid=812) ERROR 11-04 10:07:59 [serving.py:88] Error in request "
                         b"chatcmpl-AbCdEfGhIjKl: prompt too long (8001 > 4096) at 0x7f00aa00")
    c = scan.template_of(b"(APIServer pid=812) ERROR 11-04 10:07:59 [serving.py:88] Error in request "
                         b"chatcmpl-AbCdEfGhIjKl: CUDA error: an illegal memory access was encountered")
    assert a == b
    assert a != c
    assert b"Error in request" in a and b"prompt too long" in a
    assert b"chatcmpl" not in a and b"4097" not in a


def test_a_storm_of_errors_with_unique_request_ids_is_counted(tmp_path, monkeypatch, crash_alone):
    """Per-request errors each carrying its own id: the digit-free text differs on every
    line, the word template does not - the storm collapses all the same."""
    import random
    import string
    rng = random.Random(3)
    target = tmp_path / "console.log"
    n = 30_000
    with open(target, "w", encoding="utf-8") as fh:
        for i in range(n):
            rid = "".join(rng.choice(string.ascii_letters) for _ in range(16))
            fh.write(f"(APIServer pid=812) ERROR 11-04 10:{i // 600 % 60:02d}:{i // 10 % 60:02d} [serving_chat.py:211] "
                     f"Error in chat completion for request chatcmpl-{rid}: the client closed the stream\n")
        fh.write(realistic.SOURCE.read_text(encoding="utf-8"))
    monkeypatch.setattr(stream, "FAST_PATH_BYTES", 1 << 20)
    case = analyze(str(target))
    source = case.sources[0].to_json()
    assert source["events"] < 1_000, source
    assert source["counted_lines"] >= n - scan.REPEAT_CAP - scan.BACKFILL_LINES - 1
    got = _summary(case, realistic.crash_offset(target))
    # the storm's own process is one more, healthy; everything else is the crash's
    assert ("APIServer (pid 812)", "healthy") in got.pop("statuses")
    assert got == {k: v for k, v in crash_alone.items() if k != "statuses"}


def _scan(lines: list[bytes]) -> dict[int, str]:
    scanner = scan.Scanner(__import__("io").BytesIO(b"\n".join(lines) + b"\n"), busy=lambda: False,
                           head_lines=0, tail_lines=0)
    return dict(scanner.lines())


def test_a_storm_template_is_kept_per_process_and_per_logger_site():
    """The same words from another process (or another logger site) are another template:
    one process's storm never counts away another's first error."""
    storm = [b"(APIServer pid=812) ERROR 11-04 10:00:%02d [serving.py:88] Traceback (most recent call last):" % (i % 60)
             for i in range(scan.REPEAT_CAP + scan.BACKFILL_LINES + 100)]
    worker = b"(Worker_TP1 pid=913) ERROR 11-04 10:01:00 [multiproc_executor.py:1063] Traceback (most recent call last):"
    same_process_other_site = b"(APIServer pid=812) ERROR 11-04 10:01:01 [launcher.py:41] Traceback (most recent call last):"
    parsed = _scan(storm + [worker, same_process_other_site])
    n = len(storm)
    assert parsed.get(n + 1) == worker.decode() and parsed.get(n + 2) == same_process_other_site.decode()
    # and the storm itself is still counted: its first REPEAT_CAP lines parsed, and at most
    # the run of BACKFILL_LINES counted lines right before the new hits (what they may close)
    assert all(k in parsed for k in range(1, scan.REPEAT_CAP + 1))
    assert scan.REPEAT_CAP < len([k for k in parsed if k <= n]) <= scan.REPEAT_CAP + scan.BACKFILL_LINES + 1
    # ranks behind a torchrun prefix and SLURM task labels are identities too
    assert scan.identity_of(b"[rank3]:[W1104 10:00:01] x") != scan.identity_of(b"[rank5]:[W1104 10:00:02] x")
    assert scan.identity_of(b"3: NCCL WARN x") != scan.identity_of(b"4: NCCL WARN x")
    assert scan.identity_of(b"ERROR 11-04 10:00:01 request 4711 failed") == b""


def test_a_counted_line_that_opens_a_new_error_is_parsed_after_all():
    """A thousand request tracebacks under one record header, then the crash's traceback
    under the very same header: its header line is counted as a repeat when read, and
    parsed after all when its exception line turns out to be new - with every frame."""
    head = b"(APIServer pid=812) ERROR 11-04 10:00:01 [serving.py:88] "
    request = [head + b"Traceback (most recent call last):", head + b'  File "/srv/app.py", line 141, in create',
               head + b"    prompts = await self._preprocess(", head + b"ValueError: prompt too long (4097 > 4096)"]
    crash = [head + b"Traceback (most recent call last):"] + [head + b'  File "/srv/app.py", line %d, in create' % (100 + i)
                                                               for i in range(20)] + \
        [head + b"torch.AcceleratorError: CUDA error: an illegal memory access was encountered"]
    lines = request * 400 + crash
    parsed = _scan(lines)
    first = len(request) * 400 + 1
    assert [parsed.get(n) for n in range(first, first + len(crash))] == [line.decode() for line in crash]
    # the crash's header is not also replayed at the end as a storm's "last occurrence"
    assert list(parsed)[-1] == len(lines) or list(parsed).count(first) == 1


def test_gzip_is_read_the_same_with_and_without_isal(tmp_path, monkeypatch):
    target = realistic.generate(tmp_path / "g", 12 << 20, "gzip")
    with_isal = analyze(str(target))
    _without_isal(monkeypatch)
    from forensics.inputs import sources
    assert sources.gzip_reader_name() == "zlib"
    without = analyze(str(target))
    assert _summary(with_isal) == _summary(without)
    assert [s.to_json() for s in with_isal.sources] == [s.to_json() for s in without.sources]


def _without_isal(monkeypatch):
    from forensics.inputs import sources
    monkeypatch.setattr(sources, "_isal", lambda: None)


@pytest.mark.parametrize("reader", ["best", "zlib"])
def test_a_corrupt_gzip_is_read_up_to_the_damage_whichever_decompressor_reads_it(tmp_path, monkeypatch, reader):
    target = realistic.generate(tmp_path / "g", 12 << 20, "gzip")
    data = target.read_bytes()
    cut = len(data) * 3 // 4
    target.write_bytes(data[:cut] + b"\xff\x00garbage" * 64 + data[cut:])
    if reader == "zlib":
        _without_isal(monkeypatch)
    case = analyze(str(target))
    source = case.sources[0]
    assert source.lines > 10_000                      # what came before the damage was read
    assert any("read stopped" in p for p in source.problems), source.problems


def _sanitizer_record(kernel: str, line: int, size: int = 4) -> list[bytes]:
    return [b"========= Invalid __global__ read of size %d bytes" % size,
            b"=========     at %s+0x%x in %s.cu:%d" % (kernel.encode(), 16 * line, kernel.encode(), line),
            b"=========     by thread (%d,0,0) in block (0,0,0)" % (line % 7),
            b"=========     Address 0x7f00%04x is out of bounds" % line,
            b"=========     Saved host backtrace up to driver entry point at kernel launch time",
            b"=========         Host Frame: launch_%s [0x1234] in libapp.so" % kernel.encode(),
            b"========= "]


def test_a_long_sanitizer_log_parses_each_distinct_record_once_and_counts_its_repeats(monkeypatch):
    """Millions of near-identical memcheck records: each (kernel, access, size, source
    line) is parsed once with its full detail, its repeats counted whole; past the first
    SANITIZER_FULL_RECORDS distinct ones, a new record keeps its finding without its host
    backtrace.  Every distinct kernel stays in view."""
    monkeypatch.setattr(scan, "SANITIZER_FULL_RECORDS", 3)    # the banner, gemm, attn
    lines = [b"========= COMPUTE-SANITIZER"]
    for i in range(300):
        lines += _sanitizer_record("gemm", 10) + _sanitizer_record("attn", 20)
    lines += _sanitizer_record("gemm", 10, size=8)      # another size: another record
    lines += _sanitizer_record("norm", 30) + _sanitizer_record("norm", 30)
    lines += [b"========= ERROR SUMMARY: 603 errors"]
    scanner = scan.Scanner(__import__("io").BytesIO(b"\n".join(lines) + b"\n"), busy=lambda: False,
                           head_lines=0, tail_lines=0)
    parsed = dict(scanner.lines())
    text = "\n".join(parsed.values())
    for kernel in ("gemm+", "attn+", "norm+"):
        assert kernel in text
    assert text.count("at gemm+") == 2 and text.count("at attn+") == 1 and text.count("at norm+") == 1
    # the first two distinct records in full, the later ones without their host frames
    assert "launch_gemm" in text and "launch_attn" in text and "launch_norm" not in text
    assert "ERROR SUMMARY" in text
    assert len(parsed) + scanner.counted == len(lines)
    assert any("compute-sanitizer records" in p for p in scanner.problems)


def test_past_the_distinct_record_cap_only_a_new_kernel_is_parsed(monkeypatch):
    """A memcheck log of ever-new records (every PC and source line distinct): past
    SANITIZER_MAX_RECORDS distinct ones, a record of a kernel already parsed is counted;
    a new kernel's is still parsed - every kernel stays in view, memory stays flat."""
    monkeypatch.setattr(scan, "SANITIZER_MAX_RECORDS", 3)
    lines = []
    for line in range(10, 20):
        lines += _sanitizer_record("gemm", line)          # gemm at ten source lines
    lines += _sanitizer_record("softmax", 99)             # a kernel first seen past the cap
    scanner = scan.Scanner(__import__("io").BytesIO(b"\n".join(lines) + b"\n"), busy=lambda: False,
                           head_lines=0, tail_lines=0)
    text = "\n".join(dict(scanner.lines()).values())
    assert text.count("at gemm+") == 3 and "at softmax+" in text


def test_the_storm_note_counts_the_templates_that_stormed(tmp_path, monkeypatch):
    """Its last occurrences parsed in place (a run before a new hit) still stormed: the
    note says how many templates repeated past the cap, never 0."""
    head = "(APIServer pid=812) ERROR 11-04 10:00:01 [serving.py:88] "
    storm = [head + "Traceback (most recent call last):", head + '  File "/srv/app.py", line 141, in create',
             head + "ValueError: prompt too long (4097 > 4096)"] * 700
    cut = [head + "Traceback (most recent call last):", head + '  File "/srv/model.py", line 12, in forward']
    target = tmp_path / "console.log"
    target.write_text("\n".join(storm + cut) + "\n")
    monkeypatch.setattr(stream, "FAST_PATH_BYTES", 1 << 10)
    case = analyze(str(target))
    (note,) = [p for p in case.sources[0].problems if "error template(s)" in p]
    assert " repeating 3 error template(s)" in note, note
