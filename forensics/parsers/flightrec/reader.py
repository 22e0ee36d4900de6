"""Flight Recorder dumps -> events: one ``FLIGHT_RECORDER`` event per dump (its groups,
their members, how far the rank got) and one ``COLLECTIVE_RECORD`` per entry (group,
sequence number, op, state, sizes, where the program called it).

The reader only reports what the dump holds.  Which rank the others waited for is
settled later, over every rank's dump at once (forensics/collectives.py), since no one
dump can tell: each rank only knows its own side.

A dump is read whole into memory (capped: ``Limits.bytes``, and ``JSON_BYTES`` for the
JSON form, whose parser has no caps of its own), then refused or read; a refused dump is a problem line on its input
and nothing of it is kept - never a partial object, never anything executed.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from pathlib import PurePosixPath

from forensics import knowledge
from forensics.parsers import boundedjson
from forensics.events import Event, Frame, Kind, Severity, freeze
from forensics.inputs.sources import Source
from forensics.parsers.base import ParsedSource
from forensics.parsers.flightrec.dump import FlightDump, NotADump, Record, from_plain
from forensics.parsers.flightrec.unpickle import Limits, PickleRefused, loads

KIND = "flight-recorder"
LIMITS = Limits()
JSON_BYTES = 32 << 20            # the JSON form has no frames: PyTorch's 2,000 entries take about 1.5 MB
JSON_DEPTH = 32
_EPOCH = datetime(1970, 1, 1)
_COMPRESSED = (".gz", ".xz", ".bz2")


@functools.lru_cache(maxsize=None)
def _catalogue() -> dict:
    return knowledge.load("flightrec")


def rank_from_name(relpath: str) -> int | None:
    """The rank a dump's file name gives: the number its base name ends with (PyTorch
    writes <prefix><rank>; data/flightrec.toml [names]), else None."""
    names = _catalogue()["names"]
    name = PurePosixPath(relpath.rsplit("!", 1)[-1]).name
    for suffix in (*_COMPRESSED, *names["suffixes"]):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    digits = len(name) - len(name.rstrip("0123456789"))
    if not 0 < digits <= names["max_digits"]:
        return None
    return int(name[len(name) - digits:])


def stack_top(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame outside torch.distributed's own wrappers: where the program
    called the collective (data/flightrec.toml [frames])."""
    skip = tuple(_catalogue()["frames"]["skip_files"])
    for frame in frames:
        if not frame.file.replace("\\", "/").endswith(skip):
            return frame
    return frames[0] if frames else None


def frame_text(frame: Frame | None) -> str | None:
    if frame is None:
        return None
    return f"{frame.function or '?'} ({frame.file}:{frame.line if frame.line is not None else '?'})"


def _time(ns: int | None) -> datetime | None:
    """An entry's time_created_ns (the host's wall clock, nanoseconds since 1970) as the
    UTC reading; None outside the years a log could be from."""
    if ns is None or not 946_684_800 * 10**9 <= ns < 7_258_118_400 * 10**9:     # 2000 .. 2200
        return None
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _read(source: Source, cap: int) -> bytes:
    with source.open_binary() as stream:
        data = stream.read(cap + 1)
    if len(data) > cap:
        raise PickleRefused(f"larger than the {cap:,} bytes a dump may have")
    return data


def load(data: bytes, form: str) -> FlightDump:
    """The dump ``data`` holds, in ``form`` (pickle | json); PickleRefused or NotADump."""
    if form == "pickle":
        return from_plain(loads(data, LIMITS).value, "pickle")
    try:
        value = boundedjson.loads(data, JSON_DEPTH)
    except boundedjson.JsonRefused as exc:
        raise PickleRefused(str(exc)) from None
    return from_plain(value, "json")


def form_of(head: bytes) -> str:
    return "pickle" if head[:1] == b"\x80" else "json"


class FlightRecorderParser:
    """``flight-recorder`` inputs (the pickle PyTorch writes, or its JSON form) -> events."""

    def parse(self, source: Source) -> ParsedSource:
        out = ParsedSource(source.relpath, KIND, lines=None, unparsed_lines=None, size=source.size)
        try:
            data = _read(source, LIMITS.bytes)
            form = form_of(data)
            if form == "json" and len(data) > JSON_BYTES:
                raise PickleRefused(f"a JSON dump of {len(data):,} bytes, more than the {JSON_BYTES:,} one may have")
            dump = load(data, form)
        except (PickleRefused, NotADump) as exc:
            out.problems.append(f"{source.relpath}: Flight Recorder dump refused: {exc}; nothing of it was loaded, "
                                "nothing in it was run")
            return out
        except (OSError, EOFError) as exc:
            out.problems.append(f"{source.relpath}: cannot read the Flight Recorder dump ({exc})")
            return out
        out.problems.extend(f"{source.relpath}: {p}" for p in dump.problems)
        rank = dump.rank if dump.rank is not None else rank_from_name(source.relpath)
        if rank is None:
            out.problems.append(f"{source.relpath}: which rank this Flight Recorder dump is of is unknown (PyTorch "
                                "names it <prefix><rank>, and this name ends in no number): its collectives are "
                                "shown but not lined up with the other ranks'")
        out.events.extend(events(dump, source.relpath, rank))
        return out


def events(dump: FlightDump, relpath: str, rank: int | None) -> list[Event]:
    """The dump's events: the dump itself first, then each record, oldest first."""
    groups = tuple({"name": g.name, "desc": g.desc, "ranks": g.ranks} for g in dump.groups)
    status = tuple({"pg_id": s.pg_id, "last_enqueued": s.last_enqueued, "last_started": s.last_started,
                    "last_completed": s.last_completed} for s in dump.status)
    backends = sorted({r.backend for r in dump.records if r.backend})
    ids = [r.record_id for r in dump.records if r.record_id is not None]
    named = {r.group for r in dump.records}
    summary = f"Flight Recorder dump{f' of rank {rank}' if rank is not None else ''}: "
    if dump.records:
        last = dump.records[-1]
        summary += f"last {last.profiling_name} #{last.collective_seq} ({state_text(last)}), "
    summary += (f"{len(dump.records)} record(s) in {len(named)} process group(s) ({dump.form}, version "
                f"{dump.version or '?'})")
    out = [Event(kind=Kind.FLIGHT_RECORDER, message=summary, source=relpath, line=0, severity=Severity.INFO,
                 rank=rank, seq=0, time=_time(dump.records[-1].created_ns) if dump.records else None,
                 attrs=freeze({"form": dump.form, "version": dump.version, "comm_lib_version": dump.comm_lib_version,
                               "groups": groups, "status": status, "records": len(dump.records),
                               "first_record_id": min(ids) if ids else None,
                               "last_record_id": max(ids) if ids else None, "backends": tuple(backends)}))]
    for i, record in enumerate(dump.records, start=1):
        out.append(_record_event(record, relpath, rank, i, dump.form))
    return out


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(map(str, s)) + "]" for s in sizes[:4]) + (", ...]" if len(sizes) > 4 else "]")


def _record_event(record: Record, relpath: str, rank: int | None, seq: int, form: str) -> Event:
    top = stack_top(record.frames)
    number = record.p2p_seq if record.is_p2p else record.collective_seq
    group = record.group + (f" ({record.group_desc})" if record.group_desc else "")
    message = (f"{record.profiling_name} {'p2p ' if record.is_p2p else ''}#{number} in process group {group}: "
               f"{state_text(record)}"
               + (f", input {_sizes(record.input_sizes)}" if record.input_sizes else "")
               + (f", called at {frame_text(top)}" if top else ""))
    attrs = {
        "group": record.group, "group_desc": record.group_desc, "pg_id": record.pg_id,
        "seq": record.collective_seq, "p2p_seq": record.p2p_seq, "is_p2p": record.is_p2p, "op_id": record.op_id,
        "record_id": record.record_id, "op": record.op, "backend": record.backend,
        "profiling_name": record.profiling_name, "state": record.state, "retired": record.retired,
        "created_ns": record.created_ns, "started_ns": record.started_ns, "completed_ns": record.completed_ns,
        "duration_ms": record.duration_ms, "timeout_ms": record.timeout_ms,
        "input_sizes": record.input_sizes, "output_sizes": record.output_sizes,
        "input_dtypes": record.input_dtypes, "output_dtypes": record.output_dtypes,
        "frames": record.frames, "frame_count": record.frame_count, "stack_top": frame_text(top),
        "thread_name": record.thread_name, "form": form,
    }
    # a collective still in flight when the dump was taken is shown on the timeline (the
    # thousands of completed ones are not); whether it is the hang is the line-up's to say
    return Event(kind=Kind.COLLECTIVE_RECORD, message=message, source=relpath, line=0,
                 severity=Severity.WARNING if pending(record) else Severity.INFO,
                 rank=rank, seq=seq, time=_time(record.created_ns), attrs=freeze(attrs))


def state_text(record: Record) -> str:
    """The record's state in words: gloo's stays "scheduled" whatever happens, so that
    for it only "retired" says anything."""
    if record.backend in _catalogue()["states"]["eventless_backends"]:
        return "retired" if record.retired else "not retired"
    return (record.state or "no state") + (", retired" if record.retired else "")


def pending(record: Record) -> bool:
    """Still in flight as its own record says: not completed, or - for a backend whose
    records carry no events (gloo) - not retired."""
    states = _catalogue()["states"]
    if record.backend in states["eventless_backends"]:
        return not record.retired
    return record.state != states["completed"]
