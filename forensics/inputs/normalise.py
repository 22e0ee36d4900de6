"""The normalising stage: strip what the environment wrapped around each line.

Before any grammar sees a line, the wrappers of data/wrappers.toml are taken off (a CRI
stamp, a compose service prefix, a vLLM or Ray process prefix, torch's ``[rankN]:``,
a log viewer's line number or border, ANSI colours) and what they said is kept as the
line's ``Envelope``.  CRI ``P`` records and docker json-file records without a final
newline are joined with the record that completes them.  A paste whose newlines were
lost - several records on one physical line - is split at the repeated envelope.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Iterator

from forensics import knowledge
from forensics.knowledge import claimed_int

MAX_JOINED = 1 << 20          # a partial record is joined up to this many characters
GLUED_MIN = 160               # only lines at least this long are looked at for lost newlines

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# colour codes that lost their ESC byte on the way into a paste ("[1;36m(", "ESC[0;0m",
# "^[[33m", a first "1;36m(" that lost its bracket too), and a carriage return printed as "^M"
_BROKEN_ANSI = re.compile(r"(?:ESC|\^\[)?\[[0-9;]{0,12}m(?![a-z])|^[0-9;]{1,12}m(?=[(\[])")
_CARET_M = re.compile(r"\^M\s*$")
# a traceback frame line that ends inside its file name, and a line that is the rest of it
_OPEN_FRAME = re.compile(r'(?:^|\s)File "[^"\n]*$')
_FRAME_REST = re.compile(r'[^\s"]*", line \d+')
# markdown turned a pasted __init__ into **init**
_DUNDER = re.compile(r"(?<![\w*])\*\*([a-z_][a-z0-9_]*)\*\*(?![\w*])")


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the wrappers of one line said about it."""

    time: datetime | None = None
    stream: str | None = None
    container: str | None = None
    host: str | None = None
    process: str | None = None
    pid: int | None = None
    rank: int | None = None
    repeat: int | None = None
    ident: str | None = None
    wrappers: tuple[str, ...] = ()

    @property
    def stream_key(self) -> tuple:
        """Lines with the same key come from one writer: blocks are assembled per key."""
        return (self.container, self.host, self.pid, self.process, self.rank)


EMPTY = Envelope()


@dataclass(frozen=True, slots=True)
class Line:
    """One logical line after normalisation."""

    lineno: int
    text: str
    env: Envelope = EMPTY


@dataclass(frozen=True)
class Wrapper:
    id: str
    pattern: re.Pattern
    at_end: bool = False
    decoder: str | None = None
    needs: str | None = None


@functools.lru_cache(maxsize=None)
def wrappers() -> tuple[Wrapper, ...]:
    return tuple(Wrapper(id=w["id"], pattern=re.compile(w["pattern"]), at_end=w.get("at") == "end",
                         decoder=w.get("decoder"), needs=w.get("needs"))
                 for w in knowledge.load("wrappers")["wrapper"])


_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


def parse_time(text: str) -> datetime | None:
    """RFC 3339 / ISO stamps of any precision, as naive local-free UTC-or-as-given time."""
    value = text.strip().replace(",", ".")
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    if "." in value:   # Python < 3.11 reads at most microseconds
        head, _, tail = value.partition(".")
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits):]
        value = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    if len(value) >= 5 and value[-5] in "+-" and value[-3] != ":" and value[-4:].isdigit():
        value = value[:-2] + ":" + value[-2:]
    try:
        when = datetime.fromisoformat(value.replace(" ", "T", 1))
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc).replace(tzinfo=None)
    return when


def clean_escapes(text: str) -> str:
    """Colour codes off: real ones, and the remnants a paste left of them."""
    if "\x1b" in text:
        text = _ANSI.sub("", text).replace("\x1b", "")
    if "m" in text and ("[" in text or text[:1].isdigit()) and _BROKEN_ANSI.search(text):
        text = _BROKEN_ANSI.sub("", text)
    return text


class Normaliser:
    """Per input: feed physical lines, get logical lines (0, 1 or several each)."""

    def __init__(self) -> None:
        self._held: Line | None = None          # a frame line cut inside its file name
        self._tee: dict[int, int] = {}           # torchrun --tee prefix (local rank) -> torch's global rank
        self._partial: dict[tuple, tuple[int, str, Envelope]] = {}
        self._wrappers = wrappers()
        self.joined = 0           # physical lines folded into the previous one (P records)

    def feed(self, lineno: int, raw: str) -> Iterator[Line]:
        text = raw
        if not text.startswith('{"log":'):
            # a docker json-file record's colour codes are escaped ("\u001b[31m"): they
            # come off once it is decoded - the remnant cleaner would take "[31m" off here
            # and leave an ESC that then eats the letter after it
            text = clean_escapes(text)
        if "^M" in text:
            text = _CARET_M.sub("", text)
        if "**" in text and ('File "' in text or " in **" in text):
            text = _DUNDER.sub(r"__\1__", text)
        if "\r" in text:
            # a progress bar redrawn with carriage returns: the last state is what stayed on screen
            text = next((p for p in reversed(text.split("\r")) if p.strip()), "")
        pieces = split_glued(text)
        if self._held is not None:
            held, self._held = self._held, None
            if pieces and _FRAME_REST.match(pieces[0]):
                # a frame line hard-wrapped inside its file name, and the rest of it
                yield Line(held.lineno, held.text + pieces.pop(0).strip(), held.env)
            else:
                yield held
        for piece in pieces:
            for line in self._one(lineno, piece):
                if self._held is not None:
                    yield self._held
                    self._held = None
                if _OPEN_FRAME.search(line.text):
                    self._held = line
                else:
                    yield line

    def flush(self) -> Iterator[Line]:
        if self._held is not None:
            yield self._held
            self._held = None
        for lineno, text, env in self._partial.values():
            yield Line(lineno, text, env)
        self._partial.clear()

    def _one(self, lineno: int, text: str) -> Iterator[Line]:
        env, text, partial = self.unwrap(text)
        key = (env.container, env.stream, env.host)
        pending = self._partial.pop(key, None) if self._partial else None
        if pending is not None:
            first_lineno, head, first_env = pending
            self.joined += 1
            text = (head + text)[:MAX_JOINED]
            if partial:
                self._partial[key] = (first_lineno, text, first_env)
                return
            # the completed record may itself carry inner wrappers (a prefix split across P parts)
            inner_env, text, _ = self.unwrap(text, skip_outer=True)
            yield Line(first_lineno, text, _merge(first_env, inner_env))
            return
        if partial:
            self._partial[key] = (lineno, text, env)
            return
        yield Line(lineno, text, env)

    def unwrap(self, text: str, skip_outer: bool = False) -> tuple[Envelope, str, bool]:
        """(envelope, text without wrappers, whether the record is partial)."""
        fields: dict = {}
        used: list[str] = []
        ranks: list[int] = []                    # torch-rank prefixes, outermost first
        partial = False
        progress = True
        while progress and text:
            progress = False
            for wrapper in self._wrappers:
                if (wrapper.id in used and (wrapper.id not in _NESTING or used.count(wrapper.id) >= 2)) \
                        or (skip_outer and wrapper.id in ("k8s-cri", "docker-json")):
                    continue
                if wrapper.decoder == "json":
                    if not text.startswith('{"log":'):
                        continue
                    decoded = _docker_json(text)
                    if decoded is None:
                        continue
                    text, got, partial = decoded
                    fields.update(got)
                    text = clean_escapes(text)
                elif wrapper.decoder == "quotes":
                    # a frame line whose quotes a collector or a paste escaped: unescaped
                    if not wrapper.pattern.match(text):
                        continue
                    text = text.replace('\\"', '"')
                elif wrapper.at_end:
                    match = wrapper.pattern.search(text)
                    if not match:
                        continue
                    _take(fields, match)
                    # a `cut` group marks where the wrapper starts when the pattern must
                    # look at the whole line to know it applies
                    text = text[:match.start("cut") if "cut" in match.groupdict() else match.start()]
                else:
                    match = wrapper.pattern.match(text)
                    if not match or not _acceptable(wrapper, match):
                        continue
                    if match.groupdict().get("partial") == "P":
                        partial = True
                    if wrapper.id == "torch-rank":
                        ranks.append(claimed_int(match.group("rank")))
                    _take(fields, match, override=_NESTING.get(wrapper.id, set()))
                    body = match.groupdict().get("body")
                    text = body if body is not None else text[match.end():]
                used.append(wrapper.id)
                progress = True
                break
        if not used:
            return EMPTY, text, False
        if len(ranks) >= 2:
            # "[rank3]:[rank11]: ...": torchrun's tee prefix (the local rank) outside torch's
            # own (the global rank); lines with the tee prefix alone are that global rank's
            self._tee[ranks[0]] = ranks[-1]
        elif len(ranks) == 1 and ranks[0] in self._tee:
            fields["rank"] = self._tee[ranks[0]]
        return Envelope(wrappers=tuple(used), **fields), text, partial


def _acceptable(wrapper: Wrapper, match: re.Match) -> bool:
    if wrapper.needs == "pid-or-known-name":
        groups = match.groupdict()
        if groups.get("pid"):
            return True
        name = groups.get("process") or ""
        return knowledge.role_and_rank(name)[0] is not None or name in ("raylet", "gcs_server", "dashboard",
                                                                         "monitor", "autoscaler")
    return True


_INT_FIELDS = {"pid", "rank", "repeat"}
# Wrappers that nest inside one another ("(EngineCore_DP0 pid=A) (RayWorkerWrapper pid=B,
# ip=X) ..."): the innermost says who wrote the line, so its fields win (a journald
# stamp's pid is the unit's main process, not the writer).
_NESTING = {"process-prefix": {"pid", "process", "host"}, "torch-rank": {"rank"}}


def _take(fields: dict, match: re.Match, override: set = frozenset()) -> None:
    for key, value in match.groupdict().items():
        if value is None or key in ("body", "partial", "tag", "cut"):
            continue
        if ("host" if key == "ip" else key) in override:
            fields.pop("host" if key == "ip" else key, None)
        if key in _INT_FIELDS:
            try:
                fields.setdefault(key, claimed_int(value))
            except ValueError:
                pass
        elif key == "time":
            when = parse_time(value)
            if when is not None:
                fields.setdefault("time", when)
        elif key == "syslog_time":
            fields.setdefault("syslog_stamp", value)
        elif key == "ip":
            fields.setdefault("host", value)
        else:
            fields.setdefault(key, value)
    if "syslog_stamp" in fields:
        fields.pop("syslog_stamp")     # year-less: the kernel-log and text stages place it


def _docker_json(text: str) -> tuple[str, dict, bool] | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("log"), str):
        return None
    log = record["log"]
    partial = not log.endswith("\n")
    fields: dict = {}
    if isinstance(record.get("stream"), str):
        fields["stream"] = record["stream"]
    if isinstance(record.get("time"), str):
        when = parse_time(record["time"])
        if when is not None:
            fields["time"] = when
    return log.rstrip("\r\n"), fields, partial


def _merge(outer: Envelope, inner: Envelope) -> Envelope:
    if inner is EMPTY:
        return outer
    changes = {k: getattr(inner, k) for k in ("time", "stream", "container", "host", "process", "pid", "rank",
                                               "repeat", "ident") if getattr(outer, k) is None and getattr(inner, k) is not None}
    return replace(outer, wrappers=outer.wrappers + inner.wrappers, **changes)


# --- lost newlines ----------------------------------------------------------------------

# Record starts, by family; when one family starts two or more records inside one long
# line, the line holds several records whose newlines were lost.  A start is at the line's
# start or after whitespace.  Patterns that open with a fixed character or a bounded run
# are searched bare and their matches checked for that (the regex engine then skips to
# the next candidate character: 10-50x faster on long lines than a lookbehind tried at
# every position); the NCCL one opens with an unbounded run and keeps the lookbehind, or
# a long word would be rescanned from each of its characters.
_BOUNDARY = r"(?:(?<=\s)|^)"
_RECORD_FAMILIES = tuple((re.compile(p), True) if checked else (re.compile(_BOUNDARY + p), False) for p, checked in (
    (r"\((?:[A-Za-z_][\w\-]*(?: rank=\d+| [A-Z]+\d+)?) pid=\d+(?:, ip=[\d.]+)?\) ", True),      # (Worker_TP0 pid=1)
    (r"\[rank\d+\]:", True),                                                                 # [rank0]:
    (r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ", True),  # vLLM
    (r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [A-Z]{2}\d+)+\] ", True),                        # SGLang
    (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z (?:stdout|stderr) [PF] ", True),             # CRI
    (r"[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE) ", False),                          # NCCL
    (r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w./-]+:\d+\] ", True),                          # glog
))
_TB_PIECES = re.compile(
    r"(?<=\S)\s+(?=Traceback \(most recent call last\):|File \"[^\"]+\", line \d+"
    r"|The above exception was the direct cause|During handling of the above exception)"
)


def split_glued(text: str) -> list[str]:
    """A line that holds several records (newlines lost in a paste), split where a
    record family starts again; a flattened traceback split at its frames."""
    if len(text) < GLUED_MIN:
        return [text]
    starts: dict[int, tuple[int, int]] = {}
    for number, (family, checked) in enumerate(_RECORD_FAMILIES):
        found = [(m.start(), m.end()) for m in family.finditer(text)
                 if not checked or m.start() == 0 or text[m.start() - 1].isspace()]
        if len(found) >= 2:
            for start, end in found:
                starts.setdefault(start, (end, number))
    cuts: list[int] = []
    envelope_end = -1
    envelope_families: set[int] = set()
    for start in sorted(starts):
        end, family = starts[start]
        # a record start right after another's envelope is part of that envelope
        # ("(Worker_TP1 pid=2) INFO 11-04 ... [x.py:1] "), unless the envelope already
        # holds a start of its family (a record with an empty message, then the next)
        if cuts and start <= envelope_end + 1 and family not in envelope_families:
            envelope_end = max(envelope_end, end)
            envelope_families.add(family)
            continue
        cuts.append(start)
        envelope_end, envelope_families = end, {family}
    pieces = [text]
    if cuts:
        bounds = sorted(set(cuts) | {0, len(text)})
        pieces = [text[a:b].rstrip() for a, b in zip(bounds, bounds[1:]) if text[a:b].strip()]
    out = []
    for piece in pieces:
        if '\\n  File "' in piece:
            out.append(piece)          # an escaped traceback string: the text parser reads it whole
        elif piece.count('File "') >= 2 or ("Traceback (most recent call last):" in piece and 'File "' in piece
                                              and not piece.rstrip().endswith("Traceback (most recent call last):")):
            out.extend(_split_traceback(piece))
        else:
            out.append(piece)
    return out


def _split_traceback(text: str) -> list[str]:
    """'Traceback (most recent call last): File "a.py", line 1, in f   g() RuntimeError: x'
    -> the lines Python printed."""
    pieces = []
    for part in _TB_PIECES.split(text):
        m = re.match(r'(File "[^"]+", line \d+(?:, in \S+)?)\s+(.*)$', part)
        if m:
            code, exc = _code_and_exception(m.group(2))
            pieces.append("  " + m.group(1))
            if code:
                pieces.append("    " + code)
            if exc:
                pieces.append(exc)
        else:
            pieces.append(part.strip())
    return [p for p in pieces if p.strip()]


_EXC_IN_CODE = re.compile(r"\s(?=(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b: )")


def _code_and_exception(rest: str) -> tuple[str, str]:
    m = _EXC_IN_CODE.search(rest)
    if m:
        return rest[:m.start()].strip(), rest[m.end():].strip()
    if re.match(r"^(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): ", rest):
        return "", rest
    return rest.strip(), ""
