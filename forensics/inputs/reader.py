"""Reading text safely: one line at a time, whatever the file holds.

Memory is bounded by MAX_LINE_BYTES whatever the file size: a 500 MB line is one line,
cut (and counted).  UTF-8 is the default; UTF-16 and UTF-32 (with or without a BOM, as
Windows tools and PowerShell redirects write them) are decoded, not skipped as binary.
Invalid UTF-8 is replaced and counted, NUL bytes removed and counted.  A read error or
a cut compressed stream ends the file with a problem line; what came before is kept.
"""

from __future__ import annotations

import codecs
import lzma
import re
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

MAX_LINE_BYTES = 1 << 20          # longer lines are cut; the cut is counted as a problem
CHUNK = 1 << 20


def detect_encoding(head: bytes) -> str:
    """utf-8, utf-16-le/be or utf-32-le/be, from a BOM or the pattern of NUL bytes."""
    sample = head[:4096]
    # a BOM counts when the lines after it end the way that encoding ends them (a
    # binary or Latin-1 file can start with the bytes FF FE by chance)
    for bom, name, newline in ((codecs.BOM_UTF32_LE, "utf-32-le", b"\n\x00\x00\x00"),
                               (codecs.BOM_UTF32_BE, "utf-32-be", b"\x00\x00\x00\n"),
                               (codecs.BOM_UTF16_LE, "utf-16-le", b"\n\x00"),
                               (codecs.BOM_UTF16_BE, "utf-16-be", b"\x00\n")):
        if sample.startswith(bom) and (newline in sample or b"\n" not in sample):
            return name
    if len(sample) < 8 or b"\x00" not in sample:
        return "utf-8"
    n = len(sample) - len(sample) % 4
    quads = [sample[i:i + 4] for i in range(0, n, 4)]
    if quads and sum(q[1:] == b"\x00\x00\x00" and q[0] for q in quads) > 0.9 * len(quads):
        return "utf-32-le"
    if quads and sum(q[:3] == b"\x00\x00\x00" and q[3] for q in quads) > 0.9 * len(quads):
        return "utf-32-be"
    pairs = len(sample) // 2
    odd_nul = sum(1 for i in range(1, 2 * pairs, 2) if sample[i] == 0 and sample[i - 1] != 0)
    even_nul = sum(1 for i in range(0, 2 * pairs, 2) if sample[i] == 0 and sample[i + 1] != 0)
    if odd_nul > 0.8 * pairs:
        return "utf-16-le"
    if even_nul > 0.8 * pairs:
        return "utf-16-be"
    return "utf-8"


@dataclass
class ReadStats:
    long_lines: int = 0
    invalid_utf8_lines: int = 0
    nul_lines: int = 0
    blank_lines: int = 0       # blank lines after the first of a run: counted, not handed on
    encoding: str = "utf-8"
    problems: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        notes = list(self.problems)
        if self.encoding != "utf-8":
            notes.append(f"decoded as {self.encoding.upper()}")
        if self.long_lines:
            notes.append(f"{self.long_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were cut")
        if self.invalid_utf8_lines:
            notes.append(f"{self.invalid_utf8_lines} line(s) with invalid UTF-8 (replaced)")
        if self.nul_lines:
            notes.append(f"{self.nul_lines} line(s) with NUL bytes (removed)")
        return notes


_BLANK = frozenset({b"\n", b"\r\n", b"\r", b" \n"})
READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError)


def iter_lines(stream: BinaryIO, stats: ReadStats, head: bytes | None = None) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded text without its line ending) for every line."""
    encoding = detect_encoding(head) if head is not None else "utf-8"
    stats.encoding = encoding
    if encoding == "utf-8":
        yield from _utf8_lines(stream, stats)
    else:
        yield from _decoded_lines(stream, stats, encoding)


def _utf8_lines(stream: BinaryIO, stats: ReadStats) -> Iterator[tuple[int, str]]:
    lineno = 0
    first = True
    blank = False
    while True:
        try:
            chunk = stream.readline(MAX_LINE_BYTES)
        except READ_ERRORS as exc:
            stats.problems.append(f"read stopped after line {lineno}: {exc}")
            return
        if not chunk:
            return
        lineno += 1
        if chunk in _BLANK:
            # a run of blank lines is one blank line to the parsers (a file of newlines
            # is a flood, not a log); the rest are counted here
            if blank:
                stats.blank_lines += 1
                continue
            blank = True
        else:
            blank = False
        if not chunk.endswith(b"\n") and len(chunk) >= MAX_LINE_BYTES:
            stats.long_lines += 1
            try:
                while True:          # the rest of the over-long line, discarded in bounded pieces
                    rest = stream.readline(MAX_LINE_BYTES)
                    if not rest or rest.endswith(b"\n"):
                        break
            except READ_ERRORS as exc:
                stats.problems.append(f"read stopped inside line {lineno}: {exc}")
                yield lineno, _text(chunk, stats, first)
                return
        yield lineno, _text(chunk, stats, first)
        first = False


def _text(chunk: bytes, stats: ReadStats, first: bool) -> str:
    if first and chunk.startswith(codecs.BOM_UTF8):
        chunk = chunk[3:]
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
        stats.nul_lines += 1
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError:
        text = chunk.decode("utf-8", errors="replace")
        stats.invalid_utf8_lines += 1
    return text.rstrip("\r\n")


def _decoded_lines(stream: BinaryIO, stats: ReadStats, encoding: str) -> Iterator[tuple[int, str]]:
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    carry = ""
    lineno = 0
    skipping = False
    first = True
    while True:
        try:
            data = stream.read(CHUNK)
        except READ_ERRORS as exc:
            stats.problems.append(f"read stopped after line {lineno}: {exc}")
            data = b""
        text = decoder.decode(data, final=not data)
        if first:
            text = text.lstrip("\ufeff")
            first = False
        parts = (carry + text).split("\n")
        carry = parts.pop()
        for part in parts:
            if skipping:
                skipping = False
                continue
            lineno += 1
            yield lineno, _clean(part, stats)
        if len(carry) > MAX_LINE_BYTES:
            if not skipping:
                lineno += 1
                stats.long_lines += 1
                yield lineno, _clean(carry[:MAX_LINE_BYTES], stats)
                skipping = True
            carry = ""
        if not data:
            if carry and not skipping:
                lineno += 1
                yield lineno, _clean(carry, stats)
            return


def _clean(text: str, stats: ReadStats) -> str:
    if "\x00" in text:
        text = text.replace("\x00", "")
        stats.nul_lines += 1
    if "\ufffd" in text:
        stats.invalid_utf8_lines += 1
    return text.rstrip("\r")


# --- newest-first exports -------------------------------------------------------------------

# a row that starts with its time: epoch milliseconds (Grafana/Loki) or an RFC 3339 stamp
_ROW_TIME = re.compile(r"^(?:(\d{13})\t|(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?))")
ORDER_SAMPLE = 200                 # lines looked at to tell the order
MAX_REORDERED_LINES = 1_000_000    # a newest-first export is held in memory to be turned round


def chronological(lines: Iterator[tuple[int, str]], stats: ReadStats) -> Iterator[tuple[int, str]]:
    """Lines oldest first.  Log viewers export newest first (Grafana's download of a Loki
    query): such an input, recognised by row times that only go backwards, is turned
    round (line numbers kept) so that every traceback reads top-down again.  Anything
    else streams through untouched."""
    head: list[tuple[int, str]] = []
    for item in lines:
        head.append(item)
        if len(head) >= ORDER_SAMPLE:
            break
    stamps = []
    for _, text in head:
        m = _ROW_TIME.match(text)
        if m:
            stamps.append(m.group(1) or m.group(2))
    pairs = list(zip(stamps, stamps[1:]))
    newest_first = len(stamps) >= 10 and any(a > b for a, b in pairs) and not any(a < b for a, b in pairs)
    if not newest_first:
        yield from head
        yield from lines
        return
    held = head
    for item in lines:
        if len(held) >= MAX_REORDERED_LINES:
            stats.problems.append(f"newest-first export longer than {MAX_REORDERED_LINES:,} lines: read in file "
                                  "order past that point")
            yield from reversed(held)
            yield item
            yield from lines
            return
        held.append(item)
    stats.problems.append("rows are newest first (a log viewer's export): read oldest first")
    yield from reversed(held)
