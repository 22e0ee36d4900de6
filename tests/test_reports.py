"""Reports people trust at a glance, over every recording: each format opens with the
verdict's headline, nothing says "None" where a finding belongs, no empty rank list, no
contradiction between the checklist, the verdict and the headline; the terminal fits 80
columns and is plain without colour."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

import forensics
from forensics.report import Options, render
from forensics.report.document import build

from tests.conftest import shared_bundles

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
RECORDINGS = sorted(
    [p for p in (REPO / "samples").iterdir() if p.is_dir()]
    + [p for d in ("gpu", "cpu", "handmade", "flightrec") for p in (DATA / d).iterdir() if p.is_dir()]
    + [DATA / "collect" / "h200_cupy_oob" / "bundle.tar.gz", DATA / "env" / "h200"]
    + [p for p in shared_bundles()]
)
_CASES: dict = {}


def case_of(path: Path):
    if str(path) not in _CASES:
        _CASES[str(path)] = forensics.analyze(path)
    return _CASES[str(path)]


def rendered(case, fmt: str, width: int = 80) -> str:
    out = io.StringIO()
    render(build(case), fmt, out, Options(width=width, color=False, redact=False))
    return out.getvalue()


def _unescape_md(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def _squash(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_format_opens_with_the_verdicts_headline(path):
    case = case_of(path)
    headline = case.verdict.headline
    assert headline and "None" not in headline
    terminal = rendered(case, "terminal")
    # the verdict box's first line(s): the headline, wrapped at 80 columns
    first = _squash(" ".join(terminal.splitlines()[1:6]))
    assert first.startswith(_squash(headline)[:60])
    markdown = rendered(case, "markdown")
    quote = next(line for line in markdown.splitlines() if line.startswith("> **"))
    assert _squash(headline) in _squash(_unescape_md(quote))
    page = rendered(case, "html")
    assert json.loads(rendered(case, "json"))["verdict"]["headline"] == headline
    assert "forensics report" in page or headline[:40] in page.replace("&#x27;", "'").replace("&quot;", '"')


def _verdict_part(terminal: str) -> str:
    """The terminal report up to the timeline: the part made of findings, not log lines."""
    return terminal.split("Timeline around the failure")[0].split("Incident checklist")[0]


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_none_no_empty_rank_list_no_contradiction(path):
    case = case_of(path)
    v = case.verdict
    verdict_text = _verdict_part(rendered(case, "terminal")) + "\n" + v.summary + "\n" + \
        "\n".join(s.why for s in v.next_steps) + "\n" + "\n".join(c.finding for c in v.checklist)
    assert not re.search(r"\bNone\b", verdict_text), verdict_text
    flat = _squash(verdict_text)           # the terminal wraps lines: judge the words
    assert not re.search(r"\branks:?\s*(?:[,.;)]|$)", flat), flat
    assert "pid None" not in verdict_text and "rank None" not in verdict_text
    markdown = rendered(case, "markdown").split("### Evidence")[0]
    assert not re.search(r"\bNone\b", _unescape_md(markdown).split("| key |")[0])
    if v.failed:
        assert "No failure found" not in rendered(case, "terminal")
        assert v.first_failure is not None or v.hang is not None
    else:
        assert v.headline == "No failure found in the inputs."
        assert not v.collateral
    client = next((c for c in v.checklist if c.check == "what the client saw"), None)
    if client is not None and client.status.value == "fail":
        assert v.failed, "an HTTP 5xx beside 'no failure found'"
    for rank in v.ranks:
        if rank.status.value in ("collateral", "origin", "surfaced", "failed"):
            assert rank.failure or rank.first_error, rank


@pytest.mark.parametrize("path", RECORDINGS[:6], ids=lambda p: p.name)
def test_terminal_fits_80_columns_and_is_plain_without_colour(path):
    text = rendered(case_of(path), "terminal", width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "\x1b[" not in text
    assert not re.search("[\u2500-\u257f]", text), "box characters in plain output"


def test_two_unrelated_incidents_together_get_a_warning():
    both = forensics.analyze(REPO / "samples")
    assert any("unrelated runs" in note for note in both.verdict.notes)
    assert "unrelated runs" in rendered(both, "terminal")
    alone = case_of(REPO / "samples" / "gpu_tp4_oob_del_cumemfree")
    assert not any("unrelated runs" in note for note in alone.verdict.notes)


FIRST_SCREEN_LINES = 40


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_first_screen_is_the_answer(path, width):
    """The default terminal report fits 40 lines at 80 and 120 columns and holds the
    answer: the headline, the surfaces, the origin and where a tool located it, the first
    next steps; the rest is behind --full, which ends with the headline again (what stays
    on screen)."""
    case = case_of(path)
    v = case.verdict
    compact = rendered(case, "terminal", width=width)
    lines = compact.splitlines()
    assert len(lines) <= FIRST_SCREEN_LINES, compact
    flat = _squash(compact)
    assert _squash(v.headline)[:60] in flat
    if v.surfaces:
        assert "Surface" in compact
    if v.origin is not None:
        assert "Origin" in compact
        if v.origin.location:
            assert _squash(v.origin.location) in flat
    if v.next_steps:
        assert _squash(v.next_steps[0].title or v.next_steps[0].why)[:50] in flat
    assert "Timeline around the failure" not in compact and "Incident checklist" not in compact
    out = io.StringIO()
    render(build(case), "terminal", out, Options(width=width, color=False, redact=False, full=True))
    full = out.getvalue()
    assert "Timeline around the failure" in full
    if v.checklist:
        assert "Incident checklist" in full
    assert _squash(full.splitlines()[-1]) in _squash(v.headline) or _squash(v.headline)[-40:] in _squash(
        " ".join(full.splitlines()[-4:]))


def test_show_picks_sections_by_name_and_refuses_unknown_ones():
    from click.testing import CliRunner
    from forensics.cli import main
    sample = str(REPO / "samples" / "gpu_tp4_oob_del_cumemfree")
    shown = CliRunner().invoke(main, ["analyze", sample, "--show", "timeline,env"]).output
    assert "Timeline around the failure" in shown and "Environment" in shown
    assert "Next steps" not in shown and "Incident checklist" not in shown
    refused = CliRunner().invoke(main, ["analyze", sample, "--show", "timeline,nope"])
    assert refused.exit_code == 2 and "nope: not a section" in refused.output


DEFAULTS_AS_FACTS = ("none printed", "=?", " ?,", "TP=?", "PP=?", "logs of 0 of", "rank None",
                     "pid None", "Surface an unidentified process", "surfaced on an unidentified process")


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_report_cites_a_section_it_lacks_or_shows_a_default_as_a_fact(path):
    case = case_of(path)
    document = build(case).to_json()
    for fmt in ("terminal", "markdown"):
        text = _squash(rendered(case, fmt) if fmt == "markdown" else
                       _full(case))
        if "see known issues" in text or "possible known issue" in text:
            assert document["known_issues"], fmt
        if "see next steps" in text:
            assert document["next_actions"], fmt
        for default in DEFAULTS_AS_FACTS:
            assert default not in text, (fmt, default)
    for item in document["checklist"]:
        assert "?" not in item["finding"].replace("?)", ""), item


def _full(case) -> str:
    out = io.StringIO()
    render(build(case), "terminal", out, Options(width=120, color=False, redact=False, full=True))
    return out.getvalue()
