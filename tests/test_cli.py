"""The command line: exit codes, formats, plain 80-column output, bad inputs."""

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (REPO / "samples").iterdir() if p.is_dir())


def test_every_sample_analyses_with_exit_0_and_fits_80_columns():
    assert SAMPLES, "samples/ must hold at least one bundle"
    runner = CliRunner()
    for sample in SAMPLES:
        result = runner.invoke(main, ["analyze", str(sample)])
        assert result.exit_code == 0, result.output
        assert "forensics verdict" in result.output
        assert max(len(line) for line in result.output.splitlines()) <= 80
        assert "\x1b[" not in result.output            # not a TTY: plain text


def test_json_format_is_json():
    result = CliRunner().invoke(main, ["analyze", str(SAMPLES[0]), "--format", "json"])
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["schema"] == "forensics.report/1" and report["sources"]


def test_missing_path_is_a_usage_error_without_traceback():
    result = CliRunner().invoke(main, ["analyze", "/nonexistent/dir"])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "Traceback" not in result.output


def test_stdin(tmp_path):
    log = (SAMPLES[0] / "server.log").read_bytes() if (SAMPLES[0] / "server.log").exists() else b""
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", "-", "--format", "json"],
                          input=log, capture_output=True, cwd=REPO, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["sources"][0]["path"] == "<stdin>"


def test_bad_files_are_listed_not_fatal(tmp_path):
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "bad_utf8.log").write_bytes(b"\xff\xfe INFO 12-02 10:00:00 [a.py:1] x\n" * 3)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "fake_core").write_bytes(b"\x7fELF")
    result = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    problems = {s["path"]: s.get("problems", []) for s in report["sources"]}
    assert any("binary" in p for p in problems["junk.bin"])
    assert any("invalid UTF-8" in p for p in problems["bad_utf8.log"])
    assert any("truncated ELF" in p for p in problems["fake_core"])


def test_user_facing_failures_are_one_clear_sentence(tmp_path):
    runner = CliRunner()
    bad = tmp_path / "kb"
    bad.mkdir()
    (bad / "broken.toml").write_text("id = 'x'\n[match\n")
    for args, needle in (
        (["analyze", str(SAMPLES[0]), "--kb", str(bad)], "not valid TOML"),
        (["analyze", str(SAMPLES[0]), "--kb", str(tmp_path / "nope")], "not a directory"),
        (["analyze", str(SAMPLES[0]), "--kind", "bogus"], "is not one of"),
        (["analyze", "/does/not/exist"], "does not exist"),
        (["compare", "/does/not/exist"], "does not exist"),
    ):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "Traceback" not in result.output


def test_the_installed_package_runs_outside_the_checkout(tmp_path):
    """README's main command, from another folder: catches data files missing from the
    installed package (the tests themselves import the source tree)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    sample = REPO / "samples" / "gpu_tp4_oob_del_cumemfree"
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(sample), "--format", "json"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    assert report["verdict"]["error"]["code"] == 700
    assert report["verdict"]["origin"]["kernel"] == "oneshot_allreduce_flag_kernel"
