"""Python tracebacks: assemble blocks per process, then parse them with
grammars/python_traceback.lark into ``PyException`` chains.

Four ranks printing at once is the normal case, so lines are first de-interleaved by
process (the caller keeps one ``TracebackAssembler`` per stream) and only then grouped
into blocks.  A block ends when its exception text ends: for a vLLM record that is when
the repeated record header changes; for raw stderr it is the first line that is neither a
frame, a chain marker nor a known continuation of a multi-line exception message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from lark import Token, Transformer
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.events import Frame, PyException

TB_HEADER = "Traceback (most recent call last):"
CUT_TYPE = "<traceback cut off>"     # the exception type of a traceback without its last line
UNRAISABLE = ("Exception ignored in", "Exception ignored while calling deallocator")
CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)


def starts_block(text: str) -> bool:
    return text.startswith(TB_HEADER) or text.startswith(UNRAISABLE)


@dataclass
class Block:
    """Lines of one traceback as they arrived, with their source line numbers."""

    header: tuple | None            # the vLLM record header the block was logged under
    lines: list[str] = field(default_factory=list)
    linenos: list[int] = field(default_factory=list)
    in_message: bool = False        # past the exception line, reading message continuations
    after_chain: bool = False       # just saw a chain marker: the next traceback belongs here

    def add(self, text: str, lineno: int) -> None:
        self.lines.append(text)
        self.linenos.append(lineno)

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines if line.strip())


class TracebackAssembler:
    """Feeds one process's lines; yields finished ``Block``s."""

    def __init__(self) -> None:
        self.block: Block | None = None
        self._continuations = knowledge.message_continuations()

    def feed(self, text: str, lineno: int, header: tuple | None) -> tuple[list[Block], bool]:
        """Returns (finished blocks, whether this line was taken into a block)."""
        done: list[Block] = []
        block = self.block
        if block is not None:
            if self._belongs(block, text, header):
                block.add(text, lineno)
                self._advance(block, text)
                return done, True
            done.append(block)
            self.block = None
        if starts_block(text):
            self.block = Block(header=header)
            self.block.add(text, lineno)
            return done, True
        return done, False

    def flush(self) -> list[Block]:
        block, self.block = self.block, None
        return [block] if block else []

    def _belongs(self, block: Block, text: str, header: tuple | None) -> bool:
        if header != block.header:
            # A different record (or raw stderr after a logged record) ends the block.
            return False
        stripped = text.strip()
        if not block.in_message:
            return True   # frames, code, carets, the exception line itself
        if text in CHAIN_MARKERS:
            return True
        if block.after_chain and (text.startswith(TB_HEADER) or not stripped):
            return True
        if text.startswith(TB_HEADER) or text.startswith(UNRAISABLE):
            return False  # a new, separate traceback
        if header is not None:
            return True   # same vLLM record: everything is the message
        if not stripped:
            return True   # blank line inside/after a message; harmless when trailing
        return text.startswith(self._continuations)

    @staticmethod
    def _advance(block: Block, text: str) -> None:
        if text in CHAIN_MARKERS:
            block.in_message = False
            block.after_chain = True
            return
        if text.startswith(TB_HEADER):
            block.after_chain = False
            block.in_message = False
            return
        if block.in_message or not text.strip():
            return
        if text.startswith(UNRAISABLE):
            return
        if not text[0].isspace():
            block.in_message = True   # the exception line "Type: message"


class _ToExceptions(Transformer):
    def start(self, items):
        chain = []
        link = None
        for item in items:
            if isinstance(item, str):
                link = item
            else:
                chain.append(PyException(item.type, item.message, item.frames,
                                         item.unraisable_in, link))
                link = None
        return tuple(chain)

    def cause(self, _):
        return "cause"

    def context(self, _):
        return "context"

    def segment(self, items):
        unraisable = None
        frames = []
        exc = None
        for item in items:
            if isinstance(item, Frame):
                frames.append(item)
            elif isinstance(item, PyException):
                exc = item
            elif isinstance(item, tuple) and item and item[0] == "unraisable":
                unraisable = item[1]
        return PyException(exc.type, exc.message, tuple(frames), unraisable)

    bare_unraisable = segment

    def cut_segment(self, items):
        frames = tuple(i for i in items if isinstance(i, Frame))
        unraisable = next((i[1] for i in items if isinstance(i, tuple) and i and i[0] == "unraisable"), None)
        return PyException(CUT_TYPE, "", frames, unraisable)

    def unraisable(self, items):
        text = str(items[0]).strip()
        _, _, obj = text.partition(" in")
        if not obj:
            _, _, obj = text.partition("deallocator")
        return ("unraisable", obj.strip(" :"))

    def frame(self, items):
        head = str(items[0]).strip()
        # File "path", line N, in func
        path = head[len('File "'):head.index('", line ')]
        rest = head[head.index('", line ') + len('", line '):]
        number, _, func = rest.partition(", in ")
        code = items[1] if len(items) > 1 else None
        return Frame(path, int(number), func or None, code)

    def code_line(self, items):
        return str(items[0]).strip()

    def exception(self, items):
        first = str(items[0]).rstrip("\n")
        type_, sep, message = first.partition(":")
        extra = [str(t).rstrip("\n") for t in items[1:]]
        text = message.strip() if sep else ""
        if extra:
            text = "\n".join([text] + extra).strip("\n")
        return PyException(type_.strip(), text)


def parse_block(text: str) -> tuple[PyException, ...] | None:
    """The exception chain of one traceback block, or None if it does not parse."""
    try:
        tree = grammar.load("python_traceback").parse(text)
    except LarkError:
        return None
    return _ToExceptions().transform(tree)


def innermost_frames(chain: Iterable[PyException]) -> tuple[Frame, ...]:
    """Frames of the exception that was finally raised (the last of the chain)."""
    chain = tuple(chain)
    return chain[-1].frames if chain else ()


__all__ = ["Block", "TracebackAssembler", "parse_block", "starts_block", "innermost_frames", "Token"]
