"""Several runs side by side (``forensics compare RUN...``): restarts of one server, or
before/after an upgrade.  Groups runs by crash signature, says which environment fields
differ, and how often each signature reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics.case import Case, analyze

# Environment fields worth comparing between runs (what changes between an upgrade's
# before and after); run-specific values such as pids or token counts are left out.
COMPARED = ("vllm", "flashinfer", "torch", "model", "dtype", "quantization", "tensor_parallel_size",
            "pipeline_parallel_size", "data_parallel_size", "max_num_batched_tokens", "max_model_len",
            "attention_backend", "allreduce_backend", "flashinfer_allreduce_backend", "all_reduce_backend",
            "disable_custom_all_reduce", "enforce_eager", "kv_cache_dtype", "gpu", "prompt_tokens", "phase")


@dataclass
class Run:
    name: str
    case: Case

    @property
    def signature(self) -> str | None:
        return self.case.context.signature

    @property
    def parts(self) -> str:
        used = [str(p["value"]) for p in self.case.context.signature_parts if p["contributed"]]
        return " | ".join(used) if used else "no failure"


@dataclass
class Comparison:
    runs: list[Run]

    def groups(self) -> list[tuple[str | None, list[Run]]]:
        """Runs grouped by signature, biggest group first (ties: order of appearance)."""
        order: dict = {}
        for run in self.runs:
            order.setdefault(run.signature, []).append(run)
        return sorted(order.items(), key=lambda item: -len(item[1]))

    def differing_environment(self) -> dict[str, list]:
        out = {}
        for key in COMPARED:
            values = [run.case.context.environment.get(key) for run in self.runs]
            if len({repr(v) for v in values}) > 1:
                out[key] = values
        return out

    def reproduction(self) -> list[str]:
        total = len(self.runs)
        lines = []
        for signature, runs in self.groups():
            if signature is None:
                lines.append(f"{len(runs)}/{total} runs show no failure")
                continue
            ctx = runs[0].case.context
            where = ""
            phase = ctx.environment.get("phase")
            block = ctx.environment.get("crash_prefill_block")
            if phase and phase != "unknown":
                where = f" in {phase}" + (f" (prefill block {block})" if block else "")
            lines.append(f"{len(runs)}/{total} runs crash with signature {signature} ({runs[0].parts}){where}")
        return lines

    def to_dict(self) -> dict:
        return {
            "schema": "forensics.compare/1",
            "runs": [{"name": r.name, "signature": r.signature, "parts": r.parts,
                      "summary": r.case.context.summary} for r in self.runs],
            "groups": [{"signature": s, "runs": [r.name for r in rs]} for s, rs in self.groups()],
            "environment_differences": {k: v for k, v in self.differing_environment().items()},
            "reproduction": self.reproduction(),
        }


def compare(paths: list[str], kb_dirs: list[str] | None = None) -> Comparison:
    return Comparison([Run(path, analyze(path, kb_dirs=kb_dirs)) for path in paths])
