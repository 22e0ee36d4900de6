"""The HTML report: one self-contained page (no network, no CDN, a strict
Content-Security-Policy).

The headline, then each registered section in the document's order - known issues and
next steps, the verdict's findings, the causal chain, the environment, the processes,
the checklist, an interactive per-rank timeline (a time axis, a lane for evidence
without a wall-clock time, a legend; zoom with the wheel around the cursor or with the
buttons, hover for the line, click a marker for its evidence), the inputs and the
evidence.

The sections are HTML written here, every value escaped (``inert.html_text``).  The page
also carries the report document as JSON, escaped for a script element, for tools and
for the timeline's script, which draws the markers the document placed with
textContent only: nothing from a log becomes HTML.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TextIO

from forensics.inert import html_text, plain, script_json
from forensics.report.base import Drawers, Form, Group, Mark, Phrase
from forensics.report.document import Document
from forensics.report.sections import (Chain, Checklist, Environment, Error, Evidence, Explain, FirstFailure, Hang,
                                       Hardware, Headline, Inputs, KnownIssues, NextSteps, Notes, Origin, Processes,
                                       Redaction, Signature, Steps, Summary, Surfaces, Timeline, UNTIMED_LANE)

MARKER_LIMIT = 2000

DRAW = Drawers("html")


@dataclass
class Ctx:
    options: object
    data: dict = field(default_factory=dict)       # what a section gives the page's script


def render(document: Document, out: TextIO, options) -> None:
    ctx = Ctx(options)
    asked = bool(options and (options.explain or options.verbose))
    header: list[str] = []
    verdict: list[str] = []
    body: list[str | None] = []          # None: where the verdict's findings go
    for item in document.sections:
        group = item.entry.group
        if group is Group.VERDICT and None not in body:
            body.append(None)
        if not item.present or (item.entry.opt_in and not asked):
            continue
        drawn = DRAW.draw(item, ctx)
        if group is Group.HEADLINE:
            header.append(drawn)
        elif group is Group.VERDICT:
            verdict.append(drawn)
        else:
            body.append(f'<section id="{item.entry.name}-section"><h2>{h(item.entry.title)}</h2>{drawn}</section>')
    findings = f'<section id="verdict-section"><h2>Verdict</h2><div id="verdict">{"".join(verdict)}</div></section>'
    data = document.to_json()
    data.pop("traffic", None)
    data["timeline"] = data["timeline"][:MARKER_LIMIT]
    data.update(ctx.data)
    headline = document.get(Headline).text
    out.write(PAGE.replace("__TITLE__", html_text(headline[:160] or "forensics report"))
              .replace("__HEADER__", "".join(header))
              .replace("__BODY__", "".join(findings if piece is None else piece for piece in body))
              .replace("__DATA__", script_json(data)))


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def h(text) -> str:
    return html_text("" if text is None else text)


def h_prose(text) -> str:
    """A sentence of the report: what it quotes between backticks as <code>."""
    parts = _CODE_SPAN.split(plain(text or ""))
    return "".join(f"<code>{h(p)}</code>" if i % 2 else h(p) for i, p in enumerate(parts))


def hp(words: Phrase) -> str:
    """A phrase as HTML: every part escaped, code as <code>, marks as classes."""
    out = []
    for span in words:
        if span.form is Form.CODE:
            piece = f"<code>{h(span.text)}</code>"
        elif span.form is Form.PROSE:
            piece = h_prose(span.text)
        elif span.form is Form.SOURCE:
            piece = f"<small>[{h(span.text)}]</small>"
        else:
            piece = h(span.text)
        out.append(f'<span class="{span.mark.value}">{piece}</span>' if span.mark is not Mark.NONE else piece)
    return "".join(out)


def _p(label: str | None, content: str, cls: str | None = None) -> str:
    lead = f"<b>{h(label)}</b> " if label else ""
    attrs = f' class="{cls}"' if cls else ""
    return f"<p{attrs}>{lead}{content}</p>"


def _table(table_id: str | None, header, rows) -> str:
    head = "<tr>" + "".join(f"<th>{h(c)}</th>" for c in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    attrs = f' id="{table_id}"' if table_id else ""
    return f"<table{attrs}>{head}{body}</table>"


def _n(value) -> str:
    return "-" if value is None else h(value)


# --- the headline and the verdict's findings ----------------------------------------------

@DRAW.of(Headline)
def _headline(item: Headline, ctx: Ctx) -> str:
    return f'<h1 id="title">{h(item.text)}</h1>'


@DRAW.of(Summary)
def _summary(item: Summary, ctx: Ctx) -> str:
    return _p(None, h_prose(item.text))


@DRAW.of(Error)
def _error(item: Error, ctx: Ctx) -> str:
    return _p(item.label, hp(item.line))


@DRAW.of(Surfaces)
def _surfaces(item: Surfaces, ctx: Ctx) -> str:
    groups, hidden = item.shown(compact=False)
    return "".join(_p("Surface", hp(g.line)) for g in groups) + \
        (_p(None, h(item.more(hidden, False)), "note") if hidden else "")


@DRAW.of(Origin)
def _origin(item: Origin, ctx: Ctx) -> str:
    out = _p("Origin", hp(item.line))
    if item.launched_from:
        out += _p(None, hp(item.launched_from), "note")
    if item.named_by:
        out += _p(None, hp(item.named_by), "note")
    return out + "".join(_p(None, h(n), "note") for n in item.notes)


@DRAW.of(FirstFailure)
def _first(item: FirstFailure, ctx: Ctx) -> str:
    out = ""
    if item.first:
        out += _p("First failure", hp(item.line))
        if item.first.launcher_opinion:
            out += _p(None, h(item.first.launcher_opinion), "note")
    if item.collateral:
        out += _p("Collateral", h(item.collateral_names))
    return out


@DRAW.of(Hang)
def _hang(item: Hang, ctx: Ctx) -> str:
    return _p("Hang", hp(item.line))


@DRAW.of(Steps)
def _steps(item: Steps, ctx: Ctx) -> str:
    rows, _ = item.shown(False)
    return _p("Step in flight", "; ".join(hp(item.line(st)) for st in rows))


@DRAW.of(Hardware)
def _hardware(item: Hardware, ctx: Ctx) -> str:
    return _p(item.entry.title, hp(item.settled_by))


@DRAW.of(Notes)
def _notes(item: Notes, ctx: Ctx) -> str:
    return "".join(_p(None, h(n), "note") for n in item.notes) + \
        "".join(_p(None, h(f), "failure") for f in item.rule_failures)


# --- the sections after the headline ------------------------------------------------------

@DRAW.of(KnownIssues)
def _known_issues(item: KnownIssues, ctx: Ctx) -> str:
    out = []
    for k in item.issues:
        out.append(_p(None, f"<b>{h(k.likelihood)}</b> <code>{h(k.id)}</code> {h(k.title)}"))
        out.append(_p(None, "workaround: " + h_prose(k.workaround)))
        out.append(_p(None, h(f"matched: {item.matched_text(k)}"), "note"))
        out.append(_p(None, h(f"does not prove: {k.does_not_prove}"), "note"))
        out += [_p(None, f"<code>{h(ref)}</code>", "note") for ref in k.references[:3]]
    return "".join(out)


@DRAW.of(NextSteps)
def _next_steps(item: NextSteps, ctx: Ctx) -> str:
    out = []
    for step in item.steps:
        out.append(_p(None, (f"<b>{h(step.title)}</b>: " if step.title else "") + h_prose(step.why)))
        if step.command:
            out.append(f"<pre>{h(step.command)}</pre>")
        out += [_p(None, h(f"note: {w}"), "note") for w in step.warnings]
    return "".join(out)


@DRAW.of(Chain)
def _chain(item: Chain, ctx: Ctx) -> str:
    return "<ol>" + "".join(f"<li>{hp(step)}</li>" for step in item.steps) + "</ol>"


@DRAW.of(Explain)
def _explain(item: Explain, ctx: Ctx) -> str:
    out = _table(None, ("rule", "conclusion"), [[f"<code>{h(e.rule)}</code>", h(e.text)] for e in item.explanations])
    if ctx.options and ctx.options.explain and item.stories:
        out += _p(None, h(item.STORY_TITLE), "note")
        for story in item.stories:
            rows = [[h(o.seen), h(o.what), f"<small>{h(o.source)}</small>"]
                    for o in story.observations[:item.SHOWN_OBSERVATIONS]]
            out += f"<details><summary>{h(story.who)}: {h(story.status_text)}</summary>{_table(None, None, rows)}</details>"
    return out


@DRAW.of(Environment)
def _environment(item: Environment, ctx: Ctx) -> str:
    if not item.rows:
        return _p(None, h(item.EMPTY), "note")
    return _table("env", None, [[f"<code>{h(r.key)}</code>", h(r.text)] for r in item.rows])


@DRAW.of(Processes)
def _processes(item: Processes, ctx: Ctx) -> str:
    # a page holds every process: the whole table
    if not item.processes:
        return _p(None, h(item.EMPTY), "note")
    rows = [[_n(p.rank), _n(p.pid), h(p.role), f'<span class="{p.status.value}">{h(p.status.value)}</span>',
             _n(p.exit_code), h(p.how) + (f" <small>[{h(p.evidence)}]</small>" if p.evidence else "")]
            for p in item.processes]
    return _table("ranks", ("rank", "pid", "role", "status", "exit", "how it went down"), rows)


@DRAW.of(Checklist)
def _checklist(item: Checklist, ctx: Ctx) -> str:
    rows = [[h(c.check), f'<span class="{c.status.value}">{h(c.status.value)}</span>', h(c.finding),
             f"<small>{h(c.evidence)}</small>" if c.evidence else ""] for c in item.items]
    return _table("checklist", ("check", "", "finding", "evidence"), rows)


@DRAW.of(Timeline)
def _timeline(item: Timeline, ctx: Ctx) -> str:
    ctx.data["lanes"] = list(item.lanes)
    ctx.data["untimed_lane"] = UNTIMED_LANE
    ctx.data["markers"] = [{"time": e.time, "row": e.row, "lane": e.lane, "kind": e.kind,
                            "marker": e.marker.value, "message": e.message, "source": e.source, "pid": e.pid,
                            "note": item.marker_note(e)} for e in item.events[:MARKER_LIMIT]]
    return ('<div><button class="btn" id="zin">zoom in</button><button class="btn" id="zout">zoom out</button>'
            '<button class="btn" id="zreset">reset</button> <span id="legend"></span></div>'
            '<svg id="lanes" role="img" aria-label="per-rank timeline"></svg>'
            '<h3>The marker\'s evidence</h3><div id="evidence">click a marker</div>')


@DRAW.of(Inputs)
def _inputs(item: Inputs, ctx: Ctx) -> str:
    shown, hidden = item.shown
    rows = [[h(s.path), h(s.kind), _n(s.lines), _n(s.events), _n(s.unparsed_lines), h("; ".join(s.problems[:5]))]
            for s in shown]
    return (_p(None, h(item.input_summary.sentence), "note")
            + _table("sources", ("file", "kind", "lines", "events", "unparsed", "problems"), rows)
            + (_p(None, h(f"... {hidden} more inputs (the JSON report has them)"), "note") if hidden else ""))


@DRAW.of(Signature)
def _signature(item: Signature, ctx: Ctx) -> str:
    return _p(None, f"<code>{h(item.signature)}</code>" + (f" ({h(item.contributed)})" if item.contributed else ""))


@DRAW.of(Evidence)
def _evidence(item: Evidence, ctx: Ctx) -> str:
    return '<div id="excerpts">' + "".join(f"<details><summary>{h(x.label)} - {h(x.source)}</summary><pre>{h(x.text)}</pre>"
                                           "</details>" for x in item.excerpts) + "</div>"


@DRAW.of(Redaction)
def _redaction(item: Redaction, ctx: Ctx) -> str:
    return _p(None, h(item.sentence), "note")


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">
<meta name="referrer" content="no-referrer">
<title>forensics: __TITLE__</title>
<style>
 body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
 header{background:#1d2330;color:#fff;padding:12px 20px} header h1{font-size:17px;margin:0}
 main{padding:16px 20px;max-width:1300px} section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin-bottom:14px}
 h2{font-size:15px;margin:0 0 8px} h3{font-size:14px;margin:10px 0 4px} table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #eceff3;padding:3px 6px;text-align:left;vertical-align:top}
 .origin{color:#b3002d;font-weight:600}.surfaced,.failed,.failure{color:#d04a02}.collateral{color:#8a6d00}.healthy{color:#1b7f3a}.unknown{color:#666}
 .pass{color:#1b7f3a}.fail{color:#b3002d;font-weight:600}.label{font-weight:600}
 #lanes{width:100%;height:auto;background:#fbfcfd;border:1px solid #e3e6ea}
 #tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:5px 8px;border-radius:4px;font-size:12px;max-width:480px;display:none;white-space:pre-wrap;z-index:10}
 #evidence,pre{white-space:pre-wrap;font:12px/1.4 ui-monospace,monospace;background:#f3f4f6;padding:8px;border-radius:4px;min-height:2em;overflow-x:auto}
 .btn{border:1px solid #c6ccd5;background:#fff;border-radius:4px;padding:2px 8px;margin-right:4px;cursor:pointer}
 code{font:12px ui-monospace,monospace} .note{color:#555} .axis{font-size:10px;fill:#667} .lane-label{font-size:11px;fill:#333}
</style></head><body>
<header>__HEADER__</header>
<main>
__BODY__
</main><div id="tip"></div>
<script id="report-data" type="application/json">__DATA__</script>
<script>
"use strict";
// the timeline: a lane per rank, a lane for untimed evidence, the markers the report placed
const R = JSON.parse(document.getElementById("report-data").textContent);
const $ = id => document.getElementById(id);
const svg = $("lanes");
if (svg && R.markers) {
const COLORS = {"cuda-error":"#d04a02","xid":"#b3002d","sanitizer":"#b3002d","cuda-gdb":"#b3002d","core-dump":"#b3002d","device-assert":"#b3002d","peer-failure":"#8a6d00","collective-timeout":"#8a6d00","nccl":"#8a6d00","worker-died":"#6a1b9a","engine-fatal":"#555","engine-dead":"#555","engine-worker-failed":"#555","http":"#1565c0","oom":"#d04a02","fatal-signal":"#6a1b9a"};
const lanes = R.lanes;
const stamped = R.markers.filter(e => e.time), untimed = R.markers.filter(e => !e.time);
const perInstant = {};
stamped.forEach(e => { (perInstant[e.time] = perInstant[e.time] || []).push(e); });
Object.values(perInstant).forEach(g => g.forEach((e, k) => { e._t = Date.parse(e.time) + (g.length > 1 ? k * 900 / g.length : 0); }));
const NS = "http://www.w3.org/2000/svg", LANE = 34, LEFT = 130, W = 1200, TOP = 24;
svg.setAttribute("viewBox", "0 0 " + W + " " + (lanes.length * LANE + TOP + 10));
const times = stamped.map(e => e._t);
let t0 = times.length ? Math.min(...times) : 0, t1 = times.length ? Math.max(...times) : 1;
if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
let view = [t0, t1];
function svgel(tag, attrs) { const c = document.createElementNS(NS, tag); Object.entries(attrs).forEach(([k, v]) => c.setAttribute(k, v)); return c; }
function draw() {
  svg.textContent = "";
  const span = view[1] - view[0], x = t => LEFT + (t - view[0]) / span * (W - LEFT - 20);
  for (let i = 0; i <= 6; i++) {
    const t = view[0] + span * i / 6, xx = x(t);
    svg.appendChild(svgel("line", {x1: xx, x2: xx, y1: TOP - 6, y2: lanes.length * LANE + TOP, stroke: "#eef0f3"}));
    const lab = svgel("text", {x: xx, y: 12, "text-anchor": "middle", class: "axis"}); lab.textContent = new Date(t).toISOString().slice(11, 23); svg.appendChild(lab);
  }
  lanes.forEach((l, i) => {
    const y = TOP + i * LANE, untimedLane = l === R.untimed_lane;
    svg.appendChild(svgel("line", {x1: LEFT, x2: W - 10, y1: y, y2: y, stroke: untimedLane ? "#e2c7c7" : "#d5dae1", "stroke-dasharray": untimedLane ? "4 3" : ""}));
    const lab = svgel("text", {x: 6, y: y + 4, class: "lane-label"}); lab.textContent = l; svg.appendChild(lab);
  });
  const drawn = [];
  stamped.forEach(e => { const t = Math.min(Math.max(e._t, view[0]), view[1]); drawn.push([e, x(t), TOP + lanes.indexOf(e.row) * LANE, e._t < view[0] || e._t > view[1]]); });
  untimed.forEach((e, k) => drawn.push([e, LEFT + 20 + k * Math.min(40, (W - LEFT - 60) / Math.max(1, untimed.length)), TOP + lanes.indexOf(e.row) * LANE, false]));
  drawn.forEach(([e, cx, cy, outside]) => {
    const m = e.marker;
    const c = m === "origin" ? svgel("rect", {x: cx - 7, y: cy - 7, width: 14, height: 14, transform: "rotate(45 " + cx + " " + cy + ")"}) : svgel("circle", {cx: cx, cy: cy, r: m === "surface" ? 7 : 5});
    c.setAttribute("fill", m === "origin" ? "#b3002d" : m === "surface" ? "#d04a02" : (COLORS[e.kind] || "#888"));
    c.setAttribute("stroke", m === "collateral" ? "#000" : "#fff");
    c.setAttribute("opacity", outside ? "0.35" : "1");
    c.setAttribute("class", "marker marker-" + m); c.setAttribute("data-source", e.source); c.setAttribute("data-kind", e.kind);
    c.addEventListener("mousemove", ev => { const tip = $("tip"); tip.style.display = "block"; tip.textContent = (e.time || R.untimed_lane) + "  " + e.lane + "  [" + e.kind + "]\n" + e.message + "\n" + e.source; const w = tip.offsetWidth, h = tip.offsetHeight; tip.style.left = Math.max(4, Math.min(ev.clientX + 12, window.innerWidth - w - 8)) + "px"; tip.style.top = Math.max(4, Math.min(ev.clientY + 12, window.innerHeight - h - 8)) + "px"; });
    c.addEventListener("mouseleave", () => { $("tip").style.display = "none"; });
    c.addEventListener("click", () => showEvidence(e));
    svg.appendChild(c);
  });
}
function showEvidence(e) {
  const ev = $("evidence"); ev.textContent = "";
  ev.appendChild(document.createTextNode(e.marker.toUpperCase() + "  " + e.source + "\n" + (e.time || R.untimed_lane) + "  " + e.lane + "  pid " + e.pid + "\n\n" + e.message));
  const ex = (R.evidence || []).find(x => x.source === e.source);
  if (ex) ev.appendChild(document.createTextNode("\n\n" + ex.text));
  if (e.note) ev.appendChild(document.createTextNode("\n\n" + e.note));
}
function zoom(f, center) { const c = center == null ? (view[0] + view[1]) / 2 : center; const half = Math.max(50, (view[1] - view[0]) * f / 2); view = [c - half, c + half]; draw(); }
$("zin").onclick = () => zoom(0.5); $("zout").onclick = () => zoom(2); $("zreset").onclick = () => { view = [t0, t1]; draw(); };
svg.addEventListener("wheel", ev => { ev.preventDefault(); const r = svg.getBoundingClientRect(); const px = (ev.clientX - r.left) / r.width * W; const c = view[0] + (px - LEFT) / (W - LEFT - 20) * (view[1] - view[0]); zoom(ev.deltaY < 0 ? 0.7 : 1.4, c); }, {passive: false});
$("legend").textContent = " \u25C6 origin   \u25CF surface   \u25CB collateral (black ring) / other; markers outside the zoom sit faded at the edge";
draw();
}
</script></body></html>
"""
