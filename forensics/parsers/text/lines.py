"""Line formats: the record header a program's logger puts before each message.

The formats are those of kind "line" in the registry (data/formats.toml): each has a
cheap guard that delimits its header and a grammar that parses it.  Grammars name the
fields they find by token - LEVEL, YEAR, MONTH, DAY, MONTHDAY, CLOCK, DATE, ISO_TIME,
SECONDS, FILEINFO, LINENO, PID, HOST, LOGGER, RANK (after an optional RANK_KIND) - and
``record_of`` turns those tokens into a ``Record`` by name, for every format alike:
adding a format needs its grammar and its registry entry, no code here.

Which format a line is in is decided per line (a console mixes them), by each guard in
registry order; a guard that passes but a grammar that refuses falls through to the
next format.  Headers repeat (the lines of a multi-line record share their whole
header): a header parsed once is remembered by its text, so most lines cost one lookup.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from lark import Token, Tree
from lark.exceptions import LarkError

from forensics import grammar
from forensics.knowledge import claimed_int
from forensics.parsers.formats import formats_of_kind, levels_of


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
        if self.format in _unjoined():
            return None
        if self.format in stampless():
            # a logger that stamps every line: consecutive lines of one logger and level
            # (a wrapper re-logging a child's stderr line by line) are one record
            return (self.format, self.level, self.logger)
        return (self.format, self.level, self.stamp, self.fileinfo, self.lineno, self.rank)


def _fraction(text: str) -> int:
    digits = "".join(c for c in text if c.isdigit())
    return int(digits[:6].ljust(6, "0"))


def _clock(text: str) -> tuple[int, int, int, int]:
    main, _, frac = text.replace(",", ".").partition(".")
    h, m, s = main.split(":")
    return int(h), int(m), int(s), _fraction(frac) if frac else 0


_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


def record_of(fmt: str, tree: Tree) -> Record:
    """The Record a parsed header says, read from its tokens by name."""
    fields: dict = {}
    date: dict = {}
    ranks: list[tuple[str, int]] = []
    kind = None
    levels = levels_of(fmt)
    for token in tree.scan_values(lambda v: isinstance(v, Token)):
        name, text = token.type, str(token)
        if name == "LEVEL":
            fields["level"] = levels.get(text, text)
        elif name in ("YEAR", "DAY"):
            date[name.lower()] = int(text)
        elif name == "MONTH":
            date["month"] = _MONTHS.get(text) or int(text)
        elif name == "MONTHDAY":                   # glog's MMDD
            date["month"], date["day"] = int(text[:-2]), int(text[-2:])
        elif name == "DATE":
            date["year"], date["month"], date["day"] = (int(x) for x in text.split("-"))
        elif name == "CLOCK":
            date["hour"], date["minute"], date["second"], date["micro"] = _clock(text)
        elif name == "ISO_TIME":
            from forensics.inputs.normalise import parse_time
            when = parse_time(text)
            if when is not None:
                date.update(year=when.year, month=when.month, day=when.day, hour=when.hour, minute=when.minute,
                            second=when.second, micro=when.microsecond)
        elif name == "SECONDS":
            fields["uptime"] = float(text)
        elif name in ("LINENO", "PID"):
            fields[name.lower()] = claimed_int(text)
        elif name in ("FILEINFO", "HOST", "LOGGER"):
            fields[name.lower()] = text
        elif name == "RANK_KIND":
            kind = text
        elif name == "RANK":
            ranks.append((kind or "RANK", claimed_int(text)))
            kind = None
    if ranks:
        named = dict(ranks)
        fields["rank"] = named.get("TP", named.get("RANK"))
        if any(k != "RANK" for k, _ in ranks):
            fields["ranks"] = tuple(ranks)
    if "month" in date and "hour" in date:
        fields["stamp"] = Stamp(date.get("year"), date["month"], date["day"], date["hour"], date["minute"],
                                date["second"], date.get("micro", 0))
    return Record(fmt, "", **fields)


@dataclass(frozen=True)
class LineFormat:
    """A record format of the registry: its guard delimits the header at the start of
    a line, its grammar parses what the guard delimited."""

    name: str
    grammar: str
    header: re.Pattern
    cache: bool = True            # headers repeat: remember parsed ones by their text
    joins: str = "header"         # header | logger | no: what identifies the lines of one record


@functools.lru_cache(maxsize=None)
def line_formats() -> tuple[LineFormat, ...]:
    return tuple(LineFormat(f.name, f.grammar, re.compile(f.guard), f.cache, f.joins)
                 for f in formats_of_kind("line"))


@functools.lru_cache(maxsize=None)
def _unjoined() -> frozenset[str]:
    return frozenset(f.name for f in line_formats() if f.joins == "no") | {"plain"}


@functools.lru_cache(maxsize=None)
def site_formats() -> frozenset[str]:
    """Formats whose header's file:line is where the program detected the error."""
    return frozenset(f.name for f in formats_of_kind("line") if f.site)


@functools.lru_cache(maxsize=None)
def untagged_main_formats() -> frozenset[str]:
    """Formats whose records without a process tag are the main process's (formats.toml)."""
    return frozenset(f.name for f in formats_of_kind("line") if f.untagged_is_main)


@functools.lru_cache(maxsize=None)
def stampless() -> frozenset[str]:
    return frozenset(f.name for f in line_formats() if f.joins == "logger")


# first characters of the formats' headers: a message starting otherwise holds none
_INNER_STARTS = frozenset("[DIWECFT0123456789 ")
_ORDER = {"DEBUG": 0, "INFO": 1, "WARNING": 2, "ERROR": 3, "CRITICAL": 4}


def _worse(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    return a if _ORDER.get(a, 1) >= _ORDER.get(b, 1) else b


class LineParser:
    """Parses the record header of lines; never raises."""

    CACHE_SIZE = 4096

    def __init__(self, formats: tuple[LineFormat, ...] | None = None) -> None:
        self._formats = formats if formats is not None else line_formats()
        self._headers: dict[str, Record] = {}
        self.failures = 0

    def parse(self, text: str) -> Record:
        record = self._one(text)
        if record.format != "plain" and record.message[:1] in _INNER_STARTS:
            # a logger re-logging another program's lines ("- __main__ - INFO - [2025-09-02
            # 10:14:31 TP1] ..."): the inner header says who wrote the line
            inner = self._one(record.message)
            if inner.format not in ("plain", record.format):
                record = replace(record, message=inner.message, level=_worse(record.level, inner.level),
                                 rank=inner.rank if inner.rank is not None else record.rank,
                                 ranks=inner.ranks or record.ranks, pid=inner.pid or record.pid,
                                 host=inner.host or record.host, fileinfo=inner.fileinfo or record.fileinfo,
                                 lineno=inner.lineno or record.lineno, stamp=record.stamp or inner.stamp)
        return record

    def _one(self, text: str) -> Record:
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
        try:
            tree = grammar.load(fmt.grammar).parse(head)
        except LarkError:
            self.failures += 1
            return None
        try:
            return record_of(fmt.name, tree)
        except (ValueError, KeyError):           # a date that does not exist
            self.failures += 1
            return None
