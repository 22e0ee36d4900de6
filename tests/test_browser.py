"""The HTML report and the Markdown's Mermaid timeline, in a real headless browser.

Needs Debian's chromium + chromium-driver, selenium (test extra) and the mermaid npm
package (installed by .ci/run into tests/.npm).  Without them the browser tests skip,
unless FORENSICS_REQUIRE_BROWSER=1 (set by .ci/run once it installed them) makes that a
failure.  The static checks of the page (the element ids its script uses, the embedded
data, no network) run everywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

import forensics
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = Path(os.environ.get("FORENSICS_MERMAID_JS",
                                 REPO / "tests/.npm/node_modules/mermaid/dist/mermaid.min.js"))
BUNDLES = [REPO / "samples/gpu_tp4_oob_del_cumemfree", REPO / "samples/vllm_cpu_tp2_fault_2nd_chunk",
           DATA / "gpu/tp4_oob_write_coredump", DATA / "gpu/tp4_oob_write_memcheck", DATA / "handmade/nccl_watchdog_hang"]
DATA_SCRIPT = re.compile(r'<script id="report-data" type="application/json">(.*?)</script>', re.S)

_CASES: dict = {}


def case_of(bundle: Path):
    if str(bundle) not in _CASES:
        _CASES[str(bundle)] = forensics.analyze(bundle)
    return _CASES[str(bundle)]


# --- the page, statically ---------------------------------------------------------------------

@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_every_element_the_script_uses_is_in_the_page(bundle):
    """The page is put together from the report's sections: what its script looks up is
    in the page each report makes."""
    page = case_of(bundle).report("html")
    script = page.split("<script>", 1)[1]
    used = set(re.findall(r'\$\("([\w-]+)"\)', script)) | set(re.findall(r'getElementById\("([\w-]+)"\)', script))
    used |= set(re.findall(r'table\("([\w-]+)"', script))
    defined = set(re.findall(r'\bid="([\w-]+)"', page))
    assert used, "the script looks elements up by id"
    assert used <= defined, used - defined
    # what the browser tests below click and read
    assert {"zin", "zout", "zreset", "evidence", "lanes", "title", "verdict", "ranks", "report-data"} <= defined


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_the_page_embeds_the_report_and_needs_no_network(bundle):
    page = case_of(bundle).report("html")
    assert page.lower().startswith("<!doctype html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    data = json.loads(DATA_SCRIPT.search(page).group(1))
    document = json.loads(case_of(bundle).report("json", redact=True))
    assert data["verdict"] == document["verdict"]
    assert data["ranks"] == document["ranks"]
    assert "traffic" not in data
    outside_data = DATA_SCRIPT.sub("", page)
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", outside_data)    # nothing loaded from a network
    assert "http://" not in outside_data.replace("http://www.w3.org", "")
    assert "<title>forensics: " in page


def test_log_text_cannot_break_out_of_the_data_script(tmp_path):
    log = tmp_path / "console.log"
    log.write_text("(Worker_TP0 pid=1) ERROR 12-02 10:00:00 [x.py:1] RuntimeError: CUDA error: an illegal memory "
                   "access was encountered </script><script>alert(1)</script> <!--\n")
    page = forensics.analyze(log).report("html")
    body = DATA_SCRIPT.search(page).group(1)
    assert "</script" not in body.lower() and "<!--" not in body
    assert page.count("<script") == 2                          # the data and the page's own script
    data = json.loads(body)
    assert any("</script><script>alert(1)</script>" in s["exception"] for s in data["verdict"]["surfaces"])


# --- in a browser -------------------------------------------------------------------------------

def _need(condition: bool, what: str):
    if not condition:
        if os.environ.get("FORENSICS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test prerequisite missing: {what}")
        pytest.skip(f"browser test prerequisite missing: {what}")


@pytest.fixture(scope="module")
def browser():
    _need(shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
          "chromium and chromium-driver (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _need(False, "selenium (pip install '.[test]')")
    options = Options()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,1300",
                "--allow-file-access-from-files"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def _errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _click(driver, element):
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", element)


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_html_report_loads_with_lanes_markers_and_evidence(browser, bundle, tmp_path):
    case = case_of(bundle)
    page = tmp_path / "report.html"
    page.write_text(case.report("html"), encoding="utf-8")
    browser.get(page.as_uri())
    time.sleep(0.3)
    assert not _errors(browser)
    v = case.verdict
    assert browser.find_element("id", "title").text == v.headline
    lanes = [e.text for e in browser.find_elements("css selector", "#lanes .lane-label")]
    workers = sorted({r.rank for r in v.ranks if r.role == "worker" and r.rank is not None})
    assert all(f"rank {rank}" in lanes for rank in workers), lanes
    markers = browser.find_elements("css selector", "#lanes .marker")
    assert markers
    if any(s.source in {m.get_attribute("data-source") for m in markers} for s in v.surfaces):
        assert browser.find_elements("css selector", ".marker-surface")
    rows = browser.find_elements("css selector", "#ranks tr")
    assert len(rows) == len(v.ranks) + 1                       # a header and one row per process
    target = (browser.find_elements("css selector", ".marker-origin")
              or browser.find_elements("css selector", ".marker-surface") or markers)[0]
    _click(browser, target)
    evidence = browser.find_element("id", "evidence").text
    assert target.get_attribute("data-source") in evidence
    assert evidence.split()[0] in ("ORIGIN", "SURFACE", "COLLATERAL", "EVENT")
    viewbox = browser.find_element("id", "lanes").get_attribute("viewBox")
    axis = [e.text for e in browser.find_elements("css selector", "#lanes .axis")]
    browser.find_element("id", "zin").click()
    zoomed = [e.text for e in browser.find_elements("css selector", "#lanes .axis")]
    browser.find_element("id", "zreset").click()
    assert [e.text for e in browser.find_elements("css selector", "#lanes .axis")] == axis
    assert browser.find_element("id", "lanes").get_attribute("viewBox") == viewbox
    if len(set(axis)) > 1:
        assert zoomed != axis                                   # zooming changes the time axis
    assert not _errors(browser)
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_hostile_log_runs_no_script_in_the_page(browser, tmp_path):
    log = tmp_path / "console.log"
    log.write_text("(Worker_TP0 pid=1) ERROR 12-02 10:00:00 [x.py:1] RuntimeError: CUDA error: an illegal memory "
                   "access was encountered <img src=x onerror=\"document.title='pwned'\"> "
                   "</script><script>document.title='pwned'</script>\n")
    page = tmp_path / "report.html"
    page.write_text(forensics.analyze(log).report("html"), encoding="utf-8")
    browser.get(page.as_uri())
    time.sleep(0.3)
    assert "pwned" not in browser.title
    assert not browser.find_elements("css selector", "main img")
    shown = browser.find_element("id", "excerpts").get_attribute("textContent")
    assert "<img src=x onerror=" in shown                        # the log line is shown, as text


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_markdown_mermaid_block_renders(browser, bundle, tmp_path):
    _need(MERMAID_JS.exists(), f"mermaid from the npm registry at {MERMAID_JS} (npm install mermaid)")
    text = case_of(bundle).report("markdown")
    blocks = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    assert blocks, "the Markdown report has a Mermaid timeline"
    page = tmp_path / "mermaid.html"
    page.write_text(
        "<!doctype html><html><body><div id='out'></div>"
        f"<script src='{MERMAID_JS.as_uri()}'></script><script>"
        "mermaid.initialize({startOnLoad: false});"
        f"mermaid.render('tl', {json.dumps(blocks[0])})"
        ".then(r => { document.getElementById('out').innerHTML = r.svg; document.title = 'ok'; })"
        ".catch(e => { document.title = 'error: ' + e; });"
        "</script></body></html>")
    browser.get(page.as_uri())
    for _ in range(50):
        if browser.title:
            break
        time.sleep(0.1)
    assert browser.title == "ok", browser.title
    assert browser.find_elements("css selector", "#out svg")
    browser.save_screenshot(str(tmp_path / "mermaid.png"))


def test_untimed_evidence_has_its_own_lane_and_zoom_keeps_every_marker(browser, tmp_path):
    """The GPU sample's raw dmesg Xid has no wall clock: it sits in the untimed lane (not
    at the end of the time axis, where it would read as the last event); zooming in
    keeps every marker on the page (outside the view they sit faded at the edge)."""
    case = case_of(REPO / "samples/gpu_tp4_oob_del_cumemfree")
    page = tmp_path / "report.html"
    page.write_text(case.report("html"), encoding="utf-8")
    browser.get(page.as_uri())
    time.sleep(0.3)
    lanes = [e.text for e in browser.find_elements("css selector", "#lanes .lane-label")]
    assert "no wall-clock time" in lanes
    axis = [e.text for e in browser.find_elements("css selector", "#lanes .axis")]
    assert len(axis) >= 2 and all(re.match(r"\d\d:\d\d:\d\d", t) for t in axis)
    before = len(browser.find_elements("css selector", "#lanes .marker"))
    for _ in range(4):
        browser.find_element("id", "zin").click()
    after = browser.find_elements("css selector", "#lanes .marker")
    assert len(after) == before
    inside = browser.execute_script(
        "const s = document.getElementById('lanes').getBoundingClientRect();"
        "return [...document.querySelectorAll('#lanes .marker')].every(m => { const r = m.getBoundingClientRect();"
        " return r.left >= s.left - 1 && r.right <= s.right + 1 && r.top >= s.top - 1 && r.bottom <= s.bottom + 1; });")
    assert inside
    faded = [m for m in after if m.get_attribute("opacity") == "0.35"]
    assert faded, "after zooming in, markers outside the view sit faded at the edge"
    assert browser.find_element("id", "legend").text.strip()
    browser.save_screenshot(str(tmp_path / "zoomed.png"))
    assert not _errors(browser)
