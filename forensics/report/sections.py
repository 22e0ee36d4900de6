"""The report's sections: each one frozen dataclass that decides what it says.

Every selection (which surfaces share a row, which timeline window, which processes
first), every threshold and every sentence of a report is decided here, once, for the
terminal, Markdown, HTML and JSON alike; the renderers draw what a section holds (see
forensics/report/base.py for the rules a section follows).  The JSON report is the
sections' facts (``Section.json``), field for field what ``forensics.report/1`` says.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping

from forensics import __version__
from forensics.events import DEVICE_EVIDENCE, STORY, Event, Kind, Severity, clip
from forensics.inert import plain
from forensics.report.base import (Form, Group, Mark, Phrase, Section, Span, asjson, by_status, code, not_json,
                                   phrase, prose, section, source, words)
from forensics.verdict import (ChecklistItem, Confidence, EvidenceRef, HardwareOpinion, KnownIssueMatch, SignaturePart,
                               Status, Verdict, ranks_phrase, who)
from forensics.verdict import Hang as HangFacts

if TYPE_CHECKING:
    from forensics.case import Case

SCHEMA = "forensics.report/1"
TIMELINE_LIMIT = 400


def iso(value) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else None


def _plain(value: Any):
    """An environment value as JSON has it: scalars as they are, anything else as text."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def short_path(path: str | None) -> str:
    """A path as a verdict row shows it: what follows site-packages/ (the package's own
    path, the same on every machine), else the whole path."""
    if not path:
        return "?"
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


# --- the verdict's facts, as the JSON report has them -------------------------------------

@dataclass(frozen=True)
class Process:
    """A process of the processes table (JSON ``ranks[]``)."""

    who: str
    key: str
    rank: int | None
    pid: int | None
    role: str
    status: Status
    exit_code: int | None
    name: str | None
    host: str | None
    other_pids: tuple[int, ...]
    first_error: str | None
    first_error_source: str | None
    failure: str | None
    in_step: str | None = None      # the capture plugin's step in flight (forensics/capture/)

    @property
    def how(self) -> str:
        """How it went down, in words: the rules' sentence, else its first error (and the
        step it was in, when a capture snapshot says)."""
        return "; ".join(x for x in (self.failure or self.first_error, self.in_step) if x)

    @property
    def evidence(self) -> str | None:
        """The line behind ``how``, for a process that did not stay healthy."""
        return self.first_error_source if self.status != Status.HEALTHY else None


@dataclass(frozen=True)
class ErrorFacts:
    code: int | None
    name: str
    sticky: bool
    runtime_name: str | None
    message: str
    meaning: str
    reported_at: str
    relayed_only: bool
    surfaced_as: str | None
    from_device_exception: str | None


@dataclass(frozen=True)
class SurfaceFacts:
    who: str
    rank: int | None
    pid: int | None
    api: str | None
    file: str | None
    line: int | None
    function: str | None
    time: str | None
    source: str
    exception: str
    how: str
    also_seen_in: tuple[str, ...]
    error_code: int | None
    graph_replay: bool
    caller: str | None

    @property
    def site(self) -> str:
        """The call site as one row says it: "cuMemFree at signal_pad.py:29 in __del__,
        called from ..." (the path after site-packages/)."""
        where = (short_path(self.file) + (f":{self.line}" if self.line is not None else "")
                 + (f" in {self.function}" if self.function else "")) if self.file else "no source location"
        return (f"{self.api} at " if self.api else "") + where + (f", called from {self.caller}" if self.caller else "")

    @property
    def place(self) -> str | None:
        """The file's name and line ("signal_pad.py:29"), None without a file."""
        if not self.file:
            return None
        return str(self.file).rsplit("/", 1)[-1] + (f":{self.line}" if self.line is not None else "")


@dataclass(frozen=True)
class OriginFacts:
    """The kernel that faulted, named by device evidence (JSON ``verdict.origin``)."""

    who: str
    rank: int | None
    pid: int | None
    kernel: str
    fault: str
    location: str | None
    launch_site: str | None
    address: str | None
    confidence: Confidence
    notes: tuple[str, ...]
    evidence: tuple[EvidenceRef, ...]


@dataclass(frozen=True)
class FaultingFacts:
    """The process whose device work faulted, the kernel unnamed (JSON
    ``verdict.faulting_process``)."""

    who: str
    rank: int | None
    pid: int | None
    fault: str
    address: str | None
    confidence: Confidence
    notes: tuple[str, ...]
    evidence: tuple[EvidenceRef, ...]


@dataclass(frozen=True)
class FirstFailureFacts:
    who: str
    key: str | None
    rank: int | None
    pid: int | None
    time: str | None
    basis: str
    what: str
    launcher_opinion: str | None


_LINE_NUMBER = re.compile(r":\d+(?!\d)")


def cited(text: str | None, locations: frozenset[str]) -> Phrase:
    """A rule's sentence with the evidence locations it cites ("... at server.log:61")
    as code, the rest as prose: a location is a file's name, which may hold anything
    (backticks, "<img ...>"), and is shown as a value, never as words of the sentence."""
    if not text:
        return ()
    parts: list = []
    at = 0
    for match in _LINE_NUMBER.finditer(text):
        end = match.end()
        start = next((i for i in range(at, match.start()) if text[i:end] in locations
                      and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_./-"))), None)
        if start is None:
            continue
        parts += [prose(text[at:start]), code(text[start:end])]
        at = end
    parts.append(prose(text[at:]))
    return phrase(*parts)


def _cites(text: str | None, locations: frozenset[str]) -> tuple[str, ...]:
    """The evidence locations ``text`` names (kept with the section: redaction rewrites
    a location in the sentence and in this list alike)."""
    return tuple(s.text for s in cited(text, locations) if s.form is Form.CODE)


class Facts:
    """What the sections are built from: the case, and the verdict's facts copied once
    (several sections say something about the same surface or origin)."""

    def __init__(self, case: "Case", timeline_limit: int | None = TIMELINE_LIMIT) -> None:
        self.case = case
        self.timeline_limit = timeline_limit
        v: Verdict = case.verdict
        self.verdict = v
        step_of = {st.key: st.text for st in v.steps if st.key is not None}
        self.processes = tuple(Process(
            who(r.rank, r.pid, r.name or r.role), r.key, r.rank, r.pid, r.role, r.status, r.exit_code, r.name, r.host,
            tuple(r.other_pids), r.first_error, r.first_error_source, r.failure, step_of.get(r.key)) for r in v.ranks)
        self.collateral = tuple(p for p in self.processes if p.status == Status.COLLATERAL)
        e = v.error
        self.error = ErrorFacts(e.code, e.name, e.error.sticky, e.error.runtime_name, e.error.message, e.error.meaning,
                                e.reported_at, e.relayed_only, e.cause_of, e.from_device) if e else None
        self.surfaces = tuple(SurfaceFacts(
            who(s.rank, s.pid, s.name), s.rank, s.pid, s.api, s.file, s.line, s.function, iso(s.time), s.source,
            s.exception, s.how, tuple(s.also_seen_in), s.error_code, s.graph_replay, s.caller) for s in v.surfaces)
        o = v.origin
        # the contract: origin is null unless evidence names the kernel
        self.origin = OriginFacts(who(o.rank, o.pid, o.name), o.rank, o.pid, o.kernel, o.fault, o.location,
                                  o.launch_site, o.address, o.confidence, tuple(o.notes), tuple(o.evidence)) \
            if o is not None and o.kernel else None
        self.faulting = FaultingFacts(who(o.rank, o.pid, o.name), o.rank, o.pid, o.fault, o.address, o.confidence,
                                      tuple(o.notes), tuple(o.evidence)) if o is not None and not o.kernel else None
        f = v.first_failure
        self.first = FirstFailureFacts(
            who(f.rank, f.pid, f.name) if f.key is not None or f.rank is not None or f.pid is not None else "undecided",
            f.key, f.rank, f.pid, iso(f.time), f.basis, f.what, f.launcher_opinion) if f else None
        # the origin's rank, named or not: the timeline marks its device evidence
        self.origin_rank = (self.origin or self.faulting).rank if (self.origin or self.faulting) else None
        self.surface_sources = frozenset(s.source for s in self.surfaces)
        self.collateral_ranks = frozenset(p.rank for p in self.collateral if p.rank is not None)
        self.events = tuple(_timeline_event(e, self) for e in select_timeline(case.events, timeline_limit))
        # where each event was seen: what a rule's sentence cites
        self.locations = frozenset(e.where for e in case.events)


# --- the headline, first in every format ------------------------------------------------

@section("headline", "Verdict", 10, group=Group.HEADLINE, first_screen=True)
@dataclass(frozen=True)
class Headline(Section):
    """The answer in one line, and the issue title made from it."""

    text: str
    failed: bool = not_json()
    vllm: str | None = not_json()          # for the issue title
    tensor_parallel_size: str | None = not_json()

    TITLE_LIMIT = 180

    @classmethod
    def build(cls, facts: Facts) -> "Headline":
        env = facts.verdict.environment
        tp = env.get("tensor_parallel_size")
        return cls(facts.verdict.headline, facts.verdict.failed,
                   str(env["vllm"]) if env.get("vllm") else None, str(tp) if tp else None)

    @property
    def issue_title(self) -> str:
        """A one-line issue title: "[Bug]: " and the headline's first clause, with the
        engine's version and TP size when the inputs gave them."""
        facts = ", ".join(x for x in (f"vLLM {self.vllm}" if self.vllm else "",
                                      f"TP={self.tensor_parallel_size}" if self.tensor_parallel_size else "") if x)
        return f"[Bug]: {first_clause(plain(self.text), self.TITLE_LIMIT)}" + (f" ({facts})" if facts else "")

    def json(self) -> dict:
        return {"headline": self.text, "verdict": {"headline": self.text}}


def first_clause(text: str, limit: int) -> str:
    """The headline up to its first '; ' outside parentheses (a '; ' inside one, as in
    '(Xid 31 ...; kernel unknown)', is part of that aside), at most ``limit`` characters;
    a cut never leaves a parenthesis open."""
    depth, opened, end = 0, [], len(text)
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            opened.append(i)
        elif ch == ")" and depth:
            depth -= 1
            opened.pop()
        elif depth == 0 and text.startswith("; ", i):
            end = i
            break
        if i + 1 >= limit:
            end = opened[0] if opened else i + 1     # drop an aside the limit would cut
            break
    return text[:end].rstrip(" -")


# --- what to do ---------------------------------------------------------------------------

@section("known-issues", "Known issues", 20, show="known-issues", first_screen=True)
@dataclass(frozen=True)
class KnownIssues(Section):
    issues: tuple[KnownIssueMatch, ...]

    FIRST_SCREEN = 2        # one line each there: the workaround is the first next step

    @classmethod
    def build(cls, facts: Facts) -> "KnownIssues":
        return cls(tuple(facts.verdict.known_issues))

    @staticmethod
    def matched_text(issue: KnownIssueMatch) -> str:
        """What matched, and what the inputs cannot tell."""
        return "; ".join(issue.matched) + (f"; cannot tell: {', '.join(issue.unknown)}" if issue.unknown else "")

    @staticmethod
    def links(issue: KnownIssueMatch) -> tuple[str, ...]:
        """The references that are web addresses (the rest are cited as text)."""
        return tuple(r for r in issue.references if r.startswith("https://") and " " not in r and ">" not in r)

    @property
    def present(self) -> bool:
        return bool(self.issues)

    def json(self) -> dict:
        return {"known_issues": asjson(self.issues)}


@dataclass(frozen=True)
class NextAction:
    id: str
    title: str
    why: str
    command: str | None
    warnings: tuple[str, ...]

    @property
    def heading(self) -> str:
        """The step in a few words: its title, else why it helps."""
        return self.title or self.why

    @property
    def detail(self) -> str | None:
        """Why it helps, when the title did not already say it."""
        return self.why if self.title else None


@section("next-steps", "Next steps (most confidence gained first)", 30, show="next-steps", first_screen=True)
@dataclass(frozen=True)
class NextSteps(Section):
    steps: tuple[NextAction, ...]

    FIRST_SCREEN = 3        # steps on the first screen
    FIRST_COMMANDS = 2      # ... with the commands of the first two, the title of the third

    @classmethod
    def build(cls, facts: Facts) -> "NextSteps":
        return cls(tuple(NextAction(s.id, s.title, s.why, s.command, tuple(s.warnings))
                         for s in facts.verdict.next_steps))

    @property
    def present(self) -> bool:
        return bool(self.steps)

    @property
    def hidden_on_first_screen(self) -> int:
        return max(0, len(self.steps) - self.FIRST_SCREEN)

    def json(self) -> dict:
        return {"next_steps": [f"{s.why}: {s.command}" if s.command else s.why for s in self.steps],
                "next_actions": asjson(self.steps)}


# --- the verdict's findings ---------------------------------------------------------------

@section("summary", "Summary", 40, group=Group.VERDICT)
@dataclass(frozen=True)
class Summary(Section):
    """The verdict in a paragraph (not on the first screen: its rows say it there)."""

    text: str

    @classmethod
    def build(cls, facts: Facts) -> "Summary":
        return cls(facts.verdict.summary)

    @property
    def present(self) -> bool:
        return bool(self.text)

    def json(self) -> dict:
        return {"verdict": {"summary": self.text}}


@section("error", "Error", 41, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Error(Section):
    """The error the crash is about, or the kind of failure when it is no error code."""

    failure_kind: str | None
    error: ErrorFacts | None

    @classmethod
    def build(cls, facts: Facts) -> "Error":
        kind = facts.verdict.failure_kind
        return cls(kind.value if kind else None, facts.error)

    @property
    def present(self) -> bool:
        return self.error is not None or self.failure_kind is not None

    @property
    def label(self) -> str:
        return "Error" if self.error else "Failure"

    @property
    def line(self) -> Phrase:
        e = self.error
        if e is None:
            return phrase(code(self.failure_kind, Mark.FAILURE))
        code_text = f" ({e.code})" if e.code is not None else ""
        return phrase(code(f"{e.name}{code_text}", Mark.FAILURE), words(" - "), e.message,
                      words("; sticky" if e.sticky else "; not sticky"),
                      words("; surfaced as ") if e.surfaced_as else None, code(e.surfaced_as),
                      words("; what the host sees after the device's ") if e.from_device_exception else None,
                      e.from_device_exception)

    def json(self) -> dict:
        return {"verdict": {"failure_kind": self.failure_kind, "error": asjson(self.error)}}


@dataclass(frozen=True)
class SurfaceGroup:
    """Surfaces at one call site (four ranks failing in the same finaliser): one row."""

    site: str
    members: tuple[SurfaceFacts, ...]

    @property
    def who(self) -> str:
        return ", ".join(s.who for s in self.members)

    @property
    def source(self) -> str:
        """The first member's evidence, and how many more there are."""
        return self.members[0].source + (f" +{len(self.members) - 1}" if len(self.members) > 1 else "")

    @property
    def line(self) -> Phrase:
        return phrase(self.who, words(": "), code(self.site), words("  "), source(self.source))


@section("surfaces", "Surface", 42, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Surfaces(Section):
    """Where each process noticed the error, grouped by call site."""

    surfaces: tuple[SurfaceFacts, ...]
    groups: tuple[SurfaceGroup, ...] = not_json()

    FIRST_SCREEN = 3            # call sites on the first screen
    FULL = 6                    # ... and in the full report (the JSON has them all)

    @classmethod
    def build(cls, facts: Facts) -> "Surfaces":
        groups: dict[str, list[SurfaceFacts]] = {}
        for s in facts.surfaces:
            groups.setdefault(s.site, []).append(s)
        return cls(facts.surfaces, tuple(SurfaceGroup(site, tuple(members)) for site, members in groups.items()))

    @property
    def present(self) -> bool:
        return bool(self.surfaces)

    def shown(self, compact: bool) -> tuple[tuple[SurfaceGroup, ...], int]:
        """The groups a report shows, and how many surfaces it leaves to a longer form."""
        most = self.FIRST_SCREEN if compact else self.FULL
        return self.groups[:most], sum(len(g.members) for g in self.groups[most:])

    @staticmethod
    def more(hidden: int, compact: bool) -> str:
        """The surfaces a report leaves out, and where they are."""
        return f"... {hidden} more surfaces ({'--full' if compact else '--format json'})"

    def json(self) -> dict:
        return {"verdict": {"surfaces": asjson(self.surfaces)}}


ORIGIN_UNKNOWN = ("the calls that reported it only reported an earlier asynchronous fault; no device evidence "
                  "names the kernel")


@section("origin", "Origin", 43, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Origin(Section):
    """The kernel and rank that faulted - or the rank without its kernel, or, for a sticky
    error nothing names, the one sentence every format says instead."""

    origin: OriginFacts | None
    faulting: FaultingFacts | None
    unknown: str | None          # said when nothing names the origin of a sticky error

    FIRST_SCREEN_NOTES = 1

    @classmethod
    def build(cls, facts: Facts) -> "Origin":
        v = facts.verdict
        unknown = (ORIGIN_UNKNOWN + (" (see next steps)" if v.next_steps else "")
                   if v.origin is None and v.error is not None and v.error.error.sticky else None)
        return cls(facts.origin, facts.faulting, unknown)

    @property
    def present(self) -> bool:
        return bool(self.origin or self.faulting or self.unknown)

    @property
    def line(self) -> Phrase:
        """What faulted, in one line."""
        o, f = self.origin, self.faulting
        if o:
            return phrase(code(o.kernel, Mark.ORIGIN), words(" at ") if o.location else None, code(o.location),
                          words(" on "), o.who, words(": "), prose(o.fault),
                          Span(f"  confidence {o.confidence.value}", Form.WORDS, Mark.LABEL))
        return self.brief

    @property
    def brief(self) -> Phrase:
        """What faulted, where the steps that follow say who and how (Markdown's causal
        chain): the kernel and the confidence - or, unnamed, the same as ``line``."""
        o, f = self.origin, self.faulting
        if o:
            return phrase(code(o.kernel, Mark.ORIGIN), words(f" - confidence {o.confidence.value}"),
                          words(" (") if o.notes else None, prose("; ".join(o.notes)), words(")") if o.notes else None)
        if f:
            return phrase(Span("kernel unknown", Form.WORDS, Mark.UNKNOWN), words(" - "), f.who,
                          words(" faulted on the device: "), prose(f.fault))
        if self.unknown:
            return phrase(Span("unknown", Form.WORDS, Mark.UNKNOWN), words(" - "), prose(self.unknown))
        return ()

    @property
    def launched_from(self) -> Phrase:
        """The host code that launched the kernel, when a tool named it."""
        site = self.origin.launch_site if self.origin else None
        return phrase(words("launched from "), code(site)) if site else ()

    @property
    def named_by(self) -> Phrase:
        """The evidence that named the kernel."""
        ref = self.origin.evidence[0] if self.origin and self.origin.evidence else None
        return phrase(words("named by "), ref.kind, words(" "), source(ref.source)) if ref else ()

    @property
    def notes(self) -> tuple[str, ...]:
        return self.origin.notes if self.origin else ()

    def json(self) -> dict:
        return {"verdict": {"origin": asjson(self.origin), "origin_unknown": self.unknown,
                            "faulting_process": asjson(self.faulting)}}


@section("first-failure", "First failure", 44, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class FirstFailure(Section):
    """Who failed first and on what basis; who went down as collateral."""

    first: FirstFailureFacts | None
    collateral_ranks: tuple[int, ...]
    collateral: tuple[Process, ...] = not_json()
    cites: tuple[str, ...] = not_json()        # the evidence locations its basis names

    LISTED = 12             # collateral processes named in a row; the JSON lists them all

    @classmethod
    def build(cls, facts: Facts) -> "FirstFailure":
        return cls(facts.first, facts.verdict.collateral, facts.collateral,
                   _cites(facts.first.basis if facts.first else None, facts.locations))

    @property
    def present(self) -> bool:
        return self.first is not None or bool(self.collateral)

    @property
    def line(self) -> Phrase:
        return phrase(self.first.who, words(": "), *cited(self.first.basis, frozenset(self.cites))) if self.first else ()

    @property
    def collateral_names(self) -> str:
        names = ", ".join(p.who for p in self.collateral[:self.LISTED])
        more = len(self.collateral) - self.LISTED
        return names + (f" ... ({len(self.collateral)} in all; --format json lists them)" if more > 0 else "")

    def json(self) -> dict:
        return {"verdict": {"first_failure": asjson(self.first), "collateral": list(self.collateral_ranks)}}


@section("hang", "Hang", 45, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Hang(Section):
    """A collective some ranks waited in and others never joined."""

    hang: HangFacts | None

    @classmethod
    def build(cls, facts: Facts) -> "Hang":
        return cls(facts.verdict.hang)

    @property
    def present(self) -> bool:
        return self.hang is not None

    # what the rank that did not join did instead (the Flight Recorder tells)
    CULPRIT = {"never-entered": "never entered it", "stuck-earlier": "is stuck in an earlier collective",
               "mismatch": "recorded another op or shapes", "no-dump": "left no dump"}

    @property
    def line(self) -> Phrase:
        h = self.hang
        if h is None:
            return ()
        parts: list = [code(h.collective) if h.collective else Span("collective unknown", Form.WORDS, Mark.UNKNOWN),
                       words(f" SeqNum={h.seq}") if h.seq is not None and h.collective else None,
                       words(" of process group ") if h.group else None, h.group]
        if h.waited:
            parts.append(words(f"; {ranks_phrase(h.waited)} waited in it"))
        if h.suspects:
            parts.append(words(f"; {ranks_phrase(h.suspects)} {self.CULPRIT.get(h.culprit_how or '', 'did not join')}"))
        if h.culprit_doing:
            parts += [words("; the stalled rank: "), prose(h.culprit_doing)]
        return phrase(*parts)

    def json(self) -> dict:
        h = self.hang
        return {"verdict": {"hang": {
            "collective": h.collective, "seq": h.seq, "waited": list(h.waited), "suspects": list(h.suspects),
            "culprit_doing": h.culprit_doing, "basis": h.basis, "group": h.group, "culprit_how": h.culprit_how,
            "called_at": h.called_at, "evidence": list(h.evidence)} if h else None}}


@section("hardware", "Hardware or software", 46, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Hardware(Section):
    """Whether the evidence points at the GPU or at a program's kernel."""

    hardware: HardwareOpinion | None

    @classmethod
    def build(cls, facts: Facts) -> "Hardware":
        return cls(facts.verdict.hardware)

    @property
    def present(self) -> bool:
        return self.hardware is not None

    @property
    def line(self) -> Phrase:
        """The opinion and what it rests on."""
        h = self.hardware
        return phrase(h.opinion, words(": "), prose(h.basis)) if h else ()

    @property
    def settled_by(self) -> Phrase:
        """The opinion, and what would settle it (where a report has room for both)."""
        return phrase(*self.line, words(". To settle it: "), prose(self.hardware.settle)) if self.hardware else ()

    def json(self) -> dict:
        return {"verdict": {"hardware": asjson(self.hardware)}}


@section("notes", "Notes", 47, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Notes(Section):
    """What the reader should know beside the verdict, and rules that failed to run."""

    notes: tuple[str, ...]
    rule_failures: tuple[str, ...]

    @classmethod
    def build(cls, facts: Facts) -> "Notes":
        return cls(tuple(facts.verdict.notes), tuple(facts.verdict.rule_failures))

    @property
    def present(self) -> bool:
        return bool(self.notes or self.rule_failures)

    def json(self) -> dict:
        return {"verdict": {"notes": list(self.notes), "rule_failures": list(self.rule_failures)}}


@dataclass(frozen=True)
class StepFacts:
    """One rank's step in flight, as the capture plugin's snapshot has it (JSON
    ``verdict.steps[]``)."""

    who: str
    key: str | None
    rank: int | None
    pid: int | None
    step: int | None
    phase: str | None
    tokens: int | None
    requests: tuple[tuple[str, int | None, int | None], ...]
    in_flight: bool
    reason: str
    text: str
    source: str


@section("steps", "Step in flight", 48, group=Group.VERDICT, first_screen=True)
@dataclass(frozen=True)
class Steps(Section):
    """What each rank was running when it went down (the capture plugin's snapshots):
    never what faulted - only device evidence names an origin."""

    steps: tuple[StepFacts, ...]

    FIRST_SCREEN = 4

    @classmethod
    def build(cls, facts: Facts) -> "Steps":
        return cls(tuple(StepFacts(who(st.rank, st.pid), st.key, st.rank, st.pid, st.step, st.phase, st.tokens,
                                   tuple(tuple(r) for r in st.requests), st.in_flight, st.reason, st.text, st.source)
                         for st in facts.verdict.steps))

    @property
    def present(self) -> bool:
        return bool(self.steps)

    def shown(self, compact: bool) -> tuple[tuple[StepFacts, ...], int]:
        """The steps a report lists, and how many more there are."""
        rows = self.steps[:self.FIRST_SCREEN] if compact else self.steps
        return rows, len(self.steps) - len(rows)

    def line(self, item: StepFacts) -> Phrase:
        return phrase(item.who, " ", item.text)

    def json(self) -> dict:
        return {"verdict": {"steps": asjson(self.steps)}}


# --- the story, step by step ----------------------------------------------------------------

@section("chain", "Causal chain", 50, show="chain")
@dataclass(frozen=True)
class Chain(Section):
    """The crash from its origin to its last collateral process, one step a line: a
    view of the facts the verdict rows show (nothing of its own in the JSON)."""

    origin: OriginFacts | None
    faulting: FaultingFacts | None
    sticky: bool
    surfaces: tuple[SurfaceFacts, ...]
    first: FirstFailureFacts | None
    collateral: tuple[Process, ...]
    cites: tuple[str, ...] = ()                # the evidence locations the first failure's basis names

    LISTED = 16             # collateral steps; the rest is counted
    MOST = 24               # steps in all

    @classmethod
    def build(cls, facts: Facts) -> "Chain":
        return cls(facts.origin, facts.faulting, bool(facts.error and facts.error.sticky), facts.surfaces,
                   facts.first, facts.collateral, _cites(facts.first.basis if facts.first else None, facts.locations))

    @property
    def steps(self) -> tuple[Phrase, ...]:
        steps: list[Phrase] = []
        o, f = self.origin, self.faulting
        if o:
            steps.append(phrase(code(o.kernel, Mark.ORIGIN), words(" on "), o.who, words(": "), prose(o.fault),
                                words(f" [{o.confidence.value} confidence; "),
                                code(o.evidence[0].source if o.evidence else "no source"), words("]")))
        elif f:
            steps.append(phrase(f.who, words(" faulted on the device ("), prose(f.fault),
                                words("); no evidence names the kernel")))
        elif self.sticky:
            steps.append(phrase(words("an earlier kernel faulted asynchronously (not named by any evidence)")))
        for s in self.surfaces:
            where = [code(s.place), words(" in ") if s.function else None, code(s.function)] if s.file \
                else [words("a host call")]
            steps.append(phrase(s.who, words(" noticed it: "), code(s.api), words(" at ") if s.api else None, *where,
                                words(" (called from ") if s.caller else None, code(s.caller),
                                words(")") if s.caller else None, words(" raised "), code(s.exception), words(" ("),
                                s.how, words(") ["), code(s.source), words("]")))
        if self.first and not self.surfaces and not o:
            steps.append(phrase(words("first failure: "), self.first.who, words(" - "),
                                *cited(self.first.basis, frozenset(self.cites))))
        for p in self.collateral[:self.LISTED]:
            steps.append(phrase(p.who, words(" went down as collateral: "), prose(p.failure)))
        if len(self.collateral) > self.LISTED:
            steps.append(phrase(words(f"... and {len(self.collateral) - self.LISTED} more collateral processes "
                                      "(the JSON report lists them)")))
        if not steps:
            return (phrase(words("no failure found in the inputs")),)
        if len(steps) > self.MOST:
            steps[self.MOST:] = [phrase(words(f"... and {len(steps) - self.MOST} more (the JSON report has them)"))]
        return tuple(steps)

    def json(self) -> dict:
        return {}


# --- how the rules decided ------------------------------------------------------------------

@dataclass(frozen=True)
class Explanation:
    rule: str
    text: str


@dataclass(frozen=True)
class Observation:
    seen: str
    what: str
    source: str
    time: str | None
    reported_by: Any


@dataclass(frozen=True)
class Story:
    """What one process's lines say happened to it, as the rules read them."""

    key: str
    who: str
    status: str | None
    observations: tuple[Observation, ...]
    more: int

    @property
    def status_text(self) -> str:
        return self.status or "not in the table"


STORY_OBSERVATIONS = 40     # per process in the document; the rest are counted


@section("explain", "How the rules decided", 55, show="explain", opt_in=True)
@dataclass(frozen=True)
class Explain(Section):
    """The derivation: each rule's conclusion, and each process's story."""

    explanations: tuple[Explanation, ...]
    stories: tuple[Story, ...]

    STORY_TITLE = "What each process's lines say happened to it (the stories)"
    SHOWN_OBSERVATIONS = 12     # per story in a report; the JSON has up to STORY_OBSERVATIONS

    @classmethod
    def build(cls, facts: Facts) -> "Explain":
        case = facts.case
        stories: list[Story] = []
        if case.stories is not None:
            status = {r.key: r.status.value for r in facts.verdict.ranks}
            for story in case.stories.stories:
                seen = story.observations
                stories.append(Story(story.key, who(story.rank, story.pid, story.name or story.role),
                                     status.get(story.key),
                                     tuple(Observation(o.seen.value, o.event.message[:200], o.event.where,
                                                       iso(o.event.time), o.reported_by)
                                           for o in seen[:STORY_OBSERVATIONS]),
                                     max(0, len(seen) - STORY_OBSERVATIONS)))
        return cls(tuple(Explanation(rule, text) for rule, text in facts.verdict.explanations), tuple(stories))

    @property
    def present(self) -> bool:
        return bool(self.explanations)

    def json(self) -> dict:
        return {"verdict": {"explanation": asjson(self.explanations)}, "stories": asjson(self.stories)}


# --- the run --------------------------------------------------------------------------------

@dataclass(frozen=True)
class EnvironmentFact:
    key: str
    value: Any

    @property
    def text(self) -> str:
        return str(self.value)


@section("env", "Environment", 60, show="env")
@dataclass(frozen=True)
class Environment(Section):
    """Versions, model, parallelism, backends, flags, the step in flight.  The facts are a
    mapping (the redactor then redacts a value under a secret's name whole)."""

    environment: Mapping[str, Any]
    environment_sources: Mapping[str, str]

    @classmethod
    def build(cls, facts: Facts) -> "Environment":
        v = facts.verdict
        return cls({k: _plain(val) for k, val in v.environment.items()}, dict(v.environment_sources))

    EMPTY = "no environment fact in the inputs (forensics collect gathers versions, GPUs and flags)"

    @property
    def rows(self) -> tuple[EnvironmentFact, ...]:
        return tuple(EnvironmentFact(k, v) for k, v in self.environment.items())

    def json(self) -> dict:
        return {"environment": dict(self.environment), "environment_sources": dict(self.environment_sources)}


@section("processes", "Processes", 70, show="processes", first_screen=True)
@dataclass(frozen=True)
class Processes(Section):
    """Every process and how it went down."""

    processes: tuple[Process, ...]

    FIRST_SCREEN = 4
    LISTED = 64                 # rows of the full table; the JSON has them all
    IMPORTANCE = {Status.ORIGIN: 0, Status.FAILED: 1, Status.SURFACED: 1, Status.COLLATERAL: 2, Status.UNKNOWN: 3,
                  Status.HEALTHY: 4}

    @classmethod
    def build(cls, facts: Facts) -> "Processes":
        return cls(facts.processes)

    EMPTY = "no process identified in the inputs"

    def shown(self, compact: bool) -> tuple[tuple[Process, ...], str | None]:
        """The rows a report shows - on the first screen who failed, then who went down,
        then the rest - and the rest as a sentence ("2 more: 1 collateral, 1 unknown")."""
        if compact:
            rows = tuple(sorted(self.processes, key=lambda p: self.IMPORTANCE.get(p.status, 5))[:self.FIRST_SCREEN])
            rest = [p for p in self.processes if p not in rows]
        else:
            rows, rest = self.processes[:self.LISTED], list(self.processes[self.LISTED:])
        return rows, (f"{len(rest)} more: {by_status(p.status.value for p in rest)}" if rest else None)

    def json(self) -> dict:
        return {"ranks": asjson(self.processes)}


@section("checklist", "Incident checklist", 80, show="checklist")
@dataclass(frozen=True)
class Checklist(Section):
    items: tuple[ChecklistItem, ...]

    @classmethod
    def build(cls, facts: Facts) -> "Checklist":
        return cls(tuple(facts.verdict.checklist))

    @property
    def present(self) -> bool:
        return bool(self.items)

    def json(self) -> dict:
        return {"checklist": asjson(self.items)}


# --- the timeline ---------------------------------------------------------------------------

class Marker(enum.Enum):
    """What a timeline event is to the verdict (the HTML timeline draws each its way)."""

    ORIGIN = "origin"           # device evidence on the faulting rank
    SURFACE = "surface"         # a surface's own line
    COLLATERAL = "collateral"   # on a collateral rank
    EVENT = "event"


@dataclass(frozen=True)
class TimelineEvent:
    time: str | None
    rank: int | None
    pid: int | None
    role: str | None
    process: str | None
    kind: str
    severity: str
    message: str
    source: str
    time_inferred: bool
    untimed: bool
    marker: Marker = not_json()
    http_status: int | None = not_json()

    @property
    def clock(self) -> str:
        """The time of day, "~" after one taken from the line before, "-" without a time."""
        return (self.time[11:19] if self.time else "-") + ("~" if self.time_inferred else "")

    @property
    def lane(self) -> str:
        """Whose event it is: its rank, else its role."""
        return f"rank {self.rank}" if self.rank is not None else (self.role or "other")

    @property
    def row(self) -> str:
        """The lane a time axis draws it in: evidence without a wall-clock time has its own."""
        return UNTIMED_LANE if self.untimed else self.lane


def _timeline_event(e: Event, facts: Facts) -> TimelineEvent:
    if facts.origin_rank is not None and e.rank == facts.origin_rank and e.kind in DEVICE_EVIDENCE:
        marker = Marker.ORIGIN
    elif e.where in facts.surface_sources:
        marker = Marker.SURFACE
    elif e.rank in facts.collateral_ranks:
        marker = Marker.COLLATERAL
    else:
        marker = Marker.EVENT
    status = e.attrs.get("status") if e.kind == Kind.HTTP else None
    return TimelineEvent(iso(e.time), e.rank, e.pid, e.role, e.process, e.kind.value, e.severity.name,
                         clip(e.message, 500), e.where, e.time_inferred, e.time is None, marker,
                         status if isinstance(status, int) else None)


def select_timeline(events: list[Event], limit: int | None) -> list[Event]:
    """The story: every failure-related event and every warning or error, each once (a
    per-rank log repeats what the server console relayed), up to ``limit`` entries
    around the first failure."""
    chosen, seen = [], set()
    for e in events:
        if e.kind not in STORY and e.severity < Severity.WARNING:
            continue
        key = (e.pid, e.rank, e.kind, e.message, e.time)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(e)
    if limit is not None and len(chosen) > limit:
        first = next((i for i, e in enumerate(chosen) if e.kind in (Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.OOM,
                                                                      Kind.FATAL_SIGNAL, Kind.XID)), 0)
        start = max(0, min(first - limit // 4, len(chosen) - limit))
        chosen = chosen[start:start + limit]
    return chosen


@dataclass(frozen=True)
class Note:
    """A sequence diagram's note over one lane."""

    lane: str
    text: str


@dataclass(frozen=True)
class Arrow:
    """A sequence diagram's message from one lane to another."""

    src: str
    dst: str
    text: str


# lanes of the sequence diagram beside the ranks' (R0, R1 ...), in the order drawn
SEQUENCE_LANES = {"Client": "client", "API": "API server", "Engine": "engine"}
OTHER_LANE = ("Other", "unattributed")
UNTIMED_LANE = "no wall-clock time"
# what a window of the timeline centres on
FAILURE_KINDS = frozenset({Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.WORKER_DIED, Kind.OOM, Kind.SANITIZER,
                           Kind.CUDA_GDB, Kind.FATAL_SIGNAL, Kind.PEER_FAILURE, Kind.XID, Kind.CORE_DUMP,
                           Kind.EXCEPTION})


@section("timeline", "Timeline around the failure", 90, show="timeline")
@dataclass(frozen=True)
class Timeline(Section):
    """The events of the failure: all of them (the JSON, the HTML lanes), the window a
    table shows around the first failure, and the failure as a sequence diagram."""

    events: tuple[TimelineEvent, ...]
    window: tuple[TimelineEvent, ...] = not_json()
    lanes: tuple[str, ...] = not_json()
    workers: tuple[int, ...] = not_json()              # worker ranks: a lane each in the diagram
    origin: OriginFacts | FaultingFacts | None = not_json()
    surfaces: tuple[SurfaceFacts, ...] = not_json()
    first_rank: int | None = not_json()
    collateral: tuple[Process, ...] = not_json()
    client_saw_5xx: bool = not_json()

    WINDOW = 14                 # rows of a table
    DIAGRAM_SURFACES = 8
    DIAGRAM_MESSAGES = 40
    TITLE = "Timeline around the failure (~: time taken from the line before; -: no wall-clock time)"

    @classmethod
    def build(cls, facts: Facts) -> "Timeline":
        events = facts.events
        # a table: the failure-related events and the errors, not every log line
        table = [e for e in events if e.kind not in ("log", "exit") or e.severity in ("ERROR", "CRITICAL")]
        if len(table) > cls.WINDOW:
            first = next((i for i, e in enumerate(table) if Kind(e.kind) in FAILURE_KINDS), 0)
            start = max(0, min(first - 2, len(table) - cls.WINDOW))
            table = table[start:start + cls.WINDOW]
        ranked = {f"rank {p.rank}" for p in facts.processes if p.rank is not None}
        lanes = sorted(ranked | {e.lane for e in events if e.time},
                       key=lambda lane: (not lane.startswith("rank"), _natural(lane)))
        if any(not e.time for e in events):
            lanes.append(UNTIMED_LANE)
        workers = tuple(p.rank for p in facts.processes if p.role == "worker" and p.rank is not None)
        return cls(events, tuple(table), tuple(lanes), workers, facts.origin or facts.faulting,
                   facts.surfaces[:cls.DIAGRAM_SURFACES], facts.first.rank if facts.first else None,
                   facts.collateral, any(e.http_status is not None and e.http_status >= 500 for e in events))

    def marker_note(self, event: TimelineEvent) -> str | None:
        """What a click on an origin marker adds: the origin's confidence and notes."""
        if event.marker != Marker.ORIGIN or self.origin is None:
            return None
        return f"confidence {self.origin.confidence.value}" + (f": {'; '.join(self.origin.notes)}"
                                                                if self.origin.notes else "")

    @property
    def sequence(self) -> tuple[tuple[tuple[str, str], ...], tuple[Note | Arrow, ...]]:
        """The failure as a sequence diagram: (lane id, lane label) in the order drawn,
        and the notes and messages - the origin, the surfaces, each collateral process
        hearing of it, the client's 5xx."""
        lanes: dict[str, None] = {f"R{r}": None for r in self.workers}
        messages: list[Note | Arrow] = []

        def note(lane: str, text: str) -> None:
            lanes.setdefault(lane, None)
            messages.append(Note(lane, text))

        def arrow(src: str, dst: str, text: str) -> None:
            lanes.setdefault(src, None)
            lanes.setdefault(dst, None)
            messages.append(Arrow(src, dst, text))

        o = self.origin
        if o is not None and o.rank is not None:
            kernel = o.kernel if isinstance(o, OriginFacts) else None
            note(f"R{o.rank}", f"ORIGIN {kernel or 'kernel unknown'}: {o.fault}")
        for s in self.surfaces:
            if s.rank is not None:
                note(f"R{s.rank}", f"SURFACE {s.api or ''} {s.function or ''}".rstrip())
        for p in self.collateral:
            src = f"R{self.first_rank}" if self.first_rank is not None else OTHER_LANE[0]
            if p.role == "worker" and p.rank is not None:
                arrow(src, f"R{p.rank}", f"COLLATERAL {p.failure}")
            elif p.role == "engine-core":
                arrow(src, "Engine", "worker failed: engine core stopped")
            elif p.role == "api-server":
                arrow("Engine", "API", "EngineDeadError")
        if self.client_saw_5xx:
            arrow("API", "Client", "HTTP 5xx")
        order = [*SEQUENCE_LANES, *sorted((k for k in lanes if k.startswith("R")), key=lambda k: int(k[1:])),
                 OTHER_LANE[0]]
        labels = {**SEQUENCE_LANES, OTHER_LANE[0]: OTHER_LANE[1]}
        drawn = tuple((k, labels.get(k, f"rank {k[1:]}")) for k in order if k in lanes)
        return drawn, tuple(messages[:self.DIAGRAM_MESSAGES])

    @property
    def present(self) -> bool:
        return True             # "no failure events" is said, not left out

    def json(self) -> dict:
        return {"timeline": asjson(self.events)}


def _natural(text: str) -> tuple:
    """"rank 10" after "rank 9"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


# --- what was read --------------------------------------------------------------------------

@dataclass(frozen=True)
class InputFile:
    path: str
    kind: str
    lines: int | None
    events: int
    event_lines: int
    noise_lines: int
    counted_lines: int
    unparsed_lines: int | None
    formats: Mapping[str, int]
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Traffic:
    process: str | None
    pid: int | None
    rank: int | None
    template: str
    count: int
    first_line: int | None
    last_line: int | None
    first: str | None
    last: str | None
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Walked:
    given: Any
    files_seen: Any
    readable: Any
    empty: Any
    links_not_followed: Any


@dataclass(frozen=True)
class InputSummary:
    sentence: str
    inputs: int
    lines: int
    events: int
    unparsed: int
    recognised: bool
    problems: tuple[str, ...]
    more_problems: int


@section("inputs", "Inputs", 95, show="inputs", first_screen=True)
@dataclass(frozen=True)
class Inputs(Section):
    """What was read, each input's line accounting, and the inputs' problems."""

    sources: tuple[InputFile, ...]
    inputs: Walked
    traffic: tuple[Traffic, ...]
    input_summary: InputSummary

    LISTED = 40                 # inputs of the table; past it, those with events or problems
    PROBLEMS = 20               # problems in the summary; the rest counted
    FIRST_SCREEN_PROBLEMS = 3
    TRAFFIC = 20                # traffic templates per input in the JSON

    @classmethod
    def build(cls, facts: Facts) -> "Inputs":
        case = facts.case
        walk = case.walk
        sources = tuple(InputFile(**{**s.to_json(), "problems": tuple(s.problems)}) for s in case.sources)
        traffic = tuple(Traffic(**{**t.to_json(), "examples": tuple(t.examples)})
                        for s in case.sources for t in s.traffic[:cls.TRAFFIC])
        return cls(sources, Walked(walk.given, walk.files_seen, walk.readable, walk.empty, walk.skipped_links),
                   traffic, cls.summary(case))

    @classmethod
    def summary(cls, case: "Case") -> InputSummary:
        """What was read, in one sentence, and the inputs' problems (a pickle never
        loaded, a file cut short): when nothing was recognised, it says so and asks
        whether this is the right file."""
        sources = case.sources
        lines = sum(s.lines or 0 for s in sources)
        unparsed = sum(s.unparsed_lines or 0 for s in sources)
        events = sum(len(s.events) for s in sources)
        files = f"{len(sources)} input{'s' if len(sources) != 1 else ''}"
        if lines and not events and unparsed == lines:
            sentence = (f"Nothing recognised ({unparsed:,} of {lines:,} lines unparsed): is this the right file? "
                        "forensics formats lists what it reads")
        elif lines:
            sentence = f"Read {files}: {lines:,} lines, {events:,} events, {unparsed:,} lines unparsed"
        else:
            sentence = f"Read {files}: {events:,} events"
        problems = [p for s in sources for p in s.problems]
        return InputSummary(sentence, len(sources), lines, events, unparsed, bool(events),
                            tuple(problems[:cls.PROBLEMS]), max(0, len(problems) - cls.PROBLEMS))

    @property
    def shown(self) -> tuple[tuple[InputFile, ...], int]:
        """The inputs a table lists - all of them, or past ``LISTED`` those with events or
        problems - and how many it leaves out."""
        sources = self.sources
        rows = sources if len(sources) <= self.LISTED else \
            tuple(s for s in sources if s.events or s.problems)[:self.LISTED]
        return rows, len(sources) - len(rows)

    @property
    def hidden_problems(self) -> int:
        """Problems the first screen leaves to --show inputs."""
        s = self.input_summary
        return max(0, len(s.problems) - self.FIRST_SCREEN_PROBLEMS) + s.more_problems

    def json(self) -> dict:
        return {"sources": asjson(self.sources), "inputs": asjson(self.inputs), "traffic": asjson(self.traffic),
                "input_summary": asjson(self.input_summary)}


@section("signature", "Signature", 97, show="signature")
@dataclass(frozen=True)
class Signature(Section):
    """The crash's stable signature and what went into it (compare groups runs by it)."""

    signature: str | None
    signature_site: str | None
    signature_parts: tuple[SignaturePart, ...]

    @classmethod
    def build(cls, facts: Facts) -> "Signature":
        v = facts.verdict
        return cls(v.signature, v.signature_site, tuple(v.signature_parts))

    @property
    def present(self) -> bool:
        return bool(self.signature)

    @property
    def contributed(self) -> str:
        """"fault=illegal-address, surface=...": the parts that made it."""
        return ", ".join(f"{p.part}={p.value}" for p in self.signature_parts if p.contributed)

    def json(self) -> dict:
        return {"signature": self.signature, "signature_site": self.signature_site,
                "signature_parts": asjson(self.signature_parts)}


# --- the lines behind the verdict -----------------------------------------------------------

@dataclass(frozen=True)
class Excerpt:
    label: str
    source: str
    text: str
    also: tuple[str, ...] = ()      # the same report from other processes, shown once

    def as_json(self) -> dict:
        out = {"label": self.label, "source": self.source, "text": self.text}
        if self.also:
            out["also"] = list(self.also)
        return out


EXCERPT_LINES = 40
_DIGITS = re.compile(r"\d+")


@section("evidence", "Evidence", 100, show="evidence")
@dataclass(frozen=True)
class Evidence(Section):
    """The lines behind the verdict, most important first: origin evidence, each
    surface, the first error of each collateral or unknown process."""

    excerpts: tuple[Excerpt, ...]

    MOST = 24

    @classmethod
    def build(cls, facts: Facts) -> "Evidence":
        case, v = facts.case, facts.verdict
        by_where = {e.where: e for e in case.events}
        wanted: list[tuple[str, Event]] = []
        seen: set[str] = set()

        def add(label: str, where: str | None) -> None:
            event = by_where.get(where) if where else None
            if event is not None and event.where not in seen:
                seen.add(event.where)
                wanted.append((label, event))

        if v.origin is not None:
            for ref in v.origin.evidence:
                add(f"origin evidence ({ref.kind})", ref.source)
        for s in v.surfaces:
            add(f"surface on {who(s.rank, s.pid, s.name)}", s.source)
        for r in v.ranks:
            if r.first_error_source and r.status.value in ("collateral", "unknown", "surfaced", "failed"):
                add(f"{'rank ' + str(r.rank) if r.rank is not None else (r.name or r.role)}: {r.status.value}",
                    r.first_error_source)
        # the same report from several processes (every collateral rank's "Connection
        # closed by peer") is shown once, under all their labels
        out: list[list] = []            # [label, source, text, also]
        by_shape: dict[str, list] = {}
        for label, event in wanted:
            text = excerpt(event)
            shape = _DIGITS.sub("0", text)
            if shape in by_shape and not label.startswith(("origin", "surface")):
                merged = by_shape[shape]
                merged[0] += f", {label}"
                merged[3].append(event.where)
                continue
            entry = [label, event.where, text, []]
            by_shape.setdefault(shape, entry)
            out.append(entry)
        return cls(tuple(Excerpt(label, where, text, tuple(also)) for label, where, text, also in out[:cls.MOST]))

    @property
    def present(self) -> bool:
        return bool(self.excerpts)

    def json(self) -> dict:
        return {"evidence": asjson(self.excerpts)}


def excerpt(event: Event) -> str:
    """An event's lines as the log had them: a traceback rebuilt from its chain."""
    chain = event.chain
    if not chain:
        return clip(event.message, 4000)
    lines = []
    for exc in chain:
        if exc.chained_by == "cause":
            lines += ["", "The above exception was the direct cause of the following exception:", ""]
        elif exc.chained_by == "context":
            lines += ["", "During handling of the above exception, another exception occurred:", ""]
        if exc.unraisable_in:
            lines.append(f"Exception ignored in: {exc.unraisable_in}")
        if not exc.header_missing:
            lines.append("Traceback (most recent call last):")
        for f in exc.frames:
            lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
            if f.code:
                lines.append(f"    {f.code}")
        if exc.type:
            lines.append(f"{exc.type}: {exc.message}".rstrip(": ") if exc.message else exc.type)
    return "\n".join(lines[-EXCERPT_LINES:])


# --- how the report was redacted --------------------------------------------------------------

@section("redaction", "Redaction", 110)
@dataclass(frozen=True)
class Redaction(Section):
    """Whether the report was redacted before sharing, and what was redacted."""

    enabled: bool
    counts: Mapping[str, int]

    @classmethod
    def build(cls, facts: Facts) -> "Redaction":
        return cls(False, {})

    @property
    def sentence(self) -> str:
        if not self.enabled:
            return "Redaction: off."
        counts = ", ".join(f"{n} {kind}" for kind, n in self.counts.items()) or "nothing found"
        return f"Redacted before sharing: {counts}. Pseudonyms are consistent within this report."

    def json(self) -> dict:
        return {"redaction": {"enabled": self.enabled, "counts": dict(self.counts)}}


TOOL = {"name": "forensics", "version": __version__}
