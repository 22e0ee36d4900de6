"""Loading the Lark grammars of ``grammars/`` (installed as ``forensics.grammars``).

Grammars are compiled once per process and cached on disk by Lark (``cache=True``), so a
cold start does not pay for building LALR tables again.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from lark import Lark


_SOURCE_TREE = Path(__file__).resolve().parents[1] / "grammars"


def grammar_text(name: str) -> str:
    """The grammar from the installed package, or from the source tree when running
    from a checkout (where ``grammars/`` sits beside ``forensics/``)."""
    try:
        return resources.files("forensics.grammars").joinpath(f"{name}.lark").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError):
        return (_SOURCE_TREE / f"{name}.lark").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def load(name: str, start: tuple[str, ...] = ("start",), parser: str = "lalr") -> Lark:
    """The parser for ``grammars/<name>.lark``: LALR with the contextual lexer (fast,
    disk-cached) by default; Earley for the few small grammars whose envelopes share
    tokens with free text, used only on prefiltered lines."""
    if parser == "earley":
        return Lark(grammar_text(name), parser="earley", lexer="dynamic", start=list(start),
                    maybe_placeholders=False)
    return Lark(grammar_text(name), parser="lalr", lexer="contextual", start=list(start),
                cache=True, maybe_placeholders=False)
