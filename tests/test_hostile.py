"""Hostile and degraded inputs: each gets its clear problem line, never a traceback, a
hang or a memory blow-up, and the analysis of everything else goes on."""

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.case import analyze
from forensics.knowledge import tomllib
from tests.conftest import DATA

HOSTILE = DATA / "hostile"
EXPECTED = tomllib.loads((HOSTILE / "expected.toml").read_text())
GOOD = DATA / "gpu/tp4_oob_write_del_cumemfree/server.log"


def _problems(report):
    return [p for s in report["sources"] for p in s.get("problems", [])]


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=str)
def test_each_hostile_file_yields_its_problem_line(name, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.symlink(HOSTILE / name, bundle / name)        # beside a good log: it must still be analysed
    os.symlink(GOOD, bundle / "server.log")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(bundle), "--format", "json"],
                          capture_output=True, timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert any(EXPECTED[name] in p for p in _problems(report)), _problems(report)
    assert report["verdict"]["error"]["code"] == 700           # the good log still analysed
    assert elapsed < 10, elapsed
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert peak_mb < 500, peak_mb


def test_symlink_loop_and_unreadable_file(tmp_path):
    (tmp_path / "a").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "a" / "loop")
    os.symlink(tmp_path / "nowhere", tmp_path / "broken.log")
    secret = tmp_path / "secret.log"
    secret.write_text("x\n")
    secret.chmod(0)
    case = analyze(str(tmp_path))
    problems = [p for s in case.sources for p in s.problems]
    assert any("broken symbolic link" in p for p in problems)
    if os.geteuid() != 0:                              # root reads anything
        assert any("permission denied" in p for p in problems)


def test_a_folder_of_100000_small_files(tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    line = b"(Worker_TP0 pid=11) INFO 12-02 10:00:00 [a.py:1] hello\n"
    for i in range(100_000):
        (folder / f"f{i:06d}.log").write_bytes(line)
    started = time.monotonic()
    case = analyze(str(folder))
    assert time.monotonic() - started < 30
    assert any("more than 10,000 input files" in p for s in case.sources for p in s.problems)


def test_nothing_is_written_outside_the_output(tmp_path):
    before = set(Path("/tmp").iterdir()) if Path("/tmp").exists() else set()
    out = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "forensics", "analyze", str(HOSTILE), "--format", "json",
                    "-o", str(out)], check=True, capture_output=True, timeout=120)
    assert json.loads(out.read_text())["sources"]
    after = set(Path("/tmp").iterdir()) if Path("/tmp").exists() else set()
    assert not any(p.name in ("evil.log", "outside.log", "absolute.log") for p in after - before)
    assert not Path("/etc/cron.d/evil.log").exists()


def test_a_zip_inside_a_tar_is_read_and_capped(tmp_path, monkeypatch):
    import io
    import tarfile
    import zipfile

    from forensics import archives
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("server.log", GOOD.read_text())
    with tarfile.open(tmp_path / "bundle.tar", "w") as tar:
        info = tarfile.TarInfo("inner.zip")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    case = analyze(str(tmp_path))
    assert [s.relpath for s in case.sources] == ["bundle.tar!inner.zip!server.log"]
    assert case.context.error.code == 700
    monkeypatch.setattr(archives, "MAX_NESTED_ZIP_BYTES", 100)      # held in memory: capped
    case = analyze(str(tmp_path))
    assert any("zip inside an archive larger than" in p for s in case.sources for p in s.problems)
