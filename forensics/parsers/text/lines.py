"""Line formats: the record header a program's logger puts before each message.

One grammar per format (grammars/<format>.lark), one ``v_args(inline=True)`` transformer
each, all giving a ``Record``: level, time, source location, rank/pid when the header
says them, and the message.  Which format a line is in is decided per line (a console
mixes them), by each format's cheap guard, in the order of ``LINE_FORMATS``; a guard
that passes but a grammar that refuses falls through to the next format.

Headers repeat: the lines of a multi-line record and bursts in one second share their
whole header.  A header the grammar has parsed once is remembered by its text and
reused, so most lines cost one dict lookup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar


@dataclass(frozen=True, slots=True)
class Stamp:
    """A time as printed: the year may be missing (vLLM, glog, syslog)."""

    year: int | None
    month: int
    day: int
    hour: int
    minute: int
    second: int
    micro: int = 0


@dataclass(frozen=True, slots=True)
class Record:
    """One line's record header and message."""

    format: str                      # vllm | glog | uvicorn | sglang | pylog | trtllm | nccl | kernel | plain
    message: str
    level: str | None = None
    stamp: Stamp | None = None
    fileinfo: str | None = None
    lineno: int | None = None
    rank: int | None = None          # from the header (SGLang TP, TRT-LLM RANK, glog's [Rank N])
    ranks: tuple[tuple[str, int], ...] = ()   # every parallel rank the header names (DP, TP, EP ...)
    pid: int | None = None
    host: str | None = None
    logger: str | None = None
    uptime: float | None = None      # dmesg seconds since boot

    @property
    def header(self) -> tuple | None:
        """What repeats on every physical line of one multi-line record."""
        if self.format in ("plain", "kernel", "uvicorn"):
            return None
        return (self.format, self.level, self.stamp, self.fileinfo, self.lineno, self.rank)


def _fraction(text: str | None) -> int:
    if not text:
        return 0
    digits = "".join(c for c in text if c.isdigit())
    return int(digits[:6].ljust(6, "0"))


def _clock(text: str) -> tuple[int, int, int, int]:
    main, _, frac = text.replace(",", ".").partition(".")
    h, m, s = main.split(":")
    return int(h), int(m), int(s), _fraction(frac)


_LEVELS = {"E": "ERROR", "W": "WARNING", "I": "INFO", "F": "CRITICAL", "D": "DEBUG", "V": "DEBUG"}
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


@v_args(inline=True)
class _Vllm(Transformer):
    def start(self, level, month, day, *rest):
        location = rest[-1]
        clock = rest[-2]
        year = rest[0] if len(rest) == 3 else None
        h, m, s, micro = _clock(str(clock))
        return Record("vllm", "", str(level), Stamp(year, int(month), int(day), h, m, s, micro), *location)

    def year(self, value):
        return int(value)

    def bracketed(self, fileinfo, lineno):
        return str(fileinfo), int(lineno)

    unbalanced = bracketed


@v_args(inline=True)
class _Glog(Transformer):
    def bracketed(self, head):
        return head

    classic = bracketed

    def head(self, severity, monthday, clock, *rest):
        fileinfo, lineno = rest[-2], rest[-1]
        md = str(monthday)
        h, m, s, micro = _clock(str(clock))
        return Record("glog", "", _LEVELS[str(severity)], Stamp(None, int(md[:-2]), int(md[-2:]), h, m, s, micro),
                      str(fileinfo), int(lineno))


@v_args(inline=True)
class _Uvicorn(Transformer):
    def start(self, level, _pad):
        return Record("uvicorn", "", str(level))


@v_args(inline=True)
class _Sglang(Transformer):
    def start(self, date, clock, *ranks):
        return Record("sglang", "", None, _full_stamp(date, clock), rank=dict(ranks).get("TP"), ranks=tuple(ranks))

    def rank(self, kind, number):
        return (str(kind), int(number))


def _full_stamp(date, clock) -> Stamp:
    y, mo, d = (int(x) for x in str(date).split("-"))
    h, m, s, micro = _clock(str(clock))
    return Stamp(y, mo, d, h, m, s, micro)


@v_args(inline=True)
class _PyLogging(Transformer):
    def basic(self, level, logger):
        return Record("pylog", "", str(level), logger=str(logger))

    def dashed(self, date, clock, logger, level):
        return Record("pylog", "", str(level), _full_stamp(date, clock), logger=str(logger))

    def ray(self, date, clock, level, fileinfo, lineno):
        return Record("pylog", "", str(level), _full_stamp(date, clock), str(fileinfo), int(lineno))

    def elastic(self, date, clock, logger, level):
        return Record("pylog", "", str(level), _full_stamp(date, clock), logger=str(logger))


@v_args(inline=True)
class _TensorRtLlm(Transformer):
    def cpp(self, word):
        return Record("trtllm", "", _LEVELS.get(str(word)[:1], str(word)) if str(word) != "ERROR" else "ERROR")

    def python(self, month, day, year, clock, *rest):
        rank = rest[0] if len(rest) == 2 else None
        h, m, s, micro = _clock(str(clock))
        return Record("trtllm", "", _LEVELS.get(str(rest[-1]), str(rest[-1])),
                      Stamp(int(year), int(month), int(day), h, m, s, micro), rank=rank)

    def trt(self, letter):
        return Record("trtllm", "", _LEVELS.get(str(letter), str(letter)))

    def trt_dated(self, month, day, year, clock, letter):
        h, m, s, micro = _clock(str(clock))
        return Record("trtllm", "", _LEVELS.get(str(letter), str(letter)),
                      Stamp(int(year), int(month), int(day), h, m, s, micro))

    def rank(self, number):
        return int(number)


@v_args(inline=True)
class _Nccl(Transformer):
    def start(self, host, pid, _tid, _device, location, level):
        return Record("nccl", "", "WARNING" if str(level) == "WARN" else str(level),
                      fileinfo=location[0], lineno=location[1], pid=int(pid), host=str(host))

    def location(self, fileinfo=None, lineno=None):
        return (str(fileinfo), int(lineno)) if fileinfo is not None else (None, None)


@v_args(inline=True)
class _Kernel(Transformer):
    def start(self, head):
        stamp, uptime, host = head
        return Record("kernel", "", None, stamp, uptime=uptime, host=host)

    def uptime(self, seconds):
        return None, float(seconds), None

    def human(self, _weekday, month, day, clock, year):
        h, m, s, micro = _clock(str(clock))
        return Stamp(int(year), _MONTHS[str(month)], int(day), h, m, s, micro), None, None

    def syslog(self, month, day, clock, host, uptime=None):
        h, m, s, micro = _clock(str(clock))
        return Stamp(None, _MONTHS[str(month)], int(day), h, m, s, micro), uptime, str(host)

    def iso(self, iso_time, host, uptime=None):
        from forensics.inputs.normalise import parse_time
        when = parse_time(str(iso_time))
        stamp = Stamp(when.year, when.month, when.day, when.hour, when.minute, when.second,
                      when.microsecond) if when else None
        return stamp, uptime, str(host)

    def bare(self, uptime=None):
        return None, uptime, None

    def kernel_uptime(self, seconds):
        return float(seconds)


_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"


@dataclass(frozen=True)
class LineFormat:
    """A record format: its grammar parses the header that ``header`` delimits (the
    message after it is not the grammar's business)."""

    name: str
    grammar: str
    header: re.Pattern
    transformer: Callable[[], Transformer]
    cache: bool = True            # headers repeat: remember parsed ones by their text


LINE_FORMATS: tuple[LineFormat, ...] = (
    LineFormat("vllm", "vllm_record",
               re.compile(_LEVEL + r" \d\d-\d\d(?:[ -]\d{4})?[ -]\d\d:\d\d:\d\d(?:[.,]\d+)? \[?[^\[\]\s:]+:\d+\]"), _Vllm),
    LineFormat("glog", "glog",
               re.compile(r"\[?[IWEF]\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)? +(?:\d+ +)?[^\]\s:]+:\d+\]"), _Glog),
    LineFormat("sglang", "sglang",
               re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z_]+\d+)*\]"), _Sglang),
    LineFormat("nccl", "nccl",
               re.compile(r"[^\s:\[]+:\d+:\d+ \[\d+\](?: [^\s:]+:\d+)? NCCL (?:INFO|WARN|ERROR|ABORT|TRACE)\b"), _Nccl, False),
    LineFormat("trtllm", "tensorrt_llm",
               re.compile(r"\[TensorRT-LLM\]\[[A-Z]{2,}\]|\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d(?:\.\d+)?\] \[TRT-LLM\]"
                          r"(?: \[RANK \d+\])? \[[A-Z]\]|\[TRT\] \[[A-Z]\]|\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d(?:\.\d+)?\] \[TRT\] \[[A-Z]\]"), _TensorRtLlm),
    LineFormat("uvicorn", "uvicorn", re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|TRACE): +(?=\S)"), _Uvicorn),
    LineFormat("pylog", "python_logging",
               re.compile(_LEVEL + r":[A-Za-z_][\w.\-]*:"
                          r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ - [A-Za-z_][\w.\-]* - " + _LEVEL + " -"
                          r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+\t" + _LEVEL + r" [^\s:]+:\d+ --"
                          r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+\] [A-Za-z_][\w.\-]*: \[" + _LEVEL + r"\]"),
               _PyLogging, False),
    LineFormat("kernel", "kernel_log",
               re.compile(r"\[ *\d+\.\d+\]"
                          r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}\]"
                          r"|(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+) [^\s:\[]+ kernel:(?: +\[ *\d+\.\d+\])?"
                          r"|kernel:(?: +\[ *\d+\.\d+\])?"), _Kernel, False),
)


class LineParser:
    """Parses the record header of lines; never raises."""

    CACHE_SIZE = 4096

    def __init__(self, formats: tuple[LineFormat, ...] = LINE_FORMATS) -> None:
        self._formats = formats
        self._parsers: dict[str, object] = {}
        self._headers: dict[str, Record] = {}
        self.failures = 0

    def parse(self, text: str) -> Record:
        if not text:
            return Record("plain", "")
        for fmt in self._formats:
            match = fmt.header.match(text)
            if match is None:
                continue
            head = match.group(0)
            rest = text[match.end():]
            message = rest[1:] if rest.startswith(" ") else rest
            known = self._headers.get(head) if fmt.cache else None
            if known is None:
                known = self._parse(fmt, head)
                if known is None:
                    continue
                if fmt.cache:
                    if len(self._headers) >= self.CACHE_SIZE:
                        self._headers.clear()
                    self._headers[head] = known
            return replace(known, message=message)
        return Record("plain", text)

    def _parse(self, fmt: LineFormat, head: str) -> Record | None:
        parser = self._parsers.get(fmt.name)
        if parser is None:
            parser = self._parsers[fmt.name] = grammar.transforming(fmt.grammar, fmt.transformer())
        try:
            record = parser.parse(head)
        except LarkError:
            self.failures += 1
            return None
        return record if isinstance(record, Record) else None
