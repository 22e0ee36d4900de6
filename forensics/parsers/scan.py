"""The fast path for large text inputs: find the lines worth parsing without looking at
every line in Python.

A large log is read in multi-megabyte blocks; each block is searched in one compiled
pass for the prefilter's anchor literals (forensics/data/prefilter.toml: the message
catalogue's triggers, error levels, block starts) - by Hyperscan when installed (several
GB/s per core), else by an Aho-Corasick automaton, else by ``bytes.find``.  Only the lines
that hold an anchor - plus a window of lines before and after each, the lines of any
block still open (a traceback's frames carry no anchor) and the file's first and last
lines - reach the grammars.  A hit line whose template (``template_of``) repeated more
than REPEAT_CAP times is counted, not parsed: an error storm costs a dictionary lookup a
line.  Every other line is counted (``counted_lines``), never silently lost.

A storm must never count away what decides the verdict.  So a template is keyed by who
printed it and where as well as by its words (``identity_of``: the rank, pid, TP/DP tag
or task label of the line's prefix and the logger's source site are kept verbatim), and a
counted line is held: when a hit with a template never seen before follows it within
BACKFILL_LINES lines of the same block, the held line and every line after it are parsed
(a crash's ``Traceback (most recent call last):`` header looks like a thousand request
tracebacks before it; its exception line does not).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from array import array
from collections import deque
from typing import BinaryIO, Callable, Iterator

from forensics import knowledge
from forensics.inputs.reader import READ_ERRORS

BLOCK_BYTES = 2 << 20          # read and searched at a time; 8 MB blocks cost 20-30 MB of peak RSS more (issue 16)
CONTEXT_BEFORE = 8          # lines parsed before each hit (what led to it)
CONTEXT_AFTER = 8           # lines parsed after each hit
TAIL_LINES = 200            # the last lines of a file: how it ended
HEAD_LINES = 1000           # the first lines of a file: start-up (versions, config, ranks)
REPEAT_CAP = 200            # hit lines of one template parsed before the rest are counted
MAX_TEMPLATES = 100_000     # templates tracked (memory stays bounded on all-distinct lines)
MAX_LINE = 1 << 20
SANITIZER_FULL_RECORDS = 1000   # distinct sanitizer records parsed with their host backtrace
SANITIZER_MAX_RECORDS = 5000    # distinct records parsed at all; past them, only a new kernel's
SANITIZER_HEAD = b"========= "   # a compute-sanitizer line; a record's headline has no blank after it
_PC_OFFSET = re.compile(rb"\+0x[0-9a-fA-F]+|\bat 0x[0-9a-fA-F]+")
_RECORD_GOES_ON = re.compile(rb"\n(?!=========(?:  | *\r?\n))")
BACKFILL_LINES = 400        # lines from a held (counted) line to a new hit that are parsed after all
IDENTITY_BYTES = 160        # the head of a line where its prefix names the process


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


_PUNCTUATION = b"()[]{}<>\"'.,:;!?=|"


def template_of(raw: bytes) -> bytes:
    """What stays the same across the repeats of one message: its words, with every
    token that varies masked - numbers, times, request ids (``chatcmpl-9xQ...``), hashes,
    addresses, paths with numbers in them.  A token is kept when it is a plain word
    (lower case, Title case or UPPER case letters, at most 24 of them)."""
    out = []
    for token in raw[:512].split():
        word = token.strip(_PUNCTUATION)
        keep = word.isalpha() and len(word) <= 24 and (word.islower() or word.isupper() or word.istitle())
        out.append(token if keep else b"*")
    return b" ".join(out)


@functools.lru_cache(maxsize=None)
def _identity_patterns() -> tuple[tuple[re.Pattern, ...], re.Pattern]:
    data = knowledge.load("prefilter")["identity"]
    return tuple(re.compile(p.encode()) for p in data["patterns"]), re.compile(data["tag"].encode())


def identity_of(raw: bytes) -> bytes:
    """Who printed a line and from where, from its head (data/prefilter.toml [identity]):
    the rank, pid, TP/DP tag, task label and logger site, joined; b"" when none."""
    if raw.startswith(b"====="):
        return b""      # compute-sanitizer's records: one process per log, and millions of lines
    head = raw[:IDENTITY_BYTES]
    patterns, tag = _identity_patterns()
    found = b"\0".join([m.group() for m in map(lambda p: p.search(head), patterns) if m is not None])
    if head[:1].isdigit() or head[:1] == b"[":
        m = tag.match(head)
        if m is not None:
            found += b"\0" + m.group()
    return found


def _record_end(block: bytes, start: int) -> int:
    """Where the compute-sanitizer record whose headline is at ``start`` ends: after its
    last line, the next line being no continuation of it ("=========" and two blanks, or
    the bare marker); ``start`` -1: the record's continuation at the block's start."""
    found = _RECORD_GOES_ON.search(block, start if start >= 0 else 0) if start >= 0 else \
        _RECORD_GOES_ON.search(b"\n" + block[:1 << 20])
    if found is None:
        return len(block)
    return found.start() + 1 if start >= 0 else found.start()


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
        self._quick: dict[bytes, bytes] = {}
        self._last: dict[bytes, tuple[int, bytes]] = {}
        self._hits = hits
        # the last run of counted hit lines, one right after the other, up to BACKFILL_LINES:
        # (offset in the block, line number, template) of each
        self._held: deque[tuple[int, int, bytes]] = deque(maxlen=BACKFILL_LINES)
        self._held_template = b""
        self._records: set[bytes] = set()       # compute-sanitizer records parsed (their keys)
        self._kernels: set[bytes] = set()       # and their kernels
        self._records_skipped = 0
        self._skipping = False                  # a counted sanitizer record runs on into the next block
        self._skipping_lines = 0
        self._new = False           # whether the last hit's template was seen for the first time
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
            self._held.clear()      # held lines are looked back for within one block
            starts = self._block_hits(block) if self._hits is not None else _hit_lines(block)
            self._base += len(block)
            cursor, cursor_line = 0, lineno          # a monotonic line counter for repeats
            record_until = 0                         # the end of a sanitizer record being parsed whole
            cut_from = cut_to = 0                    # a sanitizer record's host backtrace, counted
            if self._skipping:
                # a repeated sanitizer record ran on into this block: the rest of it too
                pos = cursor = _record_end(block, -1)
                cursor_line += block.count(b"\n", 0, pos)
                self.counted += cursor_line - lineno
                self._skipping_lines += cursor_line - lineno
                lineno = cursor_line
                self._skipping = pos >= len(block)
            for start in starts + [len(block)]:
                if start < pos:
                    continue
                if start < len(block):
                    cursor_line += block.count(b"\n", cursor, start)
                    cursor = start
                    if cut_from <= start < cut_to:
                        # the host backtrace of a record parsed without it: counted (and
                        # its rest in the next block, when it runs on into it)
                        cursor_line += block.count(b"\n", start, cut_to)
                        cursor = pos = cut_to
                        self.counted += cursor_line - lineno
                        lineno = cursor_line
                        self._skipping = cut_to >= len(block)
                        continue
                    headline = start >= record_until and block.startswith(SANITIZER_HEAD, start) and \
                        block[start + len(SANITIZER_HEAD):start + len(SANITIZER_HEAD) + 1].strip()
                    if headline and not self._record_seen(block, start):
                        record_until = _record_end(block, start)    # parsed whole: no storm inside it
                        if len(self._records) > SANITIZER_FULL_RECORDS:
                            # past the first records in full: a new one's finding (kernel,
                            # access, location) without its host backtrace
                            frames = block.find(b"Saved host backtrace", start, record_until)
                            if frames >= 0:
                                frames = block.rfind(b"\n", start, frames) + 1
                                cut_from, cut_to, record_until = frames, record_until, frames
                    elif headline:
                        # a compute-sanitizer record like one already parsed (kernel,
                        # access, size, source line): counted whole - its lines are all
                        # hits, and a long run's millions of them are the cost
                        end = _record_end(block, start)
                        cursor_line += block.count(b"\n", start, end)
                        cursor = pos = end
                        self.counted += cursor_line - lineno
                        self._skipping_lines += cursor_line - lineno
                        lineno = cursor_line
                        self._skipping = end >= len(block)
                        continue
                    if start >= record_until and self._repeats(block, start, cursor_line + 1):
                        # an error storm: this line and the lines before it are counted,
                        # even inside an open block (its other lines repeat too); the line
                        # is held in case a new hit shows it opened something that matters
                        if self._held and self._held[-1][1] != cursor_line:
                            self._held.clear()      # not the next line of the run held
                        self._held.append((start, cursor_line + 1, self._held_template))
                        cursor_line += 1
                        cursor = pos = block.index(b"\n", start) + 1
                        self.counted += cursor_line - lineno
                        lineno = cursor_line
                        continue
                held = self._held
                if start < len(block) and held and lineno == held[-1][1] and self._new:
                    # a new hit after counted ones: parse the run of counted lines right
                    # before it - the block they may have opened - in place (uncounted:
                    # they are parsed after all)
                    pos, lineno = held[0][0], lineno - len(held)
                    self.counted -= len(held)
                    self.repeated -= len(held)
                    for _, number, template in held:
                        if self._last.get(template, (None,))[0] == number:
                            del self._last[template]
                    while pos < start:
                        end = block.index(b"\n", pos)
                        lineno += 1
                        yield emit(lineno, block[pos:end])
                        pos = end + 1
                while pos < start and (after > 0 or self.busy()):
                    end = block.index(b"\n", pos)
                    lineno += 1
                    yield emit(lineno, block[pos:end])
                    after -= 1
                    pos = end + 1
                held.clear()
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
        if self._records_skipped:
            self.problems.append(f"{self._records_skipped:,} compute-sanitizer records ({self._skipping_lines:,} lines) "
                                 f"repeating one of {len(self._records):,} already parsed (the same kernel, access, "
                                 f"size and source line; past {SANITIZER_MAX_RECORDS:,} distinct records, the same "
                                 "kernel) were counted, not parsed")
        if self.repeated:
            stormy = sum(1 for seen in self._templates.values() if seen > REPEAT_CAP)
            self.problems.append(f"{self.repeated - len(last):,} lines repeating {stormy:,} error "
                                 f"template(s) more than {REPEAT_CAP} times were counted, not parsed (the first "
                                 f"{REPEAT_CAP} and the last of each were)")

    def _record_seen(self, block: bytes, start: int) -> bool:
        """Whether the compute-sanitizer record whose headline is at ``start`` repeats one
        already parsed: its headline (the access and size) and its location line (the
        kernel and the source line, the PC offset masked) seen before."""
        first_nl = block.find(b"\n", start)
        second_nl = block.find(b"\n", first_nl + 1) if first_nl >= 0 else -1
        if first_nl < 0 or second_nl < 0:
            return False
        # a digest: memory stays bounded on a log of all-distinct records
        at = _PC_OFFSET.sub(b"", block[first_nl:second_nl][:1024])
        key = hashlib.blake2b(block[start:first_nl][:1024] + at, digest_size=16).digest()
        kernel = hashlib.blake2b(at.split(b" in ", 1)[0], digest_size=16).digest()
        if key in self._records or (len(self._records) >= SANITIZER_MAX_RECORDS and kernel in self._kernels):
            # past SANITIZER_MAX_RECORDS distinct records, a new one is parsed only for a
            # kernel not seen yet: every kernel stays in view, memory stays flat
            self._records_skipped += 1
            return True
        if len(self._records) < MAX_TEMPLATES:
            self._records.add(key)
        if len(self._kernels) < MAX_TEMPLATES:
            self._kernels.add(kernel)
        return False

    def _repeats(self, block: bytes, start: int, number: int) -> bool:
        """Whether the hit line at ``start`` repeats a template (``template_of``) seen more
        than REPEAT_CAP times: an error storm (the same per-request error a million
        times) is counted, and only its first and last lines parsed."""
        end = block.find(b"\n", start, start + 4096)
        raw = block[start:end if end >= 0 else start + 4096]
        # the exact text without its digits first (C speed: a storm repeats it), the
        # word template when that is new (a request id, a hash, a pointer differ per line)
        identity = identity_of(raw)
        quick = raw[:512].translate(None, b"0123456789") + b"\1" + identity
        template = self._quick.get(quick)
        if template is None:
            template = template_of(raw) + b"\1" + identity
            if len(self._quick) < MAX_TEMPLATES:
                self._quick[quick] = template
        seen = self._templates.get(template, 0) + 1
        self._new = seen == 1
        if seen <= REPEAT_CAP:
            if len(self._templates) < MAX_TEMPLATES:
                self._templates[template] = seen
            return False
        self._templates[template] = seen
        self.repeated += 1
        self._last[template] = (number, raw)
        self._held_template = template
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
def _hyperscan():
    """The anchors compiled for Hyperscan (the ``hyperscan`` package), or None when it is
    not installed or this CPU cannot run it: one pass over a block at several GB/s per
    core.  Compiled here, in memory, each run - never loaded from a file."""
    try:
        import hyperscan
        words = anchors()
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(expressions=list(words), ids=list(range(len(words))), elements=len(words),
                         flags=[0] * len(words), literal=True)
    except Exception:  # noqa: BLE001 - ImportError, or hyperscan.error on a CPU without SSSE3
        return None
    return database


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
        text = anchor.decode("latin-1")
        automaton.add_word(text, len(text))
    automaton.make_automaton()
    return automaton


def scanner_name() -> str:
    """Which multi-pattern matcher the fast path uses here (the benchmark prints it)."""
    return "hyperscan" if _hyperscan() is not None else "pyahocorasick" if _automaton() is not None else "bytes.find"


@functools.lru_cache(maxsize=None)
def _anchor_lengths() -> tuple[int, ...]:
    return tuple(len(a) for a in anchors())


SAME_LINE_MATCHES = 16      # matches on one line past which the rest of that line is skipped


class _Matches:
    """Matches of one block, in order of their end.  A line with more than
    SAME_LINE_MATCHES of them (a line of a million "=" is a million matches of the
    sanitizer's "=========") says where to resume - after that line - so that a search
    costs in proportion to the lines, not to the matches a hostile line can hold."""

    def __init__(self, block: bytes) -> None:
        self.block = block
        self.found: list[tuple[int, int]] = []
        self.line_end = -1
        self.extra = 0
        self.resume: int | None = None

    def add(self, first: int, end: int) -> bool:
        """Keeps the match; False when the search should stop and resume at ``resume``."""
        self.found.append((first, end))
        if end <= self.line_end:
            self.extra += 1
            if self.extra >= SAME_LINE_MATCHES:
                self.resume = self.line_end + 1
                return False
            return True
        self.extra = 0
        nxt = self.block.find(b"\n", end)
        self.line_end = nxt if nxt >= 0 else len(self.block)
        return True


def _matches(block: bytes) -> list[tuple[int, int]]:
    """(first byte, end) of anchor matches in ``block``, in order of their end, with the
    best matcher installed: Hyperscan, else Aho-Corasick, else ``bytes.find`` (one match
    per anchor and line)."""
    database, automaton = _hyperscan(), _automaton()
    if database is None and automaton is None:
        pairs = []
        for anchor in anchors():
            i = block.find(anchor)
            while i >= 0:
                pairs.append((i, i + len(anchor)))
                nxt = block.find(b"\n", i)
                i = block.find(anchor, nxt + 1) if nxt >= 0 else -1
        return sorted(pairs, key=lambda p: p[1])
    matches, base = _Matches(block), 0
    if database is not None:
        import hyperscan
        lengths, view = _anchor_lengths(), memoryview(block)
        while base < len(block):
            matches.resume = None
            try:
                database.scan(view[base:], match_event_handler=lambda i, _f, to, _fl, _c:
                              None if matches.add(base + to - lengths[i], base + to) else True)
            except hyperscan.ScanTerminated:
                pass
            if matches.resume is None:
                break
            base = matches.resume
        return matches.found
    text = block.decode("latin-1")              # bytes as code points: offsets stay byte offsets
    while base < len(block):
        matches.resume = None
        for end, length in automaton.iter(text, base):
            if not matches.add(end - length + 1, end + 1):
                break
        if matches.resume is None:
            break
        base = matches.resume
    return matches.found


def _hit_lines(block: bytes, limit: int | None = None) -> list[int]:
    """Start offsets of the lines in ``block`` that hold an anchor beginning before
    ``limit`` (default: anywhere), in order; one per line."""
    starts = set()
    line_end = -1
    rfind, find = block.rfind, block.find
    limit = len(block) if limit is None else limit
    for first, end in _matches(block):
        if end <= line_end or first >= limit:
            continue                          # this line is already a hit / past the range
        starts.add(rfind(b"\n", 0, first) + 1)
        nxt = find(b"\n", end)
        line_end = nxt if nxt >= 0 else len(block)
    return sorted(starts)


PARALLEL_SCAN_BYTES = 64 << 20   # a plain file past this is searched for anchors on every core


def parallel_hits(path: str, size: int, workers: int | None = None) -> Iterator[int] | None:
    """Byte offsets of every anchor match in a large plain file, found by all local
    cores at once (each searches a byte range); the Scanner then reads the file once,
    in order, and only looks at the lines around these offsets.  None when it would not
    pay (one core, a small file, Hyperscan or no automaton, already inside a worker)."""
    import multiprocessing
    workers = workers or os.cpu_count() or 1
    # Hyperscan searches a GB in about 0.35 s on one core, less than the Scanner's own
    # pass over the bytes: splitting its search across processes saved nothing (1 GB on 2
    # cores: 1.94 s parallel, 2.02 s not).  The Python matchers are 5-10x slower: for
    # them the ranges pay.
    if workers < 2 or size < PARALLEL_SCAN_BYTES or _hyperscan() is not None or _automaton() is None or \
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
    """An offset inside each line with an anchor match that starts in [start, end) of
    a file (an array of 8-byte integers: an error storm's half a million hits stay small)."""
    path, start, end = task
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
            out.extend(pos + line for line in _hit_lines(block, limit))
            pos += limit
    return out


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
