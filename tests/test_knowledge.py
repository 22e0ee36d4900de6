"""The catalogues under forensics/data (forensics/knowledge.py): each is reviewed like
code, and each entry's embedded samples are checked here, parametrised over the data so
that a new entry is tested without touching this file.  A few negative cases make sure
ordinary traffic is not read as an error.
"""

from __future__ import annotations

import re

import pytest

from forensics import knowledge
from forensics.events import Frame, Kind, PyException, Severity
from forensics.parsers.text import classify, messages
from forensics.rules.environment import Environment
from tests.helpers import event, evidence_of, parse_text, run_rules

# --- CUDA errors ----------------------------------------------------------------------------

ERRORS = knowledge.cuda_errors()
_LOOKUP_BUGS: dict[str, str] = {}


def test_cuda_error_catalogue_is_well_formed():
    names = [e.name for e in ERRORS]
    assert len(names) == len(set(names))
    cuda = [e for e in ERRORS if e.family == "cuda"]
    codes = [e.code for e in cuda]
    assert len(codes) == len(set(codes)) and None not in codes
    for e in ERRORS:
        assert e.family in ("cuda", "cublas", "cudnn", "nccl"), e.name
        assert isinstance(e.sticky, bool) and e.message, e.name
    for e in cuda:
        assert e.name.startswith("CUDA_ERROR_") and e.runtime_name.startswith("cudaError"), e.name
    # the sticky errors are the ones that poison a context
    sticky = {e.name for e in cuda if e.sticky}
    assert {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_FAILED",
            "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_ILLEGAL_INSTRUCTION"} <= sticky
    assert "CUDA_ERROR_OUT_OF_MEMORY" not in sticky


@pytest.mark.parametrize("err", [
    pytest.param(e, id=e.name, marks=[pytest.mark.xfail(strict=True, reason=_LOOKUP_BUGS[e.name])]
                 if e.name in _LOOKUP_BUGS else [])
    for e in ERRORS if e.family == "cuda"])
def test_every_cuda_error_is_found_by_code_name_runtime_name_and_message(err):
    for key in (err.code, str(err.code), err.name, err.runtime_name, err.runtime_name.lower(), err.message,
                f"'{err.message}'"):
        assert knowledge.lookup_error(key) is err, key


def test_library_statuses_are_found_by_name():
    for e in ERRORS:
        if e.family != "cuda":
            assert knowledge.lookup_error(e.name) is e, e.name
    assert knowledge.lookup_error(None) is None
    assert knowledge.lookup_error("not an error") is None


# --- CUDA error forms ----------------------------------------------------------------------

FORM_SAMPLES = [pytest.param(form, sample, id=f"{form['id']}-{i}")
                for form in knowledge.load("cuda_error_forms")["form"] for i, sample in enumerate(form["samples"])]


def test_every_error_form_has_samples_and_its_triggers_are_in_them():
    for form in knowledge.load("cuda_error_forms")["form"]:
        assert form["samples"], form["id"]
        for sample in form["samples"]:
            assert any(t in sample["sample"] for t in form["triggers"]), form["id"]


@pytest.mark.parametrize("form, sample", FORM_SAMPLES)
def test_error_form_sample_yields_what_it_declares(form, sample):
    found = knowledge.find_cuda_error(sample["sample"])
    assert found is not None
    assert found.form == form["id"]                     # this form, not a more general one
    assert found.error.name == sample["name"]
    for key in ("api", "file", "line"):
        if key in sample:
            assert getattr(found, key) == sample[key], key


@pytest.mark.parametrize("line", [
    "INFO 01-02 03:04:05 [x.py:1] Avg prompt throughput: 12.0 tokens/s, GPU KV cache usage: 4.1%",
    "Received request cmpl-1: prompt: 'tell me about CUDA error handling'",
    "Using FLASH_ATTN attention backend.",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67",
    "CUDA graphs can take additional 1~3 GiB memory per GPU.",
    "NCCL INFO cudaDriverVersion 12080",
    "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "ncclCommInitRank comm 0x55 rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId db000 - Init COMPLETE",
    "Setting PYTORCH_CUDA_ALLOC_CONF to expandable_segments:True",
    "CUDA_VISIBLE_DEVICES=0,1,2,3",
    "custom_all_reduce.cuh:368: cudaIpcOpenMemHandle() succeeded for peer 1",
    "Memory profiling takes 2.1 seconds; total_gpu_memory (79.10GiB) x gpu_memory_utilization (0.90)",
])
def test_ordinary_lines_are_not_cuda_errors(line):
    assert knowledge.find_cuda_error(line) is None
    assert classify.cuda_error(line) is None


def test_ordinary_traffic_makes_no_error_events():
    parsed = parse_text("INFO 01-02 03:04:05 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                        "Avg generation throughput: 77.9 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache "
                        "usage: 4.1%, Prefix cache hit rate: 0.0%\n"
                        'INFO:     192.168.40.6:51844 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
                        "node7:501:501 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
    assert parsed.events == []
    assert parsed.counted_lines == 3 and parsed.unparsed_lines == 0
    kv = next(t for t in parsed.traffic if t.template == "kv-cache-stats")
    assert kv.facts["kv_cache_usage_pct"] == 4.1


def test_the_message_text_fallback_finds_an_error_anywhere():
    found = knowledge.find_cuda_error("worker 3 reported: an illegal memory access was encountered; exiting")
    assert found is not None and (found.form, found.error.code) == ("message-text", 700)


# --- messages -------------------------------------------------------------------------------

MESSAGE_ENTRIES = knowledge.load("messages")["message"]
_MESSAGE_BUGS: dict[str, str] = {}


def _message_samples():
    out = []
    for entry in MESSAGE_ENTRIES:
        for i, sample in enumerate(entry["samples"]):
            ident = f"{entry['id']}-{i}"
            marks = [pytest.mark.xfail(strict=True, reason=_MESSAGE_BUGS[ident])] if ident in _MESSAGE_BUGS else []
            out.append(pytest.param(entry, sample, id=ident, marks=marks))
    return out


def test_message_catalogue_is_well_formed():
    ids = [e["id"] for e in MESSAGE_ENTRIES]
    assert len(ids) == len(set(ids))
    kinds = {k.value for k in Kind}
    for entry in MESSAGE_ENTRIES:
        assert entry["kind"] in kinds, entry["id"]
        assert entry["samples"], entry["id"]
        assert entry.get("severity") in (None, "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), entry["id"]
        pattern = re.compile(entry["pattern"])
        groups = set(pattern.groupindex)
        assert set(entry.get("fields", {})) <= groups, entry["id"]
        for key, group in entry.get("environment", {}).items():
            assert group.startswith("=") or group in groups, (entry["id"], key)
        for name in entry.get("structured", {}):
            assert name in groups and entry["structured"][name] in messages.READERS, entry["id"]
        for sample in entry["samples"]:
            assert any(t in sample["text"] for t in entry["triggers"]), (entry["id"], sample["text"])


@pytest.mark.parametrize("entry, sample", _message_samples())
def test_message_sample_is_classified_as_its_entry_with_its_fields(entry, sample):
    found = messages.classify(sample["text"])
    assert found is not None and found.entry.id == entry["id"]
    for key, want in sample.items():
        if key == "text":
            continue
        base = key.rstrip("0123456789")            # alternative groups are merged (exit_code2 -> exit_code)
        assert found.fields.get(base) == want, key
    for name, types in (entry.get("fields") or {}).items():
        value = found.fields.get(name.rstrip("0123456789"))
        if value is not None:
            assert isinstance(value, {"int": int, "float": float, "str": str}[types]), name


def test_structured_payloads_are_read():
    found = messages.classify("Initializing a V1 LLM engine (v0.8.5.post1) with config: model='Qwen/Qwen2.5-7B', "
                              "tensor_parallel_size=4, enforce_eager=False")
    assert found.fields["config"] == {"model": "Qwen/Qwen2.5-7B", "tensor_parallel_size": 4, "enforce_eager": False}
    found = messages.classify("non-default args: {'model': 'm', 'tensor_parallel_size': 2}")
    assert found.fields["args"] == {"model": "m", "tensor_parallel_size": 2}
    found = messages.classify("Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], "
                              "scheduled_cached_reqs=CachedRequestData(req_ids=['cmpl-1'], num_computed_tokens=[512]),"
                              " num_scheduled_tokens={'cmpl-1': 512}, total_num_scheduled_tokens=512)")
    dump = found.fields["dump"]
    assert (dump["num_computed_tokens"], dump["total_num_scheduled_tokens"], dump["request_ids"]) == \
        (512, 512, "'cmpl-1'")
    assert dump["new_requests"] is False


def test_message_kind_of_a_relay_keeps_its_kind_and_carries_the_error():
    kind, severity, attrs, traffic = classify.message_kind(
        "Worker failed with error 'CUDA error: an illegal memory access was encountered', please check the stack "
        "trace above for the root cause", "ERROR")
    assert (kind, severity, traffic) == (Kind.ENGINE_WORKER_FAILED, Severity.ERROR, None)
    assert attrs["cuda_error"].code == 700 and attrs["message_id"] == "engine-worker-failed"


def test_message_kind_of_traffic_is_a_template():
    kind, _, fields, traffic = classify.message_kind("Added request cmpl-1a2b3c-0.", "INFO")
    assert (kind, traffic, fields["request_id"]) == (None, "request-received", "cmpl-1a2b3c-0")


def test_continuations_are_prefixes_the_parser_joins():
    prefixes = knowledge.message_continuations()
    assert "CUDA kernel errors might be asynchronously reported" in prefixes
    parsed = parse_text("RuntimeError: CUDA error: an illegal memory access was encountered\n"
                        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                        "stacktrace below might be incorrect.\n"
                        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n")
    (event,) = parsed.events
    assert "CUDA_LAUNCH_BLOCKING=1" in event.attrs["exception_message"]
    assert parsed.unparsed_lines == 0


# --- processes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, role, rank", [
    ("APIServer", "api-server", None), ("ApiServer_3", "api-server", None),
    ("EngineCore", "engine-core", None), ("EngineCore_DP1", "engine-core", None),
    ("Worker_TP2", "worker", 2), ("Worker_DP0_PP1_TP3_EP3", "worker", 3), ("Worker_PP1_TP0_DCP0", "worker", 0),
    ("VllmWorker TP1", "worker", 1), ("VllmWorker PP1_TP0", "worker", 0),
    ("VllmWorker rank=3", "worker", 3), ("VllmWorker-2", "worker", 2),
    ("RayWorkerProc rank=4", "worker", 4), ("RayWorkerWrapper", "worker", None),
    ("sglang::scheduler_TP5", "worker", 5), ("sglang::scheduler_DP1_TP3_EP3", "worker", 3),
    ("sglang::detokenizer", "api-server", None),
    ("raylet", "ray-system", None), ("torchrun", "launcher", None),
    ("python3", None, None), ("", None, None), (None, None, None),
])
def test_process_names_give_role_and_rank(name, role, rank):
    assert knowledge.role_and_rank(name) == (role, rank)


@pytest.mark.parametrize("message, rank", [
    ("[PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout", 3),
    ("[PG 0 Rank 2] Timeout at NCCL work: 1", 2),
    ("[Rank 1] NCCL watchdog thread terminated", 1),
    ("[rank5] some message", 5),
    ("[c10d] [rank6] barrier timed out", 6),
    ("[worker 4] step failed", 4),
    ("Failed to initialize executor on rank 7: boom", 7),
    ("[TP0] Scheduler hit an exception: Traceback (most recent call last):", 0),
    ("  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with exception: boom", 1),
    ("[DP1 TP3 EP3] Scheduler hit an exception: boom", 3),
])
def test_rank_hints_name_the_writers_rank(message, rank):
    hints = [re.compile(h["pattern"]) for h in knowledge.load("processes")["rank_hint"]]
    matches = [h.match(message) for h in hints]
    assert [int(m.group("rank")) for m in matches if m] == [rank]
    # ... and the text parser uses them for lines without another identity
    (e,) = parse_text(f"ERROR 01-02 03:04:05 [x.py:1] {message}\n").events
    assert e.rank == rank


@pytest.mark.parametrize("message", ["ranked 3rd in the list", "the [Rank 3] in the middle", "rank 5 of 8 ready"])
def test_rank_hints_are_anchored(message):
    for hint in knowledge.load("processes")["rank_hint"]:
        assert re.match(hint["pattern"], message) is None


@pytest.mark.parametrize("entry", knowledge.load("processes")["quoted_process"], ids=lambda e: e["id"])
def test_quoted_process_samples(entry):
    found = knowledge.quoted_process(entry["sample"])
    assert found is not None and found["id"] == entry["id"]
    named = set(re.compile(entry["pattern"]).groupindex)
    assert named <= set(found) | {"ip", "process", "pid", "rank"}
    assert all(found[k] for k in named)


def test_quoted_process_fields():
    ray = "ray::RayWorkerWrapper.execute_method() (pid=4242, ip=10.1.2.3, actor_id=ab12)"
    assert knowledge.quoted_process(ray) == {"id": "ray-task-error", "process": "RayWorkerWrapper", "pid": "4242",
                                             "ip": "10.1.2.3"}
    assert knowledge.quoted_process("-- Process 3 terminated with the following error:") == \
        {"id": "torch-spawn", "rank": "3"}
    assert knowledge.quoted_process("RuntimeError: nothing quoted here") is None


_V0_TAIL = ("(VllmWorkerProcess pid=7) WARNING 01-02 03:04:03 [multiproc_worker_utils.py:1] worker 1 slow\n"
            "ERROR 01-02 03:04:05 [model_runner.py:1] RuntimeError: CUDA error: an illegal memory access was "
            "encountered\n")


@pytest.mark.parametrize("marker", knowledge.vllm_v0_markers())
def test_a_vllm_v0_marker_makes_unprefixed_engine_records_rank_0(marker):
    parsed = parse_text(f"ERROR 01-02 03:04:04 [llm_engine.py:10] {marker} something\n" + _V0_TAIL)
    (error,) = [e for e in evidence_of(parsed.events).events if e.kind == Kind.CUDA_ERROR]
    assert error.rank == 0
    # without a V0 line the same record has no rank
    (error,) = [e for e in evidence_of(parse_text(_V0_TAIL).events).events if e.kind == Kind.CUDA_ERROR]
    assert error.rank is None


# --- phases ---------------------------------------------------------------------------------

def _phase(events):
    return run_rules(evidence_of(events), until=Environment)["environment"].get("phase")


@pytest.mark.parametrize("text", knowledge.startup_messages())
def test_each_startup_message_marks_a_startup_failure(text):
    assert _phase([event(Kind.LOG, f"{text}. See root cause above.", severity=Severity.ERROR)]) == "startup"
    # an informational line that mentions it is no failure
    assert _phase([event(Kind.LOG, f"{text}. See root cause above.", severity=Severity.INFO)]) is None


@pytest.mark.parametrize("entry", knowledge.load("phases")["startup"]["frames"],
                         ids=lambda e: f"{e['function']}@{e.get('file', '*')}")
def test_each_startup_frame_marks_a_startup_failure(entry):
    path = f"/opt/venv/lib/python3.12/site-packages/{entry.get('file', 'vllm/worker/worker.py')}x.py"
    assert knowledge.startup_frame(entry["function"], path)
    if "file" in entry:
        assert not knowledge.startup_frame(entry["function"], "/srv/elsewhere.py")
    chain = (PyException("RuntimeError", "CUDA error: out of memory",
                         (Frame(path, 10, entry["function"], "x()"),)),)
    assert _phase([event(Kind.CUDA_ERROR, "RuntimeError: CUDA error: out of memory", chain=chain)]) == "startup"


def test_a_frame_outside_startup_is_no_startup_phase():
    assert not knowledge.startup_frame("forward", "/srv/model.py")
    chain = (PyException("RuntimeError", "boom", (Frame("/srv/model.py", 3, "forward", "x()"),)),)
    assert _phase([event(Kind.EXCEPTION, "RuntimeError: boom", chain=chain)]) is None


def test_phase_markers_of_the_message_catalogue():
    phases = {e["id"]: e["phase"] for e in MESSAGE_ENTRIES if "phase" in e}
    assert phases == {"cuda-graph-capture": "cuda-graph-capture", "cuda-graph-captured": "serving"}
    capture = event(Kind.CONFIG, "Capturing CUDA graphs", line=1, phase_marker="cuda-graph-capture")
    failure = event(Kind.CUDA_ERROR, "RuntimeError: CUDA error: an illegal memory access was encountered", line=2)
    assert _phase([capture, failure]) == "cuda-graph-capture"


# --- signals, surface APIs, noise ------------------------------------------------------------

def test_signals():
    sig = knowledge.signals()
    assert (sig[6], sig[9], sig[11], sig[15]) == ("SIGABRT", "SIGKILL", "SIGSEGV", "SIGTERM")
    assert knowledge.signal_name(-9) == "SIGKILL"            # an exit status of -9
    assert knowledge.signal_name(None) == "an unknown signal"
    assert knowledge.signal_name(77) == "signal 77"


@pytest.mark.parametrize("code, api", [
    ("checkCudaErrors(cuda.cuMemFree(self.signal_pads_dev))", "cuMemFree"),
    ('print("next token:", next_token.item())', "Tensor.item"),
    ("torch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("self.graph.replay()", "CUDAGraph.replay"),
    ("dist.all_reduce(t, group=g)", "all_reduce"),
    ("ncclCommInitRankConfig(&comm, n, id, r, &cfg)", "ncclCommInitRankConfig"),
    ("return x + 1", None),
    (None, None),
])
def test_surface_apis(code, api):
    assert knowledge.surface_api_of(code) == api


def test_error_check_frames_and_library_files():
    checks = knowledge.error_check_frames()
    assert any(p.search("checkCudaErrors") for p in checks)
    assert not any(p.search("forward") for p in checks)
    files = knowledge.library_internal_files()
    assert any(p.search("/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py") for p in files)
    assert any(p.search("/usr/lib/python3.12/threading.py") for p in files)
    assert not any(p.search("/opt/venv/lib/python3.12/site-packages/vllm/worker.py") for p in files)


@pytest.mark.parametrize("line, noise", [
    ("", True), ("   ", True), ("=" * 40, True), ("--", True),
    ("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.2s/it]", True),
    ("/opt/venv/lib/python3.11/site-packages/x.py:3: UserWarning: careful", True),
    ("[New Thread 0x7ffff1bff000 (LWP 1659)]", True),
    ("╭──── logs ────╮", True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ("Segmentation fault (core dumped)", False),
])
def test_noise_catalogue(line, noise):
    from forensics.parsers.text.stream import is_noise
    assert is_noise(line) is noise


def _all_triggers() -> list[str]:
    return sorted({t for entry in knowledge.message_patterns() for t in entry.triggers})


def test_every_trigger_is_found_even_inside_a_longer_one(monkeypatch):
    """A trigger that starts where a longer one starts ("CUDA error" in "CUDA error: out
    of memory") still makes its entries candidates - with the automaton and without."""
    triggers = _all_triggers()
    nested = [(short, long) for long in triggers for short in triggers if short != long and short in long]
    assert nested                       # the catalogue has such pairs: the test means something
    for short, long in nested:
        assert {short, long} <= messages._triggers_in(f"x {long} y")
    monkeypatch.setattr(messages, "_trigger_automaton", lambda: None)
    for short, long in nested:
        assert {short, long} <= messages._triggers_in(f"x {long} y")


def test_the_automaton_and_the_regex_find_the_same_triggers(monkeypatch):
    texts = [f"{a} and then {b}" for a, b in zip(_all_triggers(), reversed(_all_triggers()))] + \
        ["", "nothing here", "CUDA error: an illegal memory access was encountered"]
    with_automaton = [messages._triggers_in(t) for t in texts]
    monkeypatch.setattr(messages, "_trigger_automaton", lambda: None)
    assert [messages._triggers_in(t) for t in texts] == with_automaton
    assert all(with_automaton[:-3])
