"""How many bytes of the inputs have been read: what the progress bar shows.

Every read of an input goes through ``Capped`` (files on disk) or ``Counted`` (stdin,
archive members), which call ``read(n)``.  Nothing is counted unless a listener started
a meter (``start()``: the CLI's progress bar on a terminal).  The meter is a shared
integer so that the worker processes parsing large files in parallel count into it too
(``attach`` is their pool's initializer).  It costs one addition per megabyte read.
"""

from __future__ import annotations

import io
import multiprocessing
from typing import BinaryIO

_meter = None          # multiprocessing.Value("q") while someone listens; None: nobody does


def start():
    """A new meter at zero, listened to from now on; returns it (for ``attach``)."""
    global _meter
    _meter = multiprocessing.Value("q", 0)
    return _meter


def stop() -> None:
    global _meter
    _meter = None


def attach(meter) -> None:
    """In a worker process: count into the parent's meter."""
    global _meter
    _meter = meter


def meter():
    return _meter


def read(n: int) -> None:
    if _meter is not None and n > 0:
        with _meter.get_lock():
            _meter.value += n


def bytes_read() -> int:
    return _meter.value if _meter is not None else 0


class Counted(io.RawIOBase):
    """A stream whose reads are counted (stdin, an archive member)."""

    def __init__(self, inner: BinaryIO) -> None:
        self._inner = inner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if hasattr(self._inner, "readinto"):
            n = self._inner.readinto(buffer) or 0
        else:
            data = self._inner.read(len(buffer))
            n = len(data)
            buffer[:n] = data
        read(n)
        return n

    def close(self) -> None:
        self._inner.close()
        super().close()
