"""The Markdown report, made to be pasted into a GitHub issue.

Shape follows vLLM's bug template where it fits ("Your current environment", "Describe
the bug"), then what a maintainer needs: verdict and confidence, the causal chain, ranks,
checklist, known issues, next steps, a Mermaid timeline (one lane per rank), and the
evidence in collapsible blocks.  GitHub rejects comments over 65,536 characters: the
evidence is trimmed to fit, never the verdict, and the report says what was trimmed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from forensics.events import Event, Kind
from forensics.redact import Redactor

if TYPE_CHECKING:
    from forensics.case import Case

GITHUB_LIMIT = 65_536
EVIDENCE_LINES = 40            # lines of context per evidence excerpt
MERMAID_MAX_MESSAGES = 40
MAX_CHAIN = 24                 # causal-chain steps shown
MAX_ROWS = 64                  # process rows shown


def render(case: "Case", redact: bool = True, budget: int = GITHUB_LIMIT) -> str:
    redactor = Redactor() if redact else None
    clean = redactor.text if redactor else (lambda text: text)
    head = clean(_head(case))
    if len(head) > budget - 2000:
        # the verdict and causal chain come first; only the timeline and tables after it may go
        head = head[: head.index("### Timeline")] if "### Timeline" in head else head
        head = head[: budget - 2000] + "\n\n> report head cut to fit GitHub's limit\n"
    blocks = [clean(b) for b in _evidence_blocks(case)]
    room = budget - len(head) - 600          # the closing notes
    kept = []
    for block in blocks:                     # most important first: keep while they fit
        if len(block) > room:
            break
        kept.append(block)
        room -= len(block)
    body = head + "".join(kept)
    if len(kept) < len(blocks):
        body += (f"\n> {len(blocks) - len(kept)} evidence excerpt(s) trimmed to stay under GitHub's {budget:,}-"
                 "character limit; run `forensics analyze --format json` for everything.\n")
    if redactor is None:
        return body + "\n_Redaction: off._\n"
    counts = ", ".join(f"{n} {kind}" for kind, n in redactor.summary().items()) or "nothing found"
    return body + f"\n_Redacted before sharing: {counts}. Pseudonyms are consistent within this report._\n"


def _head(case: "Case") -> str:
    ctx = case.context
    out = []
    out.append(f"**Suggested title:** `[Bug]: {_title(case)}`\n")
    out.append("### Your current environment\n")
    out.append(_table(["", ""], [[f"`{k}`", _cell(v)] for k, v in ctx.environment.items()] or [["-", "-"]],
                      header=("field", "value")))
    out.append("\n### 🐛 Describe the bug\n")
    out.append(f"**Verdict:** {ctx.summary}\n")
    if ctx.origin:
        out.append(f"**Origin confidence:** {ctx.origin.confidence}"
                   + (f" - {'; '.join(ctx.origin.notes)}" if ctx.origin.notes else "") + "\n")
    elif ctx.error and ctx.error.sticky:
        out.append("**Origin:** unknown. The frames below only *reported* an earlier asynchronous fault "
                   f"({ctx.error.name} is sticky); no device evidence names the kernel.\n")
    out.append("\n#### Causal chain\n")
    chain = _chain(case)
    out.extend(f"{n}. {step}\n" for n, step in enumerate(chain[:MAX_CHAIN], 1))
    if len(chain) > MAX_CHAIN:
        out.append(f"{MAX_CHAIN + 1}. ... and {len(chain) - MAX_CHAIN} more (see the processes table and JSON)\n")
    out.append("\n#### Processes\n")
    verdicts = list(ctx.ranks.values())
    rows = [[_cell(v.rank), str(v.pid), v.role, f"**{v.status}**", _cell(v.exit_code),
             _cell(v.failure or "")] for v in verdicts[:MAX_ROWS]]
    out.append(_table(None, rows, header=("rank", "pid", "role", "status", "exit", "how it went down")))
    if len(verdicts) > MAX_ROWS:
        counts = {}
        for v in verdicts[MAX_ROWS:]:
            counts[v.status] = counts.get(v.status, 0) + 1
        out.append(f"\n... {len(verdicts) - MAX_ROWS} more processes: "
                   + ", ".join(f"{n} {s}" for s, n in counts.items()) + "\n")
    if ctx.checklist:
        out.append("\n#### Incident checklist\n")
        marks = {"pass": "✅ pass", "fail": "❌ fail", "unknown": "❔ unknown"}
        out.append(_table(None, [[c["check"], marks[c["status"]], _cell(c["finding"]), _cell(c.get("evidence") or "")]
                                 for c in ctx.checklist], header=("check", "", "finding", "evidence")))
    if ctx.known_issues:
        out.append("\n#### Known issues\n")
        for k in ctx.known_issues:
            out.append(f"- **{k['likelihood']}**: `{k['id']}` - {k['title']}  \n"
                       f"  matched: {'; '.join(k['matched'])}"
                       + (f"; cannot tell: {', '.join(k['unknown'])}" if k["unknown"] else "") + "  \n"
                       f"  workaround: {k['workaround']}  \n"
                       f"  does not prove: {k['does_not_prove']}  \n"
                       + "".join(f"  {ref}\n" for ref in k["references"]))
    if ctx.next_steps:
        out.append("\n#### Next steps (most confidence gained first)\n")
        for step in ctx.next_steps:
            command, _, why = step.partition("  # ")
            out.append(f"- {why or 'run'}:\n  ```sh\n  {command}\n  ```\n")
    out.append("\n### Timeline\n")
    out.append(mermaid(case))
    if ctx.signature:
        parts = ", ".join(f"{p['part']}={p['value']}" for p in ctx.signature_parts if p["contributed"])
        out.append(f"\nSignature: `{ctx.signature}` ({parts})\n")
    out.append("\n### Evidence\n")
    return "".join(out)


def _title(case: "Case") -> str:
    ctx, env = case.context, case.context.environment
    what = ctx.error.name if ctx.error else (ctx.failure_kind or "crash")
    where = ""
    if ctx.origin and ctx.origin.kernel != "unknown":
        where = f" in {ctx.origin.kernel}"
    elif ctx.surfaces and ctx.surfaces[0].file:
        s = ctx.surfaces[0]
        where = f" surfacing at {s.file.rsplit('/', 1)[-1]}:{s.line} {s.function}"
    rank = ctx.first_failure.rank if ctx.first_failure else None
    rank_text = f" on TP rank {rank}" if rank is not None else ""
    phase = env.get("phase")
    phase_text = f" during {phase}" if phase and phase != "unknown" else ""
    facts = ", ".join(x for x in (f"vLLM {env['vllm']}" if env.get("vllm") else "",
                                  f"TP={env['tensor_parallel_size']}" if env.get("tensor_parallel_size") else "") if x)
    return f"{what}{where}{rank_text}{phase_text}" + (f" ({facts})" if facts else "")


def _chain(case: "Case") -> list[str]:
    ctx = case.context
    steps = []
    if ctx.origin and ctx.origin.kernel != "unknown":
        steps.append(f"`{ctx.origin.kernel}` on rank {_cell(ctx.origin.rank)} (pid {ctx.origin.pid}): "
                     f"{ctx.origin.fault} [{ctx.origin.confidence} confidence; "
                     f"{ctx.origin.evidence[0]['source'] if ctx.origin.evidence else 'no source'}]")
    elif ctx.error and ctx.error.sticky:
        steps.append("an earlier kernel faulted asynchronously (not named by any evidence)")
    for s in ctx.surfaces:
        api = f"`{s.api}` at " if s.api else ""
        where = f"`{s.file.rsplit('/', 1)[-1]}:{s.line}` in `{s.function}`" if s.file else "a host call"
        steps.append(f"rank {_cell(s.rank)} (pid {s.pid}) noticed it: {api}{where} raised "
                     f"`{s.exception}` ({s.how}) [{s.source}]")
    if ctx.first_failure and not ctx.surfaces and not ctx.origin:
        steps.append(f"first failure: rank {_cell(ctx.first_failure.rank)} - {ctx.first_failure.basis}")
    for v in ctx.ranks.values():
        if v.status == "collateral":
            who = f"rank {v.rank}" if v.rank is not None else (v.name or v.role)
            steps.append(f"{who} went down as collateral: {v.failure}")
    return steps or ["no failure found in the inputs"]


def mermaid(case: "Case") -> str:
    """A sequence diagram with one lane per rank (plus engine, API server, client)."""
    ctx = case.context
    lanes: dict = {}

    def lane(event_or_rank) -> str:
        if isinstance(event_or_rank, int):
            return f"R{event_or_rank}"
        e = event_or_rank
        if e.rank is not None:
            return f"R{e.rank}"
        return {"engine-core": "Engine", "api-server": "API"}.get(e.role or "", "Other")

    messages = []

    def note(where: str, text: str) -> None:
        lanes.setdefault(where, None)
        messages.append(f"    Note over {where}: {_mm(text)}")

    def arrow(src: str, dst: str, text: str) -> None:
        lanes.setdefault(src, None)
        lanes.setdefault(dst, None)
        messages.append(f"    {src}-){dst}: {_mm(text)}")

    for v in sorted(ctx.ranks.values(), key=lambda v: (v.rank is None, v.rank or 0)):
        if v.role == "worker" and v.rank is not None:
            lanes.setdefault(f"R{v.rank}", None)
    if ctx.origin and ctx.origin.rank is not None:
        note(f"R{ctx.origin.rank}", f"ORIGIN {ctx.origin.kernel}: {ctx.origin.fault}")
    for s in ctx.surfaces:
        if s.rank is not None:
            note(f"R{s.rank}", f"SURFACE {s.api or ''} {s.function or ''}: {s.error.name if s.error else s.exception}")
    first = ctx.first_failure.rank if ctx.first_failure else None
    for v in ctx.ranks.values():
        if v.status != "collateral":
            continue
        if v.role == "worker" and v.rank is not None:
            src = f"R{first}" if first is not None else "Other"
            arrow(src, f"R{v.rank}", f"COLLATERAL {v.failure}")
        elif v.role == "engine-core":
            arrow(f"R{first}" if first is not None else "Other", "Engine", "worker failed: engine core fatal error")
        elif v.role == "api-server":
            arrow("Engine", "API", "EngineDeadError")
    for e in ctx.events:
        if e.kind == Kind.HTTP and str(e.attrs.get("status", "")).startswith("5"):
            arrow("API", "Client", f"HTTP {e.attrs['status']}")
            break
    messages = messages[:MERMAID_MAX_MESSAGES]
    order = ["Client", "API", "Engine"] + sorted((k for k in lanes if k.startswith("R")), key=lambda k: int(k[1:])) + ["Other"]
    names = {"Client": "client", "API": "API server", "Engine": "EngineCore", "Other": "unattributed"}
    participants = [f"    participant {k} as {names.get(k, 'rank ' + k[1:])}" for k in order if k in lanes]
    if not messages:
        return "_No failure events to draw._\n"
    return "```mermaid\nsequenceDiagram\n" + "\n".join(participants + messages) + "\n```\n"


def _mm(text: str) -> str:
    """Text safe inside a Mermaid message: no ';', '#', or line breaks."""
    text = " ".join(str(text).split())
    for ch, rep in ((";", ","), ("#", ""), ("<", "‹"), (">", "›"), ("{", "("), ("}", ")")):
        text = text.replace(ch, rep)
    return text[:110]


def _evidence_blocks(case: "Case") -> list[str]:
    """Excerpts around the events that carry the verdict, most important first."""
    ctx = case.context
    wanted: list[tuple[str, Event]] = []
    seen = set()

    def add(label: str, event: Event | None) -> None:
        if event is not None and event.where not in seen:
            seen.add(event.where)
            wanted.append((label, event))

    by_where = {e.where: e for e in ctx.events}
    if ctx.origin:
        for ev in ctx.origin.evidence:
            add(f"origin evidence ({ev['kind']})", by_where.get(ev["source"]))
    for s in ctx.surfaces:
        add(f"surface on rank {_cell(s.rank)}", by_where.get(s.source))
    for v in ctx.ranks.values():
        if v.first_error_source and v.status in ("collateral", "unknown"):
            add(f"{'rank ' + str(v.rank) if v.rank is not None else v.name}: {v.status}", by_where.get(v.first_error_source))
    blocks = []
    for label, event in wanted:
        blocks.append(f"<details><summary>{label} - <code>{event.where}</code></summary>\n\n"
                      f"```text\n{_excerpt(case, event)}\n```\n</details>\n\n")
    return blocks


def _excerpt(case: "Case", event: Event) -> str:
    chain = event.attrs.get("chain")
    if chain:
        lines = []
        for exc in chain:
            if exc.unraisable_in:
                lines.append(f"Exception ignored in: {exc.unraisable_in}")
            lines.append("Traceback (most recent call last):")
            for f in exc.frames:
                lines.append(f'  File "{f.file}", line {f.line}, in {f.function}')
                if f.code:
                    lines.append(f"    {f.code}")
            lines.append(f"{exc.type}: {exc.message}".rstrip(": "))
        return "\n".join(lines[-EVIDENCE_LINES:])
    return event.message[:2000]


def _table(_unused, rows, header) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if value is None:
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")[:300]
