"""The HTML report: one self-contained file (no network, no CDN).

The verdict, tables and an interactive per-rank timeline (zoom with the wheel or the
buttons, hover for the line, click a marker for its evidence).  The page's data is the
JSON report itself, redacted like the Markdown by default, embedded in a script tag.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

from forensics.redact import Redactor

if TYPE_CHECKING:
    from forensics.case import Case

MARKER_KINDS = ("cuda-error", "xid", "sanitizer", "cuda-gdb", "core-dump", "worker-died", "peer-failure",
                "nccl", "engine-fatal", "engine-dead", "engine-worker-failed", "http", "exit", "device-assert",
                "oom", "fatal-signal", "worker-exception", "parent-exited", "scheduler-dump")


def render(case: "Case", redact: bool = True) -> str:
    report = case.to_dict(timeline_limit=None)
    report["timeline"] = [e for e in report["timeline"] if e["kind"] in MARKER_KINDS][:2000]
    if redact:
        redactor = Redactor()
        report = redactor.data(report)
        report["redaction"] = {"enabled": True, "counts": redactor.summary()}
    data = json.dumps(report, default=str).replace("</", "<\\/")
    title = html.escape(report["verdict"]["summary"][:120] or "forensics report")
    return PAGE.replace("__TITLE__", title).replace("__DATA__", data)


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>forensics: __TITLE__</title>
<style>
 body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
 header{background:#1d2330;color:#fff;padding:12px 20px} header h1{font-size:18px;margin:0}
 main{padding:16px 20px;max-width:1300px} section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin-bottom:14px}
 h2{font-size:15px;margin:0 0 8px} table{border-collapse:collapse;width:100%} td,th{border-bottom:1px solid #eceff3;padding:3px 6px;text-align:left;vertical-align:top}
 .origin{color:#b3002d;font-weight:600}.surfaced{color:#d04a02}.collateral{color:#8a6d00}.healthy{color:#1b7f3a}.unknown{color:#666}
 .pass{color:#1b7f3a}.fail{color:#b3002d;font-weight:600}
 #lanes{width:100%;height:auto;background:#fbfcfd;border:1px solid #e3e6ea;cursor:grab}
 #tip{position:fixed;pointer-events:none;background:#1d2330;color:#fff;padding:5px 8px;border-radius:4px;font-size:12px;max-width:520px;display:none;white-space:pre-wrap}
 #evidence{white-space:pre-wrap;font:12px/1.4 ui-monospace,monospace;background:#f3f4f6;padding:8px;border-radius:4px;min-height:2em}
 .btn{border:1px solid #c6ccd5;background:#fff;border-radius:4px;padding:2px 8px;margin-right:4px;cursor:pointer}
 code{font:12px ui-monospace,monospace}
</style></head><body>
<header><h1 id="title"></h1><div id="sig"></div></header>
<main>
<section><h2>Verdict</h2><div id="verdict"></div></section>
<section><h2>Timeline (one lane per rank)</h2>
 <div><button class="btn" id="zin">zoom in</button><button class="btn" id="zout">zoom out</button><button class="btn" id="zreset">reset</button>
 <span id="legend"></span></div>
 <svg id="lanes" role="img" aria-label="per-rank timeline"></svg>
 <h2 style="margin-top:10px">Evidence</h2><div id="evidence">click a marker</div></section>
<section><h2>Processes</h2><table id="ranks"></table></section>
<section><h2>Incident checklist</h2><table id="checklist"></table></section>
<section><h2>Known issues</h2><div id="known"></div></section>
<section><h2>Next steps</h2><div id="next"></div></section>
<section><h2>Environment</h2><table id="env"></table></section>
<section><h2>Inputs</h2><table id="sources"></table></section>
</main><div id="tip"></div>
<script id="report-data" type="application/json">__DATA__</script>
<script>
"use strict";
const R = JSON.parse(document.getElementById("report-data").textContent);
const $ = id => document.getElementById(id);
const esc = s => String(s == null ? "-" : s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]));
const row = cells => "<tr>" + cells.map(c => "<td>" + c + "</td>").join("") + "</tr>";
const head = cells => "<tr>" + cells.map(c => "<th>" + esc(c) + "</th>").join("") + "</tr>";
const V = R.verdict;
$("title").textContent = V.error ? V.error.name + " (" + V.error.code + ")" : (V.failure_kind || "no failure found");
$("sig").textContent = R.signature ? "signature " + R.signature : "";
let vh = "<p>" + esc(V.summary) + "</p>";
if (V.origin) vh += "<p><b>Origin</b> <span class='origin'>" + esc(V.origin.kernel) + "</span> on rank " + esc(V.origin.rank) + " (pid " + esc(V.origin.pid) + "): " + esc(V.origin.fault) + " - confidence <b>" + esc(V.origin.confidence) + "</b></p>";
else if (V.error && V.error.sticky) vh += "<p><b>Origin</b> unknown: the calls below only reported an earlier asynchronous fault.</p>";
for (const s of V.surfaces) vh += "<p><b>Surface</b> rank " + esc(s.rank) + " pid " + esc(s.pid) + ": " + esc(s.api || "") + " at <code>" + esc(s.file) + ":" + esc(s.line) + "</code> in <code>" + esc(s.function) + "</code> <small>[" + esc(s.source) + "]</small></p>";
if (V.first_failure) vh += "<p><b>First failure</b> rank " + esc(V.first_failure.rank) + ": " + esc(V.first_failure.basis) + "</p>";
$("verdict").innerHTML = vh;
$("ranks").innerHTML = head(["rank","pid","role","status","exit","how it went down"]) + R.ranks.map(r => row([esc(r.rank), esc(r.pid), esc(r.role), "<span class='" + esc(r.status) + "'>" + esc(r.status) + "</span>", esc(r.exit_code), esc(r.failure)])).join("");
$("checklist").innerHTML = head(["check","","finding"]) + (R.checklist || []).map(c => row([esc(c.check), "<span class='" + c.status + "'>" + esc(c.status) + "</span>", esc(c.finding)])).join("");
$("known").innerHTML = (R.known_issues || []).map(k => "<p><b>" + esc(k.likelihood) + "</b> <code>" + esc(k.id) + "</code> " + esc(k.title) + "<br>workaround: " + esc(k.workaround) + "<br><small>does not prove: " + esc(k.does_not_prove) + "</small></p>").join("") || "none matched";
$("next").innerHTML = (R.next_steps || []).map(s => { const p = s.split("  # "); return "<p>" + esc(p[1] || "") + "<br><code>" + esc(p[0]) + "</code></p>"; }).join("") || "none";
$("env").innerHTML = Object.entries(R.environment).map(([k, v]) => row(["<code>" + esc(k) + "</code>", esc(v)])).join("");
$("sources").innerHTML = head(["file","kind","lines","events","unparsed","problems"]) + R.sources.map(s => row([esc(s.path), esc(s.kind), esc(s.lines), esc(s.events), esc(s.unparsed_lines), esc((s.problems || []).join("; "))])).join("");

// ---- timeline: lanes per rank, markers per event ----
const COLORS = {"cuda-error":"#d04a02","xid":"#b3002d","sanitizer":"#b3002d","cuda-gdb":"#b3002d","core-dump":"#b3002d","peer-failure":"#8a6d00","nccl":"#8a6d00","worker-died":"#6a1b9a","engine-fatal":"#555","engine-dead":"#555","engine-worker-failed":"#555","http":"#1565c0","exit":"#999"};
const laneOf = e => e.rank != null ? "rank " + e.rank : (e.role || "other");
// One-second stamps put many events on one instant: spread each second's events over
// it in log order, and put events without a time (dmesg uptimes, exit files) at the end.
const stamped = R.timeline.filter(e => e.time), untimed = R.timeline.filter(e => !e.time);
const perSecond = {};
stamped.forEach(e => { (perSecond[e.time] = perSecond[e.time] || []).push(e); });
Object.values(perSecond).forEach(group => group.forEach((e, k) => { e._t = Date.parse(e.time) + (group.length > 1 ? k * 900 / group.length : 0); }));
const events = stamped.concat(untimed);
const lanes = [...new Set(R.ranks.filter(r => r.rank != null).map(r => "rank " + r.rank).concat(events.map(laneOf)))]
  .sort((a, b) => (a.startsWith("rank") ? 0 : 1) - (b.startsWith("rank") ? 0 : 1) || a.localeCompare(b, undefined, {numeric: true}));
const svg = $("lanes"), NS = "http://www.w3.org/2000/svg", LANE = 34, LEFT = 110, W = 1200;
svg.setAttribute("viewBox", "0 0 " + W + " " + (lanes.length * LANE + 30));
const times = stamped.map(e => e._t);
let t0 = Math.min(...times), t1 = Math.max(...times);
if (!isFinite(t0)) { t0 = 0; t1 = 1; } if (t1 - t0 < 1000) { t0 -= 500; t1 += 500; }
let view = [t0, t1];
untimed.forEach((e, k) => { e._t = null; e._slot = k; });
const originRank = V.origin ? V.origin.rank : null;
function mark(e) {
  if (V.origin && e.rank === originRank && ["xid","sanitizer","cuda-gdb","core-dump"].includes(e.kind)) return "origin";
  if (V.surfaces.some(s => s.source === e.source)) return "surface";
  const r = R.ranks.find(x => x.rank === e.rank && e.rank != null);
  return r && r.status === "collateral" && ["peer-failure","nccl","exit","worker-died"].includes(e.kind) ? "collateral" : "event";
}
function draw() {
  svg.innerHTML = "";
  const x = t => LEFT + (t - view[0]) / (view[1] - view[0]) * (W - LEFT - 20);
  lanes.forEach((l, i) => {
    const y = 20 + i * LANE;
    const line = document.createElementNS(NS, "line");
    line.setAttribute("x1", LEFT); line.setAttribute("x2", W - 10); line.setAttribute("y1", y); line.setAttribute("y2", y);
    line.setAttribute("stroke", "#d5dae1"); svg.appendChild(line);
    const label = document.createElementNS(NS, "text");
    label.setAttribute("x", 6); label.setAttribute("y", y + 4); label.setAttribute("class", "lane-label"); label.textContent = l; svg.appendChild(label);
  });
  events.forEach(e => {
    const m = mark(e), y = 20 + lanes.indexOf(laneOf(e)) * LANE;
    let t;
    if (e._t == null) { t = view[1]; } else { t = e._t; if (t < view[0] || t > view[1]) return; }
    const c = document.createElementNS(NS, m === "origin" ? "rect" : "circle");
    if (m === "origin") { c.setAttribute("x", x(t) - 7); c.setAttribute("y", y - 7); c.setAttribute("width", 14); c.setAttribute("height", 14); c.setAttribute("transform", "rotate(45 " + x(t) + " " + y + ")"); }
    else { c.setAttribute("cx", x(t)); c.setAttribute("cy", y); c.setAttribute("r", m === "surface" ? 7 : 5); }
    c.setAttribute("fill", m === "origin" ? "#b3002d" : m === "surface" ? "#d04a02" : (COLORS[e.kind] || "#888"));
    c.setAttribute("stroke", m === "collateral" ? "#000" : "#fff");
    c.setAttribute("class", "marker marker-" + m); c.setAttribute("data-source", e.source);
    c.addEventListener("mousemove", ev => { const tip = $("tip"); tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px"; tip.textContent = (e.time || "no wall-clock time") + "  " + laneOf(e) + "  [" + e.kind + "]\n" + e.message + "\n" + e.source; });
    c.addEventListener("mouseleave", () => { $("tip").style.display = "none"; });
    c.addEventListener("click", () => { $("evidence").textContent = m.toUpperCase() + "  " + e.source + "\n" + e.time + "  " + laneOf(e) + "  pid " + e.pid + "\n\n" + e.message; });
    svg.appendChild(c);
  });
}
function zoom(f, center) { const c = center == null ? (view[0] + view[1]) / 2 : center; const half = Math.max(200, (view[1] - view[0]) * f / 2); view = [c - half, c + half]; draw(); }
$("zin").onclick = () => zoom(0.5); $("zout").onclick = () => zoom(2); $("zreset").onclick = () => { view = [t0, t1]; draw(); };
svg.addEventListener("wheel", ev => { ev.preventDefault(); const r = svg.getBoundingClientRect(); const frac = (ev.clientX - r.left) / r.width * W; const c = view[0] + (frac - LEFT) / (W - LEFT - 20) * (view[1] - view[0]); zoom(ev.deltaY < 0 ? 0.7 : 1.4, c); }, {passive: false});
$("legend").innerHTML = " &#9670; origin &nbsp; &#9679; surface &nbsp; &#9675; collateral / other";
draw();
</script></body></html>
"""
