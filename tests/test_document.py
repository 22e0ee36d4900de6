"""The typed report document (forensics/report/document.py, sections.py, base.py): every
registered section is drawn by every renderer, a new section is one dataclass and one
draw function per renderer, the JSON report is the sections' facts, redaction reaches
every fact, and the decisions the renderers used to make are the document's."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import forensics
from forensics.redact import redact_document
from forensics.report import REPORTERS, Options, html, markdown, render, terminal
from forensics.report.base import REGISTRY, Form, Group, Section, Span, entries, section, show_names, unregister
from forensics.report.document import Document, build
from forensics.report.sections import (Chain, Environment, FirstFailure, Headline, Marker, Origin, Processes,
                                       Surfaces, Timeline, UNTIMED_LANE, cited)
from forensics.verdict import Status
from tests.conftest import DATA
from tests.helpers import analyze_text

REPO = Path(__file__).resolve().parents[1]
GPU_SAMPLE = REPO / "samples" / "gpu_tp4_oob_del_cumemfree"
BUNDLES = [GPU_SAMPLE, REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk", DATA / "gpu" / "tp4_oob_write_memcheck",
           DATA / "handmade" / "nccl_watchdog_hang", DATA / "handmade" / "planted_secrets",
           DATA / "handmade" / "oom_during_prefill"]
DRAWN = {"terminal": terminal.DRAW, "markdown": markdown.DRAW, "html": html.DRAW}
EVERYTHING = dict(width=100, color=False, full=True, explain=True, verbose=True)

_CASES: dict = {}


def case_of(path: Path):
    if str(path) not in _CASES:
        _CASES[str(path)] = forensics.analyze(path)
    return _CASES[str(path)]


def rendered(document: Document, fmt: str, **options) -> str:
    out = io.StringIO()
    render(document, fmt, out, Options(**{"redact": False, **EVERYTHING, **options}))
    return out.getvalue()


# --- the registry -----------------------------------------------------------------------------

def test_every_registered_section_has_a_draw_function_in_every_renderer():
    for fmt, drawers in DRAWN.items():
        assert drawers.missing() == [], fmt
    assert {e.name for e in entries()} >= {
        "headline", "known-issues", "next-steps", "summary", "error", "surfaces", "origin", "first-failure", "hang",
        "hardware", "notes", "chain", "explain", "env", "processes", "checklist", "timeline", "inputs", "signature",
        "evidence", "redaction"}


def test_sections_are_frozen_dataclasses_in_one_order():
    orders = [e.order for e in entries()]
    assert orders == sorted(set(orders))
    for entry in entries():
        assert dataclasses.is_dataclass(entry.cls) and entry.cls.__dataclass_params__.frozen, entry.name
        assert issubclass(entry.cls, Section) and entry.cls.entry is entry
    assert entries()[0].group is Group.HEADLINE
    # --show takes exactly the registry's names
    assert show_names() == tuple(e.show for e in entries() if e.show)


def test_the_registry_refuses_a_clash_and_a_mutable_section():
    with pytest.raises(ValueError, match="clashes"):
        @section("origin", "Another origin", 9999)
        @dataclass(frozen=True)
        class Twice(Section):
            pass
    with pytest.raises(ValueError, match="clashes"):
        @section("elsewhere", "Same place", Origin.entry.order)
        @dataclass(frozen=True)
        class SamePlace(Section):
            pass
    with pytest.raises(TypeError, match="frozen"):
        @section("mutable", "Mutable", 9998)
        @dataclass
        class Mutable(Section):
            pass
    assert "mutable" not in REGISTRY and "elsewhere" not in REGISTRY


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_each_present_section_is_drawn_once_in_every_renderer(path, monkeypatch):
    """Each renderer lays out every section the document holds - none left out, none
    drawn twice - by its registered draw function (counted as it is called)."""
    document = build(case_of(path))
    for fmt, drawers in DRAWN.items():
        calls: dict[str, int] = {}
        for cls, fn in list(drawers.items()):
            def counted(item, *args, _fn=fn):
                calls[item.entry.name] = calls.get(item.entry.name, 0) + 1
                out = _fn(item, *args)
                assert out not in (None, "", []), (fmt, item.entry.name)
                return out
            monkeypatch.setitem(drawers, cls, counted)
        rendered(document, fmt)
        present = {s.entry.name for s in document.sections if s.present}
        assert set(calls) == present, (fmt, present ^ set(calls))
        assert set(calls.values()) == {1}, (fmt, calls)
        monkeypatch.undo()


# --- a new section is one dataclass and one draw function per renderer --------------------------

WORD = "zyzzyva"


def test_a_new_section_is_one_dataclass_and_one_draw_function_per_renderer(monkeypatch):
    @section("dummy", "Dummy findings", 96, show="dummy")
    @dataclass(frozen=True)
    class Dummy(Section):
        word: str
        contact: str

        @classmethod
        def build(cls, facts):
            return cls(WORD, "carol.ops@example-health.com")

    try:
        monkeypatch.setitem(terminal.DRAW, Dummy, lambda item, ctx: terminal.Text(f"{item.word} {item.contact}"))
        monkeypatch.setitem(markdown.DRAW, Dummy,
                            lambda item, ctx: [markdown.Block(f"{item.word} {markdown.md_text(item.contact)}\n\n")])
        monkeypatch.setitem(html.DRAW, Dummy, lambda item, ctx: f"<p>{html.h(item.word)} {html.h(item.contact)}</p>")
        document = build(case_of(GPU_SAMPLE))
        assert document.get(Dummy).word == WORD
        for fmt in ("terminal", "markdown", "html"):
            assert WORD in rendered(document, fmt), fmt
        # the JSON report has its facts under its name, and the schema still holds
        data = json.loads(rendered(document, "json"))
        assert data["dummy"] == {"word": WORD, "contact": "carol.ops@example-health.com"}
        # its facts are redacted like every other's, with nothing more to write
        for fmt in ("markdown", "html", "json"):
            shared = rendered(document, fmt, redact=True)
            assert WORD in shared and "example-health" not in shared, fmt
        # the terminal's first screen leaves it to --show, which takes its name
        assert WORD not in rendered(document, "terminal", full=False, explain=False, verbose=False)
        assert WORD in rendered(document, "terminal", full=False, explain=False, verbose=False, show=("dummy",))
        from click.testing import CliRunner
        from forensics.cli import main
        out = CliRunner().invoke(main, ["analyze", str(GPU_SAMPLE), "--show", "dummy", "--no-pager"]).output
        assert WORD in out and "Timeline around the failure" not in out
    finally:
        unregister("dummy")
    assert "dummy" not in show_names()


# --- the JSON report is the sections' facts -----------------------------------------------------

@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_redacting_the_document_redacts_what_the_json_report_redacts(path):
    """``Document.redacted()`` (what Markdown and HTML draw) holds exactly the facts that
    redacting the JSON report gives, pseudonyms numbered alike."""
    document = build(case_of(path))
    assert document.redacted().to_json() == redact_document(document.to_json())


def test_the_json_report_keeps_its_key_order():
    data = build(case_of(GPU_SAMPLE)).to_json()
    assert list(data) == ["schema", "tool", "headline", "sources", "inputs", "ranks", "verdict", "environment",
                          "environment_sources", "signature", "signature_site", "signature_parts", "known_issues",
                          "next_steps", "next_actions", "checklist", "traffic", "evidence", "timeline", "stories",
                          "input_summary", "redaction"]
    assert list(data["verdict"]) == ["headline", "failure_kind", "error", "surfaces", "origin", "origin_unknown",
                                     "faulting_process", "first_failure", "collateral", "hang", "steps", "hardware",
                                     "summary", "notes", "rule_failures", "explanation"]
    assert data["redaction"] == {"enabled": False, "counts": {}}
    # the Python API's dict is the same report
    assert case_of(GPU_SAMPLE).document() == data


def test_a_document_is_immutable():
    document = build(case_of(GPU_SAMPLE))
    with pytest.raises(dataclasses.FrozenInstanceError):
        document.get(Headline).text = "something else"
    redacted = document.redacted()
    assert redacted is not document and not document.to_json()["redaction"]["enabled"]


# --- decisions the document makes, once -----------------------------------------------------------

def test_the_timeline_window_is_decided_once_around_the_first_failure():
    timeline = build(case_of(GPU_SAMPLE)).get(Timeline)
    assert len(timeline.events) > Timeline.WINDOW >= len(timeline.window)
    first = next(e for e in timeline.events if e.kind == "cuda-error")
    assert first in timeline.window and timeline.window.index(first) <= 2    # at most two rows before it
    assert all(e.kind not in ("log", "exit") or e.severity in ("ERROR", "CRITICAL") for e in timeline.window)
    table = rendered(build(case_of(GPU_SAMPLE)), "terminal").split("Timeline around the failure")[1]
    table = table.split("Incident checklist")[0] if "Incident checklist" in table else table.split("Inputs")[0]
    assert sum(1 for line in table.splitlines() if re.match(r" \d\d:\d\d:\d\d", line)) == len(timeline.window)


def test_timeline_markers_are_the_documents():
    document = build(case_of(DATA / "gpu" / "tp4_oob_write_memcheck"))
    timeline = document.get(Timeline)
    marks = {e.marker for e in timeline.events}
    assert {Marker.ORIGIN, Marker.SURFACE, Marker.COLLATERAL} <= marks
    origin_rank = document.get(Origin).origin.rank
    assert all(e.rank == origin_rank for e in timeline.events if e.marker == Marker.ORIGIN)
    page = rendered(document, "html")
    data = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert [m["marker"] for m in data["markers"]] == [e.marker.value for e in timeline.events]
    assert data["lanes"] == list(timeline.lanes)
    # evidence without a wall-clock time is drawn in its own lane, and still says whose it is
    untimed = [m for m in data["markers"] if not m["time"]]
    assert untimed and {m["row"] for m in untimed} == {UNTIMED_LANE}
    assert f"rank {origin_rank}" in {m["lane"] for m in untimed if m["marker"] == "origin"}
    assert "mark(" not in page.split("<script>", 1)[1]        # the page's script classifies nothing itself


HTTP_LOG = """\
(APIServer pid=7000) INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.32.0
(APIServer pid=7000) INFO 12-02 10:00:01 [logger.py:1] 127.0.0.1:40728 - "GET /v1/models/50 HTTP/1.1" {status} Oops
(Worker_TP0 pid=921) ERROR 12-02 10:00:07 [multiproc_executor.py:1063] WorkerProc hit an exception.
(Worker_TP0 pid=921) ERROR 12-02 10:00:07 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker_TP0 pid=921) ERROR 12-02 10:00:07 [multiproc_executor.py:1063]   File "/srv/app/model.py", line 12, in forward
(Worker_TP0 pid=921) ERROR 12-02 10:00:07 [multiproc_executor.py:1063]     x = run(y)
(Worker_TP0 pid=921) ERROR 12-02 10:00:07 [multiproc_executor.py:1063] RuntimeError: CUDA error: an illegal memory access was encountered
"""


@pytest.mark.parametrize("status, drawn", [(404, False), (503, True)])
def test_the_client_5xx_comes_from_the_status_not_from_the_text(status, drawn):
    """(The Mermaid timeline once drew "HTTP 5xx" for any HTTP line with "50" in it: a
    404 on /v1/models/50.)"""
    document = build(analyze_text(HTTP_LOG.format(status=status)))
    assert document.get(Timeline).client_saw_5xx is drawn
    assert ("API-)Client: HTTP 5xx" in rendered(document, "markdown")) is drawn


def test_surfaces_at_one_call_site_are_one_row():
    surfaces = build(case_of(DATA / "gpu" / "tp4_oob_write_coredump")).get(Surfaces)
    for group in surfaces.groups:
        assert len({s.site for s in group.members}) == 1
    assert sum(len(g.members) for g in surfaces.groups) == len(surfaces.surfaces)


def test_the_first_screen_puts_who_failed_first():
    processes = build(case_of(DATA / "handmade" / "nccl_watchdog_hang")).get(Processes)
    rows, rest = processes.shown(compact=True)
    order = [Processes.IMPORTANCE[p.status] for p in rows]
    assert order == sorted(order) and len(rows) == Processes.FIRST_SCREEN
    assert rest and rest.startswith(f"{len(processes.processes) - len(rows)} more: ")


def test_origin_unknown_is_said_once_by_the_document():
    document = build(case_of(REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk"))
    origin = document.get(Origin)
    assert origin.origin is None
    sentence = origin.unknown or (origin.faulting and origin.faulting.fault)
    assert sentence
    for fmt in ("terminal", "markdown", "html"):
        text = re.sub(r"\s+", " ", re.sub(r"\\(.)", r"\1", rendered(document, fmt)).replace("&#x27;", "'"))
        assert " ".join(sentence.split())[:50] in text, fmt


def test_cited_locations_in_a_rules_sentence_are_code():
    locations = frozenset({"server.log:61", "odd name `x`.log:3"})
    words = cited("first at server.log:61, then at odd name `x`.log:3; not server.log:612", locations)
    assert [s.text for s in words if s.form is Form.CODE] == ["server.log:61", "odd name `x`.log:3"]
    assert "".join(s.text for s in words) == "first at server.log:61, then at odd name `x`.log:3; not server.log:612"
    assert cited("nothing cited", locations) == (Span("nothing cited", Form.PROSE),)


def test_the_chain_runs_from_origin_to_collateral_in_every_format():
    document = build(case_of(GPU_SAMPLE))
    chain = document.get(Chain)
    collateral = [p for p in document.get(Processes).processes if p.status == Status.COLLATERAL]
    assert len(chain.steps) == 2 + len(collateral)
    assert "faulted on the device" in "".join(s.text for s in chain.steps[0])
    assert "Causal chain" in rendered(document, "terminal") and "<ol><li>" in rendered(document, "html")


def test_an_empty_environment_is_said_not_left_out():
    document = build(analyze_text("RuntimeError: CUDA error: an illegal memory access was encountered\n"))
    env = document.get(Environment)
    assert not env.rows and env.present
    assert env.EMPTY in rendered(document, "terminal")
    assert "### Your current environment" in rendered(document, "markdown")


def test_the_first_failure_basis_cites_its_evidence_as_code():
    document = build(case_of(REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk"))
    first = document.get(FirstFailure)
    cites = [s.text for s in first.line if s.form is Form.CODE]
    assert cites and all(c in first.first.basis for c in cites)
    assert f"`{cites[0]}`" in rendered(document, "markdown")


def test_every_format_is_registered_as_a_reporter():
    assert set(DRAWN) | {"json"} == set(REPORTERS)
