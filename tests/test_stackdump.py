"""faulthandler and py-spy dumps (grammars/python_faulthandler.lark, grammars/py_spy.lark)
on real recordings made on this machine (tests/data/cpu/README.md)."""

from forensics.case import analyze
from forensics.events import Kind
from forensics.parsers.stackdump import StackDumpAssembler
from tests.conftest import DATA


def test_faulthandler_segfault():
    case = analyze(str(DATA / "cpu/faulthandler_segv"))
    (event,) = [e for e in case.events if e.kind == Kind.FATAL_SIGNAL]
    assert event.attrs["signal_text"] == "Segmentation fault"
    current = event.attrs["current_thread"]
    assert [f.function for f in current["frames"]] == ["string_at", "engine_step", "busy_loop", "<module>"]
    assert len(event.attrs["threads"]) == 2
    assert "engine_step" in event.message             # innermost frame outside the stdlib
    (source,) = case.sources
    assert source.kind == "faulthandler" and source.unparsed_lines == 0
    assert case.context.first_failure is not None


def test_py_spy_dump_of_a_hung_process():
    case = analyze(str(DATA / "cpu/pyspy_hang"))
    (event,) = [e for e in case.events if e.kind == Kind.STACK_DUMP]
    assert event.pid == int(event.attrs["command"] and event.message.split()[4])
    main, heartbeat = event.attrs["threads"]
    assert main["thread"].endswith('"MainThread"')
    assert [f.function for f in main["frames"]][:3] == ["Condition.wait", "Queue.get", "all_reduce_wait"]
    assert main["frames"][2].file == "hang_demo.py" and main["frames"][2].line == 7


def test_stack_dump_interleaved_with_other_lines_ends_cleanly():
    asm = StackDumpAssembler()
    lines = ["INFO something", "Fatal Python error: Aborted", "", "Current thread 0x00007f (most recent call first):",
             '  File "a.py", line 3 in f', "", "after the dump"]
    taken = [asm.feed(line, n)[1] for n, line in enumerate(lines, 1)]
    assert taken == [False, True, True, True, True, True, False]
