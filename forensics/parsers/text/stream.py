"""Text inputs of any kind: consoles, per-rank logs, pastes, kernel logs, tool output.

Each physical line goes through the normaliser (wrappers off, envelope kept), then its
record header is parsed (the line formats of ``lines.py``), then, per stream (one
writer: a container, a process, a rank), the format registry decides what it is:
a line of an open block (a traceback, a stack dump, a native crash, a launcher
summary), the first line of a new block, a compute-sanitizer or cuda-gdb line, a
message the catalogue knows, ordinary traffic (counted per template), known noise, or
unparsed.  Nothing is dropped without being counted.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import replace
from datetime import datetime
from typing import Iterator

from forensics import knowledge
from forensics.events import OWN_FAILURE, Event, Kind, Severity, clip, freeze
from forensics.inputs.normalise import Line, Normaliser
from forensics.inputs.reader import READ_ERRORS, ReadStats, chronological, detect_encoding, iter_lines
from forensics.inputs.sources import SNIFF_BYTES, Prefixed, Source
from forensics.parsers import blocks, scan, terminals
from forensics.parsers.base import ParsedSource, Traffic, dominant_kind
from forensics.parsers.sanitizer.text import SanitizerAssembler, is_sanitizer_line
from forensics.parsers.text import classify, raised
from forensics.parsers.text.block import BlockResult
from forensics.parsers.text.cuda_gdb import CudaGdbCollector
from forensics.parsers.text.lines import LineParser, Record, Stamp, site_formats, stampless, untagged_main_formats

# Inputs at least this large (decompressed, as far as the listing knows) take the fast
# path (scan.py): only lines near an anchor are parsed, the rest counted.
FAST_PATH_BYTES = 8 << 20
CONTINUES_LINES = 40        # how far back a line that only continues an error looks for it
BUSY_LINES = 64            # lines an open block keeps the fast path feeding without taking one
TRAFFIC_EXAMPLES = 2
_CONTINUES = tuple(knowledge.message_continuations())
DETAIL_LIMIT = 600      # characters of an error's raw continuation lines kept as its "detail"


@functools.lru_cache(maxsize=None)
def _tb_header() -> str:
    """Python's traceback header as the traceback grammar has it."""
    return terminals.literal("python_traceback", "TB_TEXT")


@functools.lru_cache(maxsize=None)
def _rank_hints() -> tuple[re.Pattern, ...]:
    return tuple(re.compile(h["pattern"]) for h in knowledge.load("processes").get("rank_hint", []))


@functools.lru_cache(maxsize=None)
def _noise() -> tuple[re.Pattern, ...]:
    return tuple(p for _, p in knowledge.noise_patterns())


def is_noise(text: str) -> bool:
    return any(p.search(text) for p in _noise())


class EventFactory:
    """Builds the events of one input: numbering, envelope and record header applied."""

    def __init__(self, relpath: str) -> None:
        self.relpath = relpath
        self.seq = 0
        self.line: Line | None = None
        self.record: Record | None = None

    def at(self, line: Line, record: Record) -> "EventFactory":
        self.line, self.record = line, record
        return self

    def __call__(self, kind: Kind, message: str, severity: Severity, attrs: dict) -> Event:
        self.seq += 1
        line, rec = self.line, self.record
        env = line.env
        attrs = dict(attrs)
        if rec is not None:
            if rec.stamp is not None:
                attrs.setdefault("stamp", rec.stamp)
            if rec.level:
                attrs.setdefault("level", rec.level)
            if rec.fileinfo:
                attrs.setdefault("logged_at", f"{rec.fileinfo}:{rec.lineno}")
                if rec.format in site_formats() and attrs.get("cuda_error") is not None \
                        and not attrs.get("error_file"):
                    attrs["error_file"], attrs["error_line"] = rec.fileinfo, rec.lineno
            if rec.uptime is not None:
                attrs.setdefault("uptime", rec.uptime)
            if rec.ranks:
                attrs.setdefault("parallel_ranks", dict(rec.ranks))
            if rec.logger:
                attrs.setdefault("logger", rec.logger)
            if rec.host:
                attrs.setdefault("machine", rec.host)
        if env.container:
            attrs.setdefault("container", env.container)
        if env.repeat:
            attrs.setdefault("repeated", env.repeat)
        rank = env.rank if env.rank is not None else (rec.rank if rec is not None else None)
        if rec is not None and rank is None and env.pid is None and not env.process and \
                rec.format in untagged_main_formats():
            attrs.setdefault("untagged_record", rec.format)      # the main process's (timeline)
        if rank is None:
            # the rank the text names about its own process: the record's message, else the
            # event's (a block's), else a C++ exception's what() line
            rank = _rank_in(rec.message) if rec is not None and rec.message else None
            for text in (message, attrs.get("what")) if rank is None else ():
                # (a block's text names a process group's rank: the run's rank only in the
                # default group - a rank of its own single-rank group is 0 on every process)
                if isinstance(text, str) and text and _default_group(text) and (rank := _rank_in(text)) is not None:
                    break
        pid = env.pid if env.pid is not None else (rec.pid if rec is not None else None)
        if rec is not None and rec.pid is not None and "journald" in env.wrappers:
            pid = rec.pid        # journald's [pid] is the unit's main process; NCCL's is the writer
        subject = attrs.get("subject_pid")
        if pid is None and isinstance(subject, int) and kind in (Kind.XID, Kind.OOM, Kind.FATAL_SIGNAL,
                                                                   Kind.STACK_DUMP):
            pid = subject                 # a line about a process written by no process of ours
        host = env.host               # a record's own host (NCCL's) may name the machine, not the container
        return Event(kind=kind, message=message, source=self.relpath, line=line.lineno, severity=severity,
                     time=env.time, pid=pid, process=env.process, rank=rank, host=host, seq=self.seq,
                     attrs=freeze(attrs))


_PG_GUID = re.compile(r"PG GUID (\d+)(\(default_pg\))?")


def _default_group(text: str) -> bool:
    """Whether the process group a line names is the default one (GUID 0, or marked so)."""
    m = _PG_GUID.search(text[:200])
    return m is None or m.group(1) == "0" or m.group(2) is not None


def _rank_in(message: str) -> int | None:
    for pattern in _rank_hints():        # anchored: a miss costs one character
        m = pattern.match(message)
        if m:
            return knowledge.claimed_int(m.group("rank"))
    return None


ESCAPED_TB = "Traceback (most recent call last):\\n"
_ESCAPES = re.compile(r"\\(\\|n|t|'|\")")


def unescape_traceback(text: str) -> list[str]:
    """The lines of the traceback string literal that starts at ``ESCAPED_TB`` in
    ``text`` (up to its closing quote, else the end of the line)."""
    start = text.index(ESCAPED_TB)
    quote = text[start - 1] if start and text[start - 1] in "'\"" else None
    end = len(text)
    if quote:
        pos = start
        while True:
            pos = text.find(quote, pos)
            if pos < 0:
                break
            before = pos - 1
            while before >= start and text[before] == "\\":
                before -= 1
            if (pos - 1 - before) % 2 == 0:       # not itself escaped
                end = pos
                break
            pos += 1
    body = _ESCAPES.sub(lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text[start:end])
    return [piece for piece in body.split("\n") if piece.strip()]


@functools.lru_cache(maxsize=None)
def _message_prefixes() -> frozenset[str]:
    """Every proper prefix (4 characters or more) of the CUDA error catalogue's messages."""
    return frozenset(e.message[:n] for e in knowledge.cuda_errors() if e.message
                     for n in range(4, len(e.message)))


def _cut_cuda_message(text: str) -> str | None:
    """The cut start of a catalogue message that ends ``text`` after "CUDA error: ", or
    None when the message is whole (or is no catalogue message at all)."""
    tail = text.rstrip("\r").rpartition("CUDA error: ")[2]
    return tail if tail in _message_prefixes() else None


class TextParser:
    """Parses one text source; never raises on content (a bad line is counted)."""

    def parse(self, source: Source) -> ParsedSource:
        return _Run(source).run()


class _Run:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.out = ParsedSource(source.relpath, "text", size=source.size)
        self.make = EventFactory(source.relpath)
        self.lines = LineParser()
        self.norm = Normaliser()
        self.open: dict[tuple, object] = {}
        self.first: dict[tuple, tuple[Line, Record]] = {}
        self.sanitizer = SanitizerAssembler(source.relpath)
        self.sanitizer_seen = False
        self.gdb = CudaGdbCollector()
        self.traffic: dict[tuple, Traffic] = {}
        self.formats: dict[str, int] = {}
        self.stats = ReadStats()
        self.scanner = None
        self.last_error: int | None = None     # the last error line, whose raw continuations may follow
        self.detail_follows: int | None = None  # the line of NCCL's "Last error:": the next line says what failed
        self.lineno = 0                          # the line being read
        self.quoting_line: dict[tuple, tuple[int, dict]] = {}   # per stream: a line naming whose traceback follows
        self.highest = 0                         # the highest line number read so far
        self.cut_message = None                  # (event index, line, record, text) of a message cut mid-word
        self.block_line = 0                      # the last line an open block took
        self.last_record: dict[tuple, tuple[int, Record]] = {}   # per stream: the last leveled record

    # -- driving ---------------------------------------------------------------------

    def run(self) -> ParsedSource:
        out = self.out
        with self.source.open_binary() as stream:
            for lineno, raw in self._physical(stream):
                for line in self.norm.feed(lineno, raw):
                    self._line(line)
            for line in self.norm.flush():
                self._line(line)
        for key in list(self.open):
            self._close(key)
        self._finish_collectors()
        out.traffic = sorted(self.traffic.values(), key=lambda t: -t.count)
        out.counted_lines += sum(t.count for t in self.traffic.values())
        out.lines += self.stats.blank_lines
        out.noise_lines += self.stats.blank_lines
        if self.scanner is not None:
            out.counted_lines += self.scanner.counted
            out.lines += self.scanner.counted
            self.stats.long_lines += self.scanner.long_lines
            self.stats.problems.extend(self.scanner.problems)
        out.problems.extend(self.stats.describe())
        out.formats = dict(sorted(self.formats.items(), key=lambda kv: -kv[1]))
        out.kind = dominant_kind(self.formats)
        out.events = resolve_times(adopt_identities(out.events), self.source.mtime)
        return out

    def _physical(self, stream) -> Iterator[tuple[int, str]]:
        try:
            head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES] if hasattr(stream, "peek") else None
        except READ_ERRORS as exc:
            self.stats.problems.append(f"read stopped at the start: {exc}")
            return iter(())
        if head is not None and (b"\x00" in head[:4096] or detect_encoding(head) != "utf-8"):
            return chronological(iter_lines(stream, self.stats, head), self.stats)
        known = self.source.size if self.source.size is not None and not self.source.compression else None
        if known is None:
            # a stream (stdin, an archive member) or a compressed file: the decompressed
            # size decides, so the first FAST_PATH_BYTES are held to find out
            held, rest, error = self._hold(stream)
            if rest is not None:
                stream, known = Prefixed(held, rest), FAST_PATH_BYTES
            else:
                stream, known = io.BufferedReader(Prefixed(held, None, error), buffer_size=1 << 16), len(held)
        if known >= FAST_PATH_BYTES or self.source.in_bulk:
            # a file of a large bundle keeps a shorter head and tail: with hundreds of
            # rotated files, 1,200 lines of each would be most of the bundle
            small = known < FAST_PATH_BYTES
            hits = scan.parallel_hits(str(self.source.path), known) if self.source.is_plain_file else None
            self.scanner = scan.Scanner(stream, self._busy, hits=hits, head_lines=100 if small else scan.HEAD_LINES,
                                        tail_lines=50 if small else scan.TAIL_LINES)
            return self.scanner.lines()
        return chronological(iter_lines(stream, self.stats, head), self.stats)

    def _hold(self, stream) -> tuple[bytes, object | None, Exception | None]:
        """Up to FAST_PATH_BYTES of ``stream``; the stream itself when there is more;
        the read error that ended it early (a cut gzip, a bomb's cap), to be raised
        again after what came before it has been read."""
        chunks, held = [], 0
        try:
            while held < FAST_PATH_BYTES:
                chunk = stream.read(min(1 << 16, FAST_PATH_BYTES - held))
                if not chunk:
                    return b"".join(chunks), None, None
                chunks.append(chunk)
                held += len(chunk)
        except READ_ERRORS as exc:
            return b"".join(chunks), None, exc
        return b"".join(chunks), stream, None

    def _busy(self) -> bool:
        """True while a block is taking lines: the scanner then hands over every line.
        A block left open by a stream that went quiet (its writer's next line never
        came) stops counting after BUSY_LINES lines without one of its own."""
        if self.sanitizer.current:
            return True
        return bool(self.open) and self.lineno - self.block_line <= BUSY_LINES

    # -- one logical line -------------------------------------------------------------

    def _line(self, line: Line) -> None:
        out = self.out
        out.lines += 1
        # (only the fast path hands lines over out of order; a newest-first file is
        # re-ordered by its reader with its own line numbers)
        replayed, previous = self.scanner is not None and line.lineno < self.highest, self.lineno
        self.lineno, self.highest = line.lineno, max(self.highest, line.lineno)
        if (not line.text or line.text.isspace()) and not self._busy():
            # blank lines between records (and files of nothing else): counted, no parse
            out.noise_lines += 1
            return
        rec = self.lines.parse(line.text)
        text = rec.message
        header = rec.header
        key = self._key(line, rec)
        if replayed and line.lineno != previous + 1:
            # an error storm's last occurrences, handed over after the file's end
            # (parsers/scan.py): nothing open before them continues into them
            for open_key in list(self.open):
                self._close(open_key)

        if is_sanitizer_line(text, self.sanitizer_seen):
            self.sanitizer_seen = True
            self.sanitizer.feed(line.lineno, text)
            self._count("compute-sanitizer")
            return
        if self.gdb.claims(text, line.env.stream_key, rec.format != "plain"):
            self.gdb.feed(line.lineno, text)
            self._count("cuda-gdb")
            return

        if self.cut_message is not None and header is None and key not in self.open:
            if self._rejoin_cut_message(text):
                return
        self.cut_message = None
        if self.last_error is not None and not line.env.wrappers and header is None and key not in self.open and \
                (text.strip().startswith(_CONTINUES) or self.detail_follows == line.lineno - 1):
            self._continue_error(line, text)
            return

        block = self.open.get(key)
        if block is not None:
            if block.accepts(text, line.lineno, header):
                self.block_line = line.lineno
                self._count(block.format)
                return
            self._close(key)
        if header is None or header[0] in stampless():
            # raw lines after a record that ended with a traceback header (SGLang): the
            # same writer (envelope), without the record's header (or under the same
            # re-logging logger)
            for other_key, other in self.open.items():
                if other_key[:5] == key[:5] and getattr(other, "follow_raw", False) and \
                        (header is None or header == other.header) and other.accepts_raw(text, header):
                    other.accepts(text, line.lineno, header)
                    self._count(other.format)
                    return

        tb_header = _tb_header()
        if tb_header in text and not text.startswith(tb_header) and text.rstrip().endswith(tb_header):
            # "... Scheduler hit an exception: Traceback (most recent call last):": the
            # message is an event of its own, the traceback follows (raw, for SGLang)
            self._single(line, rec, text.partition(tb_header)[0].rstrip(": "))
            block = blocks.start_block(tb_header, header)
            block.follow_raw = True
            block.shared_first = True
            block.accepts(tb_header, line.lineno, header)
            self._open(key, block, line, rec)
            return

        block = blocks.start_block(text, header)
        if block is not None and block.accepts(text, line.lineno, header):
            self.block_line = line.lineno
            self._open(key, block, line, rec)
            self._count(block.format)
            return

        self._single(line, rec, text)

    def _continues(self, line: Line, rec: Record, kind: str) -> bool:
        """Whether an event of ``kind`` of this line's writer came just before it (within
        CONTINUES_LINES lines, among its last few events): the line then continues it
        (torch's advice under its CUDA error)."""
        writer = (line.env.pid if line.env.pid is not None else rec.pid, line.env.rank if line.env.rank is not None
                  else rec.rank, line.env.process)
        for event in reversed(self.out.events[-5:]):
            if line.lineno - event.line > CONTINUES_LINES:
                break
            if event.kind.value == kind and (event.pid, event.rank, event.process) == writer:
                return True
        return False

    def _single(self, line: Line, rec: Record, text: str) -> None:
        out = self.out
        self._count(rec.format)
        if rec.level is not None:
            self.last_record[self._key(line, rec)] = (line.lineno, rec)
        if ESCAPED_TB in text:
            self._escaped_traceback(line, rec, text)
        # NCCL's header carries its level ("host:pid:tid [dev] file:line NCCL WARN"): the
        # catalogue reads NCCL's errors by that marker, so the message is read with it
        decided = classify.message_kind(text, rec.level) if text else None
        if decided is None and text and rec.format == "nccl" and rec.level and \
                Severity.from_level(rec.level) >= Severity.WARNING:
            # a WARN the catalogue has no entry of its own for: NCCL's error, as its marker says
            decided = classify.message_kind(f"NCCL WARN {text}", rec.level)
        cut = _cut_cuda_message(text) if text and "CUDA error: " in text else None
        if decided is not None:
            kind, severity, attrs, traffic = decided
            if traffic is not None:
                self._traffic(line, rec, traffic, attrs)
                return
            if attrs.get("continues") and self._continues(line, rec, attrs["continues"]):
                out.event_lines += 1        # part of the error just before it (data/messages.toml)
                return
            if attrs.get("says"):
                attrs = {k: v for k, v in attrs.items() if k not in ("says", "continues")}
                text = decided[2]["says"]
            out.events.append(self.make.at(line, rec)(kind, text, severity, attrs))
            out.event_lines += 1
            self.last_error = len(out.events) - 1 if severity >= Severity.ERROR else None
            if attrs.get("quotes_next"):
                who = knowledge.quoted_process(text)
                if who is not None and "pid" in who:
                    self.quoting_line[self._key(line, rec)] = (line.lineno, who)
            if cut:
                self.cut_message = (len(out.events) - 1, line, rec, text)
            return
        level = Severity.from_level(rec.level) if rec.level else None
        if level is not None and level >= Severity.WARNING:
            out.events.append(self.make.at(line, rec)(Kind.LOG, text, level, {}))
            out.event_lines += 1
            if cut:
                self.cut_message = (len(out.events) - 1, line, rec, text)
        elif not text.strip() or is_noise(text):
            out.noise_lines += 1
        elif rec.format != "plain":
            self._traffic(line, rec, f"{rec.format}:{rec.fileinfo or rec.logger or ''}:{rec.lineno or ''}", {})
        elif facts := knowledge.environment_facts_in(text):
            # a plain line stating a version or a size (data/environment_facts.toml)
            out.events.append(self.make.at(line, rec)(Kind.ENVIRONMENT, text, Severity.INFO, {"facts": facts}))
            out.event_lines += 1
        else:
            out.count_unparsed(line.lineno, line.text)

    @staticmethod
    def _key(line: Line, rec: Record) -> tuple:
        """The stream a line belongs to: its writer as the envelope says, and the rank
        its record header names (SGLang's TPn under a shared container prefix)."""
        return line.env.stream_key if rec.rank is None or line.env.rank is not None else \
            line.env.stream_key + (rec.rank,)

    def _escaped_traceback(self, line: Line, rec: Record, text: str) -> None:
        """A traceback kept as an escaped string inside one line (a dict's repr, a JSON
        log field): its lines parsed as the traceback they were, under this record."""
        from forensics.parsers.text import traceback
        block = traceback.TracebackBlock(header=None)
        for piece in unescape_traceback(text):
            block.accepts(piece, line.lineno, None)
        result = block.close(self.make.at(line, rec))
        self.out.events.extend(result.events)
        self.out.problems.extend(result.problems)

    def _rejoin_cut_message(self, text: str) -> bool:
        """A paste hard-wrapped at a fixed width cut "CUDA error: an illeg" from its
        "al memory access was encountered" (the wrapped part has no envelope): the two
        halves are one message, classified again."""
        index, line, rec, first = self.cut_message
        self.cut_message = None
        rest = text.strip()
        for joined in (first + rest, first + " " + rest):
            if _cut_cuda_message(joined) is None and knowledge.find_cuda_error(joined) is not None:
                decided = classify.message_kind(joined, rec.level)
                if decided is None or decided[3] is not None:
                    return False
                kind, severity, attrs, _ = decided
                self.out.events[index] = self.make.at(line, rec)(kind, joined, severity,
                                                                 {**attrs, "rejoined_line": True})
                self.out.event_lines += 1
                self._count("continuation")
                if severity >= Severity.ERROR:
                    self.last_error = index
                return True
        return False

    def _continue_error(self, line: Line, text: str) -> None:
        """A raw line continuing the last error line's message (c10's advice lines,
        "Exception raised from ...", native frames): part of that event."""
        from dataclasses import replace
        self.out.event_lines += 1
        self._count("continuation")
        stripped = text.strip()
        self.detail_follows = line.lineno if stripped == "Last error:" else None
        if self.detail_follows is None and stripped and not stripped.startswith(("frame #", "Exception raised from")):
            # the message goes on (NCCL's "Last error:" detail, c10's advice): kept, bounded,
            # for what the line says of whose failure it is
            event = self.out.events[self.last_error]
            detail = str(event.attrs.get("detail") or "")
            if len(detail) < DETAIL_LIMIT:
                self.out.events[self.last_error] = replace(event, attrs=freeze({
                    **event.attrs, "detail": (detail + "\n" if detail else "") + clip(stripped, DETAIL_LIMIT)}))
        thrown = raised.read(stripped) if stripped.startswith(raised.OPENING) else None
        if thrown is not None and thrown.file is not None:
            event = self.out.events[self.last_error]
            if "raised_file" not in event.attrs:
                self.out.events[self.last_error] = replace(event, attrs=freeze({**event.attrs, **thrown.attrs()}))

    def _traffic(self, line: Line, rec: Record, template: str, facts: dict) -> None:
        env = line.env
        # the writer's pid as the event factory takes it: the envelope's, else the record
        # header's (NCCL's host:pid:tid) - a rank that printed only INFO lines is a process
        pid = env.pid if env.pid is not None else rec.pid
        if rec.pid is not None and "journald" in env.wrappers:
            pid = rec.pid
        key = (pid, env.process, env.rank if env.rank is not None else rec.rank, env.host, template)
        entry = self.traffic.get(key)
        if entry is None:
            entry = self.traffic[key] = Traffic(env.process, pid, key[2], template, self.source.relpath, env.host,
                                                first_line=line.lineno)
        entry.count += 1
        entry.last_line = line.lineno
        when = env.time
        if when is not None:
            entry.first = entry.first or when
            entry.last = when
        if len(entry.examples) < TRAFFIC_EXAMPLES:
            entry.examples.append(clip(line.text, 300))
        if facts:
            entry.facts.update({k: v for k, v in facts.items() if isinstance(v, (int, float, str))})

    def _count(self, fmt: str) -> None:
        self.formats[fmt] = self.formats.get(fmt, 0) + 1

    # -- closing blocks ---------------------------------------------------------------

    def _open(self, key, block, line: Line, rec: Record) -> None:
        self.open[key] = block
        previous = self.last_record.get(key)
        if rec.header is None and previous is not None and previous[0] == line.lineno - 1 and \
                Severity.from_level(previous[1].level) >= Severity.ERROR:
            # logger.exception(): the record's line, then the traceback raw - the
            # traceback is that record's (its time, its rank)
            rec = replace(previous[1], format=rec.format)
        self.first[key] = (line, rec)

    def _close(self, key) -> None:
        block = self.open.pop(key)
        line, rec = self.first.pop(key)
        result: BlockResult = block.close(self.make.at(line, rec))
        quote = self.quoting_line.pop(key, None)
        if quote is not None and quote[0] == line.lineno - 1:
            # the line just above named the process whose traceback this is (Ray's
            # "Unhandled error ...: ray::Worker.method() (pid=N, ip=A)" before the frames)
            result.events = [_as_quoted(e, quote[1]) if e.chain and e.attrs.get("header_missing") else e
                             for e in result.events]
        if getattr(block, "shared_first", False):       # that line was counted with its message
            if line.lineno in result.used:
                result.used.remove(line.lineno)
            result.unparsed = [(n, t) for n, t in result.unparsed if n != line.lineno]
        self._account(result)

    def _account(self, result: BlockResult) -> None:
        out = self.out
        out.events.extend(result.events)
        out.event_lines += len(result.used)
        out.counted_lines += result.counted
        out.noise_lines += result.noise
        for lineno, text in result.unparsed:
            out.count_unparsed(lineno, text)
        out.problems.extend(result.problems)

    def _finish_collectors(self) -> None:
        out = self.out
        san = self.sanitizer
        san.flush()
        out.problems.extend(san.problems)
        out.event_lines += san.report_lines
        out.noise_lines += san.noise_lines
        for lineno, text in san.unparsed:
            out.count_unparsed(lineno, "========= " + text)
        out.events.extend(san.events(self.make.seq + 1))
        self.make.seq += len(san.order) + len(san.summary) + 1
        events, problems = self.gdb.finish(self.source.relpath, self.make.seq + 1)
        out.events.extend(events)
        self.make.seq += len(events)
        out.event_lines += self.gdb.event_lines
        out.noise_lines += self.gdb.noise_lines
        for lineno, text in self.gdb.unparsed:
            out.count_unparsed(lineno, text)
        out.problems.extend(problems)


# --- identities -------------------------------------------------------------------------

ADOPT_WITHIN = 6     # lines


def adopt_identities(events: list[Event]) -> list[Event]:
    """A failure line written raw to stderr (a native library's error, no prefix) in an
    input whose other lines carry identities takes the identity of the failure that
    follows it within a few lines: the same process printed both.  The same raw line
    printed several times came from several processes: none of them is adopted."""
    from collections import Counter
    from dataclasses import replace
    if not any(e.pid is not None or e.rank is not None for e in events):
        return events

    def unsigned(e: Event) -> bool:
        return e.pid is None and e.rank is None and not e.process and e.kind in (Kind.CUDA_ERROR, Kind.OOM,
                                                                                 Kind.DEVICE_ASSERT)
    repeated = Counter(e.message for e in events if unsigned(e))
    ordered = sorted(range(len(events)), key=lambda i: events[i].line)
    out = list(events)
    for pos, i in enumerate(ordered):
        e = events[i]
        if not unsigned(e) or (repeated[e.message] > 1 and e.kind != Kind.DEVICE_ASSERT):
            continue
        for j in ordered[pos + 1:]:
            nxt = events[j]
            if nxt.line - e.line > ADOPT_WITHIN:
                break
            subject_pid, subject = nxt.attrs.get("subject_pid"), nxt.attrs.get("subject_process")
            if nxt.kind in (Kind.WORKER_DIED, Kind.CHILD_FAILED) and (subject_pid is not None or subject):
                # "Worker proc VllmWorker-1 died": the raw line was that worker's last words
                out[i] = replace(e, pid=subject_pid, process=subject, rank=nxt.attrs.get("subject_rank"),
                                 host=nxt.host, attrs=freeze({**e.attrs, "identity_from": nxt.where}))
                break
            if (nxt.pid is not None or nxt.rank is not None) and nxt.severity >= Severity.ERROR \
                    and nxt.kind in OWN_FAILURE:
                out[i] = replace(e, pid=nxt.pid, rank=nxt.rank, process=nxt.process, host=nxt.host,
                                 attrs=freeze({**e.attrs, "identity_from": nxt.where}))
                break
    return out


# --- times -------------------------------------------------------------------------------

def resolve_times(events: list[Event], mtime: datetime | None) -> list[Event]:
    """Absolute times from stamps without a year: a wrapper's wall-clock time wins; else
    the year of the file's modification time (or now); a month that goes backwards by
    more than half a year starts a new year.  An event without a stamp of its own takes
    the time of the last stamped event before it (marked as inferred).  "Before" is in
    line order, not emission order: a multi-line record (a native abort's terminate ...
    what():) is emitted once it ends, after a record that starts below it."""
    by_line = sorted(range(len(events)), key=lambda i: events[i].line)     # stable: emission order within a line
    resolved = _resolve_times([events[i] for i in by_line], mtime)
    out: list = [None] * len(events)
    for i, event in zip(by_line, resolved):
        out[i] = event
    return out


def _resolve_times(events: list[Event], mtime: datetime | None) -> list[Event]:
    """resolve_times on events in line order."""
    from dataclasses import replace
    # a stamp with a year in the same input (a wrapper's, another format's) says the year
    # better than the file's modification time, which is when it was copied
    known = next((e.time.year if e.time is not None else e.attrs["stamp"].year for e in events
                  if e.time is not None or (e.attrs.get("stamp") is not None and e.attrs["stamp"].year)), None)
    hint_year = known or (mtime or datetime.now()).year
    offset = 0
    last_month = None
    parsed: list = []
    for event in events:
        stamp: Stamp | None = event.attrs.get("stamp") if event.time is None else None
        if stamp is not None and stamp.year is None:
            if last_month is not None and stamp.month < last_month - 6:
                offset += 1
            last_month = stamp.month
        parsed.append((stamp, offset))
    shift = hint_year if known else hint_year - offset
    out = []
    last_time = None
    for event, (stamp, off) in zip(events, parsed):
        time = event.time
        if time is None and stamp is not None:
            try:
                time = datetime(stamp.year or shift + off, stamp.month, stamp.day, stamp.hour, stamp.minute,
                                stamp.second, stamp.micro)
            except ValueError:
                time = None
        if time is not None:
            last_time = time
            out.append(event if time is event.time else replace(event, time=time))
        elif last_time is not None:
            out.append(replace(event, time=last_time, time_inferred=True))
        else:
            out.append(event)
    # an inferred time is only a lower bound: the next stamped line bounds it from above
    next_time = None
    for i in range(len(out) - 1, -1, -1):
        event = out[i]
        if event.time_inferred:
            if next_time is not None:
                out[i] = replace(event, attrs=freeze({**event.attrs, "not_after": next_time}))
        elif event.time is not None:
            next_time = event.time
    return out


def _as_quoted(event, who: dict):
    """A traceback event as the failure of the process the line above it named."""
    changes = {"pid": knowledge.claimed_int(who["pid"]), "rank": None, "process": who.get("process")}
    if who.get("ip"):
        changes["host"] = who["ip"]
    return replace(event, **changes, attrs=freeze({**event.attrs, "quoted_by": who.get("id")}))
