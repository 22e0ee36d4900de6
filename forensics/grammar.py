"""Loading the Lark grammars of ``grammars/`` (installed as ``forensics.grammars``).

Parsers are built in memory, on first use, once per process.  Nothing is cached on
disk: a parser cache is a pickle, and a pickle read from a shared or predictable place
(Lark's ``cache=True`` uses $TMPDIR) lets another local user run code as whoever runs
forensics next.  Building every grammar costs well under the cold-start budget
(tests/test_security.py measures it).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from lark import Lark, Transformer

_SOURCE_TREE = Path(__file__).resolve().parents[1] / "grammars"


def grammar_text(name: str) -> str:
    """The grammar from the installed package, or from the source tree when running
    from a checkout (where ``grammars/`` sits beside ``forensics/``)."""
    try:
        return resources.files("forensics.grammars").joinpath(f"{name}.lark").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return (_SOURCE_TREE / f"{name}.lark").read_text(encoding="utf-8")


def names() -> list[str]:
    """Every grammar's name, from the installed package or from the source tree (as
    ``grammar_text`` finds them)."""
    try:
        files = [p.name for p in resources.files("forensics.grammars").iterdir()]
    except ModuleNotFoundError:
        files = [p.name for p in _SOURCE_TREE.iterdir()]
    return sorted(name[:-5] for name in files if name.endswith(".lark"))


@functools.lru_cache(maxsize=None)
def load(name: str, start: tuple[str, ...] = ("start",)) -> Lark:
    """The LALR parser (contextual lexer) for ``grammars/<name>.lark``; it builds a tree."""
    return Lark(grammar_text(name), parser="lalr", lexer="contextual", start=list(start),
                maybe_placeholders=False, cache=False)


_TRANSFORMING: dict[tuple[str, type], Lark] = {}


def transforming(name: str, transformer: Transformer) -> Lark:
    """The LALR parser for ``grammars/<name>.lark`` that applies ``transformer`` while it
    parses (no tree is built: the fast way for per-line grammars)."""
    key = (name, type(transformer))
    parser = _TRANSFORMING.get(key)
    if parser is None:
        parser = _TRANSFORMING[key] = Lark(grammar_text(name), parser="lalr", lexer="contextual",
                                           transformer=transformer, maybe_placeholders=False, cache=False)
    return parser
