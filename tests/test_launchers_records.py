"""Launchers' records of their children (forensics/parsers/text/launcher.py): torchrun's
failure summary however a paste cut it, and the one-line records of torch elastic,
DeepSpeed, torch 1.9 and Open MPI's mpirun.

Every sample below is made up, in the shape of the public issue cited above it.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from forensics import story
from forensics.events import Kind
from forensics.parsers import registry
from forensics.story import Seen
from forensics.timeline import ProcessTable
from tests.helpers import parse_text


def summaries(parsed):
    return [e for e in parsed.events if e.kind == Kind.LAUNCHER_SUMMARY]


def stories(parsed):
    events = list(parsed.events)
    return story.tell(events, ProcessTable.learn(events))


def killed(stories_, **who):
    """The KILLED observations of the one story whose pid or rank is given."""
    (s,) = [s for s in stories_.stories if all(getattr(s, k) == v for k, v in who.items())]
    return [o for o in s.observations if o.seen == Seen.KILLED]


def accounted(parsed) -> bool:
    return parsed.lines == parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines


# --- torchrun's summary, cut ------------------------------------------------------------------

# https://github.com/pytorch/pytorch/issues/121209: the summary pasted from inside its
# first entry ("  host" first), no header; every entry exited 1 in the same second
CUT_IN_AN_ENTRY = """\
  host      : gpu-box-7.example.internal
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 40112)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
[2]:
  time      : 2025-11-04_10:20:30
  host      : gpu-box-7.example.internal
  rank      : 6 (local_rank: 2)
  exitcode  : 1 (pid: 40113)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-11-04_10:20:30
  host      : gpu-box-7.example.internal
  rank      : 4 (local_rank: 0)
  exitcode  : 1 (pid: 40111)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_summary_cut_inside_an_entry_is_read_entry_by_entry():
    parsed = parse_text(CUT_IN_AN_ENTRY)
    (summary,) = summaries(parsed)
    assert summary.attrs["header_cut"] is True and "program" not in summary.attrs
    first, second = summary.attrs["failures"]
    assert (first["index"], first["rank"], first["pid"], first["exit_code"]) == (None, 5, 40112, 1)
    assert (second["index"], second["rank"], second["pid"]) == (2, 6, 40113)
    assert second["failed_at"] == datetime(2025, 11, 4, 10, 20, 30)
    root = summary.attrs["root_cause"]
    assert (root["rank"], root["local_rank"], root["pid"]) == (4, 0, 40111)
    assert parsed.unparsed_lines == 0 and not parsed.problems and accounted(parsed)
    assert parsed.formats == {"torchrun-summary": 22}


def test_each_entry_of_a_cut_summary_is_a_child_in_its_own_story():
    s = stories(parse_text(CUT_IN_AN_ENTRY))
    for rank, pid in ((4, 40111), (5, 40112), (6, 40113)):
        (obs,) = killed(s, rank=rank)
        assert obs.event.kind == Kind.CHILD_FAILED and obs.event.attrs["subject_pid"] == pid
        assert obs.event.attrs["exit_code"] == 1


# https://github.com/huggingface/picotron_tutorial/issues/6: the tail of the table, cut
# inside its first entry below the rank line (a child known by its pid only), SIGABRTs
CUT_BELOW_THE_RANK = """\
  exitcode  : -6 (pid: 7781)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 7781
[3]:
  time      : 2025-09-12_08:15:02
  host      : 0b1c2d3e4f50
  rank      : 3 (local_rank: 3)
  exitcode  : -6 (pid: 7782)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 7782
-----------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-09-12_08:15:02
  host      : 0b1c2d3e4f50
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 7779)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 7779
=====================================================
"""


def test_an_entry_without_its_rank_line_is_a_child_by_pid():
    parsed = parse_text(CUT_BELOW_THE_RANK)
    (summary,) = summaries(parsed)
    loose = summary.attrs["failures"][0]
    assert loose["pid"] == 7781 and "rank" not in loose and loose["exit_code"] == -6
    assert (loose["signal"], loose["signal_name"]) == (6, "SIGABRT")
    assert summary.attrs["root_cause"]["signal_name"] == "SIGABRT"
    # the traceback field's "Signal 6 ... received by PID" is the summary's, no signal of its own
    assert [e.kind for e in parsed.events] == [Kind.LAUNCHER_SUMMARY]
    assert "pid 7781" in summary.message and "rank 0 as root cause" in summary.message
    subjects = story.subjects(summary, ProcessTable.learn(list(parsed.events)))
    assert sorted(e.attrs["subject_pid"] for _, e in subjects) == [7779, 7781, 7782]


# https://github.com/lzhxmu/CPPO/issues/6: pasted from "Root Cause" down, SIGKILL
FROM_ROOT_CAUSE = """\
Root Cause (first observed failure):
[0]:
  time      : 2025-03-30_21:00:59
  host      : trainer-node-2
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 5150)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5150
============================================================
"""


def test_a_summary_pasted_from_its_root_cause():
    parsed = parse_text(FROM_ROOT_CAUSE)
    (summary,) = summaries(parsed)
    assert summary.attrs["root_cause"]["pid"] == 5150 and summary.attrs["failures"] == []
    assert summary.attrs["root_cause"]["signal_name"] == "SIGKILL"
    (obs,) = killed(stories(parsed), pid=5150)
    assert obs.event.attrs["exit_code"] == -9 and obs.event.attrs["subject_rank"] == 2


# a summary whose entry's traceback is the child's own (error_file written): torchrun
# indents its lines; a summary cut above its header ends where the indented lines end
# (https://github.com/pytorch/pytorch/issues/121209 for the entry's shape)
CUT_WITH_A_TRACEBACK = """\
[1]:
  time      : 2025-11-04_10:20:31
  host      : gpu-box-7
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 40200)
  error_file: /tmp/torchelastic_x/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/work/train.py", line 40, in step
      loss.backward()
  RuntimeError: CUDA error: an illegal memory access was encountered
Traceback (most recent call last):
  File "/work/launch.py", line 3, in <module>
    run()
ValueError: launcher says no
"""


def test_a_cut_summary_ends_where_its_indented_traceback_ends():
    parsed = parse_text(CUT_WITH_A_TRACEBACK)
    (summary,) = summaries(parsed)
    (entry,) = summary.attrs["failures"]
    assert entry["error_file"].endswith("error.json") and entry["traceback"].endswith("illegal memory access "
                                                                                      "was encountered")
    assert summary.line == 1
    (after,) = [e for e in parsed.events if e.kind == Kind.EXCEPTION]
    assert after.line == 11 and after.attrs["exception_type"] == "ValueError"


# torch 1.9's form (https://github.com/pytorch/pytorch/issues/62029, torch 1.9.0): "*"
# border, "=" sections, Root Cause before Other Failures, unpadded keys, msg in quotes
TORCH_1_9 = """\
****************************************
        train_net.py FAILED
========================================
Root Cause:
[0]:
  time: 2021-08-02_14:05:06
  rank: 3 (local_rank: 3)
  exitcode: -11 (pid: 9123)
  error_file: <N/A>
  msg: "Signal 11 (SIGSEGV) received by PID 9123"
========================================
Other Failures:
[1]:
  time: 2021-08-02_14:05:07
  rank: 1 (local_rank: 1)
  exitcode: 1 (pid: 9121)
  error_file: <N/A>
  msg: "Process failed with exitcode 1"
****************************************
"""


def test_torch_1_9s_summary():
    parsed = parse_text(TORCH_1_9)
    (summary,) = summaries(parsed)
    assert summary.attrs["program"] == "train_net.py" and "header_cut" not in summary.attrs
    root = summary.attrs["root_cause"]
    assert (root["rank"], root["pid"], root["exit_code"], root["signal_name"]) == (3, 9123, -11, "SIGSEGV")
    assert root["traceback"] == "Signal 11 (SIGSEGV) received by PID 9123"
    (other,) = summary.attrs["failures"]
    assert (other["rank"], other["pid"], other["exit_code"]) == (1, 9121, 1)
    assert parsed.unparsed_lines == 0 and parsed.formats == {"torchrun-summary": 19}


# the usual headed summary, its entry's traceback lines quoting a rank prefix
# (https://github.com/pytorch/pytorch/issues/121209 for the shape)
HEADED = """\
============================================================
pretrain.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-11-04_10:20:30
  host      : gpu-box-7
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 40100)
  error_file: /tmp/err.json
  traceback : Traceback (most recent call last):
    [rank0]:   File "/work/pretrain.py", line 8, in main
    [rank0]: RuntimeError: boom
============================================================
after the summary
"""


def test_a_headed_summary_ends_at_its_closing_border():
    parsed = parse_text(HEADED)
    (summary,) = summaries(parsed)
    assert summary.attrs["program"] == "pretrain.py" and summary.attrs["failures"] == []
    assert "[rank0]: RuntimeError: boom" in summary.attrs["root_cause"]["traceback"]
    assert summary.message.startswith("torchrun: pretrain.py failed on rank 0;")
    assert parsed.formats["torchrun-summary"] == 17 and parsed.unparsed_lines == 1


@pytest.mark.parametrize("text", [
    "  host      : a-name\n",                 # a generic field alone: no child named
    "Failures:\nsomething else\n",           # a marker alone
    "[0]:\nnot a field\n",
    "*" * 40 + "\n       CHILD PROCESS FAILED WITH NO ERROR_FILE       \n" + "*" * 40 + "\n",
])
def test_lines_that_only_look_like_a_summary_make_none(text):
    parsed = parse_text(text)
    assert summaries(parsed) == [] and not parsed.problems and accounted(parsed)


def test_start_opens_a_summary_on_a_cut_paste_and_not_on_ordinary_lines():
    for line in ("Root Cause (first observed failure):", "[3]:", "  exitcode  : -9 (pid: 12)",
                 "  rank      : 2 (local_rank: 2)", "  error_file: <N/A>", "Other Failures:",
                 "  time      : 2025-11-04_10:20:30", "  host      : node-1", "*" * 30):
        assert registry.start_block(line, None).format == "torchrun-summary", line
    for line in ("  host: node-1", "  time: 12 s", "rank 2 (local_rank 2)", "Root cause unknown", "[3]: x"):
        block = registry.start_block(line, None)
        assert block is None or block.format != "torchrun-summary", line


# --- one-line records -------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "kind", "attrs"), [
    # https://github.com/aws-samples/amazon-eks-machine-learning-with-terraform-and-kubeflow/issues/93
    ("[2025-02-01 10:11:12,345] torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown "
     "process 3310 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
     Kind.SHUTDOWN, {"subject_pid": 3310, "signal": "SIGKILL", "after_signal": "SIGTERM"}),
    # Python 3.11+ prints the signals as numbers (https://github.com/pytorch/pytorch/pull/61602)
    ("W1204 09:00:00.000000 77 torch/distributed/elastic/multiprocessing/api.py:913] Unable to shutdown "
     "process 3311 via 15, forcefully exiting via 9", Kind.SHUTDOWN, {"subject_pid": 3311, "signal": "SIGKILL"}),
    # torch.multiprocessing.spawn's spelling
    ("Unable to shutdown process 3312 via SIGTERM , forcefully exiting via SIGKILL",
     Kind.SHUTDOWN, {"subject_pid": 3312, "signal": "SIGKILL"}),
    # torch 2.5+ (https://github.com/NVIDIA/nvidia-resiliency-ext/issues/18)
    ("W0301 12:00:01.000000 4100 site-packages/torch/distributed/elastic/multiprocessing/api.py:766] Closing "
     "process 4142 via signal SIGTERM", Kind.SHUTDOWN, {"subject_pid": 4142, "signal": "SIGTERM"}),
    # torch 1.9 (https://github.com/facebookresearch/MetaICL/issues/8)
    ("Child process 6021 (local_rank 2) FAILED (exitcode -6)", Kind.CHILD_FAILED,
     {"subject_pid": 6021, "local_rank": 2, "exit_code": -6, "signal_name": "SIGABRT"}),
    # DeepSpeed's launcher (https://github.com/deepspeedai/DeepSpeed/issues/5302)
    ("[2025-03-01 09:08:07,006] [INFO] [launch.py:351:main] Process 52011 exits successfully.",
     Kind.EXIT, {"subject_pid": 52011, "exit_code": 0}),
    ("[2025-03-01 09:08:07,006] [INFO] [launch.py:336:sigkill_handler] Main process received SIGINT, exiting",
     Kind.SIGNAL_RECEIVED, {"signal": "SIGINT"}),
    # Open MPI (https://github.com/open-mpi/ompi/issues/2664)
    ("mpirun noticed that process rank 6 with PID 20771 on node cn-04 exited on signal 7 (Bus error).",
     Kind.CHILD_FAILED, {"subject_rank": 6, "subject_pid": 20771, "subject_host": "cn-04", "exit_code": -7,
                         "signal_name": "SIGBUS", "launcher": "mpirun"}),
    ("prterun noticed that process rank 1 with PID 0 on node cn-05 exited on signal 9.",
     Kind.CHILD_FAILED, {"subject_rank": 1, "exit_code": -9, "launcher": "prterun"}),
])
def test_a_launchers_line_about_a_child(line, kind, attrs):
    parsed = parse_text(line + "\n")
    (event,) = parsed.events
    assert event.kind == kind
    assert {k: event.attrs.get(k) for k in attrs} == attrs
    assert parsed.formats.get("launcher-record") == 1 and parsed.unparsed_lines == 0


def test_open_mpis_pid_0_is_no_pid():
    (event,) = parse_text("mpiexec noticed that process rank 2 with PID 0 on node n1 exited on signal 11 "
                          "(Segmentation fault).\n").events
    assert "subject_pid" not in event.attrs and event.attrs["subject_rank"] == 2


# https://github.com/NVIDIA/TensorRT-LLM/issues/213: mpirun's boxes after its ranks failed
MPI_BOXES = """\
--------------------------------------------------------------------------
Primary job  terminated normally, but 2 processes returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[52017,1],5]
  Exit code:    3
--------------------------------------------------------------------------
"""


def test_mpiruns_boxes_name_the_first_rank_that_exited():
    parsed = parse_text(MPI_BOXES)
    aborted, detected = parsed.events
    assert aborted.kind == detected.kind == Kind.CHILD_FAILED
    assert aborted.attrs["children_failed"] == 2 and "subject_rank" not in aborted.attrs
    assert (detected.attrs["subject_rank"], detected.attrs["exit_code"]) == (5, 3)
    assert aborted.process == detected.process == "mpirun" and detected.role == "launcher"
    assert parsed.formats["launcher-record"] == 9 and accounted(parsed)


def test_prrtes_process_name_gives_the_rank_too():
    parsed = parse_text("prterun detected that one or more processes exited with non-zero status, thus causing\n"
                        "the job to be terminated. The first process to do so was:\n\n"
                        "   Process name: [prterun-gpu-3-88812@1,2]\n   Exit code:    1\n" + "-" * 74 + "\n")
    (event,) = parsed.events
    assert (event.attrs["subject_rank"], event.attrs["exit_code"], event.process) == (2, 1, "prterun")


def test_mpiruns_record_is_the_dead_ranks_story_and_mpirun_relays_it():
    text = ("[1,3]<stderr>:RuntimeError: boom\n"
            "--------------------------------------------------------------------------\n"
            "mpirun noticed that process rank 3 with PID 20771 on node cn-04 exited on signal 6 (Aborted).\n"
            "--------------------------------------------------------------------------\n")
    parsed = parse_text(text)
    s = stories(parsed)
    mpirun = next(x for x in s.stories if x.name == "mpirun")
    assert mpirun.role == "launcher" and [o.seen for o in mpirun.observations] == [Seen.RELAY]
    dead = [o for x in s.stories for o in x.observations if o.seen == Seen.KILLED]
    assert [(o.event.attrs["subject_rank"], o.event.attrs["exit_code"]) for o in dead] == [(3, -6)]


@pytest.mark.parametrize("line", [
    # DeepSpeed and torch.distributed.launch print the *last* spawned command, whichever
    # child failed (https://github.com/deepspeedai/DeepSpeed/issues/5302): no child named here
    "['/usr/bin/python3', '-u', 'sft.py', '--local_rank=3'] exits with return code = -11",
    "Child process unexpectedly failed with exitcode=9. pid=4321",      # vLLM's, not torch 1.9's
    "Process 12 exits with return code = 1",                            # no launcher prints this
    "mpirun noticed that the job aborted, but has no info as to the process that caused that situation.",
])
def test_lines_no_launcher_record_reads(line):
    assert registry.start_block(line, None) is None or registry.start_block(line, None).format != "launcher-record"


# a headed summary whose closing border was not pasted: it ends with its indented lines
# (https://github.com/lzhxmu/CPPO/issues/6 for the shape)
WITHOUT_ITS_CLOSING_BORDER = """\
============================================================
eval_tasks.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-09_04:05:06
  host      : box-3
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 88123)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
Then the user wrote: it worked after a reinstall.
"""


def test_a_summary_without_its_closing_border_ends_with_its_last_entry():
    parsed = parse_text(WITHOUT_ITS_CLOSING_BORDER)
    (summary,) = summaries(parsed)
    assert summary.attrs["root_cause"]["traceback"].startswith("To enable traceback")
    assert parsed.formats["torchrun-summary"] == 14 and parsed.unparsed_lines == 1


# https://github.com/open-mpi/ompi/issues/2664 (Open MPI's help text, help-prun.txt)
@pytest.mark.parametrize(("second", "how"), [
    ("node cn-09 exiting improperly. There are three reasons this could occur:", "exited improperly"),
    ('node cn-09 calling "abort". This may have caused other processes', "called abort"),
])
def test_mpirun_has_exited_due_to_a_rank(second, how):
    parsed = parse_text("mpirun has exited due to process rank 4 with PID 31337 on\n" + second + "\n"
                        "in the application to be terminated by signals sent by mpirun\n" + "-" * 74 + "\n")
    (event,) = parsed.events
    assert (event.attrs["subject_rank"], event.attrs["subject_pid"], event.attrs["subject_host"]) == (4, 31337, "cn-09")
    assert event.attrs["how"] == how and "exit_code" not in event.attrs
    assert parsed.formats == {"launcher-record": 4}


def test_an_mpirun_line_without_its_box_takes_nothing_after_it():
    parsed = parse_text("mpirun noticed that process rank 0 with PID 4411 on node n2 exited on signal 9 (Killed).\n"
                        "Traceback (most recent call last):\n"
                        '  File "/srv/app.py", line 3, in <module>\n'
                        "RuntimeError: something else\n")
    record, traceback = parsed.events
    assert record.kind == Kind.CHILD_FAILED and record.attrs["exit_code"] == -9
    assert traceback.kind == Kind.EXCEPTION and traceback.line == 2
