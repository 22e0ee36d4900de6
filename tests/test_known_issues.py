"""The known-issue knowledge base (forensics/data/known_issues/*.toml, --kb folders).

Every built-in entry is tested from the data: it must have an example crash in EXAMPLES
below (a new entry without one fails ``test_every_builtin_entry_has_an_example``), it
matches its own example, it does not match the other entries' examples nor unrelated
crashes, and each of its conditions (errors, failure kinds, phases, environment) really
excludes a crash that does not meet it.  Examples are hand-made texts in the shapes vLLM
and torch print, or the labelled fixtures of tests/data/handmade.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from click.testing import CliRunner

from forensics import kb, knowledge
from forensics.case import analyze
from forensics.cli import main
from forensics.rules.known_issues import match
from forensics.verdict import ErrorInfo, FailureKind
from tests.conftest import DATA
from tests.helpers import analyze_text, evidence_of

HANDMADE = DATA / "handmade"
BUILTIN = kb.builtin()


def vllm_tp(size: int, version: str = "0.11.0", extra_config: str = "") -> str:
    text = ("(EngineCore_DP0 pid=4100) INFO 03-14 09:12:01 [core.py:93] Initializing a V1 LLM engine "
            f"(v{version}) with config: model='acme/chat-13b', tensor_parallel_size={size}{extra_config}\n")
    for r in range(size):
        text += (f"(Worker_TP{r} pid={4201 + r}) INFO 03-14 09:12:09 [parallel_state.py:1165] world_size={size} "
                 f"rank={r} local_rank={r} distributed_init_method=tcp://127.0.0.1:41233 backend=nccl\n")
    return text


def worker_killed():
    return analyze_text(vllm_tp(2) +
                        "(EngineCore_DP0 pid=4100) ERROR 03-14 09:30:02 [multiproc_executor.py:315] Worker proc "
                        "VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.\n"
                        "(EngineCore_DP0 pid=4100) ERROR 03-14 09:30:02 [core.py:1512] EngineCore encountered a fatal "
                        "error.\n")


def nccl_hang():
    return analyze_text(vllm_tp(4) + "".join(
        f"[rank{r}]:[E314 10:10:12.40000{r}000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=311, OpType=ALLGATHER, NumelIn=1024, "
        "NumelOut=4096, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.\n" for r in (0, 1, 3)))


def custom_allreduce_in_graph_capture():
    return analyze_text(vllm_tp(4, "0.27.1", ", disable_custom_all_reduce=False") +
                        "(Worker_TP1 pid=4202) INFO 03-14 09:13:09 [gpu_model_runner.py:4400] Capturing CUDA graphs "
                        "(mixed prefill-decode, PIECEWISE)\n"
                        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'an illegal memory access was "
                        "encountered'\n")


def index_out_of_bounds_assert():
    return analyze_text(
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:111: operator(): block: [0,0,0], thread: [3,0,0] "
        "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/serve/step.py", line 9, in step\n'
        "    ids = logits.argmax(-1).tolist()\n"
        "torch.AcceleratorError: CUDA error: device-side assert triggered\n")


EXAMPLES = {
    "flashinfer-mnnvl-allreduce-ima": lambda: analyze(str(HANDMADE / "mnnvl_incident")),
    "host-oom-killer": worker_killed,
    "nccl-watchdog-timeout": nccl_hang,
    "vllm-custom-allreduce-graph-capture-ima": custom_allreduce_in_graph_capture,
    "pytorch-index-out-of-bounds-assert": index_out_of_bounds_assert,
}

UNRELATED = {
    "no-failure": lambda: analyze_text(vllm_tp(2)),
    "oom": lambda: analyze(str(HANDMADE / "oom_during_prefill")),
    "startup": lambda: analyze(str(HANDMADE / "startup_failure")),
    "misaligned-address": lambda: analyze(str(DATA / "gpu/misaligned_address")),
    "host-segfault": lambda: analyze(str(DATA / "gpu/cpu_segv_core")),
    "tp4-oob-xid": lambda: analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree")),
}

_cases: dict = {}


def case_of(name: str):
    """Each example analysed once per session."""
    if name not in _cases:
        _cases[name] = {**EXAMPLES, **UNRELATED}[name]()
    return _cases[name]


def matched(case) -> dict:
    return {k.id: k for k in case.verdict.known_issues}


def entry_ids(entries) -> list[str]:
    return [e.id for e in entries]


# --- the data itself ------------------------------------------------------------------------

def test_every_builtin_entry_has_an_example():
    assert set(EXAMPLES) == {e.id for e in BUILTIN}, "add an example crash for the new entry to EXAMPLES"


@pytest.mark.parametrize("entry", BUILTIN, ids=entry_ids(BUILTIN))
def test_builtin_entry_is_complete(entry):
    assert entry.path == f"known_issues/{entry.id}.toml"
    assert entry.title and entry.status and entry.workaround and entry.does_not_prove
    assert all(r.startswith("https://") for r in entry.references)
    assert entry.errors or entry.failure_kinds or entry.alternatives
    for name in entry.errors:
        assert knowledge.lookup_error(name) is not None, f"{entry.id}: unknown error {name}"
    for kind in entry.failure_kinds:
        FailureKind(kind)                       # raises on a kind the verdict never has


@pytest.mark.parametrize("entry", BUILTIN, ids=entry_ids(BUILTIN))
def test_builtin_entry_matches_its_own_example(entry):
    case = case_of(entry.id)
    hit = matched(case).get(entry.id)
    assert hit is not None, f"{entry.id} does not match its example"
    assert hit.likelihood in ("likely", "possible")
    assert (hit.likelihood == "possible") == bool(hit.unknown)
    assert hit.workaround == entry.workaround and hit.does_not_prove == entry.does_not_prove
    assert hit.matched, "a match says what matched"
    assert entry.id in case.verdict.headline            # the headline names the matched issue


@pytest.mark.parametrize("entry, other", [(e, o) for e in BUILTIN for o in EXAMPLES if o != e.id],
                         ids=[f"{e.id}-vs-{o}" for e in BUILTIN for o in EXAMPLES if o != e.id])
def test_builtin_entry_does_not_match_other_entries_examples(entry, other):
    assert entry.id not in matched(case_of(other))


@pytest.mark.parametrize("entry, unrelated", [(e, u) for e in BUILTIN for u in UNRELATED],
                         ids=[f"{e.id}-vs-{u}" for e in BUILTIN for u in UNRELATED])
def test_builtin_entry_does_not_match_unrelated_crashes(entry, unrelated):
    assert entry.id not in matched(case_of(unrelated))


def rematch(entry, case, **changes):
    """The entry matched against the example's verdict with some findings changed."""
    verdict = dataclasses.replace(case.verdict, **changes)
    evidence = evidence_of(case.events)
    return match(entry, evidence, verdict)


def outside(key: str, condition: str) -> str | None:
    """A value that does not meet an environment condition."""
    if key in kb.VERSION_KEYS:
        return next((v for v in ("0.0.1", "0.24.0", "0.31.1", "0.7.0.post1", "99.0") if not kb.version_in(v, condition)),
                    None)
    return next((v for v in ("zz-never-matches", "True", "nccl") if not re.search(condition, v)), None)


@pytest.mark.parametrize("entry", BUILTIN, ids=entry_ids(BUILTIN))
def test_each_condition_of_an_entry_excludes_a_crash_that_does_not_meet_it(entry):
    case = case_of(entry.id)
    assert rematch(entry, case) is not None
    if entry.errors:
        other = knowledge.lookup_error("CUDA_ERROR_OUT_OF_MEMORY")
        assert rematch(entry, case, error=ErrorInfo(other, "x")) is None
        assert rematch(entry, case, error=None) is None
    if entry.failure_kinds:
        other = next(k for k in FailureKind if k.value not in entry.failure_kinds)
        assert rematch(entry, case, failure_kind=other) is None
    if entry.phases:
        other = next(p for p in ("startup", "decode", "prefill", "cuda-graph-capture") if p not in entry.phases)
        env = {**case.verdict.environment, "phase": other}
        assert rematch(entry, case, environment=env) is None
    for key, condition in entry.environment.items():
        value = outside(key, condition)
        assert value is not None, f"{entry.id}: no value outside {key} {condition!r}"
        env = {**case.verdict.environment, key: value}
        for alias in ("all_reduce_backend", "allreduce_backend") if key == "flashinfer_allreduce_backend" else ():
            env.pop(alias, None)
        assert rematch(entry, case, environment=env) is None, f"{key}={value} should exclude {entry.id}"
        # not revealed at all: a possible match, the key said unknown
        env = {k: v for k, v in case.verdict.environment.items() if k != key}
        hit = rematch(entry, case, environment=env)
        assert hit is not None and hit.likelihood == "possible" and key in hit.unknown


# --- single entries ---------------------------------------------------------------------------

def test_mnnvl_entry_is_possible_on_the_reconstructed_incident():
    hit = matched(case_of("flashinfer-mnnvl-allreduce-ima"))["flashinfer-mnnvl-allreduce-ima"]
    assert hit.likelihood == "possible" and hit.unknown == ("flashinfer",)
    assert "VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm" in hit.workaround
    assert any("mnnvl.py" in m or "SymmDeviceMemory" in m for m in hit.matched)


def test_mnnvl_entry_becomes_likely_when_every_condition_is_revealed():
    entry = next(e for e in BUILTIN if e.id == "flashinfer-mnnvl-allreduce-ima")
    case = case_of(entry.id)
    env = {**case.verdict.environment, "flashinfer": "0.6.18"}
    hit = rematch(entry, case, environment=env)
    assert hit.likelihood == "likely" and hit.unknown == () and "flashinfer=0.6.18" in hit.matched


def test_mnnvl_entry_excluded_by_a_fixed_version(tmp_path):
    log = (HANDMADE / "mnnvl_incident/server.log").read_text()
    (tmp_path / "server.log").write_text(log.replace("v0.30.0", "v0.31.1").replace("version 0.30.0", "version 0.31.1"))
    case = analyze(str(tmp_path))
    assert case.verdict.environment["vllm"] == "0.31.1"
    assert "flashinfer-mnnvl-allreduce-ima" not in matched(case)


def test_host_oom_killer_entry_on_a_real_recording(shared_case):
    case, _ = shared_case("C_sigkill_worker_tp1_mid_stream_tp2")
    assert matched(case)["host-oom-killer"].likelihood == "likely"
    b, _ = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    assert "host-oom-killer" not in matched(b)


def test_custom_allreduce_entry_needs_the_custom_all_reduce_enabled():
    case = case_of("vllm-custom-allreduce-graph-capture-ima")
    assert matched(case)["vllm-custom-allreduce-graph-capture-ima"].likelihood == "likely"
    disabled = analyze_text(vllm_tp(4, "0.27.1", ", disable_custom_all_reduce=True") +
                            "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:164 'an illegal memory access "
                            "was encountered'\n")
    assert "vllm-custom-allreduce-graph-capture-ima" not in matched(disabled)


def test_index_assert_entry_needs_an_index_assert():
    other_assert = analyze_text(
        "/srv/kernels/sampler.cu:40: void top_k_kernel(const float*, int): block: [0,0,0], thread: [1,0,0] "
        "Assertion `k <= vocab` failed.\n"
        "torch.AcceleratorError: CUDA error: device-side assert triggered\n")
    assert other_assert.verdict.error.name == "CUDA_ERROR_ASSERT"
    assert "pytorch-index-out-of-bounds-assert" not in matched(other_assert)


# --- user entries: --kb ---------------------------------------------------------------------------

TEAM_ENTRY = '''id = "team-misaligned-pack"
title = "our pack_kv_header kernel writes unaligned headers"
status = "ours, open"
references = []
workaround = "pad headers to 4 bytes"
does_not_prove = "any misaligned write looks like this"
[match]
errors = ["CUDA_ERROR_MISALIGNED_ADDRESS"]
[[match.any]]
why = "the pack kernel faulted"
origin_kernel = "pack_kv"
'''


def kb_dir(tmp_path, name: str, files: dict[str, str]):
    folder = tmp_path / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def test_user_kb_dir_adds_entries(tmp_path):
    folder = kb_dir(tmp_path, "team", {"pack.toml": TEAM_ENTRY, "notes.txt": "not an entry"})
    entries = kb.load_dirs([str(folder)])
    assert {e.id for e in BUILTIN} < {e.id for e in entries}
    case = analyze(str(DATA / "gpu/misaligned_address"), kb_dirs=[str(folder)])
    hit = matched(case)["team-misaligned-pack"]
    assert hit.likelihood == "likely" and "the pack kernel faulted" in hit.matched
    # and it is the user's entry that does not match elsewhere
    assert "team-misaligned-pack" not in matched(analyze(str(HANDMADE / "mnnvl_incident"), kb_dirs=[str(folder)]))


def test_a_user_entry_replaces_a_builtin_with_the_same_id(tmp_path):
    override = TEAM_ENTRY.replace('id = "team-misaligned-pack"', 'id = "host-oom-killer"')
    entries = kb.load_dirs([str(kb_dir(tmp_path, "team", {"mine.toml": override}))])
    (entry,) = [e for e in entries if e.id == "host-oom-killer"]
    assert entry.errors == ("CUDA_ERROR_MISALIGNED_ADDRESS",)
    assert len(entries) == len(BUILTIN)


@pytest.mark.parametrize("text, message", [
    ('id = "x"\n[match]\nenvironment = {vllm = "not a range"}\n', "missing"),
    ("id = [unclosed\n", "not valid TOML"),
    (TEAM_ENTRY.replace("origin_kernel", "origin_kernal"), "unknown match key"),
    (TEAM_ENTRY.replace('origin_kernel = "pack_kv"', 'origin_kernel = "pack_kv("'), "not a valid regular expression"),
    (TEAM_ENTRY + "[match.environment]\nvllm = \"newer than 0.9\"\n", "is not a version range"),
    (TEAM_ENTRY.split("[match]")[0] + "[match]\n", "names no evidence"),
], ids=["missing-keys", "bad-toml", "unknown-key", "bad-regex", "bad-version-range", "no-evidence"])
def test_bad_user_entries_are_clear_errors(tmp_path, text, message):
    folder = kb_dir(tmp_path, "bad", {"broken.toml": text})
    with pytest.raises(kb.KnowledgeBaseError, match=message) as raised:
        kb.load_dirs([str(folder)])
    assert "broken.toml" in str(raised.value)


def test_kb_option_on_the_command_line(tmp_path):
    folder = kb_dir(tmp_path, "team", {"pack.toml": TEAM_ENTRY})
    runner = CliRunner()
    result = runner.invoke(main, ["analyze", str(DATA / "gpu/misaligned_address"), "--kb", str(folder),
                                  "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert "team-misaligned-pack" in {k["id"] for k in report["known_issues"]}
    missing = runner.invoke(main, ["analyze", str(DATA / "gpu/misaligned_address"), "--kb", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a directory" in missing.output
    bad = kb_dir(tmp_path, "bad", {"broken.toml": "id = [unclosed\n"})
    broken = runner.invoke(main, ["analyze", str(DATA / "gpu/misaligned_address"), "--kb", str(bad)])
    assert broken.exit_code == 2 and "broken.toml" in broken.output


def test_version_ranges():
    assert kb.version_in("0.30.0", ">=0.25,<0.31.1")
    assert not kb.version_in("0.31.1", ">=0.25,<0.31.1")
    assert kb.version_in("0.31.0rc1", ">=0.25,<0.31.1")            # pre-releases count
    assert not kb.version_in("not-a-version", ">=0.25")           # unknown, not a crash
