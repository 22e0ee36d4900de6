"""Python tracebacks (forensics/parsers/text/traceback.py, grammars/python_traceback.lark)
and what kind of event a traceback is (forensics/parsers/text/classify.py), through the
text parser as a console is read; pytest's long failure report (parsers/text/pytest.py).

Real inputs come from tests/data (recordings on the H200, see tests/data/gpu/README.md);
the others are hand-made in CPython's, torch's, Ray's and pytest's printed shapes.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from forensics.events import Kind, Severity
from forensics.parsers.text import traceback
from forensics.parsers.text.traceback import parse_block, parse_lines, starts_block
from tests.conftest import DATA
from tests.helpers import parse_text


def tracebacks(parsed):
    return [e for e in parsed.events if "chain" in e.attrs]


def only_traceback(text: str):
    parsed = parse_text(text)
    (event,) = tracebacks(parsed)
    return event, parsed


# --- chains --------------------------------------------------------------------------------

CAUSE = """\
Traceback (most recent call last):
  File "/srv/a.py", line 1, in f
    g()
KeyError: 'x'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/srv/b.py", line 2, in h
    raise RuntimeError('CUDA error: misaligned address') from e
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: CUDA error: misaligned address
"""


def test_chained_by_cause():
    event, parsed = only_traceback(CAUSE)
    first, second = event.chain
    assert (first.type, first.message, first.chained_by) == ("KeyError", "'x'", None)
    assert (second.type, second.chained_by) == ("RuntimeError", "cause")
    assert [(f.file, f.line, f.function) for f in second.frames] == [("/srv/b.py", 2, "h")]
    assert second.frames[0].code == "raise RuntimeError('CUDA error: misaligned address') from e"   # carets dropped
    assert event.kind == Kind.CUDA_ERROR
    assert event.attrs["cuda_error"].name == "CUDA_ERROR_MISALIGNED_ADDRESS"
    assert event.message == "RuntimeError: CUDA error: misaligned address"
    assert (event.line, event.attrs["lines"]) == (1, 12)
    assert parsed.unparsed_lines == 0 and parsed.event_lines == parsed.lines


def test_chained_by_context_and_the_final_exception_decides_the_kind():
    text = CAUSE.replace("The above exception was the direct cause of the following exception:",
                         "During handling of the above exception, another exception occurred:")
    event, _ = only_traceback(text.replace("RuntimeError: CUDA error: misaligned address\n", "OSError: disk\n"))
    assert [e.chained_by for e in event.chain] == [None, "context"]
    assert (event.kind, event.attrs["exception_type"]) == (Kind.EXCEPTION, "OSError")


def test_a_cuda_error_earlier_in_the_chain_makes_the_traceback_a_cuda_error():
    text = CAUSE.replace("KeyError: 'x'", "RuntimeError: CUDA error: an illegal memory access was encountered") \
        .replace("RuntimeError: CUDA error: misaligned address\n", "ValueError: step failed\n")
    event, _ = only_traceback(text)
    assert event.kind == Kind.CUDA_ERROR
    assert event.attrs["cuda_error"].code == 700
    assert event.attrs["error_exception"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert event.message == "ValueError: step failed"


def test_a_relay_type_raised_from_an_own_cuda_error_is_that_cuda_error():
    text = """\
Traceback (most recent call last):
  File "/srv/a.py", line 3, in step
    torch.cuda.synchronize()
RuntimeError: CUDA error: an illegal memory access was encountered

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/srv/a.py", line 9, in loop
    raise EngineDeadError("engine dead")
vllm.v1.engine.exceptions.EngineDeadError: engine dead
"""
    event, _ = only_traceback(text)
    assert event.kind == Kind.CUDA_ERROR
    # ... but on its own the same exception is a relay of another process's failure
    alone, _ = only_traceback(text.split("During handling")[1].split("\n", 2)[2])
    assert alone.kind == Kind.ENGINE_DEAD


@pytest.mark.parametrize("last, kind, severity", [
    ("KeyboardInterrupt", Kind.SIGNAL_RECEIVED, Severity.WARNING),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", Kind.CHILD_FAILED, Severity.ERROR),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
     "79.10 GiB of which 1.02 GiB is free.", Kind.OOM, Severity.ERROR),
    ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", Kind.WORKER_DIED,
     Severity.ERROR),
    ("IndexError: index 7 is out of bounds for dimension 0 with size 4", Kind.EXCEPTION, Severity.ERROR),
])
def test_the_kind_of_a_traceback(last, kind, severity):
    event, _ = only_traceback('Traceback (most recent call last):\n  File "/srv/a.py", line 3, in f\n    g()\n'
                              f"{last}\n")
    assert (event.kind, event.severity) == (kind, severity)


# --- real tracebacks ------------------------------------------------------------------------

def test_unraisable_exception_in_a_finaliser_real():
    # real: rank 2 of the TP=4 recording, raw stderr between the worker's records
    lines = (DATA / "gpu/tp4_oob_write_del_cumemfree/worker_TP2.log").read_text().splitlines()
    parsed = parse_text("\n".join(lines[8:15]) + "\n")
    (event,) = tracebacks(parsed)
    (exc,) = event.chain
    assert exc.unraisable_in.startswith("<function SignalPadBuffer.__del__")
    assert (exc.type, exc.message) == ("RuntimeError", "CUDA error code=700(b'CUDA_ERROR_ILLEGAL_ADDRESS')")
    assert [(f.function, f.line) for f in exc.frames] == [("__del__", 29), ("checkCudaErrors", 13)]
    assert exc.frames[0].code == "checkCudaErrors(cuda.cuMemFree(self.signal_pads_dev))"
    assert event.attrs["unraisable"] is True
    assert (event.kind, event.attrs["error_form"]) == (Kind.CUDA_ERROR, "cuda-python")


def test_whole_worker_log_real():
    parsed = parse_text((DATA / "gpu/tp4_oob_write_del_cumemfree/worker_TP2.log").read_bytes(), "worker_TP2.log")
    events = tracebacks(parsed)
    # the finaliser's unraisable error, the worker's logged traceback, the second finaliser
    assert [e.attrs["exception_type"] for e in events] == ["RuntimeError", "RuntimeError", "AttributeError"]
    assert [e.attrs["unraisable"] for e in events] == [True, False, True]
    logged = events[1]
    assert [f.function for f in logged.chain[-1].frames][-2:] == ["__init__", "checkCudaErrors"]
    assert logged.attrs["logged_at"] == "gpu_worker.py:92"
    assert (logged.time.month, logged.time.day, logged.time.hour, logged.time.minute) == (12, 2, 14, 45)
    assert parsed.unparsed_lines == 0


def test_torch_multiline_cuda_error_text_is_one_message_real():
    parsed = parse_text((DATA / "gpu/torch_item_after_oob/console.log").read_bytes())
    first, *cupy = tracebacks(parsed)
    (exc,) = first.chain
    assert exc.type == "torch.AcceleratorError"
    assert exc.message.splitlines()[0] == "CUDA error: an illegal memory access was encountered"
    assert "CUDA_LAUNCH_BLOCKING=1" in exc.message and "TORCH_USE_CUDA_DSA" in exc.message
    assert exc.frames[-1].code == 'print("next token:", next_token.item())'
    assert first.attrs["cuda_error"].name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    # CuPy's teardown: a plain traceback, then the same error unraisable in a Cython finaliser
    assert [e.attrs["unraisable"] for e in cupy] == [False, True]
    assert cupy[1].attrs["unraisable_in"] == "'cupy.cuda.function.Module.__dealloc__'"
    assert all(e.attrs["error_form"] == "cupy-driver" for e in cupy)
    # the warning and its source line before the traceback are noise, not unparsed
    assert parsed.unparsed_lines == 0 and parsed.formats.get("python-warning") == 2


# --- blocks on streams ------------------------------------------------------------------------

def test_two_tracebacks_in_one_vllm_record_are_two_events():
    head = "(Worker_TP0 pid=25690) ERROR 12-02 10:34:18 [multiproc_executor.py:1063] "
    body = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    f()",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "Traceback (most recent call last):", '  File "y.py", line 2, in g', "    g()", "ValueError: second", ""]
    parsed = parse_text("".join(head + line + "\n" for line in body))
    first, second = tracebacks(parsed)
    assert (first.kind, first.line, second.kind, second.line) == (Kind.CUDA_ERROR, 1, Kind.EXCEPTION, 5)
    assert first.pid == second.pid == 25690 and first.process == "Worker_TP0"
    assert parsed.unparsed_lines == 0


def test_interleaved_ranks_are_assembled_separately():
    parsed = parse_text("[rank0]: Traceback (most recent call last):\n"
                        "[rank1]: Traceback (most recent call last):\n"
                        '[rank0]:   File "/srv/a.py", line 1, in f\n'
                        '[rank1]:   File "/srv/b.py", line 9, in g\n'
                        "[rank1]:     g()\n"
                        "[rank0]:     f()\n"
                        "[rank0]: ValueError: one\n"
                        "[rank1]: OSError: two\n")
    by_rank = {e.rank: e for e in tracebacks(parsed)}
    assert set(by_rank) == {0, 1}
    assert (by_rank[0].attrs["exception_type"], by_rank[0].chain[0].frames[0].file) == ("ValueError", "/srv/a.py")
    assert (by_rank[1].attrs["exception_type"], by_rank[1].chain[0].frames[0].code) == ("OSError", "g()")
    assert (by_rank[0].line, by_rank[1].line) == (1, 2)


def test_logger_exception_record_then_raw_traceback_takes_the_records_time():
    parsed = parse_text("ERROR 06-03 14:02:10 [engine.py:160] Error in engine loop\n"
                        "Traceback (most recent call last):\n"
                        '  File "/srv/engine.py", line 150, in run\n'
                        "    self.step()\n"
                        "RuntimeError: CUDA error: device-side assert triggered\n"
                        "INFO 06-03 14:02:11 [engine.py:170] shutting down\n")
    (event,) = tracebacks(parsed)
    assert event.kind == Kind.CUDA_ERROR and event.line == 2
    assert (event.time.month, event.time.day, event.time.hour, event.time.second) == (6, 3, 14, 10)
    assert not event.time_inferred and event.attrs["logged_at"] == "engine.py:160"


def test_a_logger_relaying_a_traceback_line_by_line():
    parsed = parse_text("2026-01-02 03:04:05,123 - launcher - ERROR - Traceback (most recent call last):\n"
                        '2026-01-02 03:04:05,124 - launcher - ERROR -   File "/srv/a.py", line 3, in f\n'
                        "2026-01-02 03:04:05,124 - launcher - ERROR -     g()\n"
                        "2026-01-02 03:04:05,125 - launcher - ERROR - RuntimeError: CUDA error: misaligned address\n"
                        "2026-01-02 03:04:06,000 - launcher - INFO - restarting\n")
    (event,) = tracebacks(parsed)
    assert event.chain[0].frames[0].code == "g()" and event.attrs["cuda_error"].code == 716
    assert event.time == datetime(2026, 1, 2, 3, 4, 5, 123000)
    assert parsed.formats == {"python-traceback": 4, "pylog": 1}


def test_header_at_the_end_of_an_sglang_record():
    parsed = parse_text("[2025-06-03 11:20:46 DP1 TP2 EP2] Scheduler hit an exception: "
                        "Traceback (most recent call last):\n"
                        '  File "/sgl/scheduler.py", line 10, in event_loop\n'
                        "    self.run_batch(batch)\n"
                        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                        "\n"
                        "[2025-06-03 11:20:47] Received sigquit from a child process. It usually means the "
                        "child failed.\n")
    kinds = {e.kind: e for e in parsed.events}
    relay = kinds[Kind.WORKER_EXCEPTION]
    assert relay.message == "Scheduler hit an exception" and relay.rank == 2
    tb = kinds[Kind.CUDA_ERROR]
    assert tb.rank == 2 and tb.time == datetime(2025, 6, 3, 11, 20, 46)
    assert [f.function for f in tb.chain[0].frames] == ["event_loop"]
    assert kinds[Kind.CHILD_FAILED].line == 6
    assert parsed.unparsed_lines == 0 and parsed.lines == parsed.event_lines + parsed.noise_lines + parsed.counted_lines


# --- quoted (remote) tracebacks ------------------------------------------------------------

SPAWN = """\
Traceback (most recent call last):
  File "/srv/job/run.py", line 40, in <module>
    mp.spawn(main, nprocs=4)
  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 203, in join
    raise ProcessRaisedException(msg, error_index, failed_process.pid)
torch.multiprocessing.spawn.ProcessRaisedException: 

-- Process 2 terminated with the following error:
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap
    fn(i, *args)
  File "/srv/job/run.py", line 21, in main
    torch.cuda.synchronize()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
"""


def test_torch_spawn_quotes_the_failed_process_traceback():
    parsed = parse_text(SPAWN)
    relay, quoted = tracebacks(parsed)
    assert relay.kind == Kind.CHILD_FAILED and relay.rank is None
    assert [e.type for e in relay.chain] == ["torch.multiprocessing.spawn.ProcessRaisedException"]
    assert quoted.kind == Kind.CUDA_ERROR
    assert quoted.rank == 2                                 # "-- Process 2 terminated"
    assert (quoted.attrs["quoted_by"], quoted.attrs["quoted_in"]) == ("torch-spawn", "console.log:1")
    assert [f.function for f in quoted.chain[0].frames] == ["_wrap", "main"]
    assert quoted.chain[0].chained_by is None
    assert parsed.unparsed_lines == 0


RAY_RECORD = ("(EngineCore_DP0 pid=2207) ERROR 03-14 09:12:44 [core.py:688] ", [
    "Traceback (most recent call last):",
    '  File "/opt/venv/lib/python3.12/site-packages/vllm/v1/executor/ray_executor.py", line 318, in execute_model',
    "    return ray.get(refs)",
    "ray.exceptions.RayTaskError(AcceleratorError): ray::RayWorkerWrapper.execute_model_ray() (pid=5150, "
    "ip=10.8.1.21, actor_id=c0ffee01, repr=<vllm.executor.ray_utils.RayWorkerWrapper object at 0x7f51>)",
    '  File "/opt/venv/lib/python3.12/site-packages/vllm/executor/ray_utils.py", line 142, in execute_model_ray',
    "    output = self.worker.model_runner.execute_model(",
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
])


def test_ray_task_error_in_a_logged_record_is_a_relay_and_the_workers_own_failure():
    head, body = RAY_RECORD
    parsed = parse_text("".join(head + line + "\n" for line in body))
    relay, worker = tracebacks(parsed)
    assert relay.kind == Kind.ENGINE_WORKER_FAILED
    assert (relay.pid, relay.process) == (2207, "EngineCore_DP0")
    assert worker.kind == Kind.CUDA_ERROR
    assert (worker.pid, worker.process, worker.host) == (5150, "RayWorkerWrapper", "10.8.1.21")
    assert worker.attrs["quoted_by"] == "ray-task-error"
    assert worker.chain[0].frames[0].function == "execute_model_ray"


def test_ray_task_error_on_raw_stderr_quotes_the_workers_traceback():
    _, body = RAY_RECORD
    parsed = parse_text("\n".join(body) + "\n")
    relay, worker = tracebacks(parsed)
    assert relay.kind == Kind.ENGINE_WORKER_FAILED
    assert worker.kind == Kind.CUDA_ERROR and worker.pid == 5150
    assert worker.attrs["quoted_by"] == "ray-task-error"


def test_multiprocessing_pool_remote_traceback():
    parsed = parse_text('multiprocessing.pool.RemoteTraceback: \n'
                        '"""\n'
                        'Traceback (most recent call last):\n'
                        '  File "/usr/lib/python3.11/multiprocessing/pool.py", line 125, in worker\n'
                        '    result = (True, func(*args, **kwds))\n'
                        '  File "/srv/x.py", line 5, in work\n'
                        '    raise ValueError("bad")\n'
                        'ValueError: bad\n'
                        '"""\n'
                        '\n'
                        'The above exception was the direct cause of the following exception:\n'
                        '\n'
                        'Traceback (most recent call last):\n'
                        '  File "/srv/main.py", line 10, in <module>\n'
                        '    pool.map(work, range(3))\n'
                        'ValueError: bad\n')
    assert parsed.unparsed_lines == 0
    assert any(e.attrs.get("quoted_by") == "multiprocessing-remote" for e in tracebacks(parsed))


# --- inside a line, cut, fragments --------------------------------------------------------------

def test_a_traceback_escaped_inside_one_line_is_read():
    parsed = parse_text("ERROR 03-01 01:02:03 [worker.py:55] step failed: {'error': 'Traceback (most recent call "
                        'last):\\n  File "/srv/w.py", line 9, in step\\n    out = model(x)\\nRuntimeError: CUDA '
                        "error: an illegal memory access was encountered\\n', 'rank': 1}\n")
    (event,) = tracebacks(parsed)
    (exc,) = event.chain
    assert (exc.type, exc.message) == ("RuntimeError", "CUDA error: an illegal memory access was encountered")
    assert [(f.file, f.line, f.function, f.code) for f in exc.frames] == [("/srv/w.py", 9, "step", "out = model(x)")]
    assert event.line == 1 and event.attrs["logged_at"] == "worker.py:55"
    assert event.kind == Kind.CUDA_ERROR


def test_traceback_cut_before_its_exception_line():
    event, parsed = only_traceback("(Worker_TP1 pid=12) Traceback (most recent call last):\n"
                                   '(Worker_TP1 pid=12)   File "/srv/model.py", line 40, in forward\n'
                                   "(Worker_TP1 pid=12)     out = self.attn(x)\n"
                                   '(Worker_TP1 pid=12)   File "/srv/attn.py", line 9, in attn\n')
    (exc,) = event.chain
    assert exc.cut and exc.type == ""
    assert [f.function for f in exc.frames] == ["forward", "attn"]
    assert event.attrs["cut"] is True and event.kind == Kind.EXCEPTION
    assert event.message == "traceback cut off after 2 frame(s) in attn: the exception line is missing"
    assert event.pid == 12 and parsed.unparsed_lines == 0


def test_real_cut_traceback_from_the_hostile_corpus():
    event, _ = only_traceback((DATA / "hostile/cut_traceback.log").read_text())
    assert event.attrs["cut"] and event.chain[-1].frames[-1].file == "/srv/attn.py"
    assert event.process == "Worker_TP1"


def test_a_last_line_cut_mid_token_is_dropped_and_the_rest_kept():
    lines = ["Traceback (most recent call last):", '  File "/srv/w.py", line 9, in step', "    out = model(x)",
             "RuntimeError: CUDA error: an illegal memory access was encountered", '  File "/srv/w.py", li']
    chain, dropped = parse_lines(lines)
    assert dropped == frozenset({4})
    assert chain[-1].type == "RuntimeError" and chain[-1].cut


def test_a_frame_line_cut_inside_a_traceback_is_left_out_and_reported():
    parsed = parse_text("Traceback (most recent call last):\n"
                        '  File "/srv/w.py", line 9, in step\n'
                        "    out = model(x)\n"
                        '  File "/opt/venv/lib/python3.11/site-pack\n'
                        '  File "/srv/m.py", line 20, in forward\n'
                        "    return self.kern(x)\n"
                        "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    (event,) = tracebacks(parsed)
    (exc,) = event.chain
    assert [f.function for f in exc.frames] == ["step", "forward"]
    assert not exc.cut and event.kind == Kind.CUDA_ERROR
    assert parsed.unparsed_samples == [(4, '  File "/opt/venv/lib/python3.11/site-pack')]
    assert any(p.startswith("line 4: a traceback line cut mid-token") for p in parsed.problems)


def test_a_fragment_without_its_header():
    event, parsed = only_traceback('  File "/srv/app/run.py", line 12, in step\n'
                                   "    x = y[idx]\n"
                                   "IndexError: index 7 is out of bounds\n")
    assert event.attrs["header_missing"] is True
    assert (event.kind, event.attrs["exception_type"]) == (Kind.EXCEPTION, "IndexError")


def test_a_lone_exception_line_is_a_block_of_its_own():
    event, parsed = only_traceback("torch.AcceleratorError: CUDA error: device-side assert triggered\n"
                                   "INFO next\n")
    assert event.kind == Kind.CUDA_ERROR and event.chain[0].frames == ()
    assert event.attrs["cuda_error"].name == "CUDA_ERROR_ASSERT"
    assert parsed.formats["python-traceback"] == 1


def test_a_paste_that_lost_indentation_is_still_a_traceback():
    event, _ = only_traceback("Traceback (most recent call last):\n"
                              'File "/srv/a.py", line 3, in f\n'
                              "out = model(x)\n"
                              "RuntimeError: CUDA error: misaligned address\n")
    (exc,) = event.chain
    assert exc.frames[0].code == "out = model(x)"
    assert event.attrs["cuda_error"].code == 716


def test_recursion_repeat_line():
    event, parsed = only_traceback("Traceback (most recent call last):\n"
                                   '  File "/srv/a.py", line 3, in f\n'
                                   "    return f(n + 1)\n"
                                   '  File "/srv/a.py", line 3, in f\n'
                                   "    return f(n + 1)\n"
                                   "  [Previous line repeated 996 more times]\n"
                                   "RecursionError: maximum recursion depth exceeded\n")
    assert len(event.chain[0].frames) == 2 and event.attrs["exception_type"] == "RecursionError"
    assert parsed.unparsed_lines == 0


def test_a_huge_traceback_is_cut_and_counted(monkeypatch):
    monkeypatch.setattr(traceback, "MAX_BLOCK_LINES", 9)
    frames = "".join(f'  File "/srv/a.py", line {i}, in f\n    f()\n' for i in range(1, 11))
    parsed = parse_text("Traceback (most recent call last):\n" + frames + "ValueError: deep\n")
    (event,) = tracebacks(parsed)
    assert event.attrs["lines"] == 22
    assert any("more than 9 lines" in p for p in parsed.problems)
    assert parsed.counted_lines == 13
    assert parsed.event_lines + parsed.counted_lines + parsed.noise_lines + parsed.unparsed_lines == parsed.lines


# --- the block start and the grammar on their own ---------------------------------------------

@pytest.mark.parametrize("text, how", [
    ("Traceback (most recent call last):", "header"),
    ("Exception ignored in: <function Foo.__del__ at 0x7f>", "unraisable"),
    ("Exception ignored while calling deallocator <function Foo.__del__ at 0x7f>:", "unraisable"),
    ('  File "/srv/a.py", line 3, in f', "frame"),
    ("RuntimeError: CUDA error: misaligned address", "exception"),
    ("torch.distributed.DistBackendError: NCCL error", "exception"),
    ("c10::DistBackendError", "exception"),
    ("KeyboardInterrupt", "exception"),
    ("UserWarning: this is only a warning", None),
    ("Error: something went wrong", None),             # no exception type: plain text
    ("INFO all good", None),
])
def test_starts_block(text, how):
    assert starts_block(text) == how


def test_grammar_refuses_garbage_without_raising():
    assert parse_block("Traceback (most recent call last):\n\x00\x01\n") in (None, ())
    chain, dropped = parse_lines(["\x00\x01"])
    assert chain is None and not dropped


# --- pytest's long report --------------------------------------------------------------------

PYTEST_FAILURE = """\
______ test_sync[1] ______

    def test_sync(n):
>       torch.cuda.synchronize()

tests/test_sync.py:12: 
_ _ _ _ _ _ _ _

    def synchronize(device=None):
>       return torch._C._cuda_synchronize()
E       torch.AcceleratorError: CUDA error: an illegal memory access was encountered

/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py:1083: AcceleratorError
"""


def test_pytest_failure_section_is_a_traceback():
    event, parsed = only_traceback(PYTEST_FAILURE)
    (exc,) = event.chain
    assert exc.type == "torch.AcceleratorError"
    assert [(f.file, f.line, f.code) for f in exc.frames] == [
        ("tests/test_sync.py", 12, "torch.cuda.synchronize()"),
        ("/opt/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", 1083, "return torch._C._cuda_synchronize()")]
    assert exc.frames[0].function == "test_sync"           # the test's own frame is named after the test
    assert event.kind == Kind.CUDA_ERROR and parsed.formats == {"pytest": 13}


def test_pytest_sections_are_separate_failures():
    parsed = parse_text(PYTEST_FAILURE + PYTEST_FAILURE.replace("test_sync[1]", "test_sync[2]"))
    assert [e.line for e in tracebacks(parsed)] == [1, 14]


def test_pytest_bare_assert_takes_the_type_from_the_last_location():
    event, _ = only_traceback("______ test_other ______\n\n    def test_other():\n>       assert 1 == 2\n"
                              "E       assert 1 == 2\n\ntests/test_sync.py:20: AssertionError\n")
    assert event.attrs.get("exception_type") == "AssertionError"
    assert event.message == "AssertionError: assert 1 == 2"


def test_a_cuda_error_message_hard_wrapped_mid_word_is_joined():
    # a paste wrapped at a fixed width: the second half has no envelope of its own
    text = ("web-1  | (RayWorkerWrapper pid=14390) [rank1]:[E614 08:55:36.210783552 ProcessGroupNCCL.cpp:1515] "
            "[PG 3 Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illeg\n"
            "al memory access was encountered\n")
    from tests.helpers import parse_text
    parsed = parse_text(text)
    errors = [e for e in parsed.events if e.attrs.get("error_code") == 700 or "illegal memory access" in e.message]
    assert errors and parsed.unparsed_lines == 0
    from forensics import knowledge
    assert knowledge.find_cuda_error("CUDA error: an illegal mem\nory access was encountered").error.code == 700
