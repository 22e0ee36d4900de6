"""What the inputs reveal about the server: versions, parallelism, backends, request."""

from __future__ import annotations

import ast
import re

from forensics.events import Kind, Severity
from forensics.rules.base import Context, Rule

# Scalar keys of vLLM's engine config line (VllmConfig.__str__) worth reporting.
CONFIG_KEYS = ("model", "dtype", "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size",
               "data_parallel_size", "disable_custom_all_reduce", "quantization", "enforce_eager",
               "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill",
               "max_num_batched_tokens", "all_reduce_backend", "distributed_executor_backend")
ARG_KEYS = ("model", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
            "max_num_batched_tokens", "max_model_len", "dtype", "quantization", "enforce_eager",
            "disable_custom_all_reduce", "enable_chunked_prefill", "kv_cache_dtype",
            "attention_backend", "allreduce_kernel", "prompt_len")
DUMP_KEYS = ("num_computed_tokens", "total_num_scheduled_tokens", "num_scheduled_tokens",
             "prompt_token_ids_len", "prompt_len", "num_output_tokens")
_SCALAR = re.compile(r"\b(?P<key>\w+)=(?P<value>'[^']*'|\"[^\"]*\"|[^,\s)]+)")
_PROMPT_TOKENS = re.compile(r"\((?P<n>\d+) tokens\)|\bprompt_len=(?P<n2>\d+)")
_STEP = re.compile(r"\((?P<phase>prefill|decode)\).*num_computed_tokens=\[(?P<n>\d+)")


class Environment(Rule):
    """Collects versions, model, dtype/quantization, parallel sizes, chunked-prefill budget,
    attention and all-reduce backends and flags from startup lines, and from the engine's
    crash dump the step in flight (num_computed_tokens, scheduled tokens) and KV-cache
    usage; then places the failing step in the prompt's chunked-prefill blocks."""

    name = "environment"

    def apply(self, ctx: Context) -> None:
        env = ctx.environment
        src = ctx.environment_sources

        def put(key, value, event, overwrite=False):
            if value in (None, "", "None"):
                return
            if key not in env or overwrite:
                env[key] = value
                src[key] = event.where

        for event in ctx.events:
            a = event.attrs
            mid = a.get("message_id")
            if mid == "engine-config":
                put("vllm", a.get("vllm_version"), event)
                for key, value in _scalars(a.get("config", "")).items():
                    if key in CONFIG_KEYS:
                        put(key, value, event)
            elif mid == "non-default-args":
                for key, value in _dict(a.get("args", "")).items():
                    if key in ARG_KEYS:
                        put(key, value, event)
            elif mid in ("api-server-version", "logo-version"):
                put("vllm", a.get("vllm_version"), event)
                put("model", a.get("model"), event)
            elif mid == "logo-model":
                put("model", a.get("model"), event)
            elif mid == "chunked-prefill":
                put("max_num_batched_tokens", _num(a.get("max_num_batched_tokens")), event)
                put("enable_chunked_prefill", True, event)
            elif mid == "attention-backend":
                put("attention_backend", a.get("attention_backend"), event)
            elif mid == "allreduce-backends":
                put("allreduce_backend", a.get("allreduce_backends"), event)
            elif mid == "flashinfer-allreduce":
                put("flashinfer_allreduce_backend", a.get("flashinfer_allreduce_backend"), event)
            elif mid == "custom-allreduce-backend":
                put("allreduce_backend", a.get("allreduce_backend"), event)
            elif mid == "device-line":
                put("gpu", a.get("gpu"), event)
                put("compute_capability", a.get("compute_capability"), event)
            elif mid == "dist-init":
                put("distributed_backend", a.get("dist_backend"), event)
                put("world_size", _num(a.get("world_size")), event)
            elif mid == "kv-cache-stats":
                put("kv_cache_usage", float(a["kv_cache_usage_pct"]) / 100, event, overwrite=True)
            elif mid == "scheduler-stats":
                put("kv_cache_usage_at_crash", float(a["kv_cache_usage"]), event)
            elif mid == "scheduler-dump":
                dump = a.get("dump", "")
                for key in DUMP_KEYS:
                    # vLLM prints key=[n] (dataclass repr); dict reprs print 'key': n
                    match = re.search(rf"\b{key}'?(?:=|: )\[?(\d+)", dump)
                    if match:
                        put(f"crash_{key}", int(match.group(1)), event)
            if event.kind == Kind.LOG and "prompt_tokens" not in env and "request" in event.message.lower():
                match = _PROMPT_TOKENS.search(event.message)
                if match:
                    put("prompt_tokens", int(match["n"] or match["n2"]), event)
            if event.kind == Kind.LOG and "step" in event.message and "num_computed_tokens=[" in event.message:
                # the last step a process finished before the crash (per-step INFO lines)
                match = _STEP.search(event.message)
                if match:
                    put("last_step_phase", match["phase"], event, overwrite=True)
                    put("last_step_num_computed_tokens", int(match["n"]), event, overwrite=True)
        for key in ("tensor_parallel_size", "max_num_batched_tokens", "prompt_len"):
            if key in env:
                env[key] = _num(env[key])
        if "crash_prompt_len" in env and "prompt_tokens" not in env:
            env["prompt_tokens"] = env["crash_prompt_len"]
            src["prompt_tokens"] = src["crash_prompt_len"]
        if "prompt_len" in env:
            if "prompt_tokens" not in env:
                env["prompt_tokens"] = env["prompt_len"]
                src["prompt_tokens"] = src["prompt_len"]
            del env["prompt_len"], src["prompt_len"]
        self._phase(ctx)
        self._chunk_position(ctx)
        if env:
            shown = ", ".join(f"{k}={v}" for k, v in list(env.items())[:8])
            ctx.explain(self, f"Environment from the inputs: {shown}{' ...' if len(env) > 8 else ''}.")
        else:
            ctx.explain(self, "The inputs reveal no configuration (no startup lines).")

    @staticmethod
    def _phase(ctx: Context) -> None:
        """startup, cuda-graph-capture, prefill, chunked-prefill, decode or unknown."""
        env = ctx.environment
        if any(e.kind == Kind.ENGINE_FATAL and "failed to start" in e.message for e in ctx.events) or \
                any("initialization failed" in e.message for e in ctx.events if e.kind in (Kind.TRACEBACK, Kind.LOG)):
            env["phase"] = "startup"
            return
        failure = next((e for e in ctx.events if e.severity >= Severity.ERROR and e.kind != Kind.LOG), None)
        if failure is not None:
            before = [e for e in ctx.events if e.kind == Kind.LOG and e.seq <= failure.seq and e.source == failure.source]
            if any("Capturing CUDA graph" in e.message or "CUDA graph capture" in e.message for e in before[-20:]):
                env["phase"] = "cuda-graph-capture"
                return
        outputs = env.get("crash_num_output_tokens")
        done = env.get("crash_num_computed_tokens")
        if outputs:
            env["phase"] = "decode"
        elif isinstance(done, int):
            prompt = env.get("prompt_tokens")
            if isinstance(prompt, int) and done >= prompt:
                env["phase"] = "decode"
            else:
                env["phase"] = "chunked-prefill" if done > 0 else "prefill"
        elif env.get("last_step_phase"):
            step_done = env.get("last_step_num_computed_tokens", 0)
            budget = env.get("max_num_batched_tokens")
            prompt = env.get("prompt_tokens")
            if env["last_step_phase"] == "prefill" and isinstance(prompt, int) and step_done < prompt:
                env["phase"] = "chunked-prefill"
            else:
                env["phase"] = env["last_step_phase"]
            if isinstance(budget, int) and budget > 0 and "crash_num_computed_tokens" not in env:
                env["crash_num_computed_tokens"] = step_done
                ctx.environment_sources["crash_num_computed_tokens"] = "last finished step before the failure"
        else:
            env["phase"] = "unknown"

    @staticmethod
    def _chunk_position(ctx: Context) -> None:
        env = ctx.environment
        budget = env.get("max_num_batched_tokens")
        done = env.get("crash_num_computed_tokens")
        if env.get("phase") not in ("prefill", "chunked-prefill"):
            return
        if isinstance(budget, int) and budget > 0 and isinstance(done, int):
            block = done // budget + 1
            env["crash_prefill_block"] = block
            prompt = env.get("prompt_tokens")
            if isinstance(prompt, int) and prompt > 0:
                env["prefill_blocks"] = -(-prompt // budget)


def _scalars(config: str) -> dict:
    out = {}
    for match in _SCALAR.finditer(config):
        out.setdefault(match["key"], _literal(match["value"]))
    return out


def _dict(text: str) -> dict:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _literal(value: str):
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _num(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return value
