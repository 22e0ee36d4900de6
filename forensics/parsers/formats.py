"""The formats of the registry as declared in data/formats.toml, without their readers:
what the line-header parser needs (forensics/parsers/text/lines.py) without importing
the readers the registry starts (forensics/parsers/registry.py, which reads them here)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

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
    levels: Mapping[str, str] = field(default_factory=dict, compare=False)   # printed level -> Python's name
    samples: tuple[dict, ...] = field(default=(), compare=False)


@functools.lru_cache(maxsize=None)
def formats() -> tuple[Format, ...]:
    out = []
    for entry in knowledge.load("formats")["format"]:
        out.append(Format(name=entry["name"], kind=entry["kind"], what=entry["what"], grammar=entry.get("grammar"),
                          reader=entry.get("reader"), guard=entry.get("guard"), cache=entry.get("cache", True),
                          joins=entry.get("joins", "header"), site=entry.get("site", False),
                          untagged_is_main=entry.get("untagged_is_main", False), levels=dict(entry.get("levels", {})),
                          samples=tuple(entry.get("samples", ()))))
    return tuple(out)


def formats_of_kind(kind: str) -> tuple[Format, ...]:
    return tuple(f for f in formats() if f.kind == kind)


@functools.lru_cache(maxsize=None)
def levels_of(name: str) -> Mapping[str, str]:
    """A line format's level names as Python's (data/formats.toml ``levels``)."""
    return next((f.levels for f in formats() if f.name == name), {})
