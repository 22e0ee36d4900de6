"""Stories (forensics/story.py) and the report's self-consistency over every recording.

Unit tests on hand-built events: what each line says about its process, and the order
rule (a failure after noticing another's is a consequence).  Properties over every
recording, every hand-made fixture and generated consoles (docs/reasoning.md): the first
failure is never healthy or collateral; "No failure found" never stands beside a failed
process, a CUDA error or an HTTP 5xx; the faulting process is the origin row; the
verdict's collateral is the table's; a process with a failure of its own is never
healthy; every status but healthy rests on an observation of its story (or on a rank
the inputs do not show).
"""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

import pytest

from forensics import story
from forensics.events import Event, Kind, freeze
from forensics.report import Options, render
from forensics.report.document import build
from forensics.story import Seen
from forensics.timeline import MAIN_PROCESS, ProcessTable
from forensics.verdict import FailureKind, Status
from tests.helpers import analyze_text
from tests.test_reports import RECORDINGS, case_of

T0 = datetime(2026, 12, 4, 9, 0, 0)


def ev(kind: Kind, message: str, *, pid=None, rank=None, line=1, seconds=0, source="log", **attrs) -> Event:
    return Event(kind=kind, message=message, source=source, line=line, seq=line, pid=pid, rank=rank,
                 time=T0 + timedelta(seconds=seconds), attrs=freeze(attrs))


def stories_of(*events: Event) -> story.Stories:
    return story.tell(list(events), ProcessTable.learn(list(events)))


# --- what a line says about its process ---------------------------------------------------

@pytest.mark.parametrize(("event", "role", "seen"), [
    (ev(Kind.CUDA_ERROR, "RuntimeError: CUDA error: an illegal memory access was encountered"), "worker",
     Seen.OWN_ERROR),
    (ev(Kind.EXCEPTION, "EngineDeadError"), "api-server", Seen.RELAY),
    (ev(Kind.EXCEPTION, "ValueError: bad"), None, Seen.OWN_ERROR),
    (ev(Kind.PEER_FAILURE, "Connection closed by peer"), "worker", Seen.PEER_LOSS),
    (ev(Kind.COLLECTIVE_TIMEOUT, "Watchdog caught collective operation timeout"), "worker", Seen.WAITING),
    (ev(Kind.FATAL_SIGNAL, "terminate called after throwing ... Watchdog caught collective operation timeout"),
     "worker", Seen.WAITING),
    (ev(Kind.SANITIZER, "Invalid __global__ write", report="memcheck"), None, Seen.DEVICE_FAULT),
    (ev(Kind.SANITIZER, "ERROR SUMMARY: 1 error", report="summary"), None, None),
    (ev(Kind.HTTP, "POST /v1/completions 500", status=500), "api-server", Seen.RELAY),
    (ev(Kind.HTTP, "POST /v1/completions 200", status=200), "api-server", None),
    (ev(Kind.SHUTDOWN, "Shutting down"), None, Seen.SHUTDOWN),
    (ev(Kind.EXIT, "exited", exit_code=0), None, Seen.EXITED),
])
def test_what_a_line_says_about_its_process(event, role, seen):
    assert story.seen_in(event, role, None) == seen


def test_a_failure_after_noticing_a_peer_is_a_consequence_and_a_header_is_not_noticing():
    stories = stories_of(
        ev(Kind.PEER_FAILURE, "Connection closed by peer", pid=11, rank=1, line=1),
        ev(Kind.EXCEPTION, "RuntimeError: gloo", pid=11, rank=1, line=2, seconds=1, exception_type="RuntimeError"),
        ev(Kind.WORKER_EXCEPTION, "WorkerProc hit an exception.", pid=10, rank=0, line=3, seconds=2),
        ev(Kind.CUDA_ERROR, "CUDA error: an illegal memory access", pid=10, rank=0, line=4, seconds=2),
    )
    by_rank = {s.rank: s for s in stories.stories}
    assert by_rank[1].noticed_before_failing is not None and by_rank[1].own_failure is not None
    assert by_rank[0].noticed_before_failing is None and by_rank[0].own_failure.event.kind == Kind.CUDA_ERROR


def test_a_death_reported_by_another_process_is_in_the_dead_ones_story():
    stories = stories_of(
        ev(Kind.LOG, "started", pid=20, rank=0, line=1),
        ev(Kind.WORKER_DIED, "Worker proc died unexpectedly", pid=5, line=2, subject_pid=20, exit_code=-11),
    )
    dead = next(s for s in stories.stories if s.pid == 20)
    assert [o.seen for o in dead.observations] == [Seen.KILLED]
    assert dead.observations[0].reported_by == "pid:5"


def test_a_console_that_names_no_process_is_the_main_process():
    text = ("Traceback (most recent call last):\n"
            '  File "/app/run.py", line 3, in <module>\n'
            "    torch.cuda.synchronize()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    case = analyze_text(text)
    (row,) = case.verdict.ranks
    assert row.name == MAIN_PROCESS and row.status == Status.SURFACED
    assert case.verdict.first_failure.key == row.key


def test_an_error_after_a_peer_reset_is_a_relay_not_a_first_failure():
    text = ("[W1204 09:00:00.000000000 socket.cpp:464] [c10d] recvValue failed: Connection reset by peer\n"
            "Traceback (most recent call last):\n"
            '  File "/app/train.py", line 9, in <module>\n'
            "    dist.barrier()\n"
            "torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId "
            "from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer\n")
    v = analyze_text(text).verdict
    # the peer that reset the connection failed first; its own lines are not in the paste
    assert v.failure_kind == FailureKind.RELAY_ONLY and v.first_failure.key is None
    assert v.first_failure.what == "another process failed"
    (row,) = v.ranks
    assert row.name == MAIN_PROCESS and row.status == Status.COLLATERAL
    assert "engine" not in v.headline


# --- self-consistency over every recording and fixture --------------------------------------

GENERATED = [
    # a worker faults, its peer is told its peer closed the connection, the engine relays
    "".join([
        "(VllmWorker rank=0 pid=101) ERROR 12-04 09:00:01 [multiproc_executor.py:1] WorkerProc hit an exception.\n",
        "(VllmWorker rank=0 pid=101) ERROR 12-04 09:00:01 [multiproc_executor.py:1] RuntimeError: CUDA error: "
        "an illegal memory access was encountered\n",
        "(EngineCore_0 pid=90) ERROR 12-04 09:00:02 [core.py:1] EngineCore encountered a fatal error.\n",
        "(APIServer pid=80) ERROR 12-04 09:00:03 [async_llm.py:1] AsyncLLM output_handler failed.\n",
        "(APIServer pid=80) INFO:     127.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 500 Internal Server Error\n",
    ]),
    # nothing failed: a requested shutdown
    "(APIServer pid=80) INFO 12-04 09:00:00 [launcher.py:1] Shutting down FastAPI HTTP server.\n",
    # only a relay: the engine died elsewhere
    "(APIServer pid=80) ERROR 12-04 09:00:03 [serving.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.\n",
]


def _consistency(case) -> None:
    v = case.verdict
    rows = {r.key: r for r in v.ranks}
    stories = {s.key: s for s in story.tell(case.events, case.processes).stories}
    if v.first_failure is not None and v.first_failure.key is not None and v.first_failure.key in rows:
        assert rows[v.first_failure.key].status not in (Status.HEALTHY, Status.COLLATERAL), v.first_failure
    if v.origin is not None:
        shown = [r for r in v.ranks if r.status == Status.ORIGIN]
        if v.origin.pid is not None or v.origin.rank is not None:
            assert shown, "the faulting process has no origin row"
    assert v.collateral == tuple(sorted({r.rank for r in v.ranks if r.status == Status.COLLATERAL
                                         and r.rank is not None}))
    if not v.failed:
        assert v.error is None, "an error code beside 'no failure found'"
        assert all(r.status != Status.FAILED and r.status != Status.SURFACED for r in v.ranks)
        assert not any(e.kind == Kind.HTTP and (e.attrs.get("status") or 0) >= 500 for e in case.events
                       if not e.attrs.get("earlier_run"))
    for key, row in rows.items():
        told = stories.get(key)
        if told is None:
            assert not row.in_inputs or row.status == Status.HEALTHY, row
            continue
        if told.own_failure is not None:
            assert row.status != Status.HEALTHY, f"{row.key} failed on its own but is healthy"
        if row.status not in (Status.HEALTHY,) and row.in_inputs:
            # (in a hang, "unknown" for a process that said nothing is no claim: it declines
            # to call it healthy, as it may be the one the others waited for)
            assert told.observations or row.exit_code is not None or (v.hang and row.rank in v.hang.suspects) or \
                row.status == Status.COLLATERAL or (row.status == Status.UNKNOWN and v.failure_kind in (
                    FailureKind.HANG, FailureKind.NCCL_TIMEOUT)), f"{row.key} is {row.status} with nothing in its story"
    document = json.loads(json.dumps(build(case, timeline_limit=0).to_json(), default=str))
    table = {r["key"] for r in document["ranks"] if r["status"] == "collateral"}
    assert {r.key for r in v.ranks if r.status == Status.COLLATERAL} == table
    out = io.StringIO()
    render(build(case), "terminal", out, Options(width=100, color=False, redact=False))
    for placeholder in ("pid None", "rank None", "logs of 0 of ?", "[]"):
        assert placeholder not in out.getvalue().split("Timeline around the failure")[0], placeholder


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_recording_is_self_consistent(path):
    _consistency(case_of(path))


@pytest.mark.parametrize("text", GENERATED, ids=range(len(GENERATED)))
def test_generated_consoles_are_self_consistent(text):
    _consistency(analyze_text(text))


def test_a_process_that_logged_its_own_error_is_never_healthy_on_the_generated_engine():
    v = analyze_text(GENERATED[0]).verdict
    worker = next(r for r in v.ranks if r.rank == 0)
    assert worker.status == Status.SURFACED and v.first_failure.rank == 0
    assert all(r.status != Status.HEALTHY for r in v.ranks)


def test_explain_names_the_line_that_decided_each_status():
    case = analyze_text(GENERATED[0])
    lines = [text for rule, text in case.verdict.explanations if rule == "rank-statuses"]
    for row in case.verdict.ranks:
        said = next(t for t in lines if t.startswith(("rank %s:" % row.rank) if row.rank is not None else row.name))
        assert str(row.status) in said
        if row.first_error_source:
            assert f"[{row.first_error_source}]" in said


def test_an_import_error_is_a_start_up_failure():
    text = ("Traceback (most recent call last):\n"
            '  File "/app/serve.py", line 1, in <module>\n'
            "    import vllm\n"
            "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.STARTUP and v.environment["phase"] == "startup"


def test_an_error_raised_after_noticing_a_peer_is_not_the_first_failure_even_when_earlier():
    text = ("(VllmWorker rank=1 pid=102) WARNING 12-04 09:00:01 [shm.py:1] Connection closed by peer [10.0.0.1]:5000\n"
            "(VllmWorker rank=1 pid=102) ERROR 12-04 09:00:01 [worker.py:1] ValueError: the batch is gone\n"
            "(VllmWorker rank=0 pid=101) ERROR 12-04 09:00:05 [multiproc_executor.py:1] RuntimeError: CUDA error: "
            "an illegal memory access was encountered\n")
    v = analyze_text(text).verdict
    by_rank = {r.rank: r for r in v.ranks}
    assert v.first_failure.rank == 0 and by_rank[0].status == Status.SURFACED
    assert by_rank[1].status == Status.COLLATERAL and "peer closed the connection" in by_rank[1].failure


def test_a_worker_reported_dead_by_name_only_is_a_process_and_the_first_failure():
    text = ("(EngineCore_0 pid=90) ERROR 12-04 09:00:02 [multiproc_executor.py:1] Worker proc VllmWorker-3 died "
            "unexpectedly (exit code: -11), shutting down executor.\n")
    v = analyze_text(text).verdict
    dead = next(r for r in v.ranks if r.rank == 3)
    assert dead.status == Status.FAILED and "SIGSEGV" in dead.failure
    assert v.first_failure.key == dead.key and v.failure_kind == FailureKind.FATAL_SIGNAL


def test_a_sanitizer_paste_is_the_main_processes_origin():
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Invalid __global__ write of size 4 bytes\n"
            "=========     at scatter_kernel(float *, int)+0x70 in scatter.cu:12\n"
            "=========     by thread (3,0,0) in block (0,0,0)\n"
            "=========     Address 0x7f0000000400 is out of bounds\n"
            "=========\n"
            "========= ERROR SUMMARY: 1 error\n")
    v = analyze_text(text).verdict
    (row,) = v.ranks
    assert row.name == MAIN_PROCESS and row.status == Status.ORIGIN
    assert v.origin.kernel == "scatter_kernel" and v.first_failure.key == row.key
    # the report names that process wherever it speaks of it
    assert "unidentified" not in v.headline + v.summary
    document = build(analyze_text(text)).to_json()
    assert document["verdict"]["origin"]["who"] == MAIN_PROCESS == document["verdict"]["first_failure"]["who"]


def test_an_exception_printed_raw_below_a_schedulers_announcement_is_the_schedulers():
    # SGLang's announcement, then the exception without the record's prefix (realworld
    # sglang-020's shape, hand-made)
    text = ("[2025-07-01 02:38:26 TP1] Scheduler hit an exception:\n"
            "IndexError: list index out of range\n"
            "[2025-07-01 02:38:27 TP0] Prefill batch. #new-seq: 1\n")
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 1
    assert {r.rank: r.status for r in v.ranks if r.rank is not None}[1] == Status.FAILED


def test_a_raw_traceback_below_anothers_traceback_stays_unsigned():
    text = ("(EngineCore pid=20) ERROR 12-04 09:00:01 [core.py:1] Traceback (most recent call last):\n"
            '(EngineCore pid=20) ERROR 12-04 09:00:01 [core.py:1]   File "/v/core.py", line 9, in run\n'
            "(EngineCore pid=20) ERROR 12-04 09:00:01 [core.py:1] ValueError: no device\n"
            "Traceback (most recent call last):\n"
            '  File "/v/api_server.py", line 3, in build\n'
            "KeyError: 'engine'\n")
    case = analyze_text(text)
    raw = next(e for e in case.events if e.line == 4)
    assert case.processes.info_of(raw) is None


def test_a_launchers_own_traceback_is_a_relay_of_its_child_not_the_childs_error():
    # torch.distributed.launch raising after its child died (realworld pytorch-026's shape,
    # hand-made): the launcher's traceback, no line of the child's own
    text = ("Traceback (most recent call last):\n"
            '  File "/usr/lib/python3.8/runpy.py", line 194, in _run_module_as_main\n'
            "    return _run_code(code, main_globals, None,\n"
            '  File "/usr/lib/python3/dist-packages/torch/distributed/launch.py", line 259, in main\n'
            "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
            "subprocess.CalledProcessError: Command '['/usr/bin/python3', '-u', 'train.py', '--local_rank=7']' "
            "died with <Signals.SIGSEGV: 11>.\n")
    case = analyze_text(text)
    (tb,) = [e for e in case.events if e.chain]
    assert story.seen_in(tb, None, None) == Seen.RELAY
    v = case.verdict
    rows = {r.name or r.key: r for r in v.ranks}
    assert rows[MAIN_PROCESS].status == Status.COLLATERAL
    # the child it quotes, by the --local_rank of its command: died of SIGSEGV
    child = rows["rank:7"]
    assert child.rank == 7 and child.status == Status.FAILED and "SIGSEGV" in child.failure
    assert v.failure_kind == FailureKind.FATAL_SIGNAL and v.first_failure.rank == 7
    assert v.surfaces == (), "a launcher's traceback is no place where the error surfaced"


def test_the_only_failed_childs_identity_is_not_given_to_its_launchers_traceback():
    text = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 88) "
            "of binary: /usr/bin/python3\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/dist-packages/torch/distributed/elastic/agent/server/api.py", line 9, in run\n'
            "    result = self._invoke_run(role)\n"
            "RuntimeError: rendezvous closed\n")
    case = analyze_text(text)
    (tb,) = [e for e in case.events if e.chain]
    assert tb.pid is None
    child = next(r for r in case.verdict.ranks if r.pid == 88)
    assert "None" not in (child.failure or "") and "pid 88" in child.failure


def test_only_the_drivers_teardown_xids_is_a_gpu_fault_of_undecided_origin():
    # realworld kernel-003's shape, hand-made: Xid 45 for two processes after an earlier Xid
    text = ("[ 912.100200] NVRM: Xid (PCI:0000:18:00): 45, pid=4101, name=python3, Ch 00000008\n"
            "[ 912.100300] NVRM: Xid (PCI:0000:3b:00): 45, pid=4102, name=python3, Ch 00000010\n")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.CUDA_ERROR
    assert v.first_failure.key is None and v.first_failure.what == "an earlier GPU fault"
    assert {r.pid: r.status for r in v.ranks} == {4101: Status.UNKNOWN, 4102: Status.UNKNOWN}
    assert "Xid 45" in v.hardware.basis and "no Xid" not in v.hardware.basis


@pytest.mark.parametrize(("later", "first"), [(0, None), (2, 195295)])
def test_two_processes_failing_in_the_same_second_leave_the_first_failure_undecided(later, first):
    # realworld vllm-124's shape, hand-made: an OOM and another worker's exception
    text = ("(VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
            f"(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:{43 + later} [multiproc_worker_utils.py:242] "
            "ValueError: the weights are not there\n")
    v = analyze_text(text).verdict
    assert v.first_failure.pid == first
    if first is None:
        assert v.first_failure.key is None and "cannot tell which failed first" in v.first_failure.basis


SANITIZER_API_ERROR = ('========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" '
                       "on CUDA API call to cudaDeviceSynchronize.\n"
                       "=========     Saved host backtrace up to driver entry point at error\n"
                       "=========         Host Frame: c10::cuda::device_synchronize() [0x2e1a4] in libc10_cuda.so\n")


def test_a_host_call_only_the_sanitizer_saw_fail_is_the_programs_surfaced_error():
    v = analyze_text(SANITIZER_API_ERROR).verdict
    (row,) = v.ranks
    assert row.status == Status.SURFACED and v.first_failure.key == row.key


def test_a_stamped_error_line_of_another_process_comes_before_an_untimed_sanitizer_record():
    text = SANITIZER_API_ERROR + ("(Worker_TP1 pid=12) ERROR 12-04 09:00:01 [worker.py:1] RuntimeError: CUDA error: "
                                  "an illegal memory access was encountered\n")
    v = analyze_text(text).verdict
    assert v.first_failure.pid == 12


# --- NCCL: an error of its own, or a peer's seen from here ----------------------------------

@pytest.mark.parametrize(("message", "attrs", "seen"), [
    ("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", {}, Seen.OWN_ERROR),
    ("ncclInternalError: Internal check failed.", {}, Seen.OWN_ERROR),
    ("ncclInternalError: Internal check failed.", {"detail": "Last error:\nNet : Connection closed by remote peer"},
     Seen.PEER_LOSS),
    ("NCCL error: remote process exited or there was a network error", {}, Seen.PEER_LOSS),
    ("NCCL communicator was aborted on rank 3.", {}, Seen.PEER_LOSS),
    ("init.cc:1350 -> 2", {"nccl_result": 2}, Seen.OWN_ERROR),          # NCCL's error trace: a system error
    ("transport/net_ib.cc:1004 -> 6", {"nccl_result": 6}, Seen.PEER_LOSS),   # ncclRemoteError: a peer's
    ("misc/socket.cc:50 NCCL WARN Cuda failure 'an illegal memory access was encountered'", {}, Seen.OWN_ERROR),
    ("init.cc:497 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 1000", {},
     Seen.OWN_ERROR),
    ("NCCL WARN NET/IB : Got completion from peer 10.1.2.3<4321> with status=12: remote process exited", {},
     Seen.PEER_LOSS),
])
def test_an_nccl_line_is_its_own_error_unless_it_names_a_peers_failure(message, attrs, seen):
    assert story.seen_in(ev(Kind.NCCL, message, **attrs), "worker", None) == seen


def test_nccls_last_error_detail_is_part_of_the_error_line():
    # the shape of a Lightning job's paste (pytorch-lightning users, NCCL 2.14): the
    # record cut at its start, NCCL's own lines raw below it
    text = ("distributed/c10d/ProcessGroupNCCL.cpp:1275, internal error, NCCL version 2.14.3\n"
            "ncclInternalError: Internal check failed.\n"
            "Last error:\n"
            "Net : Connection closed by remote peer worker-7<40111>\n")
    case = analyze_text(text)
    nccl = [e for e in case.events if e.kind in (Kind.NCCL, Kind.EXCEPTION, Kind.CUDA_ERROR)]
    assert any("Connection closed by remote peer" in str(e.attrs.get("detail") or "") for e in nccl)
    assert case.verdict.ranks[0].status != Status.FAILED or case.verdict.first_failure is None


# --- a hang whose late rank the logs cannot tell --------------------------------------------

def test_in_an_undecided_hang_a_rank_that_timed_out_failed_and_one_only_seen_waiting_is_unknown():
    text = "".join(
        f"[rank{r}]:[E1204 09:10:0{r}.000000000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
        f"ran for 600004 milliseconds before timing out.\n" for r in (0, 1, 2, 3))
    v = analyze_text(text).verdict
    assert v.hang is not None and v.first_failure.rank is None
    statuses = {r.rank: r.status for r in v.ranks if r.rank is not None}
    assert statuses == {0: Status.FAILED, 1: Status.FAILED, 2: Status.FAILED, 3: Status.FAILED}
    assert not v.collateral


# --- the kind of failure: the most specific cause ------------------------------------------

@pytest.mark.parametrize(("text", "kind"), [
    # out of memory while the engine starts is out of memory
    ("INFO 12-04 09:00:00 [core.py:1] Loading model weights\n"
     "ERROR 12-04 09:00:05 [core.py:2] EngineCore failed to start.\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
     "79.19 GiB of which 1.06 GiB is free.\n", FailureKind.OOM),
    # a CUDA error while it starts is a CUDA error
    ("ERROR 12-04 09:00:05 [core.py:2] EngineCore failed to start.\n"
     "RuntimeError: CUDA error: an illegal memory access was encountered\n", FailureKind.CUDA_ERROR),
])
def test_the_most_specific_cause_names_the_kind(text, kind):
    assert analyze_text(text).verdict.failure_kind == kind


# --- a traceback cut before its exception line ----------------------------------------------

def test_a_traceback_cut_before_its_exception_names_no_surface():
    text = ("ERROR 12-04 09:00:05 [engine.py:1] Error in the engine loop\n"
            "Traceback (most recent call last):\n"
            '  File "/app/worker/loop.py", line 40, in run_loop\n'
            "    output = self.step()\n"
            '  File "/app/worker/loop.py", line 77, in step\n'
            "    return self.model(batch)\n")
    v = analyze_text(text).verdict
    assert v.surfaces == ()


def test_a_cut_traceback_whose_last_frame_calls_a_host_api_names_it():
    text = ("ERROR 12-04 09:00:05 [engine.py:1] Error in the engine loop\n"
            "Traceback (most recent call last):\n"
            '  File "/app/worker/loop.py", line 40, in run_loop\n'
            "    output = self.step()\n"
            '  File "/app/worker/loop.py", line 77, in step\n'
            "    torch.cuda.synchronize()\n")
    v = analyze_text(text).verdict
    assert [(s.file, s.line) for s in v.surfaces] in ([("/app/worker/loop.py", 77)], [])
    if v.surfaces:
        assert v.surfaces[0].api is not None


# --- device evidence of its own: origin ----------------------------------------------------

def _xid31(stamp: str, pci: str, pid: int) -> str:
    return (f"[{stamp}] NVRM: Xid (PCI:0000:{pci}:00): 31, pid={pid}, name=python3, Ch 00000010, "
            "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type "
            "FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n")


def test_every_process_whose_own_gpu_work_faulted_is_an_origin():
    """Faults hours apart (a host's kernel log over days, kernel-001's shape) are each
    their own process's origin."""
    text = _xid31("Thu Dec  4 09:00:01 2026", "3b", 4101) + _xid31("Thu Dec  4 11:30:12 2026", "5e", 4102)
    v = analyze_text(text, "dmesg.txt").verdict
    by_pid = {r.pid: r.status for r in v.ranks}
    assert by_pid.get(4101) == Status.ORIGIN and by_pid.get(4102) == Status.ORIGIN


def test_a_fault_on_another_gpu_right_after_the_origins_is_the_cascade_not_an_origin():
    text = _xid31("Thu Dec  4 09:00:01 2026", "3b", 4101) + _xid31("Thu Dec  4 09:00:01 2026", "5e", 4102)
    v = analyze_text(text, "dmesg.txt").verdict
    by_pid = {r.pid: r.status for r in v.ranks}
    assert by_pid.get(4101) == Status.ORIGIN and by_pid.get(4102) != Status.ORIGIN


def _shm_notice(minute: int) -> str:
    return (f"(EngineCore pid=310) INFO 05-15 16:{minute:02d}:26 [shm_broadcast.py:681] No available shared memory "
            "broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing "
            "some time-consuming work (e.g. compilation).\n")


def test_one_slow_step_notice_is_no_hang_and_a_notice_that_keeps_coming_is():
    once = analyze_text("(Worker_TP0 pid=319) INFO 05-15 16:02:37 [monitor.py:53] torch.compile took 9.61 s\n"
                        + _shm_notice(3)).verdict
    assert once.hang is None and not once.failed
    assert {r.status for r in once.ranks} == {Status.HEALTHY}
    kept = analyze_text(_shm_notice(3) + _shm_notice(4) + _shm_notice(5)).verdict
    assert kept.hang is not None and kept.failure_kind == FailureKind.HANG


def test_an_untagged_sglang_record_is_the_main_process_beside_its_tagged_schedulers():
    """SGLang tags its schedulers' records ([... TP0]) and not its launcher's: the
    untagged sigquit line is the main process relaying its child's failure."""
    text = ("[2026-02-21 22:59:28 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1825, in run_scheduler_process\n'
            "    scheduler.event_loop_overlap()\n"
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1308, in process_batch_result_decode\n'
            "    self.current_stream.synchronize()\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "\n"
            "[2026-02-21 22:59:28] Received sigquit from a child process. It usually means the child failed.\n")
    v = analyze_text(text).verdict
    by_who = {(r.rank, r.name): r.status for r in v.ranks}
    assert by_who[(0, None)] == Status.SURFACED or any(r.rank == 0 and r.status == Status.SURFACED for r in v.ranks)
    main = [r for r in v.ranks if r.name == MAIN_PROCESS]
    assert len(main) == 1 and main[0].status == Status.COLLATERAL


def test_a_raw_traceback_through_code_only_the_scheduler_runs_is_the_schedulers():
    """SGLang's scheduler subprocess prints its traceback raw (no tag); the launcher's
    untagged record relays it (processes.toml frame_process)."""
    text = ("Traceback (most recent call last):\n"
            '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 2300, in run_scheduler_process\n'
            "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
            '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 310, in __init__\n'
            "    self.tp_worker = TpModelWorker(server_args, gpu_id, tp_rank)\n"
            '  File "/opt/sglang/python/sglang/srt/distributed/device_communicators/pynccl.py", line 99, in __init__\n'
            "    self.comm = self.nccl.ncclCommInitRank(world_size, unique_id, rank)\n"
            "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
            "\n"
            "[2026-03-02 10:00:05] Received sigquit from a child process. It usually means the child failed.\n")
    v = analyze_text(text).verdict
    by_name = {r.name: r.status for r in v.ranks}
    assert by_name.get("Scheduler") == Status.FAILED
    assert by_name.get(MAIN_PROCESS) == Status.COLLATERAL
    assert v.first_failure.name == "Scheduler" and v.failure_kind == FailureKind.STARTUP


def test_the_command_a_sanitizer_paste_starts_with_names_its_program():
    text = ("compute-sanitizer --tool memcheck ./bin/scatter_test\n"
            "========= COMPUTE-SANITIZER\n"
            "========= Invalid __global__ write of size 4 bytes\n"
            "=========     at scatter_kernel(float *, int)+0x70 in scatter.cu:12\n"
            "=========     by thread (3,0,0) in block (0,0,0)\n"
            "=========     Address 0x7f0000001000 is out of bounds\n"
            "=========\n"
            "========= ERROR SUMMARY: 1 error\n")
    v = analyze_text(text).verdict
    (process,) = v.ranks
    assert process.name == "scatter_test" and process.status == Status.ORIGIN
    assert v.first_failure.name == "scatter_test"


def test_only_relays_while_the_engine_starts_are_relay_only_in_the_startup_phase():
    text = ("(EngineCore_DP0 pid=900) ERROR 12-04 09:00:05 [core.py:700] EngineCore failed to start.\n"
            "(EngineCore_DP0 pid=900) ERROR 12-04 09:00:05 [core.py:700] Exception: WorkerProc initialization "
            "failed due to an exception in a background process. See stack trace for root cause.\n")
    v = analyze_text(text).verdict
    assert v.failure_kind == FailureKind.RELAY_ONLY and v.environment.get("phase") == "startup"


@pytest.mark.parametrize(("group", "rank"), [("[PG 3 Rank 5]", 5), ("[PG ID 0 PG GUID 0(default_pg) Rank 5]", 5),
                                             ("[PG ID 0 PG GUID 2 Rank 0]", None)])
def test_the_rank_a_watchdogs_what_line_names_is_the_processs_in_the_default_group_only(group, rank):
    text = ("terminate called after throwing an instance of 'c10::DistBackendError'\n"
            f"  what():  {group} Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, "
            "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n")
    case = analyze_text(text)
    ranks = {e.rank for e in case.events if e.kind in (Kind.FATAL_SIGNAL, Kind.COLLECTIVE_TIMEOUT)}
    assert ranks == {rank}


def test_a_process_whose_own_error_is_a_wait_that_ran_out_is_a_hang():
    text = ("Traceback (most recent call last):\n"
            '  File "/app/serve/executor.py", line 250, in get_response\n'
            "    raise TimeoutError(f'RPC call to {method} timed out.')\n"
            "TimeoutError: RPC call to execute_model timed out.\n")
    assert analyze_text(text).verdict.failure_kind == FailureKind.HANG


def test_the_one_process_the_inputs_name_takes_the_unsigned_lines_of_an_unprefixed_file():
    from tests.helpers import analyze_texts
    # the GPU recordings' shape: the program's console and compute-sanitizer's log, both
    # unprefixed (so neither is "the main process" of its own), and the kernel's Xid line
    # naming the one pid
    case = analyze_texts({
        "console.log": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "sanitizer.log": "========= COMPUTE-SANITIZER\n========= Invalid __global__ write of size 4 bytes\n"
                         "=========     at scatter_kernel(float *, int)+0x70 in scatter.cu:12\n"
                         "=========     by thread (3,0,0) in block (0,0,0)\n=========\n"
                         "========= ERROR SUMMARY: 1 error\n",
        "dmesg.txt": "[ 8812.402021] NVRM: Xid (PCI:0000:4c:00): 31, pid=4242, name=python3, Ch 00000008, intr 0. "
                     "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type "
                     "FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n",
    })
    v = case.verdict
    assert [r.pid for r in v.ranks] == [4242]
    assert all(s.pid == 4242 for s in v.surfaces) and v.surfaces


def test_a_file_with_prefixes_keeps_its_unprefixed_lines_unsigned_beside_one_process():
    from tests.helpers import analyze_texts
    case = analyze_texts({
        "server.log": "(VllmWorker pid=4242) INFO 12-04 09:00:00 [worker.py:1] loading weights\n"
                      "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    })
    raw = next(e for e in case.events if e.line == 2)
    assert case.processes.info_of(raw) is None


def test_a_sanitizer_api_error_that_does_not_stick_is_the_failure_when_nothing_else_is():
    """Only compute-sanitizer saw the program's call fail, with an error that does not
    stick (209 while NCCL starts): the reported error and the process's failure agree
    (no 'healthy' beside an error code)."""
    text = ('========= Program hit CUDA_ERROR_NO_BINARY_FOR_GPU (error 209) due to "no kernel image is available '
            'for execution on the device" on CUDA API call to cuModuleLoadData.\n'
            "=========     Saved host backtrace up to driver entry point at error\n"
            "=========         Host Frame: ncclInitKernelsForDevice in enqueue.cc:57 [0x4f1c2] in libnccl.so.2\n")
    case = analyze_text(text)
    _consistency(case)
    assert case.verdict.error is not None and case.verdict.failed
