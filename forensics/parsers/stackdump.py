"""Whole-process stack dumps: CPython faulthandler (segfaults, aborts) and `py-spy dump`
(hangs).  Grammars: grammars/python_faulthandler.lark, grammars/py_spy.lark.

Both are written straight to a file descriptor, never with a vLLM prefix, so blocks are
assembled per file: from their first line for as long as lines keep the block's shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lark import Token, Tree
from lark.exceptions import LarkError

from forensics import grammar
from forensics.events import Event, Frame, Kind, Severity, freeze


@dataclass(frozen=True)
class DumpFormat:
    name: str
    grammar: str
    starts: tuple[str, ...]
    continues: tuple[str, ...]     # prefixes of the lines that keep the block going


FORMATS = (
    DumpFormat("faulthandler", "python_faulthandler", ("Fatal Python error: ",),
               ("Thread 0x", "Current thread 0x", "  File \"", "  <no Python frame>", "  ...",
                "Extension modules: ")),
    DumpFormat("py-spy", "py_spy", ("Process ",),
               ("Python v", "Parent Process ", "Thread ", "    ")),
)


@dataclass
class DumpBlock:
    format: DumpFormat
    lines: list[str] = field(default_factory=list)
    linenos: list[int] = field(default_factory=list)


class StackDumpAssembler:
    """Per file: groups faulthandler / py-spy lines into blocks."""

    def __init__(self) -> None:
        self.block: DumpBlock | None = None

    def feed(self, text: str, lineno: int) -> tuple[list[DumpBlock], bool]:
        done = []
        if self.block is not None:
            if not text.strip() or text.startswith(self.block.format.continues):
                self.block.lines.append(text)
                self.block.linenos.append(lineno)
                return done, True
            done.append(self.block)
            self.block = None
        for fmt in FORMATS:
            if text.startswith(fmt.starts) and (fmt.name != "py-spy" or ": " in text):
                self.block = DumpBlock(fmt, [text], [lineno])
                return done, True
        return done, False

    def flush(self) -> list[DumpBlock]:
        block, self.block = self.block, None
        return [block] if block else []


def block_event(block: DumpBlock, relpath: str, seq: int) -> Event | None:
    """The block as an event, or None when it does not parse."""
    text = "".join(line + "\n" for line in block.lines if line.strip())
    try:
        tree = grammar.load(block.format.grammar).parse(text)
    except LarkError:
        return None
    if block.format.name == "faulthandler":
        return _faulthandler_event(tree, relpath, block.linenos[0], seq)
    return _pyspy_event(tree, relpath, block.linenos[0], seq)


def _tokens(tree: Tree, kind: str) -> list[str]:
    return [str(t) for t in tree.children if isinstance(t, Token) and t.type == kind]


def _faulthandler_event(tree: Tree, relpath: str, lineno: int, seq: int) -> Event:
    fatal = _tokens(tree, "FATAL")[0].strip().split(": ", 1)[1]
    threads = []
    for thread in tree.find_data("thread"):
        head = str(thread.children[0]).strip()
        frames = []
        for tok in thread.children[1:]:
            if isinstance(tok, Token) and tok.type == "FRAME":
                line = tok.strip()                      # File "x", line 5 in f
                path = line[len('File "'):line.index('", line ')]
                number, _, func = line[line.index('", line ') + 8:].partition(" in ")
                frames.append(Frame(path, int(number), func))
        threads.append({"thread": head.split(" (")[0], "current": head.startswith("Current"),
                        "frames": tuple(frames)})
    current = next((t for t in threads if t["current"]), None)
    where = ""
    if current and current["frames"]:
        top = _innermost_own(current["frames"])
        where = f" in {top.function} ({top.file}:{top.line})"
    return Event(kind=Kind.FATAL_SIGNAL, message=f"Fatal Python error: {fatal}{where}", source=relpath,
                 line=lineno, seq=seq, severity=Severity.CRITICAL,
                 attrs=freeze({"signal_text": fatal, "threads": threads, "tool": "faulthandler",
                               "current_thread": current}))


def _innermost_own(frames: tuple[Frame, ...]) -> Frame:
    """faulthandler lists the innermost frame first; skip the standard library."""
    for frame in frames:
        if "/lib/python3" not in frame.file or "site-packages" in frame.file:
            return frame
    return frames[0]


def _pyspy_event(tree: Tree, relpath: str, lineno: int, seq: int) -> Event:
    process = _tokens(tree, "PROCESS")[0].strip()
    pid = int(process.split()[1].rstrip(":"))
    threads = []
    for thread in tree.find_data("thread"):
        head = str(thread.children[0]).strip()
        frames = []
        for frame in thread.find_data("frame"):
            text = str(frame.children[0]).strip()       # func (file:line)
            func, _, loc = text.rpartition(" (")
            file, _, number = loc.rstrip(")").rpartition(":")
            frames.append(Frame(file or loc.rstrip(")"), int(number) if number.isdigit() else None, func))
        threads.append({"thread": head, "frames": tuple(frames)})
    main = threads[0] if threads else None
    top = f" - {main['thread']} in {main['frames'][0].function}" if main and main["frames"] else ""
    return Event(kind=Kind.STACK_DUMP, message=f"py-spy dump of pid {pid}{top}", source=relpath, line=lineno,
                 seq=seq, severity=Severity.INFO, pid=pid,
                 attrs=freeze({"command": process.split(": ", 1)[1], "threads": threads, "tool": "py-spy"}))
