"""The format registry (forensics/data/formats.toml, forensics/parsers/registry.py).

Every sample of every format is parsed here, by parametrising over the registry itself:
a format added to formats.toml is tested without touching this file.  Then the things
the registry promises across formats: a console that mixes formats reads each part with
its own format, tools' look-alikes are not taken for a tool's output, and every --kind
a user may force has a reader.

Inputs written here are hand-made in the shapes the tools print.
"""

from __future__ import annotations

import importlib
import io
import shutil

import pytest

from forensics import grammar
from forensics.case import NothingToAnalyse, analyze
from forensics.events import Kind
from forensics.parsers import registry
from forensics.parsers.base import KIND_NAMES
from forensics.parsers.sanitizer.text import is_sanitizer_line
from forensics.parsers.text.lines import LineParser
from tests.conftest import DATA
from tests.helpers import parse_text

FORMATS = registry.formats()
LINE_SAMPLES = [pytest.param(f.name, s, id=f"{f.name}-{i}")
                for f in FORMATS if f.kind == "line" for i, s in enumerate(f.samples)]

# Block and collector samples; the ones a known bug breaks are marked here by name.
_SAMPLE_BUGS: dict[str, str] = {}


def _block_params():
    out = []
    for f in FORMATS:
        if f.kind not in ("block", "collector"):
            continue
        for i, sample in enumerate(f.samples):
            ident = f"{f.name}-{i}"
            marks = [pytest.mark.xfail(strict=True, reason=_SAMPLE_BUGS[ident])] if ident in _SAMPLE_BUGS else []
            out.append(pytest.param(f.name, sample, id=ident, marks=marks))
    return out


BLOCK_SAMPLES = _block_params()


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


# --- the registry itself ---------------------------------------------------------------

def test_registry_entries_are_well_formed():
    names = [f.name for f in FORMATS]
    assert len(names) == len(set(names)), "format names must be unique"
    assert {f.kind for f in FORMATS} <= {"line", "block", "collector", "binary"}
    for f in FORMATS:
        assert f.what.strip(), f.name
        if f.kind == "line":
            assert f.guard and f.grammar, f.name
            assert f.joins in ("header", "logger", "no"), f.name
        if f.kind in ("block", "collector"):
            assert f.reader, f.name
        if f.kind != "binary":
            assert f.samples, f"{f.name}: every text format carries samples"
    # the four kinds are all present: the registry is the single list of formats
    assert {"line", "block", "collector", "binary"} == {f.kind for f in FORMATS}


def test_every_grammar_the_registry_names_exists_and_line_grammars_build():
    for f in FORMATS:
        if f.grammar:
            assert grammar.grammar_text(f.grammar).strip(), f.grammar
        if f.kind == "line":
            # the line reader parses a header with the grammar's default start rule
            assert grammar.load(f.grammar).terminals, f.grammar


def test_block_readers_have_a_start_function():
    for f in registry.formats_of_kind("block"):
        module = importlib.import_module(f.reader)
        assert callable(module.start), f.reader
        assert module.start("an ordinary line of text", None) is None, f.reader


@pytest.mark.parametrize("first_line, fmt", [
    ("Traceback (most recent call last):", "python-traceback"),
    ('  File "/srv/app/run.py", line 12, in step', "python-traceback"),
    ("Fatal Python error: Aborted", "faulthandler"),
    ("Timeout (0:05:00)!", "faulthandler"),
    ("Process 4242: /usr/bin/python3 -m vllm.entrypoints.openai.api_server", "py-spy"),
    ("terminate called after throwing an instance of 'c10::Error'", "native-exception"),
    ("=" * 60, "torchrun-summary"),
    ("/opt/venv/lib/python3.11/site-packages/x.py:3: UserWarning: careful", "python-warning"),
])
def test_start_block_picks_the_format_of_a_first_line(first_line, fmt):
    block = registry.start_block(first_line, None)
    assert block is not None and block.format == fmt


@pytest.mark.parametrize("line", ["", "INFO 06-14 08:01:02 api_server.py:339] ok", "hello world",
                                  "UserWarning: not a location line"])
def test_start_block_ignores_lines_that_start_nothing(line):
    assert registry.start_block(line, None) is None


def test_reader_for_every_binary_format():
    for f in registry.formats_of_kind("binary"):
        reader = registry.reader_for(f.name)
        assert reader is not None and callable(reader.parse), f.name
    assert registry.reader_for("no-such-format") is None
    assert registry.reader_for("vllm") is None          # a line format is read by the text reader


# --- every sample of every format ---------------------------------------------------------

@pytest.mark.parametrize("name, sample", LINE_SAMPLES)
def test_line_sample_is_read_as_its_own_format(name, sample):
    record = LineParser().parse(sample["line"])
    assert record.format == name
    for key, want in sample.items():
        if key != "line":
            assert getattr(record, key) == want, key
    parsed = parse_text(sample["line"] + "\n")
    assert name in parsed.formats
    assert parsed.unparsed_lines == 0 and accounted(parsed)


@pytest.mark.parametrize("name, sample", BLOCK_SAMPLES)
def test_block_sample_is_read_as_its_own_format(name, sample):
    parsed = parse_text(sample["text"])
    # every line of the sample was recognised as this format, none left unparsed
    assert set(parsed.formats) == {name}, parsed.formats
    assert parsed.unparsed_lines == 0, parsed.unparsed_samples
    assert not parsed.problems
    assert accounted(parsed)
    assert parsed.kind == KIND_NAMES.get(name, name)
    if sample["event"]:
        assert parsed.events and parsed.events[0].kind == Kind(sample["event"])
    else:
        assert parsed.events == [] and parsed.noise_lines == parsed.lines


def test_line_samples_name_only_fields_a_record_has():
    # a misspelt key in formats.toml would silently check nothing
    fields = set(LineParser().parse("x").__dataclass_fields__)
    for f in registry.formats_of_kind("line"):
        for sample in f.samples:
            assert set(sample) - {"line"} <= fields, (f.name, sample)


# --- formats mixed in one console ---------------------------------------------------------

MIXED = """\
INFO 06-03 14:01:00 [api_server.py:1] vLLM API server version 0.9.2
(Worker_TP1 pid=3311) ERROR 06-03 14:02:10 [multiproc_executor.py:671] WorkerProc hit an exception.
[rank1]: Traceback (most recent call last):
[rank1]:   File "/srv/train.py", line 12, in step
[rank1]:     torch.cuda.synchronize()
[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered
Fatal Python error: Segmentation fault

Current thread 0x00007f42f4debb80 (most recent call first):
  File "/srv/app/worker.py", line 69 in misbehave
  File "/srv/app/worker.py", line 108 in <module>

========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_kernel(float *, int)+0x70 in /srv/oob.cu:7
=========     by thread (3,0,0) in block (4,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
gpu-node-3:2412:2598 [1] enqueue.cc:1520 NCCL WARN Cuda failure 700 'an illegal memory access was encountered'
[ 8123.456789] NVRM: Xid (PCI:0000:17:00): 13, pid=3311, name=python3, Graphics Exception
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-06-03_14:02:12
  host      : node-5
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 3311)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_mixed_console_reads_each_part_with_its_own_format():
    parsed = parse_text(MIXED)
    assert parsed.formats == {"vllm": 2, "python-traceback": 4, "faulthandler": 6, "compute-sanitizer": 7,
                              "nccl": 1, "kernel": 1, "torchrun-summary": 15}
    assert parsed.unparsed_lines == 0 and not parsed.problems and accounted(parsed)
    by_kind: dict = {}
    for e in parsed.events:
        by_kind.setdefault(e.kind, []).append(e)

    (tb,) = [e for e in by_kind[Kind.CUDA_ERROR] if e.line == 3]
    assert tb.rank == 1 and tb.attrs["exception_type"] == "RuntimeError"
    assert tb.attrs["cuda_error"].name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    (nccl,) = [e for e in by_kind[Kind.CUDA_ERROR] if e.line == 20]
    assert nccl.pid == 2412 and nccl.attrs["error_form"] == "nccl-warn"

    (worker,) = by_kind[Kind.WORKER_EXCEPTION]
    assert (worker.pid, worker.process, worker.line) == (3311, "Worker_TP1", 2)
    (fatal,) = by_kind[Kind.FATAL_SIGNAL]
    assert fatal.line == 7 and fatal.attrs["signal_name"] == "SIGSEGV"
    assert fatal.attrs["crash_frame"].function == "misbehave"
    (finding, summary) = by_kind[Kind.SANITIZER]
    assert finding.line == 14 and finding.attrs["kernel"] == "oob_kernel"
    assert summary.attrs["report"] == "summary"
    (xid,) = by_kind[Kind.XID]
    assert xid.attrs["xid"] == 13 and xid.pid == 3311 and xid.line == 21
    (launcher,) = by_kind[Kind.LAUNCHER_SUMMARY]
    assert launcher.line == 22 and launcher.attrs["root_cause"]["rank"] == 1
    assert launcher.attrs["root_cause"]["exit_code"] == 1


def test_parts_of_a_mixed_console_do_not_depend_on_their_order():
    # the same parts, reversed: each is still read with its own format
    parts = MIXED.split("Fatal Python error")
    swapped = "Fatal Python error" + parts[1] + parts[0]
    parsed = parse_text(swapped)
    assert parsed.formats == {"vllm": 2, "python-traceback": 4, "faulthandler": 6, "compute-sanitizer": 7,
                              "nccl": 1, "kernel": 1, "torchrun-summary": 15}
    assert parsed.unparsed_lines == 0


# --- look-alikes ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["=" * 9, "=" * 60, "==============NVSMI LOG==============", "==========  x"])
def test_lines_of_equal_signs_are_not_compute_sanitizer_lines(line):
    assert not is_sanitizer_line(line, seen=False)


def test_bare_marker_counts_only_once_a_report_is_under_way():
    assert is_sanitizer_line("========= ERROR SUMMARY: 0 errors", seen=False)
    assert not is_sanitizer_line("=========", seen=False)
    assert is_sanitizer_line("=========", seen=True)
    assert not is_sanitizer_line("=" * 60, seen=True)


def test_a_separator_of_equal_signs_is_noise_not_a_sanitizer_report():
    text = "=" * 60 + "\nstarting the benchmark\n" + "=" * 60 + "\n"
    parsed = parse_text(text)
    assert "compute-sanitizer" not in parsed.formats
    assert not [e for e in parsed.events if e.kind == Kind.SANITIZER]
    assert not parsed.problems                        # no "sanitizer output cut short"


NVSMI = """\

==============NVSMI LOG==============

Timestamp                                 : Tue Sep 30 14:13:20 2025
Driver Version                            : 570.133.20
CUDA Version                              : 12.8

Attached GPUs                             : 1
GPU 00000000:1B:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
"""


def test_nvidia_smi_q_output_is_not_a_sanitizer_log():
    parsed = parse_text(NVSMI, "nvidia-smi-q.txt")
    assert "compute-sanitizer" not in parsed.formats
    assert parsed.kind != "compute-sanitizer"
    assert not [e for e in parsed.events if e.kind in (Kind.SANITIZER, Kind.CUDA_ERROR)]
    assert not parsed.problems


def test_recorded_nvidia_smi_q_is_not_a_sanitizer_log():
    path = DATA / "realworld/wrap_bundle_nvsmi_collectenv/nvidia-smi-q.txt"
    parsed = parse_text(path.read_bytes(), path.name)
    assert "compute-sanitizer" not in parsed.formats
    assert not [e for e in parsed.events if e.kind == Kind.SANITIZER]


# --- forced kinds ------------------------------------------------------------------------

def test_forceable_covers_every_format_and_each_has_a_reader():
    forceable = registry.forceable()
    assert set(forceable) == {f.name for f in FORMATS}
    for name, reader_kind in forceable.items():
        f = next(f for f in FORMATS if f.name == name)
        assert reader_kind == ("text" if f.kind != "binary" else name)
        assert registry.reader_for(reader_kind) is not None, name


def test_forcing_a_text_format_reads_the_file_as_text_and_says_so(tmp_path):
    path = tmp_path / "paste.bin"
    path.write_text("ERROR 11-04 18:02:56 [v1/executor/multiproc_executor.py:597] WorkerProc failed to start.\n")
    case = analyze(str(path), kind="vllm")
    (source,) = case.sources
    assert source.kind == "vllm-log"
    assert any("read as vllm (--kind)" in p for p in source.problems)
    assert [e.kind for e in case.events] == [Kind.WORKER_EXCEPTION]


def test_forcing_the_sanitizer_xml_reader_on_a_renamed_xml(tmp_path):
    path = tmp_path / "report.txt"
    shutil.copy(DATA / "gpu/misaligned_address/compute-sanitizer_memcheck.xml", path)
    case = analyze(str(path), kind="compute-sanitizer-xml")
    (source,) = case.sources
    assert source.kind == "compute-sanitizer-xml"
    findings = [e for e in case.events if e.kind == Kind.SANITIZER and e.attrs.get("report") == "access"]
    assert findings and findings[0].attrs["kernel"] == "pack_kv_header_kernel"


def test_forcing_a_binary_reader_on_text_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "console.log"
    path.write_text("INFO 06-14 08:01:02 api_server.py:339] vLLM API server version 0.6.0\n")
    with pytest.raises(NothingToAnalyse, match="read as compute-sanitizer-xml"):
        analyze(str(path), kind="compute-sanitizer-xml")


def test_stdin_is_classified_by_content_not_forced():
    data = b"========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    case = analyze("-", stdin=io.BytesIO(data))
    (source,) = case.sources
    assert source.kind == "compute-sanitizer"
    assert [e.attrs["report"] for e in case.events] == ["summary"]
