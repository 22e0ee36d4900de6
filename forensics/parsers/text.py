"""Line-oriented text logs: vLLM consoles, per-rank logs, raw stderr, dmesg, HTTP dumps.

For every line: decode its envelope (grammars/vllm_log.lark), hand it to the traceback
assembler of its process, else match it against the message catalogue, else count it as
a plain log record, known noise, or unparsed.  Nothing is dropped without being counted.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import replace
from datetime import datetime

from forensics import knowledge
from forensics.events import Event, Kind, Severity, as_int, freeze
from forensics.parsers import kernel_log, prefilter
from forensics.parsers import traceback as tb
from forensics.parsers.base import ParsedSource
from forensics.parsers.sanitizer import MARKER, SanitizerAssembler
from forensics.parsers.stackdump import StackDumpAssembler, block_event
from forensics.parsers.vllm_log import LineParser, LogLine
from forensics.sources import ReadStats, Source, iter_lines

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Inputs at least this large take the fast path (prefilter.py): only lines near an
# anchor are parsed, the rest counted.  Smaller ones are parsed line by line.
FAST_PATH_BYTES = 8 << 20

# Exception messages that are themselves relays of another failure.
_RELAY_KINDS = {Kind.ENGINE_WORKER_FAILED, Kind.ENGINE_DEAD, Kind.PEER_FAILURE, Kind.NCCL, Kind.OOM}


def classify_message(text: str, form: str) -> tuple[knowledge.MessagePattern, dict] | None:
    """The first catalogue entry whose trigger and pattern match ``text``."""
    for entry in knowledge.message_patterns():
        if entry.applies_to == "record" and form != "record":
            continue
        if entry.applies_to == "raw" and form == "record":
            continue
        if not any(trigger in text for trigger in entry.triggers):
            continue
        match = entry.pattern.search(text)
        if match:
            return entry, {k: v for k, v in match.groupdict().items() if v is not None}
    return None


def is_noise(text: str) -> bool:
    return any(p.search(text) for _, p in knowledge.noise_patterns())


class TextLogParser:
    def __init__(self) -> None:
        self.lines = LineParser()

    def parse(self, source: Source) -> ParsedSource:
        out = ParsedSource(source.relpath, "text")
        stats = ReadStats()
        assemblers: dict = defaultdict(tb.TracebackAssembler)
        block_owner: dict[int, LogLine] = {}   # first line of a block -> its envelope
        forms: dict[str, int] = defaultdict(int)
        sanitizer = SanitizerAssembler(source.relpath)
        dumps = StackDumpAssembler()
        seq = 0

        def emit(event: Event) -> None:
            out.events.append(event)

        def finish_dumps(blocks) -> None:
            nonlocal seq
            for block in blocks:
                seq += 1
                event = block_event(block, source.relpath, seq)
                if event is None:
                    for lineno, text in zip(block.linenos, block.lines):
                        out.count_unparsed(lineno, text)
                    continue
                forms[block.format.name] += 1
                out.event_lines += len(block.lines)
                emit(event)

        def finish_blocks(blocks: list[tb.Block]) -> None:
            nonlocal seq
            for block in blocks:
                seq += 1
                first = block.linenos[0]
                env = block_owner.pop(first, LogLine(message=""))
                chain = tb.parse_block(block.text)
                if chain is None:
                    for lineno, text in zip(block.linenos, block.lines):
                        out.count_unparsed(lineno, text)
                    out.problems.append(f"line {first}: traceback that does not parse "
                                        f"({len(block.lines)} lines counted as unparsed)")
                    continue
                out.event_lines += len(block.lines)
                forms["traceback"] += 1
                if chain[-1].type == tb.CUT_TYPE:
                    out.problems.append(f"line {first}: a traceback is cut off before its exception line "
                                        "(log truncated, or interleaved beyond repair)")
                emit(_traceback_event(chain, env, source.relpath, first, seq, len(block.lines)))

        def busy() -> bool:
            return (any(a.block is not None for a in assemblers.values()) or bool(sanitizer.current)
                    or dumps.block is not None)

        with source.open_binary() as stream:
            fast = (source.size or 0) >= FAST_PATH_BYTES
            if fast and source.kind == "compute-sanitizer":
                # a long sanitizer log: whole repeated reports are taken at once
                lines_of = _sanitizer_blocks(stream, sanitizer, out)
                fast = False
            else:
                lines_of = None
            hits = prefilter.grep_hits(str(source.path)) if fast and source.is_plain_file else None
            scanner = prefilter.Scanner(stream, busy, hits) if fast else None
            source_lines = lines_of if lines_of is not None else (scanner.lines() if fast else iter_lines(stream, stats))
            for lineno, raw in source_lines:
                out.lines += 1
                text = _ANSI.sub("", raw) if "\x1b" in raw else raw
                if text.startswith(MARKER):
                    # compute-sanitizer output, possibly interleaved with the app's own lines
                    forms["compute-sanitizer"] += 1
                    sanitizer.feed(lineno, text)
                    continue
                done_dumps, in_dump = dumps.feed(text, lineno)
                finish_dumps(done_dumps)
                if in_dump:
                    continue
                line = self.lines.parse(text)
                forms[line.form] += 1
                key = (line.pid, line.process) if line.pid is not None else None
                done, taken = assemblers[key].feed(line.message, lineno, line.header)
                finish_blocks(done)
                if taken:
                    if assemblers[key].block and assemblers[key].block.linenos[0] == lineno:
                        block_owner[lineno] = line
                    continue
                seq += 1
                event = _line_event(line, source.relpath, lineno, seq)
                if event is not None:
                    out.event_lines += 1
                    emit(event)
                elif is_noise(line.message):
                    out.noise_lines += 1
                else:
                    out.count_unparsed(lineno, text)
        for assembler in assemblers.values():
            finish_blocks(assembler.flush())
        sanitizer.flush()
        out.problems.extend(sanitizer.problems)
        finish_dumps(dumps.flush())
        out.event_lines += sanitizer.report_lines
        out.noise_lines += sanitizer.noise_lines
        for lineno, text in sanitizer.unparsed:
            out.count_unparsed(lineno, MARKER + text)
        out.events.extend(sanitizer.events(seq))

        if scanner is not None:
            out.counted_lines = scanner.counted
            out.lines += scanner.counted
            stats.long_lines += scanner.long_lines
        out.problems.extend(stats.describe())
        out.kind = _dominant_kind(forms, out.events)
        out.events = _resolve(out.events, source, out.problems)
        return out


# a line holding only the marker (and maybe spaces) ends a report
_TERMINATOR = re.compile(rb"\n=========[ \t]*\r?\n")


def _sanitizer_blocks(stream, sanitizer: SanitizerAssembler, out: ParsedSource):
    """Lines of a long compute-sanitizer log, minus the repeated reports, which go to
    the assembler whole (``feed_repeat``) and are accounted here."""
    prefilter.keep_memory_flat()
    lineno = 0
    carry = b""
    while True:
        data = stream.read(prefilter.BLOCK_BYTES)
        block = carry + data
        if not block:
            return
        if data:
            last = None
            for last in _TERMINATOR.finditer(block, max(0, len(block) - (1 << 20))):
                pass
            if last is None:
                last = next(iter(reversed(list(_TERMINATOR.finditer(block)))), None)
            if last is None and len(block) < 4 * prefilter.BLOCK_BYTES:
                carry = block
                continue
            end = last.end() if last is not None else block.rfind(b"\n") + 1
            carry, block = block[end:], block[:end]
        else:
            carry = b""
        pos = 0
        for match in _TERMINATOR.finditer(block):
            report = block[pos:match.start()]
            if sanitizer.feed_repeat(report, lineno + 1):
                nlines = report.count(b"\n") + 2          # the report's lines and its terminator
                lineno += nlines
                out.lines += nlines
                out.noise_lines += 1
            else:
                for raw in block[pos:match.end() - 1].split(b"\n"):
                    lineno += 1
                    yield lineno, raw.decode("utf-8", "replace").rstrip("\r").replace("\x00", "")
            pos = match.end()
        if pos < len(block):
            rest = block[pos:]
            for raw in rest.split(b"\n")[:-1] if rest.endswith(b"\n") else rest.split(b"\n"):
                lineno += 1
                yield lineno, raw.decode("utf-8", "replace").rstrip("\r").replace("\x00", "")
        if not data:
            return


def _line_event(line: LogLine, relpath: str, lineno: int, seq: int) -> Event | None:
    extra = {}
    if line.form == "raw":
        kernel = kernel_log.parse(line.message)
        if kernel is not None:
            extra = {k: v for k, v in (("uptime", kernel.uptime), ("host", kernel.host)) if v is not None}
            line = LogLine(message=kernel.message, form="kernel", stamp=kernel.stamp,
                           container_time=kernel.wall_time)
    found = classify_message(line.message, line.form)
    base = dict(source=relpath, line=lineno, seq=seq, pid=line.pid, process=line.process,
                attrs=freeze({**_envelope_attrs(line), **extra}))
    if found:
        entry, groups = found
        severity = Severity.from_level(entry.severity or line.level)
        attrs = {**_envelope_attrs(line), **extra, **groups, "message_id": entry.id}
        pid = line.pid
        process = line.process
        if pid is None and entry.kind in (Kind.EXIT, Kind.XID, Kind.OOM, Kind.FATAL_SIGNAL) and "subject_pid" in groups:
            # A line about a process written by no process of ours: file it under its subject.
            pid = as_int(groups["subject_pid"])
            process = groups.get("subject_process", process)
        if entry.kind == Kind.CUDA_ERROR or "CUDA error" in line.message:
            err = knowledge.find_cuda_error(line.message)
            if err:
                attrs["cuda_error"] = err
        return Event(**{**base, "kind": entry.kind, "message": line.message, "severity": severity,
                        "pid": pid, "process": process, "attrs": freeze(attrs)})
    if line.form in ("record", "glog"):
        return Event(**base, kind=Kind.LOG, message=line.message,
                     severity=Severity.from_level(line.level))
    if line.form == "uvicorn" and not is_noise(line.message):
        return Event(**base, kind=Kind.LOG, message=line.message,
                     severity=Severity.from_level(line.level))
    return None


def _traceback_event(chain, env: LogLine, relpath: str, lineno: int, seq: int, nlines: int) -> Event:
    final = chain[-1]
    headline = f"{final.type}: {final.message.splitlines()[0]}" if final.message else final.type
    if final.type == tb.CUT_TYPE:
        where = f" in {final.frames[-1].function or final.frames[-1].file}" if final.frames else ""
        headline = f"traceback cut off after {len(final.frames)} frame(s){where}: the exception line is missing"
    attrs = {**_envelope_attrs(env), "chain": chain, "exception_type": final.type,
             "exception_message": final.message, "lines": nlines,
             "unraisable": any(e.unraisable_in for e in chain),
             "unraisable_in": next((e.unraisable_in for e in chain if e.unraisable_in), None)}
    kind = Kind.TRACEBACK
    found = classify_message(headline, "raw")
    err = knowledge.find_cuda_error(f"{final.type}: {final.message}")
    if err:
        attrs["cuda_error"] = err
    if found and found[0].kind in _RELAY_KINDS:
        kind = found[0].kind
        attrs.update(found[1])
        attrs["message_id"] = found[0].id
    elif err:
        kind = Kind.CUDA_ERROR
    elif "OutOfMemoryError" in final.type:
        kind = Kind.OOM
    return Event(kind=kind, message=headline, source=relpath, line=lineno, seq=seq,
                 severity=Severity.ERROR, pid=env.pid, process=env.process, attrs=freeze(attrs))


def _envelope_attrs(line: LogLine) -> dict:
    attrs = {}
    if line.stamp:
        attrs["stamp"] = line.stamp
    if line.container_time:
        attrs["container_time"] = line.container_time
    if line.level:
        attrs["level"] = line.level
    if line.fileinfo:
        attrs["logged_at"] = f"{line.fileinfo}:{line.lineno}"
    if line.glog_rank is not None:
        attrs["glog_rank"] = line.glog_rank
    return attrs


def _dominant_kind(forms: dict[str, int], events: list[Event]) -> str:
    if forms.get("compute-sanitizer", 0) > forms.get("record", 0):
        return "compute-sanitizer"
    if forms.get("record") or forms.get("uvicorn"):
        return "vllm-log"
    if forms.get("faulthandler"):
        return "faulthandler"
    if forms.get("py-spy"):
        return "py-spy"
    kinds = {e.kind for e in events}
    if Kind.XID in kinds:
        return "kernel-log"
    if forms.get("traceback"):
        return "python-traceback"
    if Kind.EXIT in kinds:
        return "exit-status"
    if Kind.HTTP in kinds:
        return "http"
    if forms.get("glog"):
        return "nccl-log"
    return "text"



# --- after the last line: times and the file's own process ---------------------------------

def _resolve(events: list[Event], source: Source, problems: list[str] | None = None) -> list[Event]:
    events = _fill_single_process(events)
    events = _set_aside_earlier_runs(events, problems if problems is not None else [])
    return _resolve_times(events, source)


def _set_aside_earlier_runs(events: list[Event], problems: list[str]) -> list[Event]:
    """A file with several server starts (restarts appended to one log): only the last
    run is used for the verdict; pids of earlier runs may have been reused."""
    starts = [i for i, e in enumerate(events) if e.attrs.get("message_id") == "engine-config"]
    if len(starts) < 2:
        return events
    last = starts[-1]
    problems.append(f"{len(starts)} server starts in this file (restarts appended to one log): the verdict "
                    f"uses the last run, from line {events[last].line}; {last} earlier event(s) are kept in "
                    "the timeline only (pids may have been reused)")
    return [replace(e, attrs=freeze({**e.attrs, "earlier_run": True})) if i < last else e
            for i, e in enumerate(events)]


def _fill_single_process(events: list[Event]) -> list[Event]:
    """A per-rank log without prefixes: its identity line names the pid for all its lines."""
    if any(e.process for e in events):
        return events
    pids = {as_int(e.attrs.get("subject_pid")) for e in events
            if e.kind == Kind.PROCESS_IDENTITY and e.attrs.get("subject_pid")}
    if len(pids) != 1:
        return events
    pid = pids.pop()
    return [e if e.pid is not None else replace(e, pid=pid) for e in events]


def _resolve_times(events: list[Event], source: Source) -> list[Event]:
    """Absolute times from year-less stamps: container stamp > file mtime's year > now.

    Handles New Year: a month that goes backwards by more than half a year starts a new
    year; the last stamp is pinned to the hint year (the file was written after it).
    """
    hint_year = (source.mtime or datetime.now()).year
    parsed: list[datetime | None] = []
    year_offset = 0
    last_month = None
    for event in events:
        stamp = event.attrs.get("stamp")
        when = None
        if stamp:
            parts = _stamp_parts(stamp)
            if parts:
                month, day, h, m, s, frac, year = parts
                if year is None:
                    if last_month is not None and month < last_month - 6:
                        year_offset += 1
                    last_month = month
                when = (year, year_offset, month, day, h, m, s, frac)
        parsed.append(when)
    shift = hint_year - year_offset
    out = []
    last_time = None
    for event, when in zip(events, parsed):
        ctime = event.attrs.get("container_time")
        time = None
        if ctime is not None:
            time = ctime.replace(tzinfo=None) if ctime.tzinfo is None else \
                ctime.astimezone(tz=None).replace(tzinfo=None)
        elif when is not None:
            year, offset, month, day, h, m, s, frac = when
            try:
                time = datetime(year if year else shift + offset, month, day, h, m, s, frac)
            except ValueError:
                time = None
        if time is not None:
            last_time = time
            out.append(replace(event, time=time))
        elif last_time is not None:
            out.append(replace(event, time=last_time, time_inferred=True))
        else:
            out.append(event)
    return out


_STAMP = re.compile(r"(\d\d)-(\d\d)(?:[ -](\d{4}))?[ -](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")


def _stamp_parts(stamp: str):
    match = _STAMP.fullmatch(stamp.strip())
    if not match:
        return None
    month, day, year, h, m, s, frac = match.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return int(month), int(day), int(h), int(m), int(s), micro, int(year) if year else None


