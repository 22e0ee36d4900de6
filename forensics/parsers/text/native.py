"""Native crashes (grammars/native_crash.lark): a C++ exception that reached
``std::terminate`` (the ProcessGroupNCCL watchdog's way of taking a process down,
TensorRT-LLM's TllmException), PyTorch's segfault banner, absl's failure signal handler,
UCX's and Open MPI's signal handlers, and a fragment of PyTorch's native stack.

The what() text is where the NCCL watchdog puts the CUDA error it saw: it is matched
against the CUDA error forms like any other error text.

Frame lines of every form (c10's ``frame #N:``, TRT-LLM's numbered lines, glibc's
``backtrace_symbols()``, UCX's, PyTorch's ``File "<unknown>", line 0, in sym``) become
``native_stack``: ``Frame``s innermost first, the function as ``names`` shows a symbol
(no return type, no parameters; a mangled symbol read), the file the source file when
the line prints one, else the module, else ``<unknown>``; ``line`` None when unknown
(printed as 0).  From them:

- a signal crash's ``crash_frame`` is its innermost named frame - after the signal
  trampoline, which UCX's and Open MPI's handlers print first;
- a C++ exception's throw site is ``raised_*``: c10's ``Exception raised from F at
  file:line``, else the ``(file:line)`` a TllmException's text ends with and the
  innermost named frame that is no error-raising helper (the data's check frames).
"""

from __future__ import annotations

from lark import Token, Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge, names
from forensics.events import Frame, Kind, Severity
from forensics.parsers import terminals
from forensics.parsers.text import classify, raised
from forensics.parsers.text.block import BlockResult, unparsable

# the block's guards: terminals of grammars/native_crash.lark
_T = terminals.of("native_crash")
# signal handlers whose first frame is the signal trampoline (__restore_rt, shown as
# __sigaction or "libc.so.6(+0x...)"), not the code that faulted
_TRAMPOLINE_FIRST = {"ucx", "ompi"}
_UNKNOWN = "<unknown>"
_PLACEHOLDERS = frozenset({"", "?", "??", "???", "unknown", "<unknown>", "<unknown function>"})
_HEX = frozenset("0123456789abcdefABCDEF")


def _function(symbol) -> str | None:
    """A printed symbol as a frame's function (None for a placeholder or a bare address)."""
    text = str(symbol).strip() if symbol is not None else ""
    if text in _PLACEHOLDERS or (text[:2] == "0x" and len(text) > 2 and _HEX.issuperset(text[2:])):
        return None
    return names.from_symbol(text) if text.startswith("_Z") else (names.plain(text) or None)


def _number(token) -> int | None:
    value = knowledge.claimed_int(str(token)) if token is not None else None
    return value or None        # "line 0", ":0": not known


def _typed(items, *types) -> dict:
    return {t.type: t for t in items if isinstance(t, Token) and t.type in types}


@v_args(inline=True)
class _ToCrash(Transformer):
    def cxx_exception(self, terminate, *rest):
        what = next((r for r in rest if isinstance(r, dict) and "what" in r), None)
        body = [r for r in rest if not (isinstance(r, dict) and "what" in r)]
        out = {"crash": "cxx-exception", "cxx_type": terminate, **_body(body)}
        if what:
            out.update(what)
        return out

    def segfault_banner(self, _banner, *rest):
        return {"crash": "segfault-banner", "signal_name": "SIGSEGV", **_body(rest)}

    def absl(self, head, *rest):
        return {"crash": "absl", **head, **_body(rest)}

    def ucx(self, head, *rest):
        return {"crash": "ucx", **head, **_body(rest)}

    def ompi(self, head, *rest):
        return {"crash": "ompi", **head, **_body(rest)}

    def fragment(self, first, *rest):
        return {"crash": "native-stack-fragment", **_body((first,) + rest)}

    def terminate(self, *items):
        return str(items[0]) if items else None

    def what(self, *items):
        text = next((str(i).strip() for i in items if isinstance(i, Token)), None)
        site = next((i for i in items if isinstance(i, tuple)), None)
        if site is None:
            return {"what": text}
        # the text as printed (the CUDA error forms read their own file:line from it)
        return {"what": f"{text} ({site[0]}:{site[1]})", "what_site": site}

    def site(self, file, line):
        return (str(file), knowledge.claimed_int(str(line)))

    def absl_head(self, signal, when, cpu):
        return {"signal_name": str(signal), "cpu": knowledge.claimed_int(cpu)}

    def ucx_head(self, *items):
        where = next((i for i in items if isinstance(i, dict)), {})
        return {**where, **_signal(_typed(items, "SIGNAL_NUMBER", "SIGNAL_TEXT", "SIGNAL_DETAIL"))}

    def ucx_where(self, host, pid, _index, tid):
        return {"subject_pid": knowledge.claimed_int(str(pid)), "tid": knowledge.claimed_int(str(tid)),
                "machine": str(host)}

    def ompi_head(self, *items):
        return next((i for i in items if isinstance(i, dict)), {})

    def ompi_signal(self, text, number):
        return _signal({"SIGNAL_TEXT": text, "SIGNAL_NUMBER": number})

    # -- frames: ("frame", Frame, as printed) --------------------------------------------

    def native_frame(self, frame):
        return frame

    def c10_frame(self, _head, tail=None):
        return _frame(tail)

    def numbered_frame(self, _head, _address, tail=None):
        return _frame(tail)

    def ompi_frame(self, _head, tail=None):
        return _frame(tail)

    def bare_frame(self, tail):
        return _frame(tail)

    def py_frame(self, path, lineno, symbol):
        text = str(symbol).strip()
        function = _function(text) if str(path) == _UNKNOWN else text
        return ("frame", Frame(str(path), _number(lineno), function), text)

    def c10_tail(self, symbol, *rest):
        module = _typed(rest, "C10_MODULE").get("C10_MODULE")
        return (_function(symbol), str(module).strip() if module else None, None, str(symbol).strip())

    def modsym(self, module, *rest):
        t = _typed(rest, "MOD_SYMBOL", "SYMBOL_AFTER")
        symbol = t.get("SYMBOL_AFTER") or t.get("MOD_SYMBOL")
        shown = str(symbol).strip() if symbol else f"{module}"
        return (_function(symbol), str(module), None, shown)

    def symbol_offset(self, symbol, _offset):
        return (_function(symbol), None, None, str(symbol).strip())

    def symbol_source(self, symbol, *rest):
        t = _typed(rest, "SOURCE_FILE", "SOURCE_LINE")
        file = str(t["SOURCE_FILE"]) if "SOURCE_FILE" in t and str(t["SOURCE_FILE"]) != "???" else None
        return (_function(symbol), None, (file, _number(t.get("SOURCE_LINE"))) if file else None,
                str(symbol).strip())

    def module_only(self, module):
        return (None, str(module), None, str(module))

    def symbol_only(self, symbol):
        return (_function(symbol), None, None, str(symbol).strip())

    def raised_from(self, *tokens):
        return ("raised_from", raised.from_tokens(tokens))

    def ucx_backtrace(self, tid):
        return ("skip", None)

    def ompi_detail(self, text):
        return ("detail", str(text).strip())

    def end_line(self, _text):
        return ("skip", None)

    def text_line(self, text):
        return ("text", str(text))


def _frame(tail) -> tuple:
    """("frame", Frame, the symbol as printed) from a frame line's tail."""
    if tail is None:
        return ("frame", Frame(_UNKNOWN, None, None), "")
    function, module, source, shown = tail
    file, line = source if source else (module or _UNKNOWN, None)
    return ("frame", Frame(file, line, function), shown)


def _signal(tokens: dict) -> dict:
    number = knowledge.claimed_int(str(tokens["SIGNAL_NUMBER"])) if tokens.get("SIGNAL_NUMBER") else None
    out = {"signal_text": str(tokens["SIGNAL_TEXT"]).strip() if tokens.get("SIGNAL_TEXT") else None,
           "signal_number": number}
    if number is not None:
        out["signal_name"] = knowledge.signals().get(number)
    if "SIGNAL_DETAIL" in tokens:
        out["signal_detail"] = str(tokens["SIGNAL_DETAIL"]).strip() or None
    return out


def _body(items) -> dict:
    frames = [i for i in items if isinstance(i, tuple) and i[0] == "frame"]
    pairs = [i for i in items if isinstance(i, tuple) and len(i) == 2]
    raised_at = next((t for k, t in pairs if k == "raised_from"), None)
    text = [t for k, t in pairs if k == "text"]
    details = [t for k, t in pairs if k == "detail"]
    out = {"native_frames": [shown for _, _, shown in frames][:64], "native_frame_count": len(frames),
           "native_stack": tuple(frame for _, frame, _ in frames[:64]),
           "raised_from": raised_at.text if raised_at else None, "raised_at": raised_at,
           "message_lines": text[:20]}
    if details:
        out["signal_details"] = details
    return out


class CrashBlock:
    format = "native-exception"

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.linenos: list[int] = []

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.lines and not _continues(text):
            return False
        self.lines.append(text)
        self.linenos.append(lineno)
        return True

    def close(self, make):
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        crash, cut = _parse([t for _, t in pairs]), None
        if crash is None and len(pairs) > 1:
            # the last line cut mid-way (the end of a paste): the report before it is kept
            crash, cut = _parse([t for _, t in pairs[:-1]]), pairs[-1]
        if crash is None:
            return unparsable(self.linenos, self.lines, "a native crash report")
        events = [crash_event(crash, make)]
        timeout = _timeout_in_what(crash, make)
        if timeout is not None:
            events.insert(0, timeout)
        if cut is None:
            return BlockResult(events, [n for n, _ in pairs] + blank)
        return BlockResult(events, [n for n, _ in pairs[:-1]] + blank, [cut],
                           [f"line {cut[0]}: a native crash report cut mid-line; the report before the cut "
                            "line is used"])


def _parse(lines: list[str]) -> dict | None:
    try:
        return grammar.transforming("native_crash", _ToCrash()).parse("".join(t.rstrip() + "\n" for t in lines))
    except (LarkError, ValueError, TypeError):
        return None


def _continues(text: str) -> bool:
    """A line that goes on with a report: blank, one of the grammar's continuing shapes,
    or torch's advice after an exception's message (data/messages.toml ``native``)."""
    return not text.strip() or _T.NATIVE_CONTINUES.match(text) is not None \
        or text.startswith(knowledge.native_continuations())


def start(text: str, header: tuple | None = None) -> CrashBlock | None:
    return CrashBlock() if _T.NATIVE_START.match(text) else None


def _timeout_in_what(crash: dict, make):
    """The collective timeout a watchdog abort quotes in its what() line ("Watchdog
    caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)"): an event of
    its own, so that a log holding only the abort still shows the hang."""
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
    attrs.pop("what_site", None)
    raised_at = attrs.pop("raised_at", None)
    stack = crash.get("native_stack") or ()
    if raised_at is not None and raised_at.file is not None:
        attrs.update(raised_at.attrs())
    elif crash.get("what_site"):
        # a TllmException: its text names the throw site, its frames the code around it
        attrs["raised_file"], attrs["raised_line"] = crash["what_site"]
        thrower = innermost_named(stack)
        attrs["raised_function"] = thrower.function if thrower else None
    kind_of = crash["crash"]
    if kind_of in ("segfault-banner", "ucx", "ompi"):
        attrs["crash_frame"] = innermost_named(stack[1:] if kind_of in _TRAMPOLINE_FIRST else stack)
    signal = crash.get("signal_text") or crash.get("signal_name") or "a signal"
    if kind_of == "cxx-exception":
        attrs["signal_name"] = "SIGABRT"      # std::terminate aborts the process
        message = f"terminate called after throwing {crash.get('cxx_type') or 'an exception'}"
        if what:
            message += f": {what}"
    elif kind_of == "absl":
        message = f"*** {crash.get('signal_name')} received (absl failure signal handler)"
    elif kind_of == "ucx":
        message = f"Caught signal {crash.get('signal_number')} ({signal}) (UCX signal handler)"
    elif kind_of == "ompi":
        message = f"Process received signal {signal} (Open MPI signal handler)"
    elif kind_of == "native-stack-fragment":
        # frames of a native stack whose head (the handler's banner) is not in the input:
        # what they show - the process's own fatal end when a frame only runs while a
        # process goes down (std::terminate, abort: data/surface_apis.toml), else no
        # failure of its own
        top = innermost_named(stack)
        attrs["top_frame"] = top
        where = f"; innermost named frame {top.function}" if top else ""
        down = next((f for f in stack if f.function and any(p.search(f.function)
                                                              for p in knowledge.going_down_frames())), None)
        if down is None:
            return make(Kind.LOG, f"native stack fragment ({crash['native_frame_count']} frames, no banner above "
                        f"them){where}", Severity.INFO, attrs)
        attrs["signal_name"] = "SIGABRT"      # terminate and abort end in SIGABRT
        attrs["going_down_frame"] = down.function
        return make(Kind.FATAL_SIGNAL, f"the process was going down: its native stack shows {down.function} "
                    f"(the line above the stack, which says why, is not in the input)", Severity.CRITICAL, attrs)
    else:
        message = "Segfault encountered (PyTorch signal handler)"
    if attrs.get("crash_frame") is not None:
        message += f" in {attrs['crash_frame'].function}"
    if found is not None:
        attrs.update(classify.error_attrs(found))
        kind = Kind.OOM if found.error.name == "CUDA_ERROR_OUT_OF_MEMORY" else Kind.CUDA_ERROR
        return make(kind, message, Severity.CRITICAL, attrs)
    return make(Kind.FATAL_SIGNAL, message, Severity.CRITICAL, attrs)


def innermost_named(stack) -> Frame | None:
    """The innermost frame that names a function and is no error-raising helper
    (data/surface_apis.toml's check frames, matched on the unqualified name)."""
    helpers = knowledge.error_check_frames()
    for frame in stack:
        name = (frame.function or "").rsplit("::", 1)[-1]
        if frame.function and not any(p.search(name) for p in helpers):
            return frame
    return None


