"""Events as columns (forensics/columns.py): the same events back, the same timeline
table, and what crosses between processes is arrays, not one object per event."""

from __future__ import annotations

import pickle
import pickletools
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from forensics.case import analyze, parse_source
from forensics.columns import EventColumns
from forensics.events import Event, Kind, Severity, freeze
from forensics.inputs.discover import discover
from forensics.inputs.sources import Walk
from forensics.timeline import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = sorted({p.parent for p in (ROOT / "tests/data/realworld").glob("*/expected.toml")})[::3] + \
    [ROOT / "samples", ROOT / "tests/data/gpu", ROOT / "tests/data/collect/h200_cupy_oob"]


def _reference_frame(events) -> pd.DataFrame:
    """The table made row by row, the obvious way: what the columns must equal."""
    frame = pd.DataFrame([{
        "time": e.time, "rank": e.rank, "pid": e.pid, "role": e.role, "process": e.process, "host": e.host,
        "kind": e.kind.value, "severity": e.severity.name, "message": e.message, "source": e.source,
        "line": e.line, "time_inferred": e.time_inferred} for e in events], columns=COLUMNS)
    for column in ("rank", "pid", "line"):
        frame[column] = frame[column].astype("Int64")
    frame["time"] = pd.to_datetime(frame["time"])
    return frame


def _same_table(got: pd.DataFrame, want: pd.DataFrame) -> None:
    got, want = got.copy(), want.copy()
    for frame in (got, want):
        # pandas infers the time resolution (s, us) from the values: compare instants
        frame["time"] = frame["time"].astype("datetime64[ns, UTC]" if frame["time"].dt.tz is not None
                                             else "datetime64[ns]")
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_columns_give_back_the_same_events_and_table(path):
    case = analyze(str(path))
    assert case.events, path
    columns = EventColumns.from_events(case.events)
    assert len(columns) == len(case.events)
    assert columns.to_events() == list(case.events)
    assert pickle.loads(pickle.dumps(columns)).to_events() == list(case.events)
    _same_table(case.timeline, _reference_frame(case.events))


def _event(i: int, **changes) -> Event:
    base = dict(kind=Kind.LOG, message=f"line {i}", source="a.log", line=i + 1, seq=i)
    base.update(changes)
    return Event(**base)


def test_times_zones_gaps_and_odd_text_survive():
    tz = timezone(timedelta(hours=-7))
    events = [
        _event(0, time=datetime(2025, 5, 20, 2, 14, 7, 123456, tzinfo=tz), pid=0, rank=0),
        _event(1, time=None, time_inferred=True, message="no time, rank 3", rank=3),
        _event(2, time=datetime(2025, 5, 20, 9, 14, 7, tzinfo=timezone.utc), message="ünïcode ✓ \ud800 lone half",
               severity=Severity.CRITICAL, kind=Kind.CUDA_ERROR, attrs=freeze({"code": 700, "name": "x"})),
        _event(3, message="", host="node-1", role="worker", process="Worker_TP1"),
    ]
    columns = EventColumns.from_events(events)
    assert columns.to_events() == events
    back = columns.to_events()
    assert back[0].time.tzinfo == tz and back[0].time.microsecond == 123456
    assert back[2].attrs == {"code": 700, "name": "x"}
    with pytest.raises(TypeError):
        back[2].attrs["code"] = 1                      # still read-only
    table = columns.frame()
    assert table["time"].dt.tz is not None             # two zones: one UTC axis
    assert table["time"].isna().tolist() == [False, True, False, True]
    assert table["rank"].tolist()[:2] == [0, 3]
    assert EventColumns.from_events([]).to_events() == []
    assert list(EventColumns.from_events([]).frame().columns) == COLUMNS


def test_naive_times_stay_naive():
    events = [_event(i, time=datetime(2025, 1, 1, 0, 0, i)) for i in range(3)]
    table = EventColumns.from_events(events).frame()
    assert table["time"].dt.tz is None
    assert table["time"].tolist() == [pd.Timestamp(e.time) for e in events]


def _globals(data: bytes) -> set[str]:
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.add(".".join(strings[-2:]))
        elif op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
    return found


def test_a_parsed_source_travels_as_columns():
    source = next(iter(discover([str(ROOT / "samples")], walk=Walk())))
    parsed = parse_source(source)
    assert parsed.events
    data = pickle.dumps(parsed)
    assert "forensics.events.Event" not in _globals(data)
    assert "forensics.columns.EventColumns" in _globals(data)
    back = pickle.loads(data)
    assert back.events == parsed.events and back.to_json() == parsed.to_json()
