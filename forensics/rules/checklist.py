"""The incident checklist: the questions an expert asks of such a report, answered.

Each item is pass (no concern), fail (a concern or a risk factor this crash has), or
unknown (the inputs cannot tell), with the finding in words and the evidence line.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from forensics.events import Kind
from forensics.rules.base import Context, Rule


class Checklist(Rule):
    """Answers the incident checklist from the environment and the verdict: versions;
    whether the all-reduce backend is really MNNVL (vLLM >= 0.30 logs it only at DEBUG);
    GPU and TP topology; model and quantization; --disable-custom-all-reduce; whether the
    failing prompt spanned several chunked-prefill blocks and in which it died; KV-cache
    usage at the crash; whether every rank went down at the same point; what the client
    saw."""

    name = "checklist"

    def apply(self, ctx: Context) -> None:
        env, src = ctx.environment, ctx.environment_sources

        def item(check, status, finding, *keys):
            evidence = next((src[k] for k in keys if k in src), None)
            ctx.checklist.append({"check": check, "status": status, "finding": finding, "evidence": evidence})

        versions = {k: env.get(k) for k in ("vllm", "flashinfer", "torch")}
        known = {k: v for k, v in versions.items() if v}
        item("versions (vLLM, FlashInfer, torch)", "pass" if len(known) == 3 else "unknown",
             ", ".join(f"{k} {v}" for k, v in known.items()) +
             ("; " if known else "") + ", ".join(f"{k} not printed" for k in versions if k not in known),
             "vllm", "flashinfer", "torch")

        backend = env.get("flashinfer_allreduce_backend") or env.get("all_reduce_backend") or env.get("allreduce_backend")
        if backend:
            mnnvl = "mnnvl" in str(backend).lower()
            item("all-reduce backend", "fail" if mnnvl else "pass",
                 f"{backend}" + (" (FlashInfer MNNVL: see known issues)" if mnnvl else ""),
                 "flashinfer_allreduce_backend", "all_reduce_backend", "allreduce_backend")
        else:
            note = "not in the logs"
            if _version_at_least(env.get("vllm"), "0.30"):
                note += ("; vLLM >= 0.30 logs the FlashInfer all-reduce backend selection only at DEBUG "
                         "(rerun with VLLM_LOGGING_LEVEL=DEBUG)")
            item("all-reduce backend", "unknown", note)

        gpu, tp = env.get("gpu"), env.get("tensor_parallel_size")
        item("GPU model and TP topology", "pass" if gpu and tp else "unknown",
             f"{gpu or 'GPU not printed'}, TP={tp or '?'}, PP={env.get('pipeline_parallel_size', '?')}, "
             f"DP={env.get('data_parallel_size', '?')}", "gpu", "tensor_parallel_size")

        model = env.get("model")
        item("model and quantization", "pass" if model else "unknown",
             f"{model or 'model not printed'}, quantization={env.get('quantization') or 'none'}, "
             f"dtype={env.get('dtype', '?')}", "model", "quantization")

        custom = env.get("disable_custom_all_reduce")
        item("--disable-custom-all-reduce", "unknown" if custom is None else "pass",
             "not printed" if custom is None else f"disable_custom_all_reduce={custom}", "disable_custom_all_reduce")

        block, blocks = env.get("crash_prefill_block"), env.get("prefill_blocks")
        if block:
            status = "fail" if block > 1 else "pass"
            of = f" of {blocks}" if blocks else ""
            item("prompt spans several chunked-prefill blocks", status,
                 f"died in prefill block {block}{of} (num_computed_tokens={env.get('crash_num_computed_tokens')}, "
                 f"max_num_batched_tokens={env.get('max_num_batched_tokens')})",
                 "crash_num_computed_tokens", "max_num_batched_tokens")
        else:
            item("prompt spans several chunked-prefill blocks", "unknown",
                 f"phase {env.get('phase', 'unknown')}; no step in flight was dumped", "phase")

        usage = env.get("kv_cache_usage_at_crash", env.get("kv_cache_usage"))
        if usage is None:
            item("KV-cache usage at the crash", "unknown", "not logged")
        else:
            item("KV-cache usage at the crash", "pass" if usage < 0.9 else "fail",
                 f"{usage:.1%}" + (" (rules out running out of KV cache)" if usage < 0.9 else " (near capacity)"),
                 "kv_cache_usage_at_crash", "kv_cache_usage")

        workers = [v for v in ctx.ranks.values() if v.role == "worker"]
        if not workers or (isinstance(tp, int) and len(workers) < tp):
            item("every rank went down at the same point", "unknown",
                 f"logs of {len(workers)} of {tp or '?'} ranks")
        else:
            standing = [v for v in workers if v.status in ("healthy", "unknown") and v.exit_code in (None, 0)
                        and not v.failure]
            item("every rank went down at the same point", "pass" if not standing else "fail",
                 "all ranks failed in the same step" if not standing else
                 f"ranks {', '.join(str(v.rank) for v in standing)} show no failure")

        statuses = [int(e.attrs["status"]) for e in ctx.of_kind(Kind.HTTP) if str(e.attrs.get("status", "")).isdigit()]
        errors = [s for s in statuses if s >= 500]
        if not statuses:
            item("what the client saw", "unknown", "no HTTP status in the inputs")
        else:
            item("what the client saw", "fail" if errors else "pass",
                 f"HTTP {', '.join(str(s) for s in sorted(set(statuses)))}" +
                 (" (the crash reached clients)" if errors else ""))
        fails = [c["check"] for c in ctx.checklist if c["status"] == "fail"]
        ctx.explain(self, f"Checklist: {len(ctx.checklist)} checks, concerns: {', '.join(fails) or 'none'}.")


def _version_at_least(value, minimum: str) -> bool:
    try:
        return Version(str(value)) >= Version(minimum)
    except (InvalidVersion, TypeError):
        return False
