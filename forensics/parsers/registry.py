"""The format registry: every input format forensics reads, declared once in
data/formats.toml (name, kind, grammar, reader, what it is, sample lines).

- ``line`` formats are record headers (vLLM, c10/glog, SGLang, NCCL ...): tried on
  every line by ``parsers/text/lines.py`` in registry order;
- ``block`` formats start on a line and run for as long as lines keep their shape (a
  traceback, a faulthandler dump, a native crash, a launcher summary): recognised per
  stream, anywhere inside an input, in registry order;
- ``collector`` formats gather one tool's lines from a whole input (compute-sanitizer
  reports are collapsed across the file; a cuda-gdb transcript's stops span lines);
- ``binary`` formats are whole files recognised by their magic (core dumps, the
  sanitizer's XML) and the text reader that reads everything else.

Adding a format: its grammar and one entry in data/formats.toml (a block or binary
format also needs the module its ``reader`` names).  tests/test_registry.py parses
every sample of every format.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field

from forensics import knowledge


@dataclass(frozen=True)
class Format:
    name: str
    kind: str                       # line | block | collector | binary
    what: str
    grammar: str | None = None
    reader: str | None = None       # module (and :Class for binary readers) that reads it
    guard: str | None = None        # line formats: the regex that delimits the header
    cache: bool = True
    site: bool = False              # line formats: the header's file:line is where an error was detected
    joins: str = "header"           # header | logger | no: what identifies the lines of one record
    untagged_is_main: bool = False  # line formats: a record naming no process is the main process's
    samples: tuple[dict, ...] = field(default=(), compare=False)


@functools.lru_cache(maxsize=None)
def formats() -> tuple[Format, ...]:
    out = []
    for entry in knowledge.load("formats")["format"]:
        out.append(Format(name=entry["name"], kind=entry["kind"], what=entry["what"], grammar=entry.get("grammar"),
                          reader=entry.get("reader"), guard=entry.get("guard"), cache=entry.get("cache", True),
                          joins=entry.get("joins", "header"), site=entry.get("site", False),
                          untagged_is_main=entry.get("untagged_is_main", False), samples=tuple(entry.get("samples", ()))))
    return tuple(out)


def formats_of_kind(kind: str) -> tuple[Format, ...]:
    return tuple(f for f in formats() if f.kind == kind)


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


def reader_for(source_kind: str):
    """A new reader object (``.parse(Source) -> ParsedSource``) for a source kind."""
    entry = next((f for f in formats_of_kind("binary") if f.name == source_kind), None)
    if entry is None:
        return None
    module, _, cls = entry.reader.partition(":")
    return getattr(importlib.import_module(module), cls)()


def forceable() -> dict[str, str]:
    """--kind values a user may force -> the reader kind (text formats are all read by
    the text reader)."""
    return {f.name: ("text" if f.kind != "binary" else f.name) for f in formats()}
