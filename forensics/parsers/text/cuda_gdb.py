"""cuda-gdb transcripts -> the exception stop (grammars/cuda_gdb.lark).

A transcript is read line by line, wherever it appears in an input; the lines of one exception stop ("CUDA Exception:",
"The exception was triggered at PC", "received signal CUDA_EXCEPTION_n", the focus and
the first device frame) are gathered into one event naming the kernel, the fault, the
PC, the launch dimensions and the focus.  `info cuda` tables are cut at their header's
column positions; the kernels and devices tables add the invocation and the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lark import Token, Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, names
from forensics.events import Event, Kind, Severity, freeze
from forensics.knowledge import claimed_int
from forensics.parsers import terminals

Dim3 = tuple[int, int, int]


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
    launch: tuple[Dim3, Dim3] | None = None      # the grid's and the block's dimensions
    args: str | None = None
    frame_location: str | None = None
    lanes_with_exception: int = 0


@dataclass(frozen=True)
class Call:
    """A frame's call, read: "kernel<<<(2,1,1),(128,1,1)>>> (args) at file.cu:13"."""

    function: str
    launch: tuple[Dim3, Dim3] | None
    args: str | None
    location: str | None


# the table start rules: a row is read by its table's rule (the others are kept whole)
_ROW_RULES = {"kernels": "kernels_row", "devices": "devices_row", "lanes": "lanes_row"}
_STARTS = ("start", *_ROW_RULES.values())


# the transcript's guards: terminals of grammars/cuda_gdb.lark
_T = terminals.of("cuda_gdb")


@v_args(inline=True)
class _ToLine(Transformer):
    """One line's tree -> (kind, what it says)."""

    def exception(self, _prefix, fault):
        return ("exception", str(fault))

    def triggered(self, _prefix, pc, *rest):
        t = {i.type: str(i) for i in rest if isinstance(i, Token)}
        return ("triggered", (str(pc), t.get("FUNC"), t.get("LOCATION")))

    def received(self, _prefix, _thread, name, signal, fault):
        return ("received", (str(name), str(signal), str(fault)))

    def focus(self, _prefix, *parts):
        return ("focus", dict(p for p in parts if p is not None))

    def focus_part(self, key, value):
        return (str(key), str(value))

    def focus_other(self, _text):
        return None

    def frame(self, *items):
        return ("frame", next(i for i in items if isinstance(i, Call)))

    def call(self, function, *rest):
        launch = next((i for i in rest if isinstance(i, tuple)), None)
        t = {i.type: str(i) for i in rest if isinstance(i, Token)}
        return Call(str(function).strip(), launch, t.get("ARGS"), t.get("LOCATION"))

    def launch(self, *dims):
        numbers = tuple(claimed_int(d) for d in dims)
        return (numbers[:3], numbers[3:])

    def opening(self, _prefix, path):
        return ("opening", str(path))

    def thread_lwp(self, thread, *rest):
        lwp = next(t for t in rest if t.type == "LWP")
        return ("lwp_line", (claimed_int(thread), claimed_int(lwp)))

    def lwp_line(self, _text):
        return ("lwp_line", None)

    def terminated(self, _prefix, _signal, _rest):
        return ("terminated", None)

    def table_header(self, header):
        return ("table_header", header.type.removesuffix("_HEADER").lower())

    def chatter(self, _text):
        return ("chatter", None)

    def other(self, _text):
        return ("other", None)

    # -- table rows ------------------------------------------------------------------------

    def kernels_row(self, kernel, parent, dev, grid, status, sms, grid_dim, block_dim, invocation):
        return {"Kernel": str(kernel), "Parent": str(parent), "Dev": str(dev), "Grid": str(grid),
                "Status": str(status), "SMs": str(sms), "GridDim": str(grid_dim), "BlockDim": str(block_dim),
                "Invocation": str(invocation)}

    def devices_row(self, dev, pci, name, description, sm_type, sms, _rest=None):
        return {"Dev": str(dev), "PCI": str(pci), "Name": str(name), "Description": str(description),
                "SMType": str(sm_type), "SMs": str(sms)}

    def lanes_row(self, ln, state, pc, thread, exception=None):
        return {"Ln": str(ln), "State": str(state), "PC": str(pc), "ThreadIdx": str(thread),
                "Exception": str(exception) if exception is not None else ""}


def read_line(text: str) -> tuple[str, object]:
    """(kind, what it says) of one transcript line; ("other", None) when no rule reads it."""
    try:
        return _ToLine().transform(grammar.load("cuda_gdb", _STARTS).parse(text, start="start"))
    except LarkError:
        return ("other", None)


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
        self.table: str | None = None          # the table whose rows follow (kernels, lanes ...)
        self.tables: dict[str, list[dict]] = {}
        self.pid: int | None = None
        self.coredump: str | None = None
        self.event_lines = 0
        self.noise_lines = 0
        self.unparsed: list[tuple[int, str]] = []

    def claims(self, text: str, stream: tuple | None = None, headed: bool = False) -> bool:
        """``stream`` is the writer the line came from, ``headed`` whether it carries a
        logger's record header.  gdb prints no record headers, so only raw lines of the
        transcript's own writer are its chatter: a program's log records after a
        transcript ("[PG ID 0 ...] ... CUDA error") are read as what they are."""
        if _T.GDB_START.match(text):
            self.active = True
            self.stream = stream
            return True
        if not self.active or headed or stream != self.stream:
            return False
        return bool(_T.GDB_LINE.match(text) or _T.CHATTER.match(text)
                    or self.table is not None and _is_row(text) or _T.TABLE_START.match(text))

    def feed(self, lineno: int, raw: str) -> None:
        text = raw.rstrip()
        if text.startswith("(cuda-gdb) "):
            text = text[len("(cuda-gdb) "):]
        if not text:
            self.noise_lines += 1
            self.table = None
            return
        kind, said = read_line(text)
        if self.table is not None and kind in ("other", "lwp_line", "chatter") and _is_row(text):
            self.tables.setdefault(self.table, []).append(_cut(text, self.table))
            self.event_lines += 1
            return
        self.table = None
        used = True
        stops = self.stops
        if kind == "exception":
            stops.append(Stop(line=lineno, fault=said))
            self._take_focus()
        elif kind == "triggered":
            stop = self._current(lineno)
            stop.pc, stop.function, stop.location = said
        elif kind == "received":
            stop = self._current(lineno)
            stop.thread_name, stop.signal, fault = said
            stop.fault = stop.fault or fault
        elif kind == "focus":
            if stops:
                stops[-1].focus = said
            else:
                self.pending_focus = said
        elif kind == "frame":
            if stops and said.launch is not None and stops[-1].kernel is None:
                stop = stops[-1]
                stop.kernel, stop.launch, stop.args, stop.frame_location = (said.function, said.launch, said.args,
                                                                            said.location)
        elif kind == "table_header":
            self.table = said
        elif kind == "opening":
            self.coredump = said
        elif kind == "lwp_line":
            if said is not None and said[0] == 1:       # thread 1's LWP is the process
                self.pid = said[1]
            used = False
        elif kind == "terminated":
            used = True
        else:
            used = False
        if used:
            self.event_lines += 1
        elif kind == "chatter" or _T.GDB_NOISE.match(text):
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


def _is_row(text: str) -> bool:
    return _T.TABLE_ROW.match(text) is not None


def _cut(text: str, table: str) -> dict:
    """One table row as a dict, read by its table's rule (only the tables the analysis
    uses; another table's row, or a row no rule reads, is kept whole)."""
    if _T.ROW_GROUP.match(text):
        return {"group": text}
    rule = _ROW_RULES.get(table)
    if rule is None:
        return {"row": text.strip()}
    try:
        return _ToLine().transform(grammar.load("cuda_gdb", _STARTS).parse(text, start=rule))
    except LarkError:
        return {"row": text.strip()}


def _event(stop: Stop, relpath: str, seq: int, pid: int | None, tables: dict, coredump: str | None) -> Event:
    kernel = names.plain(stop.kernel or stop.function) or None
    attrs = {"fault": stop.fault, "kernel": kernel, "pc": stop.pc, "function": stop.function,
             "kernel_source": stop.location or stop.frame_location, "signal": stop.signal,
             "focus": stop.focus, "thread_name": stop.thread_name, "coredump": coredump}
    if stop.launch:
        attrs["grid"], attrs["block"] = stop.launch
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
