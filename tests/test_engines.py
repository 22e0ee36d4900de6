"""Engines, both senses.

1. Where inputs are parsed (forensics/engines.py): in this process, across local
   processes, or on a Dask cluster - every engine must give a byte-identical report.
2. Which serving engine wrote the logs (vLLM V0 / V1, SGLang, TensorRT-LLM, TGI, torchrun):
   recognised from their typical lines, with the identities and configuration each
   prints.  Lines are hand-made in the shapes these tools print.
"""

from __future__ import annotations

import builtins
import io

import pytest
from click.testing import CliRunner

from forensics import engines
from forensics.case import analyze
from forensics.cli import main
from forensics.report import Options, render
from forensics.report.document import build
from forensics.verdict import FailureKind, Status
from tests.conftest import DATA
from tests.helpers import analyze_text

BUNDLE = DATA / "gpu/tp4_oob_write_memcheck"          # 8 files: server log, per-rank logs, sanitizer, dmesg


def report_json(case) -> str:
    out = io.StringIO()
    render(build(case), "json", out, Options())
    return out.getvalue()


# --- parse engines --------------------------------------------------------------------------

def test_process_pool_gives_the_same_report(monkeypatch):
    baseline = report_json(analyze(str(BUNDLE)))
    used = []
    real = engines.parse_processes

    def spy(sources, parse, workers=None, on_source=None):
        used.append(len([s for s in sources if engines._travels(s)]))
        return real(sources, parse, workers=2, on_source=on_source)
    monkeypatch.setattr(engines, "PARALLEL_MIN_BYTES", 0)          # force the pool on small inputs
    monkeypatch.setattr(engines, "parse_processes", spy)
    assert report_json(analyze(str(BUNDLE))) == baseline
    assert used and used[0] >= 2


def test_small_inputs_are_parsed_here_in_discovery_order():
    # a closure cannot be sent to another process: parse_processes must stay local below the threshold
    from forensics.inputs.discover import discover
    sources = list(discover([str(BUNDLE)]))
    seen = []
    parsed = engines.parse_processes(sources, lambda s: s.relpath, on_source=lambda s, p: seen.append(p))
    assert parsed == [s.relpath for s in sources] == seen
    assert len(parsed) == 8


def test_dask_engine_gives_the_same_report():
    pytest.importorskip("distributed")
    assert report_json(analyze(str(BUNDLE), engine="dask")) == report_json(analyze(str(BUNDLE)))


def test_dask_engine_without_dask_is_a_clear_error(monkeypatch):
    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(engines.EngineUnavailable, match="pip install 'forensics\\[dask\\]'"):
        engines.parse_dask([], lambda s: s, None)
    result = CliRunner().invoke(main, ["analyze", str(BUNDLE), "--engine", "dask"])
    assert result.exit_code == 2 and "needs dask and distributed" in result.output


def test_an_unreachable_scheduler_is_a_usage_error_with_its_address():
    pytest.importorskip("distributed")
    result = CliRunner().invoke(main, ["analyze", str(BUNDLE), "--engine", "dask", "--scheduler", "tcp://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert "tcp://127.0.0.1:1" in result.output and "internal error" not in result.output


def test_scheduler_needs_the_dask_engine():
    result = CliRunner().invoke(main, ["analyze", str(BUNDLE), "--scheduler", "tcp://127.0.0.1:8786"])
    assert result.exit_code == 2 and "--scheduler needs --engine dask" in result.output


def test_streams_are_parsed_here_whatever_the_engine(monkeypatch):
    # stdin cannot travel to a worker: with nothing else to parse the pool is never asked for it
    monkeypatch.setattr(engines, "PARALLEL_MIN_BYTES", 0)
    text = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
    case = analyze("-", stdin=io.BytesIO(text))
    assert case.verdict.error.code == 700 and [s.relpath for s in case.sources] == ["<stdin>"]


# --- serving engines ---------------------------------------------------------------------------

def roles(case) -> list[tuple]:
    return [(p.role, p.rank) for p in case.processes.processes()]


def test_vllm_v1_processes_and_version():
    text = ("(APIServer pid=900) INFO 04-01 10:00:00 [api_server.py:1100] vLLM API server version 0.10.2\n"
            "(EngineCore_DP0 pid=910) INFO 04-01 10:00:05 [core.py:93] Initializing a V1 LLM engine (v0.10.2) with "
            "config: model='acme/chat', tensor_parallel_size=2, enable_prefix_caching=True\n"
            "(Worker_TP0 pid=911) INFO 04-01 10:00:09 [gpu_model_runner.py:2000] Starting to load model acme/chat...\n"
            "(Worker_TP1 pid=912) ERROR 04-01 10:05:00 [multiproc_executor.py:671] torch.AcceleratorError: CUDA error: "
            "an illegal memory access was encountered\n")
    case = analyze_text(text)
    env = case.verdict.environment
    assert (env["vllm"], env["tensor_parallel_size"], env["model"]) == ("0.10.2", 2, "acme/chat")
    assert roles(case) == [("worker", 0), ("worker", 1), ("engine-core", None), ("api-server", None)]
    assert case.verdict.first_failure.rank == 1
    serve = next(s.command for s in case.verdict.next_steps if s.command and "serve" in s.command)
    assert "vllm serve acme/chat --tensor-parallel-size 2" in serve


@pytest.mark.parametrize("worker_prefix, rank", [
    ("(VllmWorker rank=1 pid=3312)", 1), ("(VllmWorker TP1 pid=3312)", 1), ("(Worker_PP0_TP1 pid=3312)", 1),
    ("(RayWorkerProc rank=1 pid=3312)", 1),
], ids=["0.8", "0.10.1", "0.10.2+pp", "ray"])
def test_vllm_worker_prefixes_across_versions(worker_prefix, rank):
    text = f"{worker_prefix} ERROR 04-01 10:05:00 [worker.py:1] RuntimeError: CUDA error: an illegal memory access was encountered\n"
    case = analyze_text(text)
    info = case.processes.by_pid(3312)
    assert (info.role, info.rank) == ("worker", rank)
    assert case.verdict.first_failure.rank == rank


def test_vllm_v0_engine_runs_rank_0_in_process():
    text = ("INFO 02-10 14:00:00 llm_engine.py:232] Initializing an LLM engine (v0.6.3) with config: model='acme/m', "
            "tensor_parallel_size=2, enforce_eager=False\n"
            "(VllmWorkerProcess pid=812) INFO 02-10 14:00:10 multiproc_worker_utils.py:215] Worker ready; awaiting "
            "tasks\n"
            "ERROR 02-10 14:05:00 engine.py:160] RuntimeError('CUDA error: an illegal memory access was encountered')\n")
    case = analyze_text(text)
    assert case.verdict.environment["vllm"] == "0.6.3"
    engine = next(p for p in case.processes.processes() if p.name == "LLMEngine")
    assert (engine.role, engine.rank) == ("worker", 0)
    assert case.verdict.first_failure.rank == 0


SGLANG = ("[2025-03-01 09:00:00] server_args=ServerArgs(model_path='acme/m', tp_size=2, dp_size=1, "
          "mem_fraction_static=0.85, disable_cuda_graph=False, chunked_prefill_size=4096)\n"
          "[2025-03-01 09:00:05 TP0] Init torch distributed begin.\n"
          "[2025-03-01 09:00:05 TP1] Init torch distributed begin.\n"
          "[2025-03-01 09:10:00 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
          '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2100, in run_scheduler_process\n'
          "    scheduler.event_loop_overlap()\n"
          '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 700, in event_loop_overlap\n'
          "    self.process_batch_result(tmp_batch, tmp_result)\n"
          "RuntimeError: CUDA error: an illegal memory access was encountered\n")


def test_sglang_server_args_and_tp_prefixes():
    case = analyze_text(SGLANG)
    env = case.verdict.environment
    assert env["engine"] == "sglang"
    assert (env["model"], env["tensor_parallel_size"], env["max_num_batched_tokens"]) == ("acme/m", 2, 4096)
    assert env["gpu_memory_utilization"] == 0.85 or env["gpu_memory_utilization"] == "0.85"
    # the untagged server_args line is the main process's (SGLang tags only its schedulers)
    assert roles(case) == [("worker", 0), ("worker", 1), (None, None)]
    assert case.verdict.first_failure.rank == 1
    assert {r.rank: r.status for r in case.verdict.ranks}[0] == Status.COLLATERAL
    (s,) = case.verdict.surfaces
    assert (s.function, s.line) == ("event_loop_overlap", 700)
    serve = next(s.command for s in case.verdict.next_steps if s.command and "sglang" in s.command)
    assert "python -m sglang.launch_server --model-path acme/m --tp-size 2" in serve


TRTLLM = ("[TensorRT-LLM] TensorRT-LLM version: 0.19.0\n"
          "[06/11/2025-03:10:00] [TRT-LLM] [I] Using LLM with PyTorch backend\n"
          "[06/11/2025-03:10:30] [TRT-LLM] [RANK 1] [E] Error in event loop: CUDA error: an illegal memory access "
          "was encountered\n")


def test_tensorrt_llm_version_and_rank():
    case = analyze_text(TRTLLM)
    env = case.verdict.environment
    assert (env["engine"], env["tensorrt_llm"]) == ("tensorrt-llm", "0.19.0")
    assert case.verdict.first_failure.rank == 1
    assert case.verdict.error.code == 700


def test_tensorrt_llm_pytorch_backend_line_is_not_an_attention_backend():
    assert "attention_backend" not in analyze_text(TRTLLM).verdict.environment


def test_trtllm_executor_start_failure_names_its_rank():
    text = ("[TensorRT-LLM] TensorRT-LLM version: 0.20.0\n"
            "[05/30/2025-02:38:04] [TRT-LLM] [E] Failed to initialize executor on rank 2: [TensorRT-LLM][ERROR] CUDA "
            "runtime error in cudaMemsetAsync(buf, 0, size, stream): an illegal memory access was encountered "
            "(/src/cpp/tensorrt_llm/kernels/moe.cu:1291)\n")
    v = analyze_text(text).verdict
    assert v.first_failure.rank == 2 and v.error.code == 700
    # a CUDA error while the executor starts is a CUDA error (docs/reasoning.md, the kind)
    assert v.failure_kind == FailureKind.CUDA_ERROR and v.environment.get("phase") == "startup"


def test_tgi_shards_are_ranks():
    text = ("2025-05-26T09:02:11.102901Z  INFO text_generation_launcher: Sharding model on 2 processes\n"
            "2025-05-26T09:02:14.881533Z  INFO shard-manager: text_generation_launcher: Starting shard rank=0\n"
            "2025-05-26T09:02:14.881611Z  INFO shard-manager: text_generation_launcher: Starting shard rank=1\n"
            "2025-05-26T09:05:00.200000Z ERROR text_generation_launcher: Shard 1 crashed\n")
    case = analyze_text(text)
    assert roles(case) == [("worker", 0), ("worker", 1)]
    assert case.verdict.first_failure.rank == 1
    assert case.verdict.collateral == (0,)


def test_torchrun_launcher_lines_and_summary():
    text = ("W0910 07:31:02.118000 5500 torch/distributed/run.py:793] *****************************************\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/srv/train/loop.py", line 77, in step\n'
            "[rank1]:     loss.item()\n"
            "[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "E0910 07:31:44.901000 5500 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
            "local_rank: 1 (pid: 5512) of binary: /usr/bin/python3\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "============================================================\nloop.py FAILED\n"
            "------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n"
            "------------------------------------------------------------\nRoot Cause (first observed failure):\n"
            "[0]:\n  time      : 2025-09-10_07:31:44\n  host      : node-a\n  rank      : 1 (local_rank: 1)\n"
            "  exitcode  : 1 (pid: 5512)\n  error_file: <N/A>\n"
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
            "============================================================\n")
    case = analyze_text(text)
    v = case.verdict
    assert (v.first_failure.rank, v.first_failure.pid) == (1, 5512)
    assert v.first_failure.launcher_opinion is None             # torchrun agrees with the evidence
    assert case.processes.by_rank(1).pid == 5512
    assert {r.rank: r.exit_code for r in v.ranks if r.rank is not None}[1] == 1
    (s,) = v.surfaces
    assert (s.file, s.line, s.api) == ("/srv/train/loop.py", 77, "Tensor.item")


def test_an_unknown_engine_is_not_guessed():
    v = analyze_text("RuntimeError: CUDA error: an illegal memory access was encountered\n").verdict
    assert "engine" not in v.environment and "vllm" not in v.environment
    serve_steps = [s for s in v.next_steps if s.command and ("vllm serve" in s.command or "sglang" in s.command)]
    assert all("<model>" in s.command for s in serve_steps)


def test_dask_ships_absolute_paths_however_the_user_named_them(tmp_path, monkeypatch):
    """Dask's workers run in a folder of their own (issue 24): a relative path given to
    `forensics analyze data/bundle --engine dask` is made absolute before it travels,
    and the report still names it as given."""
    import os
    from forensics.case import parse_source
    from forensics.inputs.discover import discover
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "rank0.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    monkeypatch.chdir(tmp_path)
    sources = [s for s in discover(["bundle"]) if s.path is not None]
    def parse(source):
        os.chdir("/")                   # a worker elsewhere: only an absolute path still opens
        try:
            return parse_source(source)
        finally:
            os.chdir(tmp_path)

    parsed = engines.parse_dask(sources, parse, None)
    assert [p.relpath for p in parsed] == [s.relpath for s in sources]
    assert all(p.lines == 1 and p.event_lines == 1 for p in parsed)   # read, not "no such file"
