"""The HTML report and the Markdown's Mermaid timeline, in a real headless browser.

Needs Debian's chromium + chromium-driver, selenium (test extra) and the mermaid npm
package (installed by .ci/run into tests/.npm).  Without them the tests skip, unless
FORENSICS_REQUIRE_BROWSER=1 (set by .ci/run once it installed them) makes that a failure.
"""

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from forensics.case import analyze
from forensics.report import html as html_report
from forensics.report import markdown as md_report
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = Path(os.environ.get("FORENSICS_MERMAID_JS",
                                 REPO / "tests/.npm/node_modules/mermaid/dist/mermaid.min.js"))
BUNDLES = [REPO / "samples/gpu_tp4_oob_del_cumemfree", REPO / "samples/vllm_cpu_tp2_fault_2nd_chunk",
           DATA / "gpu/tp4_oob_write_coredump", DATA / "handmade/nccl_watchdog_hang"]


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


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_html_report_loads_with_lanes_markers_and_evidence(browser, bundle, tmp_path):
    case = analyze(str(bundle))
    page = tmp_path / "report.html"
    page.write_text(html_report.render(case))
    assert "http://" not in page.read_text().split("<script", 1)[0].replace("http://www.w3.org", "")
    browser.get(page.as_uri())
    time.sleep(0.3)
    assert not _errors(browser)
    lanes = browser.find_elements("css selector", ".lane-label")
    workers = [v for v in case.context.ranks.values() if v.role == "worker" and v.rank is not None]
    assert len(lanes) >= len(workers)
    markers = browser.find_elements("css selector", ".marker")
    assert markers
    if case.context.surfaces and case.context.surfaces[0].rank is not None:
        assert browser.find_elements("css selector", ".marker-surface")
    target = (browser.find_elements("css selector", ".marker-surface") or markers)[0]
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", target)
    evidence = browser.find_element("id", "evidence").text
    assert target.get_attribute("data-source") in evidence
    browser.find_element("id", "zin").click()
    assert not _errors(browser)
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_markdown_mermaid_block_renders(browser, bundle, tmp_path):
    _need(MERMAID_JS.exists(), f"mermaid from the npm registry at {MERMAID_JS} (npm install mermaid)")
    text = md_report.render(analyze(str(bundle)))
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
