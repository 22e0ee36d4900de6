"""Python tracebacks: assembled per stream, parsed with grammars/python_traceback.lark
into ``PyException`` chains.

Four ranks printing at once is the normal case, so lines are de-interleaved by stream
first (the dispatcher keeps one assembler per stream) and only then grouped into
blocks.  A block starts where Python's output starts - the ``Traceback (most recent
call last):`` header, ``Exception ignored in``, or, in a fragment pasted without its
header, the first frame line or a lone exception line.  It ends when its exception text
ends: for a logger record, when the repeated record header changes; for raw stderr, at
the first line that is neither a frame, a chain marker nor a known continuation of a
multi-line exception message.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import NamedTuple

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.parsers import terminals
from forensics.events import Frame, PyException
from forensics.parsers.text.block import BlockResult, unparsable

MAX_BLOCK_LINES = 20_000     # a traceback of millions of lines is cut (the rest counted)


# the block's guards are the shapes of grammars/python_traceback.lark
_T = terminals.of("python_traceback")


def _header(text: str) -> bool:
    return _T.TB_TEXT.match(text) is not None


def _unraisable(text: str) -> bool:
    return _T.UNRAISABLE_HEAD.match(text) is not None


def _frame(text: str) -> bool:
    return _T.FRAME_START.match(text) is not None


def _exception_line(text: str) -> bool:
    return _T.EXCEPTION_START.match(text) is not None


def _chain_marker(stripped: str) -> bool:
    return _T.CHAIN_MARKER.fullmatch(stripped) is not None


def starts_block(text: str) -> str | None:
    """How a block starts at this line: "header", "unraisable", "frame", "exception"."""
    if _T.TRACEBACK_START.match(text) is None:     # most lines: one scan
        return None
    if _header(text):
        return "header"
    if _unraisable(text):
        return "unraisable"
    return "frame" if _frame(text) else "exception"


_CONTINUATIONS: tuple[str, ...] | None = None


@functools.lru_cache(maxsize=None)
def _other_starters() -> tuple:
    """The start() of every other block format (data/formats.toml), in registry order
    (the readers by name, as the registry starts them: no import of the registry here)."""
    from forensics.parsers.formats import formats_of_kind
    readers = dict.fromkeys(f.reader for f in formats_of_kind("block") if f.reader != __name__)
    return tuple(importlib.import_module(reader).start for reader in readers)


def _continuations() -> tuple[str, ...]:
    global _CONTINUATIONS
    if _CONTINUATIONS is None:
        _CONTINUATIONS = knowledge.message_continuations()
    return _CONTINUATIONS


@dataclass
class TracebackBlock:
    """The lines of one traceback as they arrive on one stream."""

    header: tuple | None            # the record header the block was logged under
    started_by: str = "header"      # header | unraisable | frame | exception
    follow_raw: bool = False        # started at the end of a record (SGLang): raw lines follow
    lines: list[str] = field(default_factory=list)
    linenos: list[int] = field(default_factory=list)
    in_message: bool = False        # past the exception line, reading message continuations
    after_chain: bool = False       # just saw a chain marker: the next traceback belongs here
    quoting: bool = False           # the message quotes another process's traceback (raw lines follow)
    flat_frame: bool = False        # the last line was a frame line at column 0 (indentation lost)
    has_frames: bool = False        # the traceback in progress has shown a frame line
    overflow: int = 0               # lines past MAX_BLOCK_LINES, counted not kept
    overflow_linenos: list[int] = field(default_factory=list)
    format = "python-traceback"

    def accepts(self, text: str, lineno: int, header: tuple | None) -> bool:
        if self.lines and not self._belongs(text, header):
            return False
        if len(self.lines) >= MAX_BLOCK_LINES:
            self.overflow += 1
            if len(self.overflow_linenos) < 1:
                self.overflow_linenos.append(lineno)
            return True
        if self.flat_frame and not _frame(text) and not _exception_line(text) \
                and not _header(text) and not _chain_marker(text.strip()):
            text = "    " + text.lstrip()     # a code line whose indentation a paste lost
        self.flat_frame = _T.FRAME_HEAD.match(text) is not None
        self.lines.append(text)
        self.linenos.append(lineno)
        self._advance(text)
        return True

    def accepts_raw(self, text: str, header: tuple | None = None) -> bool:
        """Whether a line with no envelope continues a block started at a record's end."""
        return self.follow_raw and self._belongs(text, header)

    def _belongs(self, text: str, header: tuple | None) -> bool:
        if header != self.header and not (self.follow_raw and header is None):
            return False      # another record (or raw stderr after a logged record) ends the block
        if not self.in_message and not self.quoting and self._starts_another(text):
            return False      # a new traceback, or another block (a crash banner, a dump) begins
        stripped = text.strip()
        if not self.in_message:
            if self.started_by == "exception":
                return False if stripped else True
            return True       # frames, code, carets, the exception line itself
        if _chain_marker(stripped):
            return True
        if self.after_chain and (_header(stripped) or not stripped):
            return True
        if not self.quoting and knowledge.quoted_process(stripped):
            self.quoting = True    # "-- Process 1 terminated with the following error:"
            return True
        if self.quoting and (_header(stripped) or _frame(text) or text[:1].isspace()
                             or _exception_line(text) or _T.QUOTE_TEXT.fullmatch(stripped)):
            return True       # the quoted traceback
        if _header(text) or _unraisable(text):
            return False      # a new, separate traceback
        if header is not None and header == self.header:
            return True       # same logger record: everything is the message
        if not stripped:
            return True       # a blank line inside/after a message; harmless when trailing
        return stripped.startswith(_continuations())

    def _starts_another(self, text: str) -> bool:
        """Before the exception line: whether this line begins something else - a new
        traceback where this one has shown frames (this one was cut), or another block
        format (a native crash banner, a faulthandler dump, a warning ...).  Frame and code
        lines are indented: only a line at column 0 can start another block.  (After the
        exception line, a raw line stays only as a known continuation of the message -
        c10's "frame #N:" lines are part of it.)"""
        if not text[:1] or text[0].isspace():
            return False
        if _header(text) or _unraisable(text):
            return not self.after_chain and self.has_frames
        return any(start(text, None) is not None for start in _other_starters())

    def _advance(self, text: str) -> None:
        stripped = text.strip()
        if _chain_marker(stripped):
            self.in_message = False
            self.after_chain = True
            return
        if _header(stripped):
            self.after_chain = False
            self.in_message = False
            self.has_frames = False
            # a block started at a lone exception line that goes on to a (quoted) traceback
            # reads that traceback's frames like any other
            self.started_by = "header"
            return
        if _frame(text):
            self.has_frames = True
            return
        if self.in_message or not stripped or _unraisable(text):
            return
        if not text[0].isspace():
            self.in_message = True   # the exception line "Type: message"
            if not self.quoting and knowledge.quoted_process(stripped):
                # the exception line itself names the process it quotes (Ray's RayTaskError
                # on raw stderr, a pool's RemoteTraceback): its traceback follows
                self.quoting = True

    def close(self, make):
        """(events, lines used, unparsed (lineno, text), problems)."""
        from forensics.parsers.text.classify import traceback_event
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        chain, dropped = parse_lines([t for _, t in pairs])
        if chain is None:
            return unparsable(self.linenos, self.lines, "a traceback")
        problems = []
        used = [n for i, (n, _) in enumerate(pairs) if i not in dropped]
        unparsed = [pair for i, pair in enumerate(pairs) if i in dropped]
        for n, _ in unparsed:
            problems.append(f"line {n}: a traceback line cut mid-token; the rest of the traceback is used")
        if self.overflow:
            problems.append(f"line {self.linenos[0]}: a traceback of more than {MAX_BLOCK_LINES:,} lines; "
                            f"{self.overflow:,} lines after that were counted, not read")
        nlines = len(self.lines) + self.overflow
        if chain and chain[-1].cut and not chain[-1].type:
            # the log ends (or was cut) inside the traceback: said on the source like any
            # other cut input, not only by the event's headline
            problems.append(f"line {self.linenos[0]}: a traceback is cut off before its exception line; "
                            f"its {len(chain[-1].frames)} frame(s) are used")
        local = tuple(e for e in chain if e.chained_by != "remote")
        events = [traceback_event(local, nlines, make)]
        for i, exc in enumerate(chain):
            if exc.chained_by == "remote" and i > 0:
                events.append(_quoted(exc, chain[i - 1], events[0], nlines, make))
        return BlockResult(events, used + blank, unparsed, problems, self.overflow)


def _quoted(exc: PyException, quoting: PyException, local, nlines: int, make):
    """The failure of another process whose traceback ``quoting``'s message carries
    (Ray's RayTaskError, torch.multiprocessing's ProcessRaisedException): an event of
    that process, identified as the message names it, else of the quoting process."""
    from dataclasses import replace
    from forensics.events import freeze
    from forensics.parsers.text.classify import traceback_event
    event = traceback_event((replace(exc, chained_by=None),), nlines, make)
    # the exception line as printed: the type may be what names the quote (RemoteTraceback)
    who = knowledge.quoted_process(f"{quoting.type}: {quoting.message}") or {}
    changes = {}
    if "pid" in who:
        changes.update(pid=knowledge.claimed_int(who["pid"]), rank=None, host=who.get("ip"), process=who.get("process"))
    if "rank" in who:
        changes.update(rank=knowledge.claimed_int(who["rank"]))
        if "pid" not in who:
            changes.update(pid=None, process=None)
    return replace(event, **changes, attrs=freeze({**event.attrs, "quoted_in": local.where,
                                                    "quoted_by": who.get("id")}))


def start(text: str, header: tuple | None) -> TracebackBlock | None:
    how = starts_block(text)
    return TracebackBlock(header=header, started_by=how) if how else None


class _Link(NamedTuple):
    how: str                        # cause | context: the chain marker between two segments


class _Unraisable(NamedTuple):
    obj: str | None                 # what the unraisable exception was ignored in


class _Code(NamedTuple):
    line: str                       # a frame's source line


_HEADER = object()                  # a segment's "Traceback (most recent call last):"


@v_args(inline=True)
class _ToExceptions(Transformer):
    def start(self, *items):
        chain = []
        link = None
        for item in items:
            if isinstance(item, _Link):
                link = item.how
            else:
                chain.append(PyException(item.type, item.message, item.frames, item.unraisable_in,
                                         link or item.chained_by, item.header_missing, item.cut))
                link = None
        return tuple(chain)

    def cause(self, _marker):
        return _Link("cause")

    def context(self, _marker):
        return _Link("context")

    def segment(self, *items):
        unraisable, has_header, frames, exc = self._parts(items)
        return PyException(exc.type, exc.message, frames, unraisable,
                           header_missing=not has_header and bool(frames))

    def cut_segment(self, *items):
        unraisable, has_header, frames, _ = self._parts(items)
        return PyException("", "", frames, unraisable, header_missing=not has_header, cut=True)

    def remote(self, *items):
        _, _, frames, exc = self._parts(items)
        return PyException(exc.type, exc.message, frames, chained_by="remote")

    def cut_remote(self, *items):
        _, _, frames, _ = self._parts(items)
        return PyException("", "", frames, chained_by="remote", cut=True)

    def bare_unraisable(self, unraisable):
        return PyException("", "", (), unraisable.obj, cut=True)

    @staticmethod
    def _parts(items):
        unraisable = next((i.obj for i in items if isinstance(i, _Unraisable)), None)
        has_header = any(i is _HEADER for i in items)
        frames = tuple(i for i in items if isinstance(i, Frame))
        exc = next((i for i in items if isinstance(i, PyException)), None)
        return unraisable, has_header, frames, exc

    def header(self, _token):
        return _HEADER

    def unraisable(self, _head, obj=None):
        return _Unraisable(str(obj).strip() or None if obj is not None else None)

    def frame(self, path, lineno, func=None, code=None):
        if isinstance(func, _Code):             # a frame without its function, with its code
            func, code = None, func
        return Frame(str(path), knowledge.claimed_int(lineno), str(func).strip() or None if func else None,
                     code.line if code else None)

    def code(self, line, *_more):
        return _Code(str(line).strip())

    def stray(self, _line):
        return None

    def repeat(self, line):
        return None

    def exception(self, type_, *rest):
        parts = [str(item).rstrip("\n") for item in rest]
        if rest and rest[0].type == "EXC_MESSAGE":
            parts[0] = parts[0].strip()
        return PyException(str(type_), "\n".join(parts).strip("\n"))


def parse_block(text: str) -> tuple[PyException, ...] | None:
    """The exception chain of one traceback block, or None if it does not parse."""
    try:
        tree = grammar.load("python_traceback").parse(text)
        chain = _ToExceptions().transform(tree)
    except (LarkError, ValueError, TypeError, AttributeError):
        return None
    frames_filtered = tuple(PyException(e.type, e.message, tuple(f for f in e.frames if f is not None),
                                        e.unraisable_in, e.chained_by, e.header_missing, e.cut) for e in chain)
    return frames_filtered


def parse_lines(lines: list[str]) -> tuple[tuple[PyException, ...] | None, frozenset[int]]:
    """The chain of a block, recovering from lines cut mid-token: a cut frame line
    anywhere is left out, else up to two trailing lines are.  Returns (chain, indexes
    of the lines left out)."""
    kept = [line for line in lines if line.strip()]

    def attempt(skip: frozenset[int]):
        body = [line for i, line in enumerate(kept) if i not in skip]
        return parse_block("".join(line.rstrip() + "\n" for line in body)) if body else None

    chain = attempt(frozenset())
    if chain:
        return chain, frozenset()
    cut_frames = frozenset(i for i, line in enumerate(kept) if _T.CUT_FRAME.match(line))
    candidates = [cut_frames] if cut_frames else []
    candidates += [frozenset(range(len(kept) - n, len(kept))) for n in (1, 2) if n < len(kept)]
    for skip in candidates:
        chain = attempt(skip)
        if chain:
            last = chain[-1]
            if max(skip) == len(kept) - 1:    # the end was lost: the chain is cut
                chain = chain[:-1] + (PyException(last.type, last.message, last.frames, last.unraisable_in,
                                                  last.chained_by, last.header_missing, True),)
            return chain, skip
    return None, frozenset()


def innermost_frames(chain: tuple[PyException, ...]) -> tuple[Frame, ...]:
    """Frames of the exception that was finally raised (the last of the chain)."""
    return chain[-1].frames if chain else ()
