"""Sources: find the inputs, decide each one's format from its content, open it safely.

Nothing here interprets a line.  A file that cannot be read or recognised becomes a
``Source`` with problems; it never stops the analysis of the others.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

SNIFF_BYTES = 64 * 1024
MAX_LINE_BYTES = 1 << 20          # longer lines are cut; the cut is counted as a problem
STDIN_NAME = "<stdin>"

EM_CUDA = 190
ET_CORE = 4

_COMPRESSED = {
    b"\x1f\x8b": ("gzip", gzip.open),
    b"BZh": ("bzip2", bz2.open),
    b"\xfd7zXZ\x00": ("xz", lzma.open),
}


@dataclass(frozen=True)
class Source:
    """One input: where it is, what it is, and what went wrong opening it."""

    relpath: str
    path: Path | None            # None for stdin
    kind: str                    # text | compute-sanitizer | compute-sanitizer-xml | cuda-gdb |
                                 # cuda-coredump | elf-core | unknown
    size: int | None = None
    mtime: datetime | None = None
    compression: str | None = None
    problems: tuple[str, ...] = ()
    data: bytes | None = None    # stdin content (small by nature of a pipe paste)
    opener: Callable[[], BinaryIO] | None = field(default=None, compare=False, repr=False)
                                 # an archive member's stream (read once, in order)

    @property
    def is_plain_file(self) -> bool:
        """A file on disk read as it is (seekable; no decompression, no archive)."""
        return self.path is not None and self.data is None and self.opener is None and not self.compression

    def open_binary(self) -> BinaryIO:
        if self.opener is not None:
            raw: BinaryIO = self.opener()
        elif self.data is not None:
            raw = io.BytesIO(self.data)
        else:
            raw = open(self.path, "rb")  # noqa: SIM115 - caller closes
        if self.compression:
            opener = {name: fn for name, fn in _COMPRESSED.values()}[self.compression]
            return opener(raw)
        return raw


MAX_FILES = 10_000       # more inputs than this: the rest is listed as not read


def discover(paths: list[str]) -> Iterator[Source]:
    """Every input under ``paths`` (directories recursively, files, ``-`` for stdin), at
    most MAX_FILES of them (a folder of 100,000 files is a mistake worth saying so)."""
    count = 0
    for source in _discover(paths):
        count += 1
        if count > MAX_FILES:
            yield Source("...", None, "unknown",
                         problems=(f"more than {MAX_FILES:,} input files: the rest were not read; "
                                   "point forensics at the folder of the crashed server's logs",))
            return
        yield source


def _discover(paths: list[str]) -> Iterator[Source]:
    for given in paths:
        if given == "-":
            yield _stdin_source()
            continue
        path = Path(given)
        if not path.exists() and not path.is_symlink():
            yield Source(relpath=given, path=None, kind="unknown",
                         problems=(f"{given}: no such file or directory",))
            continue
        if path.is_dir():
            yield from _walk(path)
        else:
            yield from _expand(sniff(path, path.name))


def _expand(source: Source) -> Iterator[Source]:
    """A source as it is, or, for an archive, its members (read as streams, never
    extracted to disk)."""
    if source.kind.startswith("archive-"):
        from forensics.archives import members
        yield from members(source)
    else:
        yield source


def _walk(root: Path) -> Iterator[Source]:
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=None):
        try:
            st = os.stat(dirpath)
            key = (st.st_dev, st.st_ino)
        except OSError:
            continue
        if key in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            yield from _expand(sniff(full, rel))


def _stdin_source() -> Source:
    data = sys.stdin.buffer.read()
    source = _classify(STDIN_NAME, None, data[:SNIFF_BYTES], size=len(data), mtime=None, data=data)
    if source.kind.startswith("archive-"):
        return Source(STDIN_NAME, None, "unknown", problems=(f"{STDIN_NAME}: an archive on stdin; "
                                                               "give its path instead",))
    return source


def sniff(path: Path, relpath: str) -> Source:
    """Open ``path`` just far enough to know its format."""
    try:
        if path.is_symlink() and not path.exists():
            return Source(relpath, path, "unknown", problems=(f"{relpath}: broken symbolic link",))
        if not path.is_file():
            return Source(relpath, path, "unknown",
                          problems=(f"{relpath}: not a regular file (device, socket or pipe); skipped",))
        st = path.stat()
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except PermissionError:
        return Source(relpath, path, "unknown",
                      problems=(f"{relpath}: permission denied; run with read access to include it",))
    except OSError as exc:
        return Source(relpath, path, "unknown", problems=(f"{relpath}: cannot read ({exc.strerror or exc})",))
    return _classify(relpath, path, head, size=st.st_size,
                     mtime=datetime.fromtimestamp(st.st_mtime))


def classify(relpath: str, path: Path | None, head: bytes, *, size: int | None,
             mtime: datetime | None, data: bytes | None = None,
             opener: Callable[[], BinaryIO] | None = None) -> Source:
    """A source from its first bytes (``opener``: how to read an archive member)."""
    return _classify(relpath, path, head, size=size, mtime=mtime, data=data, opener=opener)


def _classify(relpath: str, path: Path | None, head: bytes, *, size: int | None,
              mtime: datetime | None, data: bytes | None = None,
              opener: Callable[[], BinaryIO] | None = None) -> Source:
    compression = None
    opener_of_member = opener
    for magic, (name, opener) in _COMPRESSED.items():
        if head.startswith(magic):
            compression = name
            try:
                raw = head if opener_of_member else (data if data is not None else _read_more(path))
                head = _peek(opener(io.BytesIO(raw)))
            except (OSError, lzma.LZMAError) as exc:
                return Source(relpath, path, "unknown", size, mtime, name,
                              (f"{relpath}: corrupt {name} stream ({exc})",), data, opener_of_member)
            break
    kind, problems = _kind_of(relpath, head)
    return Source(relpath, path, kind, size, mtime, compression, problems, data, opener_of_member)


def _peek(stream) -> bytes:
    """Up to SNIFF_BYTES decompressed from the start of a (possibly cut) stream."""
    out = bytearray()
    try:
        while len(out) < SNIFF_BYTES:
            chunk = stream.read(4096)
            if not chunk:
                break
            out += chunk
    except EOFError:
        pass        # we only had the start of the stream: what decoded so far is enough
    return bytes(out[:SNIFF_BYTES])


def _read_more(path: Path | None) -> bytes:
    # Enough compressed bytes to decompress a sniff's worth of text.
    with open(path, "rb") as fh:
        return fh.read(4 * SNIFF_BYTES)


def _kind_of(relpath: str, head: bytes) -> tuple[str, tuple[str, ...]]:
    if not head:
        return "text", ()
    if head.startswith(b"\x7fELF"):
        if len(head) < 20:
            return "unknown", (f"{relpath}: truncated ELF header",)
        little = head[5] != 2
        order = "little" if little else "big"
        e_type = int.from_bytes(head[16:18], order)
        e_machine = int.from_bytes(head[18:20], order)
        if e_type == ET_CORE and e_machine == EM_CUDA:
            return "cuda-coredump", ()
        if e_type == ET_CORE:
            return "elf-core", ()
        return "unknown", (f"{relpath}: ELF file that is not a core dump (type {e_type}); skipped",)
    if head.startswith(b"PK\x03\x04"):
        return "archive-zip", ()
    if head[257:262] == b"ustar":
        return "archive-tar", ()
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "unknown", (f"{relpath}: zstd-compressed; decompress it first (zstd -d) - "
                           "zstd reading is not supported yet",)
    text = head.decode("utf-8", errors="replace")
    if _looks_binary(text):
        return "unknown", (f"{relpath}: binary data of unknown format; skipped",)
    if "<ComputeSanitizerOutput" in text[:4096]:
        return "compute-sanitizer-xml", ()
    if "========= COMPUTE-SANITIZER" in text or "\n========= " in text or text.startswith("========= "):
        return "compute-sanitizer", ()
    if ("CUDA Exception:" in text or "received signal CUDA_EXCEPTION" in text
            or "[Current focus set to CUDA" in text or "Opening GPU coredump" in text):
        return "cuda-gdb", ()
    return "text", ()


def _looks_binary(text: str) -> bool:
    """Mostly control characters or undecodable bytes: not a log (a few are tolerated)."""
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\x1b\x0c"))
    return bad > max(8, len(text) // 10)


def iter_lines(stream: BinaryIO, stats: "ReadStats") -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded text without line ending) for every line.

    Streams: memory is bounded by MAX_LINE_BYTES whatever the file size.  Invalid UTF-8
    is replaced (and counted); over-long lines are cut (and counted).
    """
    lineno = 0
    while True:
        try:
            chunk = stream.readline(MAX_LINE_BYTES)
        except (OSError, EOFError, lzma.LZMAError) as exc:
            stats.problems.append(f"read error after line {lineno}: {exc}")
            return
        if not chunk:
            return
        lineno += 1
        if not chunk.endswith(b"\n") and len(chunk) >= MAX_LINE_BYTES:
            stats.long_lines += 1
            while True:  # discard the rest of the over-long line, in bounded pieces
                rest = stream.readline(MAX_LINE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    break
        text = chunk.decode("utf-8", errors="replace")
        if "\ufffd" in text:
            stats.invalid_utf8_lines += 1
        if "\x00" in text:
            text = text.replace("\x00", "")
            stats.nul_lines += 1
        yield lineno, text.rstrip("\r\n")


@dataclass
class ReadStats:
    long_lines: int = 0
    invalid_utf8_lines: int = 0
    nul_lines: int = 0
    problems: list[str] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.problems is None:
            self.problems = []

    def describe(self) -> list[str]:
        notes = list(self.problems)
        if self.long_lines:
            notes.append(f"{self.long_lines} line(s) longer than {MAX_LINE_BYTES} bytes were cut")
        if self.invalid_utf8_lines:
            notes.append(f"{self.invalid_utf8_lines} line(s) with invalid UTF-8 (replaced)")
        if self.nul_lines:
            notes.append(f"{self.nul_lines} line(s) with NUL bytes (removed)")
        return notes
