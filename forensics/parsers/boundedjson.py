"""JSON from an input file, with the bounds Python's parser lacks: integers of at most 20
digits (int() of a million digits is quadratic) and nesting walked without recursion
(json's own limit is the interpreter's recursion limit, far deeper than any dump).
Shared by the readers of JSON inputs (Flight Recorder dumps, capture snapshots)."""

from __future__ import annotations

import json
from typing import Any


class JsonRefused(ValueError):
    """Not JSON, or JSON past the bounds; the message says which."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 20:
        raise ValueError("an integer of more than 20 digits")
    return int(text)


def loads(data: bytes, max_depth: int) -> Any:
    try:
        value = json.loads(data.decode("utf-8"), parse_int=_int)
    except RecursionError:
        raise JsonRefused("JSON nested too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise JsonRefused(f"not JSON ({str(exc)[:120]})") from None
    todo = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if depth > max_depth:
            raise JsonRefused(f"JSON nested more than {max_depth} deep")
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
    return value
