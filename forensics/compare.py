"""Several runs side by side (``forensics compare RUN...``): restarts of one server, or
before/after an upgrade.  Groups runs by crash signature, says which environment fields
differ, and how often each signature reproduced; renders to the terminal, Markdown or
JSON.  Markdown is redacted by default, by the same redactor as analyze's reports
(forensics/redact.py), over the comparison's document: what it shows is what was redacted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TextIO

from forensics import names
from forensics.rules.advice import SIGNATURE_VERSION as SIGNATURE_PREFIX
from forensics.case import Case, analyze
from forensics.inert import md_code, md_text, plain
from forensics.inputs.sources import display_name

# Environment fields worth comparing between runs (what changes between an upgrade's
# before and after); run-specific values such as pids or token counts are left out.
COMPARED = ("vllm", "flashinfer", "torch", "cuda", "driver", "model", "dtype", "quantization", "tensor_parallel_size",
            "pipeline_parallel_size", "data_parallel_size", "max_num_batched_tokens", "max_model_len",
            "attention_backend", "allreduce_backend", "flashinfer_allreduce_backend", "disable_custom_all_reduce",
            "enforce_eager", "kv_cache_dtype", "gpu", "prompt_tokens", "phase")


@dataclass
class Run:
    name: str
    case: Case

    @property
    def signature(self) -> str | None:
        return self.case.verdict.signature

    @property
    def parts(self) -> str:
        used = [str(p.value) for p in self.case.verdict.signature_parts if p.contributed]
        return " | ".join(used) if used else "no failure"

    @property
    def short(self) -> str:
        return short_name(self.name)


def _software(run: Run) -> bool:
    """Whether a run's own verdict puts its fault on the software (a kernel named, an
    application-class Xid)."""
    hardware = run.case.verdict.hardware
    return run.case.verdict.origin is not None or (hardware is not None and hardware.opinion == "software")


def short_name(name: str) -> str:
    """A run's last path component, as shown (forensics.inert.name)."""
    return display_name(name.rstrip("/").rsplit("/", 1)[-1])


@dataclass
class Comparison:
    runs: list[Run]

    def groups(self) -> list[tuple[str | None, list[Run]]]:
        """Runs of one bug together, biggest group first (ties: order of appearance): runs
        that share a signature, or its surface-site key (a run under compute-sanitizer
        named the kernel, a rerun without it only the call that surfaced it - the same
        fault class at the same site joins them).  A group is named by the signature of
        its first run that named a kernel, else its first run's."""
        parent = list(range(len(self.runs)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        first_by_key: dict = {}
        for i, run in enumerate(self.runs):
            keys = [("sig", run.signature)] + ([("site", run.case.verdict.signature_site)]
                                               if run.signature and run.case.verdict.signature_site else [])
            for key in keys:
                if key in first_by_key:
                    parent[root(i)] = root(first_by_key[key])
                else:
                    first_by_key[key] = i
        members: dict[int, list[Run]] = {}
        for i, run in enumerate(self.runs):
            members.setdefault(root(i), []).append(run)
        named = []
        for runs in members.values():
            with_kernel = next((r for r in runs if r.case.verdict.origin is not None
                                and names.is_named(r.case.verdict.origin.kernel)), runs[0])
            named.append((with_kernel.signature, runs))
        return sorted(named, key=lambda item: -len(item[1]))

    def differing_environment(self) -> dict[str, list]:
        out = {}
        for key in COMPARED:
            values = [run.case.verdict.environment.get(key) for run in self.runs]
            if len({repr(v) for v in values}) > 1:
                out[key] = values
        return out

    def devices(self, run: Run) -> set[str]:
        """The GPUs that faulted in a run: the Xid lines' PCI address (with the host when
        the line names one), else the collected GPU serial."""
        from forensics.events import Kind
        found = {f"{e.host + ' ' if e.host else ''}{e.attrs['pci']}" for e in run.case.events
                 if e.kind == Kind.XID and e.attrs.get("pci")}
        serial = run.case.verdict.environment.get("gpu_serial")
        return found or ({f"GPU serial {serial}"} if serial and run.signature else set())

    def hardware(self) -> list[str]:
        """Does the fault follow a device or a kernel?  The same GPU in failing runs of
        different bugs points at the device - unless every run's fault is the software's
        own (a kernel a tool named, an application-class Xid, each run's verdict saying
        software), and never when every run used that one device: then the device cannot
        be told from the workload.  One bug on several GPUs points at the software."""
        failing = [r for r in self.runs if r.signature]
        lines = []
        by_device: dict[str, list[Run]] = {}
        for run in failing:
            for device in self.devices(run):
                by_device.setdefault(device, []).append(run)
        group_of = {id(r): n for n, (_, runs) in enumerate(self.groups()) for r in runs}
        for device, runs in sorted(by_device.items()):
            if len(runs) < 2:
                continue
            bugs = {group_of[id(r)] for r in runs}
            seen = f"{device} faulted in {len(runs)} runs ({', '.join(r.short for r in runs)})"
            if len(bugs) == 1:
                lines.append(seen + (" with the same bug, which every run's verdict puts on the software"
                                     if all(_software(r) for r in runs) else " with the same bug"))
            elif len(by_device) == 1:
                lines.append(seen + " with different bugs; every run used this one GPU, so the device cannot be "
                                    "told from the workload")
            elif all(_software(r) for r in runs):
                lines.append(seen + " with different bugs, each a fault of the software's own (a named kernel or an "
                                    "application-class Xid): no hardware suspicion")
            else:
                lines.append(seen + " with different bugs: the fault follows the device (hardware suspected; "
                                    "dcgmi diag -r 3, nvidia-smi -q -d ECC,ROW_REMAPPER)")
        for signature, runs in self.groups():
            devices = set().union(*(self.devices(r) for r in runs)) if signature else set()
            if signature and len(runs) >= 2 and len(devices) >= 2:
                lines.append(f"signature {signature} on {len(devices)} different GPUs: the fault follows the "
                             "kernel, not a device (software)")
        return lines

    def reproduction(self) -> list[str]:  # noqa: D102
        total = len(self.runs)
        lines = []
        for signature, runs in self.groups():
            if signature is None:
                lines.append(f"{len(runs)}/{total} runs show no failure")
                continue
            env = runs[0].case.verdict.environment
            phase, block = env.get("phase"), env.get("crash_prefill_block")
            where = f" in {phase}" + (f" (prefill block {block})" if block else "") if phase else ""
            lines.append(f"{len(runs)}/{total} runs crash with signature {signature} ({runs[0].parts}){where}")
        return lines

    def to_dict(self) -> dict:
        return {
            "schema": "forensics.compare/1",
            "runs": [{"name": r.name, "signature": r.signature, "parts": r.parts, "headline": r.case.verdict.headline}
                     for r in self.runs],
            "groups": [{"signature": s, "runs": [r.name for r in rs]} for s, rs in self.groups()],
            "environment_differences": self.differing_environment(),
            "reproduction": self.reproduction(),
            "hardware": self.hardware(),
        }


def compare(paths: list[str], kb_dirs: list[str] | None = None, outputs: tuple = ()) -> Comparison:
    """Each path analysed as one run; ``outputs``: files the caller will write, refused
    as inputs (forensics.case.analyze)."""
    return Comparison([Run(path, analyze(path, kb_dirs=kb_dirs, outputs=outputs)) for path in paths])


def document(result: Comparison, redact: bool = False) -> dict:
    """The comparison as a JSON-like document; redacted (forensics.redact, one redactor
    over all of it: the same host is the same stand-in in every run) when asked."""
    doc = result.to_dict()
    if not redact:
        return {**doc, "redaction": {"enabled": False, "counts": {}}}
    from forensics.redact import redact_document
    return redact_document(doc)


def render(result: Comparison, fmt: str, out: TextIO, redact: bool = False) -> None:
    """Write the comparison; ``redact`` for the formats made to be shared (the CLI turns it
    on for markdown by default).  Markdown and JSON are rendered from the document, so
    the redaction covers everything they show."""
    if fmt == "json":
        doc = document(result, redact)
        if not redact:
            doc.pop("redaction")
        out.write(json.dumps(doc, indent=2, default=str) + "\n")
    elif fmt == "markdown":
        out.write(_markdown(document(result, redact)))
    else:
        _terminal(result, out)


def _markdown(doc: dict) -> str:
    runs = doc["runs"]
    lines = ["### Runs compared\n", "| run | group | signature | fault, kernel or site, phase |", "|---|---|---|---|"]
    group_of = {name: n for n, group in enumerate(doc["groups"], 1) for name in group["runs"]}
    for run in runs:
        lines.append(f"| {md_code(short_name(run['name']), table=True)} | {group_of[run['name']]} | "
                     f"{md_code(run['signature'] or '-', table=True)} | {md_text(run['parts']).replace('|', '/')} |")
    lines += ["", *[f"- {md_text(line)}" for line in doc["reproduction"] + doc["hardware"]], ""]
    diffs = doc["environment_differences"]
    if diffs:
        lines += ["#### Environment that differs", "",
                  "| field | " + " | ".join(md_code(short_name(r["name"]), table=True) for r in runs) + " |",
                  "|---|" + "---|" * len(runs)]
        for key, values in diffs.items():
            lines.append(f"| {md_code(key, table=True)} | " + " | ".join(md_code(str(v), table=True) if v is not None else "-"
                                                                      for v in values) + " |")
    else:
        lines.append("No environment field differs between the runs.")
    redaction = doc.get("redaction", {})
    if redaction.get("enabled"):
        counts = ", ".join(f"{n} {kind}" for kind, n in redaction.get("counts", {}).items()) or "nothing found"
        lines += ["", f"_Redacted before sharing: {md_text(counts)}. Pseudonyms are consistent within this comparison._"]
    else:
        lines += ["", "_Redaction: off._"]
    return "\n".join(lines) + "\n"


def _terminal(result: Comparison, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    interactive = getattr(out, "isatty", lambda: False)()
    console = Console(file=out, width=None if interactive else 80, no_color=not interactive, highlight=False,
                      markup=False, emoji=False)
    table = Table(title="Runs", title_justify="left", box=None)
    table.add_column("run", overflow="fold")
    table.add_column("group", justify="right")
    table.add_column("signature", overflow="fold")
    table.add_column("fault | kernel or site | phase", overflow="fold")
    group_of = {run.name: n for n, (_, runs) in enumerate(result.groups(), 1) for run in runs}
    for run in result.runs:
        table.add_row(Text(plain(run.short)), str(group_of[run.name]),
                      Text((run.signature or "-").replace(f"{SIGNATURE_PREFIX}:", "")), Text(plain(run.parts)))
    console.print(table)
    for line in result.reproduction() + result.hardware():
        console.print(Text(plain(line)))
    diffs = result.differing_environment()
    if diffs:
        env = Table(title="Environment that differs", title_justify="left", box=None)
        env.add_column("field")
        for run in result.runs:
            env.add_column(Text(plain(run.short)), overflow="fold")
        for key, values in diffs.items():
            env.add_row(key, *[Text("-" if v is None else plain(str(v))) for v in values])
        console.print(env)
    else:
        console.print(Text("No environment field differs between the runs."))
