"""The Markdown report, made to be pasted into a GitHub issue.

The headline comes first, then known issues and next steps, then the shape of vLLM's bug
template ("Describe the bug": the verdict's findings and the causal chain; "Your current
environment"), the processes, the checklist, a Mermaid timeline, the inputs and the
evidence in collapsible blocks - each registered section drawn by its function here, in
the document's order.

Nothing from a log is live here: names and messages outside code are escaped (no
emphasis, links, images, HTML, headings, @mentions or #123 references), text inside the
``<details><summary>`` HTML blocks is HTML-escaped (no Markdown applies there), inline values
are code spans whose fence no backtick inside can close, and evidence sits in fenced
blocks longer than any backtick run inside them.  GitHub refuses bodies over 65,536
characters: the evidence is trimmed to fit, never the verdict, and the report says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TextIO

from forensics.inert import md_code, md_fence, md_html, md_prose, md_text, plain
from forensics.report.base import Drawers, Form, Group, Phrase
from forensics.report.document import Document
from forensics.report.sections import (Arrow, Chain, Checklist, Environment, Error, Evidence, Explain, FirstFailure,
                                       Hang, Hardware, Headline, Inputs, KnownIssues, NextSteps, Notes, Origin,
                                       Processes, Redaction, Signature, Steps, Summary, Surfaces, Timeline)

GITHUB_LIMIT = 65_536
BUG_HEADING = "### 🐛 Describe the bug\n\n"
CHECK_MARKS = {"pass": "✅ pass", "fail": "❌ fail", "unknown": "❔ unknown"}

DRAW = Drawers("markdown")


@dataclass(frozen=True)
class Block:
    """A piece of the report; ``trimmable`` ones (evidence) give way to GitHub's limit."""

    text: str
    trimmable: bool = False


@dataclass(frozen=True)
class Ctx:
    options: object
    include_title: bool


def title(document: Document) -> str:
    """The issue's one-line title (plain text: gh passes it as an argument, GitHub shows
    it as text)."""
    return document.get(Headline).issue_title


def render(document: Document, out: TextIO, options) -> None:
    out.write(render_text(document, options))


def render_text(document: Document, options=None, budget: int = GITHUB_LIMIT) -> str:
    ctx = Ctx(options, include_title=not (options and options.title_separately))
    asked = bool(options and (options.explain or options.verbose))
    blocks: list[Block] = []
    in_bug = False
    for item in document.sections:
        if item.entry.group is Group.VERDICT and not in_bug:
            blocks.append(Block(BUG_HEADING))        # vLLM's bug template: the findings under it
            in_bug = True
        if not item.present or (item.entry.opt_in and not asked):
            continue
        blocks += DRAW.draw(item, ctx)
    return _fit(blocks, budget)


def _fit(blocks: list[Block], budget: int) -> str:
    """The blocks within ``budget`` characters: trimmable ones kept in order while they
    fit beside all the others, a note where the first was dropped."""
    room = budget - sum(len(b.text) for b in blocks if not b.trimmable) - 800
    out: list[str] = []
    dropped, last = 0, None
    for block in blocks:
        if block.trimmable:
            if dropped or len(block.text) > room:
                dropped += 1
                continue
            room -= len(block.text)
            last = len(out)
        out.append(block.text)
    if dropped:
        out.insert(last + 1 if last is not None else len(out),
                   f"\n> {dropped} evidence excerpt(s) trimmed to stay under GitHub's {budget:,}-character "
                   "limit; `forensics analyze --format json` has everything.\n")
    body = "".join(out)
    if len(body) > budget:
        body = body[: budget - 200] + "\n\n> report cut to fit GitHub's limit\n"
    return body


_WORDS = re.compile(r"([\\`*_\[\]<>#|~])")


def md(words: Phrase) -> str:
    """A phrase as Markdown: log text escaped, code as code spans, the report's own words
    as written (what could start a construct escaped all the same)."""
    out = []
    for span in words:
        if span.form is Form.CODE:
            out.append(md_code(span.text))
        elif span.form is Form.PROSE:
            out.append(md_prose(span.text))
        elif span.form is Form.SOURCE:
            out.append(f"\\[{md_code(span.text)}\\]")
        elif span.form is Form.WORDS:
            out.append(_WORDS.sub(r"\\\1", plain(span.text)))
        else:
            out.append(md_text(span.text))
    return "".join(out)


def _para(label: str, text: str) -> Block:
    return Block(f"**{label}:** {text}\n\n")


# --- the headline and what to do ----------------------------------------------------------

@DRAW.of(Headline)
def _headline(item: Headline, ctx: Ctx) -> list[Block]:
    out = [Block(f"**Suggested title:** {md_code(item.issue_title)}\n\n")] if ctx.include_title else []
    return out + [Block(f"> **{md_prose(item.text)}**\n\n")]


@DRAW.of(KnownIssues)
def _known_issues(item: KnownIssues, ctx: Ctx) -> list[Block]:
    out = ["#### Known issues\n"]
    for k in item.issues:
        out.append(f"- **{md_text(k.likelihood)}**: {md_code(k.id)} - {md_text(k.title)}  \n"
                   f"  workaround: {md_prose(k.workaround)}  \n"
                   f"  matched: {md_text(item.matched_text(k))}  \n"
                   f"  does not prove: {md_prose(k.does_not_prove)}  \n"
                   + "".join(f"  <{ref}>\n" for ref in item.links(k)))
    return [Block("".join(out) + "\n")]


@DRAW.of(NextSteps)
def _next_steps(item: NextSteps, ctx: Ctx) -> list[Block]:
    out = [f"#### {item.entry.title}\n"]
    for step in item.steps:
        action = f"**{md_prose(step.title)}**: " if step.title else ""
        out.append(f"- {action}{md_prose(step.why)}\n")
        if step.command:
            out.append("\n" + "\n".join("  " + line for line in md_fence(step.command, "sh").splitlines()) + "\n")
    return [Block("".join(out) + "\n")]


# --- Describe the bug -----------------------------------------------------------------------

@DRAW.of(Summary)
def _summary(item: Summary, ctx: Ctx) -> list[Block]:
    return [_para("Verdict", md_prose(item.text))]


@DRAW.of(Error)
def _error(item: Error, ctx: Ctx) -> list[Block]:
    return [_para(item.label, md(item.line))]


@DRAW.of(Surfaces)
def _surfaces(item: Surfaces, ctx: Ctx) -> list[Block]:
    groups, hidden = item.shown(compact=False)
    lines = [f"- {md(g.line)}\n" for g in groups] + ([f"- {md_text(item.more(hidden, False))}\n"] if hidden else [])
    return [Block(f"**Surfaced:**\n\n{''.join(lines)}\n")]


@DRAW.of(Origin)
def _origin(item: Origin, ctx: Ctx) -> list[Block]:
    return [_para("Origin", md(item.brief) + ("." if item.unknown else ""))]


@DRAW.of(FirstFailure)
def _first(item: FirstFailure, ctx: Ctx) -> list[Block]:
    out = []
    if item.first:
        out.append(_para("First failure", md(item.line)))
        if item.first.launcher_opinion:
            out.append(Block(f"> {md_prose(item.first.launcher_opinion)}\n\n"))
    if item.collateral:
        out.append(_para("Collateral", md_text(item.collateral_names)))
    return out


@DRAW.of(Hang)
def _hang(item: Hang, ctx: Ctx) -> list[Block]:
    return [_para("Hang", md(item.line))]


@DRAW.of(Steps)
def _steps(item: Steps, ctx: Ctx) -> list[Block]:
    rows, more = item.shown(False)
    text = "; ".join(md(item.line(st)) for st in rows)
    return [_para("Step in flight (capture snapshots)", text)]


@DRAW.of(Hardware)
def _hardware(item: Hardware, ctx: Ctx) -> list[Block]:
    return [_para(item.entry.title, md(item.settled_by))]


@DRAW.of(Notes)
def _notes(item: Notes, ctx: Ctx) -> list[Block]:
    return [Block(f"> {md_prose(n)}\n\n") for n in (*item.notes, *item.rule_failures)]


@DRAW.of(Chain)
def _chain(item: Chain, ctx: Ctx) -> list[Block]:
    steps = "".join(f"{n}. {md(step)}\n" for n, step in enumerate(item.steps, 1))
    return [Block(f"#### {item.entry.title}\n{steps}\n")]


@DRAW.of(Explain)
def _explain(item: Explain, ctx: Ctx) -> list[Block]:
    out = [f"#### {item.entry.title}\n",
           _table(("rule", "conclusion"), [[md_code(e.rule, table=True), _cell_text(e.text)] for e in item.explanations])]
    if ctx.options and ctx.options.explain and item.stories:
        out.append(f"\n{item.STORY_TITLE}:\n\n")
        for story in item.stories:
            out.append(f"- {md_text(story.who)}: **{md_text(story.status_text)}**\n")
            for seen in story.observations[:item.SHOWN_OBSERVATIONS]:
                out.append(f"  - {md_text(seen.seen)} {md_text(seen.what[:100])} \\[{md_code(seen.source)}\\]\n")
            if len(story.observations) > item.SHOWN_OBSERVATIONS:
                out.append(f"  - ... {len(story.observations) - item.SHOWN_OBSERVATIONS} more (the JSON report has them)\n")
    return [Block("".join(out) + "\n")]


# --- the run --------------------------------------------------------------------------------

@DRAW.of(Environment)
def _environment(item: Environment, ctx: Ctx) -> list[Block]:
    rows = [[md_code(r.key, table=True), md_code(r.text[:200], table=True)] for r in item.rows]
    body = _table(("field", "value"), rows) if rows else f"{md_text(item.EMPTY)}\n"
    return [Block(f"### Your current environment\n\n{body}\n")]


@DRAW.of(Processes)
def _processes(item: Processes, ctx: Ctx) -> list[Block]:
    shown, rest = item.shown(compact=False)
    rows = [[_cell(p.rank), _cell(p.pid), md_text(p.role), f"**{p.status.value}**", _cell(p.exit_code),
             _cell_text(p.how)] for p in shown]
    out = "#### Processes\n" + (_table(("rank", "pid", "role", "status", "exit", "how it went down"), rows)
                                if rows else f"{md_text(item.EMPTY)}\n")
    if rest:
        out += f"\n... {md_text(rest)} (the JSON report has them)\n"
    return [Block(out + "\n")]


@DRAW.of(Checklist)
def _checklist(item: Checklist, ctx: Ctx) -> list[Block]:
    rows = [[md_text(c.check), CHECK_MARKS[c.status.value], _cell_text(c.finding),
             md_code(c.evidence, table=True) if c.evidence else ""] for c in item.items]
    return [Block(f"#### {item.entry.title}\n" + _table(("check", "", "finding", "evidence"), rows) + "\n")]


@DRAW.of(Timeline)
def _timeline(item: Timeline, ctx: Ctx) -> list[Block]:
    return [Block("### Timeline\n\n" + mermaid(item) + "\n")]


def mermaid(item: Timeline) -> str:
    """The timeline's sequence diagram, one lane per rank (plus engine, API server,
    client), as Mermaid."""
    lanes, messages = item.sequence
    if not messages:
        return "_No failure events to draw._\n"
    participants = [f"    participant {lane} as {label}" for lane, label in lanes]
    lines = [f"    {m.src}-){m.dst}: {_mm(m.text)}" if isinstance(m, Arrow) else f"    Note over {m.lane}: {_mm(m.text)}"
             for m in messages]
    return "```mermaid\nsequenceDiagram\n" + "\n".join(participants + lines) + "\n```\n"


def _mm(text) -> str:
    """Text inert inside a Mermaid message: no statement breaks, comments, HTML or
    Mermaid's own entity and link syntax."""
    text = " ".join(plain(str(text)).split())
    for ch, rep in ((";", ","), ("#", "no."), ("<", "‹"), (">", "›"), ("{", "("), ("}", ")"), ("%", " pct"),
                    (":", " -"), ("`", "'"), ("&", "+"), ("\"", "'")):
        text = text.replace(ch, rep)
    return text[:110]


@DRAW.of(Inputs)
def _inputs(item: Inputs, ctx: Ctx) -> list[Block]:
    shown, hidden = item.shown
    rows = []
    for s in shown:
        rows.append([md_code(s.path, table=True), md_text(s.kind), _cell(s.lines), str(s.events), _cell(s.unparsed_lines),
                     _cell_text("; ".join(s.problems[:5]))])
    out = f"### Inputs\n\n{md_text(item.input_summary.sentence)}.\n\n"
    out += _table(("file", "kind", "lines", "events", "unparsed", "problems"), rows)
    if hidden:
        out += f"\n... {hidden} more inputs (the JSON report has them)\n"
    return [Block(out + "\n")]


@DRAW.of(Signature)
def _signature(item: Signature, ctx: Ctx) -> list[Block]:
    parts = f" ({md_text(item.contributed)})" if item.contributed else ""
    return [Block(f"Signature: {md_code(item.signature)}{parts}\n\n")]


# --- the evidence ---------------------------------------------------------------------------

@DRAW.of(Evidence)
def _evidence(item: Evidence, ctx: Ctx) -> list[Block]:
    # the summary line is raw HTML (an HTML block): HTML-escaped, not Markdown-escaped
    return [Block("### Evidence\n\n")] + [
        Block(f"<details><summary>{md_html(x.label)} - {md_html(x.source, code=True)}</summary>\n\n"
              f"{md_fence(x.text)}\n</details>\n\n", trimmable=True) for x in item.excerpts]


@DRAW.of(Redaction)
def _redaction(item: Redaction, ctx: Ctx) -> list[Block]:
    # the report's own sentence; its counts are numbers and the redaction rules' names
    return [Block(f"\n_{item.sentence}_\n")]


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return "-" if value is None else str(value)


def _cell_text(value) -> str:
    return md_text(str(value)[:300]).replace("|", "\\|")
