"""What to do next, and the crash signature."""

from __future__ import annotations

import hashlib
import re
import shlex

from forensics import inert, knowledge, names
from forensics.events import Kind
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.verdict import FailureKind, NextStep, SignaturePart, Status, rank_list, who

SIGNATURE_VERSION = "forensics.sig/2"


class GraphReplay(Rule):
    """When the error surfaced in a CUDA graph replay (``CUDAGraph.replay``, a host
    backtrace through ``cudaGraphLaunch``), says that the faulting kernel ran inside the
    graph and that CUDA_LAUNCH_BLOCKING=1 cannot localise it."""

    name = "graph-replay"
    reads = ("surfaces",)

    def predicate(self, evidence: Evidence, verdict: VerdictView) -> bool:
        return any(s.graph_replay for s in verdict.surfaces)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        verdict.note("The error surfaced in a CUDA graph replay: the faulting kernel ran inside the captured graph, "
                     "so CUDA_LAUNCH_BLOCKING=1 cannot point at it; run eager (--enforce-eager) or take a GPU core "
                     "dump or a compute-sanitizer run of the replay.")
        verdict.explain("Surface is a CUDA graph replay.")


class NextSteps(Rule):
    """Lists what to do next, in the order of how much it would raise confidence.  Once
    the origin is known: open the kernel's source line a tool named, try the matching
    known issue's workaround.  While it is not: compute-sanitizer, GPU core dumps and
    CUDA_LAUNCH_BLOCKING (not for a graph replay).  When only relays are in the inputs,
    the logs that hold the failure; for a hang, stacks of every rank and NCCL's flight
    recorder; when no kernel log was given, the Xid lines; when the all-reduce backend
    cannot be told on a vLLM that logs it, DEBUG logging; then filing the report and
    collecting a bundle.  A step shows only when the inputs meet its conditions (engine,
    version).  Commands are filled from the inputs - the server, torchrun or script
    command, the paths analysed, the kernel's file - each value shell-quoted and only
    when it looks like what it claims; else a placeholder says what to put there."""

    name = "next-steps"
    reads = ("error", "origin", "environment", "ranks", "failure_kind", "surfaces", "hang", "known_issues")
    writes = ("next_steps",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        gaps = set()
        error, origin, kind = verdict.error, verdict.origin, verdict.failure_kind
        env = verdict.environment
        sticky = error is not None and error.error.sticky
        replay = any(s.graph_replay for s in verdict.surfaces)
        if kind == FailureKind.RELAY_ONLY:
            gaps.add("relay-only")
        if origin is not None and origin.kernel and origin.location:
            gaps.add("origin-located")
        if verdict.known_issues and verdict.known_issues[0].workaround:
            gaps.add("known-issue")
        if (sticky or kind == FailureKind.CUDA_ERROR) and (origin is None or not origin.kernel):
            gaps.add("no-origin")
            gaps.add("graph-replay" if replay else "no-origin-eager")
        if kind == FailureKind.DEVICE_ASSERT and (origin is None or not names.is_named(origin.kernel)):
            gaps.add("device-assert")
        if kind in (FailureKind.HANG, FailureKind.NCCL_TIMEOUT):
            gaps.add("hang")
            if (kind == FailureKind.NCCL_TIMEOUT or any(e.attrs.get("message_id", "").startswith("nccl")
                                                       for e in evidence.of_kind(Kind.COLLECTIVE_TIMEOUT))) \
                    and not evidence.of_kind(Kind.FLIGHT_RECORDER):     # (its dumps are in the inputs already)
                gaps.add("nccl-hang")
        if kind == FailureKind.OOM:
            gaps.add("oom")
        if (sticky or kind in (FailureKind.CUDA_ERROR, FailureKind.FATAL_SIGNAL)) and not evidence.of_kind(Kind.XID):
            gaps.add("no-kernel-log")
        tp = env.get("tensor_parallel_size")
        if sticky and isinstance(tp, int) and tp > 1 and env.get("vllm") and not any(
                k in env for k in ("allreduce_backend", "flashinfer_allreduce_backend")):
            gaps.add("backend-unknown")
        workers = [v for v in verdict.ranks if v.role == "worker"]
        if isinstance(tp, int) and tp > 1 and workers and len(workers) < tp:
            gaps.add("ranks-missing")
        if kind is not None or error is not None:
            gaps.add("report")
        if kind is not None and not any(s.kind == "collect-manifest" for s in evidence.sources):
            gaps.add("not-collected")
        engine = engine_of(env)
        serve, warnings = program_command(env, evidence)
        values = {"{serve}": serve, "{process}": _process_pattern(engine), "{inputs}": _paths(evidence.inputs),
                  "{log_inputs}": _paths([p for p in evidence.inputs if p != "-"]) or "<log files>",
                  "{eager}": " --enforce-eager" if engine == "vllm" else "",
                  "{no_graphs}": {"vllm": " --enforce-eager", "sglang": " --disable-cuda-graph"}.get(engine or "", ""),
                  "{memory_flag}": " --gpu-memory-utilization 0.85" if engine == "vllm" else
                  (" --mem-fraction-static 0.8" if engine == "sglang" else "")}
        if origin is not None and origin.location:
            file, _, line = origin.location.rpartition(":")
            values["{location_file}"] = shlex.quote(file.rsplit("/", 1)[-1]) if file else "<file>"
            at = int(line) if line.isdigit() else None
            values["{location_range}"] = f"{max(1, at - 5)},{at + 5}" if at else "1,40"
        if verdict.known_issues:
            values["{workaround}"] = verdict.known_issues[0].workaround
        steps = []
        for step in knowledge.load("next_steps")["step"]:
            if step["when"] not in gaps or not _conditions_met(step, engine, env):
                continue
            command, action, title = step.get("command"), step.get("action"), step.get("title", "")
            for key, value in values.items():
                command = command.replace(key, value) if command else command
                action = action.replace(key, value) if action else action
                title = title.replace(key, value)
            why = f"{step['why']}: {action}" if action else step["why"]
            steps.append(NextStep(step["id"], why, command or None,
                                  tuple(warnings) if command and "{serve}" in step.get("command", "") else (),
                                  title=title))
        verdict.next_steps = tuple(steps)
        if gaps:
            verdict.explain(f"Next steps for: {', '.join(sorted(gaps))}.")


def engine_of(env: dict) -> str | None:
    """The serving engine the inputs show, or None (a training job, a script)."""
    if env.get("engine"):
        return str(env["engine"])
    for engine in ("vllm", "sglang", "tensorrt_llm"):
        if env.get(engine):
            return engine
    return None


def _conditions_met(step: dict, engine: str | None, env: dict) -> bool:
    if step.get("engines") and (engine or "other") not in step["engines"]:
        return False
    least = step.get("vllm_at_least")
    if least:
        version = _version_tuple(env.get("vllm"))
        if version is None or version < _version_tuple(least):
            return False
    return True


def _version_tuple(text) -> tuple[int, ...] | None:
    match = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def _paths(paths) -> str:
    return " ".join(shlex.quote(p) for p in paths)


def _process_pattern(engine: str | None) -> str:
    return {"vllm": "'vllm|VllmWorker|EngineCore'", "sglang": "sglang"}.get(engine or "", "python")


def program_command(env: dict, evidence: Evidence) -> tuple[str, list[str]]:
    """The command that crashed, as far as the inputs show it: the engine's server
    command with the values the logs printed, a torchrun job of the world size seen, or
    the script a traceback's outermost <module> frame names; else a placeholder."""
    engine = engine_of(env)
    if engine in ("vllm", "sglang"):
        return serve_command(env)
    script = _script_of(evidence)
    warnings: list[str] = []
    shown = "<your command>"
    if script is not None:
        shown, warn = inert.shell_value(script, "path", "<script.py>")
        if warn:
            warnings.append(warn)
    world = env.get("world_size")
    if any(p.role == "launcher" for p in evidence.processes.processes()) and isinstance(world, int):
        return f"torchrun --nproc-per-node {world} {shown if script else '<script.py>'}", warnings
    return (f"python {shown}" if script else shown), warnings


def _script_of(evidence: Evidence) -> str | None:
    """The file of a traceback's outermost frame when it is the program's <module>."""
    for event in evidence.of_kind(Kind.EXCEPTION, Kind.CUDA_ERROR, Kind.OOM):
        for exc in event.chain:
            if exc.frames and exc.frames[0].function == "<module>" and exc.frames[0].file.endswith(".py"):
                return exc.frames[0].file
    return None


def serve_command(env: dict) -> tuple[str, list[str]]:
    """The server command with the values the logs printed, each shell-quoted, or a
    placeholder when a value does not look like one."""
    warnings: list[str] = []
    engine = engine_of(env)
    model, warn = inert.shell_value(env["model"], "model", "<model>") if env.get("model") else ("<model>", None)
    if warn:
        warnings.append(warn)
    if engine == "sglang":
        parts = [f"python -m sglang.launch_server --model-path {model}"]
        flag = "--tp-size"
    else:
        parts = [f"vllm serve {model}"]
        flag = "--tensor-parallel-size"
    for key, option in (("tensor_parallel_size", flag), ("max_num_batched_tokens", "--max-num-batched-tokens")):
        if env.get(key) is not None and not (engine == "sglang" and key == "max_num_batched_tokens"):
            value, warn = inert.shell_value(env[key], "int", f"<{key}>")
            if warn:
                warnings.append(warn)
            parts.append(f"{option} {value}")
    return " ".join(parts), warnings


class Signature(Rule):
    """Builds a crash signature stable across reruns of the same bug (no pids,
    addresses, times, paths, JIT hashes), versioned as forensics.sig/2.  Parts, each
    recording whether it contributed and why: the fault class (from the origin's fault
    when the kernel is known, so a rerun under compute-sanitizer - 719 instead of 700 -
    keeps its signature; else the error name or the failure kind); the origin kernel
    normalised (template arguments, parameters, offsets and hashes dropped) or, when the
    origin is unknown, the surface site as file-basename:function@API with error-check
    and library frames skipped; and the engine phase.  A kernel named only by an
    ordinary log line never feeds it."""

    name = "signature"
    reads = ("origin", "error", "surfaces", "environment", "failure_kind")
    writes = ("signature", "signature_parts", "signature_site")

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        parts: list[SignaturePart] = []
        origin, error, kind = verdict.origin, verdict.error, verdict.failure_kind
        kernel_known = origin is not None and names.is_named(origin.kernel)
        # the fault classed one way whatever evidence the run had: the origin's fault
        # under a tool, the error a host call reported without one (700 and 719 are both
        # an illegal address)
        if kernel_known:
            parts.append(SignaturePart("fault", fault_class(origin.fault), True, f"class of the origin's fault ({origin.fault})"))
        elif error is not None:
            parts.append(SignaturePart("fault", fault_class(f"{error.name} {error.error.message}"), True,
                                       f"class of the error reported ({error.name}; origin unknown)"))
        elif kind is not None:
            parts.append(SignaturePart("fault", kind.value, True, "the failure kind (no CUDA error)"))
        else:
            parts.append(SignaturePart("fault", None, False, "no failure found"))
        if kernel_known:
            parts.append(SignaturePart("origin", names.normalise(origin.kernel), True, "the kernel that faulted, normalised"))
        else:
            parts.append(SignaturePart("origin", None, False, "origin unknown"))
            site = _surface_site(verdict.surfaces)
            parts.append(SignaturePart("surface", site, site is not None,
                                       "where it surfaced, since the origin is unknown" if site else
                                       "no surface site outside error-check helpers and libraries"))
        phase = verdict.environment.get("phase")
        parts.append(SignaturePart("phase", phase, bool(phase), "engine phase at the failure" if phase else "phase unknown"))
        verdict.signature_parts = tuple(parts)
        used = [f"{p.part}={p.value}" for p in parts if p.contributed]
        if kind is None and error is None and not kernel_known:
            verdict.explain("No failure, no signature.")
            return
        verdict.signature = f"{SIGNATURE_VERSION}:{hashlib.sha1('|'.join(used).encode()).hexdigest()[:12]}"
        verdict.explain(f"Signature {verdict.signature} from {', '.join(used)}.")
        site = _surface_site(verdict.surfaces)
        if site is not None:
            # where it surfaced, whether or not this run also named the kernel: a rerun
            # without a tool has only this, so compare joins runs that share it
            key = f"fault={parts[0].value}|surface={site}"
            verdict.signature_site = f"{SIGNATURE_VERSION}:site:{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def fault_class(text: str) -> str:
    for entry in knowledge.load("signature")["fault_class"]:
        if re.search(entry["pattern"], text or ""):
            return entry["class"]
    return "other-fault"


def _surface_site(surfaces) -> str | None:
    skip = [re.compile(p) for p in knowledge.load("signature")["surface"]["skip_files"]]
    for s in surfaces:
        if s.file and not any(p.search(s.file) for p in skip):
            return f"{s.file.rsplit('/', 1)[-1]}:{s.function}" + (f"@{s.api}" if s.api else "")
        if s.caller:
            # a surface in torch's own files: the program's line that called it, without
            # its line number (the same bug moves lines between versions)
            place, _, function = s.caller.partition(" in ")
            return f"{place.rsplit(':', 1)[0]}:{function}" + (f"@{s.api}" if s.api else "")
    return None



class Headline(Rule):
    """Writes the verdict's one-line headline (what failed, where, on which rank, how
    sure, and the known-issue workaround when one matches) and its one-paragraph
    summary (error, surface, origin or its absence, first failure, collateral)."""

    name = "headline"
    reads = ("error", "origin", "surfaces", "first_failure", "failure_kind", "ranks", "known_issues", "hang")
    writes = ("headline", "summary")

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        verdict.headline = headline(verdict)
        verdict.summary = summary(verdict)


def _what(verdict) -> str:
    error, kind = verdict.error, verdict.failure_kind
    if error is not None:
        return f"{error.name} ({error.code})" if error.code is not None else error.name
    if kind == FailureKind.OOM:
        what = verdict.first_failure.what if verdict.first_failure is not None else ""
        return "Out of memory" + what[len("out of memory"):] if what.startswith("out of memory:") else \
            "CUDA out of memory"
    if kind == FailureKind.RELAY_ONLY and verdict.first_failure is not None:
        return verdict.first_failure.what           # who died, as the relays say it
    if kind in (FailureKind.HANG, FailureKind.NCCL_TIMEOUT):
        return "a collective hang" if kind == FailureKind.HANG else "an NCCL collective timeout"
    if verdict.first_failure is not None:
        return verdict.first_failure.what
    return kind.value if kind is not None else "no failure"


def headline(verdict) -> str:
    if verdict.failure_kind is None and verdict.error is None:
        return "No failure found in the inputs."
    origin, first = verdict.origin, verdict.first_failure
    what = _what(verdict)
    if verdict.error is None and origin is not None and first is not None and what == first.what:
        # with no error reported the first failure's text is the origin's ("fault in
        # kernel"): say the fault here and the kernel once, in the origin part below
        what = origin.fault
    parts = [what]
    if verdict.hang is not None and first is not None:
        # a hang has no surface: say who did not join, or that the logs cannot tell
        parts.append(f"- {first.what}" if first.rank is not None else "- the late rank is unknown")
        line = " ".join(parts)
        if verdict.known_issues:
            line += f"; {verdict.known_issues[0].likelihood} known issue {verdict.known_issues[0].id}"
        return line
    if origin is not None and origin.kernel:
        at = f" at {origin.location}" if origin.location else ""
        parts.append(f"in {origin.kernel}{at} on {who(origin.rank, origin.pid, origin.name, brief=True)} "
                     f"({origin.confidence} confidence)")
    elif verdict.failure_kind == FailureKind.RELAY_ONLY:
        parts.append("- its own failure is not in these inputs")
    elif first is not None and (first.rank is not None or first.pid is not None):
        parts.append(f"on {who(first.rank, first.pid, first.name, brief=True)}")
        if origin is not None:
            parts.append("(kernel unknown)" if origin.fault in what else f"({origin.fault}; kernel unknown)")
        elif verdict.error is not None and verdict.error.error.sticky:
            parts.append("(faulting kernel unknown)")
    elif first is not None:
        parts.append("- first failing rank unknown")
    if verdict.surfaces:
        s = _surface_of_first(verdict)
        where = _site(s) if s.file else None
        if where:
            parts.append(f"- surfaced at {where}" + (f" ({s.api})" if s.api else "")
                         + (f", called from {s.caller}" if s.caller else ""))
    line = " ".join(parts)
    if verdict.known_issues:
        k = verdict.known_issues[0]
        line += f"; {k.likelihood} known issue {k.id}: {k.workaround}"
    return line


def _site(s) -> str:
    """'file.py:12 function', leaving out what the surface does not know (a native error
    line gives a file and line but no function)."""
    place = s.file.rsplit("/", 1)[-1] + (f":{s.line}" if s.line is not None else "")
    return f"{place} {s.function}" if s.function else place


def _surface_of_first(verdict):
    """The surface of the rank that failed first, else the earliest surface."""
    first = verdict.first_failure
    if first is not None:
        for s in verdict.surfaces:
            if (first.pid is not None and s.pid == first.pid) or (first.pid is None and first.rank is not None
                                                                   and s.rank == first.rank):
                return s
    return verdict.surfaces[0]


def summary(verdict) -> str:
    bits = []
    error, origin, kind = verdict.error, verdict.origin, verdict.failure_kind
    if kind == FailureKind.STARTUP:
        bits.append("the server failed while starting")
    if error is not None:
        # a library status (cuBLAS ...) has no CUDA error code
        bits.append((f"{error.name} ({error.code})" if error.code is not None else error.name)
                    + ("" if error.error.sticky or not error.error.meaning else f": {error.error.meaning}"))
        if error.cause_of:
            bits.append(f"it surfaced as {error.cause_of}")
    elif kind is not None and (kind != FailureKind.STARTUP or verdict.first_failure is not None):
        # a start-up failure: what failed (_what gives the first failure's text); a fault
        # the origin names: the fault, its kernel said once below
        what = _what(verdict)
        first = verdict.first_failure
        bits.append(origin.fault if origin is not None and first is not None and what == first.what else what)
    if verdict.surfaces:
        s = verdict.surfaces[0]
        where = _site(s) if s.file else "a host call"
        bits.append(f"surfaced on {who(s.rank, s.pid, s.name, brief=True)} at {s.api + ' at ' if s.api else ''}{where}")
    if origin is not None and origin.kernel:
        bits.append(f"faulting kernel {origin.kernel} on {who(origin.rank, origin.pid, origin.name, brief=True)} ({origin.confidence} confidence)")
    elif origin is not None:
        fault = "" if any(origin.fault in b for b in bits) else f" ({origin.fault})"
        bits.append(f"{who(origin.rank, origin.pid, origin.name, brief=True)} ran the faulting kernel{fault} but no evidence names it")
    elif error is not None and error.error.sticky:
        bits.append("the faulting kernel is unknown: the reporting call is only where the sticky error surfaced")
    first = verdict.first_failure
    if kind == FailureKind.RELAY_ONLY:
        bits.append("only relays of the failure are in the inputs: the failing process's own error is not")
    elif first is not None and (first.rank is not None or first.pid is not None):
        # a process without a rank (a single process, a server's own process) by its pid
        bits.append(f"first failure: {who(first.rank, first.pid, first.name, brief=True)}")
    elif first is not None:
        bits.append("the first failing rank cannot be told from these inputs")
    collateral = sorted({v.rank for v in verdict.ranks if v.status == Status.COLLATERAL and v.rank is not None})
    if collateral:
        bits.append(f"collateral ranks: {rank_list(collateral)}")
    if not bits:
        return "No failure found in the inputs."
    return "; ".join(bits) + "."
