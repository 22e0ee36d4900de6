"""Making text from the inputs inert before it reaches a reader.

Everything a log says is data.  Before it is printed to a terminal, put into Markdown
for a GitHub issue, into an HTML page, or into a suggested shell command, it goes through
one of these functions, so that nothing in a log can move the cursor, write the
clipboard, open a link, ping a team, render HTML or run a command.
"""

from __future__ import annotations

import html
import json
import re
import shlex

# ESC-introduced sequences: CSI (colours, cursor, clear screen), OSC (title, OSC 8 links,
# OSC 52 clipboard), DCS/SOS/PM/APC strings, and the two-byte Fe escapes; then the C1
# controls as code points (8-bit CSI U+009B, OSC U+009D ...), the C0 controls but tab and
# newline, DEL, and the bidirectional overrides that can make text read other than it is.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"                      # CSI
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC ... BEL / ST
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"     # DCS / SOS / PM / APC ... ST
    r"|\x1b[ -/]*[0-~]?"                            # other escapes, and a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"                     # 8-bit CSI
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC/DCS/SOS/PM/APC strings
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"               # C0 but \t \n, DEL, C1
    r"|[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]"  # bidi controls
)


def plain(text: object, *, newlines: bool = False) -> str:
    """Text with every control character and escape sequence removed.  Newlines are
    turned into spaces unless ``newlines``."""
    value = _ESCAPES.sub("", str(text))
    if not newlines:
        value = value.replace("\n", " ").replace("\t", " ")
    return value


# --- Markdown (GitHub) -----------------------------------------------------------------

# Every ASCII punctuation character may be backslash-escaped in CommonMark; these are the
# ones that can start a construct (emphasis, links, images, HTML, headings, lists,
# tables, code, autolinks, strikethrough).
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:=\"'&$^])")
# GitHub links @mentions and #123 / GH-123 / owner/repo#123 references in text; a zero-width
# space after the sigil keeps the text readable and unlinked.
_MENTION = re.compile(r"([@#])(?=[\w-])")


def md_text(text: object) -> str:
    """Log text safe to put in Markdown prose (outside code): shown literally, never a
    construct, a mention or an issue reference."""
    value = plain(text)
    value = _MD_SPECIAL.sub(r"\\\1", value)
    return _MENTION.sub("\\1\u200b", value)


def md_code(text: object, *, table: bool = False) -> str:
    """Log text as an inline code span: the fence is longer than any backtick run
    inside, so the span cannot be closed early.  In a table cell a pipe would still end
    the cell (GitHub splits cells before reading code spans): it is escaped."""
    value = plain(text)
    if not value:
        return ""
    longest = max((len(m) for m in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") or (value.startswith(" ") and value.endswith(" ")) else ""
    span = f"{fence}{pad}{value}{pad}{fence}"
    return span.replace("|", "\\|") if table else span


def md_fence(text: str, info: str = "text") -> str:
    """A fenced code block that no line inside can close: the fence is longer than any
    run of backticks in the text."""
    body = plain(text, newlines=True).replace("\t", "    ")
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}\n"


# --- HTML -------------------------------------------------------------------------------

def html_text(text: object) -> str:
    """Text or attribute value for HTML."""
    return html.escape(plain(text, newlines=True), quote=True)


def _plain_data(value: object) -> object:
    """Every string in a JSON-like structure without control characters (the page shows
    them with textContent: inert, but a bidi override would still reorder what is read)."""
    if isinstance(value, str):
        return plain(value, newlines=True)
    if isinstance(value, dict):
        return {plain(k, newlines=True) if isinstance(k, str) else k: _plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_data(v) for v in value]
    return value


def script_json(value: object) -> str:
    """JSON safe inside <script type="application/json">: no "</script", "<!--", or
    line separators that end a JavaScript string."""
    text = json.dumps(_plain_data(value), default=str, ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


# --- shell ------------------------------------------------------------------------------

# What a value taken from a log may look like before it goes into a suggested command;
# anything else is replaced by a placeholder (and the reader is told why).
_LOOKS_LIKE = {
    "model": re.compile(r"^[\w.\-/:@+]{1,200}$"),
    "int": re.compile(r"^\d{1,9}$"),
    "path": re.compile(r"^[\w.\-/+@%:]{1,400}$"),
    "pid": re.compile(r"^\d{1,8}$"),
}


def shell_value(value: object, what: str, placeholder: str) -> tuple[str, str | None]:
    """(shell-quoted value, or the placeholder; a warning when the value was refused)."""
    text = str(value)
    pattern = _LOOKS_LIKE.get(what, _LOOKS_LIKE["path"])
    if not pattern.match(text):
        return placeholder, (f"the {what} printed in the logs does not look like one "
                             f"({plain(text)[:40]!r}); replaced by {placeholder}")
    return shlex.quote(text), None
