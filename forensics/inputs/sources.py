"""Sources: find the inputs, tell binary formats from text, open each one safely.

Nothing here interprets a line: text is recognised line by line later (parsers/). A
file that cannot be read becomes a ``Source`` with problems; it never stops the
analysis of the others.  Everything read is bounded: compressed streams by output size
and ratio, files by the size seen when they were listed (a log still being written is
read to that size), folders by depth and by the number of readable files.
"""

from __future__ import annotations

import bz2
import dataclasses
import functools
import io
import lzma
import os
import stat
import sys
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Callable

from forensics import inert
from forensics.inputs import progress

SNIFF_BYTES = 64 * 1024
STDIN_NAME = "<stdin>"
MAX_DECOMPRESSED = 16 << 30   # bytes out of one compressed file
MAX_RATIO = 1000              # decompressed / compressed, past the first 64 MiB
RATIO_FREE = 64 << 20

EM_CUDA = 190
ET_CORE = 4

# name, magic, opener
_COMPRESSED = (
    ("gzip", b"\x1f\x8b"),
    ("bzip2", b"BZh"),
    ("xz", b"\xfd7zXZ\x00"),
)


class InputLimitError(OSError):
    """Reading an input went past a safety cap (a decompression bomb)."""


class OutputIsInput(ValueError):
    """A file the command is to write is one of its inputs: writing it would destroy
    the evidence (``forensics analyze . -o server.log`` from inside the folder)."""


def file_identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file at ``path``, through links (a symbolic link is the
    file it points at, a hard link is the same inode); None when there is none yet."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def display_name(name: str) -> str:
    """A file name as text that every output can carry and no two names share (the rule
    is forensics.inert.name: undecodable bytes, control and invisible characters and
    backslashes escaped)."""
    return inert.name(name)


@dataclass(frozen=True)
class Source:
    """One input: where it is, what it is, and what went wrong opening it."""

    relpath: str                 # for display: relative to the folder given, always valid text
    path: Path | None            # None for stdin and archive members
    kind: str                    # text | compute-sanitizer-xml | cuda-coredump | elf-core | flight-recorder | vllm-capture |
                                 # archive-tar | archive-zip | unknown
    size: int | None = None      # bytes as listed (compressed size for compressed files)
    mtime: datetime | None = None
    compression: str | None = None
    problems: tuple[str, ...] = ()
    opener: Callable[[], BinaryIO] | None = None   # streams (stdin, archive members): read once
    forced: str | None = None    # the --kind the user forced, if any
    in_bulk: bool = False        # one of many files of a large bundle: the fast path reads it
    identity: tuple[int, int] | None = None   # (st_dev, st_ino) of a file on disk, as listed

    @property
    def is_plain_file(self) -> bool:
        """A file on disk read as it is (seekable; no decompression, no archive)."""
        return self.path is not None and self.opener is None and not self.compression

    @property
    def readable(self) -> bool:
        return self.kind != "unknown"

    def open_binary(self) -> BinaryIO:
        """The bytes of the input, decompressed, capped."""
        if self.opener is not None:
            raw: BinaryIO = self.opener()
            if progress.meter() is not None:
                raw = io.BufferedReader(progress.Counted(raw), buffer_size=1 << 16)
        elif self.path is None:
            raw = io.BytesIO(b"")      # neither a file nor a stream: nothing to read
        else:
            # buffered: the parsers read lines and peek at the head
            raw = io.BufferedReader(Capped(open(self.path, "rb"),  # noqa: SIM115
                                           self.size if self.size is not None else MAX_DECOMPRESSED,
                                           f"{self.relpath}", hard=False), buffer_size=1 << 20)
        if self.compression:
            return decompressing(raw, self.compression, self.relpath)
        return raw


class Capped(io.RawIOBase):
    """A stream that stops at ``limit`` bytes: ``hard`` raises past it (a bomb), else it
    just ends there (a file that grew after it was listed)."""

    def __init__(self, inner: BinaryIO, limit: int, what: str, hard: bool = True, head: bytes = b"") -> None:
        self._inner, self._limit, self._what, self._hard = inner, limit, what, hard
        self._head = head
        self.seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = len(buffer)
        if not self._hard:
            want = min(want, self._limit - self.seen)
            if want <= 0:
                return 0
        if self._head:
            data, self._head = self._head[:want], self._head[want:]
            n = len(data)
            buffer[:n] = data
        elif hasattr(self._inner, "readinto"):
            n = self._inner.readinto(memoryview(buffer)[:want]) or 0   # no copy through a new bytes
        else:
            data = self._inner.read(want)
            n = len(data)
            buffer[:n] = data
        self.seen += n
        progress.read(n)
        if self._hard and self.seen > self._limit:
            raise InputLimitError(f"{self._what} expands past {self._limit:,} bytes; the rest is not read")
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


@functools.lru_cache(maxsize=None)
def _isal():
    """ISA-L's zlib interface (the ``isal`` package: 3-4x faster than zlib, the same
    calls), or None when it is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


def _isal_errors() -> tuple:
    return (_isal().error,) if _isal() is not None else ()


def gzip_reader_name() -> str:
    return "ISA-L (isal)" if _isal() is not None else "zlib"


class _Decompressor(io.RawIOBase):
    """A decompressing stream with an output cap and a ratio cap (a bomb is a problem
    line, never a multi-GB spool), bounded output per call, concatenated members
    (rotated logs) read in turn, and a cut stream read up to the cut."""

    def __init__(self, raw: BinaryIO, method: str, what: str) -> None:
        self._raw, self._method, self._what = raw, method, what
        self._dec = self._new()
        self._input = b""
        self._read_in = 0
        self.out = 0
        self._done = False

    def _new(self):
        if self._method == "gzip":
            inflate = _isal() or zlib
            return inflate.decompressobj(16 + inflate.MAX_WBITS)
        if self._method == "bzip2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._done:
            if not self._input:
                if self._method == "gzip" or self._dec.eof or self._dec.needs_input:
                    chunk = self._raw.read(1 << 16)
                    if not chunk:
                        self._done = True
                        if not self._dec.eof and self._read_in:
                            raise EOFError(f"{self._what}: the compressed stream is cut short; "
                                           "the part before the cut was read")
                        break
                    self._read_in += len(chunk)
                    self._input = chunk
            if self._dec.eof:
                if not self._input.strip(b"\x00"):
                    self._input = b""             # padding after the last member
                    continue
                self._dec = self._new()           # another member follows (rotated logs)
            data, self._input = self._input, b""
            try:
                out = self._dec.decompress(data, len(buffer))
            except _isal_errors() as exc:
                # ISA-L's error is not zlib.error: the readers know one kind
                raise zlib.error(f"{self._what}: {exc}") from exc
            if self._dec.eof:
                # zlib keeps the bytes after the end in both unused_data and unconsumed_tail
                self._input = self._dec.unused_data
            elif self._method == "gzip":
                self._input = self._dec.unconsumed_tail
            if out:
                n = len(out)
                buffer[:n] = out
                self.out += n
                self._check()
                return n
        return 0

    def _check(self) -> None:
        if self.out > MAX_DECOMPRESSED:
            raise InputLimitError(f"{self._what}: decompresses past {MAX_DECOMPRESSED:,} bytes; the rest is not read")
        if self.out > RATIO_FREE and self.out > MAX_RATIO * max(self._read_in, 1):
            raise InputLimitError(f"{self._what}: decompresses more than {MAX_RATIO}x its size "
                                  "(a decompression bomb); the rest is not read")

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def decompressing(raw: BinaryIO, method: str, what: str) -> BinaryIO:
    return io.BufferedReader(_Decompressor(raw, method, what), buffer_size=1 << 20)


# --- discovery -------------------------------------------------------------------------

@dataclass
class Walk:
    """What discovery saw besides the inputs themselves (for the report and exit codes)."""

    given: int = 0
    paths: tuple[str, ...] = ()     # the inputs as given ("-": stdin), for the commands a report suggests
    files_seen: int = 0
    readable: int = 0
    empty: int = 0
    skipped_links: int = 0
    # files the command will write ((st_dev, st_ino) -> the name given): an input found
    # to be one of them stops discovery (OutputIsInput) before anything is written
    outputs: dict[tuple[int, int], str] = field(default_factory=dict)

    def protect(self, *paths: str | None) -> None:
        """Refuse, while discovering, any input that is one of ``paths`` (None: skipped)."""
        for path in paths:
            identity = file_identity(path) if path else None
            if identity is not None:
                self.outputs[identity] = str(path)

    def check(self, source: Source) -> None:
        output = self.outputs.get(source.identity) if source.identity is not None else None
        if output is not None:
            raise OutputIsInput(f"refusing to write {display_name(output)}: it is the input {source.relpath} (the "
                                "same file, or a link to it), and writing it would destroy the evidence; give an "
                                "output path outside the inputs")


class Prefixed(io.RawIOBase):
    """Bytes already read (``head``: a sniffed head, a held prefix), then the rest of
    ``rest`` (None: nothing more); ``error``, when given, is raised once the head is
    used up - a read error that cut the prefix short, reported after what came before."""

    def __init__(self, head: bytes, rest: BinaryIO | None, error: Exception | None = None) -> None:
        self._head, self._rest, self._error = memoryview(head), rest, error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._rest is None:
            return 0
        data = self._rest.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def stdin_source(stream: BinaryIO | None = None) -> Source:
    raw = stream if stream is not None else sys.stdin.buffer
    head = b""
    while len(head) < SNIFF_BYTES:
        chunk = raw.read(SNIFF_BYTES - len(head)) if not hasattr(raw, "read1") else raw.read1(SNIFF_BYTES - len(head))
        if not chunk:
            break
        head += chunk
    used = {"done": False}

    def opener() -> BinaryIO:
        if used["done"]:
            raise OSError("stdin can be read only once")
        used["done"] = True
        return io.BufferedReader(Prefixed(head, raw), buffer_size=1 << 20)

    source = classify(STDIN_NAME, None, head, size=None, mtime=None, opener=opener)
    return dataclasses.replace(source, identity=_stream_identity(raw))


def _stream_identity(stream) -> tuple[int, int] | None:
    """(st_dev, st_ino) of a stream that is a file on disk (``< server.log``), else None
    (a pipe, a terminal, an in-memory stream): ``-o server.log`` would destroy it too."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def sniff(path: Path, relpath: str) -> Source:
    """Open ``path`` just far enough to know its format."""
    try:
        if path.is_symlink() and not path.exists():
            return Source(relpath, path, "unknown", problems=(f"{relpath}: broken symbolic link",))
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            return Source(relpath, path, "unknown",
                          problems=(f"{relpath}: not a regular file (device, socket or pipe); skipped",))
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except PermissionError:
        return Source(relpath, path, "unknown",
                      problems=(f"{relpath}: permission denied; run with read access to include it",))
    except OSError as exc:
        return Source(relpath, path, "unknown", problems=(f"{relpath}: cannot read ({exc.strerror or exc})",))
    source = classify(relpath, path, head, size=st.st_size, mtime=datetime.fromtimestamp(st.st_mtime))
    return dataclasses.replace(source, identity=(st.st_dev, st.st_ino))


def classify(relpath: str, path: Path | None, head: bytes, *, size: int | None,
             mtime: datetime | None, opener: Callable[[], BinaryIO] | None = None) -> Source:
    """A source from its first bytes (``opener``: how to read a stream)."""
    if size == 0 or not head:
        # empty: text with nothing in it - but still openable (an archive member or an
        # in-memory stream has no path: without its opener it could not be read at all)
        return Source(relpath, path, "text", 0 if size is None else size, mtime, opener=opener)
    compression = None
    for name, magic in _COMPRESSED:
        if head.startswith(magic):
            compression = name
            head = _peek(head, path, name, opener is not None, size)
            if head is None:
                return Source(relpath, path, "unknown", size, mtime, name,
                              (f"{relpath}: corrupt {name} stream; skipped",), opener)
            break
    kind, problems = kind_of(relpath, head)
    return Source(relpath, path, kind, size, mtime, compression, problems, opener)


def _peek(head: bytes, path: Path | None, method: str, is_stream: bool, size: int | None) -> bytes | None:
    """Up to SNIFF_BYTES decompressed from the start of a (possibly cut) stream."""
    raw: BinaryIO
    if is_stream or path is None:
        raw = io.BytesIO(head)
    else:
        raw = open(path, "rb")  # noqa: SIM115
    out = bytearray()
    try:
        with decompressing(raw, method, "sniff") as stream:
            while len(out) < SNIFF_BYTES:
                chunk = stream.read(4096)
                if not chunk:
                    break
                out += chunk
    except (EOFError, InputLimitError):
        pass        # only the start of the stream: what decoded so far is enough
    except (OSError, lzma.LZMAError, zlib.error, ValueError):
        return None if not out else bytes(out[:SNIFF_BYTES])
    return bytes(out[:SNIFF_BYTES])


def kind_of(relpath: str, head: bytes) -> tuple[str, tuple[str, ...]]:
    """Binary formats by their magic; all text is "text" (formats inside text are
    recognised per line and block by the parsers)."""
    if not head:
        return "text", ()
    if head.startswith(b"\x7fELF"):
        if len(head) < 20:
            return "unknown", (f"{relpath}: truncated ELF header",)
        order = "little" if head[5] != 2 else "big"
        e_type = int.from_bytes(head[16:18], order)
        e_machine = int.from_bytes(head[18:20], order)
        if e_type == ET_CORE and e_machine == EM_CUDA:
            return "cuda-coredump", ()
        if e_type == ET_CORE:
            return "elf-core", ()
        return "unknown", (f"{relpath}: ELF file that is not a core dump (type {e_type}); skipped",)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "archive-zip", ()
    if len(head) > 262 and head[257:262] == b"ustar":
        return "archive-tar", ()
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "unknown", (f"{relpath}: zstd-compressed; decompress it first (zstd -d) - "
                           "zstd reading is not supported yet",)
    for magic, what in _IMAGES:
        if head.startswith(magic):
            return "unknown", (f"{relpath}: {what}, not a log; skipped",)
    if capture_snapshot(head):
        return "vllm-capture", ()
    if flight_recorder_dump(head):
        return "flight-recorder", ()
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        # SGLang's --crash-dump-folder and other tools write pickles: loading one runs
        # whatever code it names, so it is never loaded
        return "unknown", (f"{relpath}: a Python pickle (SGLang's crash dump of the last requests is one); never "
                           "loaded, since unpickling runs code - inspect it in a sandbox if you trust its origin",)
    from forensics.inputs.reader import detect_encoding
    encoding = detect_encoding(head)
    text = head.decode(encoding, errors="replace") if encoding != "utf-8" else head.decode("utf-8", errors="replace")
    if _looks_binary(text):
        return "unknown", (f"{relpath}: binary data of unknown format; skipped",)
    start = text.lstrip("\ufeff \t\r\n")[:4096]
    if start.startswith("<?xml") and "<ComputeSanitizerOutput" in start or start.startswith("<ComputeSanitizerOutput"):
        return "compute-sanitizer-xml", ()
    return "text", ()


def capture_snapshot(head: bytes) -> bool:
    """A snapshot of forensics' own vLLM capture plugin (forensics/capture/): a JSON
    object whose first key is the schema marker of data/capture.toml [snapshot]."""
    from forensics import knowledge
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start[:1] != b"{":
        return False
    marker = knowledge.load("capture")["snapshot"]["schema"]
    return start[1:64].lstrip().startswith(b'"schema"') and f'"{marker}"'.encode() in start[:96]


def flight_recorder_dump(head: bytes) -> bool:
    """PyTorch's Flight Recorder dump, by its first keys (data/flightrec.toml [detect]):
    the pickle starts with its version key and names the dump's other keys soon after
    (it is read by a reader that runs nothing: forensics/parsers/flightrec/); the JSON
    form is an object whose keys come sorted, the entries' keys first when there are
    entries.  Any other pickle stays unread (below)."""
    from forensics import knowledge
    detect = knowledge.load("flightrec")["detect"]
    if head[:1] == b"\x80":
        return detect["version_key"].encode() in head[:64] and any(k.encode() in head for k in detect["keys"])
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if start[:1] != b"{":
        return False
    def quoted(keys):
        return [f'"{k}"'.encode() for k in keys]
    return any(k in start for k in quoted(detect["json_any"])) or all(k in start for k in quoted(detect["json_keys"]))


_IMAGES = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
           (b"%PDF", "a PDF document"), (b"RIFF", "a media file"))


def _looks_binary(text: str) -> bool:
    """Mostly control characters or undecodable bytes: not a log (a few are tolerated)."""
    sample = text[:16384]
    bad = sum(1 for ch in sample if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\x1b\x0c"))
    return bad > max(8, len(sample) // 10)
