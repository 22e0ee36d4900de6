"""cuda-gdb transcripts -> the exception stop (grammars/cuda_gdb.lark).

A transcript is read line by line; the lines of one exception stop ("CUDA Exception:",
"The exception was triggered at PC", "received signal CUDA_EXCEPTION_n", the focus and
the first device frame) are gathered into one event naming the kernel, the fault, the
PC, the launch dimensions and the focus.  `info cuda` tables are cut at their header's
column positions; the kernels and devices tables add the invocation and the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lark import Token, Tree
from lark.exceptions import LarkError

from forensics import grammar
from forensics.events import Event, Kind, Severity, freeze
from forensics.parsers.base import ParsedSource
from forensics.parsers.text import is_noise
from forensics.sources import ReadStats, Source, iter_lines

_LWP = re.compile(r"Thread (?P<n>\d+) .*?\(LWP (?P<lwp>\d+)\)|\[Switching to thread (?P<sn>\d+) \(Thread \S+ \(LWP (?P<slwp>\d+)\)\)\]")


@dataclass
class Stop:
    line: int
    fault: str | None = None
    pc: str | None = None
    function: str | None = None
    location: str | None = None
    signal: str | None = None
    thread_name: str | None = None
    focus: dict = field(default_factory=dict)
    kernel: str | None = None
    launch: str | None = None
    args: str | None = None
    frame_location: str | None = None
    lanes_with_exception: int = 0


class CudaGdbParser:
    def parse(self, source: Source) -> ParsedSource:
        out = ParsedSource(source.relpath, "cuda-gdb")
        stats = ReadStats()
        parser = grammar.load("cuda_gdb")
        stops: list[Stop] = []
        table: list | None = None       # (name, header text) of the table being read
        tables: dict[str, list[dict]] = {}
        pid = None
        coredump = None
        with source.open_binary() as stream:
            for lineno, raw in iter_lines(stream, stats):
                out.lines += 1
                text = raw.rstrip()
                if not text:
                    out.noise_lines += 1
                    table = None
                    continue
                try:
                    tree = parser.parse(text)
                except LarkError:
                    tree = Tree("other", [Token("REST", text)])
                kind = str(tree.data)
                if table is not None and kind in ("other", "lwp_line") and _is_row(text, table):
                    tables.setdefault(table[0], []).append(_cut(text, table[1]))
                    out.event_lines += 1
                    continue
                table = None
                used = True
                if kind == "exception":
                    stops.append(Stop(line=lineno, fault=str(tree.children[1])))
                elif kind == "triggered":
                    stop = _current(stops, lineno)
                    tokens = {t.type: str(t) for t in tree.children if isinstance(t, Token)}
                    stop.pc = tokens.get("HEX")
                    stop.function = tokens.get("FUNC")
                    stop.location = tokens.get("LOCATION")
                elif kind == "received":
                    stop = _current(stops, lineno)
                    tokens = [str(t) for t in tree.children if isinstance(t, Token)]
                    stop.thread_name, stop.signal = tokens[2], tokens[3]
                    stop.fault = stop.fault or tokens[4].rstrip(".")
                elif kind == "focus":
                    if stops:
                        stops[-1].focus = _focus(str(tree.children[1]))
                elif kind == "frame":
                    call = next(c for c in tree.children if isinstance(c, Tree))
                    tokens = {t.type: str(t) for t in call.children if isinstance(t, Token)}
                    if stops and "LAUNCH" in tokens and stops[-1].kernel is None:
                        stop = stops[-1]
                        stop.kernel = tokens["KERNEL_OR_FUNC"].strip()
                        stop.launch = tokens["LAUNCH"]
                        stop.args = tokens.get("ARGS")
                        stop.frame_location = tokens.get("LOCATION")
                elif kind == "table_header":
                    table = (_table_name(text), text)
                elif kind == "opening":
                    coredump = str(tree.children[1])
                elif kind == "lwp_line":
                    m = _LWP.search(text)
                    if m and (m.group("n") == "1" or m.group("sn") == "1"):
                        pid = int(m.group("lwp") or m.group("slwp"))
                    used = False
                elif kind == "terminated":
                    used = True
                else:
                    used = False
                if used:
                    out.event_lines += 1
                elif is_noise(text) or _is_gdb_chatter(text):
                    out.noise_lines += 1
                else:
                    out.count_unparsed(lineno, text)
        out.problems.extend(stats.describe())
        for n, stop in enumerate(stops, 1):
            out.events.append(_event(stop, source.relpath, n, pid, tables, coredump))
        if not stops:
            out.problems.append(f"{source.relpath}: cuda-gdb transcript without a CUDA exception stop")
        return out


def _current(stops: list[Stop], lineno: int) -> Stop:
    if not stops:
        stops.append(Stop(line=lineno))
    return stops[-1]


def _focus(body: str) -> dict:
    focus = {}
    for part in re.finditer(r"(kernel|grid|cluster|block|thread|device|sm|warp|lane) (\([^)]*\)|\S+?)(?:,|$)", body):
        focus[part.group(1)] = part.group(2)
    return focus


def _table_name(header: str) -> str:
    words = header.split()
    return {"Kernel": "kernels", "Dev": "devices", "Wp": "warps", "Ln": "lanes", "SM": "sms"}.get(
        words[0], "blocks" if words[0] == "BlockIdx" and "ThreadIdx" not in words[:2] else "threads")


def _is_row(text: str, table) -> bool:
    return text.startswith(("*", " ")) or text.startswith(("Device ", "Kernel "))


_ROWS = {
    # info cuda kernels: id parent dev grid status SMs-mask (grid) (block) invocation
    "kernels": re.compile(r"^\*?\s*(?P<Kernel>\d+)\s+(?P<Parent>\S+)\s+(?P<Dev>\d+)\s+(?P<Grid>\d+)\s+"
                          r"(?P<Status>\S+)\s+(?P<SMs>0x[0-9a-fA-F]+)\s+(?P<GridDim>\(\S+\))\s+"
                          r"(?P<BlockDim>\(\S+\))\s+(?P<Invocation>.*?)\s*$"),
    # info cuda devices: dev pci name... description sm_type SMs warps lanes regs mask
    "devices": re.compile(r"^\*?\s*(?P<Dev>\d+)\s+(?P<PCI>\S+)\s+(?P<Name>.+?)\s+(?P<Description>\S+)\s+"
                          r"(?P<SMType>sm_\w+)\s+(?P<SMs>\d+)\s+"),
    # info cuda lanes: ln state pc (thread) exception
    "lanes": re.compile(r"^\*?\s*(?P<Ln>\d+)\s+(?P<State>\S+)\s+(?P<PC>0x[0-9a-fA-F]+)\s+"
                        r"(?P<ThreadIdx>\(\S+\))\s*(?P<Exception>.*?)\s*$"),
}


def _cut(text: str, header: str) -> dict:
    """One table row as a dict; columns adapt to content, so each table's row shape is
    matched as a whole (only the tables the analysis uses)."""
    if text.startswith(("Device ", "Kernel ")):
        return {"group": text}
    pattern = _ROWS.get(_table_name(header))
    match = pattern.match(text) if pattern else None
    return match.groupdict() if match else {"row": text.strip()}


def _is_gdb_chatter(text: str) -> bool:
    return bool(re.match(r"^(\$\d+ = |[*=]?> ?0x|   0x[0-9a-f]+ <|\d+\t|No (symbol|frame|locals)|Line \d+ of |"
                         r"Specified first line|file: \"|The program |Using host libthread_db|"
                         r"\[Inferior |warning: |Program terminated|\S+ \+ \d+ in section )", text))


def _event(stop: Stop, relpath: str, seq: int, pid: int | None, tables: dict, coredump: str | None) -> Event:
    kernel = stop.kernel or (stop.function.split("(")[0] if stop.function else None)
    attrs = {"fault": stop.fault, "kernel": kernel, "pc": stop.pc, "function": stop.function,
             "kernel_source": stop.location or stop.frame_location, "signal": stop.signal,
             "focus": stop.focus, "thread_name": stop.thread_name, "coredump": coredump}
    if stop.launch:
        dims = re.findall(r"\((\d+),(\d+),(\d+)\)", stop.launch)
        attrs["grid"], attrs["block"] = [tuple(int(x) for x in d) for d in dims[:2]]
    if stop.args:
        attrs["args"] = stop.args
    for row in tables.get("kernels", []):
        if row.get("Invocation") and kernel and row["Invocation"].startswith(kernel):
            attrs["invocation"] = row["Invocation"]
    devices = [r for r in tables.get("devices", []) if "Name" in r]
    if devices:
        attrs["device"] = devices[0].get("Name")
        attrs["sm_arch"] = devices[0].get("SMType")
    lanes = [r for r in tables.get("lanes", []) if r.get("Exception")]
    attrs["lanes_with_exception"] = len(lanes)
    message = f"CUDA Exception: {stop.fault} in {kernel or '?'}" + (f" at {attrs['kernel_source']}" if attrs["kernel_source"] else "")
    return Event(kind=Kind.CUDA_GDB, message=message, source=relpath, line=stop.line, seq=seq,
                 severity=Severity.ERROR, pid=pid, attrs=freeze(attrs))
