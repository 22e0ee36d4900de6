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
import os
import re
from array import array
from collections import deque
from typing import BinaryIO, Callable, Iterator

from forensics import knowledge
from forensics.inputs.reader import READ_ERRORS

BLOCK_BYTES = 8 << 20
CONTEXT_BEFORE = 8          # lines parsed before each hit (what led to it)
CONTEXT_AFTER = 8           # lines parsed after each hit
TAIL_LINES = 200            # the last lines of a file: how it ended
HEAD_LINES = 1000           # the first lines of a file: start-up (versions, config, ranks)
REPEAT_CAP = 200            # hit lines of one template parsed before the rest are counted
MAX_TEMPLATES = 100_000     # templates tracked (memory stays bounded on all-distinct lines)
_DIGITS = re.compile(rb"\d+")
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
    for error in knowledge.cuda_errors():
        words.update(w for w in (error.name, error.runtime_name, error.message) if w)
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

    def __init__(self, stream: BinaryIO, busy: Callable[[], bool], hits: Iterator[int] | None = None,
                 head_lines: int = HEAD_LINES, tail_lines: int = TAIL_LINES) -> None:
        self.head_lines, self.tail_lines = head_lines, tail_lines
        self.stream = stream
        self.busy = busy            # True while the parser is inside a block: feed every line
        self.counted = 0
        self.long_lines = 0
        self.problems: list[str] = []
        self.repeated = 0
        self._templates: dict[bytes, int] = {}
        self._last: dict[bytes, tuple[int, bytes]] = {}
        self._hits = hits
        keep_memory_flat()
        self._next_hit: int | None = None
        self._base = 0              # absolute offset of the current block

    def lines(self) -> Iterator[tuple[int, str]]:
        lineno = 0                      # number of the last line consumed (yielded or counted)
        carry = b""
        after = self.head_lines
        skipped_tail: deque[tuple[int, bytes]] = deque(maxlen=self.tail_lines)   # counted since the last yield

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
            cursor, cursor_line = 0, lineno          # a monotonic line counter for repeats
            for start in starts + [len(block)]:
                if start < pos:
                    continue
                if start < len(block):
                    cursor_line += block.count(b"\n", cursor, start)
                    cursor = start
                    if self._repeats(block, start, cursor_line + 1):
                        # an error storm: this line and the lines before it are counted,
                        # even inside an open block (its other lines repeat too)
                        end = block.index(b"\n", start)
                        count = block.count(b"\n", pos, end + 1)
                        lineno += count
                        self.counted += count
                        pos = end + 1
                        continue
                while pos < start and (after > 0 or self.busy()):
                    end = block.index(b"\n", pos)
                    lineno += 1
                    yield emit(lineno, block[pos:end])
                    after -= 1
                    pos = end + 1
                if pos < start:
                    count = block.count(b"\n", pos, start)
                    keep = CONTEXT_BEFORE if start < len(block) else self.tail_lines
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
                    after = max(after, CONTEXT_AFTER)
            if not data:
                break
        # how the file ended: its last lines, if they were only counted
        tail = list(skipped_tail)
        self.counted -= len(tail)
        for number, raw in tail:
            yield number, self._text(raw)
        # the last occurrence of each repeated template, in full
        last = sorted(self._last.values())
        self.counted -= len(last)
        for number, raw in last:
            yield number, self._text(raw)
        if self.repeated:
            self.problems.append(f"{self.repeated - len(last):,} lines repeating {len(self._last):,} error "
                                 f"template(s) more than {REPEAT_CAP} times were counted, not parsed (the first "
                                 f"{REPEAT_CAP} and the last of each were)")

    def _repeats(self, block: bytes, start: int, number: int) -> bool:
        """Whether the hit line at ``start`` repeats a template (its text with numbers
        masked) seen more than REPEAT_CAP times: an error storm (the same per-request
        error a million times) is counted, and only its first and last lines parsed."""
        end = block.find(b"\n", start, start + 4096)
        raw = block[start:end if end >= 0 else start + 4096]
        template = _DIGITS.sub(b"0", raw[:512])
        seen = self._templates.get(template, 0) + 1
        if seen <= REPEAT_CAP:
            if len(self._templates) < MAX_TEMPLATES:
                self._templates[template] = seen
            return False
        self._templates[template] = seen
        self.repeated += 1
        self._last[template] = (number, raw)
        return True

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


@functools.lru_cache(maxsize=None)
def _automaton():
    """An Aho-Corasick automaton over the anchors (pyahocorasick), or None when the
    package is not installed: one pass over a block finds every anchor, where
    ``bytes.find`` makes one pass per anchor (200 of them: 5x slower on 8 MB)."""
    try:
        import ahocorasick
    except ImportError:  # pragma: no cover - the fallback below
        return None
    automaton = ahocorasick.Automaton()
    for anchor in anchors():
        text = anchor.decode("latin-1")          # bytes as code points: offsets stay byte offsets
        automaton.add_word(text, len(text))
    automaton.make_automaton()
    return automaton


def _hit_lines(block: bytes) -> list[int]:
    """Start offsets of the lines in ``block`` that hold an anchor, in order."""
    automaton = _automaton()
    starts = set()
    if automaton is not None:
        line_end = -1
        rfind = block.rfind
        for end, length in automaton.iter(block.decode("latin-1")):
            if end <= line_end:
                continue                          # this line is already a hit
            start = rfind(b"\n", 0, end - length + 1) + 1
            starts.add(start)
            nxt = block.find(b"\n", end)
            line_end = nxt if nxt >= 0 else len(block)
        return sorted(starts)
    for anchor in anchors():
        find = block.find
        i = find(anchor)
        while i >= 0:
            start = block.rfind(b"\n", 0, i) + 1
            starts.add(start)
            nxt = block.find(b"\n", i)
            i = find(anchor, nxt + 1) if nxt >= 0 else -1
    return sorted(starts)


PARALLEL_SCAN_BYTES = 64 << 20   # a plain file past this is searched for anchors on every core


def parallel_hits(path: str, size: int, workers: int | None = None) -> Iterator[int] | None:
    """Byte offsets of every anchor match in a large plain file, found by all local
    cores at once (each searches a byte range); the Scanner then reads the file once,
    in order, and only looks at the lines around these offsets.  None when it would not
    pay (one core, a small file, no automaton, or already inside a worker process)."""
    import multiprocessing
    workers = workers or os.cpu_count() or 1
    if workers < 2 or size < PARALLEL_SCAN_BYTES or _automaton() is None or \
            multiprocessing.parent_process() is not None:
        return None
    from concurrent.futures import ProcessPoolExecutor
    step = max(BLOCK_BYTES, -(-size // (workers * 4)))
    ranges = [(path, start, min(start + step, size)) for start in range(0, size, step)]
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            found = list(pool.map(_range_hits, ranges))
    except (OSError, RuntimeError):
        return None                          # no processes here: the Scanner searches itself
    return (offset for chunk in found for offset in chunk)


def _range_hits(task: tuple[str, int, int]) -> "array":
    """Offsets of the anchor matches that start in [start, end) of a file, one per line
    (an array of 8-byte integers: an error storm's half a million hits stay small)."""
    path, start, end = task
    automaton = _automaton()
    overlap = max(len(a) for a in anchors()) - 1
    out = array("q")
    with open(path, "rb") as fh:
        pos = start
        while pos < end:
            fh.seek(pos)
            block = fh.read(min(BLOCK_BYTES, end - pos) + overlap)
            if not block:
                break
            limit = min(BLOCK_BYTES, end - pos)        # matches must start inside this block's own part
            line_end = -1
            for last, length in automaton.iter(block.decode("latin-1")):
                first = last - length + 1
                if first < limit and first > line_end:
                    out.append(pos + first)
                    nxt = block.find(b"\n", first)
                    line_end = nxt if nxt >= 0 else len(block)
            pos += limit
    return array("q", sorted(out))


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
