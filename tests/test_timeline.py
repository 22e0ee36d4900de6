"""Timeline: who is who (ProcessTable), event order, inferred times, earlier runs.

ProcessTable learns pid <-> rank/role identities from every event before any rule runs:
vLLM process prefixes (``Worker_TP2``), identity lines (``world_size=4 rank=2 ...``),
torch's ``[rankN]:`` and NCCL's init lines, per-rank files (torchrun's log dir), a
launcher's summary; it joins one process seen under a pid and under a rank.
"""

from __future__ import annotations

import dataclasses
import os
from datetime import datetime

import pytest

from forensics import timeline
from forensics.case import analyze
from forensics.events import Frame, Kind, Severity, freeze
from forensics.timeline import ProcessTable, adopt_crash_dumps, order, pci_bus, rank_from_path, set_aside_earlier_runs
from tests.helpers import analyze_text, analyze_texts, event, parse_text

T = datetime(2026, 6, 1, 8, 0, 0)


def with_attrs(e, **attrs):
    return dataclasses.replace(e, attrs=freeze({**e.attrs, **attrs}))


def identity(rank, pid=None, process=None, line=1, **kw):
    e = event(Kind.PROCESS_IDENTITY, f"world_size=4 rank={rank} local_rank={rank} backend=nccl", pid=pid,
              process=process, line=line, severity=Severity.INFO, message_id="dist-init", world_size=4, **kw)
    return with_attrs(e, rank=rank)       # "rank" is event()'s own keyword: the attribute is set apart


def keys(table: ProcessTable) -> list[tuple]:
    return [(p.key, p.pid, p.rank, p.role) for p in table.processes()]


# --- identities ----------------------------------------------------------------------------

def test_vllm_worker_prefixes_give_pid_rank_and_role():
    events = [event(Kind.LOG, "Starting to load model", pid=4201 + r, process=f"Worker_TP{r}", line=r + 1,
                    severity=Severity.INFO) for r in range(3)]
    events += [event(Kind.LOG, "up", pid=4100, process="EngineCore_DP0", line=9, severity=Severity.INFO),
               event(Kind.LOG, "up", pid=4000, process="APIServer", line=10, severity=Severity.INFO)]
    table = ProcessTable.learn(events)
    assert keys(table) == [("pid:4201", 4201, 0, "worker"), ("pid:4202", 4202, 1, "worker"),
                           ("pid:4203", 4203, 2, "worker"), ("pid:4100", 4100, None, "engine-core"),
                           ("pid:4000", 4000, None, "api-server")]
    assert table.rank_of(4203) == 2 and table.pid_of_rank(2) == 4203
    assert table.by_rank(1).name == "Worker_TP1" and table.by_rank(1).rank_basis == "name"
    # a worker named in another process's message (the executor's "VllmWorker-2 died")
    assert table.by_name("VllmWorker-2").pid == 4203
    assert table.by_pid(9999) is None and table.rank_of(None) is None


@pytest.mark.parametrize("name, role, rank", [
    ("Worker_TP3", "worker", 3), ("Worker_PP1_TP2", "worker", 2), ("VllmWorker TP1", "worker", 1),
    ("VllmWorker rank=5", "worker", 5), ("VllmWorker-4", "worker", 4), ("RayWorkerProc rank=6", "worker", 6),
    ("sglang::scheduler_TP7", "worker", 7), ("EngineCore_DP0", "engine-core", None),
    ("APIServer", "api-server", None), ("torchrun", "launcher", None),
])
def test_process_names_imply_role_and_rank(name, role, rank):
    table = ProcessTable.learn([event(Kind.LOG, "x", pid=77, process=name, severity=Severity.INFO)])
    (info,) = table.processes()
    assert (info.role, info.rank) == (role, rank)


def test_an_identity_line_beats_the_rank_a_name_implies():
    # pipeline parallel: Worker_PP1_TP0 is TP rank 0 but global rank 2
    events = [event(Kind.LOG, "up", pid=700, process="Worker_PP1_TP0", severity=Severity.INFO, line=1),
              identity(2, pid=700, process="Worker_PP1_TP0", line=2)]
    info = ProcessTable.learn(events).by_pid(700)
    assert info.rank == 2 and "dist-init" in info.rank_basis


def test_torch_rank_prefix_is_joined_to_the_workers_pid():
    text = ("(Worker_TP0 pid=501) INFO 06-01 08:00:01 [parallel_state.py:1] world_size=2 rank=0 local_rank=0 "
            "distributed_init_method=tcp://127.0.0.1:1 backend=nccl\n"
            "(Worker_TP1 pid=502) INFO 06-01 08:00:01 [parallel_state.py:1] world_size=2 rank=1 local_rank=1 "
            "distributed_init_method=tcp://127.0.0.1:1 backend=nccl\n"
            "[rank1]:[E601 08:05:00.100000000 ProcessGroupNCCL.cpp:1896] [PG ID 0 PG GUID 0 Rank 1] Process group "
            "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n")
    case = analyze_text(text)
    (err,) = [e for e in case.events if e.kind == Kind.CUDA_ERROR]
    assert (err.rank, err.pid, err.role) == (1, 502, "worker")
    assert len([p for p in case.processes.processes() if p.role == "worker"]) == 2
    assert case.processes.by_rank(1).pid == 502


def test_nccl_init_lines_give_ranks_and_an_xid_is_placed_by_the_gpus_bus_id():
    console = "".join(f"node1:{7001 + r}:{7001 + r} [{r}] NCCL INFO ncclCommInitRank comm 0x55d1a0c4e{r}f0 rank {r} "
                      f"nranks 2 cudaDev {r} nvmlDev {r} busId {bus} commId 0x9d2f6b1c7e04a853 - Init COMPLETE\n"
                      for r, bus in ((0, "18000"), (1, "3b000")))
    dmesg = ("[ 8812.100200] NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): "
             "Out Of Range Address\n")
    case = analyze_texts({"console.log": console, "dmesg.txt": dmesg})
    assert [(p.pid, p.rank) for p in case.processes.processes()] == [(7001, 0), (7002, 1)]
    (x,) = [e for e in case.events if e.kind == Kind.XID]
    assert (x.rank, x.pid) == (1, 7002) and "busId" in x.attrs["identity_from"]
    assert case.verdict.origin.rank == 1


@pytest.mark.parametrize("kernel_log, nvidia_smi, nccl", [
    ("PCI:0000:3b:00", "00000000:3B:00.0", "3b000"), ("PCI:0000:bd:00", "00000000:BD:00.0", "bd000"),
])
def test_one_gpu_address_however_it_is_printed(kernel_log, nvidia_smi, nccl):
    assert pci_bus(kernel_log) == pci_bus(nvidia_smi) == pci_bus(nccl) is not None
    assert pci_bus("PCI:0000:3b:00") != pci_bus("PCI:0000:bd:00")
    assert pci_bus("not-an-address") is None and pci_bus("0:1") is None


@pytest.mark.parametrize("path, rank", [
    ("logs/run1/attempt_0/3/stderr.log", 3), ("logs/job/attempt_2/12/stdout.log", 12), ("worker_TP2.log", 2),
    ("out/rank_3.log", 3), ("rank-02.txt", 2), ("tp1/console.log", 1), ("server.log", None),
    ("checkpoint_rank.log", None), ("run_2024_06_01.log", None),
])
def test_rank_from_a_per_rank_file_name(path, rank):
    assert rank_from_path(path) == rank


def test_torchrun_log_dir_files_are_one_rank_each():
    files = {"logs/run1/attempt_0/0/stderr.log": "[W601 08:00:00.000000000 x.cpp:1] hello\n",
             "logs/run1/attempt_0/1/stderr.log": "Traceback (most recent call last):\n"
                                                 '  File "/w/train.py", line 9, in <module>\n    x.item()\n'
                                                 "RuntimeError: CUDA error: an illegal memory access was encountered\n"}
    case = analyze_texts(files)
    assert [(p.key, p.rank, p.role) for p in case.processes.processes()] == [("rank:0", 0, "worker"),
                                                                             ("rank:1", 1, "worker")]
    assert "one rank's own log" in case.processes.by_rank(1).rank_basis
    assert case.verdict.first_failure.rank == 1 and case.verdict.collateral == (0,)


def test_an_identity_line_in_an_unprefixed_file_names_the_files_rank():
    files = {"node3.log": "world_size=4 rank=3 local_rank=3 distributed_init_method=tcp://10.0.0.1:29500 backend=nccl\n"
                          "RuntimeError: CUDA error: an illegal memory access was encountered\n"}
    case = analyze_texts(files)
    (err,) = [e for e in case.events if e.kind == Kind.CUDA_ERROR]
    assert err.rank == 3


def test_a_launcher_summary_names_the_ranks_of_its_children():
    summary = event(Kind.LAUNCHER_SUMMARY, "ChildFailedError", line=40,
                    root_cause={"rank": 3, "local_rank": 3, "pid": 8219, "exit_code": -11},
                    failures=[{"rank": 0, "local_rank": 0, "pid": 8216, "exit_code": -15}])
    table = ProcessTable.learn([summary])
    assert table.rank_of(8219) == 3 and table.rank_of(8216) == 0
    assert table.by_pid(8219).role == "worker"


def test_one_pid_printing_for_several_ranks_is_a_parent_relaying_its_children():
    # a Ray actor's prefix over SGLang's TP schedulers: the ranks are the processes
    text = ("(SchedulerActor pid=3001) [2025-03-01 09:00:05 TP0] Init torch distributed begin.\n"
            "(SchedulerActor pid=3001) [2025-03-01 09:00:05 TP1] Init torch distributed begin.\n"
            "(SchedulerActor pid=3001) [2025-03-01 09:10:00 TP1] Load weight begin. avail mem=78.52 GB\n")
    table = analyze_text(text).processes
    assert [(p.key, p.rank, p.pid) for p in table.processes()] == [("rank:0", 0, None), ("rank:1", 1, None)]


def test_vllm_v0_unprefixed_lines_are_the_engine_process_which_is_rank_0():
    header = ("INFO 02-10 14:00:00 llm_engine.py:232] Initializing an LLM engine (v0.6.3) with config: "
              "model='acme/m', tensor_parallel_size={tp}, enforce_eager=False\n")
    error = "ERROR 02-10 14:05:00 engine.py:160] RuntimeError('CUDA error: an illegal memory access was encountered')\n"
    case = analyze_text(header.format(tp=2) +
                        "(VllmWorkerProcess pid=812) INFO 02-10 14:00:10 multiproc_worker_utils.py:215] Worker ready\n"
                        + error)
    (engine,) = [p for p in case.processes.processes() if p.name == "LLMEngine"]
    assert (engine.rank, engine.role) == (0, "worker") and engine.rank_basis.startswith("vLLM V0")
    (err,) = [e for e in case.events if e.kind == Kind.CUDA_ERROR]
    assert err.rank == 0
    # a single-GPU V0 engine has no rank
    single = analyze_text(header.format(tp=1) + error)
    (engine,) = single.processes.processes()
    assert (engine.rank, engine.role) == (None, "engine-core")


def test_v0_worker_traceback_and_its_c10_rank_lines_are_one_process():
    # the executor prefixes the worker's traceback with a pid, c10 prints [rank1]: - the same error, same time
    text = ("INFO 02-10 14:00:00 llm_engine.py:232] Initializing an LLM engine (v0.6.3) with config: model='acme/m', "
            "tensor_parallel_size=2\n"
            "(VllmWorkerProcess pid=812) ERROR 02-10 14:05:00 multiproc_worker_utils.py:226] Exception in worker "
            "VllmWorkerProcess while processing method start_worker_execution_loop.\n"
            "(VllmWorkerProcess pid=812) ERROR 02-10 14:05:00 multiproc_worker_utils.py:226] Traceback (most recent "
            "call last):\n"
            '(VllmWorkerProcess pid=812) ERROR 02-10 14:05:00 multiproc_worker_utils.py:226]   File "/usr/local/lib/'
            'python3.10/dist-packages/vllm/worker/model_runner.py", line 1700, in execute_model\n'
            "(VllmWorkerProcess pid=812) ERROR 02-10 14:05:00 multiproc_worker_utils.py:226]     output = "
            "self.model.sample(logits)\n"
            "(VllmWorkerProcess pid=812) ERROR 02-10 14:05:00 multiproc_worker_utils.py:226] RuntimeError: CUDA "
            "error: an illegal memory access was encountered\n"
            "[rank1]:[E210 14:05:01.123000000 ProcessGroupNCCL.cpp:1595] [PG 3 Rank 1] Process group watchdog thread "
            "terminated with exception: CUDA error: an illegal memory access was encountered\n")
    case = analyze_text(text)
    info = case.processes.by_pid(812)
    assert info.rank == 1 and "same error" in info.rank_basis
    assert case.processes.by_rank(1) is info
    assert case.verdict.first_failure.rank == 1 and case.verdict.first_failure.pid == 812


def test_resolve_fills_rank_role_and_pid_and_leaves_known_events_alone():
    events = [event(Kind.LOG, "up", pid=4203, process="Worker_TP2", severity=Severity.INFO),
              event(Kind.LOG, "[rank2]: hello", rank=2, line=2, severity=Severity.INFO)]
    table = ProcessTable.learn(events)
    resolved = table.resolve(events[1])
    assert (resolved.rank, resolved.pid, resolved.role) == (2, 4203, "worker")
    complete = dataclasses.replace(events[0], rank=2, role="worker")
    assert table.resolve(complete) is complete
    stranger = event(Kind.LOG, "no identity", severity=Severity.INFO)
    assert table.resolve(stranger) is stranger


def test_processes_are_listed_workers_first_by_rank():
    events = [event(Kind.LOG, "x", pid=pid, process=name, line=i, severity=Severity.INFO)
              for i, (pid, name) in enumerate([(9, "APIServer"), (30, "Worker_TP3"), (8, "EngineCore_DP0"),
                                               (10, "Worker_TP0"), (77, "torchrun")])]
    assert [p.pid for p in ProcessTable.learn(events).processes()] == [10, 30, 8, 9, 77]


def test_an_unsigned_crash_dump_takes_the_identity_of_the_only_child_killed_by_that_signal():
    dump = event(Kind.FATAL_SIGNAL, "Fatal Python error: Segmentation fault", signal_name="SIGSEGV", line=3)
    summary = event(Kind.LAUNCHER_SUMMARY, "ChildFailedError", line=40,
                    root_cause={"rank": 2, "local_rank": 2, "pid": 5513, "exit_code": -11},
                    failures=[{"rank": 0, "local_rank": 0, "pid": 5511, "exit_code": -15}])
    table = ProcessTable.learn([dump, summary])
    adopted = adopt_crash_dumps([dump, summary], table)[0]
    assert (adopted.pid, adopted.rank) == (5513, 2) and "SIGSEGV" in adopted.attrs["identity_from"]
    # two children killed by SIGSEGV: the dump stays unsigned
    two = with_attrs(summary, failures=[{"rank": 0, "local_rank": 0, "pid": 5511, "exit_code": -11}])
    table = ProcessTable.learn([dump, two])
    assert adopt_crash_dumps([dump, two], table)[0].pid is None


# --- order -----------------------------------------------------------------------------------

def test_order_by_time_then_source_position_keeping_each_stream():
    a = [event(Kind.LOG, "a1", source="a.log", line=1, time=T.replace(second=5), pid=1),
         event(Kind.LOG, "a2", source="a.log", line=2, time=T.replace(second=1), pid=1),    # clock jumps back
         event(Kind.LOG, "a3", source="a.log", line=3, time=T.replace(second=9), pid=1)]
    b = [event(Kind.LOG, "b1", source="b.log", line=1, time=T.replace(second=3), pid=2),
         event(Kind.LOG, "b2", source="b.log", line=2, time=T.replace(second=7), pid=2)]
    untimed = [event(Kind.HTTP, "HTTP/1.1 500", source="reply.txt", line=1)]
    merged = [e.message for e in order([untimed, a, b])]
    # a2 stays after a1 (one stream is never reordered); the untimed file goes last
    assert merged == ["b1", "a1", "a2", "b2", "a3", "HTTP/1.1 500"]


def test_container_stamp_gives_year_and_subsecond_order(tmp_path):
    (tmp_path / "pod.log").write_text(
        "2025-06-01T10:00:00.900Z (Worker_TP1 pid=6) WARNING 06-01 10:00:00 [a.py:1] second\n"
        "2025-06-01T10:00:00.100Z (Worker_TP0 pid=5) WARNING 06-01 10:00:00 [a.py:1] first\n")
    frame = analyze(str(tmp_path)).timeline
    assert list(frame["message"]) == ["first", "second"]
    assert frame["time"].iloc[0] == datetime(2025, 6, 1, 10, 0, 0, 100000)


def test_lines_of_one_stream_are_never_reordered(tmp_path):
    (tmp_path / "w.log").write_text("WARNING 03-01 10:00:05 [a.py:1] one\nWARNING 03-01 10:00:01 [a.py:1] two\n"
                                    "WARNING 03-01 10:00:06 [a.py:1] three\n")
    frame = analyze(str(tmp_path)).timeline
    assert list(frame["message"]) == ["one", "two", "three"]


# --- times -----------------------------------------------------------------------------------

def test_year_from_file_mtime_and_new_year_rollover(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("(Worker_TP0 pid=5) WARNING 12-31 23:59:58 [a.py:1] before midnight\n"
                   "(Worker_TP0 pid=5) ERROR 01-01 00:00:03 [a.py:2] after midnight\n")
    stamp = datetime(2027, 1, 1, 0, 5).timestamp()
    os.utime(log, (stamp, stamp))           # the file was written in January 2027
    frame = analyze(str(tmp_path)).timeline
    assert list(frame["time"]) == [datetime(2026, 12, 31, 23, 59, 58), datetime(2027, 1, 1, 0, 0, 3)]


def test_an_unstamped_crash_dump_is_bounded_by_the_stamps_around_it():
    text = ("WARNING 03-01 10:00:05 [a.py:1] step 1 slow\n"
            "Fatal Python error: Segmentation fault\n\n"
            "Current thread 0x00007fa1c2d3e740 (most recent call first):\n"
            '  File "/srv/train/ops.py", line 31 in gather_rows\n\n'
            "WARNING 03-01 10:00:09 [a.py:1] after\n")
    (dump,) = [e for e in parse_text(text).events if e.kind == Kind.FATAL_SIGNAL]
    assert dump.time_inferred
    assert (dump.time.hour, dump.time.minute, dump.time.second) == (10, 0, 5)
    assert dump.attrs["not_after"].second == 9


def test_a_continuation_of_a_stamped_record_carries_its_stamp():
    text = ("(Worker_TP0 pid=5) ERROR 03-01 10:00:05 [a.py:1] x\n"
            "(Worker_TP0 pid=5) Exception ignored in: <function A.__del__ at 0x1>\n"
            "(Worker_TP0 pid=5) Traceback (most recent call last):\n"
            '(Worker_TP0 pid=5)   File "a.py", line 3, in __del__\n'
            "(Worker_TP0 pid=5)     free()\n"
            "(Worker_TP0 pid=5) RuntimeError: CUDA error: unspecified launch failure\n")
    (tb,) = [e for e in analyze_text(text).events if e.kind == Kind.CUDA_ERROR]
    assert (tb.time.month, tb.time.day, tb.time.hour, tb.time.second) == (3, 1, 10, 5)
    assert tb.rank == 0 and tb.pid == 5 and tb.attrs["unraisable"]


def test_an_unstamped_native_abort_takes_the_time_of_the_line_before_it():
    text = ("(Worker_TP1 pid=41) WARNING 03-01 10:00:05 [a.py:1] step 1 slow\n"
            "terminate called after throwing an instance of 'c10::Error'\n"
            "  what():  CUDA error: an illegal memory access was encountered\n"
            "(Worker_TP1 pid=41) WARNING 03-01 10:00:09 [a.py:1] after\n")
    (abort,) = [e for e in parse_text(text).events if e.kind == Kind.CUDA_ERROR]
    assert abort.time_inferred
    assert abort.time.second == 5 and abort.attrs["not_after"].second == 9


# --- earlier runs ----------------------------------------------------------------------------

def restarted_log() -> str:
    def run(pid, hour, failure):
        return (f"(EngineCore_DP0 pid={pid}) INFO 03-01 {hour}:00:00 [core.py:93] Initializing a V1 LLM engine "
                "(v0.10.0) with config: model='acme/m', tensor_parallel_size=1\n"
                f"(EngineCore_DP0 pid={pid}) ERROR 03-01 {hour}:00:30 [core.py:1] {failure}\n")
    return run(100, 10, "torch.AcceleratorError: CUDA error: an illegal memory access was encountered") + \
        run(200, 11, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")


def test_restarts_appended_to_one_log_are_said_and_the_earlier_start_is_set_aside():
    case = analyze_text(restarted_log())
    assert any("2 server starts" in n and "from line 3" in n for n in case.verdict.notes)
    marked = {e.line for e in case.events if e.attrs.get("earlier_run")}
    assert 1 in marked and not marked & {3, 4}
    assert len(case.events) == 4                          # the earlier run stays on the timeline


def test_restarts_appended_to_one_log_keep_only_the_last_run_in_the_verdict():
    case = analyze_text(restarted_log())
    assert {e.line for e in case.events if e.attrs.get("earlier_run")} == {1, 2}
    assert case.verdict.error is None and case.verdict.failure_kind.value == "oom"
    assert [p.pid for p in case.processes.processes()] == [200]


def test_one_start_printed_by_several_lines_is_one_run():
    # the API server's version line and the engine's config line belong to one start
    start = [event(Kind.CONFIG, "vLLM API server version 0.10.0", line=1, seq=1, message_id="api-server-version",
                   severity=Severity.INFO, pid=90),
             event(Kind.CONFIG, "Initializing a V1 LLM engine", line=2, seq=2, message_id="engine-config",
                   severity=Severity.INFO, pid=91)]
    error = event(Kind.CUDA_ERROR, "x", line=5, seq=5)
    events, notes = set_aside_earlier_runs(start + [error])
    assert notes == [] and not any(e.attrs.get("earlier_run") for e in events)
    # the same start again is a restart
    again = [dataclasses.replace(e, line=e.line + 8, seq=e.seq + 8) for e in start]
    events, notes = set_aside_earlier_runs(start + [error] + again)
    assert len(notes) == 1 and "from line 9" in notes[0]
    assert [e.line for e in events if e.attrs.get("earlier_run")] == [1, 2, 5]


# --- the DataFrame ----------------------------------------------------------------------------

def test_timeline_dataframe_columns_and_types():
    case = analyze_text("(Worker_TP1 pid=41) ERROR 03-01 10:00:05.250 [a.py:1] RuntimeError: CUDA error: an illegal "
                        "memory access was encountered\n")
    frame = case.timeline
    assert list(frame.columns) == timeline.COLUMNS
    row = frame.iloc[-1]
    assert (row["rank"], row["pid"], row["kind"], row["severity"]) == (1, 41, "cuda-error", "ERROR")
    assert str(frame["rank"].dtype) == "Int64" and str(frame["pid"].dtype) == "Int64"
    assert frame is case.timeline                     # built once


def test_frames_on_events_are_kept_for_the_rules():
    dump = event(Kind.STACK_DUMP, "py-spy", current_thread={"frames": (Frame("/a.py", 1, "f", None),)})
    assert dump.attrs["current_thread"]["frames"][0].function == "f"
