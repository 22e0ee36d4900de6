"""The bounded ELF reader both core dump readers share (``cpu.py``: Linux cores, ``gpu.py``:
CUDA GPU core dumps): a read-only view of one ELF image that refuses any read outside it,
the opener that copes with compressed inputs, and the one error they raise.

The ELF structures are decoded with pyelftools' struct definitions (``ELFStructs``), while
the walk over them is our own: pyelftools' ``ELFFile`` follows ``sh_link`` recursively
and reads whatever sizes a header claims, which a corrupt or hostile core must not be
able to turn into a hang, a memory blow-up or a traceback.  Every offset and size is
checked against the image before it is read, and no read is larger than
``MAX_SECTION_BYTES``.
"""

from __future__ import annotations

import io
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterator

from elftools.construct.lib.container import Container
from elftools.elf.structs import ELFStructs

from forensics.events import Event
from forensics.inputs.sources import Source
from forensics.parsers.base import ParsedSource

MAX_SECTION_BYTES = 64 << 20      # largest table / note segment / symbol table ever read
MAX_HEADERS = 1 << 20             # section or program headers looked at, at most
MAX_SPOOL = 4 << 30       # a compressed dump is decompressed into an unlinked temporary file, up to this
SPOOL_IN_MEMORY = 64 << 20        # decompressed inputs larger than this go to a temp file


# --- binary layouts, declared once --------------------------------------------------------

@dataclass(frozen=True)
class Field:
    """One field of a binary row: where it starts and its ``struct`` format ("Q", "3I": an
    array reads as a tuple).  ``since`` is the release that appended it: a row an older
    writer wrote ends before it, and the field reads as None."""

    name: str
    offset: int
    format: str
    since: str | None = None


@dataclass(frozen=True)
class Layout:
    """A binary row declared once with its field names, the way pyelftools' ``structs.py``
    declares ELF's and a C header lists them: read with ``unpack`` (a dict by field name),
    never with an inline format string and offsets.

    ``size`` is the smallest row a reader accepts: the fields without ``since`` must fit
    in it.  The fields of one ``since`` are read together, in one ``struct`` call (rows
    repeat by the million: one call per part of a row, not per field)."""

    name: str                       # the C struct's name (CudbgGridTableEntry, Elf64_Sym)
    size: int
    fields: tuple[Field, ...]
    little: bool = True
    _parts: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = []
        for since in dict.fromkeys(f.since for f in self.fields):
            members = sorted((f for f in self.fields if f.since == since), key=lambda f: f.offset)
            start, fmt, names = members[0].offset, "", []
            at = start
            for f in members:
                if f.offset < at:
                    raise ValueError(f"{self.name}.{f.name} overlaps the field before it")
                fmt += f"{f.offset - at}x" if f.offset > at else ""
                one = struct.Struct("<" + f.format)
                fmt += f.format
                names.append((f.name, len(one.unpack(bytes(one.size)))))
                at = f.offset + one.size
            compiled = struct.Struct(("<" if self.little else ">") + fmt)
            parts.append((start, start + compiled.size, compiled, tuple(names)))
            if since is None and start + compiled.size > self.size:
                raise ValueError(f"{self.name}: its fields need {start + compiled.size} bytes, "
                                 f"more than its size {self.size}")
        object.__setattr__(self, "_parts", tuple(parts))

    def unpack(self, data: bytes, offset: int = 0, length: int | None = None) -> dict[str, Any]:
        """The fields of the row at ``offset`` of ``data`` (``length`` bytes long: by default
        to the end of ``data``); a field the row is too short to hold is None."""
        end = len(data) if length is None else offset + length
        out: dict[str, Any] = {}
        for start, stop, compiled, names in self._parts:
            if offset + stop > end:
                out.update((name, None) for name, _count in names)
                continue
            values = compiled.unpack_from(data, offset + start)
            at = 0
            for name, count in names:
                out[name] = values[at] if count == 1 else values[at:at + count]
                at += count
        return out

    def with_order(self, little: bool) -> "Layout":
        """The same layout in the other byte order (ELF structures come in both)."""
        return self if little == self.little else Layout(self.name, self.size, self.fields, little)


# ELF's symbol table entries (the System V ABI's Elf32_Sym / Elf64_Sym), read with these
# rather than pyelftools' per-symbol parser: a cubin of a big library holds 10^5 symbols.
ELF_SYMBOL = {
    32: Layout("Elf32_Sym", 16, (Field("st_name", 0, "I"), Field("st_value", 4, "I"), Field("st_size", 8, "I"),
                                 Field("st_info", 12, "B"), Field("st_other", 13, "B"), Field("st_shndx", 14, "H"))),
    64: Layout("Elf64_Sym", 24, (Field("st_name", 0, "I"), Field("st_info", 4, "B"), Field("st_other", 5, "B"),
                                 Field("st_shndx", 6, "H"), Field("st_value", 8, "Q"), Field("st_size", 16, "Q"))),
}
STT_FUNC = 2                        # st_info's low nibble: the symbol is a function


class CoreDumpError(Exception):
    """A core dump that cannot be read at all; the message is one plain sentence."""


@contextmanager
def open_seekable(source: Source) -> Iterator[tuple[BinaryIO, int]]:
    """``(stream, size)`` of a source's decompressed bytes, seekable.

    Plain files are opened as they are.  Compressed ones (``.nvcudmp.gz``, ``core.xz``)
    are decompressed into a spooled temporary file: in memory while small, on disk
    beyond ``SPOOL_IN_MEMORY``, so a multi-GB dump never has to fit in RAM.
    """
    if source.is_plain_file:
        if source.path is None:
            raise CoreDumpError("the core dump has neither a path nor data")
        with open(source.path, "rb") as fh:
            fh.seek(0, io.SEEK_END)
            size = fh.tell()
            fh.seek(0)
            yield fh, size
        return
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)
    try:
        with source.open_binary() as raw:
            try:
                while chunk := raw.read(1 << 20):
                    spool.write(chunk)
                    if spool.tell() > MAX_SPOOL:
                        raise CoreDumpError(f"decompresses past {MAX_SPOOL >> 30} GiB; decompress it and give "
                                            "forensics the file (read in place, never copied)")
            except (OSError, EOFError, ValueError) as exc:
                raise CoreDumpError(f"the compressed core dump could not be fully decompressed ({exc})") from exc
        size = spool.tell()
        spool.seek(0)
        yield spool, size
    finally:
        spool.close()


class ElfImage:
    """A read-only view of one ELF image inside a file, refusing any read outside it.

    ``base``/``limit`` let the same code read an embedded image (a cubin stored in a
    section of a GPU core dump) without copying it out.  Reads are capped by
    ``MAX_SECTION_BYTES``; every header field that points somewhere is checked first.
    """

    def __init__(self, stream: BinaryIO, size: int, base: int = 0, what: str = "file") -> None:
        self.stream, self.size, self.base, self.what = stream, size, base, what
        ident = self.read(0, 16, "ELF identification", exact=False)
        if len(ident) < 16 or not ident.startswith(b"\x7fELF"):
            if not ident:
                raise CoreDumpError(f"{what} is empty (0 bytes), not an ELF core dump")
            if ident.startswith(b"\x7fELF"[: len(ident)]) and len(ident) < 16:
                raise CoreDumpError(f"{what} is cut inside the ELF header ({len(ident)} bytes): dump truncated")
            raise CoreDumpError(f"{what} is not an ELF file (no \\x7fELF magic)")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise CoreDumpError(f"{what} has an invalid ELF class or byte order")
        self.elfclass = 32 if ident[4] == 1 else 64
        self.little = ident[5] == 1
        self.structs = ELFStructs(little_endian=self.little, elfclass=self.elfclass)
        self.structs.create_basic_structs()
        ehsize = self.structs.Elf_Ehdr.sizeof()
        raw = self.read(0, ehsize, "ELF header", exact=False)
        if len(raw) < ehsize:
            raise CoreDumpError(f"{what} is cut inside the ELF header: dump truncated "
                                f"({len(raw)} of {ehsize} bytes)")
        self.header: Container = self.structs.Elf_Ehdr.parse(raw)
        self.structs.create_advanced_structs(self.header["e_type"], self.header["e_machine"],
                                             self.header["e_ident"]["EI_OSABI"])
        self.osabi = ident[7]
        self.e_machine_raw = int.from_bytes(raw[18:20], "little" if self.little else "big")
        self.e_type_raw = int.from_bytes(raw[16:18], "little" if self.little else "big")
        self._shdrs: list[Container] | None = None
        self._names: dict[int, str] = {}

    # raw access ------------------------------------------------------------------------
    def fits(self, offset: int, length: int) -> bool:
        return 0 <= offset and 0 <= length and offset + length <= self.size

    def read(self, offset: int, length: int, what: str, exact: bool = True,
             cap: int = MAX_SECTION_BYTES) -> bytes:
        """``length`` bytes at ``offset`` of the image; CoreDumpError when out of bounds."""
        if offset < 0 or length < 0:
            raise CoreDumpError(f"{what} has a negative offset or size")
        if length > cap:
            raise CoreDumpError(f"{what} claims {length} bytes, over the {cap >> 20} MiB reading limit")
        if exact and offset + length > self.size:
            raise CoreDumpError(f"{what} extends past end of file ({offset + length} > {self.size} bytes): "
                                "dump truncated")
        length = max(0, min(length, self.size - offset))
        self.stream.seek(self.base + offset)
        data = self.stream.read(length)
        if exact and len(data) != length:
            raise CoreDumpError(f"{what} could not be read in full: dump truncated")
        return data

    # sections --------------------------------------------------------------------------
    def section_headers(self, problems: list[str]) -> list[Container]:
        """All section headers that lie inside the image (cut or corrupt ones: a problem)."""
        if self._shdrs is not None:
            return self._shdrs
        h = self.header
        shoff, shnum, shentsize = h["e_shoff"], h["e_shnum"], h["e_shentsize"]
        self._shdrs = []
        if shoff == 0:
            return self._shdrs
        size = self.structs.Elf_Shdr.sizeof()
        if shentsize < size:
            problems.append(f"{self.what}: section header size {shentsize} is smaller than {size}: "
                            "section headers ignored")
            return self._shdrs
        if shnum == 0 and self.fits(shoff, size):   # extended numbering: count in section 0
            shnum = self.structs.Elf_Shdr.parse(self.read(shoff, size, "section header 0"))["sh_size"]
        if shnum > MAX_HEADERS:
            problems.append(f"{self.what}: {shnum} section headers claimed; only the first {MAX_HEADERS} read")
            shnum = MAX_HEADERS
        if not self.fits(shoff, shentsize):
            problems.append(f"{self.what}: section header table starts past end of file "
                            f"(offset {shoff}, file {self.size} bytes): dump truncated")
            return self._shdrs
        available = (self.size - shoff) // shentsize
        if available < shnum:
            problems.append(f"{self.what}: section header table extends past end of file "
                            f"({available} of {shnum} headers present): dump truncated")
            shnum = available
        table = self.read(shoff, shnum * shentsize, "section header table", cap=MAX_HEADERS * 128)
        self._shdrs = [self.structs.Elf_Shdr.parse(table[i * shentsize:i * shentsize + size])
                       for i in range(shnum)]
        return self._shdrs

    def section_name(self, index: int, problems: list[str]) -> str:
        """A section's name from ``.shstrtab``; "" when it cannot be read."""
        if index in self._names:
            return self._names[index]
        shdrs = self.section_headers(problems)
        name = ""
        strndx = self.header["e_shstrndx"]
        if strndx == 0xFFFF and shdrs:     # SHN_XINDEX: real index in section 0's sh_link
            strndx = shdrs[0]["sh_link"]
        if 0 <= index < len(shdrs) and 0 < strndx < len(shdrs):
            strtab = shdrs[strndx]
            off = strtab["sh_offset"] + shdrs[index]["sh_name"]
            end = strtab["sh_offset"] + strtab["sh_size"]
            if shdrs[index]["sh_name"] < strtab["sh_size"] and self.fits(off, 0):
                chunk = self.read(off, min(256, end - off, max(0, self.size - off)), "section name",
                                  exact=False)
                name = chunk.split(b"\0", 1)[0].decode("utf-8", "replace")
        self._names[index] = name
        return name

    def section_data(self, shdr: Container, what: str, cap: int = MAX_SECTION_BYTES) -> bytes:
        """A section's bytes; CoreDumpError (one sentence) if it is cut or over the cap."""
        if shdr["sh_type"] == "SHT_NOBITS":
            return b""
        return self.read(shdr["sh_offset"], shdr["sh_size"], f"section {what}", cap=cap)

    def string_at(self, table: bytes, offset: int) -> str | None:
        if not 0 <= offset < len(table):
            return None
        return table[offset:table.find(b"\0", offset) if b"\0" in table[offset:] else len(table)] \
            .decode("utf-8", "replace")

    # segments --------------------------------------------------------------------------
    def program_headers(self, problems: list[str]) -> list[Container]:
        h = self.header
        phoff, phnum, phentsize = h["e_phoff"], h["e_phnum"], h["e_phentsize"]
        size = self.structs.Elf_Phdr.sizeof()
        if phoff == 0 or phnum == 0:
            return []
        if phentsize < size:
            problems.append(f"{self.what}: program header size {phentsize} is smaller than {size}: "
                            "program headers ignored")
            return []
        if phnum == 0xFFFF:  # PN_XNUM: the count lives in section 0's sh_info
            shdrs = self.section_headers(problems)
            phnum = shdrs[0]["sh_info"] if shdrs else 0
        phnum = min(phnum, MAX_HEADERS)
        available = max(0, (self.size - phoff) // phentsize) if phoff <= self.size else 0
        if available < phnum:
            problems.append(f"{self.what}: program header table extends past end of file "
                            f"({available} of {phnum} headers present): dump truncated")
            phnum = available
        if phnum == 0:
            return []
        table = self.read(phoff, phnum * phentsize, "program header table", cap=MAX_HEADERS * 64)
        return [self.structs.Elf_Phdr.parse(table[i * phentsize:i * phentsize + size]) for i in range(phnum)]


def guarded(what: str):
    """Turn any exception a decoder raises on malformed bytes into CoreDumpError.

    pyelftools/construct raise a zoo of exception types on bad input; the callers promise
    one clear sentence instead of a traceback.
    """
    def wrap(fn):
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except CoreDumpError:
                raise
            except RecursionError as exc:
                raise CoreDumpError(f"{what}: structure loops back on itself") from exc
            except (MemoryError, OverflowError) as exc:
                raise CoreDumpError(f"{what}: a size field is absurdly large") from exc
            except Exception as exc:  # noqa: BLE001 - malformed input, any decoder error
                raise CoreDumpError(f"{what}: malformed ELF data ({type(exc).__name__}: {exc})") from exc
        inner.__doc__ = fn.__doc__
        inner.__name__ = fn.__name__
        return inner
    return wrap


def parse_core_source(source: Source, kind: str,
                      read: Callable[[BinaryIO, int, str], Any],
                      events: Callable[[Any, str], list[Event]]) -> ParsedSource:
    """The shared shell of both core parsers: open, decode, turn failures into problems."""
    out = ParsedSource(source.relpath, kind, lines=None, unparsed_lines=None)
    try:
        with open_seekable(source) as (stream, size):
            dump = read(stream, size, source.relpath)
    except CoreDumpError as exc:
        msg = str(exc)
        out.problems.append(msg if msg.startswith(source.relpath) else f"{source.relpath}: {msg}")
        return out
    except OSError as exc:
        out.problems.append(f"{source.relpath}: cannot read the core dump ({exc.strerror or exc})")
        return out
    out.problems.extend(dump.problems)
    out.events.extend(events(dump, source.relpath))
    return out
