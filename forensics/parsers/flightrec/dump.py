"""One rank's Flight Recorder dump as typed values, from the plain data of either form.

The pickle (forensics/parsers/flightrec/unpickle.py reads it) and the JSON dump hold the
same keys (data/flightrec.toml describes them); they differ in small ways that are
settled here, once: the JSON form has no stack frames, writes a group as a list where
the pickle has a tuple, writes 0 where the pickle has None for a time not discovered,
and writes pg_status's numbers as text.  Every field is checked for its type: a field
of the wrong type is left out (and counted), never trusted, since the file is data from
the crashed machine.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from forensics import knowledge
from forensics.events import Frame

MAX_RECORDS = 100_000        # entries read per dump (PyTorch's default buffer holds 2,000)
MAX_GROUPS = 10_000
MAX_RANKS = 1 << 20          # ranks listed per group


class NotADump(ValueError):
    """The data is plain, but not a Flight Recorder dump."""


@dataclass(frozen=True)
class GroupConfig:
    """A process group as the dump's pg_config lists it."""

    name: str
    desc: str | None
    ranks: tuple[int, ...] | None     # global ranks, None when the dump's text cannot be read


@dataclass(frozen=True)
class GroupStatus:
    """pg_status: how far this rank got in one group (its local pg_id)."""

    pg_id: str
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass(frozen=True)
class Record:
    """One entry of the ring buffer: a collective (or p2p op) this rank enqueued."""

    record_id: int | None
    pg_id: int | None
    group: str                       # the group's name (pg_uid), as pg_config keys it
    group_desc: str | None           # its description (default_pg, a mesh dimension ...)
    collective_seq: int | None       # one per collective kernel launch in the group
    p2p_seq: int | None
    is_p2p: bool
    op_id: int | None
    profiling_name: str              # nccl:all_reduce, gloo:broadcast, nccl:send 0->1
    backend: str | None              # nccl, gloo ...
    op: str                          # all_reduce, send ...
    state: str | None                # scheduled | started | completed
    retired: bool | None             # taken off the work list (done, or timed out)
    created_ns: int | None
    started_ns: int | None
    completed_ns: int | None
    duration_ms: float | None
    timeout_ms: int | None
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    frames: tuple[Frame, ...]        # innermost first, as recorded (the pickle only)
    frame_count: int                 # frames recorded (more than are kept)
    thread_name: str | None


@dataclass(frozen=True)
class FlightDump:
    form: str                        # pickle | json
    version: str | None
    rank: int | None                 # when the dump says (newer PyTorch); else from its file name
    comm_lib_version: str | None
    groups: tuple[GroupConfig, ...]
    status: tuple[GroupStatus, ...]
    records: tuple[Record, ...]
    problems: tuple[str, ...] = ()


@functools.lru_cache(maxsize=None)
def _catalogue() -> dict:
    return knowledge.load("flightrec")


def looks_like_dump(value) -> bool:
    detect = _catalogue()["detect"]
    return isinstance(value, dict) and detect["version_key"] in value and any(k in value for k in detect["keys"])


class _Fields:
    """Typed reads of one dict, counting the fields of a wrong type."""

    def __init__(self, data: dict, bad: dict[str, int]) -> None:
        self.data, self.bad = data, bad

    def _wrong(self, key: str) -> None:
        self.bad[key] = self.bad.get(key, 0) + 1

    def integer(self, key: str, zero_is_none: bool = False) -> int | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) <= 20:
                return int(value)          # pg_status in the JSON form: numbers as text
            self._wrong(key)
            return None
        return None if zero_is_none and value == 0 else value

    def _typed(self, key: str, ok) -> object | None:
        """The field when ``ok(value)``; None when it is missing or of a wrong type (counted)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not ok(value):
            self._wrong(key)
            return None
        return value

    def text(self, key: str) -> str | None:
        return self._typed(key, lambda v: isinstance(v, str))

    def flag(self, key: str) -> bool | None:
        return self._typed(key, lambda v: isinstance(v, bool))

    def number(self, key: str) -> float | None:
        value = self._typed(key, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
        return None if value is None else float(value)

    def sizes(self, key: str) -> tuple[tuple[int, ...], ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(
                isinstance(s, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)
                for s in value):
            self._wrong(key)
            return ()
        return tuple(tuple(s) for s in value)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, (list, tuple)) or not all(isinstance(s, str) for s in value):
            self._wrong(key)
            return ()
        return tuple(value)


def parse_ranks(text) -> tuple[int, ...] | None:
    """A group's ranks: the text "[0, 1, 2]" PyTorch writes (or a list, as older dumps
    and hand-made ones may hold).  Read as numbers between brackets and commas; anything
    else is unreadable (None) - never evaluated."""
    if isinstance(text, (list, tuple)):
        items = list(text)
    elif isinstance(text, str):
        inner = text.strip()
        if not (inner.startswith("[") and inner.endswith("]")):
            return None
        inner = inner[1:-1].strip()
        items = [part.strip() for part in inner.split(",")] if inner else []
    else:
        return None
    if len(items) > MAX_RANKS:
        return None
    out = []
    for item in items:
        if isinstance(item, str):
            if not item.isdigit() or len(item) > 10:
                return None
            item = int(item)
        if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < (1 << 31):
            return None
        out.append(item)
    return tuple(out)


def _frames(value, kept: int) -> tuple[tuple[Frame, ...], int]:
    if not isinstance(value, (list, tuple)):
        return (), 0
    out = []
    for item in value[:kept]:
        if not isinstance(item, dict):
            continue
        name, filename, line = item.get("name"), item.get("filename"), item.get("line")
        if not isinstance(filename, str):
            continue
        out.append(Frame(file=filename, line=line if isinstance(line, int) and not isinstance(line, bool)
                         and 0 <= line < (1 << 31) else None, function=name if isinstance(name, str) else None))
    return tuple(out), len(value)


def _group_name(value) -> tuple[str, str | None] | None:
    """process_group: (name, desc) - a tuple in the pickle, a list in the JSON form."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    if isinstance(value, str):
        return value, None
    return None


def _record(entry: dict, bad: dict[str, int], json_form: bool, kept: int) -> Record | None:
    f = _Fields(entry, bad)
    group = _group_name(entry.get("process_group"))
    name = f.text("profiling_name")
    if group is None or name is None:
        bad["entry without its group or name"] = bad.get("entry without its group or name", 0) + 1
        return None
    backend, sep, op = name.partition(":")
    if not sep:
        backend, op = None, name
    op = op.split(" ", 1)[0]                   # "send 0->1": the op, then its peers
    frames, count = _frames(entry.get("frames"), kept)
    return Record(
        record_id=f.integer("record_id"), pg_id=f.integer("pg_id"), group=group[0], group_desc=group[1],
        collective_seq=f.integer("collective_seq_id"), p2p_seq=f.integer("p2p_seq_id"), is_p2p=bool(f.flag("is_p2p")),
        op_id=f.integer("op_id"), profiling_name=name, backend=backend or None, op=op,
        state=f.text("state"), retired=f.flag("retired"), created_ns=f.integer("time_created_ns"),
        started_ns=f.integer("time_discovered_started_ns", zero_is_none=json_form),
        completed_ns=f.integer("time_discovered_completed_ns", zero_is_none=json_form),
        duration_ms=f.number("duration_ms"), timeout_ms=f.integer("timeout_ms"),
        input_sizes=f.sizes("input_sizes"), output_sizes=f.sizes("output_sizes"),
        input_dtypes=f.strings("input_dtypes"), output_dtypes=f.strings("output_dtypes"),
        frames=frames, frame_count=count, thread_name=f.text("thread_name"))


def from_plain(value, form: str) -> FlightDump:
    """The dump a plain value holds (NotADump when it is no Flight Recorder dump)."""
    if not looks_like_dump(value):
        what = type(value).__name__
        raise NotADump(f"the {form} holds a {what}" + (" without the keys of a Flight Recorder dump"
                                                        if isinstance(value, dict) else ", not a Flight Recorder dump"))
    bad: dict[str, int] = {}
    problems: list[str] = []
    top = _Fields(value, bad)
    groups = []
    config = value.get("pg_config")
    if isinstance(config, dict):
        for key, info in list(config.items())[:MAX_GROUPS]:
            if not isinstance(info, dict):
                # an older layout: group name -> its ranks
                groups.append(GroupConfig(str(key), None, parse_ranks(info)))
                continue
            ranks = parse_ranks(info.get("ranks"))
            if ranks is None and info.get("ranks") is not None:
                bad["pg_config ranks"] = bad.get("pg_config ranks", 0) + 1
            name = info.get("name")
            desc = info.get("desc")
            groups.append(GroupConfig(name if isinstance(name, str) else str(key),
                                      desc if isinstance(desc, str) else None, ranks))
    status = []
    raw_status = value.get("pg_status")
    if isinstance(raw_status, dict):
        for key, info in list(raw_status.items())[:MAX_GROUPS]:
            if isinstance(info, dict):
                s = _Fields(info, bad)
                status.append(GroupStatus(str(key), s.integer("last_enqueued_collective"), s.integer("last_started_collective"),
                                          s.integer("last_completed_collective")))
    records = []
    entries = value.get("entries") or []
    if not isinstance(entries, (list, tuple)):
        bad["entries"] = 1
        entries = []
    if len(entries) > MAX_RECORDS:
        problems.append(f"{len(entries):,} entries: the last {MAX_RECORDS:,} are read")
        entries = entries[-MAX_RECORDS:]
    kept = int(_catalogue()["frames"]["kept"])
    for entry in entries:
        if not isinstance(entry, dict):
            bad["entry that is not a dict"] = bad.get("entry that is not a dict", 0) + 1
            continue
        record = _record(entry, bad, form == "json", kept)
        if record is not None:
            records.append(record)
    if bad:
        problems.append("fields of an unexpected type left out: " + ", ".join(f"{k} ({n})" for k, n in sorted(bad.items())))
    version = value.get("version")
    rank = top.integer("rank")
    return FlightDump(form=form, version=version if isinstance(version, str) else None,
                      rank=rank if rank is not None and 0 <= rank < (1 << 31) else None,
                      comm_lib_version=top.text("comm_lib_version") or None, groups=tuple(groups),
                      status=tuple(status), records=tuple(records), problems=tuple(problems))
