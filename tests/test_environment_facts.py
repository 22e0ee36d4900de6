"""Environment facts stated in free text (data/environment_facts.toml), read by the
environment rule from every event's message and every traffic template's examples.

Every line here is hand-made in the shape of the public line its catalogue entry cites;
none is a reporter's text.
"""

from __future__ import annotations

import re

import pytest

from forensics import knowledge
from forensics.events import Kind, Severity
from forensics.parsers.base import Traffic
from forensics.rules.environment import Environment
from tests.helpers import analyze_text, event, evidence_of, run_rules
from tests.pumps import Pump, linear, pumps

FACTS = knowledge.load("environment_facts")["fact"]
# lines that stalled patterns before (issue 20; tests/test_linear_time.py): a padded error
# message, a config dump's start repeated, and this catalogue's own starts repeated
EXTRA = [Pump("RuntimeError: CUDA error: an illegal memory access was encountered", " ", "x"),
         Pump("", "args: Namespace(", ""), Pump("", "--tp ", "x"), Pump("", "model='", ""),
         Pump("", "NCCL version ", "x"), Pump("Starting to load model ", "x", " y")]
SAMPLES = [pytest.param(entry, sample, id=f"{entry['key']}-{i}-{j}")
           for i, entry in enumerate(FACTS) for j, sample in enumerate(entry["samples"])]


def environment(events, **kw) -> dict:
    return run_rules(evidence_of(events, **kw), until=Environment)["environment"]


# --- the catalogue ---------------------------------------------------------------------------

def test_catalogue_is_well_formed():
    for entry in FACTS:
        pattern = re.compile(entry["pattern"])
        assert entry["samples"], entry["key"]
        assert entry.get("type", "text") in ("text", "int", "bool"), entry["key"]
        # one named group, `value`; or none and a constant
        assert set(pattern.groupindex) <= {"value"}, entry["pattern"]
        assert ("value" in pattern.groupindex) != ("value" in entry), entry["pattern"]
        for sample in entry["samples"]:
            if not sample.get("none"):
                assert any(t in sample["text"] for t in entry["triggers"]), (entry["pattern"], sample["text"])


@pytest.mark.parametrize(("entry", "sample"), SAMPLES)
def test_each_sample_gives_its_value(entry, sample):
    if sample.get("none"):
        # the entry itself finds nothing there
        assert re.search(entry["pattern"], sample["text"]) is None, sample["text"]
        return
    # and the catalogue (an earlier entry for the key first) gives the value
    found = knowledge.environment_facts_in(sample["text"]).get(entry["key"])
    assert found == sample["value"] and type(found) is type(sample["value"]), (sample["text"], found)


@pytest.mark.parametrize("entry", [pytest.param(e, id=f"{e['key']}-{i}") for i, e in enumerate(FACTS)])
def test_each_pattern_is_linear(entry):
    # searched over messages up to 1 MiB (data/messages.toml's header): as
    # tests/test_linear_time.py checks the other catalogues
    pattern = re.compile(entry["pattern"])
    samples = [s["text"] for s in entry["samples"]]
    failures = []
    for pump in pumps(pattern.pattern, pattern.flags, samples, EXTRA):
        why = linear(pattern.search, pump)
        if why:
            failures.append(f"{pump}: {why}")
            if len(failures) >= 2:
                break
    assert not failures, f"{entry['pattern']!r} is super-linear on:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize("text, facts", [
    # the forms the task names, each in a line of its own shape
    ("NCCL version 2.20.5+cuda12.4", {"nccl": "2.20.5"}),
    ("vLLM is using nccl==2.21.5", {"nccl": "2.21.5"}),
    ("NCCL_VERSION=2.21.5", {"nccl": "2.21.5"}),
    ("NCCL version (2, 18, 1)", {"nccl": "2.18.1"}),
    ("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024", {"driver": "550.54.15"}),
    ("| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |",
     {"driver": "550.54.15", "cuda_driver_api": "12.4"}),
    ("host has driver version 535", {"driver": "535"}),
    ("EngineArgs(tensor_parallel_size=4)", {"tensor_parallel_size": 4}),
    ("tensor parallel size: 4", {"tensor_parallel_size": 4}),
    ("--tensor-parallel-size 4", {"tensor_parallel_size": 4}),
    ("--tp 4", {"tensor_parallel_size": 4}),
    ("tp_size=4", {"tensor_parallel_size": 4}),
    ("data parallel size: 2", {"data_parallel_size": 2}),
    ("LLM(model='gpt2')", {"model": "gpt2"}),
    ("--model gpt2", {"model": "gpt2"}),
    ("vllm serve gpt2", {"model": "gpt2"}),
    ("enforce_eager=True", {"enforce_eager": True}),
    ("max_model_len=29000", {"max_model_len": 29000}),
    ("The model's max seq len (29000) is larger than the maximum number of tokens", {"max_model_len": 29000}),
    # not facts
    ("INFO 01-05 08:11:02 llm_engine.py:100] Avg prompt throughput: 0.0 tokens/s", {}),
    ("CUDA driver version is insufficient for CUDA runtime version", {}),
    ("", {}),
])
def test_the_forms_of_each_key(text, facts):
    assert knowledge.environment_facts_in(text) == facts


def test_known_keys_are_not_looked_for():
    text = "vllm serve m --tensor-parallel-size 8 --max-model-len 4096"
    assert knowledge.environment_facts_in(text, known={"tensor_parallel_size": 2}) == \
        {"max_model_len": 4096, "model": "m"}


# --- the environment rule --------------------------------------------------------------------

def test_facts_from_event_messages():
    env = environment([
        event(Kind.NCCL, "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                         "unhandled cuda error, NCCL version 2.19.3", line=1),
        event(Kind.LOG, "launching: vllm serve org/m-7b --tensor-parallel-size 2 --enforce-eager", line=2,
              severity=Severity.WARNING),
    ])
    assert (env["nccl"], env["tensor_parallel_size"], env["model"], env["enforce_eager"]) == \
        ("2.19.3", 2, "org/m-7b", True)


def test_the_first_value_wins():
    # the engine's config line (read as key/values) comes first: a later free-text line
    # does not replace it
    env = environment([
        event(Kind.CONFIG, "engine config", line=1, severity=Severity.INFO,
              config={"tensor_parallel_size": 4, "model": "org/a"}),
        event(Kind.LOG, "--tensor-parallel-size 8 --model org/b", line=2, severity=Severity.WARNING),
    ])
    assert (env["tensor_parallel_size"], env["model"]) == (4, "org/a")


def test_facts_from_traffic_examples():
    # a start-up INFO line is ordinary traffic: counted per template, its first line kept
    traffic = Traffic("EngineCore_DP0", 41, None, "vllm:__init__.py:3575", "server.log", count=1, first_line=7,
                      last_line=7, examples=["(EngineCore_DP0 pid=41) INFO 03-02 10:00:00 [__init__.py:3575] "
                                             "Cudagraph is disabled under eager mode"])
    run = run_rules(evidence_of([], traffic=(traffic,)), until=Environment)
    assert run["environment"]["enforce_eager"] is True
    assert run["environment_sources"]["enforce_eager"] == "server.log:7"


def test_a_world_of_one_process_has_no_parallelism():
    env = environment([event(Kind.CONFIG, "MPI size: 1, MPI local size: 1, rank: 0", severity=Severity.INFO,
                             message_id="trtllm-mpi-size", world_size=1, local_size=1, mpi_rank=0)])
    assert (env["world_size"], env["tensor_parallel_size"], env["pipeline_parallel_size"]) == (1, 1, 1)
    env = environment([event(Kind.CONFIG, "MPI size: 4, MPI local size: 4, rank: 0", severity=Severity.INFO,
                             message_id="trtllm-mpi-size", world_size=4, local_size=4, mpi_rank=0)])
    assert "tensor_parallel_size" not in env


def test_facts_through_the_pipeline():
    # a vLLM start-up paste: the NCCL line is traffic, the config comes from free text
    text = ("INFO 03-02 10:00:00 [pynccl.py:70] vLLM is using nccl==2.26.2\n"
            "INFO 03-02 10:00:01 [api_server.py:1000] vLLM API server version 0.9.2\n")
    env = analyze_text(text).verdict.environment
    assert env["nccl"] == "2.26.2" and env["vllm"] == "0.9.2"
