"""Kernel log envelopes (grammars/kernel_log.lark): dmesg, dmesg -T, journalctl, syslog.

Gives the message and, where the line has one, its wall-clock time; dmesg's plain
uptime stamps cannot be placed on the wall clock without the boot time, so they are
kept as ``uptime`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lark import Token, Transformer
from lark.exceptions import LarkError

from forensics import grammar

_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}
PREFILTER = ("NVRM", "kernel:", "Out of memory", "oom-kill", "nvidia-nvswitch")


@dataclass(frozen=True)
class KernelLine:
    message: str
    uptime: float | None = None
    wall_time: datetime | None = None
    stamp: str | None = None          # "MM-DD HH:MM:SS" when the year is not printed
    host: str | None = None


class _ToKernelLine(Transformer):
    def start(self, items):
        fields = {}
        for item in items:
            if isinstance(item, dict):
                fields.update(item)
        return KernelLine(**fields)

    def message(self, items):
        return {"message": str(items[0])}

    def uptime(self, items):
        return {"uptime": float(items[-1])}

    def human(self, items):
        t = {tok.type: str(tok) for tok in items if isinstance(tok, Token)}
        return {"wall_time": _when(int(t["YEAR"]), t["MONTH"], t["DAY"], t["CLOCK"])}

    def syslog(self, items):
        t = {tok.type: str(tok) for tok in items if isinstance(tok, Token)}
        fields = {"stamp": f"{_MONTHS[t['MONTH']]:02d}-{int(t['DAY']):02d} {t['CLOCK'].split('.')[0]}",
                  "host": t["HOST"]}
        for item in items:
            if isinstance(item, dict):
                fields.update(item)
        return fields

    def iso(self, items):
        t = {tok.type: str(tok) for tok in items if isinstance(tok, Token)}
        text = t["ISO_TIME"].replace("Z", "+00:00")
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            when = None
        fields = {"wall_time": when.replace(tzinfo=None) if when else None, "host": t["HOST"]}
        for item in items:
            if isinstance(item, dict):
                fields.update(item)
        return fields


def _when(year: int, month: str, day: str, clock: str) -> datetime | None:
    try:
        h, m, s = clock.split(".")[0].split(":")
        return datetime(year, _MONTHS[month], int(day), int(h), int(m), int(s))
    except (ValueError, KeyError):
        return None


def parse(text: str) -> KernelLine | None:
    """The envelope of a kernel log line, or None if ``text`` is not one."""
    if not any(p in text for p in PREFILTER):
        return None
    try:
        return _ToKernelLine().transform(grammar.load("kernel_log", parser="earley").parse(text))
    except LarkError:
        return None
