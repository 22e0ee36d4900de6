"""The command line (forensics/cli.py): every format on the samples, -o, stdin, exit
codes, the timeline/compare/rules/formats commands, and errors that are one clean
sentence, never a Python traceback."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import forensics
from forensics.cli import EXIT_FAILURE_FOUND, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, main
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (REPO / "samples").iterdir() if p.is_dir())
GPU_SAMPLE = REPO / "samples" / "gpu_tp4_oob_del_cumemfree"
CPU_SAMPLE = REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk"
FORMATS = ("terminal", "json", "markdown", "html")
ANSI = re.compile(r"\x1b\[")
HEALTHY_LOG = ("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.32.0\n"
               "INFO 12-02 10:00:01 [api_server.py:2] Started server process\n")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    """The report's width and colours follow $COLUMNS and $NO_COLOR: pin them."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def _stderr(result) -> str:
    try:
        return result.stderr
    except ValueError:  # click < 8.2 mixes stderr into output
        return result.output


def _assert_one_clean_sentence(result, needle: str) -> None:
    """A usage error: exit 2, the message on one line, no traceback, no stray exception."""
    text = result.output + (_stderr(result) if _stderr(result) not in result.output else "")
    assert result.exit_code == EXIT_USAGE, (result.exit_code, text)
    assert isinstance(result.exception, SystemExit) or result.exception is None, result.exception
    assert "Traceback" not in text
    assert needle in text, text
    message = [line for line in text.splitlines() if needle in line]
    assert len(message) == 1, text


def _embedded_report(page: str) -> dict:
    match = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S)
    assert match, "the page embeds its report data"
    return json.loads(match.group(1))


def _json(*args) -> dict:
    result = run("analyze", *args, "--format", "json")
    assert result.exit_code == EXIT_OK, result.output
    return json.loads(result.output)


# --- analyze: every sample in every format ----------------------------------------------------

def test_samples_are_present():
    assert [p.name for p in SAMPLES] == ["gpu_tp4_oob_del_cumemfree", "vllm_cpu_tp2_fault_2nd_chunk"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_in_every_format_to_a_file(sample, fmt, tmp_path):
    out = tmp_path / f"report.{fmt}"
    result = run("analyze", sample, "--format", fmt, "-o", out)
    assert result.exit_code == EXIT_OK, result.output
    assert result.output == ""                                # the report went to the file only
    text = out.read_text(encoding="utf-8")
    headline = forensics.analyze(sample).verdict.headline
    assert headline.startswith("CUDA_ERROR_ILLEGAL_ADDRESS (700)")
    if fmt == "terminal":
        assert text.startswith("forensics verdict\n")
        assert not ANSI.search(text)                          # not a terminal: plain text
        assert max(len(line) for line in text.splitlines()) <= 80
        assert " ".join(headline.split()) in " ".join(text.split())
        for section in ("Processes", "Timeline around the failure", "Inputs"):
            assert section in text
    elif fmt == "json":
        report = json.loads(text)
        assert report["schema"] == "forensics.report/1"
        assert report["verdict"]["headline"] == report["headline"] == headline
        assert report["redaction"] == {"enabled": False, "counts": {}}     # json: not redacted by default
    elif fmt == "markdown":
        assert text.startswith("**Suggested title:** `[Bug]: CUDA_ERROR_ILLEGAL_ADDRESS (700)")
        assert "_Redacted before sharing:" in text                         # markdown: redacted by default
        assert "### 🐛 Describe the bug" in text
    else:
        assert text.lower().startswith("<!doctype html>") and text.rstrip().endswith("</html>")
        data = _embedded_report(text)
        assert data["verdict"]["headline"] == headline
        assert data["redaction"]["enabled"] is True                        # html: redacted by default


@pytest.mark.parametrize("fmt", FORMATS)
def test_stdout_and_output_file_carry_the_same_report(fmt, tmp_path):
    out = tmp_path / "report"
    to_file = run("analyze", CPU_SAMPLE, "--format", fmt, "-o", out)
    # a file has no first screen: the terminal format writes every section to it, as --full does
    to_stdout = run("analyze", CPU_SAMPLE, "--format", fmt, *(["--full"] if fmt == "terminal" else []))
    assert to_file.exit_code == to_stdout.exit_code == EXIT_OK
    assert out.read_text(encoding="utf-8") == to_stdout.output


def test_the_json_report_is_the_python_apis_report():
    cli = _json(CPU_SAMPLE)
    api = json.loads(forensics.analyze(CPU_SAMPLE).report("json"))
    assert cli == api


def test_the_verdicts_of_the_samples():
    gpu = _json(GPU_SAMPLE)["verdict"]
    assert gpu["error"]["code"] == 700 and gpu["error"]["sticky"] is True
    assert gpu["origin"] is None                            # only an Xid: the kernel is not named
    assert gpu["faulting_process"]["rank"] == 2
    assert gpu["first_failure"]["rank"] == 2
    assert gpu["collateral"] == [0, 1, 3]
    assert {(s["rank"], s["api"], s["function"]) for s in gpu["surfaces"]} >= {(2, "cuMemFree", "__del__")}
    cpu = _json(CPU_SAMPLE)["verdict"]
    assert cpu["error"]["code"] == 700
    assert cpu["origin"] is None and cpu["faulting_process"] is None
    assert cpu["first_failure"]["rank"] == 0
    assert cpu["collateral"] == [1]


def test_redaction_flags_override_the_formats_default():
    assert _json(GPU_SAMPLE, "--redact")["redaction"]["enabled"] is True
    md = run("analyze", GPU_SAMPLE, "--format", "markdown", "--no-redact")
    assert md.exit_code == EXIT_OK and "_Redaction: off._" in md.output
    assert "_Redacted before sharing" not in md.output


def test_quiet_prints_the_verdict_only_and_explain_adds_the_rules():
    full = run("analyze", GPU_SAMPLE)
    quiet = run("analyze", GPU_SAMPLE, "-q")
    explained = run("analyze", GPU_SAMPLE, "--explain")
    assert full.exit_code == quiet.exit_code == explained.exit_code == EXIT_OK
    assert quiet.output.startswith("forensics verdict")
    assert "Processes" in full.output and "Processes" not in quiet.output
    assert len(quiet.output) < len(full.output) / 2
    assert "How the rules decided" in explained.output and "How the rules decided" not in full.output


def test_title_file_takes_the_title_out_of_the_body(tmp_path):
    title, body = tmp_path / "title.txt", tmp_path / "body.md"
    result = run("analyze", GPU_SAMPLE, "--format", "markdown", "-o", body, "--title-file", title)
    assert result.exit_code == EXIT_OK, result.output
    written = title.read_text(encoding="utf-8")
    assert written.startswith("[Bug]: CUDA_ERROR_ILLEGAL_ADDRESS (700)") and written.count("\n") == 1
    text = body.read_text(encoding="utf-8")
    assert "Suggested title" not in text
    assert text.startswith("> **CUDA")                       # the headline comes first


def test_timeline_limit_caps_the_json_timeline():
    full = _json(GPU_SAMPLE, "--timeline-limit", "0")["timeline"]
    capped = _json(GPU_SAMPLE, "--timeline-limit", "3")["timeline"]
    assert len(full) > 3 and len(capped) == 3
    assert all(entry in full for entry in capped)


# --- stdin ---------------------------------------------------------------------------------

def test_stdin_gives_the_verdict_of_the_file():
    log = (CPU_SAMPLE / "server.log").read_bytes()
    result = run("analyze", "-", "--format", "json", input=log)
    assert result.exit_code == EXIT_OK, result.output
    report = json.loads(result.output)
    assert [s["path"] for s in report["sources"]] == ["<stdin>"]
    assert report["sources"][0]["lines"] == log.count(b"\n")
    # the same verdict as the file's, evidence locations naming <stdin> instead of server.log
    from_stdin = json.dumps(report["verdict"]).replace("<stdin>:", "server.log:")
    assert "<stdin>" in json.dumps(report["verdict"])
    assert from_stdin == json.dumps(_json(CPU_SAMPLE)["verdict"])


def test_stdin_through_a_real_pipe():
    """``kubectl logs POD | forensics analyze -``: a real process with a real pipe."""
    log = (CPU_SAMPLE / "server.log").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", "-", "--format", "json"], input=log,
                          capture_output=True, cwd=REPO, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["sources"][0]["path"] == "<stdin>"
    assert report["verdict"]["error"]["code"] == 700 and report["verdict"]["first_failure"]["rank"] == 0
    assert b"paste it" not in proc.stderr                   # the terminal hint is for a terminal only


def test_empty_stdin_is_nothing_to_analyse():
    result = run("analyze", "-", input=b"")
    assert result.exit_code == EXIT_USAGE
    assert "nothing to analyse" in _stderr(result) and "empty" in _stderr(result)


# --- exit codes ----------------------------------------------------------------------------

def test_exit_codes_are_the_documented_ones():
    assert (EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_FAILURE_FOUND) == (0, 1, 2, 3)


def test_a_failure_exits_0_unless_exit_code_is_asked_for(tmp_path):
    assert run("analyze", GPU_SAMPLE, "-q").exit_code == EXIT_OK
    assert run("analyze", GPU_SAMPLE, "-q", "--exit-code").exit_code == EXIT_FAILURE_FOUND
    healthy = tmp_path / "healthy.log"
    healthy.write_text(HEALTHY_LOG)
    result = run("analyze", healthy, "-q", "--exit-code")
    assert result.exit_code == EXIT_OK, result.output
    assert "No failure found" in result.output


def test_exit_code_3_still_writes_the_report(tmp_path):
    out = tmp_path / "r.json"
    result = run("analyze", GPU_SAMPLE, "--format", "json", "-o", out, "--exit-code")
    assert result.exit_code == EXIT_FAILURE_FOUND
    assert json.loads(out.read_text())["verdict"]["error"]["code"] == 700


def test_missing_path_exits_2(tmp_path):
    result = run("analyze", tmp_path / "nope")
    assert result.exit_code == EXIT_USAGE
    assert "no such file or directory" in _stderr(result)
    assert "Traceback" not in result.output + _stderr(result)


def test_empty_folder_exits_2(tmp_path):
    result = run("analyze", tmp_path)
    assert result.exit_code == EXIT_USAGE
    assert "no files found" in _stderr(result)


def test_only_binaries_exits_2(tmp_path):
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "more.bin").write_bytes((DATA / "hostile" / "junk.bin").read_bytes())
    result = run("analyze", tmp_path)
    assert result.exit_code == EXIT_USAGE
    assert "binary data of unknown format" in _stderr(result)


def test_only_empty_files_exits_2(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    result = run("analyze", tmp_path)
    assert result.exit_code == EXIT_USAGE
    assert "every input is empty" in _stderr(result)


def test_bad_files_are_listed_not_fatal(tmp_path):
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "bad_utf8.log").write_bytes(b"\xff\xfe INFO 12-02 10:00:00 [a.py:1] x\n" * 3)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "fake_core").write_bytes(b"\x7fELF")
    (tmp_path / "server.log").write_bytes((CPU_SAMPLE / "server.log").read_bytes())
    report = _json(tmp_path)
    problems = {s["path"]: s.get("problems", []) for s in report["sources"]}
    assert any("binary" in p for p in problems["junk.bin"])
    assert any("invalid UTF-8" in p for p in problems["bad_utf8.log"])
    assert any("truncated ELF" in p for p in problems["fake_core"])
    assert report["inputs"]["files_seen"] == 5 and report["inputs"]["empty"] == 1
    assert report["verdict"]["error"]["code"] == 700      # the readable input is still analysed


def test_an_internal_error_is_one_sentence_and_exit_1(monkeypatch):
    import forensics.case

    def boom(*args, **kwargs):
        raise RuntimeError("boom in the pipeline")

    monkeypatch.setattr(forensics.case, "analyze", boom)
    result = run("analyze", GPU_SAMPLE)
    assert result.exit_code == EXIT_INTERNAL
    assert isinstance(result.exception, SystemExit)
    assert "internal error: RuntimeError: boom in the pipeline" in _stderr(result)
    assert "--debug" in _stderr(result)
    debug = run("analyze", GPU_SAMPLE, "--debug")
    assert isinstance(debug.exception, RuntimeError)       # --debug shows the real exception


def test_an_internal_error_while_rendering_is_one_sentence_and_exit_1(monkeypatch):
    import forensics.report.json as json_report

    def boom(*args, **kwargs):
        raise RuntimeError("boom in the renderer")

    monkeypatch.setattr(json_report, "render", boom)
    result = run("analyze", GPU_SAMPLE, "--format", "json")
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == EXIT_INTERNAL
    assert "internal error" in _stderr(result)


# --- usage errors: one clean sentence -------------------------------------------------------

def test_usage_errors_are_one_clean_sentence(tmp_path):
    bad = tmp_path / "kb"
    bad.mkdir()
    (bad / "broken.toml").write_text("id = 'x'\n[match\n")
    log = CPU_SAMPLE / "server.log"
    cases = [
        (["analyze", CPU_SAMPLE, "--kb", bad], "not valid TOML"),
        (["analyze", CPU_SAMPLE, "--kb", tmp_path / "nope"], "not a directory"),
        (["analyze", CPU_SAMPLE, "--kind", "bogus"], "is not a format"),
        (["analyze", CPU_SAMPLE, "--format", "pdf"], "is not one of"),
        (["analyze", CPU_SAMPLE, "-o", tmp_path / "no" / "dir.md"], "does not exist"),
        (["analyze", log, "-o", log], "is one of the inputs"),
        (["analyze", CPU_SAMPLE, "-o", tmp_path], "is a directory"),
        (["analyze", CPU_SAMPLE, "-o", "/dev/zero"], "not a regular file"),
        (["analyze", CPU_SAMPLE, "--title-file", tmp_path / "t.txt"], "--title-file is for --format markdown"),
        (["analyze", CPU_SAMPLE, "--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --engine dask"),
        (["compare", tmp_path / "missing"], "does not exist"),
        (["compare", CPU_SAMPLE, "-o", tmp_path / "no" / "dir.md"], "does not exist"),
        (["timeline", CPU_SAMPLE, "--kind", "bogus"], "not an event kind"),
        (["timeline", CPU_SAMPLE, "--since", "yesterday-ish"], "is not a time"),
    ]
    for args, needle in cases:
        _assert_one_clean_sentence(run(*args), needle)


def test_output_is_checked_before_the_analysis(tmp_path, monkeypatch):
    import forensics.case
    called = []
    monkeypatch.setattr(forensics.case, "analyze", lambda *a, **k: called.append(a))
    result = run("analyze", CPU_SAMPLE, "-o", tmp_path / "missing" / "r.json")
    assert result.exit_code == EXIT_USAGE and not called


def test_a_kb_folder_adds_known_issues(tmp_path):
    """--kb with a valid entry is read and matched (the errors above only show that
    broken entries are refused)."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "plugin-forward.toml").write_text(
        'id = "test-plugin-forward-ima"\n'
        'title = "an illegal address raised from a plugin forward"\n'
        'status = "local"\n'
        'references = ["https://example.invalid/issue/1"]\n'
        'workaround = "disable the plugin"\n'
        'does_not_prove = "a test entry"\n'
        '[match]\n'
        'errors = ["CUDA_ERROR_ILLEGAL_ADDRESS"]\n'
        '[[match.any]]\n'
        'why = "surfaced in forward"\n'
        "surface_function = '^forward$'\n")
    without = _json(CPU_SAMPLE)
    with_kb = _json(CPU_SAMPLE, "--kb", kb)
    assert "test-plugin-forward-ima" not in [k["id"] for k in without["known_issues"]]
    assert "test-plugin-forward-ima" in [k["id"] for k in with_kb["known_issues"]]


def test_version_and_help():
    version = run("--version")
    assert version.exit_code == EXIT_OK and forensics.__version__ in version.output
    helped = run("--help")
    for command in ("analyze", "compare", "timeline", "rules", "formats", "completion"):
        assert command in helped.output


def test_one_version_number_in_the_package_metadata_and_the_cli():
    """pyproject reads the version from forensics.__version__; an installed copy's
    metadata says the same (a checkout run without install has no metadata to check)."""
    from importlib import metadata
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'attr = "forensics.__version__"' in text
    try:
        installed = metadata.version("forensics")
    except metadata.PackageNotFoundError:
        pytest.skip("forensics is not installed")
    assert installed == forensics.__version__


# --- archives --------------------------------------------------------------------------------

def test_an_archive_is_read_like_its_folder(tmp_path):
    bundle = tmp_path / "bundle.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for path in sorted(GPU_SAMPLE.iterdir()):
            tar.add(path, arcname=f"crash/{path.name}")
    report = _json(bundle)
    assert report["verdict"]["error"]["code"] == 700
    assert report["verdict"]["first_failure"]["rank"] == 2
    assert report["verdict"]["collateral"] == [0, 1, 3]


# --- the advice points at commands that exist -------------------------------------------------

def _suggested_forensics_commands(report: dict) -> set[str]:
    commands = set()
    for step in report["next_actions"]:
        if step["command"]:
            words = shlex.split(step["command"].replace("<", "").replace(">", ""))
            for i, word in enumerate(words[:-1]):
                if word == "forensics":
                    commands.add(words[i + 1])
    return commands


def test_next_steps_commands_are_shell_commands():
    report = _json(GPU_SAMPLE)
    assert report["next_actions"], "a crash without device evidence has next steps"
    assert report["next_actions"][0]["command"].startswith("compute-sanitizer --tool memcheck")
    for step in report["next_actions"]:
        if step["command"]:
            shlex.split(step["command"].replace("<", "").replace(">", ""))   # parses as shell words


def test_next_steps_only_suggest_forensics_commands_that_exist():
    suggested = _suggested_forensics_commands(_json(GPU_SAMPLE))
    assert suggested, "the report suggests at least one forensics command"
    for command in suggested:
        result = run(command, "--help")
        assert result.exit_code == EXIT_OK, f"forensics {command}: {result.output}"


# --- timeline --------------------------------------------------------------------------------

def _timeline_csv(*args) -> list[dict]:
    result = run("timeline", GPU_SAMPLE, *args, "--csv", "-")
    assert result.exit_code == EXIT_OK, result.output
    return list(csv.DictReader(io.StringIO(result.output)))


def test_timeline_csv_is_every_event():
    rows = _timeline_csv()
    assert len(rows) == len(forensics.analyze(GPU_SAMPLE).events)
    assert {"time", "rank", "pid", "kind", "severity", "message", "source", "line"} <= set(rows[0])


def test_timeline_filters_by_rank_and_severity():
    rows = _timeline_csv("--rank", "2", "--severity", "error")
    assert rows
    assert {r["rank"] for r in rows} == {"2"}
    assert {r["severity"] for r in rows} <= {"ERROR", "CRITICAL"}
    assert any(r["kind"] == "cuda-error" for r in rows)
    both = _timeline_csv("--rank", "0", "--rank", "2")
    assert {r["rank"] for r in both} == {"0", "2"}


def test_timeline_filters_by_kind_and_time():
    rows = _timeline_csv("--kind", "cuda-error", "--kind", "xid")
    assert rows and {r["kind"] for r in rows} == {"cuda-error", "xid"}
    timed = [r for r in _timeline_csv() if r["time"]]
    middle = sorted(r["time"] for r in timed)[len(timed) // 2]
    since = _timeline_csv("--since", middle.replace(" ", "T"))
    until = _timeline_csv("--until", middle.replace(" ", "T"))
    assert since and until
    assert all(r["time"] >= middle for r in since) and all(r["time"] <= middle for r in until if r["time"])


def test_timeline_jsonl_matches_the_csv():
    result = run("timeline", GPU_SAMPLE, "--rank", "2", "--jsonl", "-")
    assert result.exit_code == EXIT_OK
    records = [json.loads(line) for line in result.output.splitlines()]
    assert records and {r["rank"] for r in records} == {2}
    assert len(records) == len(_timeline_csv("--rank", "2"))


def test_timeline_exports_to_files(tmp_path):
    csv_path, jsonl_path = tmp_path / "t.csv", tmp_path / "t.jsonl"
    result = run("timeline", GPU_SAMPLE, "--severity", "WARNING", "--csv", csv_path, "--jsonl", jsonl_path)
    assert result.exit_code == EXIT_OK
    rows = list(csv.DictReader(csv_path.open()))
    records = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert rows and len(rows) == len(records)
    assert f"{len(rows)} events written." in _stderr(result)
    assert {r["severity"] for r in rows} <= {"WARNING", "ERROR", "CRITICAL"}


def test_timeline_in_the_terminal_counts_and_limits():
    total = len(_timeline_csv("--rank", "2"))
    result = run("timeline", GPU_SAMPLE, "--rank", "2")
    assert result.exit_code == EXIT_OK
    assert f"Timeline ({total} events)" in result.output
    limited = run("timeline", GPU_SAMPLE, "--limit", "2")
    assert re.search(r"\.\.\. \d+ more; --limit 0 shows all", limited.output)
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_timeline_of_nothing_exits_2(tmp_path):
    result = run("timeline", tmp_path / "nope")
    assert result.exit_code == EXIT_USAGE and "Traceback" not in result.output


# --- compare, rules, formats ------------------------------------------------------------------

def test_compare_on_the_samples():
    result = run("compare", GPU_SAMPLE, CPU_SAMPLE, "--format", "json")
    assert result.exit_code == EXIT_OK, result.output
    data = json.loads(result.output)
    assert data["schema"] == "forensics.compare/1"
    assert [r["name"] for r in data["runs"]] == [str(GPU_SAMPLE), str(CPU_SAMPLE)]
    assert len(data["groups"]) == 2                        # two different crashes
    assert data["environment_differences"]["vllm"] == ["0.1.0", "0.32.0"]


def test_rules_lists_the_pipeline_in_order():
    from forensics.rules import PIPELINE
    result = run("rules")
    assert result.exit_code == EXIT_OK
    numbered = re.findall(r"^\s*(\d+)\. (\S+)$", result.output, re.M)
    assert [int(n) for n, _ in numbered] == list(range(1, len(PIPELINE) + 1))
    assert [name for _, name in numbered] == [rule.name for rule in PIPELINE]
    assert result.output.count("    reads:  ") == len(PIPELINE)
    assert result.output.count("    writes: ") == len(PIPELINE)
    headline = next(rule for rule in PIPELINE if rule.name == "headline")
    assert f"writes: {', '.join(headline.writes)}" in result.output


def test_formats_lists_every_registered_format():
    from forensics.parsers.registry import formats
    result = run("formats")
    assert result.exit_code == EXIT_OK
    listed = {line.split()[0] for line in result.output.splitlines() if line.strip()}
    assert {f.name for f in formats()} == listed


def test_completion_script():
    result = run("completion", "bash")
    assert result.exit_code == EXIT_OK and "_FORENSICS_COMPLETE" in result.output


# --- the installed package ----------------------------------------------------------------------

def test_the_installed_package_runs_outside_the_checkout(tmp_path):
    """README's main command, from another folder: catches data files (grammars,
    catalogues, the schema) missing from the installed package."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(GPU_SAMPLE), "--format", "json"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert proc.returncode == EXIT_OK, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["verdict"]["error"]["code"] == 700
    assert report["verdict"]["first_failure"]["rank"] == 2
    assert forensics.schema()["$id"] == report["schema"]


def test_verbose_is_the_whole_report_and_explain_the_full_derivation():
    verbose = run("analyze", GPU_SAMPLE, "-v").output
    explained = run("analyze", GPU_SAMPLE, "--explain").output
    assert "How the rules decided" in verbose and "Incident checklist" in verbose
    assert "(the stories)" not in verbose
    assert "How the rules decided" in explained and "(the stories)" in explained
