"""What to do next, the crash signature, and the one-paragraph summary."""

from __future__ import annotations

import hashlib
import re

from forensics import knowledge
from forensics.events import Kind
from forensics.rules.base import Context, Rule

SIGNATURE_VERSION = "forensics.sig/1"


class NextSteps(Rule):
    """Lists the commands that would collect the evidence this analysis is missing, in
    the order of how much they would raise confidence: when the faulting kernel is
    unknown, compute-sanitizer, GPU core dumps and CUDA_LAUNCH_BLOCKING; when no kernel
    log was given, the Xid lines; when the all-reduce backend cannot be told, DEBUG
    logging.  Commands carry this server's model and TP size when the logs show them."""

    name = "next-steps"

    def apply(self, ctx: Context) -> None:
        gaps = set()
        sticky = ctx.error is not None and ctx.error.sticky
        if sticky and (ctx.origin is None or ctx.origin.kernel == "unknown" or ctx.origin.confidence == "low"):
            gaps.add("no-origin")
        if sticky and not ctx.of_kind(Kind.XID):
            gaps.add("no-kernel-log")
        tp = ctx.environment.get("tensor_parallel_size")
        if sticky and isinstance(tp, int) and tp > 1 and not any(
                k in ctx.environment for k in ("allreduce_backend", "flashinfer_allreduce_backend")):
            gaps.add("backend-unknown")
        workers = [v for v in ctx.ranks.values() if v.role == "worker"]
        if isinstance(tp, int) and tp > 1 and len(workers) < tp:
            gaps.add("ranks-missing")
        serve = _serve_command(ctx.environment)
        for step in knowledge.load("next_steps")["step"]:
            if step["when"] in gaps:
                ctx.next_steps.append(f"{step['command'].format(serve=serve)}  # {step['why']}")
        if gaps:
            ctx.explain(self, f"Missing evidence: {', '.join(sorted(gaps))}.")


def _serve_command(env: dict) -> str:
    model = env.get("model") or "<model>"
    parts = [f"vllm serve {model}"]
    if env.get("tensor_parallel_size"):
        parts.append(f"--tensor-parallel-size {env['tensor_parallel_size']}")
    if env.get("max_num_batched_tokens"):
        parts.append(f"--max-num-batched-tokens {env['max_num_batched_tokens']}")
    return " ".join(parts)


class Signature(Rule):
    """Builds a crash signature that is stable across reruns (no pids, addresses, times,
    paths): the error name, then the origin kernel (template arguments, hashes and
    addresses dropped) or, when the origin is unknown, the surface site as
    file-basename:function plus the reporting API, then the failure kind.  Each part
    records whether it contributed and why."""

    name = "signature"

    def apply(self, ctx: Context) -> None:
        parts = []

        def part(name, value, why):
            parts.append({"part": name, "value": value, "contributed": value is not None, "why": why})

        if ctx.error:
            part("error", ctx.error.name, "the CUDA error reported")
        else:
            part("error", None, "no CUDA error in the inputs")
        if ctx.origin and ctx.origin.kernel != "unknown":
            part("origin", normalise_kernel(ctx.origin.kernel), "the kernel that faulted")
        else:
            part("origin", None, "origin unknown")
            first = ctx.surfaces[0] if ctx.surfaces else None
            if first and first.file:
                site = f"{first.file.rsplit('/', 1)[-1]}:{first.function}"
                part("surface", f"{site}{'@' + first.api if first.api else ''}",
                     "where the error surfaced (origin unknown)")
            else:
                part("surface", None, "no surface site")
        part("failure", ctx.failure_kind, "what kind of failure")
        ctx.signature_parts = parts
        used = [p["value"] for p in parts if p["contributed"]]
        if used:
            digest = hashlib.sha1("|".join(map(str, used)).encode()).hexdigest()[:10]
            ctx.signature = f"{SIGNATURE_VERSION}:{digest} " + " | ".join(map(str, used))
            ctx.explain(self, f"Signature from {', '.join(p['part'] for p in parts if p['contributed'])}.")


_TEMPLATE = re.compile(r"<[^<>]*>")


def normalise_kernel(name: str) -> str:
    """Kernel name without template arguments, parameter lists, hashes or offsets."""
    name = name.split("+0x")[0].strip()
    previous = None
    while previous != name:
        previous, name = name, _TEMPLATE.sub("", name)
    name = re.sub(r"\(.*\)$", "", name).strip()
    name = re.sub(r"_[0-9a-f]{8,}$|_\d+d\d+de$", "", name)
    return name


class Summary(Rule):
    """Writes the verdict in one paragraph: error, where it surfaced, origin or its
    absence, who failed first, who died as collateral."""

    name = "summary"

    def apply(self, ctx: Context) -> None:
        bits = []
        if ctx.error:
            bits.append(f"{ctx.error.name} ({ctx.error.code})")
            if ctx.surfaces:
                s = ctx.surfaces[0]
                where = f"{s.file.rsplit('/', 1)[-1]}:{s.line} {s.function}" if s.file else "a host call"
                api = f"{s.api} at " if s.api else ""
                bits.append(f"surfaced on rank {s.rank} at {api}{where}")
            if ctx.origin and ctx.origin.kernel != "unknown":
                bits.append(f"faulting kernel {ctx.origin.kernel} on rank {ctx.origin.rank} "
                            f"({ctx.origin.confidence} confidence)")
            elif ctx.origin:
                bits.append(f"rank {ctx.origin.rank} ran the faulting kernel ({ctx.origin.fault}) "
                            f"but no evidence names the kernel")
            elif ctx.error.sticky:
                bits.append("the faulting kernel is unknown: the reporting call is only where the "
                            "sticky error surfaced")
        elif ctx.origin and ctx.origin.kernel != "unknown":
            bits.append(f"{ctx.origin.fault} in kernel {ctx.origin.kernel}"
                        + (f" on rank {ctx.origin.rank}" if ctx.origin.rank is not None else "")
                        + f" ({ctx.origin.confidence} confidence; no host call reported a CUDA error)")
        elif ctx.first_failure:
            bits.append(ctx.first_failure.what)
        else:
            bits.append("no failure found in the inputs")
        if ctx.first_failure and ctx.first_failure.rank is not None:
            bits.append(f"first failure: rank {ctx.first_failure.rank}")
        collateral = sorted(v.rank for v in ctx.ranks.values() if v.status == "collateral" and v.rank is not None)
        if collateral:
            bits.append(f"collateral ranks: {', '.join(map(str, collateral))}")
        ctx.summary = "; ".join(bits) + "."
