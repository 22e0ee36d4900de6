"""One physical line of a vLLM console/log -> ``LogLine`` (grammar: grammars/vllm_log.lark).

Only the line's envelope is decoded here: container stamp, process prefix, level, time,
source location and the message text.  What the message *means* is decided later by the
message catalogue and the traceback assembler.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from lark import Token, Transformer
from lark.exceptions import LarkError

from forensics import grammar


@dataclass(frozen=True)
class LogLine:
    message: str
    form: str = "raw"                 # record | uvicorn | glog | raw
    process: str | None = None        # "Worker_TP2" from "(Worker_TP2 pid=895) "
    pid: int | None = None
    level: str | None = None
    stamp: str | None = None          # "12-02 10:42:37" as printed (no year)
    container_time: datetime | None = None  # from a docker/kubectl --timestamps prefix
    fileinfo: str | None = None
    lineno: int | None = None
    glog_rank: int | None = None

    @property
    def header(self) -> tuple | None:
        """What repeats on every physical line of one multi-line vLLM record."""
        if self.form != "record":
            return None
        return (self.pid, self.process, self.level, self.stamp, self.fileinfo, self.lineno)


_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}


class _ToLogLine(Transformer):
    def start(self, items):
        fields: dict = {}
        for item in items:
            fields.update(item)
        return LogLine(**fields)

    fallback = start

    def container_stamp(self, items):
        text = str(items[0]).replace("Z", "+00:00")
        # Python < 3.11 cannot read nanoseconds: keep microseconds.
        if "." in text:
            head, _, tail = text.partition(".")
            digits = "".join(c for c in tail if c.isdigit())
            zone = tail[len(digits):]
            text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
        try:
            return {"container_time": datetime.fromisoformat(text)}
        except ValueError:
            return {}

    def prefix(self, items):
        names = [t for t in items if isinstance(t, Token)]
        proc = next(t for t in names if t.type == "PROC_NAME")
        pid = next(t for t in names if t.type == "INT")
        return {"process": str(proc), "pid": int(pid)}

    def record(self, items):
        fields = {"form": "record", "level": str(items[0]), "stamp": str(items[1]), "message": ""}
        for item in items[2:]:
            fields.update(item)
        return fields

    def bracketed(self, items):
        return {"fileinfo": str(items[1]), "lineno": int(items[2])}

    def unbalanced(self, items):
        return {"fileinfo": str(items[0]), "lineno": int(items[1])}

    def message(self, items):
        return {"message": str(items[0]) if items else ""}

    def uvicorn(self, items):
        return {"form": "uvicorn", "level": str(items[0]).rstrip(": "), "message": str(items[1])}

    def glog(self, items):
        fields = {"form": "glog", "message": ""}
        tokens = [t for t in items if isinstance(t, Token)]
        for tok in tokens:
            if tok.type == "GLOG_RANK":
                fields["glog_rank"] = int(tok.strip("[]:rank"))
            elif tok.type == "GLOG_HEAD":
                fields["level"] = _GLOG_LEVELS.get(tok[0], "INFO")
                fields["stamp"] = f"{tok[1:3]}-{tok[3:5]}"
            elif tok.type == "GLOG_TIME":
                fields["stamp"] = f"{fields.get('stamp', '')} {tok.split('.')[0]}"
            elif tok.type == "FILEINFO":
                fields["fileinfo"] = str(tok)
            elif tok.type == "INT":
                fields["lineno"] = int(tok)
        for item in items:
            if isinstance(item, dict):
                fields.update(item)
        return fields

    def raw(self, items):
        return {"form": "raw", "message": str(items[0])}


class LineParser:
    """Parses the envelope of lines; never raises.

    The lines of one multi-line record, and bursts from one process in one second, share
    their whole envelope: an envelope the grammar has parsed once is remembered by its
    text (up to the "] " that ends it) and reused for the next line that starts with it.
    """

    CACHE_SIZE = 4096

    def __init__(self) -> None:
        self._parser = grammar.load("vllm_log", start=("start", "fallback"))
        self._to_line = _ToLogLine()
        self._envelopes: dict[str, LogLine] = {}

    def parse(self, text: str) -> LogLine:
        if not text:
            return LogLine(message="")
        end = text.find("] ", 0, 240)
        head = text[: end + 2] if end > 0 else None
        if head is not None:
            known = self._envelopes.get(head)
            if known is not None:
                return replace(known, message=text[end + 2:])
        line = self._parse(text)
        if head is not None and line.form in ("record", "glog") and line.message == text[end + 2:]:
            if len(self._envelopes) >= self.CACHE_SIZE:
                self._envelopes.clear()
            self._envelopes[head] = replace(line, message="")
        return line

    def _parse(self, text: str) -> LogLine:
        for start in ("start", "fallback"):
            try:
                return self._to_line.transform(self._parser.parse(text, start=start))
            except LarkError:
                continue
        return LogLine(message=text)
