"""Events as columns: the form events travel in between processes, and the form the
timeline table is built from.

A parser yields ``Event`` objects one at a time: readable, frozen, typed.  Thousands of
them in a list cost nothing worth measuring; a million do - each instance and its
attribute dict takes about 1.6 KB, and sending them one object at a time from a worker
process to the parent took a fifth of a run (issue 16, measured on 1.9 million events).
Since the scanner counts traffic and error storms instead of making events of them, a
gigabyte gives hundreds of events, not millions; what travels is still columns, so that
the cost of an input with very many events is a few buffers, not millions of objects.

``EventColumns`` holds events as arrays: a code per kind and per severity, times in
microseconds, pids, ranks, lines and sequence numbers as 8-byte integers, the names
(source, process, role, host, time zone) dictionary-encoded - a handful of distinct
values each - every message in one UTF-8 buffer with offsets, and the attributes of the
rows that have any.  ``to_events`` gives back equal events; ``frame`` gives the
timeline's pandas table straight from the arrays.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

from forensics.events import Event, FrozenAttrs, Kind, Severity

_KINDS = tuple(Kind)
_KIND_CODE = {kind: i for i, kind in enumerate(_KINDS)}
_NONE = -(1 << 63)                     # "no value" in an integer column
_EPOCH = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_FRAME_MIN, _FRAME_MAX = -(9 << 60) // 1000, (9 << 60) // 1000   # what datetime64[ns] holds (years 1677-2262)

# the frame's columns, in order (timeline.COLUMNS re-exports them)
FRAME_COLUMNS = ["time", "rank", "pid", "role", "process", "host", "kind", "severity", "message", "source", "line",
                 "time_inferred"]


class _Names:
    """A dictionary-encoded column: a code per row into a list of distinct values."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.codes = array("i")
        self._index: dict[Any, int] = {}

    def add(self, value: Any) -> None:
        code = self._index.get(value)
        if code is None:
            code = self._index[value] = len(self.values)
            self.values.append(value)
        self.codes.append(code)


def _micros(when: datetime) -> int:
    """Microseconds since 1970 of the wall-clock reading (its zone is kept apart)."""
    return (when.replace(tzinfo=None) - _EPOCH) // _MICROSECOND


def _optional(value: int | None) -> int:
    return _NONE if value is None else value


@dataclass(frozen=True)
class EventColumns:
    """Events as arrays; ``len`` rows, in the order they were given."""

    kind: array
    severity: array
    time: array                        # microseconds since 1970 of the local reading, or _NONE
    zone: tuple[array, tuple]          # dictionary-encoded tzinfo (None: naive or no time)
    time_inferred: array
    pid: array
    rank: array
    line: array
    seq: array
    source: tuple[array, tuple]
    process: tuple[array, tuple]
    role: tuple[array, tuple]
    host: tuple[array, tuple]
    text: bytes                        # every message, UTF-8, one after the other
    ends: array                        # where each message ends in ``text``
    attrs: tuple[tuple[int, dict], ...]    # (row, attributes) of the rows that have any

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> "EventColumns":
        kind, severity, time, inferred = array("B"), array("B"), array("q"), array("B")
        pid, rank, line, seq, ends = array("q"), array("q"), array("q"), array("q"), array("q")
        zone, source, process, role, host = _Names(), _Names(), _Names(), _Names(), _Names()
        texts: list[bytes] = []
        attrs: list[tuple[int, dict]] = []
        end = 0
        for row, event in enumerate(events):
            kind.append(_KIND_CODE[event.kind])
            severity.append(int(event.severity))
            time.append(_NONE if event.time is None else _micros(event.time))
            zone.add(event.time.tzinfo if event.time is not None else None)
            inferred.append(event.time_inferred)
            pid.append(_optional(event.pid))
            rank.append(_optional(event.rank))
            line.append(event.line)
            seq.append(event.seq)
            source.add(event.source)
            process.add(event.process)
            role.add(event.role)
            host.add(event.host)
            encoded = event.message.encode("utf-8", "surrogatepass")
            texts.append(encoded)
            end += len(encoded)
            ends.append(end)
            if event.attrs:
                attrs.append((row, dict(event.attrs)))
        return cls(kind, severity, time, (zone.codes, tuple(zone.values)), inferred, pid, rank, line, seq,
                   (source.codes, tuple(source.values)), (process.codes, tuple(process.values)),
                   (role.codes, tuple(role.values)), (host.codes, tuple(host.values)), b"".join(texts), ends,
                   tuple(attrs))

    def _name(self, column: tuple[array, tuple], row: int) -> Any:
        codes, values = column
        return values[codes[row]]

    def to_events(self) -> list[Event]:
        """The events again, equal to the ones the columns were made from."""
        attrs = dict(self.attrs)
        out = []
        start = 0
        for row in range(len(self)):
            end = self.ends[row]
            micros = self.time[row]
            when = None
            if micros != _NONE:
                when = (_EPOCH + micros * _MICROSECOND).replace(tzinfo=self._name(self.zone, row))
            out.append(Event(
                kind=_KINDS[self.kind[row]], message=self.text[start:end].decode("utf-8", "surrogatepass"),
                source=self._name(self.source, row), line=self.line[row], severity=Severity(self.severity[row]),
                time=when, time_inferred=bool(self.time_inferred[row]),
                pid=None if self.pid[row] == _NONE else self.pid[row],
                process=self._name(self.process, row),
                rank=None if self.rank[row] == _NONE else self.rank[row],
                role=self._name(self.role, row), host=self._name(self.host, row), seq=self.seq[row],
                attrs=FrozenAttrs(attrs[row]) if row in attrs else FrozenAttrs()))
            start = end
        return out

    def frame(self):
        """The timeline table (pandas), built from the arrays: one row per event."""
        import numpy as np
        import pandas as pd

        def names(column: tuple[array, tuple]) -> np.ndarray:
            codes, values = column
            return np.array(values, dtype=object)[np.frombuffer(codes, dtype=np.int32)] if len(codes) else \
                np.array([], dtype=object)

        def optional(values: array) -> pd.arrays.IntegerArray:
            data = np.frombuffer(values, dtype=np.int64) if len(values) else np.array([], dtype=np.int64)
            return pd.arrays.IntegerArray(data.copy(), data == _NONE)

        micros = np.frombuffer(self.time, dtype=np.int64) if len(self.time) else np.array([], dtype=np.int64)
        missing = micros == _NONE
        zones = {z for z, m in zip(names(self.zone), missing) if not m}
        if len(zones) <= 1 and (missing | ((micros > _FRAME_MIN) & (micros < _FRAME_MAX))).all():
            # one zone (the usual case): one vectorised conversion
            stamps = pd.to_datetime(np.where(missing, np.int64(0), micros), unit="us")
            stamps = pd.Series(stamps).where(~missing)
            zone = next(iter(zones), None)
            if zone is not None:
                stamps = stamps.dt.tz_localize(zone)
        else:
            # several zones in one analysis (or a stamp pandas cannot hold): one instant axis, in UTC
            stamps = pd.to_datetime(pd.Series([e.time for e in self.to_events()]), utc=True)
        starts = np.concatenate(([0], np.frombuffer(self.ends, dtype=np.int64)[:-1])) if len(self.ends) else []
        messages = [self.text[a:b].decode("utf-8", "surrogatepass") for a, b in zip(starts, self.ends)]
        severity_names = {int(s): s.name for s in Severity}
        frame = pd.DataFrame({
            "time": stamps.reset_index(drop=True) if len(self) else pd.Series([], dtype="datetime64[us]"),
            "rank": optional(self.rank), "pid": optional(self.pid),
            "role": names(self.role), "process": names(self.process), "host": names(self.host),
            "kind": np.array([_KINDS[k].value for k in self.kind], dtype=object),
            "severity": np.array([severity_names[s] for s in self.severity], dtype=object),
            "message": np.array(messages, dtype=object), "source": names(self.source),
            "line": optional(self.line), "time_inferred": np.frombuffer(self.time_inferred, dtype=np.uint8).astype(bool)
            if len(self) else np.array([], dtype=bool),
        }, columns=FRAME_COLUMNS)
        return frame
