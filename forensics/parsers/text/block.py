"""What a block of lines (a traceback, a stack dump, a launcher summary ...) turns into
when it closes, and the contract every block parser keeps.

A block parser is opened by its format's ``start(text)`` on the line that begins it,
then offered each following line of the same stream (``accepts``: take it or end the
block), then closed with the stream's event factory.  Closing never raises: a block
that does not parse gives its lines back as unparsed, with a problem line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class BlockResult:
    events: list = field(default_factory=list)
    used: list[int] = field(default_factory=list)            # line numbers that became events
    unparsed: list[tuple[int, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    counted: int = 0                                         # lines taken but not kept (caps)
    noise: int = 0                                           # lines known to say nothing


class OpenBlock(Protocol):
    format: str

    def accepts(self, text: str, lineno: int, header: tuple | None) -> bool: ...

    def close(self, make) -> BlockResult: ...


def unparsable(linenos: list[int], lines: list[str], what: str) -> BlockResult:
    pairs = [(n, t) for n, t in zip(linenos, lines) if t.strip()]
    blank = [n for n, t in zip(linenos, lines) if not t.strip()]
    return BlockResult([], blank, pairs, [f"line {linenos[0]}: {what} that does not parse "
                                          f"({len(pairs)} lines counted as unparsed)"])
