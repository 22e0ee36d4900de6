"""The terminal report (rich): the verdict box (the headline and the verdict's findings),
then the report's other sections in the document's order - on the first screen only those
registered for it, in their compact form; with --full all of them; with --show those named.
Each section is drawn by its function here (``@DRAW.of``); what it says, the document decided.

Fits the terminal's width (80 columns when piped, or $COLUMNS); plain text without box
characters or styles when stdout is not a terminal or NO_COLOR is set.  Every string
from the inputs goes through ``inert.plain`` first: a log cannot move the cursor, set
the title, write the clipboard or open a link.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TextIO

from rich import box
from rich.console import Console
from rich.console import Group as Rows
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from forensics.inert import plain
from forensics.report.base import Drawers, Form, Group, Mark, Phrase, Section, entries
from forensics.report.document import Document
from forensics.report.sections import (Chain, Checklist, Environment, Error, Evidence, Explain, FirstFailure, Hang,
                                       Hardware, Headline, Inputs, KnownIssues, NextSteps, Notes, Origin, Processes,
                                       Redaction, Signature, Steps, Summary, Surfaces, Timeline)

THEME = Theme({
    "failure": "bold red", "origin": "bold magenta", "surface": "red", "collateral": "yellow",
    "healthy": "green", "unknown": "dim", "label": "bold", "note": "dim", "command": "cyan",
    "check.pass": "green", "check.fail": "bold red", "check.unknown": "dim", "likely": "bold yellow",
    "possible": "yellow", "source": "dim",
    # a process's status by its name
    "surfaced": "red", "failed": "red",
})


def console_for(out: TextIO, options) -> Console:
    interactive = getattr(out, "isatty", lambda: False)()
    no_color = bool(os.environ.get("NO_COLOR")) or not interactive
    width = options.width or _env_width() or (None if interactive else 80)
    return Console(file=out, width=width, theme=THEME, no_color=no_color, highlight=False, emoji=False,
                   markup=False, force_terminal=interactive and not no_color, safe_box=True,
                   legacy_windows=False) if not no_color else \
        Console(file=out, width=width, theme=THEME, no_color=True, highlight=False, emoji=False, markup=False,
                color_system=None, force_terminal=False)


def _env_width() -> int | None:
    try:
        value = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return value if 40 <= value <= 1000 else None


PAGER = "less -FRX"
MARK_STYLE = {Mark.FAILURE: "failure", Mark.ORIGIN: "origin", Mark.UNKNOWN: "collateral", Mark.LABEL: "label",
              Mark.NOTE: "note", Mark.NONE: ""}
# the verdict box's rows: an 8-column label, the text hanging under itself
ROW_LABEL = 8

DRAW = Drawers("terminal")


@dataclass(frozen=True)
class Ctx:
    width: int
    plain_output: bool
    compact: bool                   # the first screen: each section in its compact form
    options: object


def render(document: Document, out: TextIO, options) -> None:
    console = console_for(out, options)
    if options.pager and console.is_terminal and not options.quiet:
        with console.capture() as captured:
            _render(document, console, options)
        text = captured.get()
        if text.count("\n") > console.height and _page(text):
            return
        out.write(text)
        return
    _render(document, console, options)


def body_sections(document: Document, options, compact: bool) -> list[Section]:
    """The body sections this report shows: --show's, the first screen's, or all of
    them (those only asked for, with --explain or -v)."""
    asked = options.explain or options.verbose
    body = [s for s in document.sections if s.entry.group is Group.BODY and s.present]
    if options.show:
        return [s for s in body if s.entry.show in options.show]
    if compact:
        return [s for s in body if s.entry.first_screen]
    return [s for s in body if not s.entry.opt_in or asked]


def _render(document: Document, console: Console, options) -> None:
    plain_output = console.no_color
    compact = not options.full and not options.show and not options.explain and not options.verbose
    ctx = Ctx(console.width, plain_output, compact, options)
    console.print(_verdict_panel(document, ctx))
    if options.quiet:
        return
    for item in body_sections(document, options, compact):
        drawn = DRAW.draw(item, ctx)
        if drawn is not None:
            console.print(drawn)
    if compact:
        console.print(_more(document, ctx))
    elif not options.show:
        # the answer again at the bottom of a long report: it is what stays on the screen
        console.print(Text(plain(document.get(Headline).text), style="label"))


def _more(document: Document, ctx: Ctx) -> Text:
    """Where the rest of the report is: one line, the section names that fit it."""
    hidden = document.get(NextSteps).hidden_on_first_screen
    lead = f"More: {hidden} more next steps; " if hidden else "More: "
    lead += "--full, or --show "
    # what --show adds: the sections the first screen leaves out (those only asked for
    # have their own option), and the inputs, which it sums up in a line
    names = [e.show for e in entries() if e.show and not e.opt_in and (not e.first_screen or e.name == "inputs")]
    shown = ""
    for name in names:
        candidate = f"{shown},{name}" if shown else name
        if len(lead) + len(candidate) + 4 > ctx.width:
            shown += ",..."
            break
        shown = candidate
    return Text(lead + shown, style="note")


def _page(text: str) -> bool:
    """Through the pager ($FORENSICS_PAGER, $PAGER or less -FRX, as git does); False when
    none could be started (the report is then printed as it is)."""
    import shlex
    import subprocess
    command = os.environ.get("FORENSICS_PAGER") or os.environ.get("PAGER") or PAGER
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if not argv or argv[0] == "cat":
        return False
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
    try:
        pager = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
    except OSError:
        return False
    try:
        pager.communicate(text.encode("utf-8", "replace"))
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    return True


def text_of(words: Phrase, style: str = "") -> Text:
    """A phrase as rich text: every part inert (``plain``), styled by what it marks;
    an evidence location in brackets, dimmed."""
    parts = []
    for span in words:
        if span.form is Form.SOURCE:
            parts.append((f"[{plain(span.text)}]", "source"))
        else:
            parts.append((plain(span.text), MARK_STYLE[span.mark] or style))
    return Text.assemble(*parts, style=style)


def _row(label: str, content) -> Table:
    """A labelled line whose continuation lines hang under the text, not the label."""
    grid = Table.grid(padding=0)
    grid.add_column(width=ROW_LABEL, no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(label, style="label"), content if not isinstance(content, tuple) else text_of(content))
    return grid


def _aside(text: str, style: str = "note") -> Table:
    """A line under a row's text, in its column (wrapped lines too)."""
    return _row("", Text(plain(text), style=style))


def _aside_phrase(words: Phrase, style: str = "note") -> Table:
    return _row("", text_of(words, style))


def _verdict_panel(document: Document, ctx: Ctx):
    rows: list = []
    for item in document.sections:
        if item.entry.group is Group.BODY or not item.present:
            continue
        if ctx.compact and not item.entry.first_screen:
            continue
        rows += DRAW.draw(item, ctx)
    if ctx.plain_output:
        return Rows(Text("forensics verdict", style="label"), *rows)
    return Panel(Rows(*rows), title="forensics verdict", title_align="left", box=box.ROUNDED)


# --- the verdict box's rows ---------------------------------------------------------------

@DRAW.of(Headline)
def _headline(item: Headline, ctx: Ctx) -> list:
    return [Text(plain(item.text), style="failure" if item.failed else "healthy")]


@DRAW.of(Summary)
def _summary(item: Summary, ctx: Ctx) -> list:
    return [Text(plain(item.text)), Text("")]


@DRAW.of(Error)
def _error(item: Error, ctx: Ctx) -> list:
    return [_row(item.label, item.line)]


@DRAW.of(Surfaces)
def _surfaces(item: Surfaces, ctx: Ctx) -> list:
    groups, hidden = item.shown(ctx.compact)
    rows = [_row("Surface", g.line) for g in groups]
    if hidden:
        rows.append(_aside(item.more(hidden, ctx.compact)))
    return rows


@DRAW.of(Origin)
def _origin(item: Origin, ctx: Ctx) -> list:
    rows = [_row("Origin", item.line)]
    if item.launched_from:
        rows.append(_aside_phrase(item.launched_from))
    if item.named_by:
        rows.append(_aside_phrase(item.named_by, "source"))
    notes = item.notes[:item.FIRST_SCREEN_NOTES] if ctx.compact else item.notes
    rows += [_aside(note) for note in notes]
    return rows


@DRAW.of(FirstFailure)
def _first(item: FirstFailure, ctx: Ctx) -> list:
    rows = []
    if item.first:
        rows.append(_row("First", item.line))
        if item.first.launcher_opinion:
            rows.append(_aside(item.first.launcher_opinion))
    if item.collateral:
        rows.append(_row("Collat.", Text(plain(item.collateral_names))))
    return rows


@DRAW.of(Hang)
def _hang(item: Hang, ctx: Ctx) -> list:
    return [_row("Hang", item.line)]


@DRAW.of(Steps)
def _steps(item: Steps, ctx: Ctx) -> list:
    rows, more = item.shown(ctx.compact)
    out: list = [_row("Step", item.line(st)) for st in rows]
    if more:
        out.append(Text(f"        ... {more} more ranks' steps (--full)", style="note"))
    return out


@DRAW.of(Hardware)
def _hardware(item: Hardware, ctx: Ctx) -> list:
    return [_row("HW/SW", item.line)]


@DRAW.of(Notes)
def _notes(item: Notes, ctx: Ctx) -> list:
    return [Text(plain(n), style="note") for n in item.notes] + \
        [Text(plain(f), style="failure") for f in item.rule_failures]


# --- the sections after it ------------------------------------------------------------------

def _title(item: Section) -> Text:
    return Text(item.entry.title, style="label")


@DRAW.of(KnownIssues)
def _known_issues(item: KnownIssues, ctx: Ctx):
    parts = [_title(item)]
    if ctx.compact:
        # one line each: the workaround is the first next step
        for k in item.issues[:item.FIRST_SCREEN]:
            parts.append(Text.assemble((f" {k.likelihood.upper()} ", k.likelihood), (plain(k.id), "label"),
                                       f" - {plain(k.title)}", no_wrap=True, overflow="ellipsis"))
        return Rows(*parts)
    for k in item.issues:
        parts.append(Text.assemble((f" {k.likelihood.upper()} ", k.likelihood), (plain(k.id), "label"),
                                   f" - {plain(k.title)}"))
        parts.append(Text(f"   workaround: {plain(k.workaround)}"))
        parts.append(Text(f"   matched: {plain(item.matched_text(k))}"))
        parts.append(Text(f"   does not prove: {plain(k.does_not_prove)}", style="note"))
        for ref in k.references[:3]:
            parts.append(Text(f"   {plain(ref)}", style="command"))
    return Rows(*parts)


@DRAW.of(NextSteps)
def _next_steps(item: NextSteps, ctx: Ctx):
    parts = [_title(item)]
    steps = item.steps[:item.FIRST_SCREEN] if ctx.compact else item.steps
    for n, step in enumerate(steps, 1):
        parts.append(_hanging(f" {n}. ", plain(step.heading), ctx.width))
        if not ctx.compact and step.detail:
            parts.append(_hanging("    ", plain(step.detail), ctx.width, style="note"))
        if step.command and (not ctx.compact or n <= item.FIRST_COMMANDS):
            parts.append(Text(shell_wrap(plain(step.command), max(40, ctx.width - 6), indent="    "), style="command"))
        for warning in step.warnings:
            parts.append(_hanging("    note: ", plain(warning), ctx.width, style="note"))
    return Rows(*parts)


def _hanging(lead: str, text: str, width: int, style: str | None = None):
    """``lead`` then ``text``, its wrapped lines under the text, not at column 0."""
    grid = Table.grid(padding=0)
    grid.add_column(width=len(lead), no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(lead, style=style or ""), Text(text, style=style or ""))
    return grid


@DRAW.of(Chain)
def _chain(item: Chain, ctx: Ctx):
    parts = [_title(item)]
    for n, step in enumerate(item.steps, 1):
        lead = f" {n}. "
        grid = Table.grid(padding=0)
        grid.add_column(width=len(lead), no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(Text(lead), text_of(step))
        parts.append(grid)
    return Rows(*parts)


@DRAW.of(Explain)
def _explain(item: Explain, ctx: Ctx):
    table = Table(box=None if ctx.plain_output else box.SIMPLE, title=item.entry.title, title_justify="left")
    table.add_column("rule", style="command", no_wrap=True)
    table.add_column("conclusion")
    for e in item.explanations:
        table.add_row(plain(e.rule), Text(plain(e.text)))
    if not (ctx.options.explain and item.stories):
        return table
    parts = [table, Text(item.STORY_TITLE, style="label")]
    for story in item.stories:
        parts.append(Text(f" {plain(story.who)}: {story.status_text}", style="label"))
        for seen in story.observations[:item.SHOWN_OBSERVATIONS]:
            parts.append(Text(f"   {seen.seen:<12} {plain(seen.what)[:100]} [{plain(seen.source)}]"))
        if len(story.observations) > item.SHOWN_OBSERVATIONS:
            parts.append(Text(f"   ... {len(story.observations) - item.SHOWN_OBSERVATIONS} more (--format json)",
                              style="note"))
    return Rows(*parts)


@DRAW.of(Environment)
def _environment(item: Environment, ctx: Ctx):
    if not item.rows:
        return Rows(_title(item), Text(f" {item.EMPTY}", style="note"))
    table = Table(title=item.entry.title, title_justify="left", box=None if ctx.plain_output else box.SIMPLE_HEAD,
                  show_header=False)
    table.add_column("key", style="command", no_wrap=True)
    table.add_column("value", overflow="fold")
    for row in item.rows:
        table.add_row(plain(row.key), Text(plain(row.text)[:120]))
    return table


@DRAW.of(Processes)
def _processes(item: Processes, ctx: Ctx):
    rows, rest = item.shown(ctx.compact)
    if ctx.compact:
        # one line a process, cut at the screen's edge (the evidence is in --show processes)
        lines = [_title(item)]
        if not rows:
            return Rows(*lines, Text(f" {item.EMPTY}", style="note"))
        width = max(len(plain(p.who)) for p in rows)
        for p in rows:
            lines.append(Text.assemble(f" {plain(p.who):<{width}}  ", (f"{p.status.value:<10}", p.status.value),
                                       f" {plain(p.how)}", no_wrap=True, overflow="ellipsis"))
        if rest:
            lines.append(Text(f" ... {rest} (--show processes)", style="note"))
        return Rows(*lines)
    if not rows:
        return Rows(_title(item), Text(f" {item.EMPTY}", style="note"))
    table = Table(title=item.entry.title, title_justify="left", box=None if ctx.plain_output else box.SIMPLE_HEAD)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("exit", justify="right", no_wrap=True)
    table.add_column("how it went down [evidence]", overflow="fold")
    for p in rows:
        detail = plain(p.how[:90] if not p.failure else p.how)
        if p.evidence:
            detail = f"{detail} [{plain(p.evidence)}]".strip()
        table.add_row(_n(p.rank), _n(p.pid), plain(p.role), Text(p.status.value, style=p.status.value),
                      _n(p.exit_code), Text(detail))
    if rest:
        table.add_row("", "", "", "", "", Text(f"... {rest} (--show processes)", style="note"))
    return table


@DRAW.of(Checklist)
def _checklist(item: Checklist, ctx: Ctx):
    table = Table(title=item.entry.title, title_justify="left", box=None if ctx.plain_output else box.SIMPLE_HEAD)
    table.add_column("check", overflow="fold")
    table.add_column("", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for c in item.items:
        finding = plain(c.finding) + (f" [{plain(c.evidence)}]" if c.evidence else "")
        table.add_row(Text(plain(c.check)), Text(c.status.value, style=f"check.{c.status.value}"), Text(finding))
    return table


@DRAW.of(Timeline)
def _timeline(item: Timeline, ctx: Ctx):
    table = Table(title=item.TITLE, title_justify="left", box=None if ctx.plain_output else box.SIMPLE_HEAD)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right")
    table.add_column("kind", no_wrap=True)
    table.add_column("what", overflow="fold")
    for e in item.window:
        table.add_row(e.clock, _n(e.rank), e.kind, Text.assemble(plain(e.message[:110]), (f" [{plain(e.source)}]", "source")))
    return table


@DRAW.of(Inputs)
def _inputs(item: Inputs, ctx: Ctx):
    if ctx.compact:
        summary = item.input_summary
        parts = [Text(plain(summary.sentence), style="note" if summary.recognised else "collateral")]
        for problem in summary.problems[:item.FIRST_SCREEN_PROBLEMS]:
            parts.append(_hanging("  ! ", plain(problem), ctx.width, style="collateral"))
        if item.hidden_problems:
            parts.append(Text(f"  ... {item.hidden_problems} more problems (--show inputs)", style="note"))
        return Rows(*parts)
    table = Table(title=item.entry.title, title_justify="left", box=None if ctx.plain_output else box.SIMPLE_HEAD)
    table.add_column("file", overflow="fold")
    table.add_column("kind")
    table.add_column("lines", justify="right")
    table.add_column("events", justify="right")
    table.add_column("unparsed", justify="right")
    rows, hidden = item.shown
    for s in rows:
        table.add_row(Text(plain(s.path)), plain(s.kind), _n(s.lines), str(s.events), _n(s.unparsed_lines))
        for problem in s.problems[:5]:
            table.add_row(Text(f"  ! {plain(problem)}", style="collateral"), "", "", "", "")
    if hidden:
        table.add_row(Text(f"... {hidden} more inputs (--format json)", style="note"), "", "", "", "")
    return table


@DRAW.of(Signature)
def _signature(item: Signature, ctx: Ctx):
    return Text(f"signature: {plain(item.signature)}", style="note")


@DRAW.of(Evidence)
def _evidence(item: Evidence, ctx: Ctx):
    parts = [_title(item)]
    for x in item.excerpts:
        parts.append(Text.assemble((f" {plain(x.label)}", "label"), (f" [{plain(x.source)}]", "source")))
        parts.append(_hanging("   ", "\n".join(plain(line) for line in x.text.splitlines()), ctx.width))
    return Rows(*parts)


@DRAW.of(Redaction)
def _redaction(item: Redaction, ctx: Ctx):
    return Text(item.sentence, style="note")


def shell_wrap(command: str, width: int, indent: str = "") -> str:
    """A long command split at spaces into backslash-continued lines: still pastes."""
    lines, current = [], indent
    for word in command.split(" "):
        if current.strip() and len(current) + 1 + len(word) > width:
            lines.append(current + " \\")
            current = indent + "  " + word
        else:
            current = f"{current} {word}" if current.strip() else current + word
    lines.append(current)
    return "\n".join(lines)




def _n(value) -> str:
    return "-" if value is None else str(value)


def render_timeline(frame, out: TextIO, options, limit: int | None = 200) -> None:
    console = console_for(out, options)
    shown = frame if limit is None else frame.head(limit)
    table = Table(title=f"Timeline ({len(frame)} events)", title_justify="left",
                  box=None if console.no_color else box.SIMPLE_HEAD)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right")
    table.add_column("kind", no_wrap=True)
    table.add_column("severity", no_wrap=True)
    table.add_column("what", overflow="fold")
    for row in shown.itertuples(index=False):
        when = "-" if row.time is None or str(row.time) == "NaT" else row.time.strftime("%H:%M:%S")
        rank = "-" if str(row.rank) in ("<NA>", "nan", "None") else str(row.rank)
        table.add_row(when, rank, row.kind, row.severity,
                      Text.assemble(plain(str(row.message))[:120], (f" [{plain(row.source)}:{row.line}]", "source")))
    console.print(table)
    if limit is not None and len(frame) > limit:
        console.print(Text(f"... {len(frame) - limit} more; --limit 0 shows all, --csv/--jsonl export them",
                           style="note"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: forensics analyze")
