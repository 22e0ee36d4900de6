"""The reporters: each turns the report document into one output format.

Adding a format: its module with ``render(document, out, options)``, one line in
``REPORTERS``, and tests.  The CLI and the Python API find formats here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from forensics.report.document import Document


@dataclass(frozen=True)
class Options:
    redact: bool = False
    explain: bool = False
    quiet: bool = False
    verbose: bool = False
    width: int | None = None
    color: bool | None = None
    title_separately: bool = False
    full: bool = False                  # terminal: every section, not the first screen
    show: tuple[str, ...] = ()          # terminal: these sections after the verdict (their --show names, report/base.py)
    pager: bool = False                 # terminal: page a report taller than the screen (only on a TTY)


@dataclass(frozen=True)
class Reporter:
    name: str
    module: str
    redact_by_default: bool
    what: str


REPORTERS: dict[str, Reporter] = {
    "terminal": Reporter("terminal", "forensics.report.terminal", False, "the terminal (rich; plain text when piped)"),
    "json": Reporter("json", "forensics.report.json", False, "JSON, schema forensics.report/1"),
    "markdown": Reporter("markdown", "forensics.report.markdown", True, "Markdown for a GitHub issue"),
    "html": Reporter("html", "forensics.report.html", True, "one self-contained HTML page"),
}


def render(document: "Document", fmt: str, out: TextIO, options: Options) -> None:
    """Write ``document`` in format ``fmt`` to ``out``, redacted first when asked."""
    reporter = REPORTERS[fmt]
    if options.redact:
        document = document.redacted()
    importlib.import_module(reporter.module).render(document, out, options)
