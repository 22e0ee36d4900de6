"""pytest's long failure report (grammars/pytest_report.lark): one failed test's
section becomes a traceback event.

pytest prints the same facts as a Python traceback in its own shape: a section per
failed test (``____ test_name[params] ____``), then for every frame the source excerpt
with ``>`` on the line that raised, then the frame's location ``path:line: in func``
(the test's own frame has no ``in``), ``E   `` lines for the exception, and a last
location naming the exception's type.  Chained exceptions are separated by Python's
chain sentences.  ``E   `` lines pasted without their section (a fragment) make a
block of their own.
"""

from __future__ import annotations

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar
from forensics.events import Frame, PyException
from forensics.knowledge import claimed_int
from forensics.parsers import terminals
from forensics.parsers.text.block import BlockResult, unparsable

MAX_LINES = 20_000
# the report's line shapes: terminals of grammars/pytest_report.lark
_T = terminals.of("pytest_report")


class PytestBlock:
    format = "pytest"

    def __init__(self, fragment: bool) -> None:
        self.fragment = fragment        # started at an E line: only E lines (and locations) follow
        self.lines: list[str] = []
        self.linenos: list[int] = []
        self.overflow = 0

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.lines and (_T.SECTION_LINE.match(text) or _T.REPORT_RULE.match(text)):
            return False
        if self.fragment and self.lines and not (_T.ERROR_LINE.match(text) or _T.LOCATION_LINE.match(text)):
            return False
        if len(self.lines) >= MAX_LINES:
            self.overflow += 1
            return True
        self.lines.append(text)
        self.linenos.append(lineno)
        return True

    def close(self, make) -> BlockResult:
        from forensics.parsers.text.classify import traceback_event
        try:
            chain = self._chain()
        except (LarkError, ValueError):
            return unparsable(self.linenos, self.lines, "a pytest report")
        if not chain:
            return unparsable(self.linenos, self.lines, "a pytest report")
        event = traceback_event(chain, len(self.lines) + self.overflow, make)
        return BlockResult([event], list(self.linenos), [], [], self.overflow)

    def _chain(self) -> tuple[PyException, ...]:
        test = None
        chain: list[PyException] = []
        frames: list[Frame] = []
        errors: list[tuple[str | None, str]] = []
        code = None
        link = None

        def finish(short: str | None = None):
            nonlocal frames, errors, link
            if not frames and not errors:
                return
            exc_type, message = _exception(errors)
            # E lines without a type (a bare assert's "E  assert 1 == 2"): the type is
            # the one the last location names ("tests/t.py:20: AssertionError")
            exc_type = exc_type or short
            chain.append(PyException(exc_type or "", message, tuple(frames), chained_by=link,
                                     header_missing=False, cut=not errors))
            frames, errors, link = [], [], None

        chain_markers = _chain_markers()
        for text in self.lines:
            stripped = text.strip()
            if stripped in chain_markers:
                finish()
                link = chain_markers[stripped]
            elif _T.SECTION_LINE.match(text):
                test = _read("header", text).get("TEST_NAME", "")
            elif _T.ERROR_LINE.match(text):
                fields = _read("error", text)
                errors.append((fields.get("EXC_TYPE"), fields.get("EXC_MESSAGE", "")
                               if fields.get("EXC_TYPE") else fields.get("TEXT", "")))
            elif text.startswith(">"):
                code = _read("marker", text).get("CODE")
            elif _T.LOCATION_LINE.match(text):
                fields = _read("location", text)
                function = fields.get("FUNC") or (test if not frames and not chain and not link else None)
                frames.append(Frame(fields["PATH"], claimed_int(fields["LINENO"]), function, code))
                code = None
                if fields.get("EXC_SHORT"):
                    finish(fields["EXC_SHORT"])
        finish()
        return tuple(chain)


def _chain_markers() -> dict[str, str]:
    """Python's chain sentences, as the traceback grammar has them."""
    return {terminals.literal("python_traceback", "CAUSE_TEXT"): "cause",
            terminals.literal("python_traceback", "CONTEXT_TEXT"): "context"}


@v_args(inline=True)
class _ToFields(Transformer):
    """A report line's tree -> its fields by token name."""

    def header(self, *tokens):
        return {t.type: str(t) for t in tokens}

    def location(self, *tokens):
        return {t.type: str(t) for t in tokens}

    def marker(self, *tokens):
        return {t.type: str(t) for t in tokens}

    def error(self, *tokens):
        return {t.type: str(t) for t in tokens}


def _read(rule: str, text: str) -> dict[str, str]:
    tree = grammar.load("pytest_report", start=("header", "location", "marker", "error")).parse(
        text.rstrip(), start=rule)
    return _ToFields().transform(tree)


def _exception(errors: list[tuple[str | None, str]]) -> tuple[str | None, str]:
    """The exception the E lines say: the first typed line, its message and the lines after."""
    for i, (exc_type, text) in enumerate(errors):
        if exc_type:
            rest = [t if t else "" for _, t in errors[i + 1:]]
            return exc_type, "\n".join([text] + rest).strip()
    return None, "\n".join(t for _, t in errors)


def start(text: str, header: tuple | None = None) -> PytestBlock | None:
    if _T.SECTION_LINE.match(text):
        return PytestBlock(fragment=False)
    if _T.ERROR_LINE.match(text):
        return PytestBlock(fragment=True)
    return None
