"""The terminal report (rich): verdict first, then ranks, timeline, environment, next steps.

Fits 80 columns; plain text when stdout is not a terminal or NO_COLOR is set (rich
honours both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from forensics.events import Kind, Severity
from forensics.report.json_report import TIMELINE_KINDS_ALWAYS

if TYPE_CHECKING:
    from forensics.case import Case

TIMELINE_FAILURE = {Kind.CUDA_ERROR, Kind.DEVICE_ASSERT, Kind.WORKER_DIED, Kind.OOM, Kind.SANITIZER,
                    Kind.CUDA_GDB, Kind.FATAL_SIGNAL, Kind.PEER_FAILURE}
STATUS_STYLE = {"origin": "bold red", "surfaced": "red", "collateral": "yellow",
                "healthy": "green", "unknown": "dim"}


def render(case: "Case", console: Console, explain: bool = False, timeline_rows: int = 14,
           quiet: bool = False, verbose: bool = False) -> None:
    ctx = case.context
    console.print(_verdict_panel(case))
    if quiet:
        return
    if explain and ctx.explanations:
        table = Table(box=box.SIMPLE, show_header=True, title="How the rules decided", title_justify="left")
        table.add_column("rule", style="cyan", no_wrap=True)
        table.add_column("conclusion")
        for rule, text in ctx.explanations:
            table.add_row(rule, Text(text))
        console.print(table)
    if ctx.ranks:
        console.print(_ranks_table(case))
    console.print(_timeline_table(case, timeline_rows))
    if ctx.known_issues:
        console.print(_known_issues(case))
    if ctx.checklist:
        console.print(_checklist_table(case))
    if ctx.environment:
        console.print(_environment_table(case))
    if ctx.next_steps:
        console.print(Text("Next steps (most confidence gained first)", style="bold"))
        for n, step in enumerate(ctx.next_steps, 1):
            command, _, why = step.partition("  # ")
            console.print(Text(f" {n}. {why}", style="bold") if why else Text(f" {n}."))
            console.print(Text(shell_wrap(command, console.width - 6, indent="    "), style="cyan"),
                          soft_wrap=True)
    console.print(_sources_table(case, verbose))
    if ctx.signature:
        console.print(Text(f"signature: {ctx.signature}", style="dim"))


def _verdict_panel(case: "Case") -> Panel:
    ctx = case.context
    lines: list[Text] = []
    if ctx.error:
        sticky = "sticky" if ctx.error.sticky else "not sticky"
        lines.append(Text.assemble(("Error   ", "bold"), (f"{ctx.error.name} ({ctx.error.code})", "bold red"),
                                   f" - {ctx.error.message}; {sticky}"))
    elif ctx.first_failure:
        lines.append(Text.assemble(("Failure ", "bold"), (ctx.first_failure.what, "bold red")))
    else:
        lines.append(Text.assemble(("Failure ", "bold"), ("none found in the inputs", "green")))
    for s in ctx.surfaces:
        where = f"{_short(s.file)}:{s.line} in {s.function}" if s.file else "(no frame)"
        api = f"{s.api} at " if s.api else ""
        lines.append(Text.assemble(("Surface ", "bold"), f"rank {_r(s.rank)} pid {s.pid}: {api}{where}",
                                   (f"  [{s.source}]", "dim")))
    if ctx.origin:
        o = ctx.origin
        lines.append(Text.assemble(("Origin  ", "bold"), (o.kernel, "bold magenta"),
                                   f" on rank {_r(o.rank)} pid {o.pid}: {o.fault}",
                                   (f"  confidence {o.confidence}", "bold")))
        for note in o.notes:
            lines.append(Text(f"        {note}", style="dim"))
    elif ctx.error and ctx.error.sticky:
        lines.append(Text.assemble(("Origin  ", "bold"), ("unknown", "bold yellow"),
                                   " - the calls above only reported an earlier asynchronous fault; "
                                   "no device evidence names the kernel (see next steps)"))
    if ctx.first_failure:
        f = ctx.first_failure
        lines.append(Text.assemble(("First   ", "bold"), f"rank {_r(f.rank)} pid {f.pid}: {f.basis}"))
    collateral = [v for v in ctx.ranks.values() if v.status == "collateral"]
    if collateral:
        names = ", ".join(f"rank {v.rank}" if v.rank is not None else (v.name or v.role) for v in collateral)
        lines.append(Text.assemble(("Collat. ", "bold"), names))
    lines.append(Text(""))
    lines.append(Text(ctx.summary))
    return Panel(Group(*lines), title="forensics verdict", title_align="left", box=box.ROUNDED)


def _ranks_table(case: "Case") -> Table:
    table = Table(title="Processes", title_justify="left", box=box.SIMPLE_HEAD, expand=False)
    table.add_column("rank", justify="right")
    table.add_column("pid", justify="right")
    table.add_column("role")
    table.add_column("status")
    table.add_column("exit", justify="right")
    table.add_column("how it went down [first error]", overflow="fold")
    for v in case.context.ranks.values():
        detail = v.failure or (v.first_error or "")[:90]
        if v.first_error_source and v.status != "healthy":
            detail = f"{detail} [{v.first_error_source}]".strip()
        table.add_row(_r(v.rank), str(v.pid), Text(v.role), Text(v.status, style=STATUS_STYLE.get(v.status, "")),
                      "" if v.exit_code is None else str(v.exit_code), Text(detail))
    return table


def _timeline_table(case: "Case", rows: int) -> Table:
    chosen = [e for e in case.events if e.kind in TIMELINE_KINDS_ALWAYS or e.severity >= Severity.ERROR]
    chosen = [e for e in chosen if e.kind not in (Kind.LOG, Kind.EXIT)]
    # a per-rank log repeats what the server console relayed: show each event once
    seen, unique = set(), []
    for e in chosen:
        key = (e.pid, e.kind, e.message, e.time)
        if key not in seen:
            seen.add(key)
            unique.append(e)
    chosen = unique
    if len(chosen) > rows:
        # The window that matters: from just before the first failure on.
        first = next((i for i, e in enumerate(chosen) if e.kind in TIMELINE_FAILURE), 0)
        start = max(0, min(first - 2, len(chosen) - rows))
        chosen = chosen[start:start + rows]
    table = Table(title="Timeline around the failure", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right")
    table.add_column("kind", no_wrap=True)
    table.add_column("what", overflow="fold")
    for e in chosen:
        when = e.time.strftime("%H:%M:%S") if e.time else "-"
        table.add_row(when + ("~" if e.time_inferred else ""), _r(e.rank), e.kind,
                      Text.assemble(e.message[:110], (f" [{e.where}]", "dim")))
    return table


CHECK_STYLE = {"pass": "green", "fail": "bold red", "unknown": "dim"}


def _checklist_table(case: "Case") -> Table:
    table = Table(title="Incident checklist", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("check", overflow="fold")
    table.add_column("", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for item in case.context.checklist:
        finding = item["finding"] + (f" [{item['evidence']}]" if item.get("evidence") else "")
        table.add_row(Text(item["check"]), Text(item["status"], style=CHECK_STYLE[item["status"]]), Text(finding))
    return table


def _known_issues(case: "Case") -> Group:
    parts = [Text("Known issues", style="bold")]
    for k in case.context.known_issues:
        parts.append(Text.assemble((f" {k['likelihood'].upper()} ", "bold yellow"), (k["id"], "bold"), f" - {k['title']}"))
        parts.append(Text(f"   matched: {'; '.join(k['matched'])}" +
                          (f"; cannot tell: {', '.join(k['unknown'])}" if k["unknown"] else "")))
        parts.append(Text(f"   workaround: {k['workaround']}"))
        parts.append(Text(f"   does not prove: {k['does_not_prove']}", style="dim"))
        for ref in k["references"][:3]:
            parts.append(Text(f"   {ref}", style="cyan"))
    return Group(*parts)


def _environment_table(case: "Case") -> Table:
    table = Table(title="Environment", title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("key", style="cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in case.context.environment.items():
        table.add_row(key, Text(str(value)[:120]))
    return table


def _sources_table(case: "Case", verbose: bool = False) -> Table:
    table = Table(title="Inputs", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("file", overflow="fold")
    table.add_column("kind")
    table.add_column("lines", justify="right")
    table.add_column("events", justify="right")
    table.add_column("unparsed", justify="right")
    quiet_inputs = [s for s in case.sources if not s.events and not s.problems and not s.unparsed_lines]
    shown = case.sources if len(case.sources) <= 40 else [s for s in case.sources if s not in quiet_inputs][:40]
    for s in shown:
        table.add_row(Text(s.relpath), s.kind, _n(s.lines), str(len(s.events)), _n(s.unparsed_lines))
        for problem in s.problems:
            table.add_row(Text(f"  ! {problem}", style="yellow"), "", "", "", "")
        if verbose:
            for lineno, text in s.unparsed_samples:
                table.add_row(Text(f"  ? {lineno}: {text[:70]}", style="dim"), "", "", "", "")
    if len(shown) < len(case.sources):
        table.add_row(Text(f"... {len(case.sources) - len(shown)} more inputs (see --format json)", style="dim"),
                      "", "", "", "")
    return table


def render_timeline(frame, console: Console, limit: int | None = 200) -> None:
    shown = frame if limit is None else frame.head(limit)
    table = Table(title=f"Timeline ({len(frame)} events)", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right")
    table.add_column("kind", no_wrap=True)
    table.add_column("sev", no_wrap=True)
    table.add_column("what", overflow="fold")
    for row in shown.itertuples(index=False):
        when = "-" if row.time is None or str(row.time) == "NaT" else row.time.strftime("%H:%M:%S")
        rank = "-" if str(row.rank) in ("<NA>", "nan", "None") else str(row.rank)
        table.add_row(when, rank, row.kind, row.severity[:4],
                      Text.assemble(str(row.message)[:120], (f" [{row.source}:{row.line}]", "dim")))
    console.print(table)
    if limit is not None and len(frame) > limit:
        console.print(Text(f"... {len(frame) - limit} more; --limit 0 shows all, --csv/--jsonl export them",
                           style="dim"))


def render_comparison(result, console: Console) -> None:
    table = Table(title="Runs", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("run", overflow="fold")
    table.add_column("group", justify="right")
    table.add_column("signature", no_wrap=True)
    table.add_column("fault | kernel or site | phase", overflow="fold")
    group_of = {}
    for n, (signature, runs) in enumerate(result.groups(), 1):
        for run in runs:
            group_of[run.name] = n
    for run in result.runs:
        short = run.name.rstrip("/").rsplit("/", 1)[-1]
        table.add_row(Text(short), str(group_of[run.name]),
                      Text((run.signature or "-").replace("forensics.sig/1:", "")), Text(run.parts))
    console.print(table)
    for line in result.reproduction():
        console.print(Text(line, style="bold"))
    diffs = result.differing_environment()
    if diffs:
        env = Table(title="Environment that differs", title_justify="left", box=box.SIMPLE_HEAD)
        env.add_column("field", style="cyan")
        for run in result.runs:
            env.add_column(Text(run.name.rstrip("/").rsplit("/", 1)[-1]), overflow="fold")
        for key, values in diffs.items():
            env.add_row(key, *[Text("-" if v is None else str(v)) for v in values])
        console.print(env)
    else:
        console.print(Text("No environment field differs between the runs.", style="dim"))


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


def _short(path: str | None) -> str:
    if not path:
        return "?"
    marker = "site-packages/"
    return path.split(marker, 1)[1] if marker in path else path


def _r(rank) -> str:
    return "-" if rank is None else str(rank)


def _n(value) -> str:
    return "-" if value is None else str(value)
