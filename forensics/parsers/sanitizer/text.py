"""compute-sanitizer text reports -> collapsed findings (grammars/compute_sanitizer.lark).

The tool can print a million identical reports (one per faulting thread).  Reports are
grouped per file by what makes them the same bug - kind, headline, kernel+PC - and
collapsed into one finding with a count and the ranges of threads, blocks and
addresses.  Only the first report of each group goes through the Lark parser; the
others contribute their thread/block/address, read with the grammar's own terminal
patterns, so memory and time stay flat in the number of repeats.

The grammar reads each backtrace line into its parts: ``host_stack`` holds them as
``events.Frame`` (the function as ``names`` shows it, the source file when printed, else
the module), and an API error's ``api_caller`` is the frame that made the failing call
(the innermost with a source location, else the innermost named one outside the
runtime's launch path).  A report whose last line was cut (the end of a paste) is kept
without that line and marked ``partial``; a marker that starts mid-line (after a log
prefix or another tool's output) starts a report when a headline follows it.  An API
error that does not stick is a warning (its caller may handle it), an entry-point lookup's
failure is probing (info); a sticky one is an error.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from lark import Token, Transformer
from lark.exceptions import LarkError

from forensics import grammar, knowledge, names
from forensics.events import Event, Frame, Kind, Severity, freeze

MARKER = "========="


def is_sanitizer_line(text: str, seen: bool) -> bool:
    """A compute-sanitizer line: the marker and a space, or the bare marker once a report
    is under way.  A line of more "=" (a launcher's separator, nvidia-smi's banner) is not.
    The marker may also start mid-line - after a log prefix or another tool's output on
    the same line (pytest's test path) - when what follows it is a report's headline."""
    if text.startswith("========= "):
        return True
    if seen and text.rstrip() == MARKER:
        return True
    return _marker_inside(text) is not None


def _marker_inside(text: str) -> int | None:
    """Where a marker that starts a report's headline begins inside a line (after a
    space, not inside a longer run of "="), else None."""
    at = text.find(" " + MARKER + " ")
    if at < 0 or (at > 0 and text[at - 1] == "="):
        return None
    payload = text[at + 1 + len(MARKER):].rstrip("\r\n") + "\n"
    if any(_terminal(name).match(payload) for name in _HEADLINES):
        return at + 1
    return None
TOOL_OF = {"access": "memcheck", "api_error": "memcheck", "warp_assert": "memcheck", "leak": "memcheck",
           "uninit": "initcheck", "barrier": "synccheck", "race": "racecheck", "hazard": "racecheck"}
FINDING_KINDS = {"access", "uninit", "barrier", "warp_assert", "race", "hazard"}


@dataclass(frozen=True)
class ApiCall:
    """An API error report's headline, read: the error, its code and text, the call."""

    error: str                      # cudaErrorLaunchFailure / CUDA_ERROR_LAUNCH_FAILED
    code: int | None
    message: str
    api: str
    lookup: bool = False            # an entry-point lookup (cuGetProcAddress ...): probing


@dataclass
class Report:
    """One parsed report (before collapsing)."""

    kind: str                       # access | api_error | race | ... (grammar rule name)
    headline: str
    at: str | None = None           # "kernel+0x140 in file.cu:26"
    thread: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    address: str | None = None
    address_note: str | None = None  # "is out of bounds" / "is misaligned"
    nearest: str | None = None
    details: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    device_frames: list[str] = field(default_factory=list)   # before the host backtrace (Warp assert)
    # the host frames read into their parts, index for index with ``frames``: the
    # function as names shows it, the source file (else the module, else "<unknown>")
    stack: list[Frame] = field(default_factory=list)
    device_stack: list[Frame] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)         # each host frame's function as printed
    device_symbols: list[str] = field(default_factory=list)  # each device frame's function as printed
    partial: bool = False           # its last line was cut off (and left out)
    api_call: ApiCall | None = None  # an api_error report's headline, read


@dataclass
class Finding:
    """Reports collapsed: the first one, how many, and the ranges they covered."""

    first: Report
    first_line: int
    count: int = 0
    threads: set = field(default_factory=set)
    blocks: set = field(default_factory=set)
    addresses: list = field(default_factory=list)   # [min, max] as ints
    lines: list[int] = field(default_factory=list)  # a few line numbers

    def add(self, report_thread, report_block, address, lineno) -> None:
        self.count += 1
        if report_thread is not None and len(self.threads) < 4096:
            self.threads.add(report_thread)
        if report_block is not None and len(self.blocks) < 4096:
            self.blocks.add(report_block)
        if address:
            value = int(address, 16)
            if not self.addresses:
                self.addresses = [value, value]
            else:
                self.addresses = [min(self.addresses[0], value), max(self.addresses[1], value)]
        if len(self.lines) < 5:
            self.lines.append(lineno)


class _ToReport(Transformer):
    def start(self, items):
        return items[0]

    def _report(self, kind, items):
        report = Report(kind=kind, headline=str(items[0]).strip())
        for item in items[1:]:
            if isinstance(item, tuple):
                key, value = item
                if key == "frames":
                    report.frames.extend(f.text for f in value)
                    report.stack.extend(f.frame for f in value)
                    report.symbols.extend(f.symbol for f in value)
                elif key == "device_frames":
                    report.device_frames.extend(f.text for f in value)
                    report.device_stack.extend(f.frame for f in value)
                    report.device_symbols.extend(f.symbol for f in value)
                elif key == "by":
                    report.thread, report.block = value
                elif key == "address":
                    report.address, report.address_note = value
                else:
                    setattr(report, key, value)
            else:
                report.details.append(str(item).strip())
        return report

    def __default__(self, data, children, meta):
        data = str(data)
        if data in ("access", "uninit", "barrier", "warp_assert", "race", "hazard",
                    "leak", "summary", "session", "other"):
            return self._report(data, children)
        return super().__default__(data, children, meta)

    def api_error(self, items):
        t = {i.type: str(i) for i in items if isinstance(i, Token) and i.type != "PROGRAM_HIT"}
        api = t.get("LOOKUP_API") or t.get("HIT_API")
        headline = (f'Program hit {t["HIT_ERROR"]} (error {t["HIT_CODE"]}) due to "{t.get("HIT_MESSAGE", "")}" '
                    f"on CUDA API call to {api}.")
        report = self._report("api_error", [headline] + [i for i in items if not isinstance(i, Token)])
        report.api_call = ApiCall(t["HIT_ERROR"], knowledge.claimed_int(t["HIT_CODE"]), t.get("HIT_MESSAGE", ""),
                                  api, lookup="LOOKUP_API" in t)
        return report

    def at_line(self, items):
        return ("at", str(items[0]).strip()[3:])

    def by_line(self, items):
        return ("by", _thread_block(str(items[0])))

    def address_line(self, items):
        return ("address", _address(str(items[0])))

    def nearest_line(self, items):
        return ("nearest", str(items[0]).strip())

    def backtrace(self, items):
        # the frames only: the "Saved host backtrace ..." line is a Token
        return ("frames", [f for f in items if isinstance(f, PrintedFrame)])

    def device_frames(self, items):
        return ("device_frames", list(items))

    def host_body(self, items):
        return _tokens(items)

    def device_body(self, items):
        return _tokens(items)

    def frame_cont(self, items):
        return ("cont", _tokens(items).get("F_MODULE", ""))

    def host_frame(self, items):
        body = next((i for i in items if isinstance(i, dict)), {})
        cont = next((i[1] for i in items if isinstance(i, tuple) and i[0] == "cont"), None)
        func, addr = body.get("F_FUNC"), body.get("F_ADDR")
        module = body.get("F_MODULE") or cont or None
        file, line = body.get("F_FILE"), body.get("F_LINE")
        if "F_OLD_MODULE" in body:               # CUDA-MEMCHECK: "module (func + 0xoff) [0xaddr]"
            module, func = body["F_OLD_MODULE"], body.get("F_OLD_FUNC")
            text = f"{module} ({func} + {body.get('F_OFFSET')}) {addr}" if func else f"{module} {addr}"
        else:
            text = " ".join(part for part in (func, f"in {file}:{line}" if file else None, addr,
                                              f"in {module}" if module else None) if part)
        return PrintedFrame(text, _frame(func, file, line, module), func or "")

    def device_frame(self, items):
        body = next((i for i in items if isinstance(i, dict)), {})
        func, file, line = body.get("F_DFUNC"), body.get("F_FILE"), body.get("F_LINE")
        pc = body.get("F_PC") or (f"+{body['F_OFFSET']}" if body.get("F_OFFSET") else "")
        text = "device:" + (func or "") + pc + (f" in {file}:{line}" if file else "")
        return PrintedFrame(text, _frame(func, file, line, None), func or "")


class PrintedFrame(NamedTuple):
    """A backtrace line: as the report shows it (without "Host Frame:"), and read."""

    text: str
    frame: Frame
    symbol: str                 # the function as printed (signature, template arguments)


def _tokens(items) -> dict[str, str]:
    return {t.type: str(t).strip() for t in items if isinstance(t, Token)}


_PLACEHOLDERS = frozenset({"", "?", "??", "???", "unknown", "<unknown>"})


def _frame(func: str | None, file: str | None, line: str | None, module: str | None) -> Frame:
    function = names.plain(func) if func else None
    function = None if function in _PLACEHOLDERS else function
    return Frame(file or module or "<unknown>", knowledge.claimed_int(line) if file and line else None, function)


@functools.lru_cache(maxsize=None)
def _terminal(name: str) -> re.Pattern:
    """A terminal's regex from the grammar itself, for the fast path."""
    parser = grammar.load("compute_sanitizer")
    term = next(t for t in parser.terminals if t.name == name)
    return re.compile(term.pattern.to_regexp())


def _thread_block(line: str):
    m = _terminal("BY_LINE").match(line if line.endswith("\n") else line + "\n")
    if not m:
        return None, None
    nums = tuple(knowledge.claimed_int(g) for g in m.groups()[:6])
    return nums[:3], nums[3:]


def _address(line: str):
    m = _terminal("ADDRESS_LINE").match(line if line.endswith("\n") else line + "\n")
    if not m:
        return None, None
    return m.group(2), (m.group(3) or "").strip() or None


def parse_report(lines: list[str]) -> Report | None:
    text = "".join(line + "\n" for line in lines)
    try:
        return _ToReport().transform(grammar.load("compute_sanitizer").parse(text))
    except LarkError:
        return None


class SanitizerAssembler:
    """Collects one file's sanitizer lines into reports and collapses them."""

    def __init__(self, relpath: str) -> None:
        self.relpath = relpath
        self.current: list[str] = []
        self.current_lines: list[int] = []
        self.findings: dict[tuple, Finding] = {}
        self.order: list[tuple] = []
        self.session: dict[str, list[str]] = {}
        self.summary: list[str] = []
        self.unparsed: list[tuple[int, str]] = []
        self.problems: list[str] = []
        self.report_lines = 0      # lines of findings and summaries (become events)
        self.noise_lines = 0       # bare markers and the session header block

    def feed(self, lineno: int, line: str) -> None:
        if not line.startswith(MARKER):
            line = line[_marker_inside(line) or 0:]     # the text before a mid-line marker
        payload = line[len(MARKER):]
        if not payload.strip():
            self.noise_lines += 1
            self._close()
            return
        if payload.startswith(" ") and not payload.startswith("  ") and self.current and \
                not _continues(self.current, payload):
            self._close()
        self.current.append(payload)
        self.current_lines.append(lineno)
        if payload.startswith(" ") and not payload.startswith("  ") and \
                _terminal("SUMMARY_LINE").match(payload + "\n"):
            # a summary line ends the tool's output: no report stays open after it (the
            # fast path of a large log resumes counting; a second summary line is read
            # on its own, to the same summary)
            self._close()

    def feed_repeat(self, report: bytes, lineno: int) -> bool:
        """The fast path for a long log: one whole report (marker lines, terminator
        excluded) taken at once when it repeats a report already parsed; False when it
        is new (the caller then feeds its lines one by one, through the grammar)."""
        first = report.find(b"\n")
        second_end = report.find(b"\n", first + 1)
        head = report[:first].decode("utf-8", "replace")
        second = report[first + 1:second_end if second_end > 0 else len(report)].decode("utf-8", "replace")
        if not head.startswith(MARKER) or not second.startswith(MARKER):
            return False
        key = _collapse_key([head[len(MARKER):], second[len(MARKER):]])
        finding = self.findings.get(key)
        if finding is None or self.current:
            return False
        by = _BY.search(report)
        address = _ADDR.search(report)
        finding.add(tuple(map(int, by.groups()[:3])) if by else None,
                    tuple(map(int, by.groups()[3:])) if by else None,
                    address.group(1).decode() if address else None, lineno)
        self.report_lines += report.count(b"\n") + 1
        return True

    def flush(self) -> None:
        self._close()
        for text in self.summary:
            if "were not printed" in text:
                self.problems.append(f"compute-sanitizer hit its --print-limit: {text.split(': ', 1)[-1]} "
                                     "(findings and counts cover the printed reports only)")
        if (self.session or self.findings) and not any("SUMMARY" in s for s in self.summary):
            self.problems.append("compute-sanitizer output ends before its ERROR SUMMARY: cut short "
                                 "(the findings before the cut are used; counts may be incomplete)")

    def _close(self) -> None:
        if not self.current:
            return
        lines, linenos = self.current, self.current_lines
        self.current, self.current_lines = [], []
        key_head = _collapse_key(lines)
        cached = self.findings.get(key_head)
        if cached is not None:
            thread = block = address = None
            for text in lines[1:4]:
                if text.startswith("     by thread"):
                    thread, block = _thread_block(text)
                elif text.startswith(("     Access to", "     Access at", "     Address")):
                    address = _address(text)[0]
            cached.add(thread, block, address, linenos[0])
            self.report_lines += len(lines)
            return
        report = parse_report(lines)
        if report is None and len(lines) > 1:
            # the last line cut mid-way (a paste, a log that ends mid-write): the report
            # before it is kept, marked partial, and the cut line counted as unparsed
            report = parse_report(lines[:-1])
            if report is not None:
                report.partial = True
                self.unparsed.append((linenos[-1], lines[-1]))
                self.problems.append(f"line {linenos[-1]}: a compute-sanitizer report cut mid-line; "
                                     "the report before the cut line is used")
                lines, linenos = lines[:-1], linenos[:-1]
        if report is None:
            self.unparsed.extend(zip(linenos, lines))
            return
        if report.kind == "session":
            self.noise_lines += len(lines)
            for text in report.details + [report.headline]:
                key, _, value = text.partition(":")
                self.session.setdefault(key.strip(), []).append(value.strip())
            return
        self.report_lines += len(lines)
        if report.kind == "summary":
            self.summary.extend([report.headline] + report.details)
            return
        finding = Finding(first=report, first_line=linenos[0])
        finding.add(report.thread, report.block, report.address, linenos[0])
        self.findings[key_head] = finding
        self.order.append(key_head)

    # --- events -----------------------------------------------------------------------

    def events(self, start_seq: int) -> list[Event]:
        pids = [knowledge.claimed_int(p) for p in self.session.get("Process ID", []) if p.isdigit()]
        pid = pids[0] if len(pids) == 1 else None
        out = []
        seq = start_seq
        for key in self.order:
            finding = self.findings[key]
            seq += 1
            out.append(_finding_event(finding, self.relpath, seq, pid, pids))
        for text in self.summary:
            seq += 1
            out.append(Event(kind=Kind.SANITIZER, message=text, source=self.relpath, line=0, seq=seq,
                             severity=Severity.INFO, pid=pid,
                             attrs=freeze({"report": "summary", "processes": pids})))
        return out


# The same shapes as the grammar's BY_LINE / ADDRESS_LINE terminals, on bytes, for the
# fast path over repeated reports.
_BY = re.compile(rb"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_ADDR = re.compile(rb"(?:Access to|Access at|Address) (0x[0-9a-fA-F]+)")
_VARYING = re.compile(r"0x[0-9a-fA-F]+|\(\d+,\d+,\d+\)")


def _collapse_key(lines: list[str]) -> tuple:
    """What makes two reports the same bug: the headline and the first detail line, with
    addresses and thread/block coordinates (which vary per report) blanked out - except
    a memcheck "at kernel+0xPC" line, whose PC offset is part of the identity."""
    head = lines[0].strip()
    second = lines[1].strip() if len(lines) > 1 else ""
    if second.startswith("at "):
        return (_VARYING.sub("#", head), second)
    return (_VARYING.sub("#", head), _VARYING.sub("#", second))


_HEADLINES = ("INVALID_HEAD", "UNINIT_HEAD", "BARRIER_HEAD", "ASSERT_HEAD", "PROGRAM_HIT", "RACE_HEAD",
              "HAZARD_HEAD", "LEAK_HEAD", "SUMMARY_LINE")


def _continues(current: list[str], payload: str) -> bool:
    """A 1-space line that belongs to the report in progress (the session header block:
    "Process ID: N", "Created: ..." under "COMPUTE-SANITIZER")."""
    if not _terminal("SESSION_LINE").match(current[0] + "\n"):
        return False
    line = payload + "\n"
    return bool(_terminal("SESSION_LINE").match(line)) and \
        not any(_terminal(name).match(line) for name in _HEADLINES)


def _finding_event(finding: Finding, relpath: str, seq: int, pid: int | None, pids: list[int]) -> Event:
    r = finding.first
    attrs: dict = {"report": r.kind, "tool": TOOL_OF.get(r.kind, "compute-sanitizer"), "count": finding.count,
                   "fault": r.headline, "processes_in_log": pids, "first_lines": finding.lines,
                   "partial": r.partial or None}
    if r.at:
        kernel_sig, pc, location = _split_at(r.at)
        attrs.update(kernel_signature=kernel_sig, kernel=_plain_kernel(kernel_sig), pc_offset=pc,
                     kernel_source=location)
        outermost = next((f for f in reversed(r.device_stack) if f.function), None)
        if r.kind == "access" and outermost is not None and outermost.function != attrs["kernel"]:
            # the fault's PC is in a device function; the device frames are its callers,
            # the outermost shown is the launched kernel (or the nearest caller shown)
            attrs.update(device_function=attrs["kernel"], kernel=outermost.function,
                         kernel_signature=r.device_symbols[r.device_stack.index(outermost)])
    if r.kind == "hazard" and r.details:
        site = r.details[0].split(" at ", 1)[1] if " at " in r.details[0] else ""
        kernel_sig, pc, location = _split_at(site)
        attrs.update(kernel_signature=kernel_sig, kernel=_plain_kernel(kernel_sig), pc_offset=pc,
                     kernel_source=location, accesses=r.details[:2])
    if r.kind == "warp_assert" and (r.at or "").startswith("__assertfail"):
        # the assert fired in a device function; the launched kernel is the host stub frame
        stub = _launched_kernel(r.frames)
        if stub:
            attrs.update(kernel_signature=stub, kernel=_plain_kernel(stub))
    if r.kind == "race":
        first_site = r.headline.split(" access at ", 1)[1] if " access at " in r.headline else ""
        kernel_sig, pc, location = _split_at(first_site)
        attrs.update(kernel_signature=kernel_sig, kernel=_plain_kernel(kernel_sig), pc_offset=pc,
                     kernel_source=location, accesses=[r.headline] + r.details)
        hazards = re.findall(r"\[(\d+) hazards?\]", " ".join(r.details))
        attrs["hazards"] = sum(knowledge.claimed_int(h) for h in hazards) if hazards else None
    if r.address:
        attrs["address"] = r.address
        attrs["address_note"] = r.address_note
    if r.nearest:
        attrs["nearest_allocation"] = r.nearest
    if finding.threads:
        attrs["threads"] = _range(finding.threads)
    if finding.blocks:
        attrs["blocks"] = _range(finding.blocks)
    if finding.addresses:
        attrs["address_range"] = [hex(finding.addresses[0]), hex(finding.addresses[1])]
    if r.device_frames:
        attrs["device_frames"] = r.device_frames[:40]
    if r.frames:
        attrs["host_frames"] = r.frames[:40]
        attrs["host_stack"] = tuple(r.stack[:40])
        # the innermost frame with a source location: where the kernel was launched from
        # (for an API error: the code that made the call)
        sited = [(text, frame, symbol) for text, frame, symbol in zip(r.frames, r.stack, r.symbols)
                 if frame.line is not None and not _LAUNCH_PLUMBING.search(text)
                 and frame.function != attrs.get("kernel")]
        attrs["launch_site"] = f"{sited[0][2]} in {sited[0][1].file}:{sited[0][1].line}" if sited else None
        if r.kind == "api_error":
            named = [frame for text, frame in zip(r.frames, r.stack) if frame.function
                     and not _LAUNCH_PLUMBING.search(text)]
            attrs["api_caller"] = sited[0][1] if sited else (named[0] if named else None)
    call = r.api_call
    if call is not None:
        found = knowledge.find_cuda_error(call.error)
        err = found.error if found else knowledge.lookup_error(str(call.code))
        attrs.update(api=call.api, error_name=call.error, error_code=call.code)
        if err:
            attrs["cuda_error"] = err
    severity = Severity.ERROR
    if call is not None and attrs.get("cuda_error") is not None and not attrs["cuda_error"].sticky:
        # an entry-point lookup answering "not there" is probing, not a fault; another call
        # failing with an error that does not stick may be one its caller handles (NCCL
        # asks for each kernel's attributes, and a build without this GPU's code answers
        # 209 for the kernels it will not use): noted, not the program's failure by itself
        severity = Severity.INFO if call.lookup else Severity.WARNING
    if r.kind in ("other", "leak"):
        severity = Severity.WARNING
    count = f" (x{finding.count})" if finding.count > 1 else ""
    where = f" at {r.at}" if r.at else ""
    return Event(kind=Kind.SANITIZER, message=f"{r.headline}{where}{count}", source=relpath,
                 line=finding.first_line, seq=seq, severity=severity, pid=pid, attrs=freeze(attrs))


# Frames of the CUDA runtime's own launch path (full XML stacks carry them).
_LAUNCH_PLUMBING = re.compile(r"__cudaLaunch|__device_stub|cudafe1|device_functions\.h|/cuda[^/]*/(targets|include)/")

def _launched_kernel(frames: list[str]) -> str | None:
    """The kernel's host stub among the host frames: the frame after the runtime's launch
    path (a full stack: cuLaunchKernel ... __device_stub__...), else the first frame
    other than main (the text form prints from the stub on)."""
    plumbing = [i for i, f in enumerate(frames) if _LAUNCH_PLUMBING.search(f)]
    if plumbing and plumbing[-1] + 1 < len(frames):
        frame = frames[plumbing[-1] + 1]
    else:
        frame = next((f for f in frames if not f.startswith(("main ", "device:"))), None)
    return frame.split(" in ")[0] if frame else None


_AT = re.compile(r"^(?P<func>.*?)\+(?P<pc>0x[0-9a-fA-F]+)(?: in (?P<loc>\S+))?$|"
                 r"^(?P<pc2>0x[0-9a-fA-F]+) in (?P<func2>.*)$")


def _split_at(text: str) -> tuple[str, str | None, str | None]:
    """'kernel(args)+0x140 in file.cu:26' -> (kernel(args), 0x140, file.cu:26)."""
    text = re.sub(r" \[\d+ hazards?\]$", "", text.strip())
    m = _AT.match(text)
    if not m:
        return text, None, None
    if m.group("func") is not None:
        return m.group("func"), m.group("pc"), m.group("loc")
    func = m.group("func2")
    loc = None
    old = _OLD_LOCATION.match(func)                       # CUDA-MEMCHECK "path.cu:75:void ns::k<...>(...)"
    if old:
        loc, func = f"{old.group(1)}:{old.group(2)}", old.group(3)
    return func, m.group("pc2"), loc


_OLD_LOCATION = re.compile(r"^([^\s():<>]+\.(?:cu|cuh|cpp|cc|c|h|hpp)):(\d+):(.*)$")


def _plain_kernel(signature: str) -> str:
    """Kernel name without return type or parameter list (template arguments kept)."""
    return names.plain(signature)


def _range(values: set) -> dict:
    ordered = sorted(values)
    return {"first": list(ordered[0]), "last": list(ordered[-1]), "distinct": len(values)}
