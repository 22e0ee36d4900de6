"""The terminal report (rich): the headline first, then known issues and next steps, the
processes, the timeline, the checklist, the environment and the inputs.

Fits the terminal's width (80 columns when piped, or $COLUMNS); plain text without box
characters or styles when stdout is not a terminal or NO_COLOR is set.  Every string
from the inputs goes through ``inert.plain`` first: a log cannot move the cursor, set
the title, write the clipboard or open a link.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from forensics.inert import plain

THEME = Theme({
    "failure": "bold red", "origin": "bold magenta", "surface": "red", "collateral": "yellow",
    "healthy": "green", "unknown": "dim", "label": "bold", "note": "dim", "command": "cyan",
    "check.pass": "green", "check.fail": "bold red", "check.unknown": "dim", "likely": "bold yellow",
    "possible": "yellow", "source": "dim",
})
STATUS_STYLE = {"origin": "origin", "surfaced": "surface", "failed": "surface", "collateral": "collateral", "healthy": "healthy",
                "unknown": "unknown"}
FAILURE_KINDS = {"cuda-error", "device-assert", "worker-died", "oom", "sanitizer", "cuda-gdb", "fatal-signal",
                 "peer-failure", "xid", "core-dump", "exception"}


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


# The sections after the verdict, by the name --show takes.  Each is a function of the
# document, the console's width and whether it is the compact (first-screen) form.
SECTION_NAMES = ("known-issues", "next-steps", "explain", "processes", "timeline", "checklist", "env", "inputs")
# The first screen: the verdict, then these, in their compact form.  It fits 40 lines at
# 80 columns (tests/test_reports.py); the rest is one --full or --show away.
FIRST_SCREEN = ("known-issues", "next-steps", "processes", "inputs")
COMPACT_STEPS = 3
COMPACT_COMMANDS = 2        # the first screen shows the commands of the first two steps, the title of the third
COMPACT_PROCESSES = 4
PAGER = "less -FRX"


def render(document: dict, out: TextIO, options) -> None:
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


def _render(document: dict, console: Console, options) -> None:
    plain_output = console.no_color
    compact = not options.full and not options.show and not options.explain and not options.verbose
    console.print(_verdict_panel(document, plain_output, compact))
    if options.quiet:
        return
    if options.show:
        names = [n for n in SECTION_NAMES if n in options.show]
    elif compact:
        names = list(FIRST_SCREEN)
    else:
        names = [n for n in SECTION_NAMES if n != "explain" or options.explain or options.verbose]
    for name in names:
        section = SECTIONS[name](document, console.width, plain_output, compact, options)
        if section is not None:
            console.print(section)
    if compact:
        hidden = len(document["next_actions"]) - COMPACT_STEPS
        more = f"{hidden} more next steps; " if hidden > 0 else ""
        console.print(Text(f"More: {more}--full, or --show "
                           + ",".join(n for n in SECTION_NAMES if n not in FIRST_SCREEN[:-1]), style="note"))
    elif document["signature"]:
        console.print(Text(f"signature: {document['signature']}", style="note"))
    if not compact and not options.show:
        # the answer again at the bottom of a long report: it is what stays on the screen
        console.print(Text(plain(document["verdict"]["headline"]), style="label"))


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


def _explain_section(document: dict, width: int, plain_output: bool, compact: bool, options):
    v = document["verdict"]
    if not v["explanation"]:
        return None
    table = Table(box=None if plain_output else box.SIMPLE, title="How the rules decided", title_justify="left")
    table.add_column("rule", style="command", no_wrap=True)
    table.add_column("conclusion")
    for item in v["explanation"]:
        table.add_row(item["rule"], Text(plain(item["text"])))
    if options.explain and document.get("stories"):
        parts = [table, Text("What each process's lines say happened to it (the stories)", style="label")]
        for story in document["stories"]:
            parts.append(Text(f" {plain(story['who'])}: {story['status'] or 'not in the table'}", style="label"))
            for seen in story["observations"][:12]:
                parts.append(Text(f"   {seen['seen']:<12} {plain(seen['what'])[:100]} [{plain(seen['source'])}]"))
            if len(story["observations"]) > 12:
                parts.append(Text(f"   ... {len(story['observations']) - 12} more (--format json)", style="note"))
        return Group(*parts)
    return table


def _row(label: str, *parts):
    """A labelled line whose continuation lines hang under the text, not the label."""
    grid = Table.grid(padding=0)
    grid.add_column(width=8, no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(label, style="label"), Text.assemble(*parts))
    return grid


COMPACT_SURFACES = 3


def _verdict_panel(document: dict, plain_output: bool, compact: bool = False):
    v = document["verdict"]
    lines: list[Text] = [Text(plain(v["headline"]), style="failure" if v["failure_kind"] else "healthy")]
    error = v["error"]
    if error:
        sticky = "sticky" if error["sticky"] else "not sticky"
        code = f" ({error['code']})" if error["code"] is not None else ""
        lines.append(_row("Error", (f"{error['name']}{code}", "failure"), f" - {plain(error['message'])}; {sticky}"
                          + (f"; surfaced as {error['surfaced_as']}" if error.get("surfaced_as") else "")
                          + (f"; what the host sees after the device's {plain(error['from_device_exception'])}"
                             if error.get("from_device_exception") else "")))
    elif v["failure_kind"]:
        lines.append(_row("Failure", (v["failure_kind"], "failure")))
    most = COMPACT_SURFACES if compact else 6
    groups = _surface_groups(v["surfaces"])
    for where, members in groups[:most]:
        who = ", ".join(s["who"] for s in members)
        source = members[0]["source"] + (f" +{len(members) - 1}" if len(members) > 1 else "")
        lines.append(_row("Surface", f"{plain(who)}: {plain(where)}", (f"  [{plain(source)}]", "source")))
    if len(groups) > most:
        lines.append(Text(f"        ... {sum(len(m) for _, m in groups[most:])} more surfaces "
                          f"({'--full' if compact else '--format json'})", style="note"))
    origin, faulting = v["origin"], v["faulting_process"]
    if origin:
        lines.append(_row("Origin", (plain(origin["kernel"]), "origin"),
                          (f" at {plain(origin['location'])}" if origin.get("location") else ""),
                          f" on {plain(origin['who'])}: {plain(origin['fault'])}",
                          (f"  confidence {origin['confidence']}", "label")))
        if origin.get("launch_site"):
            lines.append(Text(f"        launched from {plain(origin['launch_site'])}", style="note"))
        named_by = origin["evidence"][0] if origin["evidence"] else None
        if named_by:
            lines.append(Text(f"        named by {plain(named_by['kind'])} [{plain(named_by['source'])}]", style="source"))
        for note in origin["notes"][:1] if compact else origin["notes"]:
            lines.append(Text(f"        {plain(note)}", style="note"))
    elif faulting:
        lines.append(_row("Origin", ("kernel unknown", "collateral"),
                          f" - {plain(faulting['who'])} faulted on the device: {plain(faulting['fault'])}"))
    elif v["origin_unknown"]:
        lines.append(_row("Origin", ("unknown", "collateral"), f" - {v['origin_unknown']}"))
    first = v["first_failure"]
    if first:
        lines.append(_row("First", f"{plain(first['who'])}: {plain(first['basis'])}"))
        if first.get("launcher_opinion"):
            lines.append(Text(f"        {plain(first['launcher_opinion'])}", style="note"))
    collateral = [r for r in document["ranks"] if r["status"] == "collateral"]
    if collateral:
        names = ", ".join(plain(r['who']) for r in collateral[:12]) + \
            (f" ... ({len(collateral)} in all; --format json lists them)" if len(collateral) > 12 else "")
        lines.append(_row("Collat.", plain(names)))
    steps = v.get("steps") or []
    for step in steps[:4] if compact else steps:
        # the capture plugin's snapshot: what each rank was running, never the origin
        lines.append(_row("Step", f"{plain(step['who'])} {plain(step['text'])}", (f"  [{plain(step['source'])}]", "source")))
    if compact and len(steps) > 4:
        lines.append(Text(f"        ... {len(steps) - 4} more ranks' steps (--full)", style="note"))
    hardware = v.get("hardware")
    if hardware:
        lines.append(_row("HW/SW", f"{hardware['opinion']}: {plain(hardware['basis'])}"))
    for note in v["notes"]:
        lines.append(Text(plain(note), style="note"))
    for failure in v["rule_failures"]:
        lines.append(Text(plain(failure), style="failure"))
    if not compact:
        lines.append(Text(""))
        lines.append(Text(plain(v["summary"])))
    if plain_output:
        return Group(Text("forensics verdict", style="label"), *lines)
    return Panel(Group(*lines), title="forensics verdict", title_align="left", box=box.ROUNDED)


def _surface_groups(surfaces: list[dict]) -> list[tuple[str, list[dict]]]:
    """Surfaces at the same call site, one row for all of them (four ranks failing in the
    same finaliser), in the document's order."""
    groups: dict[str, list[dict]] = {}
    for s in surfaces:
        where = (_short(s["file"]) + (f":{s['line']}" if s["line"] is not None else "")
                 + (f" in {s['function']}" if s["function"] else "")) if s["file"] else "no source location"
        api = f"{s['api']} at " if s["api"] else ""
        called = f", called from {s['caller']}" if s.get("caller") else ""
        groups.setdefault(api + where + called, []).append(s)
    return list(groups.items())


def _known_issues(document: dict, width: int = 80, plain_output: bool = True, compact: bool = False, options=None):
    if not document["known_issues"]:
        return None
    parts = [Text("Known issues", style="label")]
    if compact:
        # one line each: the workaround is the first next step
        for k in document["known_issues"][:2]:
            parts.append(Text.assemble((f" {k['likelihood'].upper()} ", k["likelihood"]), (k["id"], "label"),
                                       f" - {plain(k['title'])}", no_wrap=True, overflow="ellipsis"))
        return Group(*parts)
    for k in document["known_issues"]:
        parts.append(Text.assemble((f" {k['likelihood'].upper()} ", k["likelihood"]), (k["id"], "label"),
                                   f" - {k['title']}"))
        parts.append(Text(f"   workaround: {k['workaround']}"))
        parts.append(Text(f"   matched: {'; '.join(k['matched'])}" +
                          (f"; cannot tell: {', '.join(k['unknown'])}" if k["unknown"] else "")))
        parts.append(Text(f"   does not prove: {k['does_not_prove']}", style="note"))
        for ref in k["references"][:3]:
            parts.append(Text(f"   {ref}", style="command"))
    return Group(*parts)


def _next_steps(document: dict, width: int = 80, plain_output: bool = True, compact: bool = False, options=None):
    steps = document["next_actions"]
    if not steps:
        return None
    parts = [Text("Next steps (most confidence gained first)", style="label")]
    for n, step in enumerate(steps[:COMPACT_STEPS] if compact else steps, 1):
        parts.append(_hanging(f" {n}. ", plain(step.get("title") or step["why"]), width))
        if not compact and step.get("title"):
            parts.append(_hanging("    ", plain(step["why"]), width, style="note"))
        if step["command"] and (not compact or n <= COMPACT_COMMANDS):
            parts.append(Text(shell_wrap(plain(step["command"]), max(40, width - 6), indent="    "), style="command"))
        for warning in step["warnings"]:
            parts.append(_hanging("    note: ", plain(warning), width, style="note"))
    return Group(*parts)


def _hanging(lead: str, text: str, width: int, style: str | None = None):
    """``lead`` then ``text``, its wrapped lines under the text, not at column 0."""
    grid = Table.grid(padding=0)
    grid.add_column(width=len(lead), no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(lead, style=style or ""), Text(text, style=style or ""))
    return grid


def _ranks_table(document: dict, width: int = 80, plain_output: bool = True, compact: bool = False, options=None):
    ranks = document["ranks"]
    if not ranks:
        return None
    if compact:
        return _processes_compact(ranks)
    table = Table(title="Processes", title_justify="left", box=None if plain_output else box.SIMPLE_HEAD)
    table.add_column("rank", justify="right", no_wrap=True)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("exit", justify="right", no_wrap=True)
    # the first screen: one line a process (the evidence is in --show processes)
    table.add_column("how it went down" if compact else "how it went down [evidence]",
                     overflow="ellipsis" if compact else "fold", no_wrap=compact)
    shown = ranks[:64]
    if compact:
        # the first screen: who failed, then who went down, then the rest as a count
        order = {"origin": 0, "failed": 1, "surfaced": 1, "collateral": 2, "unknown": 3, "healthy": 4}
        shown = sorted(ranks, key=lambda r: order.get(r["status"], 5))[:COMPACT_PROCESSES]
    for r in shown:
        detail = plain(r["failure"] or (r["first_error"] or "")[:90])
        if r.get("in_step") and not compact:
            detail = f"{detail}; {plain(r['in_step'])}" if detail else plain(r["in_step"])
        if r["first_error_source"] and r["status"] != "healthy" and not compact:
            detail = f"{detail} [{plain(r['first_error_source'])}]".strip()
        table.add_row(_n(r["rank"]), _n(r["pid"]), plain(r["role"]), Text(r["status"], style=STATUS_STYLE[r["status"]]),
                      _n(r["exit_code"]), Text(detail))
    if len(ranks) > len(shown):
        rest = ranks[len(shown):] if not compact else [r for r in ranks if r not in shown]
        counts = ", ".join(f"{n} {status}" for status, n in sorted(_count(r["status"] for r in rest).items()))
        table.add_row("", "", "", "", "", Text(f"... {len(rest)} more: {counts} (--show processes)", style="note"))
    return table


def _processes_compact(ranks: list[dict]) -> Group:
    """The first screen's processes: who failed, then who went down, one line each (cut
    at the screen's edge); the rest as a count."""
    order = {"origin": 0, "failed": 1, "surfaced": 1, "collateral": 2, "unknown": 3, "healthy": 4}
    shown = sorted(ranks, key=lambda r: order.get(r["status"], 5))[:COMPACT_PROCESSES]
    lines = [Text("Processes", style="label")]
    width = max(len(plain(r["who"])) for r in shown)
    for r in shown:
        detail = plain(r["failure"] or (r["first_error"] or ""))
        lines.append(Text.assemble(f" {plain(r['who']):<{width}}  ", (f"{r['status']:<10}", STATUS_STYLE[r["status"]]),
                                   f" {detail}", no_wrap=True, overflow="ellipsis"))
    rest = [r for r in ranks if r not in shown]
    if rest:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(_count(r["status"] for r in rest).items()))
        lines.append(Text(f" ... {len(rest)} more: {counts} (--show processes)", style="note"))
    return Group(*lines)


def _count(values) -> dict:
    out: dict = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def _timeline_section(document: dict, width: int, plain_output: bool, compact: bool, options):
    return _timeline_table(document, options.timeline_rows, plain_output)


def _timeline_table(document: dict, rows: int, plain_output: bool) -> Table:
    events = [e for e in document["timeline"] if e["kind"] not in ("log", "exit") or e["severity"] in ("ERROR", "CRITICAL")]
    if len(events) > rows:
        first = next((i for i, e in enumerate(events) if e["kind"] in FAILURE_KINDS), 0)
        start = max(0, min(first - 2, len(events) - rows))
        events = events[start:start + rows]
    table = Table(title="Timeline around the failure (~: time taken from the line before; -: no wall-clock time)",
                  title_justify="left", box=None if plain_output else box.SIMPLE_HEAD)
    table.add_column("time", no_wrap=True)
    table.add_column("rank", justify="right")
    table.add_column("kind", no_wrap=True)
    table.add_column("what", overflow="fold")
    for e in events:
        when = e["time"][11:19] if e["time"] else "-"
        table.add_row(when + ("~" if e["time_inferred"] else ""), _n(e["rank"]), e["kind"],
                      Text.assemble(plain(e["message"][:110]), (f" [{plain(e['source'])}]", "source")))
    return table


def _checklist_table(document: dict, width: int = 80, plain_output: bool = True, compact: bool = False, options=None):
    if not document["checklist"]:
        return None
    table = Table(title="Incident checklist", title_justify="left", box=None if plain_output else box.SIMPLE_HEAD)
    table.add_column("check", overflow="fold")
    table.add_column("", no_wrap=True)
    table.add_column("finding", overflow="fold")
    for item in document["checklist"]:
        finding = plain(item["finding"]) + (f" [{plain(item['evidence'])}]" if item.get("evidence") else "")
        table.add_row(Text(item["check"]), Text(item["status"], style=f"check.{item['status']}"), Text(finding))
    return table


def _environment_table(document: dict, width: int = 80, plain_output: bool = True, compact: bool = False, options=None):
    if not document["environment"]:
        return None
    table = Table(title="Environment", title_justify="left", box=None if plain_output else box.SIMPLE_HEAD,
                  show_header=False)
    table.add_column("key", style="command", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in document["environment"].items():
        table.add_row(plain(key), Text(plain(str(value))[:120]))
    return table


COMPACT_PROBLEMS = 3


def _sources_section(document: dict, width: int, plain_output: bool, compact: bool, options):
    if compact:
        summary = document["input_summary"]
        parts = [Text(plain(summary["sentence"]), style="note" if summary["recognised"] else "collateral")]
        problems = summary["problems"]
        for problem in problems[:COMPACT_PROBLEMS]:
            parts.append(_hanging("  ! ", plain(problem), width, style="collateral"))
        if len(problems) > COMPACT_PROBLEMS or summary["more_problems"]:
            parts.append(Text(f"  ... {len(problems) - COMPACT_PROBLEMS + summary['more_problems']} more problems "
                              "(--show inputs)", style="note"))
        return Group(*parts)
    return _sources_table(document, options.verbose, plain_output)


def _sources_table(document: dict, verbose: bool, plain_output: bool) -> Table:
    table = Table(title="Inputs", title_justify="left", box=None if plain_output else box.SIMPLE_HEAD)
    table.add_column("file", overflow="fold")
    table.add_column("kind")
    table.add_column("lines", justify="right")
    table.add_column("events", justify="right")
    table.add_column("unparsed", justify="right")
    sources = document["sources"]
    shown = sources if len(sources) <= 40 else [s for s in sources if s["events"] or s["problems"]][:40]
    for s in shown:
        table.add_row(Text(plain(s["path"])), s["kind"], _n(s["lines"]), str(s["events"]), _n(s["unparsed_lines"]))
        for problem in s["problems"][:5]:
            table.add_row(Text(f"  ! {plain(problem)}", style="collateral"), "", "", "", "")
    if len(shown) < len(sources):
        table.add_row(Text(f"... {len(sources) - len(shown)} more inputs (--format json)", style="note"), "", "", "", "")
    return table


SECTIONS = {
    "known-issues": _known_issues, "next-steps": _next_steps, "explain": _explain_section,
    "processes": _ranks_table, "timeline": _timeline_section, "checklist": _checklist_table,
    "env": _environment_table, "inputs": _sources_section,
}
assert tuple(SECTIONS) == SECTION_NAMES


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
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return plain(path)


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
