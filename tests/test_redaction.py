"""No planted secret survives a shared report (tests/data/handmade/planted_secrets is a
hand-made corpus; every secret in it is fake)."""

import json

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.redact import Redactor
from tests.conftest import DATA

CORPUS = DATA / "handmade/planted_secrets"
SECRETS = [
    "sk-proj-Zx81kdPQ2mw9AbCdEfGhIjKl", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456", "AKIAZ7Q2W3E4R5T6Y7U8",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY12", "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig42xyz", "S3cretPassw0rd",
    "deploy:", "carol.ops@example-health.com", "10.42.7.19", "203.0.113.77", "gpu-node-17", "prod.corp",
    "alice", "078-05-1120", "medical record", "128000, 5159", "The patient record shows",
]


def outputs(*extra):
    runner = CliRunner()
    md = runner.invoke(main, ["analyze", str(CORPUS), "--format", "markdown", *extra])
    js = runner.invoke(main, ["analyze", str(CORPUS), "--format", "json", "--redact", "--timeline-limit", "0", *extra])
    page = runner.invoke(main, ["analyze", str(CORPUS), "--format", "html", *extra])
    assert md.exit_code == 0 and js.exit_code == 0 and page.exit_code == 0, (md.output, js.output)
    return {"markdown": md.output, "json": js.output, "html": page.output}


@pytest.mark.parametrize("fmt", ["markdown", "json", "html"])
def test_no_planted_secret_survives(fmt):
    text = outputs()[fmt]
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, leaked


def test_json_records_the_counts_and_the_verdict_survives():
    report = json.loads(outputs()["json"])
    counts = report["redaction"]["counts"]
    assert report["redaction"]["enabled"]
    # the JSON carries only what the verdict and failure timeline need; what it carries is counted
    for kind in ("email", "ipv4", "home-user", "prompt-token-ids"):
        assert counts.get(kind), kind
    assert report["verdict"]["error"]["code"] == 700        # redaction never hides the verdict
    assert report["verdict"]["origin"]["rank"] == 1


def test_markdown_says_what_was_redacted():
    assert "_Redacted before sharing:" in outputs()["markdown"]


def test_opt_out_keeps_everything():
    md = CliRunner().invoke(main, ["analyze", str(CORPUS), "--format", "markdown", "--no-redact"]).output
    assert "/home/alice/" in md and "Redaction: off" in md


def test_pseudonyms_are_consistent():
    r = Redactor()
    first = r.text("host gpu-a.prod.corp at 10.0.0.5")
    second = r.text("again 10.0.0.5 on gpu-a.prod.corp, then 10.0.0.6")
    assert first == "host host-1 at 10.x.x.1"
    assert second == "again 10.x.x.1 on host-1, then 10.x.x.2"


def test_every_planted_line_is_redacted_line_by_line():
    """The redactor alone, on every line of the corpus (what a full-text export would carry)."""
    r = Redactor()
    text = r.text(CORPUS.joinpath("server.log").read_text())
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, leaked
    for kind in ("api-key", "hf-token", "aws-key", "aws-secret", "bearer-token", "password-in-url",
                 "email", "ipv4", "hostname", "home-user", "prompt", "prompt-token-ids", "sampled-output"):
        assert r.counts[kind], kind
