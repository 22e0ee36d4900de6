"""Linux CPU core dumps (forensics/parsers/coredumps/cpu.py): synthetic cores built here
with ``struct``, the real cores under tests/data, and hostile variants of both.

Every hostile variant must give one clear sentence (a problem line or CoreDumpError),
never a traceback, quickly and in bounded memory.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import pytest

from forensics.case import analyze, parse_source
from forensics.events import Kind, Severity
from forensics.inputs.sources import sniff
from forensics.parsers import registry
from forensics.parsers.coredumps.cpu import (MAX_NOTES, MAX_THREADS_LISTED, CoreDumpError, ElfCoreParser,
                                             core_events, library_version, read_cpu_core)
from tests.helpers import source_of

DATA = Path(__file__).parent / "data"
SEGV = DATA / "gpu" / "cpu_segv_core" / "core.segv.1032"
SEGV_GDB = DATA / "gpu" / "cpu_segv_core" / "cuda-gdb_core.txt"
GCORE = DATA / "coredumps" / "gcore_sleeper.10995.core"
HOSTILE = DATA / "hostile"

# --- a Linux core, built byte by byte ---------------------------------------------------

NT_PRSTATUS, NT_PRPSINFO, NT_AUXV, NT_SIGINFO, NT_FILE = 1, 3, 6, 0x53494749, 0x46494C45
EM_X86_64, EM_S390 = 62, 22


def _pad4(raw: bytes) -> bytes:
    return raw + b"\0" * (-len(raw) % 4)


def note(ntype: int, desc: bytes, owner: bytes = b"CORE", order: str = "<") -> bytes:
    name = owner + b"\0"
    return struct.pack(order + "3I", len(name), len(desc), ntype) + _pad4(name) + _pad4(desc)


def prstatus(tid: int, sig: int, rip: int = 0, rsp: int = 0, order: str = "<") -> bytes:
    """x86-64 elf_prstatus: pr_cursig @12, pr_pid @32, pr_reg @112 (rip = reg 16, rsp = reg 19)."""
    desc = bytearray(336)
    struct.pack_into(order + "h", desc, 12, sig)
    struct.pack_into(order + "i", desc, 32, tid)
    struct.pack_into(order + "Q", desc, 112 + 16 * 8, rip)
    struct.pack_into(order + "Q", desc, 112 + 19 * 8, rsp)
    return bytes(desc)


def prpsinfo(pid: int, ppid: int, fname: bytes, args: bytes, order: str = "<") -> bytes:
    """64-bit elf_prpsinfo: pr_pid @24, pr_ppid @28, pr_fname[16] @40, pr_psargs[80] @56."""
    desc = bytearray(136)
    struct.pack_into(order + "4i", desc, 24, pid, ppid, pid, pid)
    desc[40:40 + len(fname)] = fname
    desc[56:56 + len(args)] = args
    return bytes(desc)


def siginfo(signo: int, code: int, addr_or_pid: int, order: str = "<") -> bytes:
    desc = bytearray(128)
    struct.pack_into(order + "3i", desc, 0, signo, 0, code)
    if signo in (4, 7, 8, 11):
        struct.pack_into(order + "Q", desc, 16, addr_or_pid)
    else:
        struct.pack_into(order + "i", desc, 16, addr_or_pid)
    return bytes(desc)


def ntfile(maps, page: int = 4096, order: str = "<") -> bytes:
    desc = struct.pack(order + "QQ", len(maps), page)
    for start, end, _path in maps:
        desc += struct.pack(order + "QQQ", start, end, 0)
    return desc + b"".join(path.encode() + b"\0" for _s, _e, path in maps)


def auxv(pairs, order: str = "<") -> bytes:
    return b"".join(struct.pack(order + "QQ", k, v) for k, v in pairs) + bytes(16)


def core(notes: list[bytes], machine: int = EM_X86_64, order: str = "<", e_type: int = 4) -> bytes:
    """An ELF64 core: header, one PT_NOTE program header, the notes."""
    segment = b"".join(notes)
    ehdr = bytearray(64)
    ehdr[:4] = b"\x7fELF"
    ehdr[4], ehdr[5], ehdr[6] = 2, 1 if order == "<" else 2, 1
    struct.pack_into(order + "HHIQQQIHHHHHH", ehdr, 16, e_type, machine, 1, 0, 64, 0, 0, 64, 56, 1, 0, 0, 0)
    phdr = struct.pack(order + "IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(segment), 0, 4)
    return bytes(ehdr) + phdr + segment


PYTHON = "/usr/bin/python3.12"
LIBCUDA = "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"
LIBTORCH = "/opt/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
LIBNCCL = "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2.21.5"
FLASHINFER = "/root/.cache/flashinfer/0.2.5/90/cached_ops/batch_prefill/batch_prefill.so"
MAPS = [(0x400000, 0x500000, PYTHON), (0x7F0000000000, 0x7F0000100000, LIBCUDA),
        (0x7F1000000000, 0x7F1000200000, LIBTORCH), (0x7F2000000000, 0x7F2000200000, LIBNCCL),
        (0x7F3000000000, 0x7F3000010000, FLASHINFER), (0x7F4000000000, 0x7F4000010000, "/etc/ld.so.cache")]
RIP = 0x7F0000000123      # inside libcuda


def segv_core(**over) -> bytes:
    """A worker that died of SIGSEGV inside libcuda, with a second thread."""
    notes = over.pop("notes", None) or [
        note(NT_PRSTATUS, prstatus(4242, 11, rip=RIP, rsp=0x7FFD00001000)),
        note(NT_PRPSINFO, prpsinfo(4242, 4200, b"pt_main_thread", b"python3 -m vllm.entrypoints.openai.api_server ")),
        note(NT_SIGINFO, siginfo(11, 1, 0xDEADBEEF)),
        note(NT_AUXV, auxv([(3, 0x400040), (9, 0x401000), (7, 0x7F9000000000), (33, 1)])),
        note(NT_FILE, ntfile(MAPS)),
        note(NT_PRSTATUS, prstatus(4243, 0, rip=0x401234)),
        note(0x1234, b"not a CORE note", owner=b"LINUX"),
    ]
    return core(notes, **over)


def read_bytes(data: bytes, name: str = "core"):
    return read_cpu_core(io.BytesIO(data), len(data), name)


HANG_SLACK = 10


def bounded(fn, seconds: float = 1.0, mib: float | None = 32.0):
    """Run ``fn``; fail when it takes longer than ``seconds`` or allocates more than ``mib``
    (timed on a plain run; memory measured on a second run under tracemalloc, which slows
    allocation-heavy code down too much to be timed)."""
    started = time.process_time()
    result = fn()
    elapsed = time.process_time() - started
    # a guard against a reader that never ends (a loop over a hostile count), not a speed
    # budget: CPU time, with room for a loaded machine; speed is measured in bench/
    assert elapsed < seconds * HANG_SLACK, f"took {elapsed:.2f}s of CPU"
    if mib is None:
        return result
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak < mib, f"peak {peak:.1f} MiB"
    return result


def parse_file(tmp_path: Path, data: bytes, name: str = "core.4242"):
    """The registered reader on a file, as the pipeline runs it (bounded)."""
    path = tmp_path / name
    path.write_bytes(data)
    source = sniff(path, name)
    parsed = bounded(lambda: ElfCoreParser().parse(source))
    assert parsed.kind == "elf-core" and parsed.lines is None and parsed.unparsed_lines is None
    for problem in parsed.problems:
        assert "Traceback" not in problem and "reader failed" not in problem and "\n" not in problem
    return parsed


# --- synthetic cores: every field --------------------------------------------------------

def test_synthetic_core_every_field():
    dump = read_bytes(segv_core())
    assert dump.machine == "EM_X86_64"
    assert (dump.pid, dump.ppid, dump.command) == (4242, 4200, "pt_main_thread")
    assert dump.args == "python3 -m vllm.entrypoints.openai.api_server"          # trailing blank stripped
    assert (dump.signal, dump.signal_name, dump.signal_code) == (11, "SIGSEGV", 1)
    assert dump.fault_address == 0xDEADBEEF and dump.sender_pid is None
    assert dump.thread_count == 2
    assert [(t.tid, t.signal) for t in dump.threads] == [(4242, 11), (4243, 0)]
    assert dump.crashing_thread.tid == 4242
    assert (dump.crashing_thread.rip, dump.crashing_thread.rsp) == (RIP, 0x7FFD00001000)
    assert dump.rip_file == LIBCUDA
    assert dump.mapped_file_count == len(MAPS)
    libs = {lib.key: (lib.path, lib.version) for lib in dump.libraries}
    assert libs == {"libcuda": (LIBCUDA, "580.159.04"), "libtorch": (LIBTORCH, None),
                    "libnccl": (LIBNCCL, "2.21.5"), "flashinfer": (FLASHINFER, "0.2.5")}
    # AT_PHDR, AT_ENTRY, AT_BASE are named; unknown keys (33) are left out
    assert dump.auxv == (("AT_PHDR", 0x400040), ("AT_ENTRY", 0x401000), ("AT_BASE", 0x7F9000000000))
    assert dump.problems == ()


def test_synthetic_core_events():
    parsed = ElfCoreParser().parse(source_of(segv_core(), "node3/core.4242"))
    assert parsed.kind == "elf-core" and parsed.problems == []
    dump, signal = parsed.events
    assert dump.kind == Kind.CORE_DUMP and signal.kind == Kind.FATAL_SIGNAL
    assert dump.severity == Severity.ERROR and signal.severity == Severity.CRITICAL
    assert dump.pid == signal.pid == 4242 and dump.process == "pt_main_thread"
    assert dump.source == "node3/core.4242" and dump.line == 0
    a = dump.attrs
    assert a["signal"] == "SIGSEGV" and a["signal_number"] == 11 and a["fault_address"] == "0xdeadbeef"
    assert a["crashing_tid"] == 4242 and a["rip"] == hex(RIP) and a["rip_file"] == LIBCUDA
    assert a["thread_count"] == 2 and a["mapped_files"] == len(MAPS) and a["core_type"] == "cpu"
    assert a["libraries"]["libcuda"] == f"{LIBCUDA} (580.159.04)"
    assert a["libraries"]["libtorch"] == LIBTORCH              # no version in the path: none invented
    assert "SIGSEGV" in dump.message and "0xdeadbeef" in dump.message and "libcuda.so" in dump.message
    assert signal.attrs["evidence"] == "core-dump" and signal.attrs["tid"] == 4242
    assert "pt_main_thread (pid 4242) received SIGSEGV" in signal.message


def test_abort_sent_by_a_process_names_the_sender_not_an_address():
    data = segv_core(notes=[note(NT_PRSTATUS, prstatus(900, 6)), note(NT_SIGINFO, siginfo(6, -6, 900)),
                            note(NT_PRPSINFO, prpsinfo(900, 1, b"python3", b"python3 worker.py"))])
    dump = read_bytes(data)
    assert dump.signal_name == "SIGABRT" and dump.fault_address is None and dump.sender_pid == 900
    (event, signal) = core_events(dump, "core.900")
    assert event.attrs.get("fault_address") is None and "fault address" not in event.message
    assert "python3 (pid 900) killed by SIGABRT" in event.message


def test_signal_from_prstatus_when_siginfo_is_missing():
    dump = read_bytes(core([note(NT_PRSTATUS, prstatus(77, 7))]))
    assert (dump.signal_name, dump.pid, dump.command) == ("SIGBUS", 77, None)
    assert dump.fault_address is None and dump.rip_file is None


def test_big_endian_core_is_read_in_its_byte_order():
    order = ">"
    data = core([note(NT_PRSTATUS, prstatus(31337, 11, order=order), order=order),
                 note(NT_PRPSINFO, prpsinfo(31337, 2, b"worker", b"worker --tp 2", order=order), order=order),
                 note(NT_SIGINFO, siginfo(11, 2, 0x1000, order=order), order=order)],
                machine=EM_S390, order=order)
    dump = read_bytes(data)
    assert (dump.pid, dump.ppid, dump.command, dump.args) == (31337, 2, "worker", "worker --tp 2")
    assert (dump.signal_name, dump.fault_address, dump.signal_code) == ("SIGSEGV", 0x1000, 2)
    assert dump.crashing_thread.rip is None          # registers are only decoded for x86-64


def test_thread_list_is_capped_but_the_count_is_exact():
    threads = [note(NT_PRSTATUS, prstatus(1000 + i, 11 if i == 0 else 0)) for i in range(MAX_THREADS_LISTED + 40)]
    dump = bounded(lambda: read_bytes(core(threads)))
    assert dump.thread_count == MAX_THREADS_LISTED + 40
    assert len(dump.threads) == MAX_THREADS_LISTED and dump.threads[0].tid == 1000


def test_registry_and_sniffing_route_cores_to_this_reader(tmp_path):
    path = tmp_path / "core.4242"
    path.write_bytes(segv_core())
    source = sniff(path, "core.4242")
    assert source.kind == "elf-core" and source.is_plain_file
    assert isinstance(registry.reader_for("elf-core"), ElfCoreParser)
    assert registry.forceable()["elf-core"] == "elf-core"
    parsed = parse_source(source)
    assert [e.kind for e in parsed.events] == [Kind.CORE_DUMP, Kind.FATAL_SIGNAL]


@pytest.mark.parametrize("compress, suffix", [(gzip.compress, ".gz"), (lzma.compress, ".xz"), (bz2.compress, ".bz2")])
def test_compressed_core_reads_the_same(tmp_path, compress, suffix):
    path = tmp_path / f"core.4242{suffix}"
    path.write_bytes(compress(segv_core()))
    source = sniff(path, path.name)
    assert source.kind == "elf-core" and source.compression
    parsed = parse_source(source)
    assert parsed.events[0].pid == 4242 and parsed.events[0].attrs["rip_file"] == LIBCUDA
    assert any("decompression" in p for p in parsed.problems)


def test_cut_compressed_core_is_one_clear_problem(tmp_path):
    packed = gzip.compress(segv_core() + bytes(200_000))
    path = tmp_path / "core.9.gz"
    path.write_bytes(packed[: len(packed) // 2])
    parsed = bounded(lambda: ElfCoreParser().parse(sniff(path, path.name)))
    assert parsed.events == []
    assert any("could not be fully decompressed" in p for p in parsed.problems), parsed.problems


def test_library_versions_come_from_paths_only():
    assert library_version(LIBCUDA) == "580.159.04"
    assert library_version(FLASHINFER) == "0.2.5"
    assert library_version("/opt/venv/lib/python3.12/site-packages/torch-2.5.1/torch/lib/libc10.so") == "2.5.1"
    assert library_version("/x/vllm-0.10.1+cu128.dist-info/../vllm/_C.abi3.so") == "0.10.1+cu128"
    assert library_version(LIBTORCH) is None
    assert library_version("/opt/nvidia/nccl/lib/libnccl.so.2") == "2"        # a bare soname number, last
    assert library_version("/usr/local/cuda-12.8/lib64/libcudart.so.12.8.90") == "12.8.90"


# --- the real cores -----------------------------------------------------------------------

def _read(path: Path):
    with open(path, "rb") as fh:
        return read_cpu_core(fh, path.stat().st_size, path.name)


@pytest.mark.skipif(not SEGV.is_file(), reason="recorded SIGSEGV core not in this checkout")
def test_real_segv_core_agrees_with_gdb():
    gdb = SEGV_GDB.read_text()
    dump = _read(SEGV)
    assert dump.signal_name == re.search(r"terminated with signal (SIG\w+)", gdb).group(1) == "SIGSEGV"
    assert dump.pid == int(re.search(r"\[New LWP (\d+)\]", gdb).group(1)) == 1032
    assert dump.args == re.search(r"generated by `([^']+)'", gdb).group(1)
    assert dump.command == "segv" and dump.thread_count == 1
    rip = int(re.search(r"^rip\s+(0x[0-9a-f]+)", gdb, re.M).group(1), 16)
    assert dump.crashing_thread.rip == rip
    gdb_lib = re.search(r"in \?\? \(\) from (\S+)", gdb).group(1)
    assert dump.rip_file.rsplit("/", 1)[-1] == gdb_lib.rsplit("/", 1)[-1] == "libc.so.6"
    # strlen(req->prompt) with req = NULL: a small offset into page zero
    assert dump.fault_address is not None and dump.fault_address < 4096
    assert dump.problems == ()


@pytest.mark.skipif(not SEGV.is_file(), reason="recorded SIGSEGV core not in this checkout")
def test_real_segv_core_events():
    parsed = ElfCoreParser().parse(sniff(SEGV, "cpu_segv_core/core.segv.1032"))
    dump, signal = parsed.events
    assert dump.pid == signal.pid == 1032
    assert dump.attrs["signal"] == "SIGSEGV" and dump.attrs["command"] == "segv"
    assert dump.attrs["rip"] == "0x7f2610d9bc5c" and dump.attrs["thread_count"] == 1
    assert "SIGSEGV" in signal.message and parsed.problems == []


def test_real_gcore_snapshot_lists_the_nccl_library_with_its_version():
    dump = _read(GCORE)
    assert dump.pid == 10995 and dump.command == "sleeper" and dump.thread_count == 1
    assert dump.signal_name == "SIGSTOP"          # gdb stopped it to take the snapshot
    (nccl,) = [lib for lib in dump.libraries if lib.key == "libnccl"]
    assert nccl.version == "2.21.5" and nccl.path.endswith("libnccl.so.2.21.5")
    assert dump.mapped_file_count >= 5 and dump.problems == ()
    events = ElfCoreParser().parse(sniff(GCORE, GCORE.name)).events
    assert events[0].attrs["libraries"]["libnccl"].endswith("(2.21.5)")


def test_gzipped_real_core(tmp_path):
    gz = tmp_path / "core.gz"
    gz.write_bytes(gzip.compress(GCORE.read_bytes()))
    parsed = ElfCoreParser().parse(sniff(gz, gz.name))
    assert parsed.events[0].pid == 10995


def test_a_core_beside_a_log_is_analysed_with_it(tmp_path):
    shutil.copy(GCORE, tmp_path / GCORE.name)
    (tmp_path / "server.log").write_text(
        "(Worker_TP0 pid=10995) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal memory "
        "access was encountered\n")
    case = analyze(str(tmp_path))
    assert sorted(s.kind for s in case.sources) == ["elf-core", "python-traceback"]
    assert any(e.kind == Kind.CORE_DUMP and e.pid == 10995 for e in case.events)


# --- hostile input ------------------------------------------------------------------------

def _note_segment(raw: bytes) -> tuple[int, int, int]:
    """(program header offset, note offset, note size) of the first PT_NOTE."""
    phoff = struct.unpack_from("<Q", raw, 0x20)[0]
    phnum = struct.unpack_from("<H", raw, 0x38)[0]
    for i in range(phnum):
        ph = phoff + i * 56
        if struct.unpack_from("<I", raw, ph)[0] == 4:
            return ph, struct.unpack_from("<Q", raw, ph + 8)[0], struct.unpack_from("<Q", raw, ph + 32)[0]
    raise AssertionError("no PT_NOTE")


def test_real_core_truncated_anywhere(tmp_path):
    raw = GCORE.read_bytes()
    ph, note_off, note_size = _note_segment(raw)
    cuts = sorted({0, 4, 20, 63, 64, 100, ph + 56, note_off + 10, note_off + 400, note_off + note_size // 2,
                   note_off + note_size - 3, *range(0, len(raw), 50_021)})
    for cut in cuts:
        parsed = parse_file(tmp_path, raw[:cut], f"core.cut{cut}")
        if cut < 20:
            continue        # too short to know it is a core: sniffing reports it (below)
        if cut < note_off + note_size:
            assert any(w in p for p in parsed.problems for w in ("truncated", "cut", "no readable notes")), \
                (cut, parsed.problems)
        else:
            assert parsed.events and parsed.events[0].pid == 10995, cut


def test_a_few_bytes_of_elf_is_reported_by_sniffing(tmp_path):
    path = tmp_path / "core.short"
    path.write_bytes(b"\x7fELF\x02\x01\x01")
    source = sniff(path, "core.short")
    assert source.kind == "unknown" and source.problems == ("core.short: truncated ELF header",)
    assert "truncated ELF header" in parse_source(source).problems[0]


@pytest.mark.parametrize("name, offset, fmt, value, expect", [
    ("huge_filesz", 32, "<Q", 1 << 60, "extends past end of file"),
    ("offset_past_eof", 8, "<Q", 1 << 45, "starts past end of file"),
    ("phnum_huge", None, "<H", 0xFFF0, "program header table extends past end of file"),
    ("phentsize_small", None, "<H", 8, "program header size 8 is smaller than 56"),
    ("pn_xnum_without_sections", None, "<H", 0xFFFF, "no readable notes"),
])
def test_hostile_program_headers(tmp_path, name, offset, fmt, value, expect):
    raw = bytearray(GCORE.read_bytes())
    ph, _, _ = _note_segment(bytes(raw))
    where = {"phnum_huge": 0x38, "pn_xnum_without_sections": 0x38, "phentsize_small": 0x36}.get(name)
    struct.pack_into(fmt, raw, where if where is not None else ph + offset, value)
    parsed = parse_file(tmp_path, bytes(raw), f"core.{name}")
    assert any(expect in p for p in parsed.problems), (name, parsed.problems)


@pytest.mark.parametrize("field, value, expect", [
    ("namesz", 0xFFFFFFF0, "cut short"),
    ("descsz", 0xFFFFFFF0, "cut short"),
])
def test_hostile_note_headers(tmp_path, field, value, expect):
    raw = bytearray(GCORE.read_bytes())
    _, note_off, _ = _note_segment(bytes(raw))
    struct.pack_into("<I", raw, note_off + (0 if field == "namesz" else 4), value)
    parsed = parse_file(tmp_path, bytes(raw), f"core.{field}")
    assert any(expect in p for p in parsed.problems), parsed.problems


def test_a_later_cut_note_keeps_the_notes_before_it():
    good = [note(NT_PRSTATUS, prstatus(5, 11)), note(NT_SIGINFO, siginfo(11, 1, 0x10))]
    cut = struct.pack("<3I", 5, 4000, NT_FILE) + b"CORE\0\0\0\0" + b"x" * 10
    dump = read_bytes(core(good + [cut]))
    assert dump.signal_name == "SIGSEGV" and dump.pid == 5
    assert any("cut short" in p for p in dump.problems)


def test_nt_file_with_absurd_count_in_the_real_core(tmp_path):
    raw = bytearray(GCORE.read_bytes())
    pos = raw.find(struct.pack("<I", NT_FILE) + b"CORE")
    assert pos > 0
    struct.pack_into("<Q", raw, pos + 4 + 8, 1 << 55)          # count, the descriptor's first word
    parsed = parse_file(tmp_path, bytes(raw), "core.ntfile")
    assert any("NT_FILE claims" in p and "mapped files not read" in p for p in parsed.problems)
    assert parsed.events[0].pid == 10995                      # the rest of the core still reads
    assert parsed.events[0].attrs["libraries"] == {}


def test_nt_file_with_fewer_names_than_mappings():
    desc = ntfile(MAPS)
    desc = desc[: desc.index(LIBCUDA.encode()) + len(LIBCUDA) + 1]      # names after libcuda cut away
    dump = read_bytes(core([note(NT_PRSTATUS, prstatus(1, 11, rip=0x7F1000000010)), note(NT_FILE, desc)]))
    assert dump.mapped_file_count == len(MAPS)
    assert [lib.key for lib in dump.libraries] == ["libcuda"]
    assert not dump.rip_file                          # rip lies in a mapping whose name was lost


def test_nt_file_names_with_invalid_utf8():
    maps = [(0x1000, 0x2000, "/opt/libnccl.so.2.19.3")]
    desc = bytearray(ntfile(maps))
    desc[desc.index(b"/opt") + 1] = 0xFF
    dump = read_bytes(core([note(NT_PRSTATUS, prstatus(1, 11, rip=0x1800)), note(NT_FILE, bytes(desc))]))
    assert dump.rip_file == "/\ufffdpt/libnccl.so.2.19.3"
    assert dump.libraries[0].version == "2.19.3"


@pytest.mark.parametrize("ntype, desc, what", [
    (NT_PRSTATUS, b"\0" * 5, "NT_PRSTATUS"),
    (NT_SIGINFO, b"\x0b\0\0\0", "NT_SIGINFO"),
    (NT_FILE, b"\x01\0", "NT_FILE"),
])
def test_a_malformed_note_is_skipped_and_the_rest_read(ntype, desc, what):
    notes = [note(NT_PRPSINFO, prpsinfo(321, 1, b"python3", b"python3 serve.py")), note(ntype, desc),
             note(NT_PRSTATUS, prstatus(321, 11))]
    dump = read_bytes(core(notes))
    assert any(f"note {what} is malformed" in p and "skipped" in p for p in dump.problems), dump.problems
    assert dump.command == "python3" and dump.pid == 321


def test_a_cut_prpsinfo_note_is_skipped_and_the_signal_still_read():
    dump = read_bytes(core([note(NT_PRSTATUS, prstatus(321, 11)), note(NT_PRPSINFO, b"\0" * 10),
                            note(NT_SIGINFO, siginfo(11, 1, 0x40))]))
    assert dump.signal_name == "SIGSEGV" and dump.fault_address == 0x40
    assert any("note NT_PRPSINFO is malformed" in p for p in dump.problems)


def test_notes_beyond_the_cap_are_ignored_quickly():
    notes = [note(NT_PRSTATUS, prstatus(7, 11))] + [note(0x77, b"")] * (MAX_NOTES + 5)
    data = core(notes)
    dump = bounded(lambda: read_bytes(data), seconds=3.0, mib=None)
    assert any(f"more than {MAX_NOTES} notes" in p for p in dump.problems)
    assert dump.signal_name == "SIGSEGV"


def test_owners_other_than_core_are_ignored():
    dump = read_bytes(core([note(NT_PRSTATUS, prstatus(9, 11), owner=b"LINUX"),
                            note(NT_PRSTATUS, prstatus(10, 6))]))
    assert [t.tid for t in dump.threads] == [10] and dump.signal_name == "SIGABRT"


@pytest.mark.parametrize("data, expect", [
    (b"", "empty"),
    (b"not an elf at all" * 4, "not an ELF file"),
    (b"\x7fELF\x02\x01", "cut inside the ELF header"),
    (b"\x7fELF\x07\x01" + bytes(58), "invalid ELF class or byte order"),
    (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00\x3e\x00" + bytes(44), "not a core dump"),
    (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00\x3e\x00" + bytes(20), "cut inside the ELF header"),
    (b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00\x3e\x00" + bytes(44), "no readable notes"),
])
def test_not_a_readable_core_raises_one_sentence(data, expect):
    with pytest.raises(CoreDumpError, match=expect) as info:
        bounded(lambda: read_bytes(data, "core.x"))
    assert "\n" not in str(info.value)


def test_the_parser_turns_core_dump_errors_into_a_problem(tmp_path):
    parsed = parse_file(tmp_path, b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00\x3e\x00" + bytes(44), "core.0")
    assert parsed.events == []
    assert parsed.problems and parsed.problems[0].startswith("core.0") and "no readable notes" in parsed.problems[0]


def test_hostile_corpus_cpu_core(tmp_path):
    path = HOSTILE / "cpu_core_phdrs_past_end"
    source = sniff(path, path.name)
    assert source.kind == "elf-core"
    parsed = bounded(lambda: parse_source(source))
    assert parsed.events == [] and any("no readable notes" in p for p in parsed.problems)


def test_random_corruption_of_cores_never_escapes():
    import random
    rng = random.Random(20261203)
    bases = [segv_core(), GCORE.read_bytes()[:8192]]
    started = time.monotonic()
    for trial in range(300):
        data = bytearray(bases[trial % 2])
        for _ in range(rng.choice([1, 4, 16])):
            pos = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[pos] = rng.randrange(256)
            else:
                value = rng.choice([0, 0xFF, 0xFFFFFFFF, 1 << 40, 1 << 63, len(data)])
                struct.pack_into("<Q", data, min(pos - pos % 4, len(data) - 8), value)
        parsed = ElfCoreParser().parse(source_of(bytes(data), f"core.{trial}"))
        assert all("reader failed" not in p for p in parsed.problems)
        assert parsed.events or parsed.problems, trial          # never silently nothing
    assert time.monotonic() - started < 10
