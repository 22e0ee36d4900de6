"""Origin attribution: which kernel on which rank actually faulted.

Evidence by strength: a GPU core dump, a compute-sanitizer report or a cuda-gdb stop
name the kernel (strong); an Xid with pid= names the faulting process but not the
kernel (medium); a kernel named only by the logs of that process (the configured
all-reduce kernel, a "launching X" line) is circumstantial (low).  Without any device
evidence the origin stays unknown: never a guess.
"""

from __future__ import annotations

import functools
import re

from forensics import knowledge
from forensics.events import Event, Kind
from forensics.rules.base import Context, Origin, Rule

STRONG_KINDS = (Kind.CORE_DUMP, Kind.SANITIZER, Kind.CUDA_GDB)


@functools.lru_cache(maxsize=None)
def xid_catalogue() -> dict[int, dict]:
    return {entry["code"]: entry for entry in knowledge.load("xid")["xid"]}


_KERNEL_HINTS = (
    re.compile(r"\bkernel=(?P<kernel>[A-Za-z_]\w+)"),
    re.compile(r"^launching (?P<kernel>[A-Za-z_]\w+)"),
)


class DeviceOrigin(Rule):
    """Fills the origin from device evidence.  Kernel-naming evidence (core dump,
    sanitizer, cuda-gdb) is joined to a rank by its pid; when it carries none (one
    sanitizer log for the whole process tree), by an Xid line's pid, else by the only
    rank that reported a CUDA error.  An Xid alone gives the rank with medium confidence
    and the kernel only from the logs of that process (low); conflicting evidence lowers
    the confidence and is said."""

    name = "device-origin"

    def apply(self, ctx: Context) -> None:
        strong = [e for e in ctx.events if e.kind in STRONG_KINDS and e.attrs.get("kernel")]
        xids = [e for e in ctx.of_kind(Kind.XID) if _app_fault_xid(e) and e.pid is not None]
        if not strong and not xids:
            ctx.explain(self, "No device evidence (sanitizer report, core dump, cuda-gdb stop or "
                              "Xid with a pid) is in the inputs, so the faulting kernel is unknown.")
            return
        if strong:
            ctx.origin = self._from_kernel_evidence(ctx, strong, xids)
        else:
            ctx.origin = self._from_xid(ctx, xids)
        if ctx.origin:
            o = ctx.origin
            ctx.explain(self, f"Origin: {o.kernel} on rank {o.rank} (pid {o.pid}), {o.fault}; "
                              f"confidence {o.confidence} ({'; '.join(o.notes) or 'direct evidence'}).")

    def _from_kernel_evidence(self, ctx: Context, strong: list[Event], xids: list[Event]) -> Origin:
        first = strong[0]
        kernels = {e.attrs["kernel"] for e in strong}
        notes = []
        pid, rank = first.pid, first.rank
        confidence = "high"
        if pid is None:
            pids_with_pid = {e.pid for e in strong if e.pid is not None}
            if len(pids_with_pid) == 1:
                pid = pids_with_pid.pop()
            elif xids:
                pid = xids[0].pid
                notes.append(f"rank joined by the Xid line's pid ({xids[0].where})")
                confidence = "medium" if len({x.pid for x in xids}) > 1 else "high"
            else:
                reporters = {s.pid for s in ctx.surfaces if s.pid is not None}
                if len(reporters) == 1:
                    pid = reporters.pop()
                    notes.append("rank joined as the only process that reported a CUDA error")
                    confidence = "medium"
                else:
                    notes.append("the device evidence carries no pid and nothing joins it to a rank")
                    confidence = "medium"
            rank = ctx.processes.rank_of(pid)
        if len(kernels) > 1:
            notes.append(f"device evidence names several kernels: {', '.join(sorted(kernels))}")
            confidence = "medium"
        if xids and pid is not None and xids[0].pid != pid:
            notes.append(f"an Xid names pid {xids[0].pid}, not {pid}")
            confidence = "low"
        evidence = [_evidence(e) for e in strong[:10]] + [_evidence(x) for x in xids[:3]]
        return Origin(rank=rank, pid=pid, kernel=first.attrs["kernel"],
                      fault=first.attrs.get("fault") or first.message,
                      address=first.attrs.get("address"), evidence=evidence,
                      confidence=confidence, notes=notes)

    def _from_xid(self, ctx: Context, xids: list[Event]) -> Origin | None:
        xid = xids[0]
        pids = {x.pid for x in xids}
        kernel, hint = _kernel_named_in_logs(ctx, xid.pid)
        notes = ["no sanitizer report, core dump or cuda-gdb stop names the kernel"]
        if hint is None:
            notes.append("the kernel is not named anywhere; run the next steps to get it")
            kernel = "unknown"
        else:
            notes.append(f"kernel taken from the process's own log ({hint.where}), circumstantial")
        if len(pids) > 1:
            notes.append(f"Xid lines name several pids ({', '.join(map(str, sorted(pids)))})")
        entry = xid_catalogue().get(_int(xid.attrs.get("xid")), {})
        fault = f"Xid {xid.attrs.get('xid')} {entry.get('name', '')}".strip()
        address, access = _xid_address(xid.attrs.get("body", ""))
        if access:
            fault += f", {access}"
        evidence = [_evidence(x) for x in xids[:3]] + ([_evidence(hint)] if hint else [])
        return Origin(rank=ctx.processes.rank_of(xid.pid), pid=xid.pid, kernel=kernel, fault=fault,
                      address=address, evidence=evidence,
                      confidence="low" if hint else "low", notes=notes)


def _app_fault_xid(event: Event) -> bool:
    return bool(xid_catalogue().get(_int(event.attrs.get("xid")), {}).get("app_fault"))


def _kernel_named_in_logs(ctx: Context, pid: int | None) -> tuple[str | None, Event | None]:
    """The last kernel a process's own log names before its first error."""
    found: tuple[str | None, Event | None] = (None, None)
    for event in ctx.events:
        if event.pid != pid:
            continue
        if event.kind in (Kind.CUDA_ERROR, Kind.WORKER_EXCEPTION):
            break
        for pattern in _KERNEL_HINTS:
            match = pattern.search(event.message)
            if match:
                found = (match.group("kernel"), event)
    return found


_XID_ADDR = re.compile(r"faulted @ 0x(?P<hi>[0-9a-fA-F]+)_(?P<lo>[0-9a-fA-F]+)")
_XID_ACCESS = re.compile(r"ACCESS_TYPE_(?P<access>\w+)")


def _xid_address(body: str) -> tuple[str | None, str | None]:
    match = _XID_ADDR.search(body)
    address = f"0x{int(match['hi'], 16) << 32 | int(match['lo'], 16):x}" if match else None
    access = _XID_ACCESS.search(body)
    return address, (access["access"].replace("VIRT_", "").lower() + " access") if access else None


def _evidence(event: Event) -> dict:
    return {"kind": event.kind, "source": event.where, "text": event.message[:300]}


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
