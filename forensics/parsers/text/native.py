"""Native crashes (grammars/native_crash.lark): a C++ exception that reached
``std::terminate`` (the ProcessGroupNCCL watchdog's way of taking a process down),
PyTorch's segfault banner, absl's failure signal handler.

The what() text is where the NCCL watchdog puts the CUDA error it saw: it is matched
against the CUDA error forms like any other error text.
"""

from __future__ import annotations

import re

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.events import Kind, Severity
from forensics.parsers.text.block import BlockResult, unparsable

# (?<!\S): searched over a whole message - a function is a whole word, tried once, not
# rescanned from each character of a long run
_RAISED_FROM = re.compile(r"(?<!\S)(?P<function>\S+) at (?P<file>[^\s:]+):(?P<line>\d+)")
START = re.compile(r"terminate called |!{3,} ?Segfault encountered|\*\*\* SIG[A-Z]+ received at time=")
_CONTINUES = re.compile(r"\s*what\(\):|\s*frame #\d+: |Exception raised from |PC: @|\s+@\s+0x|\[failure_signal_handler"
                        r"|CUDA kernel errors might|For debugging consider|Compile with `TORCH_USE|Search for `"
                        r"|Device-side assertions|\s*$")


@v_args(inline=True)
class _ToCrash(Transformer):
    def cxx_exception(self, terminate, *rest):
        what = next((r[1] for r in rest if isinstance(r, tuple) and r[0] == "what"), None)
        body = [r for r in rest if not (isinstance(r, tuple) and r[0] == "what")]
        return {"crash": "cxx-exception", "cxx_type": terminate, "what": what, **_body(body)}

    def segfault_banner(self, _banner, *rest):
        return {"crash": "segfault-banner", "signal_name": "SIGSEGV", **_body(rest)}

    def absl(self, head, *rest):
        return {"crash": "absl", **head, **_body(rest)}

    def terminate(self, *items):
        return str(items[0]) if items else None

    def what(self, text):
        return ("what", str(text).strip())

    def absl_head(self, signal, when, cpu):
        return {"signal_name": str(signal), "cpu": knowledge.claimed_int(cpu)}

    def native_frame(self, head, text):
        return ("frame", str(text).strip())

    def raised_from(self, text):
        return ("raised_from", str(text).strip())

    def text_line(self, text):
        return ("text", str(text))


def _body(items) -> dict:
    frames = [t for k, t in items if k == "frame"]
    raised = next((t for k, t in items if k == "raised_from"), None)
    text = [t for k, t in items if k == "text"]
    return {"native_frames": frames[:64], "native_frame_count": len(frames), "raised_from": raised,
            "message_lines": text[:20]}


class CrashBlock:
    format = "native-exception"

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.linenos: list[int] = []

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.lines and not _CONTINUES.match(text):
            return False
        self.lines.append(text)
        self.linenos.append(lineno)
        return True

    def close(self, make):
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        text = "".join(t.rstrip() + "\n" for _, t in pairs)
        try:
            crash = grammar.transforming("native_crash", _ToCrash()).parse(text)
        except (LarkError, ValueError, TypeError):
            return unparsable(self.linenos, self.lines, "a native crash report")
        events = [crash_event(crash, make)]
        timeout = _timeout_in_what(crash, make)
        if timeout is not None:
            events.insert(0, timeout)
        return BlockResult(events, [n for n, _ in pairs] + blank)


def start(text: str, header: tuple | None = None) -> CrashBlock | None:
    return CrashBlock() if START.match(text) else None


def _timeout_in_what(crash: dict, make):
    """The collective timeout a watchdog abort quotes in its what() line ("Watchdog
    caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)"): an event of
    its own, so that a log holding only the abort still shows the hang."""
    from forensics.parsers.text import classify       # the message catalogue's classifier
    what = crash.get("what") or ""
    decided = classify.message_kind(what, "ERROR") if what else None
    if decided is None or decided[0] != Kind.COLLECTIVE_TIMEOUT:
        return None
    kind, severity, attrs, _ = decided
    return make(kind, what, severity, {**attrs, "quoted_by": "terminate"})


def crash_event(crash: dict, make):
    what = crash.get("what") or ""
    full = "\n".join([what] + crash.get("message_lines", []))
    found = knowledge.find_cuda_error(full) if full.strip() else None
    attrs = dict(crash)
    raised = _RAISED_FROM.match(crash.get("raised_from") or "")
    if raised:
        attrs.update(raised_function=raised.group("function"), raised_file=raised.group("file"),
                     raised_line=knowledge.claimed_int(raised.group("line")))
    if crash["crash"] == "cxx-exception":
        attrs["signal_name"] = "SIGABRT"      # std::terminate aborts the process
        message = f"terminate called after throwing {crash.get('cxx_type') or 'an exception'}"
        if what:
            message += f": {what}"
    elif crash["crash"] == "absl":
        message = f"*** {crash.get('signal_name')} received (absl failure signal handler)"
    else:
        message = "Segfault encountered (PyTorch signal handler)"
    if found is not None:
        attrs.update(error_attrs(found))
        kind = Kind.OOM if found.error.name == "CUDA_ERROR_OUT_OF_MEMORY" else Kind.CUDA_ERROR
        return make(kind, message, Severity.CRITICAL, attrs)
    return make(Kind.FATAL_SIGNAL, message, Severity.CRITICAL, attrs)


def error_attrs(found: knowledge.ErrorMatch) -> dict:
    """The typed attributes an event carries for a CUDA error it reports."""
    return {"cuda_error": found.error, "error_form": found.form, "error_api": found.api,
            "error_file": found.file, "error_line": found.line}
