"""The progress bar moves: bytes read across the inputs, on stderr, only on a terminal
(a pty here), inside one large file as it is read."""

from __future__ import annotations

import os
import pty
import re
import sys

from forensics.inputs import progress
from tests.helpers import read_pty

LINE = "INFO 12-04 09:00:00 [engine.py:1] step done, an ordinary line of engine progress %d\n"


def _big_log(path, megabytes: int) -> None:
    block = "".join(LINE % i for i in range(20000))
    with open(path, "w") as out:
        written = 0
        while written < megabytes << 20:
            out.write(block)
            written += len(block)
        out.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")


def _run_in_pty(argv: list[str], env: dict) -> str:
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ.update(env)
        os.execv(sys.executable, [sys.executable, "-m", "forensics", *argv])
    return read_pty(pid, fd)


def test_a_500_mb_file_moves_the_bar_at_least_three_times(tmp_path):
    big = tmp_path / "server.log"
    _big_log(big, 500)
    out = _run_in_pty(["analyze", "--no-pager", str(big)],
                      {"COLUMNS": "120", "FORENSICS_PROGRESS_AFTER": "0"})
    # rich's DownloadColumn: "<read>/<total> MB"; each redraw a new amount read
    shown = [float(m) for m in re.findall(r"(\d+\.\d)/5\d\d\.\d MB", out)]
    assert len(set(shown)) >= 3, out[-2000:]
    assert shown == sorted(shown)                 # it only moves forward
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out     # and the report follows


def test_nothing_is_counted_unless_someone_listens():
    progress.stop()
    progress.read(1 << 20)
    assert progress.bytes_read() == 0
    progress.start()
    try:
        progress.read(5)
        progress.read(7)
        assert progress.bytes_read() == 12
    finally:
        progress.stop()
