"""What kind of event a message or a traceback is: the message catalogue and the CUDA
error forms applied in one place, so that a line and a traceback saying the same thing
become the same kind of event.

Relays keep their kind even when they quote a CUDA error ("Worker failed with error
'CUDA error: ...'" is the engine noticing a worker's failure, not its own); the quoted
error rides along as an attribute.
"""

from __future__ import annotations

import re

from forensics import knowledge
from forensics.events import RELAY, Kind, PyException, Severity
from forensics.parsers.text import messages, raised

# Cheap test before the CUDA error forms run on a line.
_CUDA_HINT = re.compile(r"CUDA|cuda|CUBLAS|CUDNN|NCCL|nccl|Cuda|illegal memory|device-side assert|"
                        r"misaligned address|launch failure|out of memory|Xid")


# relay kinds that a process uses for its *own* error too: when the chain carries a
# CUDA error, it is that process's error ("Error in model execution", an NCCL error
# wrapping "unhandled cuda error", the scheduler's "hit an exception")
_OWN_WRAPPERS = {Kind.NCCL, Kind.WORKER_EXCEPTION, Kind.ENGINE_FATAL}


def error_attrs(found: knowledge.ErrorMatch) -> dict:
    """The typed attributes an event carries for a CUDA error it reports."""
    return {"cuda_error": found.error, "error_form": found.form, "error_api": found.api,
            "error_file": found.file, "error_line": found.line}


def cuda_error(text: str) -> knowledge.ErrorMatch | None:
    if not _CUDA_HINT.search(text):
        return None
    return knowledge.find_cuda_error(text)


def message_kind(message: str, level: str | None):
    """(kind, severity, attrs, traffic template or None) for one message, or None when
    the catalogue and the error forms say nothing about it."""
    found = messages.classify(message)
    err = cuda_error(message)
    if found is not None:
        entry = found.entry
        if entry.traffic:
            return None, None, found.fields, entry.id
        kind = Kind(entry.kind)
        attrs = {**found.fields, "message_id": entry.id}
        phase = messages.entry_phase(entry.id)
        if phase:
            attrs["phase_marker"] = phase
        if err is not None:
            attrs.update(error_attrs(err))
            if kind in (Kind.NCCL, Kind.LOG, Kind.EXCEPTION):
                kind = _error_kind(err)         # the CUDA error the line quotes says more
        severity = Severity.from_level(entry.severity or level)
        return kind, severity, attrs, None
    if err is not None:
        return _error_kind(err), Severity.ERROR, error_attrs(err), None
    return None


def _error_kind(err: knowledge.ErrorMatch) -> Kind:
    return Kind.OOM if err.error.name == "CUDA_ERROR_OUT_OF_MEMORY" else Kind.CUDA_ERROR


def traceback_event(chain: tuple[PyException, ...], nlines: int, make):
    """One event for an exception chain: a relay when its final exception relays another
    process's failure; a CUDA error (or out of memory) when an exception of the chain
    carries one; else an exception of the process's own."""
    final = chain[-1]
    known = next((e for e in reversed(chain) if e.type), None)
    if final.cut and not final.type and known is not None:
        # the chain's last traceback is cut before its exception line: what it raised in
        # turn is not shown, the exception that caused it is (a TimeoutError that killed a
        # busy loop)
        first = known.message.splitlines()[0] if known.message else ""
        headline = (f"{known.type}: {first}" if first else known.type) + \
            " (the traceback of what it then raised is cut off)"
        final = known
    elif final.cut and not final.type:
        where = ""
        if final.frames:
            where = f" in {final.frames[-1].function or final.frames[-1].file}"
        headline = f"traceback cut off after {len(final.frames)} frame(s){where}: the exception line is missing"
    else:
        first = final.message.splitlines()[0] if final.message else ""
        headline = f"{final.type}: {first}" if first else final.type
    attrs = {"chain": chain, "exception_type": final.type, "exception_message": final.message,
             "lines": nlines, "unraisable": any(e.unraisable_in for e in chain),
             "unraisable_in": next((e.unraisable_in for e in chain if e.unraisable_in), None),
             "header_missing": chain[0].header_missing, "cut": chain[-1].cut}
    carrier, err = None, None
    for exc in reversed(chain):
        err = cuda_error(f"{exc.type}: {exc.message}")
        if err is not None:
            carrier = exc
            break
    thrown = raised.find(final.message)        # c10's "Exception raised from F at file:line"
    if thrown is not None:
        attrs.update(thrown.attrs())
    if err is not None:
        attrs.update(error_attrs(err))
        attrs["error_exception"] = f"{carrier.type}: {carrier.message.splitlines()[0] if carrier.message else ''}"
    short_type = final.type.rsplit(".", 1)[-1].split("(")[0]
    found = messages.classify(headline) if final.type else None
    kind: Kind
    own_cause = err is not None and carrier is not final and carrier.chained_by != "remote"
    relays = knowledge.relay_exceptions()
    if short_type in relays and own_cause:
        # "Task finished unexpectedly" raised from this process's own CUDA error (the
        # chain is in-process): the relay type only wraps the process's own failure
        kind = _error_kind(err)
    elif short_type in relays:
        kind = Kind(relays[short_type])
    elif found is not None and Kind(found.entry.kind) in RELAY and not (Kind(found.entry.kind) in _OWN_WRAPPERS and err):
        kind = Kind(found.entry.kind)
        attrs.update({k: v for k, v in found.fields.items() if k not in attrs})
        attrs["message_id"] = found.entry.id
    elif err is not None:
        kind = _error_kind(err)
    elif short_type.endswith("OutOfMemoryError") or "out of memory" in final.message.lower() or \
            (found is not None and Kind(found.entry.kind) == Kind.OOM):
        kind = Kind.OOM             # the catalogue's out-of-memory messages (KV cache too small at start-up)
        if found is not None:
            attrs["message_id"] = found.entry.id
    else:
        kind = Kind.EXCEPTION
    severity = Severity.WARNING if kind == Kind.SIGNAL_RECEIVED else Severity.ERROR
    return make(kind, headline, severity, attrs)
