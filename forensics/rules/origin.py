"""Origin attribution: which kernel on which rank actually faulted.

Evidence by strength: a GPU core dump, a compute-sanitizer report, a cuda-gdb stop or a
device-side assert name the kernel; an Xid line with a pid names the faulting process
but not its kernel.  Without device evidence the origin stays unknown: never a guess
(a kernel named by an ordinary log line - a configured backend, a launch message - is
not evidence that it faulted).
"""

from __future__ import annotations

from dataclasses import dataclass

from forensics import knowledge, names
from forensics.events import Event, Kind, clip
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.story import Seen
from forensics.verdict import Confidence, EvidenceRef, Origin, who

KERNELS_NAMED = 12      # kernels a note lists by name (the rest are counted)

_FAULT_REPORTS = ("access", "warp_assert", "uninit", "barrier", "race", "hazard")
_TOOL_ORDER = {"cuda-coredump": 0, "coredump-progress": 1, "compute-sanitizer": 2, "cuda-gdb": 3, "device-assert": 4}


@dataclass(frozen=True)
class KernelEvidence:
    """One piece of device evidence naming a kernel, whatever tool printed it."""

    tool: str
    kernel: str
    fault: str
    pid: int | None
    rank: int | None
    address: str | None
    where: str
    text: str
    location: str | None = None      # the kernel's source line the tool named ("file.cu:43")
    launch_site: str | None = None   # the host code that launched it, when the tool named it


class DeviceOrigin(Rule):
    """Fills the origin from device evidence.  Kernel-naming evidence (GPU core dump or
    the driver's core-dump progress lines, compute-sanitizer, cuda-gdb, a device-side
    assert) is joined to a rank by its pid; when it carries none (one sanitizer log for
    the whole process tree), by an Xid line's pid, else by the only rank that reported
    the error.  An Xid alone names the faulting process and the fault but not the
    kernel: the origin then has a rank and no kernel.  Tools that disagree on the kernel,
    or an Xid naming another pid, lower the confidence and are said."""

    name = "device-origin"
    reads = ("surfaces",)
    writes = ("origin",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        strong = kernel_evidence(evidence)
        xids = [e for e in evidence.of_kind(Kind.XID) if _app_fault_xid(e) and e.pid is not None]
        if not strong and not xids:
            verdict.explain("No device evidence (sanitizer report, core dump, cuda-gdb stop, device assert or Xid "
                            "with a pid) is in the inputs, so the faulting kernel is unknown.")
            return
        origin = self._from_kernel_evidence(evidence, verdict, strong, xids) if strong else self._from_xid(evidence, xids)
        verdict.origin = origin
        kernel = origin.kernel or "an unnamed kernel"
        verdict.explain(f"Origin: {kernel} on {who(origin.rank, origin.pid, origin.name)}, {origin.fault}; confidence "
                        f"{origin.confidence} ({'; '.join(origin.notes) or 'direct evidence'}).")

    def _from_kernel_evidence(self, evidence: Evidence, verdict: VerdictView, strong: list[KernelEvidence],
                              xids: list[Event]) -> Origin:
        table = evidence.processes
        multi_rank = sum(1 for p in table.processes() if p.role == "worker") > 1
        first = strong[0]
        kernels = {names.normalise(e.kernel) for e in strong}
        notes = []
        pid, rank = first.pid, first.rank
        confidence = Confidence.HIGH if first.tool != "device-assert" or rank is not None or not multi_rank \
            else Confidence.MEDIUM
        if pid is None and rank is None:
            with_pid = {e.pid for e in strong if e.pid is not None}
            with_rank = {e.rank for e in strong if e.rank is not None}
            reporters = {(s.pid, s.rank) for s in verdict.surfaces if s.pid is not None or s.rank is not None}
            if len(with_pid) == 1:
                pid = with_pid.pop()
            elif len(with_rank) == 1:
                rank = with_rank.pop()
            elif xids:
                pid = xids[0].pid
                notes.append(f"rank joined by the Xid line's pid ({xids[0].where})")
                if multi_rank and len({x.pid for x in xids}) > 1:
                    confidence = Confidence.MEDIUM
            elif multi_rank and len(reporters) == 1:
                pid, rank = reporters.pop()
                notes.append("rank joined as the only process that reported the error")
                confidence = Confidence.MEDIUM
            elif multi_rank:
                notes.append("the device evidence carries no pid and nothing joins it to a rank")
                confidence = Confidence.MEDIUM
        if rank is None and pid is not None:
            rank = table.rank_of(pid)
        if pid is None and rank is not None:
            pid = table.pid_of_rank(rank)
        if len(kernels) > 1:
            # a long memcheck run names thousands: the first few, then how many more
            named = sorted(kernels)
            more = f" and {len(named) - KERNELS_NAMED:,} more" if len(named) > KERNELS_NAMED else ""
            notes.append(f"device evidence names {len(named):,} kernels: {', '.join(named[:KERNELS_NAMED])}{more}")
            confidence = Confidence.MEDIUM
        tools = sorted({e.tool for e in strong})
        if len(tools) > 1 and len(kernels) == 1:
            notes.append(f"{' and '.join(tools)} agree on the kernel")
        if multi_rank and xids and pid is not None and all(x.pid != pid for x in xids):
            notes.append(f"an Xid names pid {xids[0].pid}, not {pid}")
            confidence = Confidence.LOW
        refs = tuple(EvidenceRef(e.tool, e.where, clip(e.text, 300)) for e in strong[:10])
        refs = _unique(refs + tuple(_ref(x) for x in xids[:3]))
        # a process with neither pid nor rank (a paste's main process) is named by its story
        name = None if pid is not None or rank is not None else next(
            (s.name for s in evidence.stories.stories if any(o.event.where == first.where
                                                             for o in s.all(Seen.DEVICE_FAULT))), None)
        return Origin(rank=rank, pid=pid, kernel=first.kernel, fault=first.fault,
                      address=next((e.address for e in strong if e.address), None),
                      evidence=refs, confidence=confidence, notes=tuple(notes), name=name,
                      location=next((e.location for e in strong if e.location and names.normalise(e.kernel)
                                     == names.normalise(first.kernel)), None),
                      launch_site=next((e.launch_site for e in strong if e.launch_site), None))

    def _from_xid(self, evidence: Evidence, xids: list[Event]) -> Origin:
        xid = xids[0]
        pids = {x.pid for x in xids}
        notes = ["no sanitizer report, core dump, cuda-gdb stop or device assert names the kernel"]
        if len(pids) > 1:
            notes.append(f"Xid lines name several pids ({', '.join(map(str, sorted(pids)))})")
        entry = knowledge.xid_catalogue().get(xid.attrs.get("xid"), {})
        fault = f"Xid {xid.attrs.get('xid')} {entry.get('name', '')}".strip()
        if xid.attrs.get("access"):
            fault += f", {str(xid.attrs['access']).lower()} access"
        return Origin(rank=evidence.processes.rank_of(xid.pid) if xid.rank is None else xid.rank, pid=xid.pid,
                      kernel=None, fault=fault, address=xid.attrs.get("address"),
                      evidence=_unique(tuple(_ref(x) for x in xids[:3])), confidence=Confidence.MEDIUM,
                      notes=tuple(notes))


def _unique(refs: tuple[EvidenceRef, ...]) -> tuple[EvidenceRef, ...]:
    """The same line seen twice (dmesg and dmesg -T, a console and a rank's log) is one
    piece of evidence."""
    seen, out = set(), []
    for ref in refs:
        if ref.text not in seen:
            seen.add(ref.text)
            out.append(ref)
    return tuple(out)


def kernel_evidence(evidence: Evidence) -> list[KernelEvidence]:
    """Every piece of evidence that names a faulting kernel, strongest tools first.
    Race reports name a kernel too but are not faults: they count only when nothing
    faulted."""
    out: list[KernelEvidence] = []
    for event in evidence.of_kind(Kind.CORE_DUMP, Kind.SANITIZER, Kind.CUDA_GDB):
        kernel = event.attrs.get("kernel")
        if not names.is_named(kernel):
            continue
        if event.kind == Kind.SANITIZER and event.attrs.get("report") not in _FAULT_REPORTS:
            continue
        fault = event.attrs.get("fault") or event.message
        if event.attrs.get("address_note"):
            fault = f"{fault}: address {event.attrs['address_note']}"
        out.append(KernelEvidence(tool=_tool(event), kernel=kernel, fault=fault, pid=event.pid, rank=event.rank,
                                  address=event.attrs.get("address"), where=event.where, text=event.message,
                                  location=event.attrs.get("kernel_source") or None,
                                  launch_site=event.attrs.get("launch_site") or None))
    out.extend(_coredump_progress(evidence))
    for event in evidence.of_kind(Kind.DEVICE_ASSERT):
        kernel = names.from_device_assert(event.attrs.get("function"), event.attrs.get("file"), event.attrs.get("line"))
        file, line = event.attrs.get("file"), event.attrs.get("line")
        out.append(KernelEvidence(tool="device-assert", kernel=kernel,
                                  fault=f"device-side assert `{event.attrs.get('condition', '')}`",
                                  pid=event.pid, rank=event.rank, address=None, where=event.where, text=event.message,
                                  location=f"{file}:{line}" if file and line else None))
    faults = [e for e in out if "race" not in e.fault.lower() and "hazard" not in e.fault.lower()]
    return sorted(faults or out, key=lambda e: _TOOL_ORDER.get(e.tool, 5))


def _tool(event: Event) -> str:
    return {Kind.CORE_DUMP: "cuda-coredump", Kind.SANITIZER: "compute-sanitizer", Kind.CUDA_GDB: "cuda-gdb"}[event.kind]


def _coredump_progress(evidence: Evidence) -> list[KernelEvidence]:
    """The driver's "coredump:" progress lines: exception type and the faulting warp's
    stack; the outermost frame is the kernel."""
    out = []
    by_stream: dict = {}
    for event in evidence.of_kind(Kind.CORE_DUMP):
        mid = event.attrs.get("message_id")
        key = (event.source, event.pid)
        if mid == "coredump-exception":
            by_stream[key] = {"exception": event, "frames": []}
        elif mid == "coredump-frame" and key in by_stream:
            by_stream[key]["frames"].append(event)
    for (_, pid), found in by_stream.items():
        frames = sorted(found["frames"], key=lambda e: e.attrs.get("frame", 0))
        if not frames:
            continue
        exc = found["exception"]
        fault = exception_text(exc.attrs.get("exception", ""))
        out.append(KernelEvidence(tool="coredump-progress", kernel=names.plain(frames[-1].attrs["function"]),
                                  fault=fault, pid=pid, rank=exc.rank, address=None, where=exc.where,
                                  text=f"{exc.message} / {frames[-1].message}"))
    return out


def exception_text(cudbg_name: str) -> str:
    """CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS -> Warp Illegal Address (cuda-gdb's words)."""
    words = cudbg_name.replace("CUDBG_EXCEPTION_", "").split("_")
    return " ".join(w.capitalize() for w in words if w)


def _app_fault_xid(event: Event) -> bool:
    return bool(knowledge.xid_catalogue().get(event.attrs.get("xid"), {}).get("app_fault"))


def _ref(event: Event) -> EvidenceRef:
    return EvidenceRef(event.kind.value, event.where, clip(event.message, 300))
