"""Rules about the reported error and where it surfaced."""

from __future__ import annotations

import dataclasses

from forensics import knowledge
from forensics.events import RELAY, Event, Frame, Kind, Severity
from forensics.rules.base import Evidence, Rule, VerdictView
from forensics.story import Seen
from forensics.verdict import ErrorInfo, Surface, who

# An error form that names no code: a torch "CUDA out of memory" is an allocator
# failure, reported as such (failure kind oom), not as a CUDA error code.
_NO_CODE_FORMS = {"torch-oom"}


def reported(event: Event) -> knowledge.CudaError | None:
    err = event.attrs.get("cuda_error")
    if err is None or event.attrs.get("error_form") in _NO_CODE_FORMS:
        return None
    return err


def tool_reported_errors(evidence: Evidence) -> list[Event]:
    """CUDA errors a debugging tool saw a host API call return (compute-sanitizer's
    API-error reports), for inputs that hold nothing from the program itself."""
    seen = [e for e in evidence.of_kind(Kind.SANITIZER) if e.attrs.get("api") and reported(e) is not None
            and not e.attrs.get("earlier_run")]
    # the sticky ones first; an error that does not stick (NCCL's 209 while it starts)
    # only when nothing else is reported
    return [e for e in seen if e.severity >= Severity.ERROR] or \
        [e for e in seen if e.severity >= Severity.WARNING]


class ReportedError(Rule):
    """Finds the error the crash is about: the earliest error a process reported itself
    (a traceback, a native error line, the NCCL watchdog's CUDA error), preferring a
    sticky CUDA error, and a plain run's report over one printed under a debugging tool
    (compute-sanitizer reports 719 where the plain run reports 700).  A cuBLAS, cuDNN or
    NCCL status is a symptom: when a device assert or a CUDA error is also reported, that
    is the error and the status is where it surfaced.  A relay that quotes an error ("Worker
    failed with error 'CUDA error: ...'") is used only when nothing better exists."""

    name = "reported-error"
    writes = ("error",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        tools = evidence.tool_sources
        own = [e for e in evidence.of_kind(Kind.CUDA_ERROR, Kind.OOM, Kind.FATAL_SIGNAL, Kind.NCCL, Kind.COLLECTIVE_TIMEOUT)
               if reported(e) is not None and not e.attrs.get("earlier_run")]
        relayed = [e for e in evidence.events if e.kind in RELAY and reported(e) is not None]
        if not own and not relayed:
            # only a tool saw it: compute-sanitizer's "Program hit <error> ... on CUDA API
            # call to <api>" is the program's own call failing, seen from outside
            own = tool_reported_errors(evidence)
        if not own and not relayed and self._from_device(evidence, verdict):
            return
        if not own and not relayed:
            asserts = evidence.of_kind(Kind.DEVICE_ASSERT)
            verdict.explain("No CUDA error is reported anywhere in the inputs"
                            + (" (device-side assert lines are, but no host call reported the error)." if asserts else "."))
            return
        pool = own or relayed

        def rank(e: Event):
            err = reported(e)
            return (e.source in tools, err.family != "cuda", not err.sticky)

        event = min(pool, key=rank)        # stable: the earliest among the best
        err = reported(event)
        cause_of = None
        if err.family != "cuda":
            cause = self._cause(evidence, pool, event)
            if cause is not None:
                cause_of, err = err.name, cause
        else:
            # the CUDA error won the ranking; a library status (cuBLAS ...) the same process
            # also reported is how that error surfaced in the library call
            status = next((e for e in pool if reported(e).family != "cuda" and _same_process(e, event)), None)
            if status is not None:
                cause_of = reported(status).name
        verdict.error = ErrorInfo(err, event.where, relayed_only=not own, cause_of=cause_of)
        stickiness = ("sticky: every later CUDA call in that process fails with it, so the call that "
                      "reports it is not where it happened") if err.sticky else "not sticky"
        how = "reported directly" if own else "known only from a relayed message"
        extra = f" ({cause_of} is where it surfaced)" if cause_of else ""
        verdict.explain(f"{err.name} ({err.code}, \"{err.message}\") is {how} at {event.where}{extra}; "
                        f"it is {stickiness}.")

    @staticmethod
    def _from_device(evidence: Evidence, verdict: VerdictView) -> bool:
        """No host call's error is in the inputs, but device evidence is: the error is the
        one the host sees after it, the device's report its detail - a cuda-gdb stop or a
        GPU core dump's exception (Warp Illegal Address -> CUDA_ERROR_ILLEGAL_ADDRESS), a
        device-side assert (CUDA_ERROR_ASSERT), an Xid naming a process (an MMU fault ->
        700, Xid 13's "Misaligned Address" -> 716)."""
        found = []
        for event in evidence.of_kind(Kind.CUDA_GDB, Kind.CORE_DUMP):
            found.append((event, knowledge.host_error_of(event.attrs.get("fault")), event.attrs.get("fault")))
        for event in evidence.of_kind(Kind.DEVICE_ASSERT):
            found.append((event, knowledge.lookup_error("CUDA_ERROR_ASSERT"), "device-side assert"))
        for event in evidence.of_kind(Kind.XID):
            if event.pid is not None:
                found.append((event, knowledge.xid_host_error(event.attrs),
                              event.attrs.get("fault") or f"Xid {event.attrs.get('xid')}"))
        for event, err, detail in found:
            if err is not None and not event.attrs.get("earlier_run"):
                verdict.error = ErrorInfo(err, event.where, from_device=detail)
                verdict.explain(f"No host call's error is in the inputs; the device's report "
                                f"({detail}) at {event.where} is what the host sees as {err.name} ({err.code}).")
                return True
        return False

    @staticmethod
    def _cause(evidence: Evidence, pool: list[Event], status_event: Event) -> knowledge.CudaError | None:
        """The CUDA error behind a library status, when a process reported one.  (A
        device assert seen only as assert lines stays the origin; the error is what
        the host call reported.)"""
        real = [reported(e) for e in pool if reported(e) is not None and reported(e).family == "cuda"]
        return real[0] if real else None


def _same_process(a: Event, b: Event) -> bool:
    """Whether two reports can be one process's: the same pid, else the same rank; a
    report that signs neither (raw stderr, a paste of one process) may be anyone's."""
    if a.pid is not None and b.pid is not None:
        return a.pid == b.pid
    if a.rank is not None and b.rank is not None:
        return a.rank == b.rank
    return True


class SurfacePoints(Rule):
    """For every process that reported its own failure, marks where it surfaced: the
    host API that returned it (from the surface-API catalogue, matched on the frames'
    source lines, or named by the error line) and the innermost relevant frame -
    skipping error-check helpers (checkCudaErrors ...), torch's and triton's own files
    and the standard library.  A native error line gives its file:line; c10's
    "Exception raised from <function> at <file>:<line>" does when no Python frame
    exists.  One entry per process: its first report; the same report seen in another
    file (a per-rank log) is listed as corroboration.  A surface in a CUDA graph replay
    is marked."""

    name = "surface-points"
    reads = ("error",)
    writes = ("surfaces",)

    def action(self, evidence: Evidence, verdict: VerdictView) -> None:
        error = verdict.error
        kinds = (Kind.CUDA_ERROR, Kind.OOM) if error is not None else (Kind.CUDA_ERROR, Kind.OOM, Kind.EXCEPTION,
                                                                        Kind.FATAL_SIGNAL, Kind.COLLECTIVE_TIMEOUT,
                                                                        Kind.NCCL)
        per_process: dict = {}
        # what the stories read as a relay (an API server's traceback, a launcher's) is no
        # place where the error surfaced; an NCCL line is one only when it is the
        # process's own error (its communicator failed), not a peer's failure seen from it
        stories = evidence.stories
        observations = [o for s in stories.stories for o in s.observations] + list(stories.unattributed)
        relayed = {id(o.event) for o in observations if o.seen == Seen.RELAY}
        own = {id(o.event) for o in observations if o.seen == Seen.OWN_ERROR}
        # an exception a process raised after it noticed another's failure (an engine core
        # whose worker was killed): a consequence, no place where a failure surfaced
        after_noticing = {id(o.event) for s in stories.stories if s.noticed_before_failing is not None
                          for o in s.observations}
        for event in evidence.of_kind(*kinds):
            if event.attrs.get("earlier_run") or id(event) in relayed:
                continue
            if event.kind == Kind.NCCL and id(event) not in own:
                continue
            if event.kind == Kind.FATAL_SIGNAL and not event.attrs.get("crash_frame") and not event.attrs.get("raised_file"):
                continue
            if event.kind == Kind.COLLECTIVE_TIMEOUT and not event.chain:
                continue                 # a hang: where a waiting rank noticed it (its traceback)
            if event.kind in (Kind.EXCEPTION, Kind.FATAL_SIGNAL) and event.role in ("api-server", "launcher") \
                    and id(event) not in own:
                continue                 # a server's or a launcher's traceback: its child's failure, relayed
            if event.kind in (Kind.EXCEPTION, Kind.FATAL_SIGNAL) and id(event) in after_noticing:
                continue
            surface = surface_of(event)
            if surface.file is None and surface.api is None and event.kind != Kind.CUDA_ERROR:
                continue
            if event.attrs.get("cut") and not _error_before_the_cut(event) and not _cut_shows_the_call(event, surface):
                continue                 # a traceback cut before its exception: where it raised is not shown
            if event.pid is None and event.rank is None:
                info = evidence.processes.info_of(event)     # a paste's main process, by its name
                if info is not None and info.name:
                    surface = dataclasses.replace(surface, name=info.name)
                elif info is None:
                    # no process signed it: named by the input it is in, not "an unidentified process"
                    surface = dataclasses.replace(surface, name=f"the process writing {event.source.rsplit('/', 1)[-1]}")
            # one process: its pid, else its rank, else (a paste of one process) the input
            key = event.pid if event.pid is not None else (
                ("rank", event.rank) if event.rank is not None else ("input", event.source))
            per_process.setdefault(key, []).append(surface)
        per_process = {key: _best(reports) for key, reports in per_process.items()}
        _lend_places(per_process)
        signed = [s for key, s in per_process.items() if not (isinstance(key, tuple) and key[0] == "input")]
        if signed:
            # an unsigned report that names no place adds nothing beside the processes' own
            per_process = {key: s for key, s in per_process.items()
                           if not (isinstance(key, tuple) and key[0] == "input" and s.file is None)}
        if not per_process and error is not None:
            # the error is known only from compute-sanitizer's API-error report: the frame
            # that made the failing call is where it surfaced
            for event in tool_reported_errors(evidence)[:1]:
                caller = event.attrs.get("api_caller")
                if caller is not None:
                    err = reported(event)
                    per_process[("input", event.source)] = Surface(
                        rank=event.rank, pid=event.pid, api=event.attrs.get("api"), file=caller.file,
                        line=caller.line, function=caller.function, time=event.time, source=event.where,
                        exception=event.message[:200], error_code=err.code if err else None,
                        error_name=err.name if err else None, how="seen by compute-sanitizer (the API call failed)",
                        site_kind="python" if caller.file else "native")
        surfaces = sorted(per_process.values(), key=lambda s: (s.time is None, s.time or 0, s.rank is None, s.rank or 0, s.source))
        # a surface that is only a file-less relay of the same process is dropped when a better one exists
        verdict.surfaces = tuple(surfaces)
        for s in surfaces:
            site = f"{s.file}:{s.line} in {s.function}" if s.file else "no source location"
            api = f" via {s.api}" if s.api else ""
            verdict.explain(f"On {who(s.rank, s.pid)} the failure surfaced{api} at {site} ({s.how}); evidence "
                            f"{s.source}.")
        if not surfaces and error is not None:
            verdict.explain("The error is only known from relayed messages; no process's own report of it was found.")


def _error_before_the_cut(event: Event) -> bool:
    """Whether an exception came out whole before the chain was cut - the one carrying
    the CUDA error, else any: a later exception raised while handling it (a stream context
    exiting, a busy loop dying of it) is what the cut took, not where it surfaced."""
    chain = event.chain
    if event.attrs.get("cuda_error") is None:
        return len(chain) > 1 and not chain[-1].type and any(exc.type for exc in chain[:-1])
    carrier = next((i for i, exc in enumerate(chain)
                    if exc.type and knowledge.find_cuda_error(f"{exc.type}: {exc.message}")), None)
    return carrier is not None and carrier < len(chain) - 1


def _cut_shows_the_call(event: Event, surface: Surface) -> bool:
    """Whether a traceback cut before its exception line still shows where the error
    surfaced: its innermost frame calls a catalogued host API, or raises."""
    if surface.api is not None:
        return True
    frames = next((exc.frames for exc in reversed(event.chain) if exc.frames), ())
    return bool(frames) and (frames[-1].code or "").lstrip().startswith("raise")


def _lend_places(per_process: dict) -> None:
    """A paste where one process signed its failure (the NCCL watchdog's line) and its
    traceback came unsigned (raw stderr): when that is the only signed report without a
    place, the unsigned report with a place in the same input is its surface."""
    from dataclasses import replace
    unsigned = {key[1]: s for key, s in per_process.items() if isinstance(key, tuple) and key[0] == "input" and s.file}
    signed = [key for key, s in per_process.items() if not (isinstance(key, tuple) and key[0] == "input")]
    placeless = [key for key in signed if per_process[key].file is None or _tier(per_process[key]) >= 2]
    for key in placeless:
        source = per_process[key].source.rsplit(":", 1)[0]
        if source in unsigned and len(signed) == 1 and _tier(unsigned[source]) < _tier(per_process[key]):
            lent = unsigned.pop(source)
            per_process[key] = replace(lent, rank=per_process[key].rank, pid=per_process[key].pid,
                                       api=lent.api or per_process[key].api,
                                       how=lent.how + " (printed without the process's prefix)")
            per_process.pop(("input", source), None)


def _best(reports: list[Surface]) -> Surface:
    """A process's surface: its first report that names a place (a Python frame, or a
    native file:line), else its first report; the same place seen again in another
    input (a per-rank log) is kept as corroboration."""
    from dataclasses import replace
    best = min(reports, key=_tier)            # stable: the earliest of the best tier
    if best.api is None:
        # a native error line of the same process named the call ("... at function
        # cudaLaunchKernel(...)") that its Python traceback does not show
        named = next((s for s in reports if s.api and s.error_code == best.error_code), None)
        if named is not None:
            best = replace(best, api=named.api)
    for other in reports:
        if other is not best and (other.file, other.line) == (best.file, best.line) and \
                other.source.rsplit(":", 1)[0] != best.source.rsplit(":", 1)[0]:
            best = _also(best, other.source)
    return best


_TIERS = {"python": 0, "native": 1, "library": 2, "none": 3}


def _tier(surface: Surface) -> int:
    """How close a report is to the host call that returned the error: Python frames,
    then a native error line naming its file:line or API, then a library's own check
    site (NCCL's WARN), then a report with no place."""
    return _TIERS.get(surface.site_kind, 3) if surface.file is not None or surface.api is not None else 3


def _also(first: Surface, source: str) -> Surface:
    from dataclasses import replace
    return replace(first, also_seen_in=first.also_seen_in + (source,))


def surface_of(event: Event) -> Surface:
    chain = event.chain
    frames: tuple[Frame, ...] = ()
    exception = event.message
    # a CUDA error: the first exception of the chain that carries it, where it surfaced
    # first (a later "Error in model execution" that re-raises it only quotes it);
    # anything else: the exception the process finally raised
    order = chain if event.attrs.get("cuda_error") is not None else tuple(reversed(chain))
    if any(exc.type for exc in chain):
        # a traceback cut before its exception line raised something unknown in turn: the
        # last exception shown whole is where the failure surfaced
        order = tuple(exc for exc in order if exc.type or not exc.cut)
    for exc in order:
        if event.attrs.get("cuda_error") is None or knowledge.find_cuda_error(f"{exc.type}: {exc.message}"):
            frames = exc.frames
            first = exc.message.splitlines()[0] if exc.message else ""
            exception = f"{exc.type}: {first}" if first else exc.type
            break
    if not frames and chain:
        frames = next((e.frames for e in reversed(chain) if e.frames), ())
    attrs = event.attrs
    if not frames and attrs.get("current_thread"):
        # a crash dump lists the innermost frame first
        frames = tuple(reversed(attrs["current_thread"].get("frames") or ()))
    api, site = pick_site(frames)
    file = site.file if site else None
    line = site.line if site else None
    function = site.function if site else None
    if site is None and attrs.get("crash_frame") is not None:
        crash = attrs["crash_frame"]
        file, line, function = crash.file, crash.line, crash.function
    site_kind = "python" if file is not None else "none"
    if file is None:
        if attrs.get("error_file"):
            file, line = attrs["error_file"], attrs.get("error_line")
            site_kind = "library" if attrs.get("error_form") == "nccl-warn" else "native"
        elif attrs.get("raised_file") and not _is_check_helper(attrs.get("raised_function")):
            file, line, function = attrs["raised_file"], attrs.get("raised_line"), attrs.get("raised_function")
            site_kind = "native"
    # the call the error message itself names beats the call read from the source line
    api = attrs.get("error_api") or api or knowledge.surface_api_of(attrs.get("call"))
    how = "logged"
    if chain:
        how = f"unraisable exception in {attrs.get('unraisable_in')}" if attrs.get("unraisable") else "raised"
        if attrs.get("header_missing"):
            how += " (traceback header not in the input)"
    elif attrs.get("error_form") == "nccl-watchdog":
        how = "noticed by the ProcessGroupNCCL watchdog thread (it queries the CUDA events of collectives)"
    elif attrs.get("crash"):
        how = "the process aborted (" + str(attrs.get("crash")) + ")"
    err = attrs.get("cuda_error")
    replay = any("replay" in (f.code or "") or (f.function or "").endswith("replay") for f in frames) or \
        any("cudaGraphLaunch" in text or "CUDAGraph::replay" in text for text in attrs.get("native_frames") or ())
    return Surface(rank=event.rank, pid=event.pid, api=api, file=file, line=line, function=function,
                   time=event.time, source=event.where, exception=exception,
                   error_code=err.code if err is not None else None, error_name=err.name if err is not None else None,
                   how=how, graph_replay=replay, caller=caller_of(frames, site),
                   site_kind=site_kind if file is not None or api is None else "native")


def _is_check_helper(function: str | None) -> bool:
    return bool(function) and any(p.search(function) for p in knowledge.error_check_frames())


def relevant(frame: Frame) -> bool:
    """Whether a frame can be the surface: any but an error-check helper's (checkCudaErrors
    only turns a code into an exception) and the interpreter's own (<frozen ...>)."""
    # Cython frames name functions module-qualified (cupy_backends...runtime.check_status)
    name = (frame.function or "").rsplit(".", 1)[-1]
    if name and any(p.search(name) for p in knowledge.error_check_frames()):
        return False
    return not frame.file.startswith("<")


def program_frame(frame: Frame) -> bool:
    """A frame of the program (or of a library it uses) rather than of torch, triton or the
    standard library: where a surface inside those was called from."""
    return relevant(frame) and not any(p.search(frame.file) for p in knowledge.library_internal_files())


def caller_of(frames: tuple[Frame, ...], site: Frame | None) -> str | None:
    """"file:line in function" of the innermost program frame, when the surface frame is not one."""
    if site is None or program_frame(site):
        return None
    caller = next((f for f in reversed(frames[:_position(frames, site)]) if program_frame(f)), None)
    if caller is None:
        return None
    return f"{caller.file.rsplit('/', 1)[-1]}:{caller.line} in {caller.function}"


def _position(frames: tuple[Frame, ...], frame: Frame) -> int:
    """Where this very frame is (a recursion repeats equal frames: index() finds the outermost)."""
    return next(i for i, f in enumerate(frames) if f is frame)


def pick_site(frames: tuple[Frame, ...]) -> tuple[str | None, Frame | None]:
    """(API, frame): the innermost relevant frame - the code that called the host API,
    even in torch's own files (torch/cuda/streams.py's synchronize); the API its code
    calls, if any, or that the library frames below it call, or the library call its
    caller made (``torch.cuda.synchronize()``)."""
    site = next((f for f in reversed(frames) if relevant(f)), None)
    if site is None:
        return None, (frames[-1] if frames else None)
    # a Cython frame has no source line; its qualified function names the binding
    api = knowledge.surface_api_of(site.code) or (knowledge.surface_api_of(site.function) if site.code is None
                                                  else None)
    if api is None:
        inner = frames[_position(frames, site) + 1:]
        api = next((knowledge.surface_api_of(f.code) for f in reversed(inner) if knowledge.surface_api_of(f.code)), None)
    if api is None and not program_frame(site):
        # torch's own frame calls torch._C; the library call is what its caller wrote
        outer = [f for f in frames[:_position(frames, site)] if program_frame(f)]
        api = knowledge.surface_api_of(outer[-1].code) if outer else None
    return api, site
