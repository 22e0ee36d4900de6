"""Redaction (forensics/redact.py, rules in forensics/data/redaction.toml): what it
takes out of a report meant to be shared, what it leaves, the consistent stand-ins, and
which formats redact by default.

tests/data/handmade/planted_secrets is a hand-made corpus; every secret in it is fake.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from click.testing import CliRunner

import forensics
from forensics.cli import main
from forensics.redact import Redactor, redact_document
from forensics.report import REPORTERS
from tests.conftest import DATA

CORPUS = DATA / "handmade" / "planted_secrets"
SECRETS = [
    "sk-proj-Zx81kdPQ2mw9AbCdEfGhIjKl", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456", "AKIAZ7Q2W3E4R5T6Y7U8",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY12", "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig42xyz", "S3cretPassw0rd",
    "deploy:", "carol.ops@example-health.com", "10.42.7.19", "203.0.113.77", "gpu-node-17", "prod.corp",
    "alice", "078-05-1120", "medical record", "128000, 5159", "The patient record shows",
]


def redact(text: str) -> str:
    return Redactor().text(text)


# --- what is taken out -----------------------------------------------------------------------

@pytest.mark.parametrize("kind, line, secret, stand_in", [
    ("hf-token", "login with hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456 done", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456",
     "hf_[REDACTED]"),
    ("api-key", "OPENAI key sk-proj-Zx81kdPQ2mw9AbCdEfGhIjKl used", "Zx81kdPQ2mw9AbCdEfGhIjKl", "sk-[REDACTED]"),
    ("aws-key", "AWS_ACCESS_KEY_ID=AKIAZ7Q2W3E4R5T6Y7U8", "Z7Q2W3E4R5T6Y7U8", "AKIA[REDACTED]"),
    ("aws-secret", "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY12", "wJalrXUtnFEMI",
     "aws_secret_access_key=[REDACTED]"),
    ("bearer-token", "header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.c2VjcmV0.sig42xyz", "eyJhbGciOiJIUzI1NiJ9",
     "Bearer [REDACTED]"),
    ("password-in-url", "fetch https://deploy:S3cretPassw0rd@artifacts.prod.corp/models", "S3cretPassw0rd",
     "https://[REDACTED]:[REDACTED]@"),
    ("secret-assignment", "password=hunter2hunter2 retry", "hunter2hunter2", "password=[REDACTED]"),
    ("secret-assignment", "api_key: 'abcdefg12345'", "abcdefg12345", "api_key: '[REDACTED]"),
    ("email", "request from carol.ops@example-health.com", "carol.ops", "user1@example.invalid"),
    ("prompt", "Received request cmpl-91: prompt: 'My SSN is 078-05-1120, summarise', params: x", "078-05-1120",
     "prompt: [REDACTED PROMPT]"),
    ("prompt-token-ids", "prompt_token_ids: [128000, 5159, 74406, 374], lora_request: None", "128000",
     "prompt_token_ids: [REDACTED]"),
    ("prompt-token-ids", "NewRequestData(req_id=cmpl-91,prompt_token_ids=[128000, 5159],len=2)", "5159",
     "prompt_token_ids=[REDACTED]"),
    ("sampled-output", "num_computed_tokens=[0], output: 'The patient record shows', total=4", "patient",
     "output: [REDACTED OUTPUT]"),
    ("sampled-output", "RequestOutput(text='hello there world')", "hello there", "text=[REDACTED OUTPUT]"),
    ("home-user", 'File "/home/alice/venv/lib/python3.12/site-packages/vllm/x.py", line 3', "alice",
     "/home/user-1/venv/lib/python3.12/site-packages/vllm/x.py"),
    ("home-user", "model='/Users/bob/models/llama'", "bob", "/Users/user-1/models/llama"),
    ("ipv4", "listening at 10.42.7.19 for 203.0.113.77", "10.42.7.19", "at 10.x.x.1 for 10.x.x.2"),
    ("hostname", "peer gpu-a.prod.corp is down", "gpu-a.prod.corp", "peer host-1 is down"),
    ("hostname", "Nov 21 09:00:07 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 31", "gpu-node-17",
     "Nov 21 09:00:07 host-1 kernel: NVRM: Xid"),
    ("hostname", "Computer Name:   dgx-box-7", "dgx-box-7", "Computer Name:   host-1"),
])
def test_each_kind_is_redacted_and_counted(kind, line, secret, stand_in):
    redactor = Redactor()
    out = redactor.text(line)
    assert secret not in out, out
    assert stand_in in out, out
    assert redactor.counts[kind] >= 1, dict(redactor.counts)


def test_every_planted_secret_in_the_corpus_is_redacted():
    """The redactor alone, on every line of the corpus (what a full-text export would carry)."""
    redactor = Redactor()
    text = redactor.text(CORPUS.joinpath("server.log").read_text())
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, leaked
    for kind in ("api-key", "hf-token", "aws-key", "aws-secret", "bearer-token", "password-in-url",
                 "email", "ipv4", "hostname", "home-user", "prompt", "prompt-token-ids", "sampled-output"):
        assert redactor.counts[kind], kind
    # the log is still a log: one line per line, the failure still readable
    assert text.count("\n") == CORPUS.joinpath("server.log").read_text().count("\n")
    assert "torch.AcceleratorError: CUDA error: an illegal memory access was encountered" in text


# --- what is left alone ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error code=700(b'CUDA_ERROR_ILLEGAL_ADDRESS') at cuMemFree",
    "Invalid __global__ write of size 4 bytes at oneshot_allreduce_flag_kernel+0x110 in tp_signal_kernels.cu:43",
    "(Worker_TP2 pid=895) ERROR 12-02 10:42:37 [gpu_worker.py:155] rank 2 world_size=4",
    'File "/opt/serve/mini_vllm/worker/gpu_worker.py", line 125, in execute_model',
    "vLLM 0.32.0, torch 2.11.0+cu130, flashinfer 0.6.18, driver 580.159.04",
    "listening on 127.0.0.1:8000 and 0.0.0.0:8000",
    "NVRM: Xid (PCI:0000:00:06): 31, pid=895, name=python3, channel 0x0000000a",
    "num_computed_tokens=[512], max_num_batched_tokens=8064, tensor_parallel_size=4",
    "signal_pads_dev=0x7fa2e4a00000 exited_at=2026-12-02T10:42:37.920",
])
def test_the_evidence_itself_is_left_alone(text):
    redactor = Redactor()
    assert redactor.text(text) == text
    assert sum(redactor.counts.values()) == 0


@pytest.mark.parametrize("text", [
    "see https://github.com/vllm-project/vllm/issues/60660 and https://huggingface.co/meta-llama/Llama-3.3-70B",
    "docs at https://docs.vllm.ai/en/latest/ and https://pytorch.org/docs/stable/notes/cuda.html",
    "vLLM version 1.2.3.4, pip install vllm==0.10.1.1, driver 580.65.06.01",
    "Uvicorn running on http://localhost:8000",
])
def test_public_links_and_versions_are_left_alone(text):
    """Issue links stay links (the public allow-list) and dotted versions are not IPs."""
    redactor = Redactor()
    assert redactor.text(text) == text
    assert sum(redactor.counts.values()) == 0


def test_a_private_url_host_is_redacted_but_a_public_one_is_not():
    out = redact("from http://gpu-node-17.prod.corp:8000/v1 see https://github.com/org/repo/issues/1")
    assert "gpu-node-17" not in out and re.search(r"http://host-\d+:8000/v1", out)
    assert "https://github.com/org/repo/issues/1" in out


def test_loopback_stays_in_urls_too():
    text = "Uvicorn running on http://127.0.0.1:8000 and http://0.0.0.0:8000"
    assert redact(text) == text


def test_known_issue_links_survive_in_the_shared_reports():
    case = forensics.analyze(DATA / "handmade" / "mnnvl_incident")
    references = case.verdict.known_issues[0].references
    assert references and all(ref.startswith("https://github.com/") for ref in references)
    md, page = case.report("markdown"), case.report("html")
    for ref in references:
        assert f"<{ref}>" in md                             # a link GitHub shows as one
        assert ref in page


# --- consistent stand-ins ------------------------------------------------------------------------

def test_pseudonyms_are_consistent():
    r = Redactor()
    first = r.text("host gpu-a.prod.corp at 10.0.0.5")
    second = r.text("again 10.0.0.5 on gpu-a.prod.corp, then 10.0.0.6")
    assert first == "host host-1 at 10.x.x.1"
    assert second == "again 10.x.x.1 on host-1, then 10.x.x.2"
    assert r.counts["ipv4"] == 3 and r.counts["hostname"] == 2


def test_each_kind_numbers_its_own_stand_ins_and_each_report_starts_afresh():
    r = Redactor()
    assert r.text("/home/alice/a /home/bob/b /home/alice/c") == "/home/user-1/a /home/user-2/b /home/user-1/c"
    assert r.text("x@corp.example.com y@corp.example.com x@corp.example.com") == \
        "user1@example.invalid user2@example.invalid user1@example.invalid"
    assert Redactor().text("/home/bob/b") == "/home/user-1/b"


def test_data_redacts_every_string_and_keeps_the_structure():
    value = {"path": "/home/alice/x", "nested": [{"ip": "at 10.1.2.3"}, ("/home/alice/y", 5)], "n": 7,
             "flag": True, "none": None, "/home/alice": "key"}
    r = Redactor()
    out = r.data(value)
    assert out == {"path": "/home/user-1/x", "nested": [{"ip": "at 10.x.x.1"}, ["/home/user-1/y", 5]], "n": 7,
                   "flag": True, "none": None, "/home/alice": "key"}      # keys are field names: kept
    assert r.counts == {"home-user": 2, "ipv4": 1}


def test_redact_document_counts_and_leaves_the_original_alone():
    document = forensics.analyze(CORPUS).document()
    before = copy.deepcopy(document)
    redacted = redact_document(document)
    assert document == before
    assert redacted["redaction"]["enabled"] is True
    counts = redacted["redaction"]["counts"]
    assert counts == dict(sorted(counts.items())) and all(n > 0 for n in counts.values())
    dumped = json.dumps(redacted)
    assert not [s for s in SECRETS if s in dumped]
    # one user, one stand-in, everywhere in the document
    assert "/home/alice" in json.dumps(before)
    assert set(re.findall(r"/home/([^/\"]+)/", dumped)) == {"user-1"}


# --- the reports -------------------------------------------------------------------------------------

def _outputs(*extra):
    runner = CliRunner()
    md = runner.invoke(main, ["analyze", str(CORPUS), "--format", "markdown", *extra])
    js = runner.invoke(main, ["analyze", str(CORPUS), "--format", "json", "--redact", "--timeline-limit", "0", *extra])
    page = runner.invoke(main, ["analyze", str(CORPUS), "--format", "html", *extra])
    term = runner.invoke(main, ["analyze", str(CORPUS), "--redact", *extra])
    for result in (md, js, page, term):
        assert result.exit_code == 0, result.output
    return {"markdown": md.output, "json": js.output, "html": page.output, "terminal": term.output}


@pytest.fixture(scope="module")
def outputs():
    return _outputs()


@pytest.mark.parametrize("fmt", ["markdown", "json", "html", "terminal"])
def test_no_planted_secret_survives(outputs, fmt):
    text = outputs[fmt]
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, leaked


def test_which_formats_redact_by_default():
    assert {name: r.redact_by_default for name, r in REPORTERS.items()} == \
        {"terminal": False, "json": False, "markdown": True, "html": True}
    case = forensics.analyze(CORPUS)
    assert "/home/alice/" not in case.report("markdown") and "/home/alice/" not in case.report("html")
    plain_json = json.loads(case.report("json"))
    assert plain_json["redaction"] == {"enabled": False, "counts": {}}
    assert "/home/alice/" in json.dumps(plain_json)                     # json is for the machine it ran on
    assert "/home/alice/" not in case.report("json", redact=True)
    assert "/home/alice/" in case.report("markdown", redact=False)


def test_json_records_the_counts_and_the_verdict_survives(outputs):
    report = json.loads(outputs["json"])
    assert report["redaction"]["enabled"]
    counts = report["redaction"]["counts"]
    for kind in ("email", "ipv4", "home-user", "prompt-token-ids"):
        assert counts.get(kind), kind
    verdict = report["verdict"]                             # redaction never hides the verdict
    assert verdict["error"]["code"] == 700
    assert verdict["faulting_process"]["rank"] == 1 and verdict["faulting_process"]["pid"] == 921
    assert verdict["first_failure"]["rank"] == 1
    assert verdict["surfaces"][0]["function"] == "execute_model"


def test_html_embeds_only_redacted_data(outputs):
    page = outputs["html"]
    data = json.loads(re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page,
                                re.S).group(1))
    assert data["redaction"]["enabled"] is True and data["redaction"]["counts"]
    assert data["verdict"]["error"]["code"] == 700


def test_markdown_says_what_was_redacted(outputs):
    line = re.search(r"_Redacted before sharing: (.*)\. Pseudonyms are consistent within this report\._",
                     outputs["markdown"])
    assert line
    said = dict((kind, int(n)) for n, kind in re.findall(r"(\d+) ([\w-]+)", line.group(1)))
    assert said.get("home-user", 0) > 0 and said.get("email", 0) > 0


def test_opt_out_keeps_everything():
    md = CliRunner().invoke(main, ["analyze", str(CORPUS), "--format", "markdown", "--no-redact"]).output
    assert "/home/alice/" in md and "_Redaction: off._" in md
