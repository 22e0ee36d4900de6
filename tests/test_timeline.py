"""Timeline: year inference, New Year rollover, container stamps, per-stream order."""

import os
from datetime import datetime

from forensics.case import analyze


def _write(path, text, mtime=None):
    path.write_text(text)
    if mtime:
        stamp = mtime.timestamp()
        os.utime(path, (stamp, stamp))


def test_year_from_file_mtime_and_new_year_rollover(tmp_path):
    # hand-made vLLM lines crossing New Year; the file was written in January 2027
    log = tmp_path / "server.log"
    _write(log, "(Worker_TP0 pid=5) INFO 12-31 23:59:58 [a.py:1] before midnight\n"
                "(Worker_TP0 pid=5) ERROR 01-01 00:00:03 [a.py:2] after midnight\n",
           mtime=datetime(2027, 1, 1, 0, 5))
    frame = analyze(str(tmp_path)).timeline
    assert list(frame["time"]) == [datetime(2026, 12, 31, 23, 59, 58), datetime(2027, 1, 1, 0, 0, 3)]


def test_container_stamp_gives_year_and_subsecond_order(tmp_path):
    _write(tmp_path / "pod.log",
           "2025-06-01T10:00:00.900Z (Worker_TP1 pid=6) INFO 06-01 10:00:00 [a.py:1] second\n"
           "2025-06-01T10:00:00.100Z (Worker_TP0 pid=5) INFO 06-01 10:00:00 [a.py:1] first\n")
    frame = analyze(str(tmp_path)).timeline
    assert frame["time"].iloc[0].year == 2025
    # different streams are ordered by their sub-second stamps ...
    assert list(frame["message"]) == ["first", "second"]      # two streams: sub-second order


def test_lines_of_one_stream_are_never_reordered(tmp_path):
    # hand-made: a clock that jumps backwards inside one file
    _write(tmp_path / "w.log", "INFO 03-01 10:00:05 [a.py:1] one\nINFO 03-01 10:00:01 [a.py:1] two\n"
                               "INFO 03-01 10:00:06 [a.py:1] three\n")
    frame = analyze(str(tmp_path)).timeline
    assert list(frame["message"]) == ["one", "two", "three"]


def test_untimed_lines_inherit_the_previous_stamp(tmp_path):
    _write(tmp_path / "w.log", "(Worker_TP0 pid=5) ERROR 03-01 10:00:05 [a.py:1] x\n"
                               "(Worker_TP0 pid=5) Exception ignored in: <function A.__del__ at 0x1>\n"
                               "(Worker_TP0 pid=5) Traceback (most recent call last):\n"
                               '(Worker_TP0 pid=5)   File "a.py", line 3, in __del__\n'
                               "(Worker_TP0 pid=5)     free()\n"
                               "(Worker_TP0 pid=5) RuntimeError: CUDA error: unspecified launch failure\n")
    case = analyze(str(tmp_path))
    (tb,) = [e for e in case.events if e.kind == "cuda-error"]
    assert tb.time == datetime(tb.time.year, 3, 1, 10, 0, 5) and tb.time_inferred
    assert tb.rank == 0
