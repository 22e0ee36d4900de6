"""The HTML report: one self-contained page (no network, no CDN, a strict
Content-Security-Policy).

The headline, known issues and next steps first, then an interactive per-rank timeline
(a time axis, a lane for evidence without a wall-clock time, a legend; zoom with the
wheel around the cursor or with the buttons, hover for the line, click a marker for its
evidence), the processes, the checklist, the environment and the inputs.

The page's data is the report document, embedded as JSON escaped for a script element;
the script builds the page with textContent only, so nothing from a log becomes HTML.
"""

from __future__ import annotations

from typing import TextIO

from forensics.inert import html_text, script_json

MARKER_LIMIT = 2000


def render(document: dict, out: TextIO, options) -> None:
    data = dict(document)
    data["timeline"] = document["timeline"][:MARKER_LIMIT]
    data.pop("traffic", None)
    out.write(PAGE.replace("__TITLE__", html_text(document["verdict"]["headline"][:160] or "forensics report"))
              .replace("__DATA__", script_json(data)))


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">
<meta name="referrer" content="no-referrer">
<title>forensics: __TITLE__</title>
<style>
 body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
 header{background:#1d2330;color:#fff;padding:12px 20px} header h1{font-size:17px;margin:0}
 #sig{font-size:12px;opacity:.8}
 main{padding:16px 20px;max-width:1300px} section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin-bottom:14px}
 h2{font-size:15px;margin:0 0 8px} table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #eceff3;padding:3px 6px;text-align:left;vertical-align:top}
 .origin{color:#b3002d;font-weight:600}.surfaced{color:#d04a02}.collateral{color:#8a6d00}.healthy{color:#1b7f3a}.unknown{color:#666}
 .pass{color:#1b7f3a}.fail{color:#b3002d;font-weight:600}
 #lanes{width:100%;height:auto;background:#fbfcfd;border:1px solid #e3e6ea}
 #tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:5px 8px;border-radius:4px;font-size:12px;max-width:480px;display:none;white-space:pre-wrap;z-index:10}
 #evidence,pre{white-space:pre-wrap;font:12px/1.4 ui-monospace,monospace;background:#f3f4f6;padding:8px;border-radius:4px;min-height:2em;overflow-x:auto}
 .btn{border:1px solid #c6ccd5;background:#fff;border-radius:4px;padding:2px 8px;margin-right:4px;cursor:pointer}
 code{font:12px ui-monospace,monospace} .note{color:#555} .axis{font-size:10px;fill:#667} .lane-label{font-size:11px;fill:#333}
</style></head><body>
<header><h1 id="title"></h1><div id="sig"></div></header>
<main>
<section><h2>Verdict</h2><div id="verdict"></div></section>
<section id="known-section"><h2>Known issues</h2><div id="known"></div></section>
<section><h2>Next steps</h2><div id="next"></div></section>
<section><h2>Timeline (one lane per rank)</h2>
 <div><button class="btn" id="zin">zoom in</button><button class="btn" id="zout">zoom out</button><button class="btn" id="zreset">reset</button>
 <span id="legend"></span></div>
 <svg id="lanes" role="img" aria-label="per-rank timeline"></svg>
 <h2 style="margin-top:10px">Evidence</h2><div id="evidence">click a marker</div></section>
<section><h2>Processes</h2><table id="ranks"></table></section>
<section><h2>Incident checklist</h2><table id="checklist"></table></section>
<section><h2>Environment</h2><table id="env"></table></section>
<section><h2>Evidence excerpts</h2><div id="excerpts"></div></section>
<section><h2>Inputs</h2><table id="sources"></table></section>
</main><div id="tip"></div>
<script id="report-data" type="application/json">__DATA__</script>
<script>
"use strict";
const R = JSON.parse(document.getElementById("report-data").textContent);
const $ = id => document.getElementById(id);
const V = R.verdict;
function el(tag, text, cls) { const e = document.createElement(tag); if (text != null) e.textContent = String(text); if (cls) e.className = cls; return e; }
function para(parts) { const p = el("p"); parts.forEach(x => p.appendChild(typeof x === "string" ? document.createTextNode(x) : x)); return p; }
// a sentence that quotes a command or a condition between backticks: those parts as <code>
// (text nodes only: nothing in it is markup)
function prose(text) { const s = el("span"); String(text == null ? "" : text).split(/`([^`\n]+)`/).forEach((part, i) => s.appendChild(i % 2 ? el("code", part) : document.createTextNode(part))); return s; }
function table(id, header, rows) {
  const t = $(id); t.textContent = "";
  if (header) { const tr = el("tr"); header.forEach(h => tr.appendChild(el("th", h))); t.appendChild(tr); }
  rows.forEach(r => { const tr = el("tr"); r.forEach(c => { const td = el("td"); if (c instanceof Node) td.appendChild(c); else td.textContent = c == null ? "-" : String(c); tr.appendChild(td); }); t.appendChild(tr); });
}
$("title").textContent = V.headline;
$("sig").textContent = R.signature ? "signature " + R.signature : "";
const vd = $("verdict");
vd.appendChild(para([prose(V.summary)]));
if (V.origin) vd.appendChild(para([el("b", "Origin "), el("span", V.origin.kernel, "origin"), " on " + V.origin.who + ": " + V.origin.fault + " - confidence ", el("b", V.origin.confidence)]));
else if (V.faulting_process) vd.appendChild(para([el("b", "Origin "), "kernel unknown: " + V.faulting_process.who + " faulted on the device (" + V.faulting_process.fault + ")"]));
else if (V.origin_unknown) vd.appendChild(para([el("b", "Origin "), "unknown: " + V.origin_unknown]));
V.surfaces.forEach(s => vd.appendChild(para([el("b", "Surface "), s.who + ": " + (s.api ? s.api + " at " : ""), el("code", (s.file || "?") + ":" + s.line), " in ", el("code", s.function || "?"), s.caller ? ", called from " : "", s.caller ? el("code", s.caller) : "", el("small", " [" + s.source + "]")])));
if (V.first_failure) vd.appendChild(para([el("b", "First failure "), V.first_failure.who + ": " + V.first_failure.basis]));
if (V.hardware) vd.appendChild(para([el("b", "Hardware or software "), prose(V.hardware.opinion + ": " + V.hardware.basis + ". To settle it: " + V.hardware.settle)]));
if (V.first_failure && V.first_failure.launcher_opinion) vd.appendChild(el("p", V.first_failure.launcher_opinion, "note"));
V.notes.forEach(n => vd.appendChild(el("p", n, "note")));
const known = $("known");
if (!R.known_issues.length) $("known-section").style.display = "none";
R.known_issues.forEach(k => { known.appendChild(para([el("b", k.likelihood + " "), el("code", k.id), " " + k.title])); known.appendChild(para(["workaround: ", prose(k.workaround)])); known.appendChild(el("p", "does not prove: " + k.does_not_prove, "note")); });
const next = $("next");
R.next_actions.forEach(s => { next.appendChild(para(s.title ? [el("b", s.title), ": ", prose(s.why)] : [prose(s.why)])); if (s.command) next.appendChild(el("pre", s.command)); });
if (!R.next_actions.length) next.textContent = "none";
table("ranks", ["rank", "pid", "role", "status", "exit", "how it went down"], R.ranks.map(r => [r.rank, r.pid, r.role, el("span", r.status, r.status), r.exit_code, r.failure]));
table("checklist", ["check", "", "finding"], (R.checklist || []).map(c => [c.check, el("span", c.status, c.status), c.finding]));
table("env", null, Object.entries(R.environment).map(([k, v]) => [el("code", k), typeof v === "object" ? JSON.stringify(v) : v]));
table("sources", ["file", "kind", "lines", "events", "unparsed", "problems"], R.sources.map(s => [s.path, s.kind, s.lines, s.events, s.unparsed_lines, (s.problems || []).join("; ")]));
const ex = $("excerpts");
(R.evidence || []).forEach(item => { const d = el("details"); d.appendChild(el("summary", item.label + " - " + item.source)); d.appendChild(el("pre", item.text)); ex.appendChild(d); });

// ---- timeline: a lane per rank, a lane for untimed evidence, markers per event ----
const COLORS = {"cuda-error":"#d04a02","xid":"#b3002d","sanitizer":"#b3002d","cuda-gdb":"#b3002d","core-dump":"#b3002d","device-assert":"#b3002d","peer-failure":"#8a6d00","collective-timeout":"#8a6d00","nccl":"#8a6d00","worker-died":"#6a1b9a","engine-fatal":"#555","engine-dead":"#555","engine-worker-failed":"#555","http":"#1565c0","oom":"#d04a02","fatal-signal":"#6a1b9a"};
const laneOf = e => e.rank != null ? "rank " + e.rank : (e.role || "other");
const stamped = R.timeline.filter(e => e.time), untimed = R.timeline.filter(e => !e.time);
const perInstant = {};
stamped.forEach(e => { (perInstant[e.time] = perInstant[e.time] || []).push(e); });
Object.values(perInstant).forEach(g => g.forEach((e, k) => { e._t = Date.parse(e.time) + (g.length > 1 ? k * 900 / g.length : 0); }));
let lanes = [...new Set(R.ranks.filter(r => r.rank != null).map(r => "rank " + r.rank).concat(stamped.map(laneOf)))]
  .sort((a, b) => (a.startsWith("rank") ? 0 : 1) - (b.startsWith("rank") ? 0 : 1) || a.localeCompare(b, undefined, {numeric: true}));
const UNTIMED = "no wall-clock time";
if (untimed.length) lanes.push(UNTIMED);
const svg = $("lanes"), NS = "http://www.w3.org/2000/svg", LANE = 34, LEFT = 130, W = 1200, TOP = 24;
svg.setAttribute("viewBox", "0 0 " + W + " " + (lanes.length * LANE + TOP + 10));
const times = stamped.map(e => e._t);
let t0 = times.length ? Math.min(...times) : 0, t1 = times.length ? Math.max(...times) : 1;
if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
let view = [t0, t1];
const originRank = V.origin ? V.origin.rank : (V.faulting_process ? V.faulting_process.rank : null);
function mark(e) {
  if (originRank != null && e.rank === originRank && ["xid","sanitizer","cuda-gdb","core-dump","device-assert"].includes(e.kind)) return "origin";
  if (V.surfaces.some(s => s.source === e.source)) return "surface";
  const r = R.ranks.find(x => x.rank === e.rank && e.rank != null);
  return r && r.status === "collateral" ? "collateral" : "event";
}
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
    const y = TOP + i * LANE;
    svg.appendChild(svgel("line", {x1: LEFT, x2: W - 10, y1: y, y2: y, stroke: l === UNTIMED ? "#e2c7c7" : "#d5dae1", "stroke-dasharray": l === UNTIMED ? "4 3" : ""}));
    const lab = svgel("text", {x: 6, y: y + 4, class: "lane-label"}); lab.textContent = l; svg.appendChild(lab);
  });
  const drawn = [];
  stamped.forEach(e => { const t = Math.min(Math.max(e._t, view[0]), view[1]); drawn.push([e, x(t), TOP + lanes.indexOf(laneOf(e)) * LANE, e._t < view[0] || e._t > view[1]]); });
  untimed.forEach((e, k) => drawn.push([e, LEFT + 20 + k * Math.min(40, (W - LEFT - 60) / Math.max(1, untimed.length)), TOP + lanes.indexOf(UNTIMED) * LANE, false]));
  drawn.forEach(([e, cx, cy, outside]) => {
    const m = mark(e);
    const c = m === "origin" ? svgel("rect", {x: cx - 7, y: cy - 7, width: 14, height: 14, transform: "rotate(45 " + cx + " " + cy + ")"}) : svgel("circle", {cx: cx, cy: cy, r: m === "surface" ? 7 : 5});
    c.setAttribute("fill", m === "origin" ? "#b3002d" : m === "surface" ? "#d04a02" : (COLORS[e.kind] || "#888"));
    c.setAttribute("stroke", m === "collateral" ? "#000" : "#fff");
    c.setAttribute("opacity", outside ? "0.35" : "1");
    c.setAttribute("class", "marker marker-" + m); c.setAttribute("data-source", e.source); c.setAttribute("data-kind", e.kind);
    c.addEventListener("mousemove", ev => { const tip = $("tip"); tip.style.display = "block"; tip.textContent = (e.time || "no wall-clock time") + "  " + laneOf(e) + "  [" + e.kind + "]\n" + e.message + "\n" + e.source; const w = tip.offsetWidth, h = tip.offsetHeight; tip.style.left = Math.max(4, Math.min(ev.clientX + 12, window.innerWidth - w - 8)) + "px"; tip.style.top = Math.max(4, Math.min(ev.clientY + 12, window.innerHeight - h - 8)) + "px"; });
    c.addEventListener("mouseleave", () => { $("tip").style.display = "none"; });
    c.addEventListener("click", () => showEvidence(e, m));
    svg.appendChild(c);
  });
}
function showEvidence(e, m) {
  const ev = $("evidence"); ev.textContent = "";
  ev.appendChild(document.createTextNode(m.toUpperCase() + "  " + e.source + "\n" + (e.time || "no wall-clock time") + "  " + laneOf(e) + "  pid " + e.pid + "\n\n" + e.message));
  const ex = (R.evidence || []).find(x => x.source === e.source);
  if (ex) ev.appendChild(document.createTextNode("\n\n" + ex.text));
  if (m === "origin" && (V.origin || V.faulting_process)) { const o = V.origin || V.faulting_process; ev.appendChild(document.createTextNode("\n\nconfidence " + o.confidence + (o.notes.length ? ": " + o.notes.join("; ") : ""))); }
}
function zoom(f, center) { const c = center == null ? (view[0] + view[1]) / 2 : center; const half = Math.max(50, (view[1] - view[0]) * f / 2); view = [c - half, c + half]; draw(); }
$("zin").onclick = () => zoom(0.5); $("zout").onclick = () => zoom(2); $("zreset").onclick = () => { view = [t0, t1]; draw(); };
svg.addEventListener("wheel", ev => { ev.preventDefault(); const r = svg.getBoundingClientRect(); const px = (ev.clientX - r.left) / r.width * W; const c = view[0] + (px - LEFT) / (W - LEFT - 20) * (view[1] - view[0]); zoom(ev.deltaY < 0 ? 0.7 : 1.4, c); }, {passive: false});
$("legend").textContent = " \u25C6 origin   \u25CF surface   \u25CB collateral (black ring) / other; markers outside the zoom sit faded at the edge";
draw();
</script></body></html>
"""
