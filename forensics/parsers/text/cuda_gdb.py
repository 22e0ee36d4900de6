"""cuda-gdb transcripts -> the exception stop (grammars/cuda_gdb.lark).

A transcript is read line by line, wherever it appears in an input; the lines of one exception stop ("CUDA Exception:",
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

from forensics import grammar, names
from forensics.events import Event, Kind, Severity, freeze
from forensics.knowledge import claimed_int

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


# Lines only cuda-gdb prints: they start a transcript wherever it appears in a stream.  A
# device frame with its launch is one, numbered in a backtrace or not (the stop location
# older cuda-gdb prints, "0x... in kernel<<<(..),(..)>>> (args) at file:line").
STRONG = re.compile(r'CUDA Exception: |The exception was triggered at PC |Thread \d+ "[^"]*" received signal CUDA_EXCEPTION_'
                    r"|\[(?:Switching focus to|Current focus set to) CUDA |Opening GPU coredump: |\(cuda-gdb\) "
                    r"|(?:#\d+ +|0x[0-9a-fA-F]+ in )\S.*<<<\(\d+,\d+,\d+\),\(\d+,\d+,\d+\)>>>")


class CudaGdbCollector:
    """The cuda-gdb lines of one input: exception stops, focus, frames, info tables.

    A transcript is recognised by lines only cuda-gdb prints; after one, gdb's other
    output (thread lists, backtraces, tables, chatter) belongs to it too."""

    format = "cuda-gdb"

    def __init__(self) -> None:
        self.active = False
        self.stream: tuple | None = None      # the writer whose output the transcript is
        # `target cudacore` prints the focus before the exception it stopped at: held
        # for the stop that follows
        self.pending_focus: dict | None = None
        self.stops: list[Stop] = []
        self.table: tuple | None = None
        self.tables: dict[str, list[dict]] = {}
        self.pid: int | None = None
        self.coredump: str | None = None
        self.event_lines = 0
        self.noise_lines = 0
        self.unparsed: list[tuple[int, str]] = []
        self._parser = grammar.load("cuda_gdb")

    def claims(self, text: str, stream: tuple | None = None, headed: bool = False) -> bool:
        """``stream`` is the writer the line came from, ``headed`` whether it carries a
        logger's record header.  gdb prints no record headers, so only raw lines of the
        transcript's own writer are its chatter: a program's log records after a
        transcript ("[PG ID 0 ...] ... CUDA error") are read as what they are."""
        if STRONG.match(text):
            self.active = True
            self.stream = stream
            return True
        if not self.active or headed or stream != self.stream:
            return False
        return bool(text.startswith(("#", "[", "Thread ", "Program ", "Core was", "warning: ", "(cuda-gdb)"))
                    or _is_gdb_chatter(text) or self.table is not None and _is_row(text, self.table)
                    or _TABLE_START.match(text))

    def feed(self, lineno: int, raw: str) -> None:
        text = raw.rstrip()
        if text.startswith("(cuda-gdb) "):
            text = text[len("(cuda-gdb) "):]
        if not text:
            self.noise_lines += 1
            self.table = None
            return
        try:
            tree = self._parser.parse(text)
        except LarkError:
            tree = Tree("other", [Token("REST", text)])
        kind = str(tree.data)
        if self.table is not None and kind in ("other", "lwp_line") and _is_row(text, self.table):
            self.tables.setdefault(self.table[0], []).append(_cut(text, self.table[1]))
            self.event_lines += 1
            return
        self.table = None
        used = True
        stops = self.stops
        if kind == "exception":
            stops.append(Stop(line=lineno, fault=str(tree.children[1])))
            self._take_focus()
        elif kind == "triggered":
            stop = self._current(lineno)
            tokens = {t.type: str(t) for t in tree.children if isinstance(t, Token)}
            stop.pc = tokens.get("HEX")
            stop.function = tokens.get("FUNC")
            stop.location = tokens.get("LOCATION")
        elif kind == "received":
            stop = self._current(lineno)
            tokens = [str(t) for t in tree.children if isinstance(t, Token)]
            stop.thread_name, stop.signal = tokens[2], tokens[3]
            stop.fault = stop.fault or tokens[4].rstrip(".")
        elif kind == "focus":
            if stops:
                stops[-1].focus = _focus(str(tree.children[1]))
            else:
                self.pending_focus = _focus(str(tree.children[1]))
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
            self.table = (_table_name(text), text)
        elif kind == "opening":
            self.coredump = str(tree.children[1])
        elif kind == "lwp_line":
            m = _LWP.search(text)
            if m and (m.group("n") == "1" or m.group("sn") == "1"):
                self.pid = claimed_int(m.group("lwp") or m.group("slwp"))
            used = False
        elif kind == "terminated":
            used = True
        else:
            used = False
        if used:
            self.event_lines += 1
        elif _is_gdb_chatter(text) or text.startswith(("#", "[", "Thread ", "warning: ")):
            self.noise_lines += 1
        else:
            self.unparsed.append((lineno, text))

    def _current(self, lineno: int) -> Stop:
        """The stop being read; a stop line before any "CUDA Exception:" starts one."""
        if not self.stops:
            self.stops.append(Stop(line=lineno))
            self._take_focus()
        return self.stops[-1]

    def _take_focus(self) -> None:
        if self.pending_focus is not None:
            self.stops[-1].focus = self.pending_focus
            self.pending_focus = None

    def finish(self, relpath: str, seq: int) -> tuple[list[Event], list[str]]:
        events = [_event(stop, relpath, seq + n, self.pid, self.tables, self.coredump)
                  for n, stop in enumerate(self.stops, 1)]
        problems = []
        if self.active and not self.stops:
            problems.append(f"{relpath}: cuda-gdb transcript without a CUDA exception stop")
        return events, problems


_TABLE_START = re.compile(r"\s+(Kernel Parent Dev Grid Status|Dev PCI Bus/Dev ID|Wp Active Lanes Mask|Ln +State"
                          r"|SM +Active Warps Mask|BlockIdx ThreadIdx To BlockIdx|BlockIdx To BlockIdx)\b")


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
    kernel = names.plain(stop.kernel or stop.function) or None
    attrs = {"fault": stop.fault, "kernel": kernel, "pc": stop.pc, "function": stop.function,
             "kernel_source": stop.location or stop.frame_location, "signal": stop.signal,
             "focus": stop.focus, "thread_name": stop.thread_name, "coredump": coredump}
    if stop.launch:
        dims = re.findall(r"\((\d+),(\d+),(\d+)\)", stop.launch)
        attrs["grid"], attrs["block"] = [tuple(claimed_int(x) for x in d) for d in dims[:2]]
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
