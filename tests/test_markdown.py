"""The Markdown report: GitHub-ready shape and the 65,536-character budget."""

from forensics.case import analyze
from forensics.report.markdown import GITHUB_LIMIT, render
from tests.conftest import DATA


def test_shape_of_the_report():
    text = render(analyze(str(DATA / "gpu/tp4_oob_write_del_cumemfree")))
    assert text.startswith("**Suggested title:** `[Bug]: CUDA_ERROR_ILLEGAL_ADDRESS in oneshot_allreduce_flag_kernel")
    for heading in ("### Your current environment", "### 🐛 Describe the bug", "#### Causal chain",
                    "#### Processes", "#### Incident checklist", "### Timeline", "### Evidence"):
        assert heading in text, heading
    assert "```mermaid\nsequenceDiagram" in text
    assert "<details><summary>surface on rank 2 - <code>server.log:38</code>" in text
    chain = text.split("#### Causal chain")[1].split("####")[0]
    assert chain.index("oneshot_allreduce_flag_kernel") < chain.index("cuMemFree") < chain.index("collateral")


def _huge_bundle(tmp_path, ranks=600):
    """Hand-made: a TP=600 console where every rank prints a long traceback, far more
    evidence than one GitHub comment can hold."""
    lines = []
    for r in range(ranks):
        p = f"(Worker_TP{r} pid={10000 + r}) "
        lines.append(p + "ERROR 12-02 10:00:00 [multiproc_executor.py:1063] WorkerProc hit an exception.")
        lines.append(p + "ERROR 12-02 10:00:00 [multiproc_executor.py:1063] Traceback (most recent call last):")
        for depth in range(30):
            lines.append(p + f'ERROR 12-02 10:00:00 [multiproc_executor.py:1063]   File "/srv/app/layer_{depth}.py", line {depth + 1}, in forward_{depth}')
            lines.append(p + f"ERROR 12-02 10:00:00 [multiproc_executor.py:1063]     return self.layer_{depth + 1}(x)")
        lines.append(p + "ERROR 12-02 10:00:00 [multiproc_executor.py:1063] torch.AcceleratorError: CUDA error: an illegal memory access was encountered")
    (tmp_path / "server.log").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_budget_trims_evidence_never_the_verdict(tmp_path):
    case = analyze(str(_huge_bundle(tmp_path)))
    text = render(case)
    assert len(text) <= GITHUB_LIMIT
    assert "evidence excerpt(s) trimmed" in text
    assert case.context.summary.split(";")[0] in text
    assert "#### Causal chain" in text


def test_small_budget_on_a_real_recording():
    text = render(analyze(str(DATA / "gpu/tp4_oob_write_coredump")), budget=6000)
    assert len(text) <= 6000 or "### Evidence" not in text
    assert "oneshot_allreduce_flag_kernel" in text
