"""The Markdown report (forensics/report/markdown.py): GitHub-issue shape (headline
first), fences that close, the 65,536-character budget, log text escaped outside code,
and redaction on by default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import forensics
from forensics.inert import plain
from forensics.report import Options
from forensics.report.markdown import GITHUB_LIMIT, render_text, title
from tests.conftest import DATA

REPO = Path(__file__).resolve().parents[1]
GPU_SAMPLE = REPO / "samples" / "gpu_tp4_oob_del_cumemfree"
CPU_SAMPLE = REPO / "samples" / "vllm_cpu_tp2_fault_2nd_chunk"
MEMCHECK = DATA / "gpu" / "tp4_oob_write_memcheck"
BUNDLES = [GPU_SAMPLE, CPU_SAMPLE, MEMCHECK, DATA / "gpu" / "tp4_oob_write_coredump",
           DATA / "handmade" / "nccl_watchdog_hang", DATA / "handmade" / "oom_during_prefill"]
FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")
HEADINGS = ("### 🐛 Describe the bug", "#### Causal chain", "### Your current environment", "#### Processes",
            "### Timeline", "### Evidence")

_CASES: dict = {}


def case_of(path: Path):
    if str(path) not in _CASES:
        _CASES[str(path)] = forensics.analyze(path)
    return _CASES[str(path)]


def markdown(path: Path, **options) -> str:
    return case_of(path).report("markdown", **options)


def unescape(text: str) -> str:
    """Markdown prose back to the text it shows (backslash escapes, the zero-width space
    that keeps @mentions and #refs unlinked)."""
    return re.sub(r"\\(.)", r"\1", text).replace("\u200b", "")


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """(info, body) of every fenced block, and the text outside them; fails on a fence
    left open (CommonMark: a closing fence is at least as long as the opening one)."""
    blocks, outside, open_fence, info, body = [], [], None, "", []
    for line in text.splitlines():
        match = FENCE.match(line)
        if open_fence is None:
            if match:
                open_fence, info, body = match.group(2), match.group(3).strip(), []
            else:
                outside.append(line)
        elif match and len(match.group(2)) >= len(open_fence) and not match.group(3).strip():
            blocks.append((info, "\n".join(body)))
            open_fence = None
        else:
            body.append(line)
    assert open_fence is None, f"a {open_fence}{info} fence is never closed"
    return blocks, "\n".join(outside)


def prose(text: str) -> str:
    """The report outside fenced blocks and inline code spans: what GitHub renders as
    Markdown."""
    _, outside = fenced_blocks(text)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", outside)


# --- shape ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_shape_of_the_report(path):
    case = case_of(path)
    text = markdown(path)
    lines = text.splitlines()
    document = case.report_document().redacted()
    assert lines[0] == f"**Suggested title:** `{title(document)}`"
    assert lines[1] == ""
    # the headline right after the title, before anything else
    assert lines[2].startswith("> **") and lines[2].endswith("**")
    assert unescape(lines[2][4:-2]) == plain(document.to_json()["verdict"]["headline"])
    positions = [text.index(h) for h in HEADINGS]
    assert positions == sorted(positions), "sections in vLLM's bug-template order"
    if case.verdict.next_steps:
        assert text.index("#### Next steps") < text.index("### 🐛 Describe the bug")
    assert len(text) <= GITHUB_LIMIT
    assert text.rstrip().endswith("Pseudonyms are consistent within this report._")


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_every_fence_closes_and_every_details_block_too(path):
    text = markdown(path)
    blocks, _ = fenced_blocks(text)
    infos = [info for info, _ in blocks]
    assert "mermaid" in infos or "_No failure events to draw._" in text
    assert text.count("<details>") == text.count("</details>") == len(case_of(path).document()["evidence"])
    assert infos.count("text") == text.count("<details>")          # each excerpt sits in a text fence
    assert infos.count("sh") == sum(1 for s in case_of(path).verdict.next_steps if s.command)


def test_the_mermaid_timeline_is_a_sequence_diagram_with_a_lane_per_rank():
    blocks, _ = fenced_blocks(markdown(GPU_SAMPLE))
    (diagram,) = [body for info, body in blocks if info == "mermaid"]
    assert diagram.startswith("sequenceDiagram\n")
    for rank in (0, 1, 2, 3):
        assert f"participant R{rank} as rank {rank}" in diagram
    assert "Note over R2: ORIGIN" in diagram and "Note over R2: SURFACE" in diagram
    assert re.search(r"R2-\)R0: COLLATERAL", diagram)
    for line in diagram.splitlines()[1:]:
        assert ";" not in line and "#" not in line   # no statement breaks or entity syntax from the logs


def test_processes_table_has_one_row_per_process():
    text = markdown(GPU_SAMPLE)
    section = text.split("#### Processes\n", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    ranks = case_of(GPU_SAMPLE).verdict.ranks
    assert len(rows) == len(ranks)
    for row, rank in zip(rows, ranks):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert len(cells) == 6, row
        assert cells[3] == f"**{rank.status.value}**"


def test_causal_chain_runs_from_origin_to_collateral():
    text = markdown(GPU_SAMPLE)
    chain = text.split("#### Causal chain\n", 1)[1].split("\n\n", 1)[0]
    # who a step names is log text, Markdown-escaped: read as the renderer shows it
    steps = [re.sub(r"\\([()\[\]_*#<>|-])", r"\1", step) for step in chain.splitlines()]
    assert steps[0].startswith("1. rank 2 (pid 667) faulted on the device")
    assert "noticed it: `cuMemFree` at `signal_pad.py:29` in `__del__`" in steps[1]
    assert all("collateral" in step for step in steps[2:])
    assert len(steps) == 2 + len([r for r in case_of(GPU_SAMPLE).verdict.ranks if r.status.value == "collateral"])


def test_origin_named_by_the_sanitizer():
    text = markdown(MEMCHECK)
    assert "**Origin:** `oneshot_allreduce_flag_kernel` - confidence high" in text


def test_a_separate_title_leaves_the_headline_first():
    text = case_of(CPU_SAMPLE).report("markdown", title_separately=True)
    assert text.startswith("> **CUDA\\_ERROR\\_ILLEGAL\\_ADDRESS \\(700\\) on rank 0")
    assert "Suggested title" not in text


def test_title_is_plain_one_line_text():
    text = title(case_of(CPU_SAMPLE).report_document())
    assert text == "[Bug]: CUDA_ERROR_ILLEGAL_ADDRESS (700) on rank 0 (faulting kernel unknown) - surfaced at " \
                   "__init__.py:99 forward (vLLM 0.32.0, TP=2)"
    assert "\n" not in text and len(text) < 256


def test_title_parentheses_are_balanced():
    text = title(case_of(GPU_SAMPLE).report_document())
    assert text.count("(") == text.count(")"), text


# --- escaping: log text is never a Markdown construct -----------------------------------------

def test_global_is_not_rendered_bold():
    """compute-sanitizer's "Invalid __global__ write" would render as **global** in prose."""
    text = markdown(MEMCHECK)
    assert "Invalid __global__ write" in case_of(MEMCHECK).verdict.origin.fault
    outside = prose(text)
    assert "__global__" not in outside
    assert "global" in outside                       # the fault is still said, escaped
    assert "Invalid \\_\\_global\\_\\_ write" in outside or "Invalid &#95;&#95;global" in outside


HOSTILE = """\
(Worker_TP1 pid=921) ERROR 11-21 09:00:07 [multiproc_executor.py:1063] WorkerProc hit an exception.
(Worker_TP1 pid=921) ERROR 11-21 09:00:07 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker_TP1 pid=921) ERROR 11-21 09:00:07 [multiproc_executor.py:1063]   File "/srv/app/model.py", line 12, in forward
(Worker_TP1 pid=921) ERROR 11-21 09:00:07 [multiproc_executor.py:1063]     x = run(y)
(Worker_TP1 pid=921) ERROR 11-21 09:00:07 [multiproc_executor.py:1063] RuntimeError: CUDA error: an illegal memory access was encountered ```` fence
(Worker_TP0 pid=920) ERROR 11-21 09:00:08 [multiproc_executor.py:1063] RuntimeError: peer **died** <img src=x onerror=alert(1)> @octocat #123 [link](https://evil.invalid/x) __global__
"""


def test_log_text_in_prose_is_escaped(tmp_path):
    log = tmp_path / "console.log"
    log.write_text(HOSTILE)
    text = forensics.analyze(log).report("markdown", redact=False)
    outside = prose(text)
    unescaped = re.sub(r"\\.", "", outside)                 # what is left once escaped characters are taken out
    for construct in ("**died**", "<img", "@octocat", "#123", "[link](", "__global__"):
        assert construct not in unescaped, construct
    # ... but the words are still there for the reader
    assert "died" in outside and "octocat" in outside and "onerror" in outside
    # the backticks in the error message cannot close the evidence fence early
    blocks, _ = fenced_blocks(text)
    assert any("```` fence" in body for info, body in blocks if info == "text")


# --- the GitHub budget -------------------------------------------------------------------------

DEEP = "/srv/app/" + "very_long_directory_name/" * 8


def _huge_bundle(tmp_path, ranks=24):
    """Hand-made: a TP=24 console where every rank prints a 30-frame traceback with long
    paths, more evidence than one GitHub comment can hold."""
    lines = []
    for r in range(ranks):
        p = f"(Worker_TP{r} pid={10000 + r}) ERROR 12-02 10:00:00 [multiproc_executor.py:1063] "
        lines.append(p + "WorkerProc hit an exception.")
        lines.append(p + "Traceback (most recent call last):")
        for depth in range(30):
            lines.append(p + f'  File "{DEEP}layer_{depth}.py", line {depth + 1}, in forward_{depth}')
            lines.append(p + f"    return self.layer_{depth + 1}(x)")
        lines.append(p + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
    (tmp_path / "server.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_budget_trims_evidence_never_the_verdict(tmp_path):
    case = forensics.analyze(_huge_bundle(tmp_path))
    document = case.document()
    assert sum(len(e["text"]) for e in document["evidence"]) > GITHUB_LIMIT     # it really is too big
    text = case.report("markdown")
    assert len(text) <= GITHUB_LIMIT
    assert re.search(r"> \d+ evidence excerpt\(s\) trimmed to stay under GitHub's 65,536-character limit", text)
    assert case.verdict.summary.split(";")[0] in unescape(text)
    for heading in HEADINGS:
        assert heading in text
    fenced_blocks(text)                                       # what is kept still closes
    assert text.count("<details>") == text.count("</details>") < len(document["evidence"])


def test_a_smaller_budget_is_kept_too():
    document = case_of(DATA / "gpu" / "tp4_oob_write_coredump").report_document()
    full = render_text(document, Options())
    small = render_text(document, Options(), budget=6000)
    assert len(full) > 6000 >= len(small)
    assert "oneshot_allreduce_flag_kernel" in small


# --- redaction -------------------------------------------------------------------------------

PLANTED = DATA / "handmade" / "planted_secrets"


def test_markdown_is_redacted_by_default_and_says_what_was_redacted():
    text = markdown(PLANTED)
    for secret in ("sk-proj-Zx81kdPQ2mw9AbCdEfGhIjKl", "hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456", "/home/alice",
                   "carol.ops@example-health.com", "10.42.7.19", "gpu-node-17", "S3cretPassw0rd"):
        assert secret not in text, secret
    counts = re.search(r"_Redacted before sharing: (.*)\. Pseudonyms are consistent within this report\._", text)
    assert counts and counts.group(1) != "nothing found"
    assert re.search(r"\d+ home-user", counts.group(1))
    # the verdict survives redaction
    assert "CUDA\\_ERROR\\_ILLEGAL\\_ADDRESS \\(700\\) on rank 1" in text


def test_no_redact_keeps_the_logs_words():
    text = markdown(PLANTED, redact=False)
    assert "/home/alice/" in text
    assert "_Redaction: off._" in text and "_Redacted before sharing" not in text


def test_the_same_report_from_several_ranks_is_shown_once():
    import forensics
    from pathlib import Path
    case = forensics.analyze(Path(__file__).resolve().parents[1] / "samples" / "gpu_tp4_oob_del_cumemfree")
    text = case.report("markdown")
    assert text.count("Connection closed by peer") == 1
    # the evidence label, in a <details><summary> line: HTML-escaped, not Markdown-escaped
    assert "<summary>rank 0: collateral, rank 1: collateral, rank 3: collateral" in text
