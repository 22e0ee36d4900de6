"""The incident checklist: the questions an expert asks of such a report, answered.

Each item is pass (no concern), fail (a concern or a risk factor this crash has), or
unknown (the inputs cannot tell), with the finding in words and the evidence line.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from forensics.events import Kind
from forensics.rules.advice import engine_of
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.verdict import Check, ChecklistItem, Status, ranks_phrase


UNSHOWN = "not in the inputs"
# The checks only a vLLM engine's lines can answer
VLLM_ONLY = ("all-reduce backend", "--disable-custom-all-reduce", "prompt spans several chunked-prefill blocks",
             "KV-cache usage at the crash")


class Checklist(Rule):
    """Answers the incident checklist from the environment and the verdict: versions;
    whether the all-reduce backend is really MNNVL (vLLM >= 0.30 logs it only at DEBUG);
    GPU and TP topology; model and quantization; --disable-custom-all-reduce; whether the
    failing prompt spanned several chunked-prefill blocks and in which it died; KV-cache
    usage at the crash; whether every rank went down at the same point; what the client
    saw.  Only the checks the inputs can speak to: the vLLM ones when a vLLM engine is in
    the inputs, the serving ones for a server, the ranks' one for a run of several; an
    unknown is said as "not in the inputs", never as a default.  Never contradicts the
    verdict: "what the client saw" and "every rank went down" read the same facts the
    verdict does."""

    name = "checklist"
    reads = ("environment", "environment_sources", "ranks", "failure_kind", "known_issues")
    writes = ("checklist",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        env, src = verdict.environment, verdict.environment_sources
        engine = engine_of(env)
        items: list[ChecklistItem] = []

        def item(check, status, finding, *keys):
            if check in VLLM_ONLY and engine != "vllm":
                return
            items.append(ChecklistItem(check, status, finding, next((src[k] for k in keys if k in src), None)))

        names = ((engine,) if engine else ()) + ("torch", "cuda", "driver")
        versions = {k: env.get(k) for k in names}
        known = {k: v for k, v in versions.items() if v}
        item("versions (engine, torch, CUDA, driver)" if engine else "versions (torch, CUDA, driver)",
             Check.PASS if len(known) == len(versions) else Check.UNKNOWN,
             "; ".join([f"{k} {v}" for k, v in known.items()] + [f"{k} {UNSHOWN}" for k in versions if k not in known]),
             *names)

        backend = env.get("flashinfer_allreduce_backend") or env.get("allreduce_backend")
        if backend:
            mnnvl = "mnnvl" in str(backend).lower()
            cite = " (FlashInfer MNNVL: see known issues)" if mnnvl and verdict.known_issues else \
                " (FlashInfer MNNVL)" if mnnvl else ""
            item("all-reduce backend", Check.FAIL if mnnvl else Check.PASS, f"{backend}{cite}",
                 "flashinfer_allreduce_backend", "allreduce_backend")
        else:
            note = UNSHOWN
            if _version_at_least(env.get("vllm"), "0.30"):
                note += ("; vLLM >= 0.30 logs the FlashInfer all-reduce backend selection only at DEBUG "
                         "(rerun with VLLM_LOGGING_LEVEL=DEBUG)")
            item("all-reduce backend", Check.UNKNOWN, note)

        workers = [v for v in verdict.ranks if v.role == "worker" and v.in_inputs]
        gpu, tp = env.get("gpu"), env.get("tensor_parallel_size")
        if engine or gpu or tp or len(workers) > 1:
            sizes = [f"{name} {env[key]}" for name, key in (("TP", "tensor_parallel_size"),
                                                           ("PP", "pipeline_parallel_size"),
                                                           ("DP", "data_parallel_size")) if env.get(key)]
            item("GPU model and parallel topology", Check.PASS if gpu and tp else Check.UNKNOWN,
                 ", ".join([gpu or f"GPU {UNSHOWN}"] + (sizes or [f"parallel sizes {UNSHOWN}"])),
                 "gpu", "tensor_parallel_size")

        if engine:
            model = env.get("model")
            parts = [model or f"model {UNSHOWN}",
                     f"quantization {env['quantization']}" if env.get("quantization") else f"quantization {UNSHOWN}"]
            if env.get("dtype"):
                parts.append(f"dtype {env['dtype']}")
            item("model and quantization", Check.PASS if model else Check.UNKNOWN, ", ".join(parts), "model",
                 "quantization")

        custom = env.get("disable_custom_all_reduce")
        item("--disable-custom-all-reduce", Check.UNKNOWN if custom is None else Check.PASS,
             UNSHOWN if custom is None else f"disable_custom_all_reduce={custom}", "disable_custom_all_reduce")

        block, blocks = env.get("crash_prefill_block"), env.get("prefill_blocks")
        if block:
            of = f" of {blocks}" if blocks else ""
            item("prompt spans several chunked-prefill blocks", Check.FAIL if block > 1 else Check.PASS,
                 f"died in prefill block {block}{of} (num_computed_tokens={env.get('crash_num_computed_tokens')}, "
                 f"max_num_batched_tokens={env.get('max_num_batched_tokens')})",
                 "crash_num_computed_tokens", "max_num_batched_tokens")
        else:
            item("prompt spans several chunked-prefill blocks", Check.UNKNOWN,
                 (f"phase {env['phase']}" if env.get("phase") else f"phase {UNSHOWN}")
                 + "; no step in flight was dumped", "phase")

        usage = env.get("kv_cache_usage_at_crash", env.get("kv_cache_usage"))
        if not isinstance(usage, (int, float)):
            item("KV-cache usage at the crash", Check.UNKNOWN, UNSHOWN)
        else:
            item("KV-cache usage at the crash", Check.PASS if usage < 0.9 else Check.FAIL,
                 f"{usage:.1%}" + (" (rules out running out of KV cache)" if usage < 0.9 else " (near capacity)"),
                 "kv_cache_usage_at_crash", "kv_cache_usage")

        # only the ranks the inputs show: the verdict also lists the ranks the configuration
        # promises but no input shows (presumed to have gone down with the job) - those are
        # no evidence of where they stopped
        several = len(workers) > 1 or (isinstance(tp, int) and tp > 1)
        if not several:
            pass                        # one process: no rank could have stayed up
        elif isinstance(tp, int) and len(workers) < tp:
            item("every rank went down at the same point", Check.UNKNOWN,
                 f"the logs of {len(workers)} of {tp} ranks are in the inputs" if workers else
                 f"no rank's own lines are in the inputs (the run has {tp})")
        elif verdict.failure_kind is None:
            # nothing failed: no rank had to go down, so a rank still standing is no concern
            item("every rank went down at the same point", Check.PASS, "no failure in the inputs: no rank had to go down")
        else:
            standing = [v for v in workers if v.status == Status.HEALTHY]
            item("every rank went down at the same point", Check.PASS if not standing else Check.FAIL,
                 "every rank went down" if not standing else
                 f"{ranks_phrase(v.rank for v in standing)} show{'s' if len(standing) == 1 else ''} no failure")

        statuses = sorted({e.attrs["status"] for e in evidence.of_kind(Kind.HTTP) if isinstance(e.attrs.get("status"), int)})
        errors = [s for s in statuses if s >= 500]
        if statuses:
            item("what the client saw", Check.FAIL if errors else Check.PASS,
                 f"HTTP {', '.join(map(str, statuses))}" + (" (the crash reached clients)" if errors else ""))
        elif engine:
            item("what the client saw", Check.UNKNOWN, f"HTTP statuses {UNSHOWN}")
        verdict.checklist = tuple(items)
        fails = [c.check for c in items if c.status == Check.FAIL]
        verdict.explain(f"Checklist: {len(items)} checks, concerns: {', '.join(fails) or 'none'}.")


def _version_at_least(value, minimum: str) -> bool:
    try:
        return Version(str(value)) >= Version(minimum)
    except (InvalidVersion, TypeError):
        return False
