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


# --- names --------------------------------------------------------------------------------

def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        # an undecodable byte of the name (Python keeps it as a surrogate): \xNN, the
        # only escape with NN of 80 and above - a character is \u00NN
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


_NAME_ESCAPES = re.compile(r"[^ -\[\]-~]")     # anything but printable ASCII other than "\"


def name(text: object) -> str:
    """A file, folder or archive-member name as every output shows it: one line, each
    character either itself or an escape, so that two different names never look alike.

    - undecodable bytes (kept by Python as surrogates) as ``\\xNN`` (NN of 80 and above);
    - control characters (newline, ESC, C1), invisible ones (zero-width U+200B-U+200F,
      U+2060-U+2064, U+FEFF, the bidi controls U+202A-U+202E and U+2066-U+2069, U+2028/9)
      and every other character Python does not call printable as ``\\xNN`` (below 80)
      or ``\\uNNNN`` - ``server\\u200b.log`` does not read as ``server.log``, and a
      newline in a name cannot forge a line of a listing or a manifest;
    - a backslash as ``\\\\``: the name made of the bytes ff fe and the one literally
      spelt ``\\xff\\xfe`` are shown differently.

    Printable non-ASCII text (``rank-é.log``, CJK) is kept as it is."""
    value = str(text)
    return _NAME_ESCAPES.sub(lambda m: m.group(0) if m.group(0) != "\\" and m.group(0).isprintable()
                             else _escaped(m.group(0)), value)


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


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def md_prose(text: object) -> str:
    """A sentence of the report (which may quote a command or a condition between
    backticks, `nvidia-smi -q`) in Markdown prose: the quoted parts as code spans, the
    rest as ``md_text``.  Nothing in either part is a live construct."""
    value = plain(text)
    parts = _CODE_SPAN.split(value)
    return "".join(md_code(part) if i % 2 else md_text(part) for i, part in enumerate(parts))


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


def md_html(text: object, *, code: bool = False) -> str:
    """Log text (a file name, a label) inside an HTML block of Markdown - GitHub's
    ``<details><summary>...</summary>``.  Such a line is raw HTML, not Markdown: backslash
    escapes and code spans mean nothing there, so ``md_text``/``md_code`` would let a name
    load ``<img src=...>`` or open a ``<!--`` that hides the rest of the issue.  The text
    is HTML-escaped instead, and @mentions and #123 references are broken as in
    ``md_text`` (GitHub links them in an HTML block's text too, except inside ``<code>``);
    ``code``: in a ``<code>`` element."""
    value = html.escape(_MENTION.sub("\\1\u200b", plain(text)), quote=True)   # escaped last: "&#x27;" keeps its "#"
    return f"<code>{value}</code>" if code else value


def md_fence(text: str, info: str = "text") -> str:
    """A fenced code block that no line inside can close: the fence is longer than any
    run of backticks in the text."""
    body = plain(text, newlines=True).replace("\t", "    ")
    longest = max((len(m) for m in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{body}\n{fence}\n"


# --- HTML -------------------------------------------------------------------------------

def html_text(text: object) -> str:
    """Text or attribute value for HTML (the line and paragraph separators, which end a
    JavaScript string, as spaces)."""
    return html.escape(plain(text, newlines=True), quote=True).replace("\u2028", " ").replace("\u2029", " ")


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


# --- CSV (spreadsheets) ------------------------------------------------------------------

# What makes a spreadsheet read a cell as a formula (OWASP's CSV injection list: = + - @,
# and TAB and CR, which some applications strip before looking), with their full-width
# forms, which some spreadsheets fold to the ASCII ones.
_FORMULA_START = tuple("=+-@\t\r\uff1d\uff0b\uff0d\uff20")


def csv_cell(value: object) -> object:
    """A text cell of an exported timeline, inert in a spreadsheet and a terminal.

    Every CSV, to a file or to stdout, loses escape sequences and control characters
    but TAB and newline (``plain``): a CSV is read with ``cat`` and ``less`` as often as
    with a spreadsheet, and the cell's text is all that a log line said.  Newlines stay
    (the CSV writer quotes the cell).  A cell that would start a formula
    (``=HYPERLINK(...)``, ``@SUM``, ``-2+3``) gets OWASP's prefix, a single quote, so the
    spreadsheet shows it as text.  Anything but a string (numbers, times, missing
    values) is returned unchanged."""
    if not isinstance(value, str):
        return value
    text = plain(value, newlines=True)
    return "'" + text if text.startswith(_FORMULA_START) else text


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
