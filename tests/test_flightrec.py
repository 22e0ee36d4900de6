"""Flight Recorder dumps: the reader that runs nothing, the line-up of every rank's
collectives, and the hang culprit they name.

Dumps are built here from plain data in PyTorch's key layout (data/flightrec.toml; the
real recordings under tests/data/flightrec/ show it), pickled with Python's own pickler
or written as JSON; hostile ones are built opcode by opcode.  No test times anything:
the reader's work is counted (``steps``) and its memory measured with tracemalloc.
"""

from __future__ import annotations

import json
import os
import pickle
import tracemalloc
from pathlib import Path

import pytest

from forensics import knowledge
from forensics.case import analyze
from forensics.collectives import Entry, Group, RankDump, from_events, line_up
from forensics.events import Frame, Kind
from forensics.inputs.sources import flight_recorder_dump, sniff
from forensics.parsers.flightrec.dump import from_plain, parse_ranks
from forensics.parsers.flightrec.reader import FlightRecorderParser, rank_from_name, stack_top
from forensics.parsers.flightrec.unpickle import Limits, PickleRefused, loads

BASE_NS = 1_796_416_419_000_000_000
LOG = b"(Worker_TP0 pid=11) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal memory access " \
      b"was encountered\n"


def frame(name: str, filename: str, line: int) -> dict:
    return {"name": name, "filename": filename, "line": line}


def record(seq: int, op: str = "all_reduce", state: str = "completed", *, retired: bool | None = None,
           backend: str = "nccl", group: tuple[str, str] = ("0", "default_pg"), pg_id: int = 0,
           sizes: list | None = None, called_at: tuple[str, str, int] = ("train_step", "/srv/app/train.py", 41),
           record_id: int | None = None) -> dict:
    """One entry of a dump, as PyTorch's getCollectiveTrace writes it."""
    sizes = [[64]] if sizes is None else sizes
    done = state == "completed"
    return {
        "frames": [frame(op, "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", 2696),
                   frame("wrapper", "/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py", 83),
                   frame(*called_at), frame("<module>", "/srv/app/train.py", 90)],
        "record_id": seq - 1 if record_id is None else record_id, "pg_id": pg_id, "process_group": group,
        "thread_name": "python", "thread_id": "140000000000", "collective_seq_id": seq, "p2p_seq_id": 0,
        "op_id": seq, "profiling_name": f"{backend}:{op}", "time_created_ns": BASE_NS + seq * 1_000_000,
        "input_sizes": sizes, "input_dtypes": ["Float"] * len(sizes), "output_sizes": sizes,
        "output_dtypes": ["Float"] * len(sizes), "state": state,
        "time_discovered_started_ns": BASE_NS + seq * 1_000_000 + 10 if state != "scheduled" else None,
        "time_discovered_completed_ns": BASE_NS + seq * 1_000_000 + 20 if done else None,
        "retired": done if retired is None else retired, "timeout_ms": 600000, "is_p2p": False,
    }


def dump(entries: list[dict], ranks: str = "[0, 1, 2]", status: dict | None = None, groups: dict | None = None) -> dict:
    """A dump in the layout of PyTorch's dump_dict (version 2.10)."""
    return {"version": "2.10",
            "pg_config": groups if groups is not None else {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
            "comm_lib_version": "2.21.5", "pg_status": status or {}, "entries": entries}


def write_set(folder: Path, dumps: dict[int, dict], form: str = "pickle", protocol: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, data in dumps.items():
        path = folder / f"nccl_trace_rank_{rank}"
        if form == "json":
            path.write_text(json.dumps(data, sort_keys=True))
        else:
            path.write_bytes(pickle.dumps(data, protocol=protocol))
    return folder


def three_ranks_one_missing() -> dict[int, dict]:
    """Ranks 0 and 1 completed #1-#3 and started all_reduce #4; rank 2 completed #1-#3 and never entered #4."""
    done = [record(1), record(2, "broadcast"), record(3, "barrier", sizes=[])]
    waiting = record(4, state="started", called_at=("decode_step", "/srv/app/model.py", 118))
    return {0: dump(done + [waiting]), 1: dump(done + [waiting]),
            2: dump([record(1), record(2, "broadcast"), record(3, "barrier", sizes=[],
                                                              called_at=("checkpoint", "/srv/app/train.py", 60))])}


# --- the acceptance case: one rank missing from collective N -------------------------------

def test_a_rank_missing_from_collective_n_is_named_with_op_seq_and_its_dump(tmp_path):
    case = analyze(str(write_set(tmp_path / "dumps", three_ranks_one_missing())))
    v = case.verdict
    assert (v.hang.basis, v.hang.collective, v.hang.seq, v.hang.suspects, v.hang.waited) == \
        ("flight-recorder", "all_reduce", 4, (2,), (0, 1))
    assert v.hang.culprit_how == "never-entered"
    assert v.first_failure.rank == 2
    basis = v.first_failure.basis
    assert "nccl_trace_rank_2" in basis and "all_reduce #4" in basis
    # where the waiting ranks called it, and where the late rank last was
    assert "decode_step (/srv/app/model.py:118)" in basis
    assert "barrier #3 (completed), called at checkpoint (/srv/app/train.py:60)" in basis
    rows = {r.rank: r for r in v.ranks}
    assert rows[2].status.value == "unknown" and "never entered all_reduce #4" in rows[2].failure
    assert rows[0].status.value == "collateral" and "for rank 2" in rows[0].failure


def test_every_record_is_on_the_timeline(tmp_path):
    case = analyze(str(write_set(tmp_path / "dumps", three_ranks_one_missing())))
    records = [e for e in case.events if e.kind == Kind.COLLECTIVE_RECORD]
    assert len(records) == 11
    assert {e.rank for e in records} == {0, 1, 2}
    waiting = [e for e in records if e.attrs["seq"] == 4]
    assert {e.attrs["state"] for e in waiting} == {"started"}
    assert waiting[0].attrs["stack_top"] == "decode_step (/srv/app/model.py:118)"
    assert waiting[0].attrs["input_sizes"] == ((64,),) and waiting[0].time is not None
    assert len(case.timeline[case.timeline.kind == "collective-record"]) == 11
    dumps = [e for e in case.events if e.kind == Kind.FLIGHT_RECORDER]
    assert sorted(e.rank for e in dumps) == [0, 1, 2]
    assert dumps[0].attrs["groups"][0]["ranks"] == (0, 1, 2)


def test_all_complete_names_no_culprit(tmp_path):
    done = [record(1), record(2, "broadcast"), record(3)]
    case = analyze(str(write_set(tmp_path / "dumps", {r: dump(done) for r in range(3)})))
    assert case.stories.collectives is not None and case.stories.collectives.hangs == ()
    assert case.verdict.hang is None and case.verdict.first_failure is None


def test_a_rank_stuck_in_an_earlier_collective(tmp_path):
    """Ranks 0 and 1 completed #3 and wait in #4; rank 2's #3 never completed."""
    done = [record(1), record(2), record(3)]
    ahead = done + [record(4, state="started")]
    stuck = [record(1), record(2), record(3, state="started", called_at=("all_gather_kv", "/srv/app/kv.py", 12))]
    case = analyze(str(write_set(tmp_path / "dumps", {0: dump(ahead), 1: dump(ahead), 2: dump(stuck)})))
    v = case.verdict
    assert v.hang.suspects == (2,) and v.hang.culprit_how == "stuck-earlier" and v.hang.seq == 4
    assert "still in all_reduce #3" in v.hang.culprit_doing and "all_gather_kv (/srv/app/kv.py:12)" in v.hang.culprit_doing


def test_mismatched_sizes_name_the_odd_rank(tmp_path):
    done = [record(1), record(2)]
    dumps = {r: dump(done + [record(3, state="started", sizes=[[64]] if r != 1 else [[32]])]) for r in range(3)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (1,) and v.hang.culprit_how == "mismatch" and v.hang.seq == 3
    assert "[[32]]" in v.hang.culprit_doing and "[[64]]" in v.hang.culprit_doing


def test_a_different_op_at_the_same_sequence_number_names_the_odd_rank(tmp_path):
    done = [record(1), record(2)]
    dumps = {r: dump(done + [record(3, "broadcast" if r == 0 else "all_reduce", state="started")]) for r in range(3)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (0,) and "is broadcast where its peers called all_reduce" in v.hang.culprit_doing


def test_shapes_of_rooted_collectives_may_differ(tmp_path):
    """gather's output is the root's alone: different shapes are no mismatch (data/flightrec.toml [sizes])."""
    dumps = {r: dump([record(1, "gather", state="started", sizes=[[8]] if r else [[24]])]) for r in range(3)}
    lineup = analyze(str(write_set(tmp_path / "dumps", dumps))).stories.collectives
    assert lineup.suspects == () and lineup.hangs[0].waiting == (0, 1, 2)


def test_a_rank_waiting_in_another_group_points_at_the_rank_it_waits_for(tmp_path):
    """Ranks 0 and 1 wait in #4 of the default group; rank 2 waits in #1 of group "1"
    (ranks 2, 3) for rank 3, which entered neither: rank 3 is the culprit, not rank 2."""
    world = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
             "1": {"name": "1", "desc": "tp", "ranks": "[2, 3]"}}
    done = [record(1), record(2), record(3)]
    sub = record(1, "broadcast", state="started", group=("1", "tp"), pg_id=1, record_id=3)
    dumps = {0: dump(done + [record(4, state="started")], groups=world),
             1: dump(done + [record(4, state="started")], groups=world),
             2: dump(done + [sub], groups=world),
             3: dump(done, groups=world)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (3,)
    assert dict(v.hang.waits)[2] == "broadcast #1 of process group 1 (tp)"
    rows = {r.rank: r for r in v.ranks}
    assert rows[2].status.value == "collateral" and "broadcast #1 of process group 1 (tp)" in rows[2].failure


def test_two_ranks_each_waiting_for_the_other_are_undecided(tmp_path):
    world = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"},
             "1": {"name": "1", "desc": "pp", "ranks": "[0, 1]"}}
    dumps = {0: dump([record(1, state="started")], groups=world),
             1: dump([record(1, "broadcast", state="started", group=("1", "pp"), pg_id=1)], groups=world)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (0, 1) and v.first_failure.rank is None
    assert "cannot tell" in v.first_failure.basis


def test_a_member_without_a_dump_is_said_to_have_none(tmp_path):
    waiting = [record(1), record(2, state="started")]
    v = analyze(str(write_set(tmp_path / "dumps", {0: dump(waiting), 1: dump(waiting)}))).verdict
    assert v.hang.suspects == (2,) and v.hang.culprit_how == "no-dump"
    assert "rank 2 has no dump in the inputs" in v.hang.culprit_doing


def test_not_started_is_the_late_rank_when_nobody_is_behind(tmp_path):
    """NCCL: ranks 0 and 2 started #5 (their kernels wait for peers); rank 1's is still
    scheduled - its GPU never reached it."""
    done = [record(s) for s in range(1, 5)]
    dumps = {r: dump(done + [record(5, state="scheduled" if r == 1 else "started")]) for r in range(3)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (1,) and v.hang.culprit_how == "not-started"


def test_all_started_and_none_behind_is_in_flight_not_a_hang(tmp_path):
    """Every rank's kernel started #2 and nothing timed out: a dump taken while it runs."""
    done = [record(1)]
    dumps = {r: dump(done + [record(2, state="started")]) for r in range(3)}
    case = analyze(str(write_set(tmp_path / "dumps", dumps)))
    assert case.stories.collectives.hangs[0].waiting == (0, 1, 2)
    assert case.verdict.hang is None and case.verdict.first_failure is None


def test_all_started_and_timed_out_is_a_hang_whose_late_rank_is_undecided(tmp_path):
    """NCCL retired #2 unfinished on every rank (its watchdog timed out): a hang, and no
    dump says who is late."""
    done = [record(1)]
    dumps = {r: dump(done + [record(2, state="started", retired=True)]) for r in range(3)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == () and v.first_failure.rank is None
    assert "cannot tell" in v.first_failure.basis


def test_a_wrapped_ring_buffer_is_no_sign_of_a_late_rank(tmp_path):
    """Rank 0's buffer kept only #98-#100 (it went on ahead); rank 1's is at #101 with rank 0."""
    ahead = [record(s, record_id=s) for s in (98, 99, 100)] + [record(101, state="started", record_id=101)]
    dumps = {0: dump(ahead, ranks="[0, 1]"), 1: dump(ahead[1:], ranks="[0, 1]")}
    lineup = analyze(str(write_set(tmp_path / "dumps", dumps))).stories.collectives
    assert lineup.hangs[0].seq == 101 and lineup.suspects == ()


def test_gloo_completion_is_read_from_retired_and_pg_status(tmp_path):
    """gloo's records stay "scheduled" for ever: retired (and pg_status) say they completed."""
    def gloo(seq, retired):
        return record(seq, state="scheduled", retired=retired, backend="gloo")
    status = {"0": {"last_enqueued_collective": 3, "last_started_collective": -1, "last_completed_collective": 3}}
    dumps = {0: dump([gloo(1, True), gloo(2, True), gloo(3, True), gloo(4, False)], ranks="[0, 1]"),
             1: dump([gloo(1, True), gloo(2, True), gloo(3, False)], ranks="[0, 1]", status=status)}
    v = analyze(str(write_set(tmp_path / "dumps", dumps))).verdict
    assert v.hang.suspects == (1,) and v.hang.seq == 4 and v.hang.culprit_how == "never-entered"
    assert "all_reduce #3 (completed)" in v.hang.culprit_doing


def test_the_json_form_lines_up_as_the_pickle_does(tmp_path):
    pickled = analyze(str(write_set(tmp_path / "p", three_ranks_one_missing()))).verdict.hang
    as_json = {r: {**d, "entries": [{k: v for k, v in e.items() if k != "frames"} for e in d["entries"]]}
               for r, d in three_ranks_one_missing().items()}
    v = analyze(str(write_set(tmp_path / "j", as_json, form="json"))).verdict
    assert (v.hang.collective, v.hang.seq, v.hang.suspects, v.hang.waited) == \
        (pickled.collective, pickled.seq, pickled.suspects, pickled.waited)
    assert v.hang.called_at is None       # the JSON form has no frames


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_of_plain_data_is_read(tmp_path, protocol):
    lineup = analyze(str(write_set(tmp_path / "dumps", three_ranks_one_missing(), protocol=protocol))).stories.collectives
    assert lineup.suspects == (2,)


def test_frames_shared_through_the_memo_are_read_on_every_entry():
    """PyTorch's pickler writes each distinct frame once and refers back to it (BINGET)."""
    shared = frame("step", "/srv/app/train.py", 7)
    entries = [record(s) for s in range(1, 4)]
    for e in entries:
        e["frames"] = [shared, shared]
    data = pickle.dumps(dump(entries), protocol=2)
    assert data.count(b"h") >= 1 and data.count(b"/srv/app/train.py") == 1
    value = loads(data).value
    assert all(e["frames"][1] == shared for e in value["entries"])


def test_several_dumps_of_one_rank_read_the_one_that_shows_the_wait(tmp_path):
    sets = three_ranks_one_missing()
    folder = write_set(tmp_path / "dumps", sets)
    later = dict(sets[0])
    later["entries"] = sets[0]["entries"][:3] + [record(4, state="started", retired=True)]
    later["entries"][3]["state"] = "completed"       # a dump taken after the timeout: #4 retired
    (folder / "after_timeout_rank_0").write_bytes(pickle.dumps(later, protocol=2))
    lineup = analyze(str(folder)).stories.collectives
    assert lineup.suspects == (2,)
    assert any("rank 0 has 2 Flight Recorder dumps" in n for n in lineup.notes)


def test_line_up_is_a_function_of_the_dumps_alone():
    def e(rank, seq, state):
        return Entry(rank=rank, source=f"d{rank}", group="0", group_desc="default_pg", pg_id=0, seq=seq,
                     op="all_reduce", profiling_name="nccl:all_reduce", backend="nccl", state=state, retired=False)
    world = (Group("0", "default_pg", (0, 1)),)
    lineup = line_up([RankDump(0, "d0", world, {}, {}, (e(0, 1, "completed"), e(0, 2, "started"))),
                      RankDump(1, "d1", world, {}, {}, (e(1, 1, "completed"),))])
    assert lineup.suspects == (1,) and lineup.culprit.how == "never-entered" and lineup.culprit_hang.seq == 2
    assert from_events([]) is None


# --- reading ------------------------------------------------------------------------------

def test_dumps_are_recognised_by_their_content(tmp_path):
    path = tmp_path / "renamed.bin"
    path.write_bytes(pickle.dumps(three_ranks_one_missing()[0], protocol=2))
    assert sniff(path, "renamed.bin").kind == "flight-recorder"
    path.write_text(json.dumps(three_ranks_one_missing()[0], sort_keys=True))
    assert sniff(path, "renamed.bin").kind == "flight-recorder"
    # any other pickle stays unread
    path.write_bytes(pickle.dumps({"requests": [1, 2]}, protocol=4))
    assert sniff(path, "renamed.bin").kind == "unknown"
    assert not flight_recorder_dump(b'{"entries": []}')


@pytest.mark.parametrize("name, rank", [
    ("nccl_trace_rank_3", 3), ("dir/nccl_trace_rank_12.gz", 12), ("bundle.tar!x/fr_trace_rank-7.json", 7),
    ("my_prefix5", 5), ("nccl_trace_rank_", None), ("trace", None),
])
def test_the_rank_comes_from_the_file_name(name, rank):
    assert rank_from_name(name) == rank


def test_a_dump_that_names_its_rank_is_that_rank(tmp_path):
    data = dump([record(1)])
    data["rank"] = 6
    path = tmp_path / "trace"
    path.write_bytes(pickle.dumps(data, protocol=2))
    parsed = FlightRecorderParser().parse(sniff(path, "trace"))
    assert {e.rank for e in parsed.events} == {6} and not parsed.problems


def test_a_dump_without_a_rank_says_so(tmp_path):
    path = tmp_path / "trace"
    path.write_bytes(pickle.dumps(dump([record(1)]), protocol=2))
    parsed = FlightRecorderParser().parse(sniff(path, "trace"))
    assert any("which rank" in p for p in parsed.problems) and parsed.events


def test_fields_of_the_wrong_type_are_left_out_and_counted():
    entry = record(1)
    entry["collective_seq_id"] = "one"
    entry["input_sizes"] = "[[64]]"
    parsed = from_plain(dump([entry, "junk"]), "pickle")
    assert parsed.records[0].collective_seq is None and parsed.records[0].input_sizes == ()
    assert "collective_seq_id (1)" in parsed.problems[0] and "entry that is not a dict (1)" in parsed.problems[0]


@pytest.mark.parametrize("text, ranks", [
    ("[0, 1, 2]", (0, 1, 2)), ("[]", ()), ([3, 4], (3, 4)), ("[0, __import__('os')]", None), ("0, 1", None),
    ("[99999999999]", None),
])
def test_group_ranks_are_read_as_numbers_never_evaluated(text, ranks):
    assert parse_ranks(text) == ranks


def test_the_stack_top_skips_torch_distributed_wrappers():
    frames = (Frame("/x/torch/distributed/distributed_c10d.py", 1, "all_reduce"),
              Frame("/x/torch/distributed/c10d_logger.py", 2, "wrapper"), Frame("/srv/a.py", 3, "step"))
    assert stack_top(frames).function == "step"
    assert stack_top(frames[:2]).function == "all_reduce"


def test_the_catalogue_is_consistent():
    catalogue = knowledge.load("flightrec")
    assert catalogue["states"]["completed"] in catalogue["states"]["known"]
    assert catalogue["states"]["scheduled"] in catalogue["states"]["known"]
    assert "all_reduce" in catalogue["sizes"]["must_match"] and "gather" not in catalogue["sizes"]["must_match"]


# --- hostile dumps ------------------------------------------------------------------------

class _Planted:
    """Unpickled, it would create a file (as a GLOBAL to os.system would run a command)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _head() -> bytes:
    """The start of a dump (PROTO 2, a dict, the version and pg_config keys), so that the
    file is taken for a Flight Recorder dump and reaches the reader."""
    def s(text):
        raw = text.encode()
        return b"X" + len(raw).to_bytes(4, "little") + raw
    return b"\x80\x02}(" + s("version") + s("2.10") + s("pg_config")


def refused(path: Path) -> list[str]:
    case_sources = FlightRecorderParser().parse(sniff(path, path.name))
    assert not case_sources.events
    return case_sources.problems


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_dump_with_a_global_is_refused_and_nothing_runs(tmp_path, protocol):
    marker = tmp_path / "PWNED"
    data = dump([record(1)])
    data["entries"][0]["frames"] = [_Planted(str(marker))]
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    path = bundle / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    (bundle / "server.log").write_bytes(LOG)
    assert sniff(path, path.name).kind == "flight-recorder"
    case = analyze(str(bundle))
    assert case.verdict.error.code == 700          # the analysis of the rest goes on
    problems = [p for s in case.sources for p in s.problems]
    assert any("Flight Recorder dump refused" in p and "nothing in it was run" in p for p in problems), problems
    assert any("GLOBAL (imports a Python name)" in p for p in problems), problems
    assert not marker.exists()
    assert not any(e.kind == Kind.COLLECTIVE_RECORD for e in case.events)


def test_a_protocol_0_pickle_is_text_and_never_loaded(tmp_path):
    """Protocol 0 has no binary header: the file reads as text, as any other text would."""
    marker = tmp_path / "PWNED"
    data = dump([record(1)])
    data["entries"][0]["frames"] = [_Planted(str(marker))]
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(data, protocol=0))
    (tmp_path / "server.log").write_bytes(LOG)
    case = analyze(str(tmp_path))
    assert "flight-recorder" not in {s.kind for s in case.sources}
    assert not marker.exists()


def test_reduce_build_and_object_opcodes_are_refused():
    for op, name in ((b"R", "REDUCE"), (b"b", "BUILD"), (b"o", "OBJ"), (b"\x81", "NEWOBJ"), (b"\x82\x01", "EXT1"),
                     (b"Q", "BINPERSID")):
        with pytest.raises(PickleRefused, match=name):
            loads(_head() + b"N" + op + b".")


def test_a_deeply_nested_bomb_is_refused_after_a_bounded_amount_of_work(tmp_path):
    depth = 200_000
    data = _head() + b"]" * depth + b"a" * (depth - 1) + b"u."
    with pytest.raises(PickleRefused, match="nested more than 32 deep") as info:
        loads(data)
    assert info.value.steps < depth + 100         # it stops at the 33rd level, not at the end
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    assert any("nested more than 32 deep" in p for p in refused(path))


def test_a_memo_bomb_is_refused_before_it_is_walked():
    """Ten references to a list of ten references to ... : 10**9 items from 300 bytes."""
    body = b"X\x01\x00\x00\x00a" + b"q\x00"         # "a", memo 0
    for level in range(1, 10):
        body += b"(" + b"h" + bytes([level - 1]) + b"2" * 9 + b"l" + b"q" + bytes([level])
    data = _head() + body + b"u."
    assert len(data) < 400
    with pytest.raises(PickleRefused, match="memo bomb") as info:
        loads(data)
    assert info.value.steps < 500


@pytest.mark.parametrize("op, length, words", [
    (b"\x8d", 1 << 60, "more than the 1,048,576 a string may have"),     # BINUNICODE8
    (b"\x8e", 1 << 62, "more than the 1,048,576 a string may have"),     # BINBYTES8
    (b"X", 900_000, "cut short"),                                        # BINUNICODE past the end
    (b"\x8b", 1 << 30, "an integer of"),                                 # LONG4
])
def test_a_huge_length_prefix_is_refused_without_allocating(op, length, words):
    size = {b"\x8d": 8, b"\x8e": 8, b"X": 4, b"\x8b": 4}[op]
    data = _head() + op + length.to_bytes(size, "little") + b"abc"
    tracemalloc.start()
    try:
        with pytest.raises(PickleRefused, match=words):
            loads(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_a_truncated_dump_is_refused(tmp_path):
    whole = pickle.dumps(three_ranks_one_missing()[0], protocol=2)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(whole[: len(whole) // 2])
    assert any("cut short" in p for p in refused(path))
    path.write_text(json.dumps(three_ranks_one_missing()[0])[:500])
    assert any("not JSON" in p for p in refused(path))


def test_more_values_than_the_cap_are_refused_in_bounded_memory():
    data = _head() + b"N" * 5000 + b"."
    with pytest.raises(PickleRefused, match="more than 1,000 values"):
        loads(data, Limits(objects=1000))
    with pytest.raises(PickleRefused, match="more than 1,000 values on the stack"):
        loads(_head() + b"N" + b"2" * 5000 + b".", Limits(objects=1000))


def test_a_container_changed_after_it_was_shared_or_put_in_itself_is_refused():
    # a list memoised, put into another list, then appended to through the memo
    shared_then_changed = _head() + b"]q\x00]h\x00aNh\x00Na."
    with pytest.raises(PickleRefused, match="changed after it was put into another"):
        loads(shared_then_changed)
    with pytest.raises(PickleRefused, match="put into itself"):
        loads(_head() + b"]2a.")


def test_keys_that_are_not_strings_are_refused():
    with pytest.raises(PickleRefused, match="key is a int"):
        loads(b"\x80\x02}K\x01Ns.")


def test_a_json_bomb_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_text('{"pg_config": ' + "[" * 100_000 + "]" * 100_000 + ', "version": "2.10"}')
    assert any("nested" in p or "too deep" in p for p in refused(path))
    path.write_text('{"pg_config": {}, "version": "2.10", "entries": [' + "9" * 5000 + "]}")
    assert any("20 digits" in p for p in refused(path))


def test_a_plain_value_that_is_no_dump_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps([{"version": 1, "pg_config": 2}], protocol=2))   # a list, head keys present
    assert sniff(path, path.name).kind == "flight-recorder"
    assert any("not a Flight Recorder dump" in p for p in refused(path))


# --- real recordings (tests/data/flightrec/*/README.md says how each was made) ---------------

REC = Path(__file__).resolve().parent / "data" / "flightrec"


def test_recorded_gloo_dumps_name_the_rank_that_skipped_all_reduce_4(tmp_path):
    for folder in ("gloo_missing", "gloo_missing_json"):
        v = analyze(str(REC / folder)).verdict
        assert (v.hang.basis, v.hang.collective, v.hang.seq, v.hang.suspects, v.hang.waited) == \
            ("flight-recorder", "all_reduce", 4, (2,), (0, 1)), folder
        assert v.first_failure.rank == 2 and "nccl_trace_rank_2" in v.first_failure.basis
        assert "barrier #3 (completed)" in v.hang.culprit_doing
    # the dumps alone, without the console: the same answer, from the dumps only
    for rank in range(3):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes((REC / "gloo_missing" / f"nccl_trace_rank_{rank}").read_bytes())
    v = analyze(str(tmp_path)).verdict
    assert v.hang.suspects == (2,) and v.first_failure.rank == 2
    assert "worker.py:72" in v.hang.called_at        # the async all_reduce of lab/flightrec/worker.py


def test_recorded_gloo_subgroup_names_the_rank_both_groups_wait_for():
    v = analyze(str(REC / "gloo_subgroup")).verdict
    assert v.hang.suspects == (3,) and v.first_failure.rank == 3
    waits = dict(v.hang.waits)
    assert waits[0].startswith("all_reduce #4") and waits[2].startswith("broadcast #1 of process group 1")


def test_recorded_gloo_run_that_completed_has_no_hang():
    case = analyze(str(REC / "gloo_complete"))
    assert case.stories.collectives.hangs == () and case.verdict.hang is None
    assert case.verdict.first_failure is None


@pytest.mark.parametrize("folder", ["nccl_h200_world1", "nccl_h200_world1_json"])
def test_recorded_nccl_dumps_of_one_gpu_show_the_collective_its_stream_never_started(folder):
    case = analyze(str(REC / folder))
    records = [e for e in case.events if e.kind == Kind.COLLECTIVE_RECORD]
    assert [e.attrs["state"] for e in records] == ["completed"] * 3 + ["scheduled"]
    assert {e.attrs["backend"] for e in records} == {"nccl"}
    v = case.verdict
    assert (v.hang.seq, v.hang.suspects, v.hang.culprit_how) == (4, (0,), "not-started")


def test_recorded_dumps_pass_the_reader_unchanged():
    """What the reader builds equals what pickle would load from PyTorch's own dumps (the
    files are ours: loading them with pickle is safe here, and only here)."""
    for path in sorted(REC.glob("*/nccl_trace_rank_*")):
        data = path.read_bytes()
        if data[:1] == b"\x80":
            assert loads(data).value == pickle.loads(data), path
    assert os.path.getsize(REC / "gloo_missing" / "nccl_trace_rank_0") < 4096


def test_no_advice_to_turn_on_the_flight_recorder_when_its_dumps_are_read(tmp_path):
    with_dumps = analyze(str(REC / "nccl_h200_world1")).verdict
    assert with_dumps.failure_kind.value == "nccl-timeout"
    assert "nccl-flight-recorder" not in [s.id for s in with_dumps.next_steps]
    (tmp_path / "console.txt").write_bytes((REC / "nccl_h200_world1" / "console.txt").read_bytes())
    without = analyze(str(tmp_path)).verdict
    assert "nccl-flight-recorder" in [s.id for s in without.next_steps]
