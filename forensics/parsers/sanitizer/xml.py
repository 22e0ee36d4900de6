"""compute-sanitizer XML (``--xml --save FILE``) -> the same collapsed findings as the
text form.  Streamed with ``xml.etree.ElementTree.iterparse``: each <record> is read and
dropped, so a file of a million records needs no more memory than one.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from forensics import names
from forensics.events import Frame
from forensics.parsers.base import ParsedSource
from forensics.parsers.sanitizer.text import _PLACEHOLDERS, ApiCall, Finding, Report, Site, _T, _finding_event
from forensics.inputs.sources import Source
from forensics.knowledge import claimed_int


def _text(node, path: str, default=None):
    found = node.find(path)
    return found.text.strip() if found is not None and found.text else default


def _xyz(node, path: str):
    found = node.find(path)
    if found is None:
        return None
    try:
        return tuple(claimed_int(_text(found, axis, "0")) for axis in ("x", "y", "z"))
    except ValueError:
        return None


def record_to_report(record) -> Report:
    what = record.find("what")
    kind = _text(record, "kind", "")
    text = _text(what, "text", "") if what is not None else ""
    if what is not None and what.find("api") is not None:
        report_kind = "api_error"
        headline = (f"Program hit {_text(what, 'error')} (error {_text(what, 'result')}) due to "
                    f"\"{_text(what, 'message')}\" on CUDA API call to {_text(what, 'api')}.")
    elif kind == "Analysis" or "race" in text.lower():
        return _race(record, what, text)
    elif what is not None and _text(what, "exception") == "Warp assert":
        # "Imprecise": the assert fired in __assertfail; the host stack names the kernel
        report_kind = "warp_assert"
        headline = "Warp assert"
    elif kind == "Initcheck" or text.startswith("Uninitialized "):
        report_kind = "uninit"              # the text form's headline is the record's text
        headline = text
    elif what is not None and what.find("space") is not None:
        report_kind = "access"
        headline = f"Invalid {_text(what, 'space')} {_text(what, 'direction')} of size {_text(what, 'size')} bytes"
    else:
        report_kind = "other"
        headline = text or kind
    where = record.find("where")
    site = _site(where) if where is not None and _text(where, "func") else None
    report = Report(kind=report_kind, headline=headline, at=site.text if site else None, at_site=site,
                    thread=_xyz(record, "who/threadIdx"), block=_xyz(record, "who/blockIdx"))
    if report_kind == "api_error":
        api = _text(what, "api", "")
        code = _text(what, "result", "")
        report.api_call = ApiCall(_text(what, "error", ""), claimed_int(code) if code.isdigit() else None,
                                  _text(what, "message", ""), api,
                                  lookup=bool(_T.LOOKUP_API.fullmatch(api)))
    if what is not None and _text(what, "address"):
        report.address = _text(what, "address")
        report.address_note = f"is {_text(what, 'error')}" if _text(what, "error") else None
    for frame in record.iterfind("deviceStack/frame"):
        report.device_frames.append(f"device: {_text(frame, 'func', '?')}+{_text(frame, 'pc', '0x0')}")
        report.device_stack.append(_frame(frame))
        report.device_symbols.append(_text(frame, "func", ""))
    for frame in record.iterfind("hostStack/frame"):
        func = _text(frame, "func", "")
        loc = f" in {os.path.basename(_text(frame, 'path'))}:{_text(frame, 'line')}" if _text(frame, "path") else ""
        report.frames.append(f"{func}{loc} [{_text(frame, 'pc', '')}] in {os.path.basename(_text(frame, 'module', ''))}".strip())
        report.stack.append(_frame(frame))
        report.symbols.append(func)
    return report


def _frame(frame) -> Frame:
    """A <frame> read as the text form reads a frame line (events.Frame: the function as
    names shows it, the source file, else the module)."""
    func = _text(frame, "func", "")
    path, module = _text(frame, "path"), _text(frame, "module")
    line = _text(frame, "line") if path else None
    return Frame(os.path.basename(path or module or "") or "<unknown>",
                 claimed_int(line) if line and line.isdigit() else None,
                 (names.plain(func) or None) if func and func not in _PLACEHOLDERS else None)


def _site(node, hazards: str | None = None) -> Site:
    """A <where> as the text form reads an access site ('func+0xPC in file.cu:LINE'), from
    its elements."""
    function, pc = _text(node, "func", "?"), _text(node, "pc", "0x0")
    location = f"{os.path.basename(_text(node, 'path'))}:{_text(node, 'line', '0')}" if _text(node, "path") else None
    count = claimed_int(hazards) if hazards and hazards.isdigit() else None
    text = f"{function}+{pc}" + (f" in {location}" if location else "") + (f" [{hazards} hazards]" if hazards else "")
    return Site(text, function, pc, location, count)


def _race(record, what, text: str) -> Report:
    """A racecheck record ("Race condition"): its two accesses are under what/source and
    what/destination, each with its <where>; read into the text form's race report."""
    level = _text(record, "level", "Error")
    source = what.find("source") if what is not None else None
    destination = what.find("destination") if what is not None else None
    if source is None or source.find("where") is None:
        return Report(kind="race", headline=text or _text(record, "kind", ""))
    first = _site(source.find("where"))
    headline = f"{level}: Race reported between {_text(source, 'direction', 'Write')} access at {first.text}"
    report = Report(kind="race", headline=headline, accesses=[first])
    if destination is not None and destination.find("where") is not None:
        other = _site(destination.find("where"), _text(destination, "count") or _text(source, "count"))
        report.accesses.append(other)
        report.details.append(f"and {_text(destination, 'direction', 'Read')} access at {other.text}")
    return report


class SanitizerXmlParser:
    def parse(self, source: Source) -> ParsedSource:
        out = ParsedSource(source.relpath, "compute-sanitizer-xml", lines=None, unparsed_lines=None)
        findings: dict[tuple, Finding] = {}
        order: list[tuple] = []
        records = 0
        try:
            with source.open_binary() as stream:
                for _, element in ET.iterparse(stream, events=("end",)):
                    if element.tag != "record":
                        continue
                    records += 1
                    report = record_to_report(element)
                    element.clear()
                    key = (report.kind, report.headline, report.at)
                    finding = findings.get(key)
                    if finding is None:
                        finding = findings[key] = Finding(first=report, first_line=0)
                        order.append(key)
                    finding.add(report.thread, report.block, report.address, records)
        except ET.ParseError as exc:
            out.problems.append(f"{source.relpath}: XML cut short or malformed after {records} records ({exc}); "
                                "the records before it are used")
        # XML records have no line numbers: the record index stands in ("first_lines").
        for seq, key in enumerate(order, 1):
            out.events.append(_finding_event(findings[key], source.relpath, seq, None, []))
        if not records and not out.problems:
            out.problems.append(f"{source.relpath}: compute-sanitizer XML without any <record>")
        return out

