"""Knowledge as data: the catalogues under forensics/data/*.toml, loaded once.

Nothing in here knows about a particular crash; each catalogue is reviewed like code and
has its own tests (tests/test_knowledge.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict[str, Any]:
    text = resources.files("forensics.data").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


# --- CUDA errors and the forms libraries print them in ----------------------------------

@dataclass(frozen=True)
class CudaError:
    """One error of the catalogue (data/cuda_errors.toml)."""

    code: int | None       # CUresult / cudaError_t value; None for library statuses without one
    name: str              # CUresult name, CUDA_ERROR_ILLEGAL_ADDRESS (or the library's status name)
    runtime_name: str      # cudaError name, cudaErrorIllegalAddress
    message: str           # cudaGetErrorString text
    sticky: bool
    meaning: str = ""
    family: str = "cuda"   # cuda | cublas | cudnn | nccl: a library status is a symptom, not a fault


@functools.lru_cache(maxsize=None)
def cuda_errors() -> tuple[CudaError, ...]:
    return tuple(CudaError(**{"code": None, **entry}) for entry in load("cuda_errors")["error"])


@functools.lru_cache(maxsize=None)
def _error_index() -> dict[str, CudaError]:
    index: dict[str, CudaError] = {}
    for err in cuda_errors():
        keys = [err.name, err.runtime_name, err.message]
        if err.code is not None and err.family == "cuda":
            keys.append(str(err.code))
        for key in keys:
            if key:
                # keyed as lookup_error reads a key: a message ending in a full stop
                # (CUDA_ERROR_UNSUPPORTED_PTX_VERSION's) is found with or without it
                index.setdefault(key.strip().rstrip(".").lower(), err)
    return index


def lookup_error(key: str | int | None) -> CudaError | None:
    """The catalogue entry for a code, either name, or the runtime's message text."""
    if key is None:
        return None
    text = str(key).strip().strip("'\"").rstrip(".").lower()
    return _error_index().get(text)


CUT_MESSAGE_MIN = 20   # characters of a message cut at the end of a paste that still name it


@functools.lru_cache(maxsize=None)
def _messages_by_text() -> tuple[tuple[str, "CudaError"], ...]:
    return tuple((e.message.rstrip(".").lower(), e) for e in cuda_errors() if e.family == "cuda" and e.message)


def _cut_message(said: str, line: str) -> CudaError | None:
    """The error whose message ``said`` begins, when the line ends inside it (a paste cut
    mid-message: "CUDA error: an illegal memory access was") and only one message begins so."""
    said = said.strip().lower()
    if len(said) < CUT_MESSAGE_MIN or not line.rstrip().lower().endswith(said):
        return None
    found = {e.code: e for text, e in _messages_by_text() if text.startswith(said) and text != said}
    return next(iter(found.values())) if len(found) == 1 else None


@dataclass(frozen=True)
class ErrorForm:
    """A way a library prints a CUDA error (data/cuda_error_forms.toml)."""

    id: str
    library: str
    pattern: re.Pattern
    triggers: tuple[str, ...]
    api: str | None = None        # the API the form implies when it prints none (the watchdog's event query)
    error: str | None = None      # the error the form implies when it names none (out of memory)


@dataclass(frozen=True)
class ErrorMatch:
    """What a line says about a CUDA error: the error, and the call and place when printed."""

    error: CudaError
    form: str
    api: str | None = None
    file: str | None = None
    line: int | None = None


@functools.lru_cache(maxsize=None)
def error_forms() -> tuple[ErrorForm, ...]:
    out = []
    for entry in load("cuda_error_forms")["form"]:
        out.append(ErrorForm(id=entry["id"], library=entry["library"], pattern=re.compile(entry["pattern"]),
                             triggers=tuple(entry["triggers"]), api=entry.get("api"),
                             error=entry.get("error")))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _message_texts() -> re.Pattern:
    """Last resort: the runtime's own message strings, wherever they appear."""
    # without a closing full stop: a line may print the message with or without one
    messages = sorted((re.escape(e.message.rstrip(".")) for e in cuda_errors() if e.family == "cuda" and len(e.message) > 12),
                      key=len, reverse=True)
    return re.compile("(?P<text>" + "|".join(messages) + ")")


def find_cuda_error(text: str) -> ErrorMatch | None:
    """The first error form that ``text`` matches, with what it names, or None.

    Forms are tried in catalogue order (most specific first); each names the error by
    one of its groups: ``code``, ``name`` (CUresult or cudaError name) or ``text``
    (the runtime's message); ``api``, ``file`` and ``line`` when printed."""
    for form in error_forms():
        if not any(t in text for t in form.triggers):
            continue
        match = form.pattern.search(text)
        if not match:
            continue
        groups = {k: v for k, v in match.groupdict().items() if v}
        error = lookup_error(form.error)
        for key in ("name", "code", "text"):
            if error is not None:
                break
            if key in groups:
                error = lookup_error(groups[key])
        if error is None and "text" in groups:
            inner = _message_texts().search(groups["text"])
            error = lookup_error(inner.group("text")) if inner else _cut_message(groups["text"], text)
        if error is None:
            continue
        line = groups.get("line")
        return ErrorMatch(error=error, form=form.id, api=groups.get("api") or form.api,
                          file=groups.get("file"), line=claimed_int(line) if line and line.isdigit() else None)
    inner = _message_texts().search(text) if "encountered" in text or "error" in text.lower() else None
    if inner:
        error = lookup_error(inner.group("text"))
        if error is not None:
            return ErrorMatch(error=error, form="message-text")
    if "\n" in text and "CUDA error" in text and len(text) < 8192:
        # a message hard-wrapped mid-word by a paste ("an illegal mem" / "ory access ..."):
        # lines that continue a word are joined once
        joined = _WRAPPED_WORD.sub("", text)
        if joined != text:
            return find_cuda_error(joined)
    return None


# a newline inside a word: a lower-case letter on both sides
_WRAPPED_WORD = re.compile(r"(?<=[a-z])\n(?=[a-z])")


def error_form(form_id: str) -> ErrorForm | None:
    return next((f for f in error_forms() if f.id == form_id), None)


# --- Surface APIs and frames to skip -------------------------------------------------

@dataclass(frozen=True)
class SurfaceApi:
    api: str
    pattern: re.Pattern
    what: str


@functools.lru_cache(maxsize=None)
def surface_apis() -> tuple[SurfaceApi, ...]:
    return tuple(SurfaceApi(e["api"], re.compile(e["pattern"]), e["what"])
                 for e in load("surface_apis")["api"])


def surface_api_of(code: str | None) -> str | None:
    """The surface API a line of code (or a native call) names, if any (for an API
    family, the member it names: ncclAllReduce, ncclCommInitRank ...)."""
    if not code:
        return None
    for api in surface_apis():
        match = api.pattern.search(code)
        if match:
            return match.group(0) if api.api.startswith("nccl") else api.api
    return None


@functools.lru_cache(maxsize=None)
def error_check_frames() -> tuple[re.Pattern, ...]:
    """Functions that only translate an error into an exception (checkCudaErrors ...)."""
    return tuple(re.compile(p) for p in load("surface_apis")["skip"]["functions"])


@functools.lru_cache(maxsize=None)
def going_down_frames() -> tuple[re.Pattern, ...]:
    """Native functions that run only while a process goes down (std::terminate, abort)."""
    return tuple(re.compile(p) for p in load("surface_apis")["going_down"]["functions"])


@functools.lru_cache(maxsize=None)
def library_internal_files() -> tuple[re.Pattern, ...]:
    """Library files whose caller is the more useful surface site."""
    return tuple(re.compile(p) for p in load("surface_apis")["skip"]["files"])


# --- Log messages ------------------------------------------------------------------------

@dataclass(frozen=True)
class MessagePattern:
    """One entry of data/messages.toml: a message that means something for a crash."""

    id: str
    kind: str
    pattern: re.Pattern
    triggers: tuple[str, ...]
    severity: str | None = None
    fields: Mapping[str, str] = None            # group -> type ("int", "float", "str")
    environment: Mapping[str, str] = None       # environment key -> group (or "=literal")
    traffic: bool = False                       # ordinary traffic: counted, not kept as events
    constants: Mapping[str, Any] = None         # fields every match carries (what the line means, unsaid)


@functools.lru_cache(maxsize=None)
def message_patterns() -> tuple[MessagePattern, ...]:
    out = []
    for entry in load("messages")["message"]:
        out.append(MessagePattern(
            id=entry["id"], kind=entry["kind"], pattern=re.compile(entry["pattern"]),
            triggers=tuple(entry["triggers"]), severity=entry.get("severity"),
            fields=dict(entry.get("fields", {})), environment=dict(entry.get("environment", {})),
            traffic=entry.get("traffic", False), constants=dict(entry.get("constants", {}))))
    return tuple(out)


def message_pattern(message_id: str) -> MessagePattern | None:
    return next((m for m in message_patterns() if m.id == message_id), None)


@functools.lru_cache(maxsize=None)
def message_continuations() -> tuple[str, ...]:
    """Lines that continue an exception's message printed raw (data/messages.toml)."""
    return tuple(e["text"] for e in load("messages")["continuations"]["prefixes"])


@functools.lru_cache(maxsize=None)
def native_continuations() -> tuple[str, ...]:
    """Of those, the ones that go on with a native crash report too (``native``)."""
    return tuple(e["text"] for e in load("messages")["continuations"]["prefixes"] if e.get("native"))


@functools.lru_cache(maxsize=None)
def noise_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((e["id"], re.compile(e["pattern"])) for e in load("noise")["noise"])


# --- numbers read from logs ------------------------------------------------------------------
#
# Here, in the one module every stage may import (inputs, parsers, the timeline), so that
# every digit string a log holds becomes a number the same way.  The bounds a number must
# then fit are forensics/events.py's (number_out_of_range).

LONGEST_NUMBER = 40     # digits: any longer is past every bound of forensics/events.py


def claimed_int(text: str) -> int:
    """``int(text)`` for digits read from a log.  Python refuses to convert more than
    4,300 digits (ValueError: a 1 MB line of them would fail the reader of the whole
    input); a number past LONGEST_NUMBER digits is past every bound anyway, so it comes
    back as 10**LONGEST_NUMBER, to be set aside like any other number out of range."""
    digits = text.strip().lstrip("+")
    if len(digits.lstrip("-").lstrip("0")) > LONGEST_NUMBER:
        return -(10 ** LONGEST_NUMBER) if digits.startswith("-") else 10 ** LONGEST_NUMBER
    return int(digits)


# --- Processes ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def process_roles() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(e["pattern"]), e["role"]) for e in load("processes")["role"])


@functools.lru_cache(maxsize=4096)
def role_and_rank(process_name: str | None) -> tuple[str | None, int | None]:
    """Role and rank a process name implies (``Worker_TP2`` -> worker, 2)."""
    if not process_name:
        return None, None
    for pattern, role in process_roles():
        match = pattern.fullmatch(process_name)
        if match:
            rank = match.groupdict().get("rank")
            return role, claimed_int(rank) if rank is not None else None
    return None, None


@functools.lru_cache(maxsize=None)
@functools.lru_cache(maxsize=None)
def frame_processes() -> tuple[tuple[str, str], ...]:
    """(part of a file path, process name): code that runs only in that process
    (data/processes.toml [[frame_process]])."""
    return tuple((e["file"], e["name"]) for e in load("processes").get("frame_process", ()))


def process_of_frames(frames) -> str | None:
    """The process a stack of frames can only have run in, or None."""
    for frame in frames:
        for part, name in frame_processes():
            if part in (frame.file or ""):
                return name
    return None


def quoted_processes() -> tuple[tuple[str, re.Pattern], ...]:
    """Patterns naming the process whose traceback an exception message quotes."""
    return tuple((e["id"], re.compile(e["pattern"], re.M)) for e in load("processes").get("quoted_process", []))


def quoted_process(message: str) -> dict | None:
    """{id, pid, ip, rank, process} (those named) of the process whose traceback
    ``message`` quotes, or None when the message names none the catalogue knows."""
    for quote_id, pattern in quoted_processes():
        match = pattern.search(message)
        if match:
            return {"id": quote_id, **{k: v for k, v in match.groupdict().items() if v is not None}}
    return None


@functools.lru_cache(maxsize=None)
def _host_errors() -> dict[str, int]:
    return {e["text"].lower(): e["host"] for e in load("cuda_exceptions")["exception"] if "host" in e}


def host_error_of(device_exception: str | None) -> CudaError | None:
    """The CUDA error the host sees after a device exception ("Warp Illegal Address" ->
    CUDA_ERROR_ILLEGAL_ADDRESS), when data/cuda_exceptions.toml says which."""
    code = _host_errors().get(str(device_exception or "").strip().lower())
    return next((e for e in cuda_errors() if e.code == code), None) if code is not None else None


@functools.lru_cache(maxsize=None)
def relay_exceptions() -> Mapping[str, str]:
    """Exception type (unqualified) -> the event kind a traceback ending in it is: another
    process's failure relayed, or a stop (data/processes.toml [relay_exceptions])."""
    return dict(load("processes").get("relay_exceptions", {}))


@functools.lru_cache(maxsize=None)
def launcher_files() -> tuple[str, ...]:
    return tuple(load("processes").get("launcher", {}).get("files", ()))


def launchers_traceback(event) -> bool:
    """Whether a traceback runs through a launcher's own code (data/processes.toml
    [launcher]): the launcher raising because its child failed."""
    files = launcher_files()
    return any(part in (frame.file or "") for exc in event.chain for frame in exc.frames for part in files)


@functools.lru_cache(maxsize=None)
def vllm_v0_markers() -> tuple[str, ...]:
    return tuple(load("processes")["vllm_v0"]["markers"])


# --- Engine phases -------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def startup_messages() -> tuple[str, ...]:
    return tuple(load("phases")["startup"]["messages"])


@functools.lru_cache(maxsize=None)
def startup_exceptions() -> frozenset[str]:
    return frozenset(load("phases")["startup"].get("exceptions", ()))


@functools.lru_cache(maxsize=None)
def _startup_frames() -> dict[str, tuple[str | None, ...]]:
    out: dict[str, list] = {}
    for entry in load("phases")["startup"]["frames"]:
        out.setdefault(entry["function"], []).append(entry.get("file"))
    return {k: tuple(v) for k, v in out.items()}


def startup_frame(function: str | None, file: str) -> bool:
    """Whether a traceback frame only runs while an engine starts."""
    files = _startup_frames().get(function or "")
    return files is not None and any(f is None or f in file for f in files)


@dataclass(frozen=True)
class Signal:
    """One Linux signal of data/signals.toml, the one signals table."""

    number: int
    name: str                      # SIGSEGV
    text: str                      # strsignal(): "Segmentation fault"
    crash: bool = False            # the program's own fault, not a stop or a kill from outside
    fault_address: bool = False    # siginfo's si_addr is the faulting address (else a sender's pid)
    faulthandler: bool = False     # CPython's faulthandler catches it ("Fatal Python error: <text>")
    stop: bool = False             # a request to stop (SIGINT, SIGTERM)


@functools.lru_cache(maxsize=None)
def signal_table() -> tuple[Signal, ...]:
    return tuple(Signal(**entry) for entry in load("signals")["signal"])


@functools.lru_cache(maxsize=None)
def signals() -> dict[int, str]:
    """Signal number -> name (data/signals.toml)."""
    return {s.number: s.name for s in signal_table()}


@functools.lru_cache(maxsize=None)
def signal_number(name: str | None) -> int | None:
    """The number of a signal by its name ("SIGTERM"), or None."""
    return next((s.number for s in signal_table() if s.name == name), None)


def faulthandler_signal(text: str) -> str | None:
    """The signal faulthandler names by its text ("Segmentation fault" -> SIGSEGV)."""
    return next((s.name for s in signal_table() if s.faulthandler and text.startswith(s.text)), None)


@functools.lru_cache(maxsize=None)
def crash_signals() -> frozenset[int]:
    """Signals a program dies of by its own fault (data/signals.toml ``crash``)."""
    return frozenset(s.number for s in signal_table() if s.crash)


@functools.lru_cache(maxsize=None)
def fault_address_signals() -> frozenset[int]:
    """Signals whose siginfo carries the faulting address (``fault_address``)."""
    return frozenset(s.number for s in signal_table() if s.fault_address)


@functools.lru_cache(maxsize=None)
def stop_signals() -> frozenset[int]:
    """Signals that ask a process to stop (``stop``): SIGINT, SIGTERM."""
    return frozenset(s.number for s in signal_table() if s.stop)


@functools.lru_cache(maxsize=None)
def watchdog_exceptions() -> frozenset[str]:
    """C++ exception types the NCCL watchdog aborts its process with (data/signals.toml)."""
    return frozenset(load("signals").get("watchdog", {}).get("exceptions", ()))


def signal_name(number: int | None) -> str:
    if number is None:
        return "an unknown signal"
    return signals().get(abs(number), f"signal {abs(number)}")


@functools.lru_cache(maxsize=None)
def xid_catalogue() -> dict[int, dict]:
    return {entry["code"]: entry for entry in load("xid")["xid"]}


# --- Environment facts stated in free text (data/environment_facts.toml) ---------------------

@dataclass(frozen=True)
class EnvironmentFact:
    """One entry of data/environment_facts.toml: a line shape that states one environment
    key (a version, a parallel size, the model, a flag)."""

    key: str
    pattern: re.Pattern
    triggers: tuple[str, ...]
    type: str = "text"            # text | int | bool
    join: str | None = None       # the value's digit runs joined with this
    value: Any = None             # the constant of an entry whose pattern has no group


@functools.lru_cache(maxsize=None)
def environment_facts() -> tuple[EnvironmentFact, ...]:
    return tuple(EnvironmentFact(key=e["key"], pattern=re.compile(e["pattern"]), triggers=tuple(e["triggers"]),
                                 type=e.get("type", "text"), join=e.get("join"), value=e.get("value"))
                 for e in load("environment_facts")["fact"])


@functools.lru_cache(maxsize=None)
def _fact_triggers() -> tuple[str, ...]:
    return tuple(dict.fromkeys(t for fact in environment_facts() for t in fact.triggers))


def _fact_value(fact: EnvironmentFact, match: re.Match):
    raw = match.groupdict().get("value")
    if raw is None:
        return fact.value
    if fact.join is not None:
        raw = fact.join.join(re.findall(r"\d+", raw))
    if fact.type == "int":
        return claimed_int(raw)
    if fact.type == "bool":
        return {"true": True, "false": False}.get(raw.strip().lower())
    return raw


def environment_facts_in(text: str, known=()) -> dict[str, Any]:
    """{key: value} of the environment facts ``text`` states: per key, the value of the
    first entry (in catalogue order) one of whose triggers occurs in the text and whose
    pattern matches.  Keys in ``known`` are not looked for (the first value seen wins)."""
    if not text:
        return {}
    present = {t for t in _fact_triggers() if t in text}
    if not present:
        return {}
    out: dict[str, Any] = {}
    for fact in environment_facts():
        if fact.key in out or fact.key in known or present.isdisjoint(fact.triggers):
            continue
        match = fact.pattern.search(text)
        if match is not None:
            value = _fact_value(fact, match)
            if value is not None:
                out[fact.key] = value
    return out


# --- What an Xid line tells about the error its process sees ----------------------------------

@functools.lru_cache(maxsize=None)
def _xid_exceptions() -> dict[str, str]:
    """The SM exception an Xid 13 line names ("Misaligned Address") -> the device
    exception's text (data/cuda_exceptions.toml, `xid_sm_exception`)."""
    known = {entry["text"] for entry in load("cuda_exceptions")["exception"]}
    return {name.lower(): text for name, text in load("cuda_exceptions").get("xid_sm_exception", {}).items()
            if text in known}


def xid_exception(name: str | None) -> str | None:
    """The device exception (as cuda-gdb names it: "Warp Misaligned Address") of the SM
    exception an Xid line prints, or None when the catalogue does not establish one."""
    return _xid_exceptions().get(str(name or "").strip().rstrip(".").lower())


def xid_host_error(attrs: Mapping) -> CudaError | None:
    """The CUDA error the process an Xid names sees after it: the host error of the
    device exception the line names (an Xid 13's "Misaligned Address" -> 716), else the
    Xid catalogue's `host` (Xid 31, an MMU fault -> 700); None when neither says."""
    err = host_error_of(attrs.get("fault"))
    if err is not None:
        return err
    code = xid_catalogue().get(attrs.get("xid"), {}).get("host")
    return next((e for e in cuda_errors() if e.code == code and e.family == "cuda"), None) if code is not None else None
