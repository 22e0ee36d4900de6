"""The Markdown report, made to be pasted into a GitHub issue.

The headline comes first, then known issues and next steps, then the shape of vLLM's bug
template ("Describe the bug", then "Your current environment"), the causal chain, the
processes, the checklist, a Mermaid timeline and the evidence in collapsible blocks.

Nothing from a log is live here: names and messages outside code are escaped (no
emphasis, links, images, HTML, headings, @mentions or #123 references), text inside the
``<details><summary>`` HTML blocks is HTML-escaped (no Markdown applies there), inline values
are code spans whose fence no backtick inside can close, and evidence sits in fenced
blocks longer than any backtick run inside them.  GitHub refuses bodies over 65,536
characters: the evidence is trimmed to fit, never the verdict, and the report says so.
"""

from __future__ import annotations

from typing import TextIO

from forensics.inert import md_code, md_fence, md_html, md_prose, md_text

GITHUB_LIMIT = 65_536
MAX_CHAIN = 24
MAX_ROWS = 64
MERMAID_MAX_MESSAGES = 40


def title(document: dict) -> str:
    """A one-line issue title (plain text: gh passes it as an argument, GitHub shows it
    as text)."""
    from forensics.inert import plain
    v, env = document["verdict"], document["environment"]
    facts = ", ".join(x for x in (f"vLLM {env['vllm']}" if env.get("vllm") else "",
                                  f"TP={env['tensor_parallel_size']}" if env.get("tensor_parallel_size") else "") if x)
    text = _first_clause(plain(v["headline"]), 180)
    return f"[Bug]: {text}" + (f" ({facts})" if facts else "")


def _first_clause(text: str, limit: int) -> str:
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


def render(document: dict, out: TextIO, options) -> None:
    out.write(render_text(document, options))


def render_text(document: dict, options=None, budget: int = GITHUB_LIMIT) -> str:
    head = _head(document, include_title=not (options and options.title_separately))
    blocks = [_evidence_block(item) for item in document.get("evidence", [])]
    room = budget - len(head) - 800
    kept = []
    for block in blocks:
        if len(block) > room:
            break
        kept.append(block)
        room -= len(block)
    body = head + "".join(kept)
    if len(kept) < len(blocks):
        body += (f"\n> {len(blocks) - len(kept)} evidence excerpt(s) trimmed to stay under GitHub's {budget:,}-character "
                 "limit; `forensics analyze --format json` has everything.\n")
    redaction = document.get("redaction", {})
    if redaction.get("enabled"):
        counts = ", ".join(f"{n} {kind}" for kind, n in redaction.get("counts", {}).items()) or "nothing found"
        body += f"\n_Redacted before sharing: {counts}. Pseudonyms are consistent within this report._\n"
    else:
        body += "\n_Redaction: off._\n"
    if len(body) > budget:
        body = body[: budget - 200] + "\n\n> report cut to fit GitHub's limit\n"
    return body


def _head(document: dict, include_title: bool) -> str:
    v = document["verdict"]
    out = []
    if include_title:
        out.append(f"**Suggested title:** {md_code(title(document))}\n\n")
    out.append(f"> **{md_prose(v['headline'])}**\n\n")
    if document["known_issues"]:
        out.append("#### Known issues\n")
        for k in document["known_issues"]:
            out.append(f"- **{k['likelihood']}**: {md_code(k['id'])} - {md_text(k['title'])}  \n"
                       f"  workaround: {md_prose(k['workaround'])}  \n"
                       f"  matched: {md_text('; '.join(k['matched']))}"
                       + (f"; cannot tell: {md_text(', '.join(k['unknown']))}" if k["unknown"] else "") + "  \n"
                       f"  does not prove: {md_prose(k['does_not_prove'])}  \n"
                       + "".join(f"  <{ref}>\n" for ref in k["references"] if _is_url(ref)))
        out.append("\n")
    if document["next_actions"]:
        out.append("#### Next steps (most confidence gained first)\n")
        for step in document["next_actions"]:
            action = f"**{md_prose(step['title'])}**: " if step.get("title") else ""
            out.append(f"- {action}{md_prose(step['why'])}\n")
            if step["command"]:
                out.append("\n" + "\n".join("  " + line for line in md_fence(step["command"], "sh").splitlines()) + "\n")
        out.append("\n")
    out.append("### 🐛 Describe the bug\n\n")
    out.append(f"**Verdict:** {md_prose(v['summary'])}\n\n")
    if v.get("hardware"):
        hw = v["hardware"]
        out.append(f"**Hardware or software:** {md_prose(hw['opinion'])} - {md_prose(hw['basis'])}. "
                   f"To settle it: {md_prose(hw['settle'])}\n\n")
    origin = v["origin"]
    if origin:
        out.append(f"**Origin:** {md_code(origin['kernel'])} - confidence {origin['confidence']}"
                   + (f" ({md_prose('; '.join(origin['notes']))})" if origin["notes"] else "") + "\n\n")
    elif v["origin_unknown"]:
        out.append(f"**Origin:** unknown: {md_prose(v['origin_unknown'])}.\n\n")
    if v.get("steps"):
        # the capture plugin's snapshots: what each rank was running, never the origin
        out.append("**Step in flight (capture snapshots):** " + "; ".join(
            f"{md_text(st['who'])} {md_text(st['text'])}" for st in v["steps"][:MAX_ROWS]) + "\n\n")
    for note in v["notes"]:
        out.append(f"> {md_prose(note)}\n\n")
    out.append("#### Causal chain\n")
    chain = _chain(document)
    out.extend(f"{n}. {step}\n" for n, step in enumerate(chain[:MAX_CHAIN], 1))
    if len(chain) > MAX_CHAIN:
        out.append(f"{MAX_CHAIN + 1}. ... and {len(chain) - MAX_CHAIN} more (the JSON report has them)\n")
    out.append("\n### Your current environment\n\n")
    env_rows = [[md_code(k, table=True), md_code(str(val)[:200], table=True)] for k, val in document["environment"].items()]
    out.append(_table(("field", "value"), env_rows or [["-", "-"]]))
    out.append("\n#### Processes\n")
    rows = [[_cell(r["rank"]), _cell(r["pid"]), md_text(r["role"]), f"**{r['status']}**", _cell(r["exit_code"]),
             _cell_text("; ".join(x for x in (r["failure"], r.get("in_step")) if x))]
            for r in document["ranks"][:MAX_ROWS]]
    out.append(_table(("rank", "pid", "role", "status", "exit", "how it went down"), rows or [["-"] * 6]))
    if len(document["ranks"]) > MAX_ROWS:
        out.append(f"\n... {len(document['ranks']) - MAX_ROWS} more processes (the JSON report has them)\n")
    if document["checklist"]:
        out.append("\n#### Incident checklist\n")
        marks = {"pass": "✅ pass", "fail": "❌ fail", "unknown": "❔ unknown"}
        out.append(_table(("check", "", "finding", "evidence"),
                          [[md_text(c["check"]), marks[c["status"]], _cell_text(c["finding"]),
                            md_code(c["evidence"], table=True) if c.get("evidence") else ""] for c in document["checklist"]]))
    out.append("\n### Timeline\n\n")
    out.append(mermaid(document))
    if document["signature"]:
        parts = ", ".join(f"{p['part']}={p['value']}" for p in document["signature_parts"] if p["contributed"])
        out.append(f"\nSignature: {md_code(document['signature'])} ({md_text(parts)})\n")
    out.append("\n### Evidence\n\n")
    return "".join(out)


def _chain(document: dict) -> list[str]:
    v = document["verdict"]
    steps = []
    origin, faulting = v["origin"], v["faulting_process"]
    if origin:
        src = origin["evidence"][0]["source"] if origin["evidence"] else "no source"
        steps.append(f"{md_code(origin['kernel'])} on {md_text(origin['who'])}: {md_prose(origin['fault'])} "
                     f"\\[{origin['confidence']} confidence; {md_code(src)}\\]")
    elif faulting:
        steps.append(f"{md_text(faulting['who'])} faulted on the device ({md_prose(faulting['fault'])}); "
                     "no evidence names the kernel")
    elif v["error"] and v["error"]["sticky"]:
        steps.append("an earlier kernel faulted asynchronously (not named by any evidence)")
    for s in v["surfaces"]:
        api = f"{md_code(s['api'])} at " if s["api"] else ""
        place = str(s["file"]).rsplit("/", 1)[-1] + (f":{s['line']}" if s["line"] is not None else "")
        where = (md_code(place) + (f" in {md_code(s['function'])}" if s["function"] else "")) if s["file"] \
            else "a host call"
        if s.get("caller"):
            where += f" (called from {md_code(s['caller'])})"
        steps.append(f"{md_text(s['who'])} noticed it: {api}{where} raised {md_code(s['exception'])} "
                     f"({md_text(s['how'])}) \\[{md_code(s['source'])}\\]")
    first = v["first_failure"]
    if first and not v["surfaces"] and not origin:
        steps.append(f"first failure: {md_text(first['who'])} - {md_prose(first['basis'])}")
    collateral = [r for r in document["ranks"] if r["status"] == "collateral"]
    for r in collateral[:16]:
        steps.append(f"{md_text(r['who'])} went down as collateral: {md_prose(r['failure'] or '')}")
    if len(collateral) > 16:
        steps.append(f"... and {len(collateral) - 16} more collateral processes (the JSON report lists them)")
    return steps or ["no failure found in the inputs"]


def mermaid(document: dict) -> str:
    """A sequence diagram with one lane per rank (plus engine, API server, client)."""
    v = document["verdict"]
    lanes: dict = {}
    messages = []

    def note(where: str, text: str) -> None:
        lanes.setdefault(where, None)
        messages.append(f"    Note over {where}: {_mm(text)}")

    def arrow(src: str, dst: str, text: str) -> None:
        lanes.setdefault(src, None)
        lanes.setdefault(dst, None)
        messages.append(f"    {src}-){dst}: {_mm(text)}")

    for r in document["ranks"]:
        if r["role"] == "worker" and r["rank"] is not None:
            lanes.setdefault(f"R{r['rank']}", None)
    origin = v["origin"] or v["faulting_process"]
    if origin and origin.get("rank") is not None:
        note(f"R{origin['rank']}", f"ORIGIN {origin.get('kernel') or 'kernel unknown'}: {origin['fault']}")
    for s in v["surfaces"][:8]:
        if s["rank"] is not None:
            note(f"R{s['rank']}", f"SURFACE {s['api'] or ''} {s['function'] or ''}".rstrip())
    first = v["first_failure"]["rank"] if v["first_failure"] else None
    for r in document["ranks"]:
        if r["status"] != "collateral":
            continue
        src = f"R{first}" if first is not None else "Other"
        if r["role"] == "worker" and r["rank"] is not None:
            arrow(src, f"R{r['rank']}", f"COLLATERAL {r['failure']}")
        elif r["role"] == "engine-core":
            arrow(src, "Engine", "worker failed: engine core stopped")
        elif r["role"] == "api-server":
            arrow("Engine", "API", "EngineDeadError")
    if any(e["kind"] == "http" and "50" in e["message"] for e in document["timeline"]):
        arrow("API", "Client", "HTTP 5xx")
    messages = messages[:MERMAID_MAX_MESSAGES]
    if not messages:
        return "_No failure events to draw._\n"
    order = ["Client", "API", "Engine"] + sorted((k for k in lanes if k.startswith("R")), key=lambda k: int(k[1:])) + ["Other"]
    names = {"Client": "client", "API": "API server", "Engine": "engine", "Other": "unattributed"}
    participants = [f"    participant {k} as {names.get(k, 'rank ' + k[1:])}" for k in order if k in lanes]
    return "```mermaid\nsequenceDiagram\n" + "\n".join(participants + messages) + "\n```\n"


def _mm(text) -> str:
    """Text inert inside a Mermaid message: no statement breaks, comments, HTML or
    Mermaid's own entity and link syntax."""
    from forensics.inert import plain
    text = " ".join(plain(str(text)).split())
    for ch, rep in ((";", ","), ("#", "no."), ("<", "‹"), (">", "›"), ("{", "("), ("}", ")"), ("%", " pct"),
                    (":", " -"), ("`", "'"), ("&", "+"), ("\"", "'")):
        text = text.replace(ch, rep)
    return text[:110]


def _evidence_block(item: dict) -> str:
    # the summary line is raw HTML (an HTML block): HTML-escaped, not Markdown-escaped
    return (f"<details><summary>{md_html(item['label'])} - {md_html(item['source'], code=True)}</summary>\n\n"
            f"{md_fence(item['text'])}\n</details>\n\n")


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    return "-" if value is None else str(value)


def _cell_text(value) -> str:
    return md_text(str(value)[:300]).replace("|", "\\|")




def _is_url(text: str) -> bool:
    return text.startswith("https://") and " " not in text and ">" not in text
