"""The fast path for large text inputs: find the lines worth parsing without looking at
every line in Python.

A large log is read in multi-megabyte blocks; each block is searched with C-speed
``bytes.find`` for the prefilter's anchor literals (forensics/data/prefilter.toml: the
message catalogue's triggers, error levels, block starts).  Only the lines that hold an
anchor - plus a window of lines before and after each, the lines of any block still open
(a traceback's frames carry no anchor) and the file's last lines - reach the grammars.
Every other line is counted (``counted_lines``), never silently lost.
"""

from __future__ import annotations

import functools
from collections import deque
from typing import BinaryIO, Callable, Iterator

from forensics import knowledge
from forensics.inputs.reader import READ_ERRORS

BLOCK_BYTES = 8 << 20
CONTEXT_BEFORE = 8          # lines parsed before each hit (what led to it)
CONTEXT_AFTER = 8           # lines parsed after each hit
TAIL_LINES = 200            # the last lines of a file: how it ended
MAX_LINE = 1 << 20


@functools.lru_cache(maxsize=None)
def keep_memory_flat() -> None:
    """Make glibc serve the multi-megabyte block buffers from mmap, always.

    glibc raises its mmap threshold after the first large buffer is freed, so the
    following 8 MB blocks come from the heap, which fragments: peak RSS then grows with
    the number of blocks (measured: +30% from 100 MB to 1 GB).  A fixed threshold keeps it
    flat.  Anything but glibc: nothing to do."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)      # M_MMAP_THRESHOLD = 1 MiB (fixed: no dynamic raise)
    except (OSError, AttributeError):
        pass


@functools.lru_cache(maxsize=None)
def anchors() -> tuple[bytes, ...]:
    data = knowledge.load("prefilter")
    words = set(data["anchors"]["always"])
    for entry in knowledge.message_patterns():
        words.update(entry.triggers)
    words -= set(data["anchors"]["skip_triggers"])
    # a shorter anchor that is a substring of a longer one makes the longer one redundant
    ordered = sorted(words, key=len)
    kept: list[str] = []
    for word in ordered:
        if not any(k in word for k in kept):
            kept.append(word)
    return tuple(w.encode() for w in kept)


class Scanner:
    """Yields (line number, text) of the lines to parse; counts the others.

    ``hits``: absolute byte offsets of anchor matches, in order, when something faster
    than Python found them; else each block is searched here."""

    def __init__(self, stream: BinaryIO, busy: Callable[[], bool], hits: Iterator[int] | None = None) -> None:
        self.stream = stream
        self.busy = busy            # True while the parser is inside a block: feed every line
        self.counted = 0
        self.long_lines = 0
        self.problems: list[str] = []
        self._hits = hits
        keep_memory_flat()
        self._next_hit: int | None = None
        self._base = 0              # absolute offset of the current block

    def lines(self) -> Iterator[tuple[int, str]]:
        lineno = 0                      # number of the last line consumed (yielded or counted)
        carry = b""
        after = 0
        skipped_tail: deque[tuple[int, bytes]] = deque(maxlen=TAIL_LINES)   # counted since the last yield

        def emit(number: int, raw: bytes):
            skipped_tail.clear()
            return number, self._text(raw)

        giant: bytes | None = None      # the head of a line longer than MAX_LINE, while its rest is dropped
        while True:
            try:
                data = self.stream.read(BLOCK_BYTES)
            except READ_ERRORS as exc:
                # a cut stream or a bomb's cap: what came before is read, the rest is not
                self.problems.append(f"read stopped after line {lineno}: {exc}")
                data = b""
            if giant is not None:
                # inside an over-long line: drop it in blocks (memory stays flat) up to its
                # newline; it is one line, cut to its head
                nl = data.find(b"\n")
                if nl < 0 and data:
                    self._base += len(data)
                    continue
                self._base += nl + 1 if nl >= 0 else 0
                data = data[nl + 1:] if nl >= 0 else b""
                self.long_lines += 1
                lineno += 1
                yield emit(lineno, giant)
                giant = None
                if not data:
                    if nl < 0:
                        break
                    continue
            if not data and not carry:
                break
            block = carry + data
            cut = block.rfind(b"\n")
            if data and cut < 0:
                if len(block) < 4 * BLOCK_BYTES:
                    carry = block                   # no complete line yet
                else:
                    giant, carry = block[:MAX_LINE], b""
                    self._base += len(block)
                continue
            if cut < 0:
                block, carry = block + b"\n", b""   # a last line without newline
            else:
                carry, block = block[cut + 1:], block[: cut + 1]
            pos = 0
            starts = self._block_hits(block) if self._hits is not None else _hit_lines(block)
            self._base += len(block)
            for start in starts + [len(block)]:
                if start < pos:
                    continue
                while pos < start and (after > 0 or self.busy()):
                    end = block.index(b"\n", pos)
                    lineno += 1
                    yield emit(lineno, block[pos:end])
                    after -= 1
                    pos = end + 1
                if pos < start:
                    count = block.count(b"\n", pos, start)
                    keep = CONTEXT_BEFORE if start < len(block) else TAIL_LINES
                    last = _last_lines(block, pos, start, keep)
                    self.counted += count
                    first_number = lineno + count - len(last) + 1
                    lineno += count
                    if start < len(block):
                        # context before a hit: parse it (it was counted: uncount)
                        self.counted -= len(last)
                        for i, raw in enumerate(last):
                            yield emit(first_number + i, raw)
                    else:
                        skipped_tail.extend((first_number + i, raw) for i, raw in enumerate(last))
                    pos = start
                if start < len(block):
                    end = block.index(b"\n", pos)
                    lineno += 1
                    yield emit(lineno, block[pos:end])
                    pos = end + 1
                    after = CONTEXT_AFTER
            if not data:
                break
        # how the file ended: its last lines, if they were only counted
        tail = list(skipped_tail)
        self.counted -= len(tail)
        for number, raw in tail:
            yield number, self._text(raw)

    def _block_hits(self, block: bytes) -> list[int]:
        """Line starts in ``block`` of the matches reported for its byte range."""
        base, end = self._base, self._base + len(block)
        starts = set()
        while True:
            if self._next_hit is None:
                self._next_hit = next(self._hits, None)
                if self._next_hit is None:
                    break
            if self._next_hit >= end:
                break
            offset = self._next_hit - base
            self._next_hit = None
            if offset >= 0:
                starts.add(block.rfind(b"\n", 0, offset) + 1)
        return sorted(starts)

    def _text(self, raw: bytes) -> str:
        if len(raw) > MAX_LINE:
            self.long_lines += 1
            raw = raw[:MAX_LINE]
        text = raw.decode("utf-8", errors="replace")
        if "\x00" in text:
            text = text.replace("\x00", "")
        return text[:-1] if text.endswith("\r") else text


def _hit_lines(block: bytes) -> list[int]:
    """Start offsets of the lines in ``block`` that hold an anchor, in order."""
    starts = set()
    for anchor in anchors():
        find = block.find
        i = find(anchor)
        while i >= 0:
            start = block.rfind(b"\n", 0, i) + 1
            starts.add(start)
            nxt = block.find(b"\n", i)
            i = find(anchor, nxt + 1) if nxt >= 0 else -1
    return sorted(starts)


def _last_lines(block: bytes, lo: int, hi: int, n: int) -> list[bytes]:
    """Up to n complete lines ending at offset hi (exclusive), not before lo."""
    out = []
    end = hi
    while len(out) < n and end > lo:
        start = block.rfind(b"\n", lo, end - 1) + 1
        if start < lo:
            start = lo
        out.append(block[start:end - 1] if block[end - 1:end] == b"\n" else block[start:end])
        end = start
    out.reverse()
    return out
