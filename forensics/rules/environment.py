"""What the inputs reveal about the server: versions, parallelism, backends, the step in
flight at the crash."""

from __future__ import annotations

from forensics import knowledge
from forensics.events import OWN_FAILURE, Event, Kind, Severity
from forensics.rules.base import Evidence, Rule, VerdictView

# Configuration keys worth reporting, and what other engines call them.
CONFIG_KEYS = {
    "model": "model", "model_tag": "model", "model_path": "model", "served_model_name": "served_model_name",
    "dtype": "dtype", "max_model_len": "max_model_len", "max_seq_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size", "tp_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "pp_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size", "dp_size": "data_parallel_size",
    "expert_parallel_size": "expert_parallel_size", "ep_size": "expert_parallel_size",
    "enable_expert_parallel": "enable_expert_parallel",
    "disable_custom_all_reduce": "disable_custom_all_reduce", "quantization": "quantization",
    "enforce_eager": "enforce_eager", "disable_cuda_graph": "disable_cuda_graph",
    "kv_cache_dtype": "kv_cache_dtype", "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill", "max_num_batched_tokens": "max_num_batched_tokens",
    "chunked_prefill_size": "max_num_batched_tokens", "all_reduce_backend": "allreduce_backend",
    "distributed_executor_backend": "distributed_executor_backend", "attention_backend": "attention_backend",
    "max_num_seqs": "max_num_seqs", "gpu_memory_utilization": "gpu_memory_utilization",
    "mem_fraction_static": "gpu_memory_utilization", "speculative_config": "speculative_config",
    "allreduce_kernel": "allreduce_kernel",
}
INT_KEYS = {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "expert_parallel_size",
            "max_num_batched_tokens", "max_model_len", "max_num_seqs", "prompt_tokens", "world_size"}
STRUCTURED = ("config", "args")


class Environment(Rule):
    """Collects versions, model, dtype/quantization, parallel sizes, chunked-prefill
    budget, attention and all-reduce backends and flags from startup lines (each
    catalogue entry says which environment key it fills; engine configs are read as
    key/values by the parser); the facts free text states (data/environment_facts.toml:
    "NCCL version 2.21.5", "--tensor-parallel-size 4", "Driver Version: 550.54.15"),
    from every event's message and every traffic template's example lines; from the
    engine's crash dump the step in flight (num_computed_tokens, scheduled tokens) and
    KV-cache usage; and the engine phase at the failure (startup, CUDA graph capture,
    prefill, chunked prefill, decode).  A world of one process has parallel sizes of 1.
    The first value seen wins, except running values (KV-cache usage) where the last
    does."""

    name = "environment"
    writes = ("environment", "environment_sources")

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        env: dict = {}
        src: dict = {}

        def put(key: str, value, where: str, overwrite: bool = False) -> None:
            if value in (None, "", "None") or isinstance(value, (dict, list, tuple, set)):
                return
            if key in INT_KEYS:
                try:
                    value = int(value)
                except (TypeError, ValueError):
                    return
            if key not in env or overwrite:
                env[key] = value
                src[key] = where

        last_marker = None
        for event in evidence.events:
            attrs = event.attrs
            entry = knowledge.message_pattern(attrs["message_id"]) if "message_id" in attrs else None
            if entry is not None:
                for key, group in (entry.environment or {}).items():
                    value = _literal(group[1:]) if group.startswith("=") else attrs.get(group)
                    put(key, value, event.where, overwrite=key.endswith("_at_crash"))
            for name in STRUCTURED:
                payload = attrs.get(name)
                if isinstance(payload, dict):
                    for key, value in payload.items():
                        if key in CONFIG_KEYS:
                            put(CONFIG_KEYS[key], value, event.where)
            dump = attrs.get("dump")
            if isinstance(dump, dict):
                for key, value in dump.items():
                    if isinstance(value, int) and not isinstance(value, bool):
                        put(f"crash_{key}", value, event.where)
            if event.kind in (Kind.ENVIRONMENT, Kind.CONFIG) and isinstance(attrs.get("facts"), dict):
                for key, value in attrs["facts"].items():
                    put(key, value, event.where)
            for key, value in knowledge.environment_facts_in(event.message, env).items():
                put(key, value, event.where)
            if attrs.get("phase_marker") and not _after_failure(evidence, event):
                last_marker = (attrs["phase_marker"], event)
        for traffic in evidence.traffic:
            usage = traffic.facts.get("kv_cache_usage_pct")
            if isinstance(usage, (int, float)):
                put("kv_cache_usage", float(usage) / 100, f"{traffic.template} x{traffic.count}", overwrite=True)
            for i, example in enumerate(traffic.examples):
                # ordinary lines are counted per template, a few kept: a startup line
                # stating a fact is its template's first
                where = f"{traffic.source}:{traffic.first_line}" if i == 0 else \
                    f"{traffic.source}:{traffic.first_line}-{traffic.last_line}"
                for key, value in knowledge.environment_facts_in(example, env).items():
                    put(key, value, where)
        _single_process(env, src)
        _phase(evidence, env, src, last_marker)
        _chunk_position(env)
        verdict.environment = env
        verdict.environment_sources = src
        if env:
            shown = ", ".join(f"{k}={v}" for k, v in list(env.items())[:8])
            verdict.explain(f"Environment from the inputs: {shown}{' ...' if len(env) > 8 else ''}.")
        else:
            verdict.explain("The inputs reveal no configuration (no startup lines).")


def _single_process(env: dict, src: dict) -> None:
    """A world of one process (world_size=1, MPI size 1) runs no tensor or pipeline
    parallelism: both sizes are 1 when nothing else says."""
    if env.get("world_size") != 1:
        return
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if key not in env:
            env[key], src[key] = 1, f"world_size=1 ({src.get('world_size', '')})"


def _literal(text: str):
    return {"true": True, "false": False}.get(text, text)


def _first_failure_event(evidence: Evidence):
    return next((e for e in evidence.events if e.kind in OWN_FAILURE), None)


def _after_failure(evidence: Evidence, event) -> bool:
    first = _first_failure_event(evidence)
    if first is None or first.time is None or event.time is None:
        return False
    return event.time > first.time


def _startup_event(evidence: Evidence) -> Event | None:
    """A line or traceback that says start-up failed (data/phases.toml)."""
    messages = knowledge.startup_messages()
    for event in evidence.events:
        if event.severity >= Severity.ERROR and any(text in event.message for text in messages):
            return event
        if event.kind in OWN_FAILURE | {Kind.EXCEPTION, Kind.NCCL} and any(
                knowledge.startup_frame(f.function, f.file) for exc in event.chain for f in exc.frames):
            return event
        if event.kind in OWN_FAILURE | {Kind.EXCEPTION, Kind.NCCL} and \
                str(event.attrs.get("exception_type") or "").rsplit(".", 1)[-1] in knowledge.startup_exceptions():
            return event
    return None


def _phase(evidence: Evidence, env: dict, src: dict, last_marker) -> None:
    """startup, cuda-graph-capture, prefill, chunked-prefill, decode (or nothing known)."""
    started = _startup_event(evidence)
    if started is not None:
        env["phase"], src["phase"] = "startup", started.where
        return
    if last_marker is not None and last_marker[0] == "cuda-graph-capture":
        env["phase"], src["phase"] = "cuda-graph-capture", last_marker[1].where
        return
    outputs = env.get("crash_num_output_tokens")
    done = env.get("crash_num_computed_tokens")
    prompt = env.get("crash_num_prompt_tokens") or env.get("crash_prompt_token_ids_len") or env.get("crash_prompt_len") \
        or env.get("prompt_tokens")
    if isinstance(prompt, int) and "prompt_tokens" not in env:
        env["prompt_tokens"] = prompt
    if outputs:
        env["phase"] = "decode"
    elif isinstance(done, int):
        if isinstance(prompt, int) and done >= prompt:
            env["phase"] = "decode"
        else:
            env["phase"] = "chunked-prefill" if done > 0 else "prefill"
    if "phase" in env:
        src["phase"] = src.get("crash_num_computed_tokens", src.get("crash_num_output_tokens", ""))


def _chunk_position(env: dict) -> None:
    budget = env.get("max_num_batched_tokens")
    done = env.get("crash_num_computed_tokens")
    if env.get("phase") not in ("prefill", "chunked-prefill"):
        return
    if isinstance(budget, int) and budget > 0 and isinstance(done, int):
        env["crash_prefill_block"] = done // budget + 1
        prompt = env.get("prompt_tokens")
        if isinstance(prompt, int) and prompt > 0:
            env["prefill_blocks"] = -(-prompt // budget)
