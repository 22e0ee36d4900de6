"""forensics collect as root on a host whose log folder the server's user can write
(issue 20): secrets out of the bundle and counted in the manifest, no link followed even
when swapped in while collect runs, each log read once, other users' cores left alone,
a bundle complete or absent, names that cannot forge manifest lines."""

from __future__ import annotations

import os
import tarfile
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import collect as collect_module
from forensics.cli import main
from forensics.collect import Options, collect
from tests.test_collect import _elf_core, fake_tool, manifest, members

SECRET_ENV = {
    "VLLM_API_KEY": "vk-0123456789abcdef", "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWx",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ",
    "POSTGRES_PASSWORD": "hunter2hunter2", "VLLM_HOST_IP": "10.20.30.40", "MASTER_ADDR": "head-node-3",
    "NCCL_DEBUG": "INFO",
}


@pytest.fixture
def fake_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sh", "cat"):
        target = next((Path(d) / name for d in os.environ["PATH"].split(":") if (Path(d) / name).exists()), None)
        if target is not None:
            (bin_dir / name).symlink_to(target)
    return bin_dir


def _collect(tmp_path, fake_path, logs=(), env_extra=None, **kw):
    out = tmp_path / "bundle.tar.gz"
    env = {"PATH": str(fake_path), "HOME": "/nowhere", **SECRET_ENV, **(env_extra or {})}
    steps = collect(Options(logs=tuple(map(str, logs)), timeout=5.0, python=str(fake_path / "python"), **kw),
                    str(out), env=env)
    return out, steps


def _all_text(bundle: Path) -> str:
    return "\n".join(data.decode("utf-8", "replace") for data in members(bundle).values())


def test_secret_variables_and_collect_env_are_redacted_and_counted(tmp_path, fake_path):
    # a python that "has torch" and prints a collect_env report with the variables in it
    report = "\\n".join(["Collecting environment information...", "PyTorch version: 2.5.1",
                         *(f"{k}={v}" for k, v in SECRET_ENV.items())])
    fake_tool(fake_path, "python", f'case "$*" in *find_spec*) exit 0;; *collect_env*) printf "{report}\\n";; '
                                   '*) exit 1;; esac')
    out, _ = _collect(tmp_path, fake_path)
    text = _all_text(out)
    for name, value in SECRET_ENV.items():
        if name != "NCCL_DEBUG":
            assert value not in text, name
    assert "NCCL_DEBUG=INFO" in text
    head = members(out)["MANIFEST.txt"].decode()
    redacted = next(line for line in head.splitlines() if line.startswith("redacted: "))
    assert redacted != "redacted: yes" and "secret-assignment" in redacted and "ipv4" in redacted


def test_key_bodies_logged_behind_a_prefix_are_redacted(tmp_path, fake_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn"
    (logs / "server.log").write_text("".join(f"2025-01-01 12:00:0{i} INFO deploy: {body[i:]}{'A1b' * i}\n"
                                             for i in range(3)))
    out, _ = _collect(tmp_path, fake_path, logs=[logs])
    assert "b3BlbnNzaC1rZXkt" not in members(out)["logs/logs/server.log"].decode()


def test_no_link_is_followed_even_when_swapped_in_while_collect_runs(tmp_path, fake_path):
    """A racing helper swaps a file and a folder of the log folder for links to a secret
    outside it, as fast as it can, while collect runs again and again (bounded in time)."""
    secret_dir = tmp_path / "etc"
    secret_dir.mkdir()
    (secret_dir / "shadow").write_text("root:TOPSECRETHASH:19000:0:99999:7:::\n")
    logs = tmp_path / "logs"
    (logs / "sub").mkdir(parents=True)
    (logs / "server.log").write_text("INFO ok\n")
    (logs / "sub" / "shadow").write_text("INFO decoy\n")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            for path, real, target in ((logs / "sub", None, secret_dir), (logs / "server.log", "INFO ok\n",
                                                                          secret_dir / "shadow")):
                try:
                    tmp = path.with_name(path.name + ".swap")
                    tmp.symlink_to(target)
                    os.replace(tmp, path)                 # now a link
                    os.unlink(path)
                    if real is None:
                        path.mkdir()
                        (path / "shadow").write_text("INFO decoy\n")
                    else:
                        path.write_text(real)
                except OSError:
                    pass

    racer = threading.Thread(target=swap, daemon=True)
    racer.start()
    try:
        deadline, runs = time.monotonic() + 4.0, 0
        while time.monotonic() < deadline or runs < 3:
            out, _ = _collect(tmp_path, fake_path, logs=[logs])
            assert "TOPSECRETHASH" not in _all_text(out)
            runs += 1
    finally:
        stop.set()
        racer.join(5)
    assert runs >= 3


def test_a_link_given_by_name_is_refused_and_a_fifo_does_not_hang(tmp_path, fake_path):
    (tmp_path / "shadow").write_text("TOPSECRETHASH\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").symlink_to(tmp_path / "shadow")
    os.mkfifo(logs / "pipe.log")
    out, steps = _collect(tmp_path, fake_path, logs=[logs, logs / "server.log"])
    assert "TOPSECRETHASH" not in _all_text(out)
    lines = manifest(out)
    assert "not followed" in lines["log server.log"] and "not a regular file" in lines["log pipe.log"]
    assert any(s.status == "failed" and "server.log" in s.name for s in steps)


def test_a_log_truncated_while_read_gives_a_whole_bundle_that_says_so(tmp_path, fake_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "server.log"
    log.write_text("INFO a line of the log\n" * 20000)
    monkeypatch.setattr(collect_module, "BLOCK", 8192)
    real = collect_module._redacted
    calls = []

    def truncating(redactor, block):                     # logrotate's copytruncate, mid-read
        calls.append(1)
        if len(calls) == 2:
            os.truncate(log, 0)
        return real(redactor, block)

    monkeypatch.setattr(collect_module, "_redacted", truncating)
    out, _ = _collect(tmp_path, fake_path, logs=[logs])
    with tarfile.open(out) as tar:                      # reads back whole: no corrupt member
        data = tar.extractfile("logs/logs/server.log").read()
    assert 0 < len(data) < 20000 * 23 and data.startswith(b"INFO a line of the log\n")
    assert "shrank while read" in manifest(out)["log server.log"]


def test_each_log_is_read_once(tmp_path, fake_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_bytes(b"INFO x\n" * 100000)
    reads = []
    real_read = os.read

    def counting(fd, n):
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(collect_module.os, "read", counting)
    _collect(tmp_path, fake_path, logs=[logs])
    assert sum(reads) == 700000


def test_nul_holes_are_copied_without_running_a_rule(tmp_path, fake_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "server.log", "wb") as fh:
        fh.write(b"INFO before\n")
        fh.truncate(8 << 20)                           # a hole of NULs, as copytruncate leaves
        fh.seek(0, 2)
        fh.write(b"\nINFO after\n")
    out, _ = _collect(tmp_path, fake_path, logs=[logs])
    data = members(out)["logs/logs/server.log"]
    assert data.startswith(b"INFO before\n") and data.endswith(b"INFO after\n") and len(data) == (8 << 20) + 12


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as another user")
def test_only_the_server_users_cores_are_swept(tmp_path, fake_path, monkeypatch):
    server_uid, other_uid = 4242, 4343
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("INFO x\n")
    os.chown(logs / "server.log", server_uid, server_uid)
    sweep = tmp_path / "tmp"
    sweep.mkdir()
    for name, uid in (("core.100", server_uid), ("core.200", other_uid)):
        (sweep / name).write_bytes(_elf_core())
        os.chown(sweep / name, uid, uid)
    monkeypatch.setattr(collect_module, "CORE_DIRS", (str(sweep),))
    out, _ = _collect(tmp_path, fake_path, logs=[logs])
    files = members(out)
    assert "cores/core.100" in files and "cores/core.200" not in files
    assert "owned by uid 4343" in manifest(out)["core core.200"]
    # given by path (--core-dir), any owner's core is taken
    out, _ = _collect(tmp_path, fake_path, logs=[logs], core_dirs=(str(sweep),))
    assert "cores/core.200" in members(out)


def test_a_failed_run_leaves_no_bundle_and_says_so(tmp_path, monkeypatch):
    def boom(self):
        raise RuntimeError("disk gone")
    monkeypatch.setattr(collect_module.Collector, "run", boom)
    result = CliRunner().invoke(main, ["collect", "-o", str(tmp_path / "b.tar.gz")])
    assert result.exit_code == 1 and "no bundle was written" in result.output
    assert os.listdir(tmp_path) == []


def test_file_names_cannot_forge_manifest_lines(tmp_path, fake_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a\nstep dmesg: ok (forged).log").write_text("INFO x\n")
    (logs / "server\u200b.log").write_text("INFO y\n")
    out, _ = _collect(tmp_path, fake_path, logs=[logs])
    text = members(out)["MANIFEST.txt"].decode()
    assert "\nstep dmesg: ok (forged)" not in text
    assert "a\\x0astep dmesg" in text and "server\\u200b.log" in text


def test_a_link_at_the_output_is_replaced_not_written_through(tmp_path, fake_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "bundle.tar.gz"
    out.symlink_to(victim)
    _collect(tmp_path, fake_path)
    assert victim.read_text() == "keep me\n" and not out.is_symlink() and tarfile.is_tarfile(out)
