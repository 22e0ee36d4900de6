"""CUDA GPU core dumps (``.nvcudmp``) read in pure Python: which kernel faulted, how, where.

A GPU core dump is the only device evidence that survives a production crash without
rerunning it under a tool: the driver writes it when a kernel raises an exception
(``CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1``).  cuda-gdb can read it, but it is rarely
installed where the logs are analysed, so the tables are decoded here (layout:
shared/reference/formats.md section 6.1, ``cudacoredump.h``):

    devtbl -> ctxtbl -> modtbl -> relfimg (relocated cubins: their .symtab names kernels)
           -> gridtbl (one row per launched grid: functionEntry, module, dims)
           -> smtbl -> ctatbl -> wptbl -> lntbl (per-lane exception, PC, threadIdx)
    .cudbg.meta (driver / CUDA version, generation flags), .strtab (names)

Parents are found through ``sh_link`` (the parent table's section) and ``sh_info`` (the
row in it); each level must link to the section type above it, so a corrupt ``sh_link``
cannot make the walk loop.  Row sizes always come from ``sh_entsize`` (driver 580 writes
48-byte SM rows where the header documents 40).  Only table sections and the symbol tables
of the cubins that grids point at are read, each at most 64 MiB: global/shared/local
memory sections - the bulk of a dump without skip flags - are never touched.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO, Iterator


from forensics import knowledge, names
from forensics.events import Event, Kind, Severity, freeze
from forensics.parsers.base import ParsedSource
from forensics.parsers.coredumps.elf import (ELF_SYMBOL, MAX_SECTION_BYTES, STT_FUNC, CoreDumpError, ElfImage,
                                             Field, Layout, guarded, open_seekable, parse_core_source)
from forensics.inputs.sources import Source, sniff

EM_CUDA = 190
_SHT = 0x80000000
SHT_RELF_IMG, SHT_DEV_TABLE, SHT_CTX_TABLE, SHT_SM_TABLE = _SHT + 7, _SHT + 9, _SHT + 10, _SHT + 11
SHT_GRID_TABLE, SHT_CTA_TABLE, SHT_WP_TABLE, SHT_LN_TABLE = _SHT + 12, _SHT + 13, _SHT + 14, _SHT + 15
SHT_MOD_TABLE, SHT_META = _SHT + 16, _SHT + 22

@dataclass(frozen=True)
class Table:
    """A table section of the dump: what to call it, and its row."""

    label: str                      # "grid": for the problems a bad table is told by
    row: Layout


# The rows of cudacoredump.h, the fields read here by the header's names (little-endian,
# packed as listed; shared/reference/formats.md section 6.1).  ``size`` is the smallest
# row accepted: the header's documented size of the fields always present (newer drivers
# append fields, so the row's real size always comes from ``sh_entsize``); a field after
# a "since rNNN" mark is None in a dump an older driver wrote.
TABLES = {
    SHT_DEV_TABLE: Table("device", Layout("CudbgDeviceTableEntry", 80, (
        Field("devName", 0, "Q"), Field("devType", 8, "Q"), Field("smType", 16, "Q"),     # .strtab offsets
        Field("devId", 24, "I"), Field("pciBusId", 28, "I"), Field("pciDevId", 32, "I"),
        Field("numSMs", 36, "I"), Field("numWarpsPerSM", 40, "I"), Field("numLanesPerWarp", 44, "I"),
        Field("numRegsPerLane", 48, "I")))),
    SHT_CTX_TABLE: Table("context", Layout("CudbgContextTableEntry", 40, (Field("contextId", 0, "Q"),))),
    SHT_MOD_TABLE: Table("module", Layout("CudbgModuleTableEntry", 8, (Field("moduleHandle", 0, "Q"),))),
    SHT_GRID_TABLE: Table("grid", Layout("CudbgGridTableEntry", 128, (
        Field("gridId64", 0, "Q"), Field("contextId", 8, "Q"), Field("function", 16, "Q"),
        Field("functionEntry", 24, "Q"), Field("moduleHandle", 32, "Q"), Field("parentGridId64", 40, "Q"),
        Field("paramsOffset", 48, "Q"), Field("kernelType", 56, "I"), Field("origin", 60, "I"),
        Field("gridStatus", 64, "I"), Field("numRegs", 68, "I"), Field("gridDim", 72, "3I"),
        Field("blockDim", 84, "3I"), Field("attrLaunchBlocking", 96, "I"), Field("attrHostTid", 100, "I"),
        Field("clusterDim", 104, "3I", since="r525")))),
    # the SM row is where the exception code and error PC survive when the faulting warps
    # already exited (driver 580 writes 48-byte rows where the header documents 40)
    SHT_SM_TABLE: Table("SM", Layout("CudbgSmTableEntry", 8, (
        Field("smId", 0, "I"),
        Field("exception", 8, "I", since="r555"), Field("errorPCValid", 12, "I", since="r555"),
        Field("errorPC", 16, "Q", since="r555")))),
    SHT_CTA_TABLE: Table("CTA", Layout("CudbgCTATableEntry", 24, (Field("gridId64", 0, "Q"),
                                                                  Field("blockIdx", 8, "3I")))),
    SHT_WP_TABLE: Table("warp", Layout("CudbgWarpTableEntry", 28, (
        Field("errorPC", 0, "Q"), Field("warpId", 8, "I"), Field("validLanesMask", 12, "I"),
        Field("activeLanesMask", 16, "I"), Field("isWarpBroken", 20, "I"), Field("errorPCValid", 24, "I")))),
    SHT_LN_TABLE: Table("lane", Layout("CudbgThreadTableEntry", 40, (
        Field("virtualPC", 0, "Q"), Field("physPC", 8, "Q"),       # physPC: the PC's offset in its function
        Field("ln", 16, "I"), Field("threadIdx", 20, "3I"), Field("exception", 32, "I")))),
}
# .cudbg.meta (r565+): one row, the driver that wrote the dump and how
META = Layout("CudbgMetaDataEntry", 32, (
    Field("generatorName", 0, "Q"), Field("driverVersionMajor", 8, "I"), Field("driverVersionMinor", 12, "I"),
    Field("cudaDriverVersionMajor", 16, "I"), Field("cudaDriverVersionMinor", 20, "I"),
    Field("flags", 24, "I"), Field("timestamp", 28, "I")))
MAX_ROWS = 1 << 20                # rows decoded per table, at most
MAX_LANES_KEPT = 4096             # faulting lanes kept (the count stays exact)
MAX_SYMBOLS = 2_000_000           # symbols scanned per cubin


# --- knowledge ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CudaException:
    """A CUDBGException_t code with the names cuda-gdb gives it."""

    code: int
    cudbg: str             # CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS
    signal: str            # CUDA_EXCEPTION_14 ("" when cuda-gdb has no signal for it)
    text: str              # Warp Illegal Address
    scope: str = ""
    host: int | None = None  # the CUDA error the host sees after it (700)


@functools.lru_cache(maxsize=None)
def _exception_table() -> dict[int, CudaException]:
    return {e["code"]: CudaException(**e) for e in knowledge.load("cuda_exceptions")["exception"]}


def exception_info(code: int) -> CudaException:
    """The catalogue entry of ``code``; unlisted codes read as cuda-gdb shows them."""
    found = _exception_table().get(code)
    if found:
        return found
    unknown = knowledge.load("cuda_exceptions")["unknown"]
    return CudaException(code, f"CUDBG_EXCEPTION_{code:#x}" if code != 0xFFFFFFFF else "CUDBG_EXCEPTION_UNKNOWN",
                         unknown["signal"], unknown["text"])


def generation_flag_names(flags: int) -> tuple[str, ...]:
    """Names of the CUDA_COREDUMP_GENERATION_FLAGS bits set in ``flags`` (unknown bits as hex)."""
    names, known = [], 0
    for entry in knowledge.load("cuda_exceptions")["generation_flag"]:
        known |= entry["bit"]
        if flags & entry["bit"]:
            names.append(entry["name"])
    if flags & ~known:
        names.append(hex(flags & ~known))
    return tuple(names)


# --- the decoded dump ---------------------------------------------------------------------

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str | None           # NVIDIA H200
    type: str | None           # GH100GL-A
    sm_type: str | None        # sm_90
    sm_count: int
    warps_per_sm: int
    lanes_per_warp: int
    regs_per_lane: int
    pci_bus: int
    pci_device: int


@dataclass(frozen=True)
class CudaGrid:
    device: int
    grid_id: int
    context_id: int
    function_entry: int
    module_handle: int
    grid_dim: Dim3
    block_dim: Dim3
    cluster_dim: Dim3 | None
    host_tid: int | None
    symbol: str | None         # the cubin symbol at function_entry (mangled if C++)
    demangled: str | None      # c++filt's full signature, when available
    kernel: str | None         # the plain name cuda-gdb shows in `info cuda kernels`


@dataclass(frozen=True)
class LaneFault:
    """A lane whose row carries an exception code."""

    device: int
    sm: int
    warp: int
    lane: int
    grid_id: int | None
    block: Dim3 | None
    thread: Dim3
    exception: CudaException
    virtual_pc: int
    offset_pc: int             # physPC: offset of the PC in its function


@dataclass(frozen=True)
class WarpFault:
    """A warp whose row carries a valid error PC."""

    device: int
    sm: int
    warp: int
    grid_id: int | None
    block: Dim3 | None
    error_pc: int
    valid_lanes: int
    active_lanes: int


@dataclass(frozen=True)
class SmFault:
    """An SM row with an exception: survives when the faulting warps already exited."""

    device: int
    sm: int
    exception: CudaException
    error_pc: int | None


@dataclass(frozen=True)
class CudaCoreDump:
    devices: tuple[CudaDevice, ...]
    driver_version: str | None         # 580.159
    cuda_version: str | None           # 13.0
    generator: str | None              # UD (the driver) or a tool name
    generation_flags: int | None
    generation_flag_names: tuple[str, ...]
    timestamp: int | None              # epoch seconds the dump was written
    grids: tuple[CudaGrid, ...]
    lane_faults: tuple[LaneFault, ...]
    lane_fault_count: int
    warp_faults: tuple[WarpFault, ...]
    sm_faults: tuple[SmFault, ...]
    functions: tuple[tuple[int, int, str], ...]   # (start, size, name) of cubin functions read
    problems: tuple[str, ...] = ()

    # The most direct evidence first: lane, then SM (the SM row names the code when the
    # lanes are gone), else nothing.
    @property
    def exception(self) -> CudaException | None:
        if self.lane_faults:
            return self.lane_faults[0].exception
        if self.sm_faults:
            return self.sm_faults[0].exception
        return None

    @property
    def error_pc(self) -> int | None:
        """The PC cuda-gdb reports as "The exception was triggered at PC"."""
        if self.warp_faults:
            return self.warp_faults[0].error_pc
        for sm in self.sm_faults:
            if sm.error_pc is not None:
                return sm.error_pc
        return self.lane_faults[0].virtual_pc if self.lane_faults else None

    @property
    def faulting_grid(self) -> CudaGrid | None:
        grid_id = next((f.grid_id for f in (*self.lane_faults, *self.warp_faults) if f.grid_id is not None), None)
        device = next((f.device for f in (*self.lane_faults, *self.warp_faults, *self.sm_faults)), None)
        if grid_id is not None:
            return next((g for g in self.grids if g.grid_id == grid_id and g.device == device),
                        next((g for g in self.grids if g.grid_id == grid_id), None))
        candidates = [g for g in self.grids if device is None or g.device == device]
        if len(candidates) == 1:
            return candidates[0]
        pc = self.error_pc
        name = self.function_at(pc)[0] if pc is not None and self.function_at(pc) else None
        return next((g for g in candidates if name and g.symbol == name), None)

    def function_at(self, pc: int) -> tuple[str, int] | None:
        """(symbol, offset) of the cubin function holding ``pc``, if a cubin covers it."""
        for start, size, name in self.functions:
            if start <= pc < start + max(size, 1):
                return name, pc - start
        return None

    def device(self, index: int) -> CudaDevice | None:
        return next((d for d in self.devices if d.index == index), None)


# --- reading ------------------------------------------------------------------------------

def read_cuda_core(stream: BinaryIO, size: int, name: str = "GPU core dump") -> CudaCoreDump:
    """Decode a ``.nvcudmp``; CoreDumpError (one sentence) when it cannot be read at all."""
    return _Reader(stream, size, name).read()


def read_cuda_core_file(path: str) -> CudaCoreDump:
    """Convenience for notebooks and tests: a path, plain or compressed."""
    source = sniff(Path(path), str(path))
    with open_seekable(source) as (stream, size):
        return read_cuda_core(stream, size, str(path))


class _Reader:
    def __init__(self, stream: BinaryIO, size: int, name: str) -> None:
        self.stream, self.size, self.name = stream, size, name
        self.problems: list[str] = []

    @guarded("GPU core dump")
    def read(self) -> CudaCoreDump:
        elf = self.elf = ElfImage(self.stream, self.size, what=self.name)
        if elf.e_type_raw != 4 or elf.e_machine_raw != EM_CUDA:
            raise CoreDumpError(f"{self.name} is not a CUDA GPU core dump (ELF type {elf.e_type_raw}, "
                                f"machine {elf.e_machine_raw})")
        self.shdrs = elf.section_headers(self.problems)
        if not self.shdrs:
            why = self.problems[0] if self.problems else "no section header table"
            raise CoreDumpError(f"{self.name} has no readable section headers ({why})")
        self.names = {i: elf.section_name(i, self.problems) for i in range(len(self.shdrs))}
        self.types = {i: (h["sh_type"] if isinstance(h["sh_type"], int) else -1) for i, h in enumerate(self.shdrs)}
        self.strtab = self._strtab()
        self._rows: dict[int, list[bytes]] = {}

        devices = tuple(self._devices())
        meta = self._meta()
        grids = list(self._grids())
        sm_faults, sm_ids = self._sm_faults()
        lanes, lane_count, warps = self._warps_and_lanes(sm_ids)
        functions = self._name_kernels(grids, devices)
        grids = self._demangle(grids)
        if not devices:
            self.problems.append("no device table (.cudbg.devtbl): device name and SM type unknown")
        if not grids:
            self.problems.append("no grid table rows: no kernel was running when the dump was written")
        if not lanes and not warps and not sm_faults:
            self.problems.append("no lane, warp or SM row records an exception: the dump does not say "
                                 "which kernel faulted (user-triggered dump, or exception rows lost)")
        return CudaCoreDump(
            devices=devices, driver_version=meta.get("driver"), cuda_version=meta.get("cuda"),
            generator=meta.get("generator"), generation_flags=meta.get("flags"),
            generation_flag_names=generation_flag_names(meta["flags"]) if "flags" in meta else (),
            timestamp=meta.get("timestamp"), grids=tuple(grids), lane_faults=tuple(lanes),
            lane_fault_count=lane_count, warp_faults=tuple(warps), sm_faults=tuple(sm_faults),
            functions=tuple(functions), problems=tuple(dict.fromkeys(self.problems)))

    # sections and rows -----------------------------------------------------------------
    def _of_type(self, sht: int) -> Iterator[int]:
        return (i for i, t in self.types.items() if t == sht)

    def _strtab(self) -> bytes:
        shstrndx = self.elf.header["e_shstrndx"]
        if not 0 < shstrndx < len(self.shdrs) or self.shdrs[shstrndx]["sh_type"] != "SHT_STRTAB":
            self.problems.append(f"section name table index {shstrndx} does not name a string table: "
                                 "section names unknown (tables are still found by type)")
        named = [i for i in self.names if self.names[i] == ".strtab"]
        others = [i for i, h in enumerate(self.shdrs) if h["sh_type"] == "SHT_STRTAB" and i != shstrndx]
        for i in named + others:
            h = self.shdrs[i]
            if h["sh_type"] == "SHT_STRTAB":
                try:
                    return self.elf.section_data(h, ".strtab")
                except CoreDumpError as exc:
                    self.problems.append(f"{exc}: names of devices unknown")
                    return b""
        self.problems.append("no .strtab section: device and generator names unknown")
        return b""

    def _string(self, offset: int) -> str | None:
        return self.elf.string_at(self.strtab, offset) or None

    def rows(self, index: int) -> list[bytes]:
        """The complete rows of table section ``index`` (cut or malformed: a problem)."""
        if index in self._rows:
            return self._rows[index]
        h, name, sht = self.shdrs[index], self.names[index] or f"#{index}", self.types[index]
        self._rows[index] = rows = []
        entsize, size, offset = h["sh_entsize"], h["sh_size"], h["sh_offset"]
        table = TABLES.get(sht)
        need = table.row.size if table else 1
        if size == 0:
            return rows
        if entsize < need:
            self.problems.append(f"section {name} has row size {entsize}, smaller than the {need} bytes "
                                 f"a {table.label if table else 'table'} row needs: table skipped")
            return rows
        if offset > self.size:
            self.problems.append(f"section {name} starts past end of file: dump truncated")
            return rows
        if offset + size > self.size:
            self.problems.append(f"section {name} extends past end of file: dump truncated "
                                 f"({self.size - offset} of {size} bytes present)")
            size = self.size - offset
        if size > MAX_SECTION_BYTES:
            self.problems.append(f"section {name} is {size} bytes: only the first "
                                 f"{MAX_SECTION_BYTES >> 20} MiB of rows read")
            size = MAX_SECTION_BYTES
        count = min(size // entsize, MAX_ROWS)
        data = self.elf.read(offset, count * entsize, f"section {name}")
        rows.extend(data[i * entsize:(i + 1) * entsize] for i in range(count))
        return rows

    def parent(self, index: int, parent_type: int) -> tuple[int, int] | None:
        """(parent section, row index) of table ``index``; None (and a problem) if the link is bad."""
        h = self.shdrs[index]
        link, info = h["sh_link"], h["sh_info"]
        if not (0 < link < len(self.shdrs)) or self.types.get(link) != parent_type:
            self.problems.append(f"section {self.names[index] or index} links to section {link}, which is "
                                 f"not a {TABLES[parent_type].label if parent_type in TABLES else 'parent'} table: rows ignored")
            return None
        if info >= len(self.rows(link)):
            self.problems.append(f"section {self.names[index] or index} refers to row {info} of "
                                 f"{self.names[link] or link}, which has {len(self.rows(link))} rows: rows ignored")
            return None
        return link, info

    # tables ----------------------------------------------------------------------------
    def _devices(self) -> Iterator[CudaDevice]:
        seen = 0
        for sec in self._of_type(SHT_DEV_TABLE):
            for idx, row in enumerate(self.rows(sec)):
                d = TABLES[SHT_DEV_TABLE].row.unpack(row)
                yield CudaDevice(index=seen + idx, name=self._string(d["devName"]), type=self._string(d["devType"]),
                                 sm_type=self._string(d["smType"]), sm_count=d["numSMs"],
                                 warps_per_sm=d["numWarpsPerSM"], lanes_per_warp=d["numLanesPerWarp"],
                                 regs_per_lane=d["numRegsPerLane"], pci_bus=d["pciBusId"], pci_device=d["pciDevId"])
            seen += len(self.rows(sec))

    def _meta(self) -> dict:
        for sec in self._of_type(SHT_META):
            h = self.shdrs[sec]
            try:
                data = self.elf.section_data(h, ".cudbg.meta", cap=4096)
            except CoreDumpError as exc:
                self.problems.append(f"{exc}: driver version unknown")
                return {}
            if len(data) < META.size:
                self.problems.append(f".cudbg.meta holds {len(data)} bytes, fewer than {META.size}: "
                                     "driver version unknown")
                return {}
            m = META.unpack(data)
            return {"generator": self._string(m["generatorName"]),
                    "driver": f"{m['driverVersionMajor']}.{m['driverVersionMinor']}",
                    "cuda": f"{m['cudaDriverVersionMajor']}.{m['cudaDriverVersionMinor']}",
                    "flags": m["flags"], "timestamp": m["timestamp"]}
        self.problems.append("no .cudbg.meta section (driver older than r565): driver and CUDA version unknown")
        return {}

    def _grids(self) -> Iterator[CudaGrid]:
        for sec in self._of_type(SHT_GRID_TABLE):
            parent = self.parent(sec, SHT_DEV_TABLE)
            if parent is None:
                continue
            for row in self.rows(sec):
                g = TABLES[SHT_GRID_TABLE].row.unpack(row)
                cluster = g["clusterDim"]
                yield CudaGrid(device=parent[1], grid_id=g["gridId64"], context_id=g["contextId"],
                               function_entry=g["functionEntry"], module_handle=g["moduleHandle"],
                               grid_dim=g["gridDim"], block_dim=g["blockDim"],
                               cluster_dim=cluster if cluster and any(cluster) else None,
                               host_tid=g["attrHostTid"] or None, symbol=None, demangled=None, kernel=None)

    def _sm_faults(self) -> tuple[list[SmFault], dict[tuple[int, int], tuple[int, int]]]:
        """SM rows with an exception, and (smtbl section, row) -> (device, smId) for every SM."""
        faults, ids = [], {}
        for sec in self._of_type(SHT_SM_TABLE):
            parent = self.parent(sec, SHT_DEV_TABLE)
            if parent is None:
                continue
            for idx, row in enumerate(self.rows(sec)):
                s = TABLES[SHT_SM_TABLE].row.unpack(row)
                ids[(sec, idx)] = (parent[1], s["smId"])
                if s["exception"]:          # None: a driver before r555 (no exception fields in SM rows)
                    faults.append(SmFault(parent[1], s["smId"], exception_info(s["exception"]),
                                          s["errorPC"] if s["errorPCValid"] else None))
        return faults, ids

    def _warps_and_lanes(self, sm_ids: dict) -> tuple[list[LaneFault], int, list[WarpFault]]:
        ctas: dict[tuple[int, int], tuple[int, int, int | None, Dim3 | None]] = {}
        for sec in self._of_type(SHT_CTA_TABLE):
            parent = self.parent(sec, SHT_SM_TABLE)
            if parent is None or parent not in sm_ids:
                continue
            device, sm = sm_ids[parent]
            for idx, row in enumerate(self.rows(sec)):
                c = TABLES[SHT_CTA_TABLE].row.unpack(row)
                ctas[(sec, idx)] = (device, sm, c["gridId64"], c["blockIdx"])
        warps_by_row: dict[tuple[int, int], tuple] = {}
        warps: list[WarpFault] = []
        for sec in self._of_type(SHT_WP_TABLE):
            parent = self.parent(sec, SHT_CTA_TABLE)
            if parent is None or parent not in ctas:
                continue
            device, sm, gid, block = ctas[parent]
            for idx, row in enumerate(self.rows(sec)):
                w = TABLES[SHT_WP_TABLE].row.unpack(row)
                warps_by_row[(sec, idx)] = (device, sm, w["warpId"], gid, block)
                if w["errorPCValid"]:
                    warps.append(WarpFault(device, sm, w["warpId"], gid, block, w["errorPC"], w["validLanesMask"],
                                           w["activeLanesMask"]))
        lanes: list[LaneFault] = []
        count = 0
        for sec in self._of_type(SHT_LN_TABLE):
            parent = self.parent(sec, SHT_WP_TABLE)
            if parent is None or parent not in warps_by_row:
                continue
            device, sm, warp_id, gid, block = warps_by_row[parent]
            for row in self.rows(sec):
                ln = TABLES[SHT_LN_TABLE].row.unpack(row)
                if not ln["exception"]:
                    continue
                count += 1
                if len(lanes) < MAX_LANES_KEPT:
                    lanes.append(LaneFault(device, sm, warp_id, ln["ln"], gid, block, ln["threadIdx"],
                                           exception_info(ln["exception"]), ln["virtualPC"], ln["physPC"]))
        return lanes, count, warps

    # kernel names ----------------------------------------------------------------------
    def _name_kernels(self, grids: list[CudaGrid], devices: tuple) -> list[tuple[int, int, str]]:
        """Fill each grid's symbol from the relocated cubin of its module; return the functions read."""
        wanted = {g.module_handle for g in grids}
        images: dict[int, list[int]] = {}
        relf = list(self._of_type(SHT_RELF_IMG))
        for sec in relf:
            parent = self.parent(sec, SHT_MOD_TABLE)
            if parent is None:
                continue
            handle = TABLES[SHT_MOD_TABLE].row.unpack(self.rows(parent[0])[parent[1]])["moduleHandle"]
            if handle in wanted:
                images.setdefault(handle, []).append(sec)
        functions: list[tuple[int, int, str]] = []
        for sec in sorted({s for secs in images.values() for s in secs}):
            functions.extend(self._cubin_functions(sec))
        by_entry = {start: name for start, _size, name in functions}
        for i, grid in enumerate(grids):
            symbol = by_entry.get(grid.function_entry)
            if symbol is None:
                if not relf:
                    self.problems.append("no relocated cubin images: kernel name unknown "
                                         "(dump written with a driver or flags that omit them)")
                elif grid.module_handle not in images:
                    self.problems.append(f"grid {grid.grid_id}: no relocated cubin of module "
                                         f"{grid.module_handle:#x} in the dump: kernel name unknown")
                else:
                    self.problems.append(f"grid {grid.grid_id}: no symbol at function entry "
                                         f"{grid.function_entry:#x} in its cubin: kernel name unknown")
            grids[i] = _replace(grid, symbol=symbol)
        return functions

    def _cubin_functions(self, sec: int) -> list[tuple[int, int, str]]:
        h = self.shdrs[sec]
        label = f"cubin in section {sec} ({self.names[sec]})"
        if h["sh_offset"] + h["sh_size"] > self.size:
            self.problems.append(f"{label} extends past end of file: dump truncated, kernel name unknown")
            return []
        try:
            return _symbols_of(ElfImage(self.stream, h["sh_size"], base=h["sh_offset"], what=label),
                               label, self.problems)
        except CoreDumpError as exc:
            self.problems.append(f"{exc}; kernel name unknown")
            return []

    def _demangle(self, grids: list[CudaGrid]) -> list[CudaGrid]:
        mangled = sorted({g.symbol for g in grids if g.symbol and g.symbol.startswith("_Z")})
        full = names.demangle(mangled)
        return [_replace(g, demangled=full.get(g.symbol) if g.symbol else None,
                         kernel=names.from_symbol(g.symbol, full.get(g.symbol)) if g.symbol else None)
                for g in grids]


def _replace(grid: CudaGrid, **changes) -> CudaGrid:
    return dataclasses.replace(grid, **changes)


@guarded("cubin")
def _symbols_of(cubin: ElfImage, label: str, problems: list[str]) -> list[tuple[int, int, str]]:
    """(value, size, name) of every function symbol of a relocated cubin.

    Symbols are unpacked with the declared ``ELF_SYMBOL`` layouts rather than pyelftools'
    per-symbol parser: a cubin of a big library holds 10^5 symbols and this must stay well
    under a second.
    """
    shdrs = cubin.section_headers(problems)
    layout = ELF_SYMBOL[cubin.elfclass].with_order(cubin.little)
    out: list[tuple[int, int, str]] = []
    for idx, h in enumerate(shdrs):
        if h["sh_type"] != "SHT_SYMTAB":
            continue
        link = h["sh_link"]
        if not (0 <= link < len(shdrs)) or link == idx or shdrs[link]["sh_type"] != "SHT_STRTAB":
            problems.append(f"{label}: .symtab links to section {link}, not a string table; symbols skipped")
            continue
        entsize = h["sh_entsize"] or layout.size
        if entsize < layout.size:
            problems.append(f"{label}: symbol size {entsize} too small; symbols skipped")
            continue
        try:
            table = cubin.section_data(h, ".symtab")
            names = cubin.section_data(shdrs[link], ".strtab")
        except CoreDumpError as exc:
            problems.append(f"{label}: {exc}")
            continue
        count = min(len(table) // entsize, MAX_SYMBOLS)
        for i in range(count):
            symbol = layout.unpack(table, i * entsize, entsize)
            if symbol["st_info"] & 0xF != STT_FUNC or not symbol["st_value"]:   # a function with an address
                continue
            name = cubin.string_at(names, symbol["st_name"])
            if name:
                out.append((symbol["st_value"], symbol["st_size"], name))
    return out


# --- file names ---------------------------------------------------------------------------

# CUDA_COREDUMP_FILE templates that carry the pid: core_%p.nvcudmp, the driver default
# core_%t_%h_%p.nvcudmp, and cuda_coredump_%h.%p.%t (vLLM's documentation).
_PID_NAMES = (
    re.compile(r"^core_(?P<pid>\d{1,7})\.nvcudmp$"),
    re.compile(r"^core_\d{9,}_.+_(?P<pid>\d{1,7})\.nvcudmp$"),
    re.compile(r"^cuda_coredump_.+\.(?P<pid>\d{1,7})\.\d{9,}(?:\.nvcudmp)?$"),
)
_COMPRESSED_SUFFIX = re.compile(r"\.(gz|xz|bz2)$")
PID_MAX = 4_194_304


def pid_from_name(path: str) -> int | None:
    """The pid a dump's file name carries, for the templates above only (else None)."""
    name = _COMPRESSED_SUFFIX.sub("", PurePath(path).name)
    for pattern in _PID_NAMES:
        m = pattern.match(name)
        if m:
            pid = knowledge.claimed_int(m.group("pid"))
            return pid if 0 < pid <= PID_MAX else None
    return None


# --- the parser ---------------------------------------------------------------------------

class CudaCoredumpParser:
    """``cuda-coredump`` inputs -> one CORE_DUMP event naming the faulting kernel."""

    def parse(self, source: Source) -> ParsedSource:
        return parse_core_source(source, "cuda-coredump", read_cuda_core,
                                 lambda dump, relpath: [dump_event(dump, relpath, pid_from_name(relpath))])


def _dim(d: Dim3 | None) -> str:
    return f"({d[0]},{d[1]},{d[2]})" if d else "(?)"


@dataclass(frozen=True)
class _Derived:
    """What the event says that no one part of the dump holds as it is."""

    pc: str | None
    pc_function: str | None
    generation_flags: list[str]
    faulting_threads: list[str]
    pid: int | None
    core_type: str = "gpu"


# The event's attributes, in order: (attribute, the part of the dump it is read from, that
# part's field).  A part the dump lacks (no grid row, no exception recorded) gives None.
# The parts: the faulting grid, its exception, the device it ran on, the first faulting
# row (a lane, else a warp, else an SM), the first faulting lane, the dump itself, and
# what is derived from several.
EVENT_ATTRS = (
    ("kernel", "grid", "kernel"), ("kernel_symbol", "grid", "symbol"), ("kernel_signature", "grid", "demangled"),
    ("fault", "exception", "text"), ("exception_code", "exception", "code"),
    ("exception_name", "exception", "cudbg"), ("signal", "exception", "signal"),
    ("pc", "derived", "pc"), ("pc_function", "derived", "pc_function"),
    ("grid", "grid", "grid_dim"), ("block", "grid", "block_dim"), ("grid_id", "grid", "grid_id"),
    ("device", "device", "name"), ("device_index", "device", "index"), ("device_type", "device", "type"),
    ("sm_arch", "device", "sm_type"), ("sm", "where", "sm"), ("warp", "where", "warp"), ("lane", "lane", "lane"),
    ("driver", "dump", "driver_version"), ("cuda_version", "dump", "cuda_version"),
    ("generation_flags", "derived", "generation_flags"), ("faulting_threads", "derived", "faulting_threads"),
    ("faulting_thread_count", "dump", "lane_fault_count"), ("host_tid", "grid", "host_tid"),
    ("pid", "derived", "pid"), ("core_type", "derived", "core_type"),
)


def dump_event(dump: CudaCoreDump, relpath: str, pid: int | None) -> Event:
    grid = dump.faulting_grid
    exc = dump.exception
    pc = dump.error_pc
    first_lane = dump.lane_faults[0] if dump.lane_faults else None
    first_warp = dump.warp_faults[0] if dump.warp_faults else None
    where = first_lane or first_warp or (dump.sm_faults[0] if dump.sm_faults else None)
    device = dump.device(where.device if where else (grid.device if grid else 0))
    func = dump.function_at(pc) if pc is not None else None
    kernel = grid.kernel if grid else None
    derived = _Derived(pc=hex(pc) if pc is not None else None,
                       pc_function=f"{names.from_symbol(func[0])}+{func[1]}" if func else None,
                       generation_flags=list(dump.generation_flag_names),
                       faulting_threads=[f"thread {_dim(lane.thread)} block {_dim(lane.block)}"
                                         for lane in dump.lane_faults[:8]], pid=pid)
    parts = {"grid": grid, "exception": exc, "device": device, "where": where, "lane": first_lane, "dump": dump,
             "derived": derived}
    attrs = {name: getattr(parts[part], field, None) if parts[part] is not None else None
             for name, part, field in EVENT_ATTRS}
    if exc is None:
        summary = "GPU core dump without a recorded exception"
    else:
        summary = f"GPU core dump: {exc.text} ({exc.signal or exc.cudbg})"
    summary += f" in kernel {kernel or 'unknown'}"
    if grid:
        summary += f"<<<{_dim(grid.grid_dim)},{_dim(grid.block_dim)}>>>"
    if pc is not None:
        summary += f" at PC {pc:#x}"
    if device:
        summary += f" on device {device.index} ({device.name or 'unknown'}, {device.sm_type or '?'})"
    return Event(kind=Kind.CORE_DUMP, message=summary, source=relpath, line=0, severity=Severity.ERROR,
                 pid=pid, seq=1, attrs=freeze(attrs))
