"""The JSON report validates against forensics/data/report.schema.json (the contract
forensics.report/1) for every sample, recorded and hand-made input, and every shared
recording; and verdict.headline is there and says what the verdict says."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import jsonschema
import pytest

import forensics
from forensics.case import analyze
from forensics.report import Options, render
from forensics.report.document import build
from tests.conftest import DATA, shared_bundles
from tests.helpers import analyze_text

REPO = Path(__file__).resolve().parents[1]
SCHEMA_PATH = REPO / "forensics" / "data" / "report.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
NO_FAILURE = "No failure found in the inputs."

INPUTS = sorted(p for p in (REPO / "samples").iterdir() if p.is_dir()) + [
    DATA / "gpu" / name for name in ("cpu_segv_core", "device_assert", "misaligned_address", "shared_race",
                                     "torch_item_after_oob", "tp4_oob_write_coredump", "tp4_oob_write_del_cumemfree",
                                     "tp4_oob_write_memcheck", "tp4_oob_write_memcheck_xml", "uninit_read")
] + [DATA / "handmade" / name for name in ("mnnvl_incident", "nccl_watchdog_hang", "oom_during_prefill",
                                           "planted_secrets", "startup_failure")
     ] + [DATA / "cpu" / "faulthandler_segv", DATA / "cpu" / "pyspy_hang", DATA / "env" / "h200",
          DATA / "coredumps" / "gcore_sleeper.10995.core", DATA / "hostile" / "restarts.log",
          DATA / "hostile" / "cut_traceback.log", DATA / "hostile" / "cut_sanitizer.log"]


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


_CACHE: dict = {}


def report_of(path: Path, redact: bool = False) -> dict:
    """The JSON report exactly as --format json writes it (through the renderer)."""
    key = (str(path), redact)
    if key not in _CACHE:
        out = io.StringIO()
        render(build(analyze(str(path))), "json", out, Options(redact=redact))
        _CACHE[key] = json.loads(out.getvalue())
    return _CACHE[key]


def check_headline(report: dict) -> None:
    """verdict.headline is present and consistent with the rest of the verdict."""
    v = report["verdict"]
    headline = v["headline"]
    assert isinstance(headline, str) and headline.strip() == headline and headline
    assert "\n" not in headline
    assert report["headline"] == headline
    failed = v["failure_kind"] is not None or v["error"] is not None
    assert (headline == NO_FAILURE) == (not failed), headline
    if v["error"] is not None:
        code = f" ({v['error']['code']})" if v["error"]["code"] is not None else ""
        assert headline.startswith(v["error"]["name"] + code), headline
    origin, faulting = v["origin"], v["faulting_process"]
    if origin is not None:
        assert origin["kernel"] in headline and f"({origin['confidence']} confidence)" in headline, headline
    elif faulting is not None and v["hang"] is None:
        assert "kernel unknown" in headline, headline
    elif v["error"] is not None and v["error"]["sticky"] and v["first_failure"] and v["first_failure"]["rank"] is not None:
        assert "(faulting kernel unknown)" in headline, headline
    first = v["first_failure"]
    if origin is None and first is not None and first["rank"] is not None and v["failure_kind"] != "relay-only":
        assert f"rank {first['rank']}" in headline, headline
    if v["surfaces"] and origin is None and v["hang"] is None:
        located = [s for s in v["surfaces"] if s["file"]]
        if located:
            assert "- surfaced at " in headline, headline
    if report["known_issues"]:
        assert f"known issue {report['known_issues'][0]['id']}" in headline, headline


def check_consistency(report: dict) -> None:
    """Fields the schema cannot relate to each other."""
    v = report["verdict"]
    assert v["collateral"] == sorted({r["rank"] for r in report["ranks"]
                                      if r["status"] == "collateral" and r["rank"] is not None})
    assert (report["signature"] is None) == (v["failure_kind"] is None and v["error"] is None)
    if v["origin"] is not None:
        assert v["faulting_process"] is None and v["origin"]["kernel"]
        assert v["origin"]["evidence"], "an origin is never claimed without evidence"
    if v["first_failure"] is not None and v["first_failure"]["rank"] is not None:
        statuses = {r["status"] for r in report["ranks"] if r["rank"] == v["first_failure"]["rank"]}
        assert statuses and "collateral" not in statuses and "healthy" not in statuses, statuses
    for source in report["sources"]:
        if source["lines"] is not None:
            assert (source["event_lines"] + source["noise_lines"] + source["counted_lines"]
                    + source["unparsed_lines"]) == source["lines"], source["path"]
    assert report["next_steps"] == [f"{a['why']}: {a['command']}" if a["command"] else a["why"]
                                    for a in report["next_actions"]]


def test_the_schema_is_the_packaged_one_and_itself_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert forensics.schema() == SCHEMA
    assert SCHEMA["properties"]["schema"]["const"] == "forensics.report/1"


def test_the_schema_rejects_a_broken_report():
    """The validation below can fail: a report missing required fields or with a wrong
    status does not validate."""
    good = report_of(INPUTS[0])
    VALIDATOR.validate(good)
    for damage in (lambda r: r.pop("verdict"), lambda r: r["ranks"][0].update(status="dead"),
                   lambda r: r["verdict"]["surfaces"][0].pop("source"), lambda r: r.update(schema="forensics.report/2"),
                   lambda r: r["sources"][0].update(lines="many")):
        broken = copy.deepcopy(good)
        damage(broken)
        assert list(VALIDATOR.iter_errors(broken)), damage


@pytest.mark.parametrize("path", INPUTS, ids=_id)
def test_report_validates(path):
    report = report_of(path)
    errors = sorted(VALIDATOR.iter_errors(report), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    assert report["schema"] == "forensics.report/1"
    assert report["tool"] == {"name": "forensics", "version": forensics.__version__}
    check_headline(report)
    check_consistency(report)


@pytest.mark.parametrize("path", [INPUTS[0], DATA / "handmade" / "planted_secrets"], ids=_id)
def test_redacted_report_validates(path):
    report = report_of(path, redact=True)
    VALIDATOR.validate(report)
    assert report["redaction"]["enabled"] is True
    check_headline(report)


def test_stdin_report_validates():
    case = analyze_text((REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk" / "server.log").read_text())
    report = json.loads(json.dumps(build(case).to_json(), default=str))
    VALIDATOR.validate(report)
    assert [s["path"] for s in report["sources"]] == ["<stdin>"]
    check_headline(report)


def test_a_healthy_log_validates_and_says_no_failure():
    case = analyze_text("INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.32.0\n")
    report = json.loads(json.dumps(build(case).to_json(), default=str))
    VALIDATOR.validate(report)
    assert report["verdict"]["headline"] == NO_FAILURE
    assert report["verdict"]["error"] is None and report["verdict"]["first_failure"] is None
    check_headline(report)


@pytest.mark.parametrize("path", [
    DATA / "gpu" / "tp4_oob_write_coredump",
    DATA / "env" / "h200",
    REPO / "samples" / "gpu_tp4_oob_del_cumemfree",
    DATA / "gpu" / "tp4_oob_write_memcheck",
    DATA / "gpu" / "uninit_read",
], ids=_id)
def test_headline_says_each_thing_once(path):
    v = report_of(path)["verdict"]
    headline = v["headline"]
    origin = v["origin"] or v["faulting_process"]
    assert origin is not None
    if v["origin"]:
        assert headline.count(f"in {v['origin']['kernel']}") == 1, headline
    assert headline.count(origin["fault"]) <= 1, headline


@pytest.mark.parametrize("bundle", shared_bundles(), ids=lambda p: p.name)
def test_shared_recording_report_validates(shared_case, bundle):
    case, _ = shared_case(bundle.name)
    out = io.StringIO()
    render(build(case), "json", out, Options())
    report = json.loads(out.getvalue())
    errors = list(VALIDATOR.iter_errors(report))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    check_headline(report)
    check_consistency(report)
