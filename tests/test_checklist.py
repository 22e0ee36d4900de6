"""The incident checklist rule, on real recordings and the hand-made incident."""

import json

from click.testing import CliRunner

from forensics.case import analyze
from forensics.cli import main
from tests.conftest import DATA


def checks(case):
    return {c["check"]: c for c in case.context.checklist}


def test_checklist_on_real_vllm_crash(shared_case):
    case, truth = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    c = checks(case)
    assert c["prompt spans several chunked-prefill blocks"]["status"] == "fail"
    assert "block 2" in c["prompt spans several chunked-prefill blocks"]["finding"]
    assert c["KV-cache usage at the crash"]["status"] == "pass"          # 0.05 %: not capacity
    assert c["what the client saw"]["status"] == "fail" and "500" in c["what the client saw"]["finding"]
    assert c["--disable-custom-all-reduce"]["finding"] == "disable_custom_all_reduce=True"
    assert c["all-reduce backend"]["status"] == "unknown"
    for item in case.context.checklist:
        assert item["status"] in ("pass", "fail", "unknown") and item["finding"]


def test_backend_unknown_says_why_on_new_vllm(tmp_path):
    (tmp_path / "server.log").write_text(
        "(EngineCore pid=3) INFO 11-20 08:00:01 [core.py:140] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='m', tensor_parallel_size=4\n")   # hand-made, vLLM 0.32 config line
    item = checks(analyze(str(tmp_path)))["all-reduce backend"]
    assert item["status"] == "unknown" and "only at DEBUG" in item["finding"]


def test_mnnvl_backend_flagged_on_the_incident():
    c = checks(analyze(str(DATA / "handmade/mnnvl_incident")))
    assert c["all-reduce backend"]["status"] == "fail"
    assert c["every rank went down at the same point"]["status"] == "pass"


def test_checklist_in_terminal_and_json():
    runner = CliRunner()
    out = runner.invoke(main, ["analyze", str(DATA / "handmade/mnnvl_incident")]).output
    assert "Incident checklist" in out and "all-reduce backend" in out
    report = json.loads(runner.invoke(main, ["analyze", str(DATA / "handmade/mnnvl_incident"), "--format", "json"]).output)
    assert {c["check"] for c in report["checklist"]} >= {"all-reduce backend", "what the client saw"}
