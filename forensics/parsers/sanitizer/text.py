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

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from lark import Token, Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge, names
from forensics.parsers import terminals
from forensics.events import Event, Frame, Kind, Severity, freeze

MARKER = "========="
# the grammar's terminals: its headlines, its fast-path shapes (those also on raw bytes)
_T = terminals.of("compute_sanitizer")
_BYTES = terminals.of("compute_sanitizer", on_bytes=True)


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
    if any(getattr(_T, name).match(payload) for name in _HEADLINES):
        return at + 1
    return None
TOOL_OF = {"access": "memcheck", "api_error": "memcheck", "warp_assert": "memcheck", "leak": "memcheck",
           "uninit": "initcheck", "barrier": "synccheck", "race": "racecheck", "hazard": "racecheck"}
FINDING_KINDS = {"access", "uninit", "barrier", "warp_assert", "race", "hazard"}


@dataclass(frozen=True)
class Site:
    """Where a report says an access ran, as the grammar reads it ('kernel(int*)+0x140 in
    file.cu:26'): the function as printed (the whole text when no shape of a site fits),
    its PC, its source, and racecheck's hazard count."""

    text: str
    function: str
    pc: str | None = None
    location: str | None = None
    hazards: int | None = None


NO_SITE = Site("", "")


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
    at_site: Site | None = None     # the same, read into its parts
    # racecheck's accesses: a race's (its headline's, then each "and ..." line's), a
    # hazard's (each "Read Thread (..) at ..." line's)
    accesses: list[Site] = field(default_factory=list)
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


@v_args(inline=True)
class _ToReport(Transformer):
    """A report's tree -> Report.  Rules that give a report part return (key, value)."""

    def start(self, report):
        return report

    def _report(self, kind, items):
        head, rest = items[0], list(items[1:])
        headline = str(head)
        if rest and isinstance(rest[0], Site):         # a race's headline ends with its first access
            site = rest.pop(0)
            headline += site.text
            rest.insert(0, ("access", (site, None)))
        report = Report(kind=kind, headline=headline.strip())
        for item in rest:
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
                elif key == "at":
                    report.at, report.at_site = value.text, value
                elif key == "access":
                    site, line = value
                    report.accesses.append(site)
                    if line is not None:
                        report.details.append(line)
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

    def api_error(self, _hit, error, code, message, api, *rest):
        headline = f'Program hit {error} (error {code}) due to "{message}" on CUDA API call to {api}.'
        report = self._report("api_error", [headline, *rest])
        report.api_call = ApiCall(str(error), knowledge.claimed_int(code), str(message), str(api),
                                  lookup=api.type == "LOOKUP_API")
        return report

    # -- where an access ran -------------------------------------------------------------

    def pc_site(self, function, pc, *rest):
        location = next((str(t) for t in rest if isinstance(t, Token)), None)
        hazards = next((h for h in rest if isinstance(h, tuple)), None)
        text = f"{function}+{pc}" + (f" in {location}" if location else "") + (hazards[1] if hazards else "")
        return Site(text, str(function), str(pc), location, hazards[0] if hazards else None)

    def old_site(self, pc, *rest):
        # CUDA-MEMCHECK: "0x9670 in path.cu:75:void ns::k<...>(...)"
        t = {i.type: str(i) for i in rest if isinstance(i, Token)}
        hazards = next((h for h in rest if isinstance(h, tuple)), None)
        location = f"{t['SITE_OLD_FILE']}:{t['SITE_OLD_LINE']}" if "SITE_OLD_FILE" in t else None
        function = t.get("SITE_OLD_FUNC", "")
        text = f"{pc} in " + (f"{location}:" if location else "") + function + (hazards[1] if hazards else "")
        return Site(text, function, str(pc), location, hazards[0] if hazards else None)

    def text_site(self, text, hazards=None):
        return Site(str(text) + (hazards[1] if hazards else ""), str(text), None, None,
                    hazards[0] if hazards else None)

    def site_hazards(self, count, word):
        return (knowledge.claimed_int(count), f" [{count}{word}")

    def at_line(self, site=NO_SITE):
        return ("at", site)

    def race_and(self, head, site):
        return ("access", (site, (str(head) + site.text).strip()))

    def hazard_access(self, head, site=NO_SITE):
        return ("access", (site, (str(head) + site.text).strip()))

    # -- the other detail lines ------------------------------------------------------------

    def by_line(self, *index):
        numbers = tuple(knowledge.claimed_int(i) for i in index)
        return ("by", (numbers[:3], numbers[3:]))

    def address_line(self, address, note=None):
        return ("address", (str(address), str(note).strip() if note is not None else None))

    def nearest_line(self, line):
        return ("nearest", str(line).strip())

    def backtrace(self, _saved, *frames):
        return ("frames", list(frames))

    def device_frames(self, *frames):
        return ("device_frames", list(frames))

    # -- frames ------------------------------------------------------------------------------

    def host_body(self, *tokens):
        return _tokens(tokens)

    def device_body(self, *tokens):
        return _tokens(tokens)

    def frame_cont(self, _in, module=None):
        return ("cont", str(module).strip() if module is not None else "")

    def host_frame(self, _head, body, cont=None):
        cont = cont[1] if cont else None
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

    def device_frame(self, _head, body=None):
        body = body or {}
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
                _T.SUMMARY_LINE.match(payload + "\n"):
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
        by = _BYTES.BY_FAST.search(report)
        address = _BYTES.ADDRESS_FAST.search(report)
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
                by = _T.BY_FAST.match(text, 5) if text.startswith("     by thread") else None
                if by:
                    numbers = tuple(knowledge.claimed_int(n) for n in by.groups())
                    thread, block = numbers[:3], numbers[3:]
                found = _T.ADDRESS_FAST.match(text, 5) if text.startswith("     A") else None
                if found:
                    address = found.group(1)
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
    if not _T.SESSION_LINE.match(current[0] + "\n"):
        return False
    line = payload + "\n"
    return bool(_T.SESSION_LINE.match(line)) and \
        not any(getattr(_T, name).match(line) for name in _HEADLINES)


def _finding_event(finding: Finding, relpath: str, seq: int, pid: int | None, pids: list[int]) -> Event:
    r = finding.first
    attrs: dict = {"report": r.kind, "tool": TOOL_OF.get(r.kind, "compute-sanitizer"), "count": finding.count,
                   "fault": r.headline, "processes_in_log": pids, "first_lines": finding.lines,
                   "partial": r.partial or None}
    if r.at_site is not None and r.at:
        site = r.at_site
        attrs.update(kernel_signature=site.function, kernel=_plain_kernel(site.function), pc_offset=site.pc,
                     kernel_source=site.location)
        outermost = next((f for f in reversed(r.device_stack) if f.function), None)
        if r.kind == "access" and outermost is not None and outermost.function != attrs["kernel"]:
            # the fault's PC is in a device function; the device frames are its callers,
            # the outermost shown is the launched kernel (or the nearest caller shown)
            attrs.update(device_function=attrs["kernel"], kernel=outermost.function,
                         kernel_signature=r.device_symbols[r.device_stack.index(outermost)])
    if r.kind == "hazard" and r.details:
        site = r.accesses[0] if r.accesses else NO_SITE
        attrs.update(kernel_signature=site.function, kernel=_plain_kernel(site.function), pc_offset=site.pc,
                     kernel_source=site.location, accesses=r.details[:2])
    if r.kind == "warp_assert" and (r.at or "").startswith("__assertfail"):
        # the assert fired in a device function; the launched kernel is the host stub frame
        stub = _launched_kernel(r.frames)
        if stub:
            attrs.update(kernel_signature=stub, kernel=_plain_kernel(stub))
    if r.kind == "race":
        site = r.accesses[0] if r.accesses else NO_SITE
        attrs.update(kernel_signature=site.function, kernel=_plain_kernel(site.function), pc_offset=site.pc,
                     kernel_source=site.location, accesses=[r.headline] + r.details)
        hazards = [a.hazards for a in r.accesses[1:] if a.hazards is not None]
        attrs["hazards"] = sum(hazards) if hazards else None
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


def _plain_kernel(signature: str) -> str:
    """Kernel name without return type or parameter list (template arguments kept)."""
    return names.plain(signature)


def _range(values: set) -> dict:
    ordered = sorted(values)
    return {"first": list(ordered[0]), "last": list(ordered[-1]), "distinct": len(values)}
