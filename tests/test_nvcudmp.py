"""CUDA GPU core dumps (forensics/parsers/coredumps/gpu.py): synthetic dumps built here
with ``struct`` (the table layout of cudacoredump.h), the real dump recorded on an H200
checked field by field against cuda-gdb's reading of it, and hostile variants of both.

A hostile dump gives a clear problem line (or one CoreDumpError sentence), never a
traceback, a hang or a memory blow-up.
"""

from __future__ import annotations

import gzip
import io
import random
import re
import shutil
import struct
import time
import tracemalloc
from pathlib import Path

import pytest

from forensics.case import analyze, parse_source
from forensics.events import Kind
from forensics.inputs.sources import sniff
from forensics.parsers import registry
from forensics.parsers.coredumps.elf import CoreDumpError
from forensics.parsers.coredumps.gpu import (MAX_LANES_KEPT, CudaCoredumpParser, dump_event, exception_info,
                                             generation_flag_names, pid_from_name, read_cuda_core,
                                             read_cuda_core_file)
from tests.helpers import source_of

DATA = Path(__file__).parent / "data"
BUNDLE = DATA / "gpu" / "tp4_oob_write_coredump"
DUMP = BUNDLE / "core_885.nvcudmp"
TRANSCRIPT = BUNDLE / "cuda-gdb_cudacore.txt"
HOSTILE = DATA / "hostile"
GCORE = DATA / "coredumps" / "gcore_sleeper.10995.core"

needs_real_dump = pytest.mark.skipif(not DUMP.is_file(), reason="real GPU core dump not in this checkout")

# --- a GPU core dump, built byte by byte ---------------------------------------------------

_SHT = 0x80000000
SHT_RELF_IMG, SHT_DEV, SHT_SM = _SHT + 7, _SHT + 9, _SHT + 11
SHT_GRID, SHT_CTA, SHT_WP, SHT_LN, SHT_MOD, SHT_META = (_SHT + 12, _SHT + 13, _SHT + 14, _SHT + 15, _SHT + 16,
                                                        _SHT + 22)
SHDR = "<IIQQQQIIQQ"          # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, ...


class Strtab:
    def __init__(self) -> None:
        self.data = b"\0"
        self.at: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        if text not in self.at:
            self.at[text] = len(self.data)
            self.data += text.encode() + b"\0"
        return self.at[text]


def elf(sections: list[dict], e_type: int = 4, machine: int = 190) -> bytes:
    """An ELF64 LE image of ``sections`` (name, type, data, link, info, entsize; size to
    lie about the size); a null section first and .shstrtab last are added."""
    names = Strtab()
    body = bytearray(64)
    offsets = []
    for sec in sections:
        names(sec["name"])
        body += b"\0" * (-len(body) % 8)
        offsets.append(len(body))
        body += sec.get("data", b"")
    names(".shstrtab")
    body += b"\0" * (-len(body) % 8)
    shstr_off = len(body)
    body += names.data
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    body += bytes(64)
    for sec, off in zip(sections, offsets):
        body += struct.pack(SHDR, names(sec["name"]), sec["type"], 0, 0, off, sec.get("size", len(sec.get("data", b""))),
                            sec.get("link", 0), sec.get("info", 0), 8, sec.get("entsize", 0))
    body += struct.pack(SHDR, names(".shstrtab"), 3, 0, 0, shstr_off, len(names.data), 0, 0, 1, 0)
    shnum = len(sections) + 2
    body[:7] = b"\x7fELF\x02\x01\x01"
    struct.pack_into("<HHIQQQIHHHHHH", body, 16, e_type, machine, 1, 0, 0, shoff, 0, 64, 56, 0, 64, shnum, shnum - 1)
    return bytes(body)


def cubin(functions, symtab_link: int = 1, st_name_override: int | None = None) -> bytes:
    """A relocated cubin: .strtab and .symtab, one STT_FUNC per (name, address, size)."""
    strtab = Strtab()
    syms = bytes(24)
    for name, value, size in functions:
        st_name = strtab(name) if st_name_override is None else st_name_override
        syms += struct.pack("<IBBHQQ", st_name, 0x12, 0, 1, value, size)
    syms += struct.pack("<IBBHQQ", strtab("a_global"), 0x11, 0, 1, 0x10, 8)     # STT_OBJECT: never a kernel
    return elf([{"name": ".strtab", "type": 3, "data": strtab.data},
                {"name": ".symtab", "type": 2, "data": syms, "link": symtab_link, "entsize": 24}],
               e_type=2)


ENTRY, PC, MODULE = 0x7F0A00001000, 0x7F0A00001110, 0xABC000
# section indexes of what ``gpu_dump`` builds (0 is the null section)
STRTAB, DEVTBL, GRIDTBL, SMTBL, CTATBL, WPTBL, LNTBL, MODTBL, RELFIMG, META = range(1, 11)


def gpu_dump(*, kernel: str = "_Z9far_writePi", exception: int = 14, lanes=((0, (5, 0, 0)), (1, (6, 0, 0))),
             grid=(4, 2, 1), block=(128, 1, 1), cluster=(0, 0, 0), sm_id: int = 7, warp_id: int = 3,
             cta_block=(2, 1, 0), grid_id: int = 11, device_name: str = "NVIDIA H200", sm_exception: int = 0,
             warp_pc_valid: int = 1, meta: bool = True, sm_row: int = 48, module: int = MODULE,
             cubin_image: bytes | None = None, device_name_offset: int | None = None, patch=None) -> bytes:
    """A one-device, one-grid dump: a warp of ``kernel`` took ``exception`` at PC."""
    st = Strtab()
    dev = bytearray(88)
    struct.pack_into("<3Q", dev, 0, st(device_name) if device_name_offset is None else device_name_offset,
                     st("GH100GL-A"), st("sm_90"))
    struct.pack_into("<7I", dev, 24, 0, 0x1B, 0, 132, 64, 32, 255)
    grow = bytearray(128)
    struct.pack_into("<7Q", grow, 0, grid_id, 0x1234, 0, ENTRY, module, 0, 0)
    struct.pack_into("<12I", grow, 56, 0, 0, 0, 0, *grid, *block, 0, 958)
    struct.pack_into("<3I", grow, 104, *cluster)
    sm = bytearray(sm_row)
    struct.pack_into("<I", sm, 0, sm_id)
    if sm_row >= 24:
        struct.pack_into("<IIQ", sm, 8, sm_exception, 1 if sm_exception else 0, PC if sm_exception else 0)
    lane_rows = b"".join(struct.pack("<2Q5I", PC, PC - ENTRY, lane, *thread, exception) + bytes(20)
                         for lane, thread in lanes)
    lane_rows += struct.pack("<2Q5I", PC, PC - ENTRY, 31, 31, 0, 0, 0) + bytes(20)      # a lane without exception
    sections = [
        {"name": ".strtab", "type": 3},
        {"name": ".cudbg.devtbl", "type": SHT_DEV, "data": bytes(dev), "entsize": 88},
        {"name": ".cudbg.gridtbl.dev0", "type": SHT_GRID, "data": bytes(grow), "link": DEVTBL, "entsize": 128},
        {"name": ".cudbg.smtbl.dev0", "type": SHT_SM, "data": bytes(sm), "link": DEVTBL, "entsize": sm_row},
        {"name": f".cudbg.ctatbl.dev0.sm{sm_id}", "type": SHT_CTA, "data": struct.pack("<Q3I", grid_id, *cta_block)
         + bytes(4), "link": SMTBL, "entsize": 24},
        {"name": f".cudbg.wptbl.dev0.sm{sm_id}.cta0", "type": SHT_WP, "entsize": 32, "link": CTATBL,
         "data": struct.pack("<Q5I", PC if warp_pc_valid else 0, warp_id, ~0 & 0xFFFFFFFF, 0xF, 0, warp_pc_valid)
         + bytes(4)},
        {"name": f".cudbg.lntbl.dev0.sm{sm_id}.cta0.wp0", "type": SHT_LN, "data": lane_rows, "link": WPTBL,
         "entsize": 56},
        {"name": ".cudbg.modtbl.dev0", "type": SHT_MOD, "data": struct.pack("<Q", MODULE), "link": DEVTBL,
         "entsize": 8},
        {"name": ".cudbg.relfimg.dev0.ctx0.mod0", "type": SHT_RELF_IMG, "link": MODTBL,
         "data": cubin_image if cubin_image is not None else
         cubin([(kernel, ENTRY, 0x400), ("other_kernel", ENTRY + 0x400, 0x100)])},
    ]
    if meta:
        sections.append({"name": ".cudbg.meta", "type": SHT_META,
                         "data": struct.pack("<Q6I", st("UD"), 580, 159, 13, 0, 0x2F, 1764686400)})
    sections[0]["data"] = st.data
    if patch:
        patch(sections)
    return elf(sections)


def read(data: bytes, name: str = "core_1.nvcudmp"):
    return read_cuda_core(io.BytesIO(data), len(data), name)


HANG_SLACK = 10


def bounded(fn, seconds: float = 1.0, mib: float | None = 32.0):
    """Run ``fn`` within ``seconds`` (a plain run) and ``mib`` of allocations (a second
    run under tracemalloc)."""
    started = time.process_time()
    result = fn()
    elapsed = time.process_time() - started
    # a guard against a reader that never ends (a loop over a hostile count), not a speed
    # budget: CPU time, with room for a loaded machine; speed is measured in bench/
    assert elapsed < seconds * HANG_SLACK, f"took {elapsed:.2f}s of CPU"
    if mib is not None:
        tracemalloc.start()
        try:
            fn()
            peak = tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()
        assert peak < mib, f"peak {peak:.1f} MiB"
    return result


def parse_quickly(path: Path, relpath: str | None = None, seconds: float = 1.0, mib: float | None = 32.0):
    source = sniff(path, relpath or path.name)
    parsed = bounded(lambda: CudaCoredumpParser().parse(source), seconds, mib)
    assert parsed.kind == "cuda-coredump" and parsed.lines is None
    for problem in parsed.problems:
        assert "Traceback" not in problem and "reader failed" not in problem and "\n" not in problem
    return parsed


def parse_bytes(tmp_path: Path, data: bytes, name: str = "core_9.nvcudmp", **kw):
    path = tmp_path / name
    path.write_bytes(data)
    return parse_quickly(path, name, **kw)


# --- synthetic dumps: every field -----------------------------------------------------------

def test_synthetic_dump_every_field():
    dump = read(gpu_dump())
    assert dump.problems == ()
    (device,) = dump.devices
    assert (device.index, device.name, device.type, device.sm_type) == (0, "NVIDIA H200", "GH100GL-A", "sm_90")
    assert (device.sm_count, device.warps_per_sm, device.lanes_per_warp, device.regs_per_lane) == (132, 64, 32, 255)
    assert (device.pci_bus, device.pci_device) == (0x1B, 0)
    assert (dump.driver_version, dump.cuda_version, dump.generator) == ("580.159", "13.0", "UD")
    assert dump.timestamp == 1764686400 and dump.generation_flags == 0x2F
    grid = dump.faulting_grid
    assert (grid.grid_id, grid.context_id, grid.function_entry, grid.module_handle) == (11, 0x1234, ENTRY, MODULE)
    assert (grid.grid_dim, grid.block_dim, grid.cluster_dim, grid.host_tid) == ((4, 2, 1), (128, 1, 1), None, 958)
    assert grid.symbol == "_Z9far_writePi" and grid.kernel == "far_write"
    exc = dump.exception
    assert (exc.code, exc.text, exc.signal, exc.cudbg) == (14, "Warp Illegal Address", "CUDA_EXCEPTION_14",
                                                          "CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS")
    assert dump.error_pc == PC
    assert dump.function_at(PC) == ("_Z9far_writePi", 0x110)
    assert dump.function_at(ENTRY + 0x400) == ("other_kernel", 0) and dump.function_at(0x10) is None
    assert dump.lane_fault_count == 2                          # lane 31 has no exception
    assert [(l.sm, l.warp, l.lane, l.block, l.thread, l.grid_id) for l in dump.lane_faults] == \
        [(7, 3, 0, (2, 1, 0), (5, 0, 0), 11), (7, 3, 1, (2, 1, 0), (6, 0, 0), 11)]
    assert dump.lane_faults[0].virtual_pc == PC and dump.lane_faults[0].offset_pc == 0x110
    (warp,) = dump.warp_faults
    assert (warp.sm, warp.warp, warp.error_pc, warp.block, warp.active_lanes) == (7, 3, PC, (2, 1, 0), 0xF)
    assert dump.sm_faults == ()
    assert [name for _s, _z, name in dump.functions] == ["_Z9far_writePi", "other_kernel"]   # not the object


def test_synthetic_dump_event():
    parsed = CudaCoredumpParser().parse(source_of(gpu_dump(), "node2/core_1733150000_gpu-2_4242.nvcudmp"))
    assert parsed.kind == "cuda-coredump" and parsed.problems == [] and parsed.unparsed_lines is None
    (event,) = parsed.events
    assert event.kind == Kind.CORE_DUMP and event.pid == 4242 and event.line == 0
    a = event.attrs
    assert (a["kernel"], a["kernel_symbol"], a["fault"], a["exception_code"]) == \
        ("far_write", "_Z9far_writePi", "Warp Illegal Address", 14)
    assert a["pc"] == hex(PC) and a["pc_function"] == "far_write+272"
    assert (a["grid"], a["block"], a["grid_id"]) == ((4, 2, 1), (128, 1, 1), 11)
    assert (a["device"], a["device_index"], a["sm_arch"], a["sm"], a["warp"], a["lane"]) == \
        ("NVIDIA H200", 0, "sm_90", 7, 3, 0)
    assert a["faulting_threads"] == ["thread (5,0,0) block (2,1,0)", "thread (6,0,0) block (2,1,0)"]
    assert a["faulting_thread_count"] == 2 and a["driver"] == "580.159" and a["cuda_version"] == "13.0"
    assert a["core_type"] == "gpu" and a["host_tid"] == 958
    assert event.message == ("GPU core dump: Warp Illegal Address (CUDA_EXCEPTION_14) in kernel "
                             f"far_write<<<(4,2,1),(128,1,1)>>> at PC {PC:#x} on device 0 (NVIDIA H200, sm_90)")


def test_kernel_named_without_cxxfilt(monkeypatch):
    import forensics.names
    monkeypatch.setattr(forensics.names.shutil, "which", lambda _name: None)
    grid = read(gpu_dump(kernel="_ZN4vllm15rms_norm_kernelEPfi")).faulting_grid
    assert grid.demangled is None and grid.kernel == "vllm::rms_norm_kernel"


def test_plain_c_kernel_keeps_its_name():
    grid = read(gpu_dump(kernel="oneshot_allreduce_flag_kernel")).faulting_grid
    assert grid.symbol == grid.kernel == "oneshot_allreduce_flag_kernel" and grid.demangled is None


def test_misaligned_address_and_unknown_codes():
    assert read(gpu_dump(exception=6)).exception.text == "Warp Misaligned Address"
    unknown = read(gpu_dump(exception=999)).exception
    assert (unknown.code, unknown.text, unknown.signal) == (999, "Device Unknown Exception", "CUDA_EXCEPTION_0")


def test_sm_row_names_the_exception_when_the_warps_exited():
    dump = read(gpu_dump(lanes=(), warp_pc_valid=0, sm_exception=14))
    assert dump.lane_faults == () and dump.warp_faults == ()
    (sm,) = dump.sm_faults
    assert (sm.device, sm.sm, sm.error_pc) == (0, 7, PC)
    assert dump.exception.text == "Warp Illegal Address" and dump.error_pc == PC
    assert dump.faulting_grid.kernel == "far_write"            # the only grid on that device
    event = dump_event(dump, "core_5.nvcudmp", 5)
    assert event.attrs["sm"] == 7 and event.attrs.get("lane") is None


def test_old_driver_sm_rows_without_exception_fields():
    dump = read(gpu_dump(lanes=(), warp_pc_valid=0, sm_row=8))
    assert dump.sm_faults == () and dump.exception is None and dump.error_pc is None
    assert any("no lane, warp or SM row records an exception" in p for p in dump.problems)
    event = dump_event(dump, "core_5.nvcudmp", 5)
    assert event.message.startswith("GPU core dump without a recorded exception in kernel far_write")


def test_cluster_dimensions_are_read_when_set():
    assert read(gpu_dump(cluster=(2, 1, 1))).faulting_grid.cluster_dim == (2, 1, 1)


def test_dump_without_meta_section():
    dump = read(gpu_dump(meta=False))
    assert dump.driver_version is None and dump.generation_flag_names == ()
    assert any("no .cudbg.meta section" in p for p in dump.problems)
    assert dump.faulting_grid.kernel == "far_write"


def test_lanes_beyond_the_cap_are_counted_not_kept():
    lanes = tuple((i % 32, (i, 0, 0)) for i in range(MAX_LANES_KEPT + 100))
    dump = bounded(lambda: read(gpu_dump(lanes=lanes)), seconds=3.0, mib=None)
    assert dump.lane_fault_count == MAX_LANES_KEPT + 100 and len(dump.lane_faults) == MAX_LANES_KEPT
    event = dump_event(dump, "core_1.nvcudmp", 1)
    assert len(event.attrs["faulting_threads"]) == 8 and event.attrs["faulting_thread_count"] == MAX_LANES_KEPT + 100


def test_registry_and_sniffing_route_gpu_dumps_to_this_reader(tmp_path):
    path = tmp_path / "core_77.nvcudmp"
    path.write_bytes(gpu_dump())
    source = sniff(path, path.name)
    assert source.kind == "cuda-coredump"
    assert isinstance(registry.reader_for("cuda-coredump"), CudaCoredumpParser)
    (event,) = parse_source(source).events
    assert event.pid == 77 and event.attrs["kernel"] == "far_write"


# --- knowledge and names ---------------------------------------------------------------------

def test_exception_catalogue_matches_cuda_gdb_names():
    assert exception_info(14).text == "Warp Illegal Address" and exception_info(14).signal == "CUDA_EXCEPTION_14"
    assert exception_info(15).signal == "CUDA_EXCEPTION_16"          # numbers diverge above 14
    assert exception_info(17).signal == "CUDA_EXCEPTION_18" and exception_info(18).signal == "CUDA_EXCEPTION_17"
    assert exception_info(6).text == "Warp Misaligned Address"
    unknown = exception_info(0xFFFFFFFF)
    assert unknown.cudbg == "CUDBG_EXCEPTION_UNKNOWN" and unknown.text == "Device Unknown Exception"
    assert exception_info(999).cudbg == "CUDBG_EXCEPTION_0x3e7"


def test_generation_flags_decode():
    assert generation_flag_names(0x2F) == ("skip_nonrelocated_elf_images", "skip_global_memory",
                                           "skip_shared_memory", "skip_local_memory", "skip_constbank_memory")
    assert generation_flag_names(0x10 | 0x100) == ("skip_abort", "0x100")
    assert generation_flag_names(0) == ()


def test_pid_only_from_known_templates():
    assert pid_from_name("dumps/core_885.nvcudmp") == 885
    assert pid_from_name("core_885.nvcudmp.gz") == 885
    assert pid_from_name("core_1733150000_gpu-node-3_4242.nvcudmp") == 4242
    assert pid_from_name("cuda_coredump_gpu-node-3.4242.1733150000") == 4242
    assert pid_from_name("core.nvcudmp") is None
    assert pid_from_name("rank3_885.nvcudmp") is None
    assert pid_from_name("core_99999999.nvcudmp") is None
    assert pid_from_name("core_0.nvcudmp") is None


# --- the real dump against cuda-gdb -----------------------------------------------------------

def cuda_gdb_reading(text: str) -> dict:
    """The facts cuda-gdb printed for the dump (target cudacore + info cuda ...)."""
    lines = text.splitlines()
    out = {"exception": re.search(r"^CUDA Exception: (.+)$", text, re.M).group(1).strip(),
           "pc": int(re.search(r"triggered at PC (0x[0-9a-f]+)", text).group(1), 16)}
    frame = re.search(r"#0\s+(?:0x[0-9a-f]+ in )?(\S+?)<<<\((\d+),(\d+),(\d+)\),\((\d+),(\d+),(\d+)\)>>>", text)
    out["bt_kernel"] = frame.group(1)
    out["grid"] = tuple(int(frame.group(i)) for i in (2, 3, 4))
    out["block"] = tuple(int(frame.group(i)) for i in (5, 6, 7))
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["Kernel", "Parent"])
    row = lines[head + 1]
    out["kernel"] = re.match(r"^[* ]\s*\d+\s+\S+\s+\d+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+([^(]+)\(", row).group(2)
    out["grid_id"] = int(re.match(r"^[* ]\s*\d+\s+\S+\s+\d+\s+(\d+)", row).group(1))
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["Dev", "PCI"])
    dev = re.match(r"^[* ]\s*\d+\s+\S+\s+(.+?)\s{2,}(\S+)\s+(sm_\d+)\s+(\d+)\s+(\d+)\s+(\d+)", lines[head + 1])
    out.update(device=dev.group(1), device_type=dev.group(2), sm_arch=dev.group(3), sm_count=int(dev.group(4)),
               warps_per_sm=int(dev.group(5)), lanes_per_warp=int(dev.group(6)))
    focus = re.search(r"device (\d+), sm (\d+), warp (\d+), lane (\d+)", text)
    out["sm"], out["warp"], out["lane"] = int(focus.group(2)), int(focus.group(3)), int(focus.group(4))
    out["fault_threads"] = [tuple(int(v) for v in m.groups()) for m in
                            re.finditer(r"^[* ]\s*\d+ active 0x[0-9a-f]+\s+\((\d+),(\d+),(\d+)\) " +
                                        re.escape(out["exception"]), text, re.M)]
    out["pc_function"] = re.search(r"<(\S+\+\d+)>", text).group(1)
    return out


@needs_real_dump
def test_reader_agrees_with_cuda_gdb_on_the_real_dump():
    gdb = cuda_gdb_reading(TRANSCRIPT.read_text())
    dump = bounded(lambda: read_cuda_core_file(str(DUMP)), seconds=2.0)
    grid = dump.faulting_grid
    device = dump.device(dump.lane_faults[0].device)
    assert dump.problems == ()
    assert grid.kernel == gdb["kernel"] == gdb["bt_kernel"] == "oneshot_allreduce_flag_kernel"
    assert grid.grid_id == gdb["grid_id"] == 7
    assert dump.exception.text == gdb["exception"] == "Warp Illegal Address"
    assert dump.exception.signal == "CUDA_EXCEPTION_14"
    assert dump.error_pc == gdb["pc"] == 0x7F0A877A1B10
    assert grid.grid_dim == gdb["grid"] and grid.block_dim == gdb["block"]
    assert (device.name, device.type, device.sm_type) == (gdb["device"], gdb["device_type"], gdb["sm_arch"])
    assert (device.sm_count, device.warps_per_sm, device.lanes_per_warp) == \
        (gdb["sm_count"], gdb["warps_per_sm"], gdb["lanes_per_warp"])
    lane = dump.lane_faults[0]
    assert (lane.sm, lane.warp, lane.lane) == (gdb["sm"], gdb["warp"], gdb["lane"])
    assert [fault.thread for fault in dump.lane_faults] == gdb["fault_threads"]
    name, offset = dump.function_at(dump.error_pc)
    assert f"{name}+{offset}" == gdb["pc_function"]
    assert dump.driver_version == "580.159" and dump.cuda_version == "13.0"
    assert dump.generation_flag_names == ("skip_nonrelocated_elf_images", "skip_global_memory",
                                          "skip_shared_memory", "skip_local_memory", "skip_constbank_memory")


@needs_real_dump
def test_parser_event_for_the_real_dump():
    parsed = CudaCoredumpParser().parse(sniff(DUMP, "tp4/core_885.nvcudmp"))
    assert parsed.kind == "cuda-coredump" and parsed.lines is None and parsed.unparsed_lines is None
    (event,) = parsed.events
    assert event.kind == Kind.CORE_DUMP and event.pid == 885 and event.line == 0
    a = event.attrs
    assert a["kernel"] == "oneshot_allreduce_flag_kernel"
    assert a["fault"] == "Warp Illegal Address" and a["exception_code"] == 14
    assert a["pc"] == "0x7f0a877a1b10" and a["grid"] == (1, 1, 1) and a["block"] == (32, 1, 1)
    assert a["device"] == "NVIDIA H200" and a["sm_arch"] == "sm_90" and a["driver"] == "580.159"
    assert a["faulting_threads"] == [f"thread ({i},0,0) block (0,0,0)" for i in range(4)]
    assert a["faulting_thread_count"] == 4 and a["pid"] == 885
    assert "oneshot_allreduce_flag_kernel" in event.message and "Warp Illegal Address" in event.message


@needs_real_dump
def test_gzipped_real_dump_reads_the_same(tmp_path):
    gz = tmp_path / "core_885.nvcudmp.gz"
    gz.write_bytes(gzip.compress(DUMP.read_bytes()))
    source = sniff(gz, gz.name)
    assert source.kind == "cuda-coredump" and source.compression == "gzip"
    (event,) = CudaCoredumpParser().parse(source).events
    assert event.attrs["kernel"] == "oneshot_allreduce_flag_kernel" and event.pid == 885


@needs_real_dump
def test_analyze_names_the_kernel_of_the_real_dump(tmp_path):
    shutil.copy(DUMP, tmp_path / DUMP.name)
    case = analyze(str(tmp_path))
    assert [s.kind for s in case.sources] == ["cuda-coredump"]
    assert any(e.kind == Kind.CORE_DUMP and e.attrs["kernel"] == "oneshot_allreduce_flag_kernel"
               for e in case.events)


# --- hostile input: the real dump ------------------------------------------------------------

def _sections(raw: bytes) -> dict[str, tuple[int, int]]:
    """name -> (header offset, index) of every section header of an ELF64 LE image."""
    shoff, = struct.unpack_from("<Q", raw, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", raw, 0x3C)
    str_off = struct.unpack_from("<Q", raw, shoff + shstrndx * 64 + 24)[0]
    out = {}
    for i in range(shnum):
        h = shoff + i * 64
        name_at = str_off + struct.unpack_from("<I", raw, h)[0]
        out.setdefault(raw[name_at:raw.index(b"\0", name_at)].decode(), (h, i))
    return out


FIELDS = {"sh_name": (0, "I"), "sh_type": (4, "I"), "sh_offset": (24, "Q"), "sh_size": (32, "Q"),
          "sh_link": (40, "I"), "sh_info": (44, "I"), "sh_entsize": (56, "Q")}


def _set_field(raw: bytearray, name: str, field: str, value: int) -> bytearray:
    h, _ = _sections(bytes(raw))[name]
    off, fmt = FIELDS[field]
    struct.pack_into("<" + fmt, raw, h + off, value)
    return raw


@needs_real_dump
def test_sm_table_of_the_real_dump_names_the_exception_when_lanes_and_warps_exited(tmp_path):
    raw = bytearray(DUMP.read_bytes())
    secs = _sections(bytes(raw))
    lane_off, lane_size = struct.unpack_from("<QQ", raw, secs[".cudbg.lntbl.dev0.sm124.cta0.wp0"][0] + 24)
    for row in range(lane_off, lane_off + lane_size, 56):
        struct.pack_into("<I", raw, row + 32, 0)          # lane exception -> none
    wp_off = struct.unpack_from("<Q", raw, secs[".cudbg.wptbl.dev0.sm124.cta0"][0] + 24)[0]
    struct.pack_into("<I", raw, wp_off + 24, 0)           # warp errorPCValid -> 0
    path = tmp_path / "core_1.nvcudmp"
    path.write_bytes(bytes(raw))
    dump = read_cuda_core_file(str(path))
    assert dump.lane_faults == () and dump.warp_faults == ()
    assert dump.exception.text == "Warp Illegal Address" and dump.error_pc == 0x7F0A877A1B10
    assert dump.faulting_grid.kernel == "oneshot_allreduce_flag_kernel"


@needs_real_dump
def test_real_dump_truncated_at_many_cut_points(tmp_path):
    raw = DUMP.read_bytes()
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    cuts = sorted({*range(20, len(raw), 8191), 20, 63, 64, 65, shoff, shoff + 64 * 3 + 5,
                   len(raw) - 1, len(raw) - 64, len(raw) - 4205 - 64})
    for cut in cuts:
        parsed = parse_bytes(tmp_path, raw[:cut], f"cut_{cut}.nvcudmp", mib=None)
        assert any(w in p for p in parsed.problems for w in ("truncated", "cut", "past end of file")), \
            (cut, parsed.problems)


@needs_real_dump
@pytest.mark.parametrize("section, field, value, expect", [
    (".cudbg.wptbl.dev0.sm124.cta0", "sh_offset", 1 << 40,
     "section .cudbg.wptbl.dev0.sm124.cta0 starts past end of file: dump truncated"),
    (".cudbg.wptbl.dev0.sm124.cta0", "sh_size", 1 << 62, "extends past end of file: dump truncated"),
    (".cudbg.lntbl.dev0.sm124.cta0.wp0", "sh_entsize", 0, "row size 0"),
    (".cudbg.smtbl.dev0", "sh_entsize", 0, "row size 0"),
    (".cudbg.lntbl.dev0.sm124.cta0.wp0", "sh_link", 147, "not a warp table"),          # links to itself
    (".cudbg.wptbl.dev0.sm124.cta0", "sh_link", 9999, "not a CTA table"),
    (".cudbg.wptbl.dev0.sm124.cta0", "sh_info", 77, "refers to row 77"),
    (".cudbg.gridtbl.dev0", "sh_size", 0, "no grid table rows"),
    (".cudbg.meta", "sh_size", 4, "fewer than 32"),
    (".cudbg.meta", "sh_offset", 1 << 50, "driver version unknown"),
    (".strtab", "sh_offset", 1 << 33, "names of devices unknown"),
    (".cudbg.devtbl", "sh_type", 1, "no device table"),
])
def test_corrupt_section_headers_of_the_real_dump(tmp_path, section, field, value, expect):
    raw = _set_field(bytearray(DUMP.read_bytes()), section, field, value)
    parsed = parse_bytes(tmp_path, bytes(raw))
    assert any(expect in p for p in parsed.problems), parsed.problems
    assert parsed.events, "a damaged table loses its facts, not the whole dump"


@needs_real_dump
def test_corrupt_cubins_lose_only_the_kernel_name(tmp_path):
    raw = bytearray(DUMP.read_bytes())
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    for i in range(struct.unpack_from("<H", raw, 0x3C)[0]):      # every relocated cubin: claim a huge size
        if struct.unpack_from("<I", raw, shoff + i * 64 + 4)[0] == SHT_RELF_IMG:
            struct.pack_into("<Q", raw, shoff + i * 64 + 32, 1 << 50)
    parsed = parse_bytes(tmp_path, bytes(raw))
    (event,) = parsed.events
    assert event.attrs.get("kernel") is None and event.attrs["fault"] == "Warp Illegal Address"
    assert "in kernel unknown" in event.message
    assert any("kernel name unknown" in p for p in parsed.problems)


@needs_real_dump
@pytest.mark.parametrize("offset, fmt, value, expect", [
    (0x28, "<Q", 1 << 40, "no readable section headers"),
    (0x3C, "<H", 0xFFF0, "dump truncated"),
    (0x3A, "<H", 8, "no readable section headers"),
    (0x3E, "<H", 0x7FFF, "section names unknown"),
    (0x12, "<H", 62, "not a CUDA GPU core dump"),
    (0x10, "<H", 2, "not a CUDA GPU core dump"),
])
def test_corrupt_elf_header_of_the_real_dump(offset, fmt, value, expect):
    raw = bytearray(DUMP.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    # the reader directly, whatever sniffing would call the damaged file
    parsed = bounded(lambda: CudaCoredumpParser().parse(source_of(bytes(raw), "core_7.nvcudmp")), mib=None)
    assert any(expect in p for p in parsed.problems), parsed.problems


@needs_real_dump
def test_random_corruption_of_the_real_dump_never_escapes():
    raw = DUMP.read_bytes()
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    rng = random.Random(1234)
    started = time.monotonic()
    for _trial in range(40):
        data = bytearray(raw)
        for _ in range(40):       # bytes of the section header table, the ELF header and the small tables
            pos = rng.choice([rng.randrange(shoff, len(raw)), rng.randrange(0, 64), rng.randrange(243344, 251024)])
            data[pos] = rng.randrange(256)
        dump = None
        try:
            dump = read(bytes(data))
        except CoreDumpError as exc:
            assert "\n" not in str(exc)
        if dump is not None:
            dump_event(dump, "core_1.nvcudmp", 1)
    assert time.monotonic() - started < 10


def test_not_elf_empty_and_wrong_machine(tmp_path):
    for name, data, expect in [("empty.nvcudmp", b"", "empty"),
                               ("junk.nvcudmp", b"hello world, not a dump" * 10, "not an ELF file"),
                               ("short.nvcudmp", b"\x7fELF\x02\x01", "cut inside the ELF header")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(CoreDumpError, match=expect):
            read_cuda_core_file(str(path))
    with pytest.raises(CoreDumpError, match="not a CUDA GPU core dump"):
        read_cuda_core_file(str(GCORE))


@pytest.mark.parametrize("name, expect", [
    ("elf_sections_past_end.nvcudmp", "section header table starts past end of file"),
    ("truncated.nvcudmp", "dump truncated"),
])
def test_hostile_corpus_gpu_dumps(name, expect):
    path = HOSTILE / name
    if not path.is_file():
        pytest.skip(f"{name} not in this checkout")
    parsed = parse_quickly(path)
    assert parsed.events == [] and any(expect in p for p in parsed.problems), parsed.problems
    assert parsed.problems[0].startswith(name)


# --- hostile input: synthetic dumps ------------------------------------------------------------

def _link(index: int, link: int | None = None, info: int | None = None):
    def patch(sections):
        if link is not None:
            sections[index - 1]["link"] = link
        if info is not None:
            sections[index - 1]["info"] = info
    return patch


@pytest.mark.parametrize("patch, expect", [
    (_link(LNTBL, link=LNTBL), "links to section 7, which is not a warp table"),        # to itself
    (_link(WPTBL, link=LNTBL), "links to section 7, which is not a CTA table"),        # a cycle wp <-> ln
    (_link(CTATBL, link=0), "links to section 0, which is not a SM table"),
    (_link(GRIDTBL, link=10_000), "not a device table"),
    (_link(GRIDTBL, info=1 << 31), "refers to row 2147483648"),
    (_link(RELFIMG, link=RELFIMG), "kernel name unknown"),
])
def test_bad_links_between_tables(patch, expect):
    dump = bounded(lambda: read(gpu_dump(patch=patch)))
    assert any(expect in p for p in dump.problems), dump.problems


def test_out_of_bounds_string_offsets_give_no_name():
    dump = read(gpu_dump(device_name_offset=1 << 60))
    assert dump.devices[0].name is None and dump.devices[0].sm_type == "sm_90"
    event = dump_event(dump, "core_1.nvcudmp", 1)
    assert "on device 0 (unknown, sm_90)" in event.message


def test_section_names_out_of_bounds_tables_still_found_by_type():
    raw = bytearray(gpu_dump())
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    shnum = struct.unpack_from("<H", raw, 0x3C)[0]
    for i in range(1, shnum - 1):                    # every sh_name but .shstrtab's: far past the table
        struct.pack_into("<I", raw, shoff + i * 64, 0xFFFFFF00)
    dump = bounded(lambda: read(bytes(raw)))
    assert dump.faulting_grid.kernel == "far_write" and dump.exception.code == 14
    assert dump.devices[0].name == "NVIDIA H200"     # .strtab found as the other string table
    assert dump.driver_version == "580.159"


def test_string_table_index_out_of_range():
    raw = bytearray(gpu_dump())
    struct.pack_into("<H", raw, 0x3E, 0xFFFF)        # SHN_XINDEX: the real index is in section 0's sh_link
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    struct.pack_into("<I", raw, shoff + 40, 0)       # ... which points back at section 0
    dump = bounded(lambda: read(bytes(raw)))
    assert any("section names unknown" in p for p in dump.problems)
    assert dump.exception.code == 14 and dump.faulting_grid.kernel == "far_write"


def test_extended_section_count_claiming_a_million_sections():
    raw = bytearray(gpu_dump())
    struct.pack_into("<H", raw, 0x3C, 0)               # e_shnum 0: the count is section 0's sh_size
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    struct.pack_into("<Q", raw, shoff + 32, 1 << 62)
    dump = bounded(lambda: read(bytes(raw)))
    assert any("section headers claimed" in p for p in dump.problems)
    assert any("section header table extends past end of file" in p for p in dump.problems)
    assert dump.exception.code == 14


@pytest.mark.parametrize("index, field, value, expect", [
    (LNTBL, "sh_entsize", 1 << 62, None),
    (LNTBL, "sh_size", (1 << 64) - 1, "extends past end of file"),
    (GRIDTBL, "sh_entsize", 64, "row size 64, smaller than the 128 bytes"),
    (DEVTBL, "sh_offset", (1 << 64) - 8, "starts past end of file"),
    (META, "sh_size", 1 << 40, "driver version unknown"),
    (STRTAB, "sh_size", 1 << 40, "names of devices unknown"),
])
def test_huge_sizes_and_counts_are_bounded(index, field, value, expect):
    raw = bytearray(gpu_dump())
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    off, fmt = FIELDS[field]
    struct.pack_into("<" + fmt, raw, shoff + index * 64 + off, value)
    dump = bounded(lambda: read(bytes(raw)))
    if expect is None:
        assert dump.lane_faults == () and dump.warp_faults       # a row larger than the table: no lane rows
    else:
        assert any(expect in p for p in dump.problems), dump.problems


@pytest.mark.parametrize("image, expect", [
    (cubin([("_Z9far_writePi", ENTRY, 0x400)], symtab_link=2), "not a string table"),      # .symtab -> itself
    (cubin([("_Z9far_writePi", ENTRY, 0x400)], st_name_override=1 << 30), "no symbol at function entry"),
    (b"\x7fELF\x02\x01\x01" + bytes(9), "cut inside the ELF header"),
    (b"garbage, not a cubin" * 3, "not an ELF file"),
    (b"", "no symbol at function entry"),
])
def test_hostile_cubins_lose_only_the_kernel_name(image, expect):
    dump = bounded(lambda: read(gpu_dump(cubin_image=image)))
    assert dump.faulting_grid.kernel is None and dump.exception.text == "Warp Illegal Address"
    assert dump.error_pc == PC and dump.devices[0].name == "NVIDIA H200"
    assert any(expect in p for p in dump.problems), dump.problems


def test_cubin_with_section_headers_past_its_end():
    image = bytearray(cubin([("k", ENTRY, 0x400)]))
    struct.pack_into("<Q", image, 0x28, 1 << 40)
    dump = read(gpu_dump(cubin_image=bytes(image)))
    assert dump.faulting_grid.kernel is None
    assert any("kernel name unknown" in p for p in dump.problems)


def test_grid_of_a_module_without_a_cubin():
    dump = read(gpu_dump(module=0xBAD))
    assert dump.faulting_grid.kernel is None
    assert any("no relocated cubin of module 0xbad" in p for p in dump.problems)


def test_synthetic_dump_truncated_everywhere():
    raw = gpu_dump()
    started = time.monotonic()
    for cut in range(0, len(raw), 7):
        try:
            dump = read(raw[:cut])
        except CoreDumpError as exc:
            assert "\n" not in str(exc)
            continue
        assert dump.problems, cut                    # a cut dump never reads as a complete one
    assert time.monotonic() - started < 10


def test_random_corruption_of_synthetic_dumps_never_escapes():
    base = gpu_dump()
    rng = random.Random(20261203)
    started = time.monotonic()
    for _trial in range(250):
        data = bytearray(base)
        for _ in range(rng.choice([1, 4, 16])):
            pos = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[pos] = rng.randrange(256)
            else:
                value = rng.choice([0, 1, 0xFF, 0xFFFFFFFF, 1 << 40, (1 << 64) - 1, len(data)])
                struct.pack_into("<Q", data, min(pos - pos % 4, len(data) - 8), value)
        parsed = CudaCoredumpParser().parse(source_of(bytes(data), "core_3.nvcudmp"))
        assert all("reader failed" not in p for p in parsed.problems)
        assert parsed.events or parsed.problems
    assert time.monotonic() - started < 10


def test_a_large_dump_reads_only_its_tables(tmp_path):
    """Global memory sections (the bulk of a dump without skip flags) are never read."""
    big = {"name": ".cudbg.global.dev0", "type": 1, "data": b"\xAB" * (48 << 20)}
    raw = gpu_dump(patch=lambda sections: sections.append(big))
    parsed = parse_bytes(tmp_path, raw, "core_12.nvcudmp", seconds=2.0, mib=8)
    (event,) = parsed.events
    assert event.attrs["kernel"] == "far_write" and parsed.problems == []
