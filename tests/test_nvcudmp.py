"""The pure-Python GPU core dump reader against cuda-gdb, and against hostile input.

The acceptance test reads the real dump recorded on an H200 (tests/data/gpu/
tp4_oob_write_coredump/core_885.nvcudmp) and compares field by field with cuda-gdb's own
reading of the same file, saved next to it (cuda-gdb_cudacore.txt).
"""

from __future__ import annotations

import gzip
import re
import shutil
import struct
import time
from pathlib import Path

import pytest

from forensics.events import Kind
from forensics.parsers.elfcore import CoreDumpError
from forensics.parsers.nvcudmp import (CudaCoredumpParser, exception_info, generation_flag_names,
                                       pid_from_name, plain_name, read_cuda_core_file, _itanium_name)
from forensics.sources import sniff

BUNDLE = Path(__file__).parent / "data" / "gpu" / "tp4_oob_write_coredump"
DUMP = BUNDLE / "core_885.nvcudmp"
TRANSCRIPT = BUNDLE / "cuda-gdb_cudacore.txt"

pytestmark = pytest.mark.skipif(not DUMP.is_file(), reason="real GPU core dump not in this checkout")


def cuda_gdb_reading(text: str) -> dict:
    """The facts cuda-gdb printed for the dump (target cudacore + info cuda ...)."""
    lines = text.splitlines()
    out = {}
    out["exception"] = re.search(r"^CUDA Exception: (.+)$", text, re.M).group(1).strip()
    out["pc"] = int(re.search(r"triggered at PC (0x[0-9a-f]+)", text).group(1), 16)
    frame = re.search(r"#0\s+(?:0x[0-9a-f]+ in )?(\S+?)<<<\((\d+),(\d+),(\d+)\),\((\d+),(\d+),(\d+)\)>>>", text)
    out["bt_kernel"] = frame.group(1)
    out["grid"] = tuple(int(frame.group(i)) for i in (2, 3, 4))
    out["block"] = tuple(int(frame.group(i)) for i in (5, 6, 7))
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["Kernel", "Parent"])
    row = lines[head + 1]
    out["kernel"] = re.match(r"^[* ]\s*\d+\s+\S+\s+\d+\s+(\d+)\s+\S+\s+\S+\s+\S+\s+\S+\s+([^(]+)\(", row).group(2)
    out["grid_id"] = int(re.match(r"^[* ]\s*\d+\s+\S+\s+\d+\s+(\d+)", row).group(1))
    head = next(i for i, l in enumerate(lines) if l.split()[:2] == ["Dev", "PCI"])
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


def test_reader_agrees_with_cuda_gdb_on_the_real_dump():
    gdb = cuda_gdb_reading(TRANSCRIPT.read_text())
    dump = read_cuda_core_file(str(DUMP))
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
    assert [l.thread for l in dump.lane_faults] == gdb["fault_threads"]
    name, offset = dump.function_at(dump.error_pc)
    assert f"{name}+{offset}" == gdb["pc_function"]
    # Meta: what the recording's environment asked for.
    assert dump.driver_version == "580.159" and dump.cuda_version == "13.0"
    assert dump.generation_flag_names == ("skip_nonrelocated_elf_images", "skip_global_memory",
                                          "skip_shared_memory", "skip_local_memory", "skip_constbank_memory")


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
    assert a["faulting_threads"][:2] == ["thread (0,0,0) block (0,0,0)", "thread (1,0,0) block (0,0,0)"]
    assert a["faulting_thread_count"] == 4 and a["pid"] == 885
    assert "oneshot_allreduce_flag_kernel" in event.message and "Warp Illegal Address" in event.message


def test_gzipped_dump_reads_the_same(tmp_path):
    gz = tmp_path / "core_885.nvcudmp.gz"
    gz.write_bytes(gzip.compress(DUMP.read_bytes()))
    source = sniff(gz, gz.name)
    assert source.kind == "cuda-coredump" and source.compression == "gzip"
    (event,) = CudaCoredumpParser().parse(source).events
    assert event.attrs["kernel"] == "oneshot_allreduce_flag_kernel" and event.pid == 885


def test_analyze_registers_the_parser(tmp_path):
    from forensics.case import analyze
    shutil.copy(DUMP, tmp_path / DUMP.name)
    case = analyze(str(tmp_path))
    assert [s.kind for s in case.sources] == ["cuda-coredump"]
    assert any(e.kind == Kind.CORE_DUMP and e.attrs["kernel"] == "oneshot_allreduce_flag_kernel"
               for e in case.events)


# --- SM rows keep the exception when the warps are gone ------------------------------

def _sections(raw: bytes) -> dict[str, tuple[int, int]]:
    """name -> (header offset, index) of every section header of an ELF64 LE image."""
    shoff, = struct.unpack_from("<Q", raw, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", raw, 0x3C)
    str_off = struct.unpack_from("<Q", raw, shoff + shstrndx * 64 + 24)[0]
    out = {}
    for i in range(shnum):
        h = shoff + i * 64
        name_at = str_off + struct.unpack_from("<I", raw, h)[0]
        name = raw[name_at:raw.index(b"\0", name_at)].decode()
        out.setdefault(name, (h, i))
    return out


def _field(raw: bytearray, name: str, field: str, value: int) -> bytearray:
    offsets = {"sh_type": (4, "I"), "sh_offset": (24, "Q"), "sh_size": (32, "Q"), "sh_link": (40, "I"),
               "sh_info": (44, "I"), "sh_entsize": (56, "Q")}
    h, _ = _sections(bytes(raw))[name]
    off, fmt = offsets[field]
    struct.pack_into("<" + fmt, raw, h + off, value)
    return raw


def _read(tmp_path: Path, raw: bytes, name: str = "core_1.nvcudmp"):
    path = tmp_path / name
    path.write_bytes(raw)
    return read_cuda_core_file(str(path))


def test_sm_table_names_the_exception_when_lanes_and_warps_exited(tmp_path):
    raw = bytearray(DUMP.read_bytes())
    secs = _sections(bytes(raw))
    lane_h, _ = secs[".cudbg.lntbl.dev0.sm124.cta0.wp0"]
    lane_off, lane_size = struct.unpack_from("<QQ", raw, lane_h + 24)
    for row in range(lane_off, lane_off + lane_size, 56):
        struct.pack_into("<I", raw, row + 32, 0)          # lane exception -> none
    wp_off = struct.unpack_from("<Q", raw, secs[".cudbg.wptbl.dev0.sm124.cta0"][0] + 24)[0]
    struct.pack_into("<I", raw, wp_off + 24, 0)           # warp errorPCValid -> 0
    dump = _read(tmp_path, bytes(raw))
    assert dump.lane_faults == () and dump.warp_faults == ()
    assert dump.exception.text == "Warp Illegal Address" and dump.error_pc == 0x7F0A877A1B10
    assert dump.faulting_grid.kernel == "oneshot_allreduce_flag_kernel"


# --- hostile input: a clear problem or CoreDumpError, never a traceback, fast ------------

def _parse_quickly(path: Path, relpath: str):
    start = time.perf_counter()
    parsed = CudaCoredumpParser().parse(sniff(path, relpath))
    assert time.perf_counter() - start < 1.0, relpath
    return parsed


def test_truncated_copies_at_many_cut_points(tmp_path):
    raw = DUMP.read_bytes()
    cuts = sorted({*range(0, len(raw), 4099), 1, 15, 16, 63, 64, 65, len(raw) - 1, len(raw) - 64,
                   len(raw) - 4205 - 64, 255229, 255229 + 64 * 100})
    for cut in cuts:
        path = tmp_path / f"cut_{cut}.nvcudmp"
        path.write_bytes(raw[:cut])
        parsed = _parse_quickly(path, path.name)
        if cut < 20:
            continue  # too short to be recognised as a GPU dump: sources.py reports it
        assert parsed.problems, cut
        assert any("truncated" in p or "cut" in p or "past end of file" in p for p in parsed.problems), \
            (cut, parsed.problems)
        for problem in parsed.problems:
            assert "Traceback" not in problem and "parser failed" not in problem


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
    (".strtab", "sh_offset", 1 << 33, "names of devices unknown"),
])
def test_corrupt_section_headers_give_a_clear_problem(tmp_path, section, field, value, expect):
    raw = _field(bytearray(DUMP.read_bytes()), section, field, value)
    path = tmp_path / "core_9.nvcudmp"
    path.write_bytes(bytes(raw))
    parsed = _parse_quickly(path, path.name)
    assert any(expect in p for p in parsed.problems), parsed.problems


def test_corrupt_cubin_loses_only_the_kernel_name(tmp_path):
    raw = bytearray(DUMP.read_bytes())
    secs = [h for h in range(struct.unpack_from("<H", raw, 0x3C)[0])]
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    for i in secs:   # every relocated cubin: claim a huge size
        if struct.unpack_from("<I", raw, shoff + i * 64 + 4)[0] == 0x80000007:
            struct.pack_into("<Q", raw, shoff + i * 64 + 32, 1 << 50)
    dump = _read(tmp_path, bytes(raw))
    assert dump.faulting_grid.kernel is None
    assert dump.exception.text == "Warp Illegal Address"
    assert any("kernel name unknown" in p for p in dump.problems)


def test_cubin_symtab_linking_to_itself(tmp_path):
    raw = bytearray(DUMP.read_bytes())
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    cubin_off = struct.unpack_from("<Q", raw, shoff + 13 * 64 + 24)[0]
    c_shoff = struct.unpack_from("<Q", raw, cubin_off + 0x28)[0]
    c_shnum = struct.unpack_from("<H", raw, cubin_off + 0x3C)[0]
    for i in range(c_shnum):
        h = cubin_off + c_shoff + i * 64
        if struct.unpack_from("<I", raw, h + 4)[0] == 2:      # SHT_SYMTAB
            struct.pack_into("<I", raw, h + 40, i)             # sh_link -> itself
    dump = _read(tmp_path, bytes(raw))
    assert dump.faulting_grid.kernel is None
    assert any("not a string table" in p for p in dump.problems)


@pytest.mark.parametrize("header_field, fmt, offset, value, expect", [
    ("e_shoff", "<Q", 0x28, 1 << 40, "no readable section headers"),
    ("e_shnum", "<H", 0x3C, 0xFFF0, "dump truncated"),
    ("e_shentsize", "<H", 0x3A, 8, "no readable section headers"),
    ("e_shstrndx", "<H", 0x3E, 0x7FFF, "section names unknown"),
])
def test_corrupt_elf_header(tmp_path, header_field, fmt, offset, value, expect):
    raw = bytearray(DUMP.read_bytes())
    struct.pack_into(fmt, raw, offset, value)
    path = tmp_path / "core_7.nvcudmp"
    path.write_bytes(bytes(raw))
    parsed = _parse_quickly(path, path.name)
    assert any(expect in p for p in parsed.problems), (header_field, parsed.problems)


def test_random_corruption_of_tables_never_escapes(tmp_path):
    import random
    raw = DUMP.read_bytes()
    shoff = struct.unpack_from("<Q", raw, 0x28)[0]
    rng = random.Random(1234)
    for trial in range(60):
        data = bytearray(raw)
        for _ in range(40):   # flip bytes in the section header table and the small tables
            pos = rng.choice([rng.randrange(shoff, len(raw)), rng.randrange(64, 1000),
                              rng.randrange(243344, 251024)])
            data[pos] = rng.randrange(256)
        path = tmp_path / f"fuzz_{trial}.nvcudmp"
        path.write_bytes(bytes(data))
        parsed = _parse_quickly(path, path.name)
        assert all("parser failed" not in p for p in parsed.problems), parsed.problems


def test_not_elf_empty_and_wrong_machine(tmp_path):
    for name, data, expect in [("empty.nvcudmp", b"", "empty"),
                               ("junk.nvcudmp", b"hello world, not a dump" * 10, "not an ELF file"),
                               ("short.nvcudmp", b"\x7fELF\x02\x01", "cut inside the ELF header")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(CoreDumpError, match=expect):
            read_cuda_core_file(str(path))
    cpu = Path(__file__).parent / "data" / "coredumps" / "gcore_sleeper.10995.core"
    with pytest.raises(CoreDumpError, match="not a CUDA GPU core dump"):
        read_cuda_core_file(str(cpu))


# --- knowledge and names ---------------------------------------------------------------

def test_exception_catalogue_matches_cuda_gdb_names():
    assert exception_info(14).text == "Warp Illegal Address" and exception_info(14).signal == "CUDA_EXCEPTION_14"
    assert exception_info(15).signal == "CUDA_EXCEPTION_16"          # numbers diverge above 14
    assert exception_info(17).signal == "CUDA_EXCEPTION_18" and exception_info(18).signal == "CUDA_EXCEPTION_17"
    assert exception_info(6).text == "Warp Misaligned Address"
    unknown = exception_info(999)
    assert unknown.text == "Device Unknown Exception" and unknown.signal == "CUDA_EXCEPTION_0"


def test_generation_flags_decode():
    assert generation_flag_names(0x2F) == ("skip_nonrelocated_elf_images", "skip_global_memory",
                                           "skip_shared_memory", "skip_local_memory", "skip_constbank_memory")
    assert generation_flag_names(0x10 | 0x100) == ("skip_abort", "0x100")


def test_kernel_names_as_cuda_gdb_prints_them():
    assert plain_name("_Z9far_writePi", "far_write(int*)") == "far_write"
    assert plain_name("_Z9far_writePi") == "far_write"          # without c++filt
    assert _itanium_name("_ZN4vllm15rms_norm_kernelEPfi") == "vllm::rms_norm_kernel"
    assert plain_name("x", "void vllm::act<float, &(silu(float const&))>(float*, float const*, int)") \
        == "vllm::act<float, &(silu(float const&))>"
    assert plain_name("oneshot_allreduce_flag_kernel") == "oneshot_allreduce_flag_kernel"
    assert plain_name("_Zjunk") == "_Zjunk"


def test_pid_only_from_known_templates():
    assert pid_from_name("dumps/core_885.nvcudmp") == 885
    assert pid_from_name("core_885.nvcudmp.gz") == 885
    assert pid_from_name("core_1733150000_gpu-node-3_4242.nvcudmp") == 4242
    assert pid_from_name("cuda_coredump_gpu-node-3.4242.1733150000") == 4242
    assert pid_from_name("core.nvcudmp") is None
    assert pid_from_name("rank3_885.nvcudmp") is None
    assert pid_from_name("core_99999999.nvcudmp") is None
