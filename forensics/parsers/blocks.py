"""Which block starts at a line: each block format's reader asked in registry order
(data/formats.toml).  Its own module so that the text reader asks it without importing
the registry, which imports the text reader."""

from __future__ import annotations

import functools
import importlib

from forensics.parsers.formats import formats_of_kind


@functools.lru_cache(maxsize=None)
def _starters() -> tuple:
    """Each block reader's start(), once (one reader may serve several formats)."""
    starts = [importlib.import_module(f.reader).start for f in formats_of_kind("block")]
    return tuple(dict.fromkeys(starts))


def start_block(text: str, header: tuple | None):
    """The block that starts at this line, if any (block formats in registry order)."""
    for start in _starters():
        block = start(text, header)
        if block is not None:
            return block
    return None
