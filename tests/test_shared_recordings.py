"""Acceptance on every real recording in ../shared/recordings: the verdict matches the
bundle's truth.toml.  Expected values are read from the truth files, never written here.
"""

import pytest

from tests.conftest import shared_bundles


def _basename(path):
    return path.rsplit("/", 1)[-1] if path else path


def _surface(case, rank=None, pid=None):
    for s in case.context.surfaces:
        if (rank is not None and s.rank == rank) or (pid is not None and s.pid == pid):
            return s
    raise AssertionError(f"no surface for rank={rank} pid={pid}: {case.context.surfaces}")


def _assert_site(surface, site, api_text=None):
    assert (surface.file, surface.line, surface.function) == (site["file"], site["line"], site["function"])
    if api_text is not None:
        assert surface.api is not None
        # the truth describes the API in words ("torch Tensor.cpu() (...)"); ours is a name
        assert surface.api.split(".")[-1].split("(")[0] in api_text


@pytest.mark.parametrize("name", ["s1a_tp4_prefill_crash", "s2a_memcheck_all_processes"])
def test_tp4_gpu_miniature(shared_case, name):
    case, truth = shared_case(name)
    ctx = case.context
    first_surface = truth["surfaces"][0]
    assert ctx.error.code == first_surface["error_code"]
    faulting = truth["fault"]["faulting_rank"]
    s = _surface(case, rank=faulting)
    assert s.pid == truth["fault"]["faulting_pid"]
    _assert_site(s, first_surface["python_site"], first_surface["api_call"])
    # the surface is on the faulting rank only; no other rank reported the CUDA error
    assert {x.rank for x in ctx.surfaces} == {faulting}
    assert ctx.first_failure.rank == truth["ranks"]["first_failing_rank"]
    collateral = {v.rank for v in ctx.ranks.values() if v.status == "collateral" and v.rank is not None}
    assert collateral == {r["rank"] for r in truth["ranks"]["other_ranks"]}
    for other in truth["ranks"]["other_ranks"]:
        verdict = next(v for v in ctx.ranks.values() if v.rank == other["rank"])
        assert verdict.pid == other["pid"] and verdict.exit_code == other["exit_code"]
        assert "peer" in verdict.failure


def test_s5a_triton_single_process(shared_case):
    case, truth = shared_case("s5a_triton_oob_async")
    ctx = case.context
    assert ctx.error.code == truth["surface"]["error_code"]
    (s,) = ctx.surfaces
    _assert_site(s, truth["surface"]["python_site"], "item")


def test_s3_python_replay_surface(shared_case):
    case, truth = shared_case("s3_cuda_gdb_replay")
    ctx = case.context
    assert ctx.error.code == truth["fault"]["error_code"]
    site = truth["sidecar_surfaces"][0]["site"]
    assert any((s.file, s.line, s.function) == (site["file"], site["line"], site["function"]) and s.api == "cuMemFree"
               for s in ctx.surfaces)


def test_vllm_cpu_fake_cuda_error_in_second_chunk(shared_case):
    case, truth = shared_case("B_fake_cuda_error_2nd_prefill_chunk_tp2_rank0")
    ctx = case.context
    inj = truth["injection"]
    assert ctx.error.message in inj["message"]
    (s,) = ctx.surfaces
    assert (s.rank, s.pid) == (inj["tp_rank"], inj["pid"])
    plugin_frame = next(e for e in truth["expected_log"] if e["id"] == "plugin_frame")
    assert s.function == "forward" and f"line {s.line}, in forward" in plugin_frame["text"]
    assert s.file in plugin_frame["text"]
    assert ctx.origin is None                    # no device evidence in this bundle
    assert ctx.first_failure.rank == inj["tp_rank"]
    others = {v.rank for v in ctx.ranks.values() if v.role == "worker" and v.rank != inj["tp_rank"]}
    assert others and all(v.status == "collateral" for v in ctx.ranks.values() if v.rank in others)
    # environment and chunk position from the engine's crash dump
    env = ctx.environment
    assert env["vllm"] == truth["vllm_version_in_log"]
    assert env["tensor_parallel_size"] == truth["tensor_parallel_size"]
    assert env["max_num_batched_tokens"] == truth["max_num_batched_tokens"]
    assert f"[{env['crash_num_computed_tokens']}]" == truth["crash_dump"]["num_computed_tokens"]
    assert env["crash_prefill_block"] == 2   # 512 computed / 512 per step -> second block
    assert ctx.next_steps and "compute-sanitizer" in ctx.next_steps[0]


def test_vllm_cpu_sigkilled_worker(shared_case):
    case, truth = shared_case("C_sigkill_worker_tp1_mid_stream_tp2")
    ctx = case.context
    inj = truth["injection"]
    assert ctx.error is None and ctx.origin is None and ctx.surfaces == []
    assert ctx.first_failure.pid == inj["pid"]
    killed = ctx.ranks[inj["pid"]]
    assert killed.exit_code == -9 and "SIGKILL" in killed.failure
    assert all(v.status == "collateral" for v in ctx.ranks.values() if v.pid != inj["pid"])


def test_vllm_cpu_healthy_run_has_no_verdict(shared_case):
    case, truth = shared_case("A_healthy_tp2_chunked_prefill")
    ctx = case.context
    assert ctx.error is None and ctx.first_failure is None and ctx.origin is None
    assert all(v.status == "healthy" for v in ctx.ranks.values())


@pytest.mark.parametrize("bundle", shared_bundles(), ids=lambda p: p.name)
def test_every_line_accounted_for(shared_case, bundle):
    case, _ = shared_case(bundle.name)
    for source in case.sources:
        if source.lines is None:
            continue
        assert source.event_lines + source.noise_lines + source.counted_lines + source.unparsed_lines == source.lines, source.relpath
