"""Rules about the reported error and where it surfaced."""

from __future__ import annotations

from forensics import knowledge
from forensics.events import Event, Frame, Kind, as_int
from forensics.rules.base import Context, Rule, Surface


class ReportedError(Rule):
    """Finds the CUDA error the crash is about: the earliest CUDA error reported by a
    process's own host call (a traceback or a custom-op error line); a relay such as the
    engine's "Worker failed with error '...'" is used only when nothing better exists.
    Looks the error up in the CUDA error catalogue to know whether it is sticky."""

    name = "reported-error"

    def apply(self, ctx: Context) -> None:
        # A run under compute-sanitizer or cuda-gdb reports another code (719 for 700):
        # the application's own plain run is preferred when both are there.
        direct = sorted((e for e in ctx.of_kind(Kind.CUDA_ERROR) if e.attrs.get("cuda_error")),
                        key=lambda e: e.source in ctx.tool_sources)
        relayed = [e for e in ctx.events if e.attrs.get("cuda_error") and e.kind != Kind.CUDA_ERROR]
        pool = direct or relayed
        if not pool:
            ctx.explain(self, "No CUDA error is reported anywhere in the inputs.")
            return
        sticky_first = sorted(pool, key=lambda e: not e.attrs["cuda_error"].sticky)
        event = sticky_first[0] if sticky_first[0].attrs["cuda_error"].sticky else pool[0]
        ctx.error = event.attrs["cuda_error"]
        ctx.error_event = event
        # out of memory is not a fault: nothing to look for in kernels
        ctx.failure_kind = "oom" if ctx.error.name == "CUDA_ERROR_OUT_OF_MEMORY" else "cuda-error"
        err = ctx.error
        stickiness = ("sticky: every later CUDA call in that process fails with it, so the "
                      "call that reports it is not where it happened") if err.sticky else "not sticky"
        how = "reported directly" if direct else "known only from a relayed message"
        ctx.explain(self, f"{err.name} ({err.code}, \"{err.message}\") is {how} at "
                          f"{event.where}; it is {stickiness}.")


class SurfacePoints(Rule):
    """For every process that reported a CUDA error, marks where it surfaced: the host
    API that returned it (from the surface-API catalogue, matched on the frames' source
    lines) and the innermost relevant frame, skipping error-check helpers such as
    checkCudaErrors and library internals. One entry per process: its first report;
    the same report seen in another file (a per-rank log) is listed as corroboration."""

    name = "surface-points"

    def apply(self, ctx: Context) -> None:
        per_pid: dict = {}
        for event in ctx.of_kind(Kind.CUDA_ERROR):
            surface = surface_of(event)
            key = event.pid if event.pid is not None else ("site", surface.file, surface.line)
            first = per_pid.get(key)
            if first is None:
                per_pid[key] = surface
            elif (first.file, first.line) == (surface.file, surface.line) and event.source != first.source.split(":")[0]:
                first.also_seen_in.append(surface.source)
        ctx.surfaces = sorted(per_pid.values(), key=lambda s: (s.time is None, s.time, s.source))
        for s in ctx.surfaces:
            if s.function is None and s.file and s.line:
                s.function = _function_from_tool_frames(ctx, s.file, s.line)
        for s in ctx.surfaces:
            who = f"rank {s.rank}" if s.rank is not None else "an unranked process"
            site = f"{s.file}:{s.line} in {s.function}" if s.file else "no Python frame"
            api = f" via {s.api}" if s.api else ""
            ctx.explain(self, f"On {who} (pid {s.pid}) the error surfaced{api} at {site} ({s.how}); "
                              f"evidence {s.source}.")
        if not ctx.surfaces and ctx.error is not None:
            ctx.explain(self, "The error is only known from relayed messages; no process's own "
                              "report of it was found.")


def surface_of(event: Event) -> Surface:
    chain = event.attrs.get("chain") or ()
    frames: tuple[Frame, ...] = ()
    exception = event.message
    for exc in reversed(chain):        # the exception that carries the CUDA error
        if knowledge.find_cuda_error(f"{exc.type}: {exc.message}"):
            frames = exc.frames
            exception = f"{exc.type}: {exc.message.splitlines()[0] if exc.message else ''}"
            break
    api, site = pick_site(frames)
    if not chain:
        # a native check line ("file.cu:24 ... cudaDeviceSynchronize()"): the call is the API
        call = event.attrs.get("call") or ""
        api = next((a.api for a in knowledge.surface_apis() if a.pattern.search(call)), None) or \
            (call.split("(")[0] or None)
    how = "logged"
    if chain:
        how = f"unraisable exception in {event.attrs.get('unraisable_in')}" if event.attrs.get("unraisable") else "raised"
    file = site.file if site else event.attrs.get("file")
    line = site.line if site else as_int(event.attrs.get("line"))
    return Surface(rank=event.rank, pid=event.pid, api=api, file=file, line=line,
                   function=site.function if site else event.attrs.get("function"), time=event.time,
                   source=event.where, exception=exception,
                   error=event.attrs.get("cuda_error"), how=how)


def _function_from_tool_frames(ctx: Context, file: str, line: int) -> str | None:
    """A native check line names file:line but not the function; a compute-sanitizer
    host frame at the same place does ("main in device_assert.cu:29")."""
    needle = f" in {file.rsplit('/', 1)[-1]}:{line}"
    for event in ctx.of_kind(Kind.SANITIZER):
        for frame in event.attrs.get("host_frames", ()):
            if needle in frame + " ":
                return frame.split(" in ")[0].strip() or None
    return None


def pick_site(frames: tuple[Frame, ...]) -> tuple[str | None, Frame | None]:
    """(API, frame): the innermost frame whose code calls a surface API, else the
    innermost frame that is not an error-check helper or library internal."""
    helpers = knowledge.error_check_frames()
    internals = knowledge.library_internal_files()

    def relevant(frame: Frame) -> bool:
        if frame.function and any(p.search(frame.function) for p in helpers):
            return False
        return not any(p.search(frame.file) for p in internals)

    for frame in reversed(frames):
        if not relevant(frame) or not frame.code:
            continue
        for api in knowledge.surface_apis():
            if api.pattern.search(frame.code):
                return api.api, frame
    for frame in reversed(frames):
        if relevant(frame):
            return None, frame
    return None, frames[-1] if frames else None

