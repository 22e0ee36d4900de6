"""The grammars' terminals as compiled regexes, by name: where a reader needs a line's
shape before (or instead of) a parse - a block's start and continuation guards, a fast
path over a million repeated reports - it takes the grammar's own terminal, so the shape
is written once, in the ``.lark`` file, next to the rules that read its fields.

A grammar declares such terminals (``*_START``, ``*_CONTINUES``, ``*_FAST``) among its
others, composed from the field terminals where the shape is theirs; they are unused by
its rules, so lark's parser would drop them: they are read from the grammar compiled for
lexing only, which keeps every terminal.
"""

from __future__ import annotations

import functools
import re

from lark import Lark

from forensics import grammar


@functools.lru_cache(maxsize=None)
def _compiled(name: str) -> dict:
    compiled = Lark(grammar.grammar_text(name), parser=None, lexer="basic")
    return {t.name: t.pattern for t in compiled.terminals}


@functools.lru_cache(maxsize=None)
def _terminals(name: str) -> dict[str, str]:
    return {key: pattern.to_regexp() for key, pattern in _compiled(name).items()}


@functools.lru_cache(maxsize=None)
def terminal(name: str, terminal_name: str) -> re.Pattern:
    """Terminal ``terminal_name`` of ``grammars/<name>.lark``, compiled as lark's lexer
    compiles it (KeyError when the grammar has none of that name)."""
    return re.compile(_terminals(name)[terminal_name])


@functools.lru_cache(maxsize=None)
def terminal_bytes(name: str, terminal_name: str) -> re.Pattern:
    """The same terminal on bytes (for readers that scan raw input before decoding it)."""
    return re.compile(_terminals(name)[terminal_name].encode())


@functools.lru_cache(maxsize=None)
def literal(name: str, terminal_name: str) -> str:
    """The text of a terminal that is a string ("Traceback (most recent call last):"),
    for readers that look for it inside a line; ValueError for a regex terminal."""
    pattern = _compiled(name)[terminal_name]
    if pattern.type != "str":
        raise ValueError(f"{name}.lark:{terminal_name} is a regex, not a string")
    return pattern.value


class Terminals:
    """One grammar's terminals as attributes, compiled on first use and then kept on the
    object: ``TRACEBACK.TRACEBACK_START.match(text)`` costs an attribute lookup on the
    lines of every input (block guards run on each line)."""

    def __init__(self, grammar_name: str, on_bytes: bool = False) -> None:
        self._grammar = grammar_name
        self._on_bytes = on_bytes

    def __getattr__(self, name: str) -> re.Pattern:
        if not name.lstrip("_")[:1].isupper():
            raise AttributeError(name)
        pattern = (terminal_bytes if self._on_bytes else terminal)(self._grammar, name)
        setattr(self, name, pattern)
        return pattern


def of(grammar_name: str, on_bytes: bool = False) -> Terminals:
    """The terminals of ``grammars/<grammar_name>.lark`` (nothing is built until one is
    used); ``on_bytes``: compiled for bytes, for readers that scan raw input."""
    return Terminals(grammar_name, on_bytes)


def every_terminal(name: str) -> dict[str, re.Pattern]:
    """Every terminal of a grammar, used by its rules or not (the linearity tests)."""
    return {key: terminal(name, key) for key in _terminals(name)}
