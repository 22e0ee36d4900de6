"""The report document's building blocks: typed sections, their registry, phrases.

A report section is one frozen dataclass registered with ``@section(...)`` (its name,
title, order, the ``--show`` name that selects it, where it sits) and one draw function
per renderer (``@terminal.DRAW.of(Cls)``, ``@markdown.DRAW.of(Cls)``,
``@html.DRAW.of(Cls)``).  The dataclass decides - once, for every format - what is said:
which items, in which order, which sentence; a renderer only lays it out.

Fields are *facts* (values copied from the verdict, the events and the inputs) and
decisions that are not text (a selection, a count, a flag).  A sentence made of several
facts is a property, joined when a renderer asks for it: redaction runs over the fields,
so the sentence is made of redacted values (a redaction rule anchored at a value's end
would miss a secret inside a longer sentence).  A phrase is a tuple of ``Span``: each
part says what it is (log text, code, a sentence of the report, an evidence location) and
what it marks, and each format escapes and styles it for itself.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable

if TYPE_CHECKING:
    from forensics.report.sections import Facts


class Form(enum.Enum):
    """How a part of a phrase is written: what each format must escape it as."""

    TEXT = "text"        # text with values from the logs in it (Markdown: escaped, never a construct)
    WORDS = "words"      # the report's own words, constants (Markdown: as written, brackets escaped)
    CODE = "code"        # an identifier, a path, an API, a command (Markdown: a code span)
    PROSE = "prose"      # a sentence of the report that may quote `code` between backticks
    SOURCE = "source"    # an evidence location, file:line


class Mark(enum.Enum):
    """What a part of a phrase is in the verdict (a terminal colours it, HTML classes it)."""

    NONE = "none"
    FAILURE = "failure"      # the error itself
    ORIGIN = "origin"        # the kernel that faulted
    UNKNOWN = "unknown"      # a finding the inputs do not give, said as unknown
    LABEL = "label"          # a value the reader should notice (a confidence)
    NOTE = "note"            # an aside


@dataclass(frozen=True)
class Span:
    text: str
    form: Form = Form.TEXT
    mark: Mark = Mark.NONE


Phrase = tuple[Span, ...]


def phrase(*parts: "str | Span | None") -> Phrase:
    """A phrase from strings and spans; ``None`` and empty parts left out.  A string is
    ``Form.TEXT`` (escaped as log text): only ``words()`` are written as they are."""
    return tuple(p if isinstance(p, Span) else Span(p) for p in parts if p)


def words(text: str) -> Span:
    """The report's own words: a constant, never a value from the inputs (Markdown
    writes them as they are)."""
    return Span(text, Form.WORDS)


def code(text: str | None, mark: Mark = Mark.NONE) -> Span | None:
    return Span(text, Form.CODE, mark) if text else None


def source(text: str | None) -> Span | None:
    return Span(text, Form.SOURCE) if text else None


def prose(text: str | None, mark: Mark = Mark.NONE) -> Span | None:
    return Span(text, Form.PROSE, mark) if text else None


def plain_text(words: Phrase) -> str:
    """A phrase as plain text, every part as it is (for a title, a tooltip)."""
    return "".join(s.text for s in words)


class Group(enum.Enum):
    """Where a section sits in a report: every format keeps these apart."""

    HEADLINE = "headline"    # the answer, first in every format
    VERDICT = "verdict"      # the verdict's findings (the terminal's verdict box)
    BODY = "body"            # the sections after the verdict


@dataclass(frozen=True)
class Entry:
    """A section's registration: what every renderer needs to place it."""

    name: str
    title: str
    order: int
    show: str | None              # the --show name that selects it; None: not selectable
    group: Group
    first_screen: bool            # on the terminal's first screen (in its compact form)
    opt_in: bool                  # only when asked for (--explain, -v, or --show)
    cls: type


REGISTRY: dict[str, Entry] = {}


class Section:
    """A registered section (``@section`` sets ``entry``)."""

    entry: ClassVar[Entry]

    @classmethod
    def build(cls, facts: "Facts") -> "Section":      # pragma: no cover - every section defines it
        raise NotImplementedError(cls.__name__)

    @property
    def present(self) -> bool:
        """Whether there is anything to lay out (an empty section is left out)."""
        return True

    def json(self) -> dict:
        """Its part of the JSON report: top-level keys, and "verdict" for keys of the
        verdict object.  A section that defines none is its data under its name."""
        return {self.entry.name: asjson(self)}


def section(name: str, title: str, order: int, show: str | None = None, group: Group = Group.BODY,
            first_screen: bool = False, opt_in: bool = False) -> Callable[[type], type]:
    """Register a section class; refuses a name, order or --show name already taken (two
    sections in one place would be laid out in an arbitrary order)."""
    def register(cls: type) -> type:
        if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen) or not issubclass(cls, Section):
            raise TypeError(f"{cls.__name__}: a section is a frozen dataclass deriving from Section")
        for other in REGISTRY.values():
            if other.name == name or other.order == order or (show is not None and other.show == show):
                raise ValueError(f"section {name!r} clashes with {other.name!r} (name, order or --show name)")
        cls.entry = Entry(name, title, order, show, group, first_screen, opt_in, cls)
        REGISTRY[name] = cls.entry
        return cls
    return register


def unregister(name: str) -> None:
    """Take a section out of the registry (tests that register one of their own)."""
    REGISTRY.pop(name, None)


def entries() -> list[Entry]:
    return sorted(REGISTRY.values(), key=lambda e: e.order)


def show_names() -> tuple[str, ...]:
    """The names --show accepts, in report order."""
    return tuple(e.show for e in entries() if e.show)


class Drawers(dict):
    """One renderer's draw functions, by section class: ``@DRAW.of(Cls)``."""

    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = fmt

    def of(self, cls: type) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            self[cls] = fn
            return fn
        return register

    def missing(self) -> list[str]:
        """Registered sections this renderer cannot draw."""
        return [e.name for e in entries() if e.cls not in self]

    def draw(self, item: Section, *args: Any) -> Any:
        try:
            fn = self[type(item)]
        except KeyError:
            raise LookupError(f"the {self.fmt} renderer has no draw function for section {item.entry.name!r}") from None
        return fn(item, *args)


def asjson(value: Any) -> Any:
    """A section's facts as JSON values: dataclasses as objects (their fields in order,
    leaving out fields marked ``json=False``, or what their ``json()`` says), enums as
    their values, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(type(value), "as_json", None)
        if own is not None:
            return own(value)
        return {f.name: asjson(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.metadata.get("json", True)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [asjson(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: asjson(v) for k, v in value.items()}
    return value


def not_json(**kwargs: Any) -> Any:
    """A field that is a decision for the renderers, not part of the JSON report."""
    return dataclasses.field(metadata={"json": False}, **kwargs)


def walk_strings(value: Any, text: Callable[[str], str], mapping: Callable[[dict], dict]) -> Any:
    """``value`` with every string replaced by ``text(string)`` and every mapping by
    ``mapping(mapping)``, through frozen dataclasses and tuples (the redactor's way
    into a typed document)."""
    if isinstance(value, enum.Enum) or value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: walk_strings(getattr(value, f.name), text, mapping)
                   for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(walk_strings(v, text, mapping) for v in value)
    if isinstance(value, list):
        return [walk_strings(v, text, mapping) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return mapping(dict(value))
    return value


def by_status(statuses: Iterable[str]) -> str:
    """"2 collateral, 1 unknown": how many of each, sorted by name."""
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
