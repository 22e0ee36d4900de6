"""Whole-process stack dumps: CPython faulthandler (segfaults, aborts, timeouts) and
`py-spy dump` (hangs).  Grammars: grammars/python_faulthandler.lark, grammars/py_spy.lark.

Both are written straight to a file descriptor, so a block runs from its first line for
as long as lines keep the block's shape.  A dump whose last line was cut (a paste, a log
that ends mid-write) keeps what came before it: only the cut line is left out.

The crash frame of a faulthandler dump is read from the crashing thread's stack only
(``Current thread 0x...``, or the single ``Stack`` of a build without threads): another
thread's stack says what that thread was doing, not where the process died.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.events import Frame, Kind, Severity
from forensics.knowledge import claimed_int
from forensics.parsers import terminals
from forensics.parsers.text.block import BlockResult, unparsable

# the blocks' guards: terminals of their grammars
_FAULTHANDLER = terminals.of("python_faulthandler")
_PYSPY = terminals.of("py_spy")


@v_args(inline=True)
class _Faulthandler(Transformer):
    def start(self, *items):
        head = next((i for i in items if isinstance(i, tuple) and i[0] in ("fatal", "timeout")), None)
        threads = [i for i in items if isinstance(i, dict)]
        return head, threads

    def fragment(self, *items):
        frames = tuple(i for i in items if isinstance(i, Frame))
        threads = [i for i in items if isinstance(i, dict)]
        return ("fragment", frames), threads

    def fatal(self, what):
        return ("fatal", str(what).strip())

    def timeout(self, duration):
        return ("timeout", str(duration))

    def thread(self, *items):
        current = any(getattr(i, "type", None) == "CURRENT" for i in items)
        ident = next(str(i) for i in items if getattr(i, "type", None) == "THREAD_ID")
        frames = tuple(i for i in items if isinstance(i, Frame))
        return {"thread": ident, "current": current, "frames": frames}

    def stack(self, *items):
        return {"thread": None, "current": True, "frames": tuple(i for i in items if isinstance(i, Frame))}

    def frame(self, path, lineno, func):
        return Frame(str(path), claimed_int(lineno), str(func).strip())

    def extensions(self, rest):
        return None


@v_args(inline=True)
class _PySpy(Transformer):
    def start(self, process, *rest):
        threads = [r for r in rest if isinstance(r, dict)]
        return process, threads

    def process(self, pid, command):
        return (claimed_int(pid), str(command))

    def parent(self, pid, command):
        return None

    def python(self, version):
        return None

    def thread(self, ident, state, *rest):
        name = next((r.name for r in rest if isinstance(r, _Name)), None)
        frames = tuple(r for r in rest if isinstance(r, Frame))
        return {"thread": str(ident), "state": str(state), "name": name, "frames": frames}

    def frame(self, func, file, *rest):
        lineno = next((claimed_int(r) for r in rest if getattr(r, "type", None) == "LINENO"), None)
        return Frame(str(file), lineno, str(func).strip())

    def thread_name(self, name=None):
        return _Name(str(name) if name is not None else "")

    def var(self, _line):
        return None


class _Name(NamedTuple):
    name: str                       # a py-spy thread's name ("MainThread")


class DumpBlock:
    """An open faulthandler or py-spy block of one stream."""

    def __init__(self, format_name: str, continues: re.Pattern) -> None:
        self.format = format_name
        self._continues = continues          # the grammar's terminal: the lines that go on with it
        self.lines: list[str] = []
        self.linenos: list[int] = []

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.lines and text.strip() and not self._continues.match(text):
            return False
        self.lines.append(text)
        self.linenos.append(lineno)
        return True

    def close(self, make) -> BlockResult:
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        event = self._parse([t for _, t in pairs], make, cut=False)
        if event is None and len(pairs) > 1:
            # the last line cut mid-token (a paste, a log that ends mid-write): the dump
            # before it is kept, the cut line counted as unparsed
            event = self._parse([t for _, t in pairs[:-1]], make, cut=True)
            if event is not None:
                lineno = pairs[-1][0]
                return BlockResult([event], [n for n, _ in pairs[:-1]] + blank, [pairs[-1]],
                                   [f"line {lineno}: a {self.format} dump cut mid-line; the dump before "
                                    "the cut line is used"])
        if event is None:
            return unparsable(self.linenos, self.lines, f"a {self.format} dump")
        return BlockResult([event], [n for n, _ in pairs] + blank)

    def _parse(self, lines: list[str], make, cut: bool):
        text = "".join(line.rstrip() + "\n" for line in lines)
        try:
            if self.format == "faulthandler":
                head, threads = grammar.transforming("python_faulthandler", _Faulthandler()).parse(text)
                return _faulthandler_event(head, threads, make, cut)
            process, threads = grammar.transforming("py_spy", _PySpy()).parse(text)
            return _pyspy_event(process, threads, make, cut)
        except (LarkError, ValueError, TypeError, StopIteration):
            return None


def start(text: str, header: tuple | None = None) -> DumpBlock | None:
    if _FAULTHANDLER.FAULTHANDLER_START.match(text):
        return DumpBlock("faulthandler", _FAULTHANDLER.FAULTHANDLER_CONTINUES)
    if _PYSPY.PYSPY_START.match(text):
        return DumpBlock("py-spy", _PYSPY.PYSPY_CONTINUES)
    return None


def _innermost_own(frames: tuple[Frame, ...]) -> Frame:
    """faulthandler lists the innermost frame first; skip the standard library."""
    for frame in frames:
        if "/lib/python3" not in frame.file or "site-packages" in frame.file or "dist-packages" in frame.file:
            return frame
    return frames[0]


def _faulthandler_event(head, threads, make, cut: bool = False):
    kind_of_head, what = head if head else ("fatal", "")
    if kind_of_head == "fragment":
        # frames without the dump's head: what a thread was doing, in a process the
        # input does not show crash (a paste that starts inside a dump)
        return make(Kind.LOG, f"faulthandler dump fragment ({len(what)} frames; its head is not in the input)",
                    Severity.INFO, {"tool": "faulthandler", "fragment_frames": what, "threads": threads,
                                    "cut": cut or None})
    # only the crashing thread's stack says where it died: no other thread stands in
    current = next((t for t in threads if t["current"]), None)
    where = ""
    top = None
    if current and current["frames"]:
        top = _innermost_own(current["frames"])
        where = f" in {top.function} ({top.file}:{top.line})"
    attrs = {"threads": threads, "tool": "faulthandler", "current_thread": current,
             "crash_frame": top, "cut": cut or None}
    if kind_of_head == "timeout":
        return make(Kind.STACK_DUMP, f"faulthandler stack dump after a {what} timeout{where}",
                    Severity.WARNING, {**attrs, "timeout": what})
    signal = knowledge.faulthandler_signal(what)
    return make(Kind.FATAL_SIGNAL, f"Fatal Python error: {what}{where}", Severity.CRITICAL,
                {**attrs, "signal_text": what, "signal_name": signal})


def _pyspy_event(process, threads, make, cut: bool = False):
    pid, command = process
    main = threads[0] if threads else None
    top = f" - {main['thread']} in {main['frames'][0].function}" if main and main["frames"] else ""
    return make(Kind.STACK_DUMP, f"py-spy dump of pid {pid}{top}", Severity.INFO,
                {"command": command, "threads": threads, "tool": "py-spy", "subject_pid": pid,
                 "cut": cut or None})
