"""Linux CPU core dumps (ELF ``ET_CORE``): who died, of which signal, running what.

A host core of a vLLM worker says which thread took which signal (SIGSEGV in a library,
SIGABRT after the CUDA driver wrote a GPU core dump), the command line, the faulting
address, and which CUDA / NCCL / torch / FlashInfer / vLLM shared objects were mapped -
with their versions when the paths show them.

Cores of a GPU server are often many GB.  Only the ``PT_NOTE`` segments are read, never a
``PT_LOAD`` one, through the bounded ELF reader of ``elf.py`` (shared with the GPU core
dump reader, ``gpu.py``).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

from elftools.construct.core import ConstructError

from forensics import knowledge
from forensics.events import Event, Kind, Severity, freeze
from forensics.parsers.base import ParsedSource
from forensics.parsers.coredumps.elf import MAX_SECTION_BYTES, CoreDumpError, ElfImage, guarded, parse_core_source
from forensics.inputs.sources import Source

MAX_NOTES = 100_000               # notes decoded per core, at most
MAX_FILE_ENTRIES = 200_000        # NT_FILE mappings decoded, at most
MAX_THREADS_LISTED = 64           # threads kept in the dataclass (the count is exact)


# --- Linux CPU cores ----------------------------------------------------------------------

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
    faulted = signal in knowledge.fault_address_signals()      # si_addr: where, not who sent it
    fault_addr = state.get("si_addr") if faulted else None
    return CpuCoreDump(
        machine=str(elf.header["e_machine"]),
        pid=state.get("pid") or (threads[0].tid if threads else None),
        ppid=state.get("ppid"),
        command=state.get("fname"),
        args=state.get("psargs"),
        signal=signal or None,
        signal_name=knowledge.signals().get(signal) if signal else None,
        signal_code=state.get("si_code"),
        fault_address=fault_addr,
        sender_pid=state.get("si_pid") if signal is not None and not faulted else None,
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
        if signo in knowledge.fault_address_signals():     # si_addr: the faulting address
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
