"""The normaliser (forensics/inputs/normalise.py, forensics/data/wrappers.toml): what the
environment wrapped around each line comes off, and what it said is kept.

Every sample of every wrapper is checked by parametrising over wrappers.toml, so a
wrapper added there is tested here without touching this file.  The lines typed below
are hand-made in the shapes container runtimes, log viewers and launchers print.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from forensics import knowledge
from forensics.events import Kind
from forensics.inputs.normalise import Normaliser, clean_escapes, parse_time, split_glued
from tests.helpers import parse_text

WRAPPERS = knowledge.load("wrappers")["wrapper"]
ENVELOPE_FIELDS = {"time", "stream", "container", "host", "process", "pid", "rank", "repeat", "ident"}

_SAMPLE_BUGS: dict[str, str] = {}


def _samples():
    out = []
    for wrapper in WRAPPERS:
        for i, sample in enumerate(wrapper["samples"]):
            ident = f"{wrapper['id']}-{i}"
            marks = [pytest.mark.xfail(strict=True, reason=_SAMPLE_BUGS[ident])] if ident in _SAMPLE_BUGS else []
            out.append(pytest.param(wrapper["id"], sample, id=ident, marks=marks))
    return out


def lines_of(*raw: str, normaliser: Normaliser | None = None):
    norm = normaliser or Normaliser()
    out = []
    for lineno, text in enumerate(raw, 1):
        out.extend(norm.feed(lineno, text))
    out.extend(norm.flush())
    return out


# --- every sample of every wrapper -------------------------------------------------------

def test_every_wrapper_has_samples_naming_only_envelope_fields():
    ids = [w["id"] for w in WRAPPERS]
    assert len(ids) == len(set(ids))
    for wrapper in WRAPPERS:
        assert wrapper["samples"], wrapper["id"]
        for sample in wrapper["samples"]:
            assert {"line", "text"} <= set(sample), wrapper["id"]
            assert set(sample) - {"line", "text"} <= ENVELOPE_FIELDS, (wrapper["id"], sample)


@pytest.mark.parametrize("wrapper_id, sample", _samples())
def test_wrapper_sample_is_stripped_to_its_payload_and_keeps_the_envelope(wrapper_id, sample):
    (line,) = lines_of(sample["line"])
    assert line.text == sample["text"]
    assert wrapper_id in line.env.wrappers
    for key, want in sample.items():
        if key in ("line", "text"):
            continue
        got = getattr(line.env, key)
        if key == "time":
            got = got.isoformat() if got is not None else None
        assert got == want, key


# --- container runtimes --------------------------------------------------------------

def test_cri_partial_records_are_joined_into_one_line():
    norm = Normaliser()
    out = lines_of(
        "2026-01-02T03:04:05.100000000Z stdout P (EngineCore_DP0 pid=176) ERROR 01-02 03:04:05 [dump_input.py:79] "
        "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], ",
        "2026-01-02T03:04:05.100000001Z stdout P num_scheduled_tokens={'cmpl-1': 512}, ",
        "2026-01-02T03:04:05.100000002Z stdout F total_num_scheduled_tokens=512)",
        "2026-01-02T03:04:05.200000000Z stderr F RuntimeError: CUDA error: an illegal memory access was encountered",
        normaliser=norm)
    assert [line.lineno for line in out] == [1, 4]
    joined = out[0]
    assert joined.text == ("ERROR 01-02 03:04:05 [dump_input.py:79] Dumping scheduler output for model execution: "
                           "SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={'cmpl-1': 512}, "
                           "total_num_scheduled_tokens=512)")
    # the envelope is the first record's: its time, its stream, the prefix it carried
    assert joined.env.time == datetime(2026, 1, 2, 3, 4, 5, 100000)
    assert (joined.env.stream, joined.env.process, joined.env.pid) == ("stdout", "EngineCore_DP0", 176)
    assert out[1].env.stream == "stderr"
    assert norm.joined == 2


def test_cri_partial_records_join_per_stream():
    out = lines_of("2026-01-02T03:04:05.1Z stdout P part one ",
                   "2026-01-02T03:04:05.2Z stderr F RuntimeError: other stream",
                   "2026-01-02T03:04:05.3Z stdout F part two")
    assert sorted((line.lineno, line.text) for line in out) == [(1, "part one part two"),
                                                                 (2, "RuntimeError: other stream")]


def test_a_prefix_split_across_cri_records_is_read_after_joining():
    (line,) = lines_of("2026-01-02T03:04:05.1Z stderr P (Worker_T",
                       "2026-01-02T03:04:05.2Z stderr F P1 pid=7) INFO 01-02 03:04:05 [x.py:1] ok")
    assert line.text == "INFO 01-02 03:04:05 [x.py:1] ok"
    assert (line.env.process, line.env.pid, line.env.stream) == ("Worker_TP1", 7, "stderr")


def test_an_unfinished_cri_record_at_the_end_is_kept():
    (line,) = lines_of("2026-01-02T03:04:05.1Z stdout P never finished")
    assert line.text == "never finished"


def test_cri_partial_lines_reach_the_parser_as_one_record():
    text = ("2026-01-02T03:04:05.1Z stderr P (Worker_TP1 pid=7) ERROR 01-02 03:04:05 [multiproc_executor.py:671] "
            "WorkerProc hit \n"
            "2026-01-02T03:04:05.2Z stderr F an exception.\n")
    parsed = parse_text(text)
    (event,) = parsed.events
    assert event.kind == Kind.WORKER_EXCEPTION
    assert (event.pid, event.process, event.line) == (7, "Worker_TP1", 1)
    assert event.time == datetime(2026, 1, 2, 3, 4, 5, 100000)
    assert parsed.lines == 1 and parsed.unparsed_lines == 0


def test_docker_json_file_lines_are_decoded_and_split_records_joined():
    (first, second) = lines_of(
        '{"log":"(Worker_TP0 pid=9) ERROR 01-02 03:04:05 [core.py:1] first half ","stream":"stderr",'
        '"time":"2026-01-02T03:04:05.000000001Z"}',
        '{"log":"second half\\n","stream":"stderr","time":"2026-01-02T03:04:05.000000002Z"}',
        '{"log":"INFO 01-02 03:04:06 [x.py:2] \\u003cok\\u003e\\n","stream":"stdout","time":"2026-01-02T03:04:06Z"}')
    assert first.text == "ERROR 01-02 03:04:05 [core.py:1] first half second half"
    assert (first.env.process, first.env.pid, first.env.stream) == ("Worker_TP0", 9, "stderr")
    assert first.lineno == 1
    assert second.text == "INFO 01-02 03:04:06 [x.py:2] <ok>"
    assert (second.lineno, second.env.stream, second.env.time) == (3, "stdout", datetime(2026, 1, 2, 3, 4, 6))


def test_docker_json_colour_codes_are_removed():
    (line,) = lines_of('{"log":"\\u001b[1;36m(Worker_TP0 pid=9)\\u001b[0;0m ERROR 01-02 03:04:05 [x.py:1] red\\n",'
                       '"stream":"stderr","time":"2026-01-02T03:04:05Z"}')
    assert line.text == "ERROR 01-02 03:04:05 [x.py:1] red"
    assert (line.env.process, line.env.pid) == ("Worker_TP0", 9)


def test_docker_json_colour_code_before_a_level_keeps_the_level():
    (line,) = lines_of('{"log":"\\u001b[31mERROR\\u001b[0m 01-02 03:04:06 [x.py:2] red\\n","stream":"stdout",'
                       '"time":"2026-01-02T03:04:06Z"}')
    assert line.text == "ERROR 01-02 03:04:06 [x.py:2] red"


def test_a_line_that_only_looks_like_docker_json_is_kept_as_it_is():
    out = lines_of('{"log":"not json at all', '{"log": 12}')
    assert [line.text for line in out] == ['{"log":"not json at all', '{"log": 12}']
    assert all(line.env.wrappers == () for line in out)


# --- prefixes, nesting ----------------------------------------------------------------

def test_nested_wrappers_each_say_what_they_know():
    (line,) = lines_of("vllm-1  | (Worker_TP1 pid=77) [rank1]: RuntimeError: CUDA error: misaligned address")
    assert line.text == "RuntimeError: CUDA error: misaligned address"
    env = line.env
    assert (env.container, env.process, env.pid, env.rank) == ("vllm-1", "Worker_TP1", 77, 1)
    assert env.wrappers == ("compose", "process-prefix", "torch-rank")


def test_the_innermost_process_prefix_names_the_writer():
    (line,) = lines_of("Jan 02 03:04:05 gpu-node-4 vllm[812]: (Worker_TP1 pid=900) ERROR 01-02 03:04:05 [x.py:1] boom")
    assert line.env.pid == 900 and line.env.process == "Worker_TP1"
    assert line.env.host == "gpu-node-4"


def test_a_parenthesis_is_a_process_prefix_only_with_a_pid_or_a_known_name():
    out = lines_of("(abc) hello", "(Worker_TP1) hi", "(raylet) died")
    assert [(line.text, line.env.process) for line in out] == [("(abc) hello", None), ("hi", "Worker_TP1"),
                                                               ("died", "raylet")]


def test_ray_prefix_with_ip_and_repeat_suffix():
    (line,) = lines_of("(RayWorkerWrapper pid=4411, ip=10.0.3.7) ERROR 01-02 03:04:05 [worker.py:1] boom "
                       "[repeated 7x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 "
                       "to disable log deduplication, or see https://docs.ray.io/ for more options.)")
    assert line.text == "ERROR 01-02 03:04:05 [worker.py:1] boom"
    assert (line.env.process, line.env.pid, line.env.host, line.env.repeat) == ("RayWorkerWrapper", 4411,
                                                                                "10.0.3.7", 7)


def test_torch_rank_prefixes():
    out = lines_of("[rank3]: Traceback (most recent call last):", "[default1]: RuntimeError: x",
                   "[rank12]:[W1103 04:05:06.123 ProcessGroupNCCL.cpp:1] warn")
    assert [(line.text, line.env.rank) for line in out] == [
        ("Traceback (most recent call last):", 3), ("RuntimeError: x", 1),
        ("[W1103 04:05:06.123 ProcessGroupNCCL.cpp:1] warn", 12)]


def test_torchrun_tee_prefix_maps_the_local_rank_to_the_global_one():
    out = lines_of("[rank3]:[rank11]: RuntimeError: x", "[rank3]: RuntimeError: y", "[rank2]: RuntimeError: z")
    # both prefixes: the inner one (torch's global rank) wins; then the tee prefix alone
    # stands for that global rank; a local rank never seen doubled stays as it is
    assert [line.env.rank for line in out] == [11, 11, 2]


def test_torch_rank_prefix_reaches_events():
    parsed = parse_text("[rank1]: Traceback (most recent call last):\n"
                        '[rank1]:   File "/srv/train.py", line 12, in step\n'
                        "[rank1]:     torch.cuda.synchronize()\n"
                        "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    (event,) = parsed.events
    assert event.kind == Kind.CUDA_ERROR and event.rank == 1


# --- viewers and pastes -----------------------------------------------------------------

def test_box_drawing_borders_come_off_and_the_frame_line_is_noise():
    text = ("╭──────── logs vllm-0 ────────╮\n"
            "│ (Worker_TP1 pid=44) ERROR 01-02 03:04:05 [multiproc_executor.py:1] WorkerProc hit an exception. │\n"
            "╰──────────────────────────────╯\n")
    (line,) = lines_of(text.splitlines()[1])
    assert line.text == "ERROR 01-02 03:04:05 [multiproc_executor.py:1] WorkerProc hit an exception."
    assert (line.env.process, line.env.pid) == ("Worker_TP1", 44)
    parsed = parse_text(text)
    assert [e.kind for e in parsed.events] == [Kind.WORKER_EXCEPTION]
    assert parsed.noise_lines == 2 and parsed.unparsed_lines == 0


@pytest.mark.parametrize("raw", [
    "\x1b[1;36m(Worker_TP1 pid=44)\x1b[0;0m \x1b[31mERROR\x1b[0m 01-02 03:04:05 [x.py:1] coloured",
    "[1;36m(Worker_TP1 pid=44)[0;0m ERROR 01-02 03:04:05 [x.py:1] coloured",        # the ESC bytes lost in a paste
    "ESC[1;36m(Worker_TP1 pid=44)ESC[0;0m ERROR 01-02 03:04:05 [x.py:1] coloured",  # ... or spelt out
    "^[[1;36m(Worker_TP1 pid=44)^[[0;0m ERROR 01-02 03:04:05 [x.py:1] coloured",    # ... or shown as ^[
])
def test_colour_codes_and_their_remnants_are_removed(raw):
    (line,) = lines_of(raw)
    assert line.text == "ERROR 01-02 03:04:05 [x.py:1] coloured"
    assert (line.env.process, line.env.pid) == ("Worker_TP1", 44)


def test_text_that_only_resembles_colour_codes_is_kept():
    assert clean_escapes("allocated [5 blocks] in 3ms") == "allocated [5 blocks] in 3ms"
    assert clean_escapes("watchdog waited [10min] for rank 3") == "watchdog waited [10min] for rank 3"


def test_carriage_return_redraws_keep_the_last_state_and_caret_m_goes():
    (line,) = lines_of("Loading: 10%|#  | 1/10\rLoading: 100%|###| 10/10\r")
    assert line.text == "Loading: 100%|###| 10/10"
    (line,) = lines_of("RuntimeError: CUDA error: misaligned address^M")
    assert line.text == "RuntimeError: CUDA error: misaligned address"


def test_markdown_bold_dunders_are_restored_in_frames():
    (line,) = lines_of('  File "/srv/**init**.py", line 3, in **init**')
    assert line.text == '  File "/srv/__init__.py", line 3, in __init__'


def test_a_frame_line_hard_wrapped_inside_its_file_name_is_joined():
    out = lines_of('  File "/opt/venv/lib/python3.1', '1/site-packages/vllm/worker.py", line 3, in f', "    f()")
    assert [line.text for line in out] == [
        '  File "/opt/venv/lib/python3.11/site-packages/vllm/worker.py", line 3, in f', "    f()"]
    # a frame line cut short and followed by something else is kept as it is
    out = lines_of('  File "/opt/venv/lib/python3.1', "RuntimeError: x")
    assert [line.text for line in out] == ['  File "/opt/venv/lib/python3.1', "RuntimeError: x"]


GLUED = ("(Worker_TP0 pid=101) INFO 01-02 03:04:05 [gpu_model_runner.py:1] Loading weights took 4.1 GiB "
         "(Worker_TP1 pid=102) ERROR 01-02 03:04:06 [multiproc_executor.py:671] WorkerProc hit an exception. "
         "(Worker_TP1 pid=102) ERROR 01-02 03:04:06 [multiproc_executor.py:671] Traceback (most recent call last): "
         "(Worker_TP1 pid=102) ERROR 01-02 03:04:06 [multiproc_executor.py:671] RuntimeError: CUDA error: an "
         "illegal memory access was encountered")


def test_a_paste_that_lost_its_newlines_is_split_at_the_repeated_envelope():
    pieces = split_glued(GLUED)
    assert len(pieces) == 4
    assert [p.split(")")[0] for p in pieces] == ["(Worker_TP0 pid=101", "(Worker_TP1 pid=102",
                                                 "(Worker_TP1 pid=102", "(Worker_TP1 pid=102"]
    out = lines_of(GLUED)
    assert [(line.env.pid, line.text.split("] ", 1)[1]) for line in out] == [
        (101, "Loading weights took 4.1 GiB"), (102, "WorkerProc hit an exception."),
        (102, "Traceback (most recent call last):"),
        (102, "RuntimeError: CUDA error: an illegal memory access was encountered")]
    assert {line.lineno for line in out} == {1}


def test_a_glued_paste_yields_the_events_of_its_records():
    parsed = parse_text(GLUED + "\n")
    kinds = sorted(e.kind.value for e in parsed.events)
    assert kinds == ["cuda-error", "worker-exception"]
    (error,) = [e for e in parsed.events if e.kind == Kind.CUDA_ERROR]
    assert error.pid == 102 and error.attrs["exception_type"] == "RuntimeError"


def test_a_flattened_traceback_is_split_at_its_frames():
    text = ('Traceback (most recent call last): File "/srv/a.py", line 3, in main run() File "/srv/b.py", line 9, '
            'in run torch.cuda.synchronize() RuntimeError: CUDA error: an illegal memory access was encountered')
    assert split_glued(text) == ["Traceback (most recent call last):", '  File "/srv/a.py", line 3, in main',
                                 "    run()", '  File "/srv/b.py", line 9, in run', "    torch.cuda.synchronize()",
                                 "RuntimeError: CUDA error: an illegal memory access was encountered"]


def test_short_lines_and_single_records_are_never_split():
    short = "(Worker_TP0 pid=1) INFO 01-02 03:04:05 [x.py:1] a (Worker_TP1 pid=2) INFO 01-02 03:04:05 [x.py:1] b"
    assert split_glued(short) == [short]
    one = "(Worker_TP0 pid=1) INFO 01-02 03:04:05 [x.py:1] " + "config value, " * 30
    assert split_glued(one) == [one]


# --- times --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("2026-01-02T03:04:05.123456789Z", datetime(2026, 1, 2, 3, 4, 5, 123456)),
    ("2026-01-02T03:04:05+01:00", datetime(2026, 1, 2, 2, 4, 5)),          # to UTC
    ("2026-01-02T03:04:05+0100", datetime(2026, 1, 2, 2, 4, 5)),
    ("2026-01-02 03:04:05,250", datetime(2026, 1, 2, 3, 4, 5, 250000)),
    ("2026-01-02T03:04:05.1Z", datetime(2026, 1, 2, 3, 4, 5, 100000)),
])
def test_parse_time_reads_every_precision_and_zone(text, want):
    assert parse_time(text) == want


@pytest.mark.parametrize("text", ["2026-13-02T03:04:05", "garbage", ""])
def test_parse_time_refuses_what_is_not_a_time(text):
    assert parse_time(text) is None


def test_wrapper_time_is_the_event_time():
    parsed = parse_text("2025-10-22T09:52:51.402133554Z (Worker_TP1 pid=5) ERROR 10-22 09:52:51 "
                        "[multiproc_executor.py:671] WorkerProc hit an exception.\n")
    (event,) = parsed.events
    assert event.time == datetime(2025, 10, 22, 9, 52, 51, 402133)
    assert not event.time_inferred


def test_a_record_start_counts_only_at_the_line_start_or_after_whitespace():
    """Glued records start where a line would: after whitespace.  The same shapes glued to
    a word ("x[rank1]:") are text, not a lost newline."""
    body = " step done, nothing else to say about this step here, nor about the one before it either"
    glued = "[rank0]: first record" + body + " [rank1]: second record" + body
    assert split_glued(glued) == ["[rank0]: first record" + body, "[rank1]: second record" + body]
    inside = "[rank0]: first record" + body + " x[rank1]: no record" + body + " y[rank2]: still none" + body
    assert split_glued(inside) == [inside]
