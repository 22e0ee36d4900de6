"""The incident checklist: answered from the environment and the verdict, never
contradicting the verdict, shown in the terminal, JSON and Markdown reports."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from forensics.case import analyze
from forensics.cli import main
from forensics.events import Kind
from forensics.verdict import Check, Status
from tests.conftest import DATA
from tests.helpers import analyze_text

HANDMADE = DATA / "handmade"
CHECKS = ["versions (engine, torch, CUDA, driver)", "all-reduce backend", "GPU model and parallel topology",
          "model and quantization", "--disable-custom-all-reduce", "prompt spans several chunked-prefill blocks",
          "KV-cache usage at the crash", "every rank went down at the same point", "what the client saw"]


def checks(case) -> dict:
    return {c.check: c for c in case.verdict.checklist}


def vllm_tp2(version="0.11.0", body="") -> str:
    text = (f"(EngineCore_DP0 pid=910) INFO 04-01 10:00:05 [core.py:93] Initializing a V1 LLM engine (v{version}) "
            "with config: model='acme/tiny', tensor_parallel_size=2\n")
    for r in range(2):
        text += (f"(Worker_TP{r} pid={911 + r}) INFO 04-01 10:00:09 [parallel_state.py:1165] world_size=2 rank={r} "
                 f"local_rank={r} distributed_init_method=tcp://127.0.0.1:4 backend=nccl\n")
    return text + body


CRASH_RANK1 = ("(Worker_TP1 pid=912) ERROR 04-01 10:05:00 [multiproc_executor.py:671] torch.AcceleratorError: CUDA "
               "error: an illegal memory access was encountered\n"
               "(Worker_TP0 pid=911) ERROR 04-01 10:05:02 [multiproc_executor.py:671] RuntimeError: [/pytorch/third_"
               "party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:12675\n"
               '(APIServer pid=900) INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 500 Internal Server '
               "Error\n")


def test_every_check_is_answered_once_with_a_finding():
    case = analyze_text(vllm_tp2(body=CRASH_RANK1))
    assert [c.check for c in case.verdict.checklist] == CHECKS
    for item in case.verdict.checklist:
        assert item.status in (Check.PASS, Check.FAIL, Check.UNKNOWN) and item.finding


def test_checklist_on_a_real_vllm_crash(shared_case):
    case, truth = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    c = checks(case)
    assert c["prompt spans several chunked-prefill blocks"].status == Check.FAIL
    assert "block 2" in c["prompt spans several chunked-prefill blocks"].finding
    assert c["KV-cache usage at the crash"].status == Check.PASS          # 0.05 %: not capacity
    assert c["what the client saw"].status == Check.FAIL and "500" in c["what the client saw"].finding
    assert c["--disable-custom-all-reduce"].finding == "disable_custom_all_reduce=True"
    assert c["all-reduce backend"].status == Check.UNKNOWN
    assert c["model and quantization"].status == Check.PASS
    # every finding with a value says where it was read
    assert c["--disable-custom-all-reduce"].evidence.startswith("server.log:")


@pytest.mark.parametrize("version, says_debug", [("0.32.0", True), ("0.30.0", True), ("0.11.0", False)])
def test_backend_unknown_says_why_on_new_vllm(version, says_debug):
    item = checks(analyze_text(vllm_tp2(version)))["all-reduce backend"]
    assert item.status == Check.UNKNOWN
    assert ("only at DEBUG" in item.finding) == says_debug


def test_mnnvl_backend_flagged_on_the_incident():
    c = checks(analyze(str(HANDMADE / "mnnvl_incident")))
    assert c["all-reduce backend"].status == Check.FAIL and "mnnvl" in c["all-reduce backend"].finding
    assert c["all-reduce backend"].evidence is not None
    assert c["every rank went down at the same point"].status == Check.PASS
    assert c["prompt spans several chunked-prefill blocks"].status == Check.FAIL


def test_a_nccl_all_reduce_backend_is_no_concern():
    body = "(Worker_TP0 pid=911) INFO 04-01 10:00:10 [communicator.py:80] Using ['custom', 'nccl'] all-reduce backends\n"
    item = checks(analyze_text(vllm_tp2(body=body)))["all-reduce backend"]
    assert item.status == Check.PASS and "nccl" in item.finding


def test_checklist_with_missing_rank_logs_cannot_tell_if_every_rank_went_down():
    text = ("(EngineCore_DP0 pid=1) INFO 11-20 08:00:01 [core.py:140] Initializing a V1 LLM engine (v0.30.0) with "
            "config: model='m', tensor_parallel_size=4\n"
            "(Worker_TP2 pid=12) ERROR 11-20 08:00:05 [a.py:1] Failed: Cuda error /x/custom_all_reduce.cuh:9 "
            "'an illegal memory access was encountered'\n")
    item = checks(analyze_text(text))["every rank went down at the same point"]
    assert item.status == Check.UNKNOWN and "of 4 ranks" in item.finding


# --- never contradicting the verdict -------------------------------------------------------------

def assert_consistent(case) -> None:
    v, c = case.verdict, checks(case)
    workers = [r for r in v.ranks if r.role == "worker"]
    tp = v.environment.get("tensor_parallel_size")
    item = c.get("every rank went down at the same point")
    if item is None:
        # asked only of a run of several ranks
        assert len([r for r in workers if r.in_inputs]) <= 1 and not (isinstance(tp, int) and tp > 1)
    elif workers and not (isinstance(tp, int) and len(workers) < tp):
        standing = sorted(r.rank for r in workers if r.status == Status.HEALTHY)
        assert (item.status == Check.FAIL) == bool(standing), item
        # a rank named as standing is neither the first failure nor collateral
        if v.first_failure is not None:
            assert v.first_failure.rank not in standing
        assert not set(standing) & set(v.collateral)
    else:
        assert item.status == Check.UNKNOWN
    http = sorted({e.attrs["status"] for e in case.events if e.kind == Kind.HTTP and isinstance(e.attrs.get("status"), int)})
    client = c.get("what the client saw")
    if client is None:
        assert not http                     # asked of a server's inputs, or when a status is shown
    elif not http:
        assert client.status == Check.UNKNOWN
    else:
        assert (client.status == Check.FAIL) == any(s >= 500 for s in http)
        assert all(str(s) in client.finding for s in http)
    for item in v.checklist:                   # the evidence named is where the environment was read
        if item.evidence is not None:
            assert item.evidence in v.environment_sources.values()


CRASHES = {
    "tp2-cuda-error": lambda: analyze_text(vllm_tp2(body=CRASH_RANK1)),
    "mnnvl-incident": lambda: analyze(str(HANDMADE / "mnnvl_incident")),
    "oom": lambda: analyze(str(HANDMADE / "oom_during_prefill")),
    "startup": lambda: analyze(str(HANDMADE / "startup_failure")),
    "tp4-xid": lambda: analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree")),
}


@pytest.mark.parametrize("name", list(CRASHES))
def test_checklist_never_contradicts_the_verdict(name):
    case = CRASHES[name]()
    assert case.verdict.failed
    assert_consistent(case)


def test_checklist_does_not_call_the_first_failing_shard_standing():
    text = ("2025-05-26T09:02:11.102901Z  INFO text_generation_launcher: Sharding model on 2 processes\n"
            "2025-05-26T09:02:14.881533Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n"
            "2025-05-26T09:02:14.881611Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n"
            "2025-05-26T09:05:00.200000Z ERROR text_generation_launcher: Shard 1 crashed\n")
    assert_consistent(analyze_text(text))


def test_a_run_without_failure_raises_no_concern():
    case = analyze_text(vllm_tp2())
    assert not case.verdict.failed
    assert [c.check for c in case.verdict.checklist if c.status == Check.FAIL] == []


# --- reports --------------------------------------------------------------------------------------

def test_checklist_in_terminal_json_and_markdown():
    runner = CliRunner()
    bundle = str(HANDMADE / "mnnvl_incident")
    out = runner.invoke(main, ["analyze", bundle, "--show", "checklist"]).output
    assert "Incident checklist" in out and "all-reduce backend" in out
    assert "Incident checklist" not in runner.invoke(main, ["analyze", bundle]).output    # not on the first screen
    report = json.loads(runner.invoke(main, ["analyze", bundle, "--format", "json"]).output)
    by_check = {c["check"]: c for c in report["checklist"]}
    assert list(by_check) == CHECKS
    assert by_check["all-reduce backend"]["status"] == "fail"
    assert by_check["what the client saw"]["status"] == "fail"
    markdown = runner.invoke(main, ["analyze", bundle, "--format", "markdown"]).output
    assert "Incident checklist" in markdown and "every rank went down at the same point" in markdown
