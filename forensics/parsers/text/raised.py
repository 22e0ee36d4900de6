"""c10's throw site, "Exception raised from F at file.cpp:43 (most recent call first):",
read by the native crash grammar's ``raised_from`` rule (grammars/native_crash.lark) -
inside a native crash report, and out of an exception's message or a raw line after an
error record, wherever torch prints it.  One reading of the line, in one grammar."""

from __future__ import annotations

from dataclasses import dataclass

from lark.exceptions import LarkError

from forensics import grammar, knowledge

OPENING = "Exception raised from"


@dataclass(frozen=True)
class RaisedFrom:
    text: str                       # the line after "Exception raised from ", as printed
    function: str | None = None
    file: str | None = None
    line: int | None = None

    def attrs(self) -> dict:
        """An event's raised_* attributes (only when the line names the throw site)."""
        if self.file is None:
            return {}
        return {"raised_function": self.function, "raised_file": self.file, "raised_line": self.line}


def from_tokens(tokens) -> RaisedFrom:
    """The raised_from rule's tokens (RAISED_FUNCTION, RAISED_FILE, RAISED_LINE, RAISED_REST)."""
    t = {token.type: str(token) for token in tokens}
    site = f" at {t['RAISED_FILE']}:{t['RAISED_LINE']}" if "RAISED_FILE" in t else ""
    text = (t.get("RAISED_FUNCTION", "") + site + t.get("RAISED_REST", "")).strip()
    if "RAISED_FILE" not in t:
        return RaisedFrom(text)
    return RaisedFrom(text, t["RAISED_FUNCTION"], t["RAISED_FILE"], knowledge.claimed_int(t["RAISED_LINE"]))


def read(line: str) -> RaisedFrom | None:
    """The throw site of one line that starts with "Exception raised from ", else None."""
    try:
        tree = grammar.load("native_crash", ("start", "raised_from")).parse(line.rstrip() + "\n",
                                                                           start="raised_from")
    except LarkError:
        return None
    return from_tokens(tree.children)


def find(text: str) -> RaisedFrom | None:
    """The first throw site named anywhere in ``text`` (an exception's message), else None."""
    at = text.find(OPENING)
    while at >= 0:
        end = text.find("\n", at)
        found = read(text[at:end if end >= 0 else len(text)])
        if found is not None and found.file is not None:
            return found
        at = text.find(OPENING, at + 1)
    return None
