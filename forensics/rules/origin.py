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
from dataclasses import dataclass

from forensics import knowledge
from forensics.events import Event, Kind, as_int
from forensics.rules.base import Context, Origin, Rule

STRONG_KINDS = (Kind.CORE_DUMP, Kind.SANITIZER, Kind.CUDA_GDB)


@functools.lru_cache(maxsize=None)
def xid_catalogue() -> dict[int, dict]:
    return {entry["code"]: entry for entry in knowledge.load("xid")["xid"]}


_KERNEL_HINTS = (
    re.compile(r"\bkernel=(?P<kernel>[A-Za-z_]\w+)"),
    re.compile(r"^launching (?P<kernel>[A-Za-z_]\w+)"),
)


@dataclass(frozen=True)
class Evidence:
    """One piece of device evidence naming a kernel, whatever tool printed it."""

    tool: str
    kernel: str
    fault: str
    pid: int | None
    rank: int | None
    address: str | None
    where: str
    text: str


class DeviceOrigin(Rule):
    """Fills the origin from device evidence.  Kernel-naming evidence (GPU core dump or
    the driver's core-dump progress lines, compute-sanitizer, cuda-gdb) is joined to a
    rank by its pid; when it carries none (one sanitizer log for the whole process tree),
    by an Xid line's pid, else by the only rank that reported a CUDA error.  An Xid alone
    gives the rank and the fault but names no kernel: the kernel is then taken only from
    that process's own log (circumstantial, low confidence).  Tools that disagree on the
    kernel, or an Xid naming another pid, lower the confidence and are said."""

    name = "device-origin"

    def apply(self, ctx: Context) -> None:
        strong = kernel_evidence(ctx)
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

    def _from_kernel_evidence(self, ctx: Context, strong: list[Evidence], xids: list[Event]) -> Origin:
        multi_rank = any(p.role == "worker" for p in ctx.processes.processes())
        first = strong[0]
        kernels = {normalise(e.kernel) for e in strong}
        notes = []
        pid, rank = first.pid, first.rank
        confidence = "high"
        if pid is None:
            with_pid = {e.pid for e in strong if e.pid is not None}
            if len(with_pid) == 1:
                pid = with_pid.pop()
            elif xids:
                pid = xids[0].pid
                notes.append(f"rank joined by the Xid line's pid ({xids[0].where})")
                if multi_rank and len({x.pid for x in xids}) > 1:
                    confidence = "medium"
            elif multi_rank:
                reporters = {s.pid for s in ctx.surfaces if s.pid is not None}
                if len(reporters) == 1:
                    pid = reporters.pop()
                    notes.append("rank joined as the only process that reported a CUDA error")
                    confidence = "medium"
                else:
                    notes.append("the device evidence carries no pid and nothing joins it to a rank")
                    confidence = "medium"
            rank = ctx.processes.rank_of(pid)
        elif rank is None:
            rank = ctx.processes.rank_of(pid)
        if len(kernels) > 1:
            notes.append(f"device evidence names several kernels: {', '.join(sorted(kernels))}")
            confidence = "medium"
        tools = sorted({e.tool for e in strong})
        if len(tools) > 1 and len(kernels) == 1:
            notes.append(f"{' and '.join(tools)} agree on the kernel")
        if multi_rank and xids and pid is not None and all(x.pid != pid for x in xids):
            notes.append(f"an Xid names pid {xids[0].pid}, not {pid}")
            confidence = "low"
        evidence = [{"kind": e.tool, "source": e.where, "text": e.text[:300]} for e in strong[:10]]
        evidence += [_evidence(x) for x in xids[:3]]
        return Origin(rank=rank, pid=pid, kernel=first.kernel, fault=first.fault,
                      address=next((e.address for e in strong if e.address), None),
                      evidence=evidence, confidence=confidence, notes=notes)

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
        entry = xid_catalogue().get(as_int(xid.attrs.get("xid")), {})
        fault = f"Xid {xid.attrs.get('xid')} {entry.get('name', '')}".strip()
        address, access = _xid_address(xid.attrs.get("body", ""))
        if access:
            fault += f", {access}"
        evidence = [_evidence(x) for x in xids[:3]] + ([_evidence(hint)] if hint else [])
        return Origin(rank=ctx.processes.rank_of(xid.pid), pid=xid.pid, kernel=kernel, fault=fault,
                      address=address, evidence=evidence, confidence="low", notes=notes)


def kernel_evidence(ctx: Context) -> list[Evidence]:
    """Every piece of evidence that names a faulting kernel, strongest tools first.

    Race and leak reports name a kernel too but are not faults: they count only when
    nothing faulted."""
    out: list[Evidence] = []
    for event in ctx.events:
        kernel = event.attrs.get("kernel")
        if event.kind not in STRONG_KINDS or not kernel:
            continue
        if event.kind == Kind.SANITIZER and event.attrs.get("report") not in ("access", "warp_assert", "uninit", "barrier", "race", "hazard"):
            continue
        fault = event.attrs.get("fault") or event.message
        if event.attrs.get("address_note"):
            fault = f"{fault}: address {event.attrs['address_note']}"
        out.append(Evidence(tool=_tool(event), kernel=kernel, fault=fault,
                            pid=event.pid, rank=event.rank, address=event.attrs.get("address"),
                            where=event.where, text=event.message))
    out.extend(_coredump_progress(ctx))
    for event in ctx.of_kind(Kind.DEVICE_ASSERT):
        out.append(Evidence(tool="device-assert", kernel=_assert_kernel(event.attrs),
                            fault=f"device-side assert `{event.attrs.get('condition', '')}`",
                            pid=event.pid, rank=event.rank, address=None, where=event.where, text=event.message))
    faults = [e for e in out if "race" not in e.fault.lower() and "hazard" not in e.fault.lower()]
    order = {"cuda-coredump": 0, "coredump-progress": 1, "compute-sanitizer": 2, "cuda-gdb": 3, "device-assert": 4}
    return sorted(faults or out, key=lambda e: order.get(e.tool, 4))


def _assert_kernel(attrs) -> str:
    """'void validate_ids(const int *, int)' -> validate_ids; a lambda's 'operator()' is
    named by its file instead (PyTorch's IndexKernel.cu:92)."""
    function = str(attrs.get("function", "")).split("(")[0].split()[-1:] or ["?"]
    name = function[0]
    if name in ("operator", "operator()", "lambda", "?"):
        return f"{attrs.get('file', '?').rsplit('/', 1)[-1]}:{attrs.get('line', '?')}"
    return name


def _tool(event: Event) -> str:
    return {Kind.CORE_DUMP: "cuda-coredump", Kind.SANITIZER: "compute-sanitizer",
            Kind.CUDA_GDB: "cuda-gdb"}[event.kind]


def _coredump_progress(ctx: Context) -> list[Evidence]:
    """The driver's "coredump:" progress lines: exception type and the faulting warp's
    stack; the outermost frame is the kernel."""
    out = []
    by_pid: dict = {}
    for event in ctx.of_kind(Kind.CORE_DUMP):
        mid = event.attrs.get("message_id")
        if mid == "coredump-exception":
            by_pid[event.pid] = {"exception": event, "frames": []}
        elif mid == "coredump-frame" and event.pid in by_pid:
            by_pid[event.pid]["frames"].append(event)
    for pid, found in by_pid.items():
        frames = sorted(found["frames"], key=lambda e: int(e.attrs.get("frame", 0)))
        if not frames:
            continue
        exc = found["exception"]
        fault = exception_text(exc.attrs.get("exception", ""))
        out.append(Evidence(tool="coredump-progress", kernel=frames[-1].attrs["function"].strip(),
                            fault=fault, pid=pid, rank=exc.rank, address=None, where=exc.where,
                            text=f"{exc.message} / {frames[-1].message}"))
    return out


def exception_text(cudbg_name: str) -> str:
    """CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS -> Warp Illegal Address (cuda-gdb's words)."""
    words = cudbg_name.replace("CUDBG_EXCEPTION_", "").split("_")
    return " ".join(w.capitalize() for w in words if w)


def normalise(kernel: str) -> str:
    return kernel.split("(")[0].split("<")[0].strip()


def _app_fault_xid(event: Event) -> bool:
    return bool(xid_catalogue().get(as_int(event.attrs.get("xid")), {}).get("app_fault"))


def _kernel_named_in_logs(ctx: Context, pid: int | None) -> tuple[str | None, Event | None]:
    """The last kernel a process's own log names before its first error."""
    found: tuple[str | None, Event | None] = (None, None)
    single_process = not any(p.role == "worker" for p in ctx.processes.processes())
    for event in ctx.events:
        # A single-process console has no pids on its lines: they are that process's.
        if event.pid != pid and not (single_process and event.pid is None):
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

