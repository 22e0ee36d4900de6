"""The message catalogue (data/messages.toml) applied to one message, and the readers
of structured message payloads (key=value configs, dict literals, scheduler dumps).

Rules never look at raw text: what a message says is turned into typed attributes here.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Any

from forensics import knowledge


@dataclass(frozen=True)
class Classified:
    """A message the catalogue knows: which entry, and its typed fields."""

    entry: knowledge.MessagePattern
    fields: dict


@functools.lru_cache(maxsize=None)
def _trigger_index() -> tuple[re.Pattern, dict[str, tuple[int, ...]]]:
    """One regex finding every trigger literal, and trigger -> entries using it."""
    entries = knowledge.message_patterns()
    users: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        for trigger in entry.triggers:
            users.setdefault(trigger, []).append(i)
    ordered = sorted(users, key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in ordered)), {t: tuple(v) for t, v in users.items()}


@functools.lru_cache(maxsize=None)
def _trigger_automaton():
    """The triggers in an Aho-Corasick automaton (pyahocorasick): every trigger in a
    message in one pass - the regex alternation tries each of ~200 literals at every
    position (18 us a message against about 2).  None without the package."""
    try:
        import ahocorasick
    except ImportError:  # pragma: no cover - the regex below
        return None
    automaton = ahocorasick.Automaton()
    for trigger in _trigger_index()[1]:
        automaton.add_word(trigger, trigger)
    automaton.make_automaton()
    return automaton


def _triggers_in(message: str) -> set[str]:
    """Every trigger that occurs in ``message``."""
    automaton = _trigger_automaton()
    if automaton is not None:
        return {trigger for _, trigger in automaton.iter(message)}
    finder, users = _trigger_index()
    found: set[str] = set()
    pos = 0
    while (m := finder.search(message, pos)) is not None:
        # every trigger that starts here: a shorter one may hide inside the longest
        found.update(t for t in users if message.startswith(t, m.start()))
        pos = m.start() + 1
    return found


def classify(message: str) -> Classified | None:
    """The first catalogue entry (in catalogue order) one of whose triggers occurs in the
    message and whose pattern matches it."""
    users = _trigger_index()[1]
    candidates: set[int] = set()
    for trigger in _triggers_in(message):
        candidates.update(users[trigger])
    if not candidates:
        return None
    entries = knowledge.message_patterns()
    for i in sorted(candidates):
        entry = entries[i]
        match = entry.pattern.search(message)
        if match:
            return Classified(entry, typed_fields(entry, match))
    return None


def typed_fields(entry: knowledge.MessagePattern, match: re.Match) -> dict:
    out: dict[str, Any] = {}
    types = entry.fields or {}
    for key, value in match.groupdict().items():
        if value is None:
            continue
        kind = types.get(key)
        if kind == "int":
            try:
                out[key] = knowledge.claimed_int(value)
            except ValueError:
                continue
        elif kind == "float":
            try:
                out[key] = float(value)
            except ValueError:
                continue
        elif kind == "signal":
            # a death by a signal, kept as the exit status Python reports for it (-N)
            number = knowledge.claimed_int(value) if value.isdigit() else \
                next((n for n, name in knowledge.signals().items() if name == value), None)
            if number:
                out.setdefault("exit_code", -number)
        else:
            out[key] = value
    # merge alternative groups (exit_code2 -> exit_code, subject_process2 -> subject_process)
    for key in list(out):
        base = key.rstrip("0123456789")
        if base != key and base not in out:
            out[base] = out.pop(key)
        elif base != key:
            out.pop(key)
    for key, value in (entry.constants or {}).items():
        out.setdefault(key, value)
    if "address_hi" in out and "address_lo" in out:
        out["address"] = hex(int(out.pop("address_hi"), 16) << 32 | int(out.pop("address_lo"), 16))
    if entry.kind == "xid" and "xid" in out:
        from forensics.parsers.text import xid       # the Xid line's process and detail, by its grammar
        out = xid.refine(match, out)
    for name, how in (entry_structured(entry)).items():
        text = out.get(name)
        if isinstance(text, str):
            out[name] = READERS[how](text)
    return out


@functools.lru_cache(maxsize=None)
def _structured() -> dict[str, dict[str, str]]:
    return {e["id"]: dict(e.get("structured", {})) for e in knowledge.load("messages")["message"]}


def entry_structured(entry: knowledge.MessagePattern) -> dict[str, str]:
    return _structured().get(entry.id, {})


@functools.lru_cache(maxsize=None)
def entry_phase(entry_id: str) -> str | None:
    return next((e.get("phase") for e in knowledge.load("messages")["message"] if e["id"] == entry_id), None)


# --- structured payloads -------------------------------------------------------------------

_SCALAR = re.compile(r"\b(?P<key>[A-Za-z_]\w*)=(?P<value>'[^']*'|\"[^\"]*\"|[^,\s()\[\]{}]+)")


def read_kv(text: str) -> dict:
    """``model='m', tensor_parallel_size=4, enforce_eager=False`` -> a dict of values
    (first occurrence of a key wins: nested configs repeat keys)."""
    out: dict[str, Any] = {}
    for match in _SCALAR.finditer(text[:200_000]):
        key = match["key"]
        if key not in out:
            out[key] = _literal(match["value"])
    return out


def read_dict(text: str) -> dict:
    try:
        value = ast.literal_eval(text[:200_000])
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return read_kv(text.replace("': ", "=").replace("'", ""))
    return value if isinstance(value, dict) else {}


_DUMP_KEYS = ("num_computed_tokens", "total_num_scheduled_tokens", "num_scheduled_tokens",
              "prompt_token_ids_len", "prompt_len", "num_output_tokens", "num_prompt_tokens")


def read_scheduler(text: str) -> dict:
    """vLLM's SchedulerOutput dump: the step in flight (computed, scheduled tokens, the
    request ids).  vLLM prints ``key=[n]`` (dataclass repr) or ``'key': n`` (dict repr)."""
    out: dict[str, Any] = {}
    head = text[:200_000]
    for key in _DUMP_KEYS:
        match = re.search(rf"\b{key}'?(?:=|: )\{{?(?:'[^']*': )?\[?(\d+)", head)
        if match:
            out[key] = knowledge.claimed_int(match.group(1))
    ids = re.findall(r"req_ids=\[([^\]]*)\]|req_id='([^']+)'", head)
    flat = [x for pair in ids for x in pair if x]
    if flat:
        out["request_ids"] = flat[0][:200]
    out["new_requests"] = "scheduled_new_reqs=[]" not in head
    return out


def _literal(value: str):
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


READERS = {"kv": read_kv, "dict": read_dict, "scheduler": read_scheduler}
