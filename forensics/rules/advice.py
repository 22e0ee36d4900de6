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
    """Builds a crash signature stable across reruns of the same bug (no pids, addresses,
    times, paths, JIT hashes), versioned as forensics.sig/1.  Parts, each recording
    whether it contributed and why: the fault class (from the origin's fault when the
    kernel is known, so a rerun under compute-sanitizer - 719 instead of 700 - keeps its
    signature; else the CUDA error name or the failure kind); the origin kernel
    normalised (template arguments, parameters, offsets and hashes dropped) or, when the
    origin is unknown, the surface site as file-basename:function@API with error-check
    and library frames skipped; and the engine phase."""

    name = "signature"

    def apply(self, ctx: Context) -> None:
        parts = []

        def part(name, value, why):
            parts.append({"part": name, "value": value, "contributed": value is not None, "why": why})

        kernel_known = ctx.origin is not None and ctx.origin.kernel != "unknown"
        if kernel_known:
            part("fault", fault_class(ctx.origin.fault), f"class of the origin's fault ({ctx.origin.fault})")
        elif ctx.error:
            part("fault", ctx.error.name, "the CUDA error reported (origin unknown)")
        else:
            part("fault", ctx.failure_kind, "the failure kind (no CUDA error)" if ctx.failure_kind
                 else "no failure found")
        if kernel_known:
            part("origin", normalise_kernel(ctx.origin.kernel), "the kernel that faulted, normalised")
        else:
            part("origin", None, "origin unknown")
            site = _surface_site(ctx)
            part("surface", site, "where the error surfaced, since the origin is unknown" if site
                 else "no surface site outside error-check helpers and libraries")
        phase = ctx.environment.get("phase")
        part("phase", phase if phase and phase != "unknown" else None,
             "engine phase at the failure" if phase and phase != "unknown" else "phase unknown")
        ctx.signature_parts = parts
        used = [f"{p['part']}={p['value']}" for p in parts if p["contributed"]]
        if ctx.failure_kind is None and ctx.error is None and not kernel_known:
            ctx.explain(self, "No failure, no signature.")
            return
        digest = hashlib.sha1("|".join(used).encode()).hexdigest()[:12]
        ctx.signature = f"{SIGNATURE_VERSION}:{digest}"
        ctx.explain(self, f"Signature {ctx.signature} from {', '.join(used)}.")


def fault_class(text: str) -> str:
    for entry in knowledge.load("signature")["fault_class"]:
        if re.search(entry["pattern"], text or ""):
            return entry["class"]
    return "other-fault"


def normalise_kernel(name: str) -> str:
    """Kernel name without template arguments, parameter lists, hashes or offsets."""
    name = re.sub(r"<<<[^>]*>>>", "", name)   # launch configuration, before template arguments
    depth, kept = 0, []
    for ch in name:                       # template arguments may nest: balance brackets
        if ch == "<":
            depth += 1
            continue
        if ch == ">" and depth:
            depth -= 1
            continue
        if depth == 0:
            kept.append(ch)
    name = "".join(kept)
    for pattern, replacement in knowledge.load("signature")["kernels"]["normalisers"]:
        name = re.sub(pattern, replacement, name)
    return name.strip()


def _surface_site(ctx: Context) -> str | None:
    skip = [re.compile(p) for p in knowledge.load("signature")["surface"]["skip_files"]]
    for s in ctx.surfaces:
        if s.file and not any(p.search(s.file) for p in skip):
            return f"{s.file.rsplit('/', 1)[-1]}:{s.function}" + (f"@{s.api}" if s.api else "")
    return None


class Summary(Rule):
    """Writes the verdict in one paragraph: error, where it surfaced, origin or its
    absence, who failed first, who died as collateral."""

    name = "summary"

    def apply(self, ctx: Context) -> None:
        bits = []
        if ctx.failure_kind == "startup":
            bits.append("the server failed while starting")
        if ctx.error:
            bits.append(f"{ctx.error.name} ({ctx.error.code})"
                        + ("" if ctx.error.sticky else f": {ctx.error.meaning}"))
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
