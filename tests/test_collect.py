"""forensics collect: each step's failure modes, nothing written outside -o, the bundle
read back; the environment reports it writes (and users attach) parsed; dmesg seconds
placed on the wall clock; the hardware-or-software opinion."""

from __future__ import annotations

import os
import stat
import struct
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import collect as collect_module
from forensics.case import analyze
from forensics.cli import main
from forensics.collect import Options, collect, query_as_report
from forensics.events import Kind, Severity
from tests.helpers import analyze_texts, event, evidence_of, parse_text, run_rules

DATA = Path(__file__).parent / "data"
H200 = DATA / "env" / "h200"
BUNDLE = DATA / "collect" / "h200_cupy_oob" / "bundle.tar.gz"


def fake_tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_path(tmp_path):
    """A PATH holding only fake tools (and sh): each test says how each tool behaves."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sh", "sleep", "cat"):
        target = next((Path(d) / name for d in os.environ["PATH"].split(":") if (Path(d) / name).exists()), None)
        if target is not None:
            (bin_dir / name).symlink_to(target)
    return bin_dir


def members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def manifest(bundle: Path) -> dict[str, str]:
    lines = members(bundle)["MANIFEST.txt"].decode().splitlines()
    return {line.split(":", 1)[0][5:]: line.split(":", 1)[1].strip() for line in lines if line.startswith("step ")}


def run_collect(tmp_path, fake_path, *, logs=(), timeout=5.0, **kw) -> tuple[Path, list]:
    out = tmp_path / "bundle.tar.gz"
    env = {"PATH": str(fake_path), "NCCL_DEBUG": "INFO", "VLLM_API_KEY": "sk-abcdefghijklmnopqrstuvwx", "HOME": "/nowhere"}
    steps = collect(Options(logs=tuple(map(str, logs)), timeout=timeout, python=str(fake_path / "python"), **kw),
                    str(out), env=env)
    return out, steps


def test_every_step_is_accounted_for_when_tools_are_missing(tmp_path, fake_path):
    out, steps = run_collect(tmp_path, fake_path)
    lines = manifest(out)
    for name in ("dmesg", "dmesg-T", "clock", "nvidia-smi-q", "nvidia-smi-query", "collect-env", "pip-freeze",
                 "environment", "core dumps"):
        assert name in lines, name
    assert lines["dmesg"].startswith("unavailable (dmesg not found")
    assert lines["nvidia-smi-q"].startswith("unavailable (nvidia-smi not found")
    assert lines["pip-freeze"].startswith("unavailable")
    assert lines["clock"].startswith("ok")


def test_permission_denied_and_timeouts_are_manifest_lines(tmp_path, fake_path):
    fake_tool(fake_path, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1')
    fake_tool(fake_path, "nvidia-smi", "sleep 30")
    out, steps = run_collect(tmp_path, fake_path, timeout=1.0)
    lines = manifest(out)
    assert lines["dmesg"].startswith("failed (exit 1: dmesg: read kernel buffer failed: Operation not permitted")
    assert lines["nvidia-smi-q"].startswith("timed out (no answer within 1 s")
    assert all(s.seconds < 10 for s in steps)


def test_outputs_logs_and_variables_go_in_redacted(tmp_path, fake_path):
    fake_tool(fake_path, "dmesg", 'echo "[ 12.5] NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus. host gpu-17.corp.internal"')
    fake_tool(fake_path, "nvidia-smi", 'echo "name, pci.bus_id, driver_version"; echo "NVIDIA H100, 00000000:1B:00.0, 550.54.15"')
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("ERROR 03-14 10:00:02 [core.py:1] RuntimeError: CUDA error: an illegal memory "
                                     "access was encountered; user alice@example-corp.com\n")
    out, _ = run_collect(tmp_path, fake_path, logs=[logs])
    files = members(out)
    assert "gpu-17.corp.internal" not in files["host/dmesg.txt"].decode()
    assert "alice@example-corp.com" not in files["logs/logs/server.log"].decode()
    assert "illegal memory access" in files["logs/logs/server.log"].decode()
    variables = files["env/environment.txt"].decode()
    assert "NCCL_DEBUG=INFO" in variables and "abcdefghijklmnop" not in variables
    assert files["gpu/nvidia-smi_query.txt"].decode().startswith("forensics collect nvidia-smi query\nGPU 00000000:1B:00.0")
    manifest_lines = manifest(out)
    assert manifest_lines["log server.log"].startswith("ok (copied (redacted)")


def test_no_redact_keeps_the_text(tmp_path, fake_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "server.log").write_text("user alice@example-corp.com\n")
    out, _ = run_collect(tmp_path, fake_path, logs=[logs], redact=False)
    assert "alice@example-corp.com" in members(out)["logs/logs/server.log"].decode()


def _elf_core() -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    return ident + struct.pack("<HHI", 4, 62, 1) + bytes(64)


def test_core_dumps_are_found_checked_and_capped(tmp_path, fake_path, monkeypatch):
    cores = tmp_path / "cores"
    cores.mkdir()
    (cores / "core.1234").write_bytes(_elf_core())
    (cores / "core.py").write_text("print('not a core')\n")
    (cores / "core.9999").write_bytes(_elf_core() + bytes(4096))
    monkeypatch.setattr(collect_module, "MAX_CORE", 2048)
    monkeypatch.setattr(collect_module, "CORE_DIRS", ())
    out, _ = run_collect(tmp_path, fake_path, core_dirs=(str(cores),))
    files = members(out)
    assert "cores/core.1234" in files and "cores/core.py" not in files and "cores/core.9999" not in files
    assert manifest(out)["core core.9999"].startswith("skipped")


def test_nothing_is_written_outside_the_bundle(tmp_path, fake_path, monkeypatch):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    before = set(os.listdir(tmp_path))
    out, _ = run_collect(tmp_path, fake_path)
    assert set(os.listdir(tmp_path)) - before == {"bundle.tar.gz"}
    assert os.listdir(work) == []


def test_cli_refuses_a_bad_output_and_collects(tmp_path, monkeypatch):
    runner = CliRunner()
    bad = runner.invoke(main, ["collect", "-o", str(tmp_path / "missing" / "b.tar.gz")])
    assert bad.exit_code == 2 and "does not exist" in bad.output
    wrong = runner.invoke(main, ["collect", "-o", str(tmp_path / "b.zip")])
    assert wrong.exit_code == 2 and ".tar.gz" in wrong.output
    monkeypatch.setattr(collect_module, "CORE_DIRS", ())
    good = runner.invoke(main, ["collect", "-o", str(tmp_path / "b.tar.gz"), "--timeout", "20"])
    assert good.exit_code == 0, good.output
    assert "step clock: ok" in good.output and (tmp_path / "b.tar.gz").exists()
    case = analyze(str(tmp_path / "b.tar.gz"))
    assert all(s.kind != "unknown" for s in case.sources)
    assert any(s.relpath.endswith("MANIFEST.txt") and s.kind == "collect-manifest" for s in case.sources)


def test_query_csv_becomes_a_report():
    text = query_as_report(b"name, pci.bus_id, ecc.errors.uncorrected.volatile.total\nNVIDIA H200, 00000000:00:06.0, 3\n")
    parsed = parse_text(text.decode(), "gpu/nvidia-smi_query.txt")
    facts = parsed.events[0].attrs["facts"]
    assert facts["gpu"] == "NVIDIA H200" and facts["ecc_volatile_uncorrectable_total"] == "3"


# --- the real bundle from the H200 ----------------------------------------------------------

@pytest.fixture(scope="module")
def h200_case():
    return analyze(str(BUNDLE))


def test_real_bundle_every_member_is_read(h200_case):
    names = {s.relpath.split("!", 1)[1]: s for s in h200_case.sources}
    assert {"MANIFEST.txt", "host/dmesg.txt", "host/dmesg_T.txt", "host/clock.txt", "gpu/nvidia-smi_q.txt",
            "env/collect_env.txt", "env/pip_freeze.txt", "logs/app/app.log"} <= set(names)
    assert all(s.kind != "unknown" for s in names.values())
    for name in ("host/clock.txt", "gpu/nvidia-smi_q.txt", "env/collect_env.txt", "env/pip_freeze.txt", "MANIFEST.txt"):
        assert names[name].unparsed_lines <= 2, name


def test_real_bundle_verdict_and_environment(h200_case):
    v = h200_case.verdict
    assert v.error.code == 700
    assert v.origin is not None and v.origin.pid == 537 and v.origin.kernel is None
    env = v.environment
    assert env["torch"] == "2.11.0+cu130" and env["driver"] == "580.159.04" and env["gpu"] == "NVIDIA H200"
    assert env["cuda"] == "13.0"
    assert v.hardware.opinion == "software"


def test_real_bundle_raw_dmesg_lands_at_its_wall_clock_time(h200_case):
    raw = [e for e in h200_case.events if e.kind == Kind.XID and e.source.endswith("host/dmesg.txt")]
    walled = [e for e in h200_case.events if e.kind == Kind.XID and e.source.endswith("host/dmesg_T.txt")]
    assert raw and walled
    assert raw[0].time is not None and raw[0].time_inferred and "clock" in raw[0].attrs["time_from"]
    assert abs((raw[0].time - walled[0].time).total_seconds()) < 2


# --- environment reports users attach ------------------------------------------------------------

def test_collect_env_nvidia_smi_and_pip_freeze_captures():
    case = analyze(str(H200))
    env = case.verdict.environment
    assert env["torch"] == "2.11.0+cu130" and env["cuda"] == "13.0" and env["driver"] == "580.159.04"
    assert env["gpu"] in ("GPU 0: NVIDIA H200", "NVIDIA H200")
    assert env["triton"] == "3.6.0" and env["nccl"] == "2.28.9"
    assert env["remapped_rows_uncorrectable"] == "0" and env["ecc_volatile_dram_uncorrectable"] == "0"
    versions = next(c for c in case.verdict.checklist if c.check.startswith("versions"))
    assert "torch 2.11.0+cu130" in versions.finding and "torch not printed" not in versions.finding
    kinds = {s.relpath: s.kind for s in case.sources}
    assert kinds["nvidia-smi_q.txt"] == "nvidia-smi" and kinds["collect_env.txt"] == "collect-env"


def test_dmesg_seconds_placed_by_the_same_line_in_dmesg_T():
    case = analyze(str(H200 / "dmesg.txt"), str(H200 / "dmesg_T.txt"))
    raw = [e for e in case.events if e.kind == Kind.XID and e.source.endswith("dmesg.txt") and "_T" not in e.source]
    assert raw and all(e.time is not None and "dmesg -T" in e.attrs["time_from"] for e in raw)


def test_dmesg_seconds_alone_stay_untimed():
    case = analyze(str(H200 / "dmesg.txt"))
    assert all(e.time is None for e in case.events if e.kind == Kind.XID)


def test_variables_dump_is_an_environment_report():
    parsed = parse_text("NCCL_P2P_DISABLE=1\nVLLM_USE_V1=1\nCUDA_VISIBLE_DEVICES=0,1\n", "env.txt")
    facts = parsed.events[0].attrs["facts"]
    assert facts == {"env:NCCL_P2P_DISABLE": "1", "env:VLLM_USE_V1": "1", "env:CUDA_VISIBLE_DEVICES": "0,1"}


def test_two_package_lines_are_not_a_freeze():
    parsed = parse_text("a==1\nb==2\n", "x.log")
    assert parsed.events == [] and parsed.unparsed_lines == 2


# --- hardware or software --------------------------------------------------------------------

def _xid(code: int, **attrs):
    return event(Kind.XID, f"NVRM: Xid (PCI:0000:1b:00): {code}, pid=42", xid=code, subject_pid=42, **attrs)


def _env(**facts):
    return event(Kind.ENVIRONMENT, "nvidia-smi", severity=Severity.INFO, tool="nvidia-smi", facts=facts)


def _opinion(events):
    from forensics.rules.hardware import HardwareOrSoftware
    return run_rules(evidence_of(events), until=HardwareOrSoftware)["hardware"]


def test_uncorrectable_ecc_without_a_kernel_is_hardware():
    opinion = _opinion([_xid(48), _env(ecc_volatile_dram_uncorrectable="2", remapped_rows_pending="Yes")])
    assert opinion.opinion == "hardware"
    assert "ecc volatile dram uncorrectable = 2" in opinion.basis and "remapped rows pending" in opinion.basis
    assert "another GPU" in opinion.settle


def test_application_xid_with_clean_counters_is_software():
    opinion = _opinion([_xid(31, access="WRITE"), _env(ecc_volatile_dram_uncorrectable="0", remapped_rows_uncorrectable="0")])
    assert opinion.opinion == "software" and "Xid 31" in opinion.basis


def test_both_kinds_of_evidence_is_undecided():
    opinion = _opinion([_xid(31), _env(ecc_volatile_dram_uncorrectable="5")])
    assert opinion.opinion == "undecided"


def test_no_evidence_gives_no_opinion_or_says_so():
    case = analyze_texts({"server.log": "INFO 03-14 10:00:00 [x.py:1] started\n"})
    assert case.verdict.hardware is None
    failed = analyze_texts({"server.log": "RuntimeError: CUDA error: an illegal memory access was encountered\n"})
    assert failed.verdict.hardware.opinion == "undecided"
    assert "no Xid" in failed.verdict.hardware.basis
