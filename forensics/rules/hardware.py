"""Hardware or software: does the evidence point at the GPU or at a program's kernel?"""

from __future__ import annotations

from forensics import knowledge
from forensics.events import Kind
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.verdict import HardwareOpinion

# environment facts (nvidia-smi -q, collected) that count a hardware fault when > 0 or "Yes"
_COUNTERS = ("ecc_volatile_dram_uncorrectable", "ecc_volatile_sram_uncorrectable",
             "ecc_aggregate_dram_uncorrectable", "ecc_aggregate_sram_uncorrectable",
             "remapped_rows_uncorrectable", "retired_pages_double_bit", "ecc_volatile_uncorrectable_total",
             "ecc_aggregate_uncorrectable_total")
_FLAGS = ("remapped_rows_pending", "remapping_failure", "retired_pages_pending")
_SETTLE_HW = ("run the same request on another GPU (CUDA_VISIBLE_DEVICES) or host: a hardware fault stays with the "
              "device, a software fault follows the kernel; `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`; "
              "`dcgmi diag -r 3`")
_SETTLE_SW = ("name the faulting kernel: rerun under compute-sanitizer, or with CUDA core dumps enabled; "
              "`forensics collect` on the host adds nvidia-smi's ECC and remapped-row counters")


class HardwareOrSoftware(Rule):
    """Weighs whether the failure points at the GPU (hardware) or at a program's
    kernel (software): Xid buckets from the catalogue (data/xid.toml: application,
    hardware, driver), ECC and remapped-row counters from nvidia-smi -q, and whether
    device evidence names a kernel (a fault that follows a kernel is software).  States
    its opinion, its basis and what would settle it; undecided when the inputs hold
    neither kind of evidence."""

    name = "hardware_or_software"
    reads = ("environment", "origin", "failure_kind")
    writes = ("hardware",)

    def predicate(self, evidence: Evidence, verdict: VerdictView) -> bool:
        return verdict.failure_kind is not None or bool(evidence.of_kind(Kind.XID)) or \
            any(key in verdict.environment for key in _COUNTERS)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        env = verdict.environment
        catalogue = knowledge.xid_catalogue()
        leans: dict[str, list[int]] = {}
        for event in evidence.of_kind(Kind.XID):
            code = event.attrs.get("xid")
            lean = catalogue.get(code, {}).get("lean", "unknown") if isinstance(code, int) else "unknown"
            leans.setdefault(lean, []).append(code)
        counters = {key: env[key] for key in _COUNTERS if _count(env.get(key)) > 0}
        flags = {key: env[key] for key in _FLAGS if str(env.get(key, "")).strip().lower() == "yes"}
        clean = [key for key in _COUNTERS if key in env and _count(env.get(key)) == 0]
        kernel = verdict.origin.kernel if verdict.origin is not None else None

        hardware, software = [], []
        if leans.get("hardware"):
            hardware.append(f"Xid {', '.join(map(str, sorted(set(leans['hardware']))))} (hardware in the Xid catalogue)")
        if counters:
            hardware.append("nvidia-smi counts " + ", ".join(f"{k.replace('_', ' ')} = {v}" for k, v in counters.items()))
        if flags:
            hardware.append("nvidia-smi reports " + ", ".join(k.replace("_", " ") for k in flags))
        if kernel:
            software.append(f"device evidence names the faulting kernel ({kernel})")
        if leans.get("application"):
            software.append(f"Xid {', '.join(map(str, sorted(set(leans['application']))))} "
                            "(an application fault in the Xid catalogue)")
        if clean and not counters and not flags:
            software.append("nvidia-smi shows no uncorrectable ECC error and no remapped row")

        if hardware and not software:
            opinion, settle = "hardware", _SETTLE_HW
        elif software and not hardware:
            opinion, settle = "software", _SETTLE_SW if not kernel else (
                "fix or work around the named kernel; if the fault persists on other GPUs it is not the device")
        elif hardware and software:
            opinion, settle = "undecided", _SETTLE_HW
        else:
            opinion, settle = "undecided", _SETTLE_SW
        neither = [f"Xid {', '.join(map(str, sorted(set(leans[lean]))))} ({lean} in the Xid catalogue: it says nothing "
                   "of the cause)" for lean in ("collateral", "driver", "unknown") if leans.get(lean)]
        basis = "; ".join(hardware + software + ([] if hardware or software else neither)) or \
            "no Xid, no ECC or remapped-row counters and no device evidence in the inputs"
        verdict.hardware = HardwareOpinion(opinion, basis, settle)
        verdict.explain(f"Hardware or software: {opinion} ({basis}).")


def _count(value) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return 0
