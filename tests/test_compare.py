"""forensics compare: four real recordings of one planted bug and one of another."""

import json

from click.testing import CliRunner

from forensics.cli import main
from forensics.compare import compare
from tests.conftest import DATA, RECORDINGS

SAME = [DATA / "gpu" / b for b in ("tp4_oob_write_del_cumemfree", "tp4_oob_write_coredump",
                                   "tp4_oob_write_memcheck", "tp4_oob_write_memcheck_xml")]
OTHER = RECORDINGS / "gpu/s1a_tp4_prefill_crash"


def test_groups_reruns_of_one_crash_apart_from_another(tmp_path):
    other = OTHER if OTHER.exists() else DATA / "gpu/misaligned_address"
    result = compare([str(p) for p in SAME] + [str(other)])
    groups = result.groups()
    assert [len(runs) for _, runs in groups] == [4, 1]
    assert {r.name for r in groups[0][1]} == {str(p) for p in SAME}
    lines = result.reproduction()
    assert lines[0].startswith("4/5 runs crash with signature forensics.sig/1:")
    assert "oneshot_allreduce_flag_kernel" in lines[0] and "chunked-prefill" in lines[0]


def test_environment_differences_are_listed():
    result = compare([str(DATA / "gpu/tp4_oob_write_del_cumemfree"), str(DATA / "handmade/mnnvl_incident")])
    diffs = result.differing_environment()
    assert diffs["vllm"] == ["0.1.0", "0.30.0"]
    assert "tensor_parallel_size" not in diffs          # both TP=4: not a difference


def test_cli_json_and_terminal():
    runner = CliRunner()
    out = runner.invoke(main, ["compare", *map(str, SAME[:2]), "--format", "json"])
    assert out.exit_code == 0
    data = json.loads(out.output)
    assert data["schema"] == "forensics.compare/1" and len(data["groups"]) == 1
    term = runner.invoke(main, ["compare", *map(str, SAME[:2])])
    assert "2/2 runs crash with signature" in term.output
    assert runner.invoke(main, ["compare", "/nonexistent"]).exit_code == 2
