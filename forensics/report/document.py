"""The report document: built once from a Case, read by every renderer.

``build(case)`` returns a ``Document``: the registered sections (forensics/report/
sections.py, in their registry order), each a frozen dataclass that has decided what it
says.  Terminal, Markdown and HTML draw the sections they place; none of them recomputes
the verdict, picks its own timeline window or writes its own sentence.  ``to_json()`` is
the JSON report (schema forensics.report/1, forensics/data/report.schema.json) - the
sections' facts, in the order the schema documents; ``redacted()`` is the same document
with every fact redacted, as a report that leaves the machine needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from forensics.report.base import Group, Section, entries, show_names, walk_strings
# importing the sections registers them: a Document always has them all
from forensics.report.sections import SCHEMA, TIMELINE_LIMIT, TOOL, Facts, Redaction

if TYPE_CHECKING:
    from forensics.case import Case

__all__ = ["Document", "build", "show_names", "SCHEMA", "TIMELINE_LIMIT"]

# The JSON report's keys in the order it has always written them; a section's key not
# listed here follows them, in registry order.
JSON_KEYS = ("schema", "tool", "headline", "sources", "inputs", "ranks", "verdict", "environment",
             "environment_sources", "signature", "signature_site", "signature_parts", "known_issues", "next_steps",
             "next_actions", "checklist", "traffic", "evidence", "timeline", "stories", "input_summary", "redaction")
VERDICT_KEYS = ("headline", "failure_kind", "error", "surfaces", "origin", "origin_unknown", "faulting_process",
                "first_failure", "collateral", "hang", "steps", "hardware", "summary", "notes", "rule_failures",
                "explanation")

S = TypeVar("S", bound=Section)


@dataclass(frozen=True)
class Document:
    """A report: its sections, in order.  Renderers read it; nothing changes it (a
    redacted report is another Document)."""

    sections: tuple[Section, ...]
    schema: str = SCHEMA
    tool: tuple[tuple[str, str], ...] = tuple(TOOL.items())

    def get(self, cls: type[S]) -> S:
        """The section of class ``cls`` (every registered section is in every document)."""
        for item in self.sections:
            if type(item) is cls:
                return item
        raise LookupError(f"no {cls.__name__} section in this document")

    def in_group(self, group: Group) -> tuple[Section, ...]:
        return tuple(s for s in self.sections if s.entry.group is group)

    def to_json(self) -> dict:
        """The JSON report as a dict (what ``--format json`` writes)."""
        top: dict = {"schema": self.schema, "tool": dict(self.tool)}
        verdict: dict = {}
        for item in self.sections:
            part = item.json()
            verdict.update(part.pop("verdict", {}))
            top.update(part)
        top["verdict"] = {**{k: verdict.pop(k) for k in VERDICT_KEYS if k in verdict}, **verdict}
        return {**{k: top.pop(k) for k in JSON_KEYS if k in top}, **top}

    def redacted(self) -> "Document":
        """The document with every fact redacted, and the Redaction section saying what
        was.  Pseudonyms are numbered in the JSON report's order (the first host named
        in the JSON is host1 in every format) and counted once, as the JSON has them."""
        from forensics.redact import Redactor
        redactor = Redactor()
        facts = self.to_json()
        redactor.reserve(facts)             # stand-ins anywhere in it keep their numbers
        redactor.data(facts)
        counts = redactor.summary()
        out = walk_strings(self.sections, redactor.text, redactor.data)
        return replace(self, sections=tuple(Redaction(True, counts) if isinstance(s, Redaction) else s for s in out))


def build(case: "Case", timeline_limit: int | None = TIMELINE_LIMIT) -> Document:
    """The document of ``case``: every registered section, built from the same facts.
    ``timeline_limit``: the events the timeline keeps around the first failure (None:
    all of them, as the HTML page draws)."""
    facts = Facts(case, timeline_limit)
    return Document(tuple(entry.cls.build(facts) for entry in entries()))

