"""Linux CPU core dumps (ELF ``ET_CORE``): who died, of which signal, running what.

A host core of a vLLM worker says which thread took which signal (SIGSEGV in a library,
SIGABRT after the CUDA driver wrote a GPU core dump), the command line, the faulting
address, and which CUDA / NCCL / torch / FlashInfer / vLLM shared objects were mapped -
with their versions when the paths show them.

Cores of a GPU server are often many GB.  Only the ``PT_NOTE`` segments are read, never a
``PT_LOAD`` one, and every offset and size is checked against the file before it is
read.  The ELF structures are decoded with pyelftools' struct definitions
(``ELFStructs``), while the walk over them is our own: pyelftools' ``ELFFile`` follows
``sh_link`` recursively and reads whatever sizes a header claims, which a corrupt or
hostile core must not be able to turn into a hang, a memory blow-up or a traceback.

This module also holds what the GPU core dump reader (``nvcudmp.py``) shares with it:
``CoreDumpError``, the bounded ``ElfImage`` view and the opener that copes with
compressed inputs.
"""

from __future__ import annotations

import io
import re
import struct
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator

from elftools.construct.core import ConstructError
from elftools.construct.lib.container import Container
from elftools.elf.structs import ELFStructs

from forensics.events import Event, Kind, Severity, freeze
from forensics.parsers.base import ParsedSource
from forensics.inputs.sources import Source

MAX_SECTION_BYTES = 64 << 20      # largest table / note segment / symbol table ever read
MAX_HEADERS = 1 << 20             # section or program headers looked at, at most
MAX_NOTES = 100_000               # notes decoded per core, at most
MAX_FILE_ENTRIES = 200_000        # NT_FILE mappings decoded, at most
MAX_THREADS_LISTED = 64           # threads kept in the dataclass (the count is exact)
MAX_SPOOL = 4 << 30       # a compressed dump is decompressed into an unlinked temporary file, up to this
SPOOL_IN_MEMORY = 64 << 20        # decompressed inputs larger than this go to a temp file


class CoreDumpError(Exception):
    """A core dump that cannot be read at all; the message is one plain sentence."""


# --- bounded ELF access (shared with nvcudmp.py) ------------------------------------------

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


# --- Linux CPU cores ----------------------------------------------------------------------

# Linux signal numbers (x86-64 / arm64 generic ABI); fixed by the kernel ABI, not by the
# host running the analysis (which may be a Mac with other numbers).
LINUX_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
                 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
                 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
                 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU",
                 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF",
                 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS"}
# Signals whose si_addr is the faulting address (others carry a sender pid there).
_FAULT_SIGNALS = {4, 7, 8, 11}

NT_PRSTATUS, NT_PRPSINFO, NT_AUXV = 1, 3, 6
NT_SIGINFO, NT_FILE = 0x53494749, 0x46494C45
# x86-64 elf_prstatus: pr_pid @32, pr_reg @112; rip = reg 16, rsp = reg 19.
# The core notes' binary layouts read here, declared once with their field names:
# (offset, struct format) per ELF class.  struct elf_prstatus (the kernel's
# include/uapi/linux/elfcore.h: pr_info, pr_cursig, ... pr_pid, ... pr_reg) and siginfo_t
# (si_signo, si_errno, si_code, then a union whose first member is si_pid for a sent
# signal and si_addr for a fault).  pyelftools declares elf_prpsinfo and NT_FILE itself.
NOTE_LAYOUTS = {
    64: {"pr_cursig": (12, "h"), "pr_pid": (32, "i"), "pr_reg": (112, "27Q"),
         "si_signo": (0, "i"), "si_errno": (4, "i"), "si_code": (8, "i"), "si_pid": (16, "i"), "si_addr": (16, "Q")},
    32: {"pr_cursig": (12, "h"), "pr_pid": (24, "i"),
         "si_signo": (0, "i"), "si_errno": (4, "i"), "si_code": (8, "i"), "si_pid": (12, "i"), "si_addr": (12, "I")},
}
# x86-64 user_regs_struct: the registers of pr_reg shown for a thread
_X86_64_REGS = {"rip": 16, "rsp": 19}


def note_field(desc: bytes, elfclass: int, little: bool, name: str):
    """One field of a core note by its declared layout; ValueError when the note is too
    short to hold it (a cut or corrupt note)."""
    offset, fmt = NOTE_LAYOUTS[elfclass][name]
    fmt = ("<" if little else ">") + fmt
    if offset + struct.calcsize(fmt) > len(desc):
        raise ValueError(f"{name} needs {offset + struct.calcsize(fmt)} bytes, the note holds {len(desc)}")
    values = struct.unpack_from(fmt, desc, offset)
    return values if len(values) > 1 else values[0]
_AUXV_NAMES = {3: "AT_PHDR", 7: "AT_BASE", 9: "AT_ENTRY", 15: "AT_PLATFORM", 31: "AT_EXECFN"}

# Libraries whose presence and version matter for a GPU inference crash: key -> pattern on
# the mapped file's base name or path.
KEY_LIBRARIES: tuple[tuple[str, re.Pattern], ...] = (
    ("libcuda", re.compile(r"/libcuda\.so")),
    ("libcudart", re.compile(r"/libcudart\.so")),
    ("libnccl", re.compile(r"/libnccl\.so")),
    ("libtorch", re.compile(r"/libtorch[_a-z]*\.so|/libc10_cuda\.so|/libc10\.so")),
    ("flashinfer", re.compile(r"flashinfer", re.I)),
    ("vllm", re.compile(r"/vllm[/_-]", re.I)),
)
_SO_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)*)$")
# A path component that is a version (``0.2.5``) or a package directory with one
# (``torch-2.5.1``, ``vllm-0.10.1+cu128.dist-info``, ``cuda-12.8``).
_COMPONENT_VERSION = re.compile(r"^(?:[A-Za-z][A-Za-z_]*[-_])?(\d+\.\d+(?:\.\d+)*(?:[+][0-9A-Za-z.]+)?)"
                                r"(?:\.dist-info|\.egg-info|\.egg)?$")

@dataclass(frozen=True)
class CpuThread:
    """One thread of the dumped process, from its NT_PRSTATUS note."""

    tid: int
    signal: int            # pr_cursig: the signal this thread was stopped with
    rip: int | None
    rsp: int | None


@dataclass(frozen=True)
class MappedLibrary:
    """A key shared object the process had mapped (from NT_FILE)."""

    key: str               # libcuda | libnccl | libtorch | flashinfer | vllm | libcudart
    path: str
    version: str | None    # from the path when it shows one (libcuda.so.580.159.04)


@dataclass(frozen=True)
class CpuCoreDump:
    """What a Linux core says about the process that died."""

    machine: str
    pid: int | None
    ppid: int | None
    command: str | None            # pr_fname, 15 characters at most
    args: str | None               # pr_psargs, the first 80 bytes of the command line
    signal: int | None
    signal_name: str | None
    signal_code: int | None
    fault_address: int | None      # si_addr, for SIGSEGV / SIGBUS / SIGILL / SIGFPE
    sender_pid: int | None         # for signals sent by a process (kill, abort's raise)
    thread_count: int
    threads: tuple[CpuThread, ...]
    mapped_file_count: int
    libraries: tuple[MappedLibrary, ...]
    rip_file: str | None           # the mapped file the crashing thread's RIP lies in
    auxv: tuple[tuple[str, int], ...]
    problems: tuple[str, ...] = ()

    @property
    def crashing_thread(self) -> CpuThread | None:
        """The first NT_PRSTATUS thread: the kernel writes the signalled thread first."""
        return self.threads[0] if self.threads else None


def read_cpu_core(stream: BinaryIO, size: int, name: str = "core") -> CpuCoreDump:
    """Decode a Linux core's notes.  CoreDumpError when nothing of it can be read."""
    return _read_cpu_core(stream, size, name)


@guarded("CPU core dump")
def _read_cpu_core(stream: BinaryIO, size: int, name: str) -> CpuCoreDump:
    elf = ElfImage(stream, size, what=name)
    if elf.e_type_raw != 4:
        raise CoreDumpError(f"{name} is an ELF file of type {elf.e_type_raw}, not a core dump")
    problems: list[str] = []
    notes = list(_iter_notes(elf, problems))
    if not notes:
        if not problems:
            problems.append("no PT_NOTE segment: the core carries no process information")
        raise CoreDumpError(f"{name}: no readable notes ({problems[0]})")
    state: dict[str, Any] = {"threads": [], "thread_count": 0, "files": [], "file_count": 0, "auxv": []}
    for ntype, owner, desc in notes:
        try:
            _note_into(elf, ntype, owner, desc, state, problems)
        except (struct.error, ValueError, IndexError, ConstructError) as exc:
            # one bad note costs that note only (a construct layout that runs out of
            # bytes raises its own FieldError: the rest of the core is still read)
            problems.append(f"note {_note_name(ntype)} is malformed ({exc}); skipped")
    threads = state["threads"]
    signal = state.get("si_signo") or (threads[0].signal if threads else None)
    fault_addr = state.get("si_addr") if signal in _FAULT_SIGNALS else None
    return CpuCoreDump(
        machine=str(elf.header["e_machine"]),
        pid=state.get("pid") or (threads[0].tid if threads else None),
        ppid=state.get("ppid"),
        command=state.get("fname"),
        args=state.get("psargs"),
        signal=signal or None,
        signal_name=LINUX_SIGNALS.get(signal) if signal else None,
        signal_code=state.get("si_code"),
        fault_address=fault_addr,
        sender_pid=state.get("si_pid") if signal is not None and signal not in _FAULT_SIGNALS else None,
        thread_count=state["thread_count"],
        threads=tuple(threads[:MAX_THREADS_LISTED]),
        mapped_file_count=state["file_count"],
        libraries=tuple(_key_libraries([path for _s, _e, path in state["files"]])),
        rip_file=_file_at(state["files"], threads[0].rip if threads else None),
        auxv=tuple(state["auxv"]),
        problems=tuple(problems),
    )


def _iter_notes(elf: ElfImage, problems: list[str]) -> Iterator[tuple[int, str, bytes]]:
    """(type, owner name, descriptor bytes) of every note in every PT_NOTE segment."""
    count = 0
    nhdr = 12
    for ph in elf.program_headers(problems):
        if ph["p_type"] != "PT_NOTE":
            continue
        off, filesz = ph["p_offset"], ph["p_filesz"]
        if not elf.fits(off, 0):
            problems.append(f"PT_NOTE segment starts past end of file (offset {off}): dump truncated")
            continue
        if off + filesz > elf.size:
            problems.append(f"PT_NOTE segment extends past end of file ({off + filesz} > {elf.size} "
                            "bytes): dump truncated, notes read as far as they go")
            filesz = elf.size - off
        if filesz > MAX_SECTION_BYTES:
            problems.append(f"PT_NOTE segment of {filesz} bytes: only the first "
                            f"{MAX_SECTION_BYTES >> 20} MiB read")
            filesz = MAX_SECTION_BYTES
        data = elf.read(off, filesz, "PT_NOTE segment")
        fmt = "<3I" if elf.little else ">3I"
        pos = 0
        while pos + nhdr <= len(data):
            namesz, descsz, ntype = struct.unpack_from(fmt, data, pos)
            name_end = pos + nhdr + namesz
            desc_at = pos + nhdr + ((namesz + 3) & ~3)
            if name_end > len(data) or desc_at + descsz > len(data):
                problems.append(f"note at segment offset {pos} is cut short: dump truncated or corrupt")
                break
            owner = data[pos + nhdr:name_end].split(b"\0", 1)[0].decode("ascii", "replace")
            yield ntype, owner, data[desc_at:desc_at + descsz]
            count += 1
            if count >= MAX_NOTES:
                problems.append(f"more than {MAX_NOTES} notes; the rest ignored")
                return
            pos = desc_at + ((descsz + 3) & ~3)


def _note_name(ntype: int) -> str:
    return {NT_PRSTATUS: "NT_PRSTATUS", NT_PRPSINFO: "NT_PRPSINFO", NT_AUXV: "NT_AUXV",
            NT_SIGINFO: "NT_SIGINFO", NT_FILE: "NT_FILE"}.get(ntype, hex(ntype))


def _note_into(elf: ElfImage, ntype: int, owner: str, desc: bytes, state: dict, problems: list[str]) -> None:
    if owner != "CORE":
        return
    e = "<" if elf.little else ">"
    word = "Q" if elf.elfclass == 64 else "I"
    wsize = struct.calcsize(word)
    if ntype == NT_PRSTATUS:
        state["thread_count"] += 1
        if len(state["threads"]) >= MAX_THREADS_LISTED:
            return
        cls, little = elf.elfclass, elf.little
        cursig = note_field(desc, cls, little, "pr_cursig")
        tid = note_field(desc, cls, little, "pr_pid")
        rip = rsp = None
        if cls == 64 and elf.header["e_machine"] == "EM_X86_64" and "pr_reg" in NOTE_LAYOUTS[cls]:
            try:
                regs = note_field(desc, cls, little, "pr_reg")
            except ValueError:
                regs = None                    # a short prstatus: the thread without registers
            if regs is not None:
                rip, rsp = regs[_X86_64_REGS["rip"]], regs[_X86_64_REGS["rsp"]]
        state["threads"].append(CpuThread(tid=tid, signal=cursig, rip=rip, rsp=rsp))
    elif ntype == NT_PRPSINFO:
        layout = elf.structs.Elf_Prpsinfo          # pyelftools' elf_prpsinfo, per class and byte order
        if len(desc) < layout.sizeof():
            raise ValueError(f"{len(desc)} bytes, elf_prpsinfo needs {layout.sizeof()}")
        info = layout.parse(desc)
        state["pid"] = info["pr_pid"]
        state["ppid"] = info["pr_ppid"]
        state["fname"] = _cstr(info["pr_fname"])
        state["psargs"] = _cstr(info["pr_psargs"]).strip()
    elif ntype == NT_SIGINFO:
        cls, little = elf.elfclass, elf.little
        signo, code = note_field(desc, cls, little, "si_signo"), note_field(desc, cls, little, "si_code")
        state["si_signo"], state["si_code"] = signo, code
        if signo in _FAULT_SIGNALS:
            state["si_addr"] = note_field(desc, cls, little, "si_addr")
        else:
            try:
                state["si_pid"] = note_field(desc, cls, little, "si_pid") or None
            except ValueError:
                pass
    elif ntype == NT_AUXV:
        for i in range(0, len(desc) - 2 * wsize + 1, 2 * wsize):
            key, value = struct.unpack_from(e + 2 * word, desc, i)
            if key == 0:
                break
            if key in _AUXV_NAMES:
                state["auxv"].append((_AUXV_NAMES[key], value))
    elif ntype == NT_FILE:
        count, _page = struct.unpack_from(e + 2 * word, desc, 0)
        state["file_count"] = count
        names_at = 2 * wsize + 3 * wsize * count
        if count > MAX_FILE_ENTRIES or names_at > len(desc):
            problems.append(f"NT_FILE claims {count} mappings but holds {len(desc)} bytes; "
                            "mapped files not read")
            return
        ranges = struct.iter_unpack(e + 3 * word, desc[2 * wsize:names_at])
        names = desc[names_at:].split(b"\0")
        state["files"] = [(start, end, name.decode("utf-8", "replace"))
                          for (start, end, _off), name in zip(ranges, names[:count])]


def _cstr(value: bytes | str) -> str:
    if isinstance(value, bytes):
        value = value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return value


def library_version(path: str) -> str | None:
    """The version a mapped file's path shows, or None: never a guess.

    ``libcuda.so.580.159.04`` -> 580.159.04; ``.../flashinfer/0.2.5/...`` -> 0.2.5;
    ``.../torch-2.5.1/...`` -> 2.5.1; a bare soname number (``libnccl.so.2``) last.
    """
    so = _SO_VERSION.search(path)
    if so and "." in so.group(1):
        return so.group(1)
    for component in reversed(path.split("/")[:-1]):
        m = _COMPONENT_VERSION.match(component)
        if m:
            return m.group(1)
    return so.group(1) if so else None


def _file_at(files: list[tuple[int, int, str]], address: int | None) -> str | None:
    if address is None:
        return None
    return next((path for start, end, path in files if start <= address < end), None)


def _key_libraries(paths: list[str]) -> Iterator[MappedLibrary]:
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            continue
        for key, pattern in KEY_LIBRARIES:
            if pattern.search(path) and (".so" in path.rsplit("/", 1)[-1]):
                seen.add(path)
                yield MappedLibrary(key=key, path=path, version=library_version(path))
                break


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


class ElfCoreParser:
    """``elf-core`` inputs -> one CORE_DUMP and one FATAL_SIGNAL event."""

    def parse(self, source: Source) -> ParsedSource:
        return parse_core_source(source, "elf-core", read_cpu_core, core_events)


def core_events(core: CpuCoreDump, relpath: str) -> list[Event]:
    libs = {}
    for lib in core.libraries:
        libs.setdefault(lib.key, f"{lib.path}" + (f" ({lib.version})" if lib.version else ""))
    crashing = core.crashing_thread
    attrs = {
        "signal": core.signal_name or (str(core.signal) if core.signal else None),
        "signal_number": core.signal,
        "signal_code": core.signal_code,
        "pid": core.pid,
        "ppid": core.ppid,
        "command": core.command,
        "args": core.args,
        "fault_address": hex(core.fault_address) if core.fault_address is not None else None,
        "sender_pid": core.sender_pid,
        "thread_count": core.thread_count,
        "crashing_tid": crashing.tid if crashing else None,
        "rip": hex(crashing.rip) if crashing and crashing.rip is not None else None,
        "rsp": hex(crashing.rsp) if crashing and crashing.rsp is not None else None,
        "rip_file": core.rip_file,
        "libraries": libs,
        "mapped_files": core.mapped_file_count,
        "core_type": "cpu",
    }
    what = core.signal_name or "an unknown signal"
    where = f" (fault address {attrs['fault_address']})" if attrs["fault_address"] else ""
    if core.rip_file:
        where += f", executing in {core.rip_file.rsplit('/', 1)[-1]}"
    who = f"{core.command or 'process'} (pid {core.pid})" if core.pid else (core.command or "process")
    summary = f"CPU core dump: {who} killed by {what}{where}; {core.thread_count} thread(s)"
    dump = Event(kind=Kind.CORE_DUMP, message=summary, source=relpath, line=0,
                 severity=Severity.ERROR, pid=core.pid, process=core.command, seq=1,
                 attrs=freeze(attrs))
    signal_event = Event(kind=Kind.FATAL_SIGNAL,
                         message=f"{who} received {what}{where} (from its core dump)",
                         source=relpath, line=0, severity=Severity.CRITICAL, pid=core.pid,
                         process=core.command, seq=2,
                         attrs=freeze({"signal": attrs["signal"], "signal_number": core.signal,
                                       "fault_address": attrs["fault_address"],
                                       "tid": attrs["crashing_tid"], "rip": attrs["rip"],
                                       "evidence": "core-dump"}))
    return [dump, signal_event]
