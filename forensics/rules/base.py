"""The rule protocol and its runner (in the manner of Mozilla's siggen).

A rule is a small class: its docstring says what it concludes and from what (``forensics
rules`` prints it), ``reads`` and ``writes`` name the verdict fields it uses, and
``predicate`` / ``action`` do the work.  Rules read the frozen ``Evidence`` and only
write the verdict fields they declare; the runner enforces both.  A rule that raises
becomes a note in the report, never a crash; a pipeline in which a rule reads what a
later rule writes is refused when the pipeline is checked (at import, and by a test).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable

from forensics import story
from forensics.events import Event, Kind
from forensics.story import Stories
from forensics.timeline import ProcessTable
from forensics.verdict import Verdict

VERDICT_FIELDS = tuple(f.name for f in dataclasses.fields(Verdict)
                       if f.name not in ("explanations", "rule_failures"))


@dataclass(frozen=True)
class SourceFacts:
    """What the rules may know about an input besides its events."""

    path: str
    kind: str
    formats: tuple[str, ...] = ()
    under_tool: bool = False       # printed under compute-sanitizer or cuda-gdb (codes differ)


@dataclass(frozen=True)
class Evidence:
    """Everything the rules read.  Frozen: rules conclude, they never edit evidence."""

    events: tuple[Event, ...]
    processes: ProcessTable
    sources: tuple[SourceFacts, ...] = ()
    kb_entries: tuple = ()
    traffic: tuple = ()
    notes: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()     # the paths the user gave ("-": stdin)
    _by_kind: dict = field(default_factory=dict, compare=False, repr=False)
    _told: list = field(default_factory=list, compare=False, repr=False)

    @property
    def stories(self) -> Stories:
        """Every process's story (forensics/story.py): what its lines say happened to
        it, told once, on first use."""
        if not self._told:
            self._told.append(story.tell(self.events, self.processes))
        return self._told[0]

    def of_kind(self, *kinds: Kind) -> list[Event]:
        if not self._by_kind:
            index: dict = {}
            for event in self.events:
                index.setdefault(event.kind, []).append(event)
            self._by_kind.update(index)
        if len(kinds) == 1:
            return list(self._by_kind.get(kinds[0], ()))
        wanted = set(kinds)
        return [e for e in self.events if e.kind in wanted]

    @property
    def tool_sources(self) -> frozenset[str]:
        return frozenset(s.path for s in self.sources if s.under_tool)


class Rule:
    """Base class: set ``name``, ``reads``, ``writes``; implement ``action`` (and
    ``predicate`` when the rule applies only sometimes)."""

    name = "rule"
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def predicate(self, evidence: Evidence, verdict: "VerdictView") -> bool:
        return True

    def action(self, evidence: Evidence, verdict: "VerdictView") -> None:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        return " ".join((cls.__doc__ or "").split())


class RuleContractError(RuntimeError):
    """A rule used a verdict field it did not declare, or the pipeline is out of order."""


class Draft:
    """The verdict under construction (one per analysis)."""

    def __init__(self) -> None:
        defaults = Verdict()
        self.values: dict[str, Any] = {name: getattr(defaults, name) for name in VERDICT_FIELDS}
        self.explanations: list[tuple[str, str]] = []
        self.failures: list[str] = []
        self.notes: list[str] = []

    def freeze(self) -> Verdict:
        values = dict(self.values)
        values["notes"] = tuple(values.get("notes") or ()) + tuple(self.notes)
        return Verdict(**values, explanations=tuple(self.explanations), rule_failures=tuple(self.failures))


class VerdictView:
    """What one rule sees of the draft: the fields it reads or writes, nothing else."""

    __slots__ = ("_draft", "_rule", "_readable", "_writable")

    def __init__(self, draft: Draft, rule: Rule) -> None:
        object.__setattr__(self, "_draft", draft)
        object.__setattr__(self, "_rule", rule)
        object.__setattr__(self, "_readable", set(rule.reads) | set(rule.writes))
        object.__setattr__(self, "_writable", set(rule.writes))

    def __getattr__(self, name: str) -> Any:
        if name not in self._readable:
            raise RuleContractError(f"rule {self._rule.name} reads {name!r} without declaring it")
        return self._draft.values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._writable:
            raise RuleContractError(f"rule {self._rule.name} writes {name!r} without declaring it")
        self._draft.values[name] = value

    def explain(self, text: str) -> None:
        self._draft.explanations.append((self._rule.name, text))

    def note(self, text: str) -> None:
        """Something the reader should know (any rule may add one)."""
        if text not in self._draft.notes:
            self._draft.notes.append(text)


def check_order(pipeline: Iterable[type[Rule]]) -> None:
    """Refuse a pipeline where a rule reads a field that a later rule writes, where two
    rules write one field, or where a rule names a field the verdict does not have."""
    written: dict[str, str] = {}
    rules = list(pipeline)
    later_writes: dict[str, str] = {}
    for rule in rules:
        for name in rule.reads + rule.writes:
            if name not in VERDICT_FIELDS:
                raise RuleContractError(f"rule {rule.name} names {name!r}, which is not a verdict field")
        for name in rule.writes:
            if name in written:
                raise RuleContractError(f"rules {written[name]} and {rule.name} both write {name!r}")
            written[name] = rule.name
    for i, rule in enumerate(rules):
        for later in rules[i + 1:]:
            for name in later.writes:
                later_writes.setdefault((rule.name, name), later.name)
        for name in rule.reads:
            if (rule.name, name) in later_writes:
                raise RuleContractError(f"rule {rule.name} reads {name!r}, which the later rule "
                                        f"{later_writes[(rule.name, name)]} writes: put the writer first")


def run(pipeline: Iterable[type[Rule]], evidence: Evidence) -> Verdict:
    draft = Draft()
    for note in evidence.notes:
        draft.notes.append(note)
    for rule_class in pipeline:
        rule = rule_class()
        view = VerdictView(draft, rule)
        try:
            if rule.predicate(evidence, view):
                rule.action(evidence, view)
        except RuleContractError:
            raise
        except Exception as exc:  # noqa: BLE001 - one broken rule must not lose the others' verdict
            draft.failures.append(f"rule {rule.name} failed ({type(exc).__name__}: {exc}); its part of the "
                                  "verdict is missing - please report this with the inputs")
    return draft.freeze()
