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

import importlib

from forensics.parsers.blocks import start_block  # noqa: F401 - the registry's own API
from forensics.parsers.formats import Format, formats, formats_of_kind  # noqa: F401 - the registry's own API


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
