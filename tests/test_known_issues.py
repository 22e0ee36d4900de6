"""The knowledge base: every entry has a test that it matches and one that it does not.

Matching inputs are real recordings where one exists, else the labelled hand-made
fixtures of tests/data/handmade (README there)."""

import pytest

from forensics import kb
from forensics.case import analyze
from tests.conftest import DATA

HANDMADE = DATA / "handmade"


def ids(case):
    return {k["id"]: k for k in case.context.known_issues}


def test_every_builtin_entry_loads_and_is_tested_here():
    entries = {e.id for e in kb.builtin()}
    tested = {"flashinfer-mnnvl-allreduce-ima", "vllm-custom-allreduce-graph-capture-ima",
              "pytorch-index-out-of-bounds-assert", "nccl-watchdog-timeout", "host-oom-killer"}
    assert entries == tested


def test_mnnvl_entry_matches_the_reconstructed_incident():
    case = analyze(str(HANDMADE / "mnnvl_incident"))
    hit = ids(case)["flashinfer-mnnvl-allreduce-ima"]
    assert hit["likelihood"] == "possible" and hit["unknown"] == ["flashinfer"]
    assert "VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm" in hit["workaround"]
    assert "does not" not in hit["does_not_prove"] or hit["does_not_prove"]


@pytest.mark.parametrize("name", ["s1a_tp4_prefill_crash", "s2a_memcheck_all_processes", "s3_cuda_gdb_replay",
                                  "s5a_triton_oob_async", "B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0",
                                  "C_sigkill_worker_tp1_mid_stream_tp2", "A_healthy_tp2_chunked_prefill"])
def test_mnnvl_entry_does_not_match_other_recordings(shared_case, name):
    case, _ = shared_case(name)
    assert "flashinfer-mnnvl-allreduce-ima" not in ids(case)


def test_mnnvl_entry_excluded_by_a_fixed_version(tmp_path):
    log = (HANDMADE / "mnnvl_incident/server.log").read_text().replace("v0.30.0", "v0.31.1").replace("version 0.30.0", "version 0.31.1")
    (tmp_path / "server.log").write_text(log)
    assert "flashinfer-mnnvl-allreduce-ima" not in ids(analyze(str(tmp_path)))


def test_nccl_timeout_entry():
    assert "nccl-watchdog-timeout" in ids(analyze(str(HANDMADE / "nccl_watchdog_hang")))
    assert "nccl-watchdog-timeout" not in ids(analyze(str(HANDMADE / "mnnvl_incident")))


def test_host_oom_killer_entry(shared_case):
    case, _ = shared_case("C_sigkill_worker_tp1_mid_stream_tp2")
    assert ids(case)["host-oom-killer"]["likelihood"] == "likely"
    b, _ = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    assert "host-oom-killer" not in ids(b)


def test_custom_allreduce_graph_capture_entry(tmp_path):
    # hand-made: the custom op's own CUDA check line (format of vLLM's custom_all_reduce.cuh)
    (tmp_path / "server.log").write_text(
        "(EngineCore_DP0 pid=10) INFO 11-20 08:00:01 [core.py:140] Initializing a V1 LLM engine (v0.27.1) with config: "
        "model='m', tensor_parallel_size=4, disable_custom_all_reduce=False\n"
        "(Worker_TP1 pid=12) INFO 11-20 08:00:09 [gpu_model_runner.py:4400] Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)\n"
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'an illegal memory access was encountered'\n")
    hit = ids(analyze(str(tmp_path)))
    assert "vllm-custom-allreduce-graph-capture-ima" in hit
    assert "vllm-custom-allreduce-graph-capture-ima" not in ids(analyze(str(HANDMADE / "mnnvl_incident")))


def test_index_out_of_bounds_assert_entry(tmp_path):
    # hand-made: torch's device assert line (formats.md 3.2) and the error it leads to
    (tmp_path / "console.txt").write_text(
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:111: operator(): block: [0,0,0], thread: [3,0,0] "
        "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n"
        "Traceback (most recent call last):\n"
        '  File "serve.py", line 9, in step\n'
        "    ids = logits.argmax(-1).tolist()\n"
        "torch.AcceleratorError: CUDA error: device-side assert triggered\n")
    case = analyze(str(tmp_path))
    assert "pytorch-index-out-of-bounds-assert" in ids(case)
    assert "pytorch-index-out-of-bounds-assert" not in ids(analyze(str(DATA / "gpu/misaligned_address")))


def test_user_kb_dir_adds_entries_and_bad_entries_are_clear_errors(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    (good / "mine.toml").write_text(
        'id = "team-misaligned"\ntitle = "t"\nstatus = "s"\nreferences = []\nworkaround = "w"\n'
        'does_not_prove = "d"\n[match]\n[[match.any]]\nwhy = "misaligned kernel"\norigin_kernel = "pack_kv"\n')
    case = analyze(str(DATA / "gpu/misaligned_address"), kb_dirs=[str(good)])
    assert "team-misaligned" in ids(case)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.toml").write_text('id = "x"\n[match]\nenvironment = {vllm = "not a range"}\n')
    with pytest.raises(kb.KnowledgeBaseError, match="missing"):
        kb.load_dirs([str(bad)])
