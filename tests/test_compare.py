"""forensics compare (forensics/compare.py): runs grouped by crash signature, the
environment fields that differ, how often each signature reproduced; rendered for the
terminal, Markdown and JSON."""

from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.compare import COMPARED, Comparison, compare, render
from tests.conftest import DATA

GPU = DATA / "gpu"
# one planted bug (rank 2's all-reduce writes past its signal pad), recorded three ways
# that each name the kernel: a GPU core dump, compute-sanitizer text and its XML
KERNEL_NAMED = [GPU / "tp4_oob_write_coredump", GPU / "tp4_oob_write_memcheck", GPU / "tp4_oob_write_memcheck_xml"]
OTHER_BUG = GPU / "misaligned_address"
NO_FAILURE = DATA / "cpu" / "pyspy_hang"


@pytest.fixture(scope="module")
def reruns() -> Comparison:
    return compare([str(p) for p in KERNEL_NAMED] + [str(OTHER_BUG)])


def test_reruns_of_one_crash_group_apart_from_another(reruns):
    groups = reruns.groups()
    assert [len(runs) for _, runs in groups] == [3, 1]
    assert [r.name for r in groups[0][1]] == [str(p) for p in KERNEL_NAMED]
    assert [r.name for r in groups[1][1]] == [str(OTHER_BUG)]
    assert groups[0][0] != groups[1][0]
    assert all(sig.startswith("forensics.sig/2:") for sig, _ in groups)


def test_reproduction_lines(reruns):
    lines = reruns.reproduction()
    assert len(lines) == 2
    assert lines[0].startswith("3/4 runs crash with signature forensics.sig/2:")
    assert "oneshot_allreduce_flag_kernel" in lines[0] and "chunked-prefill" in lines[0]
    assert "(prefill block 3)" in lines[0]
    assert lines[1].startswith("1/4 runs crash with signature forensics.sig/2:")
    assert "pack_kv_header_kernel" in lines[1]


def test_the_signature_ignores_which_tool_saw_the_fault(reruns):
    """The core dump reports no CUDA error code, the sanitizer runs report 719 rather
    than 700: the signature is built from the fault, kernel and phase, so they agree."""
    codes = {r.name: (r.case.verdict.error.code if r.case.verdict.error else None) for r in reruns.runs[:3]}
    assert len(set(codes.values())) > 1, codes
    assert len({r.signature for r in reruns.runs[:3]}) == 1
    assert reruns.runs[0].parts == "illegal-address | oneshot_allreduce_flag_kernel | chunked-prefill"


def test_surfaces_without_a_kernel_do_not_merge_different_sites():
    result = compare([str(GPU / "tp4_oob_write_del_cumemfree"), str(DATA / "handmade/mnnvl_incident")])
    groups = result.groups()
    assert [len(runs) for _, runs in groups] == [1, 1]
    assert "signal_pad.py:__del__@cuMemFree" in result.runs[0].parts
    assert "mnnvl.py:__del__@cuMemFree" in result.runs[1].parts


def test_the_same_run_twice_is_one_group_with_no_environment_difference(tmp_path):
    copy = tmp_path / "again"
    shutil.copytree(OTHER_BUG, copy)
    result = compare([str(OTHER_BUG), str(copy)])
    assert [len(runs) for _, runs in result.groups()] == [2]
    assert result.reproduction()[0].startswith("2/2 runs crash with signature")
    assert result.differing_environment() == {}
    text = io.StringIO()
    render(result, "markdown", text)
    assert "No environment field differs between the runs." in text.getvalue()


def test_a_run_without_failure_is_said_so():
    result = compare([str(OTHER_BUG), str(NO_FAILURE)])
    assert result.runs[1].signature is None and result.runs[1].parts == "no failure"
    assert result.reproduction() == [result.reproduction()[0], "1/2 runs show no failure"]


def test_groups_are_biggest_first_then_in_order_of_appearance():
    result = compare([str(NO_FAILURE), str(OTHER_BUG), str(KERNEL_NAMED[0]), str(KERNEL_NAMED[1])])
    names = [[r.name for r in runs] for _, runs in result.groups()]
    assert names == [[str(KERNEL_NAMED[0]), str(KERNEL_NAMED[1])], [str(NO_FAILURE)], [str(OTHER_BUG)]]


def test_environment_differences_are_listed():
    result = compare([str(GPU / "tp4_oob_write_del_cumemfree"), str(DATA / "handmade/mnnvl_incident")])
    diffs = result.differing_environment()
    assert diffs["vllm"] == ["0.1.0", "0.30.0"]
    assert diffs["max_num_batched_tokens"] == [8064, 8192]
    assert "tensor_parallel_size" not in diffs          # both TP=4: not a difference
    assert "dtype" not in diffs                         # both bfloat16
    assert set(diffs) <= set(COMPARED)                  # pids, token counts ... are never compared


def test_to_dict(reruns):
    data = reruns.to_dict()
    assert data["schema"] == "forensics.compare/1"
    assert [r["name"] for r in data["runs"]] == [r.name for r in reruns.runs]
    assert [r["headline"] for r in data["runs"]] == [r.case.verdict.headline for r in reruns.runs]
    assert [g["runs"] for g in data["groups"]] == [[r.name for r in runs] for _, runs in reruns.groups()]
    assert data["reproduction"] == reruns.reproduction()
    assert data["environment_differences"] == reruns.differing_environment()


# --- the command --------------------------------------------------------------------------

def _invoke(*args):
    return CliRunner().invoke(main, ["compare", *map(str, args)])


def test_cli_json():
    result = _invoke(*KERNEL_NAMED[:2], "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["schema"] == "forensics.compare/1" and len(data["groups"]) == 1
    assert data["reproduction"][0].startswith("2/2 runs crash with signature")


def test_cli_terminal_is_plain_and_fits_80_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = _invoke(*KERNEL_NAMED[:2], OTHER_BUG)
    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    flat = " ".join(result.output.split())
    assert "2/3 runs crash with signature" in flat and "1/3 runs crash with signature" in flat
    assert "Environment that differs" in flat or "No environment field differs" in flat
    for run in ("tp4_oob_write_coredump", "tp4_oob_write_memcheck", "misaligned_address"):
        assert run in flat


def _cells(row: str) -> list[str]:
    """A Markdown table row's cells, GitHub-style: a backslash-escaped pipe stays in its cell."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_cli_markdown_table(tmp_path):
    odd = tmp_path / "run|with`odd`name"
    shutil.copytree(OTHER_BUG, odd)
    out = tmp_path / "compare.md"
    result = _invoke(KERNEL_NAMED[0], odd, "--format", "markdown", "-o", out)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("### Runs compared\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| run |")
            and "---" not in line and not line.startswith("| field") and not line.startswith("| `vllm")]
    run_rows = rows[:2]
    assert all(len(_cells(row)) == 4 for row in run_rows), run_rows
    assert "tp4_oob_write_coredump" in run_rows[0]
    assert "run\\|with" in run_rows[1]                  # the pipe in the name cannot end the cell
    assert "- 1/2 runs crash with signature" in text


def test_four_runs_of_one_bug_with_and_without_a_tool_are_one_group_and_software():
    """The same lab bug recorded four ways (compute-sanitizer text and XML, a GPU core
    dump, a plain run that only surfaced in a finaliser): the plain run has no kernel,
    so its signature differs, but its surface site is the sanitizer runs' - one group,
    and no hardware suspicion on the one GPU they all used."""
    runs = [str(GPU / name) for name in ("tp4_oob_write_del_cumemfree", "tp4_oob_write_memcheck",
                                         "tp4_oob_write_coredump", "tp4_oob_write_memcheck_xml")]
    result = compare(runs)
    assert len({r.signature for r in result.runs}) == 2          # with a kernel, and without
    ((signature, group),) = result.groups()
    assert len(group) == 4 and signature == result.runs[1].signature   # named after a run that named the kernel
    lines = result.hardware()
    assert lines and all("hardware suspected" not in line for line in lines)
    assert any("same bug" in line and "software" in line for line in lines)


def test_different_bugs_on_the_only_gpu_raise_no_hardware_suspicion(tmp_path):
    one = _xid_run(tmp_path / "a", "0000:1b:00", "x")
    other = tmp_path / "b"
    other.mkdir()
    (other / "dmesg.txt").write_text(
        "[Tue Mar 14 11:00:01 2026] NVRM: Xid (PCI:0000:1b:00): 13, pid=4343, name=python3, Graphics SM Warp "
        "Exception on (GPC 0, TPC 1, SM 0): Misaligned Address\n")
    (other / "server.log").write_text(
        "(Worker_TP0 pid=4343) ERROR 03-14 11:00:02 [multiproc_executor.py:1] RuntimeError: CUDA error: misaligned "
        "address\n")
    result = compare([one, str(other)])
    assert len(result.groups()) == 2
    lines = result.hardware()
    assert lines and all("hardware suspected" not in line for line in lines)
    assert any("cannot be told from the workload" in line for line in lines)


def test_cli_errors(tmp_path):
    assert _invoke(tmp_path / "missing").exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _invoke(empty)
    assert result.exit_code == 2 and "Traceback" not in result.output


def _xid_run(folder, pci: str, kernel_line: str):
    folder.mkdir()
    (folder / "dmesg.txt").write_text(
        f"[Tue Mar 14 10:00:01 2026] NVRM: Xid (PCI:{pci}): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. "
        "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n")
    (folder / "server.log").write_text(
        "(Worker_TP0 pid=4242) ERROR 03-14 10:00:02 [multiproc_executor.py:1] RuntimeError: CUDA error: an illegal "
        f"memory access was encountered\n(Worker_TP0 pid=4242) ERROR 03-14 10:00:02 [multiproc_executor.py:1] {kernel_line}\n")
    return str(folder)


def test_compare_says_whether_the_fault_follows_the_device_or_the_kernel(tmp_path):
    from forensics.compare import compare
    same_gpu = compare([_xid_run(tmp_path / "a", "0000:1b:00", "at step 1"),
                        _xid_run(tmp_path / "b", "0000:1b:00", "at step 2")])
    lines = same_gpu.hardware()
    assert any("0000:1b:00" in line and "2 runs" in line for line in lines)
    two_gpus = compare([_xid_run(tmp_path / "c", "0000:1b:00", "x"), _xid_run(tmp_path / "d", "0000:3d:00", "x")])
    assert len({r.signature for r in two_gpus.runs}) == 1
    assert any("on 2 different GPUs" in line and "software" in line for line in two_gpus.hardware())
    assert "hardware" in two_gpus.to_dict()
