"""Redaction for reports that leave the machine (knowledge in data/redaction.toml).

One ``Redactor`` per report or bundle: the same secret, host or user always gets the
same stand-in, so that lanes and correlations in the report still line up.

Two ways in, one set of rules: ``text`` runs every rule over a value (report strings,
short); ``lines`` gives the same result as ``text`` on each line of a block of many
lines (``forensics collect`` on a GB log), but runs a rule only on the lines that hold
one of its ``triggers`` (literals every matching line contains, found with ``str.find`` on the
lowered block) or a match of its ``gate`` (a cheap regex every matching line contains):
most rules find nothing to do in most lines, and a rule that is not run costs nothing.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import ipaddress
import re
from collections import Counter
from typing import Any, Callable

from forensics import knowledge


def _is_ipv6(text: str) -> bool:
    """A valid IPv6 address with at least one digit (not "::" alone)."""
    try:
        address = ipaddress.IPv6Address(text.split("%", 1)[0])
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


# `check` in a rule: the match must pass this to be redacted
_CHECKS: dict[str, Callable[[str], bool]] = {"ipv6": _is_ipv6}


def _stand_ins(prefix: str) -> re.Pattern:
    """What ``_pseudonym`` writes for ``prefix``: host-3, 10.x.x.3, user3@example.invalid."""
    if "#" in prefix and "@" in prefix:
        head, _, tail = prefix.replace("#", "").partition("@")
        return re.compile(re.escape(head) + r"(\d{1,9})" + re.escape("@" + tail))
    return re.compile(re.escape(prefix.replace("#", "")) + r"(\d{1,9})")


def _public(host: str, hosts: frozenset[str]) -> bool:
    host = host.lower().rstrip(".")
    return any(host == h or host.endswith("." + h) for h in hosts)


@dataclasses.dataclass(frozen=True)
class Rule:
    """One [[rule]] of redaction.toml, compiled."""

    kind: str
    pattern: re.Pattern
    replace: str
    allow_public: bool                       # values listed under [public] stay
    check: Callable[[str], bool] | None      # a match must pass it to be redacted
    triggers: tuple[str, ...]                # lower-case literals, one of them on every matching line
    gate: re.Pattern | None                  # or: a regex every matching line has a match of

    @property
    def everywhere(self) -> bool:
        """No way to tell which lines it can match: it runs over all of them."""
        return not self.triggers and self.gate is None


class Redactor:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.rule_runs = 0                            # (line, rule) pairs ``lines`` ran: its cost
        self._pseudonyms: dict[tuple[str, str], str] = {}
        self._numbers: dict[str, set[int]] = {}     # kind -> stand-in numbers written or already in the text
        self._next: dict[str, int] = {}             # kind -> the lowest number that may be free
        data = knowledge.load("redaction")
        self._public = frozenset(h.lower() for h in data.get("public", {}).get("hosts", ()))
        secret = data["names"]["secret"]
        # a secret name's value is redacted wherever a JSON-like structure holds it
        self._secret_key = re.compile(r"(?:[\w.\-]*[_.\-])?(?:" + secret + ")")
        self._rules = [Rule(r["kind"], re.compile(r["pattern"].replace("{{secret}}", secret), re.MULTILINE),
                            r["replace"], r.get("allow") == "public", _CHECKS[r["check"]] if "check" in r else None,
                            tuple(t.lower() for t in r.get("triggers", ())),
                            re.compile(r["gate"]) if "gate" in r else None)
                       for r in data["rule"]]
        self._all_triggers = tuple(sorted({t for rule in self._rules for t in rule.triggers}))
        self._by_trigger = {t: [i for i, r in enumerate(self._rules) if t in r.triggers] for t in self._all_triggers}
        # Redaction is idempotent: a stand-in already in the text (a report redacted once,
        # redacted again) is left as it is, and its number is not given to another value -
        # renumbered, two machines would merge into one
        self._stand_ins = {(r["kind"], r["replace"].split(":", 1)[1]): _stand_ins(r["replace"].split(":", 1)[1])
                           for r in data["rule"] if r["replace"].startswith("pseudonym")}

    def reserve(self, value: Any) -> None:
        """Note the stand-ins already in ``value`` (a string or a JSON-like structure)."""
        if isinstance(value, str):
            for (kind, _prefix), pattern in self._stand_ins.items():
                for match in pattern.finditer(value):
                    self._numbers.setdefault(kind, set()).add(int(match.group(1)))
        elif isinstance(value, dict):
            for item in value.values():
                self.reserve(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self.reserve(item)

    def _is_stand_in(self, kind: str, prefix: str, value: str) -> bool:
        pattern = self._stand_ins.get((kind, prefix))
        return bool(pattern and pattern.fullmatch(value))

    def text(self, value: str) -> str:
        self.reserve(value)
        for rule in self._rules:
            value = rule.pattern.sub(self._substitute(rule), value)
        return value

    def lines(self, block: str) -> str:
        """``text`` applied to each line of ``block``, fast: a line is given only the rules
        whose triggers or gate it holds (most lines of a log: none)."""
        self.reserve(block)
        lines = block.split("\n")
        due: dict[int, set[int]] = {}                 # line number -> the rules it needs
        everywhere = {i for i, rule in enumerate(self._rules) if rule.everywhere}
        automaton = _automaton(self._all_triggers)
        for n, line in enumerate(lines):
            low = line.lower()
            found = {t for _, t in automaton.iter(low)} if automaton is not None else \
                {t for t in self._all_triggers if t in low}
            if found:
                due[n] = {i for t in found for i in self._by_trigger[t]}
        starts = None
        for i, rule in enumerate(self._rules):
            if rule.gate is None:
                continue
            if starts is None:
                starts = _line_starts(block)
            for match in _first_per_line(rule.gate, block):
                due.setdefault(bisect.bisect_right(starts, match.start()) - 1, set()).add(i)
        for n in (range(len(lines)) if everywhere else sorted(due)):
            line = lines[n]
            for i in sorted(due.get(n, set()) | everywhere):
                rule = self._rules[i]
                line = rule.pattern.sub(self._substitute(rule), line)
                self.rule_runs += 1
            lines[n] = line
        return "\n".join(lines)

    def _substitute(self, rule: Rule) -> Callable[[re.Match], str]:
        return lambda m: self._replace(rule.kind, rule.replace, m, rule.allow_public, rule.check)

    def data(self, value: Any) -> Any:
        """Every string inside a JSON-like structure, redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self._under(k, v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def _under(self, key: Any, value: Any) -> Any:
        """The value of a JSON-like key: a string under a secret name (``{"HF_TOKEN": ...}``,
        a parsed environment) is redacted whole, whatever it looks like."""
        if isinstance(key, str) and isinstance(value, str) and value and self._secret_key.fullmatch(key) \
                and not value.startswith("[REDACTED"):
            self.counts["secret-assignment"] += 1
            return "[REDACTED]"
        return self.data(value)

    def _replace(self, kind: str, replace: str, match: re.Match, allow_public: bool = False,
                 check: Callable[[str], bool] | None = None) -> str:
        whole = match.group(0)
        if check is not None and not check(whole):
            return whole
        if replace.startswith("pseudonym-group:"):
            prefix = replace.split(":", 1)[1]
            groups = [g for g in match.groups()]
            # (kept, secret) pairs: the first non-empty pair wins
            for i in range(0, len(groups) - 1, 2):
                kept, secret = groups[i], groups[i + 1]
                if secret:
                    if allow_public and _public(secret, self._public) or self._is_stand_in(kind, prefix, secret):
                        return whole
                    self.counts[kind] += 1
                    return (kept or "") + self._pseudonym(kind, secret, prefix)
            return whole
        if allow_public and _public(whole, self._public):
            return whole
        if replace.startswith("pseudonym:") and self._is_stand_in(kind, replace.split(":", 1)[1], whole):
            return whole
        self.counts[kind] += 1
        if replace.startswith("pseudonym:"):
            return self._pseudonym(kind, whole, replace.split(":", 1)[1])
        return match.expand(replace)

    def _pseudonym(self, kind: str, secret: str, prefix: str) -> str:
        key = (kind, secret)
        if key not in self._pseudonyms:
            taken = self._numbers.setdefault(kind, set())
            n = self._next.get(kind, 1)
            while n in taken:
                n += 1
            taken.add(n)
            self._next[kind] = n + 1
            self._pseudonyms[key] = f"{prefix.replace('#', '')}{n}" if "#" not in prefix else \
                prefix.replace("#", "") .replace("@", f"{n}@", 1)
        return self._pseudonyms[key]

    def summary(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def _line_starts(block: str) -> list[int]:
    """The offset where each line of ``block`` starts."""
    return [0] + [m.end() for m in _NEWLINE.finditer(block)]


_NEWLINE = re.compile("\n")


@functools.lru_cache(maxsize=4)
def _automaton(triggers: tuple[str, ...]):
    """An Aho-Corasick automaton over the triggers (pyahocorasick), or None without it."""
    try:
        import ahocorasick
    except ImportError:  # pragma: no cover - the str.find fallback
        return None
    automaton = ahocorasick.Automaton()
    for trigger in triggers:
        automaton.add_word(trigger, trigger)
    automaton.make_automaton()
    return automaton


def _first_per_line(gate: re.Pattern, block: str):
    """The first match of ``gate`` on each line that has one."""
    at = 0
    while (match := gate.search(block, at)) is not None:
        yield match
        end = block.find("\n", match.end())
        if end < 0:
            return
        at = end + 1


def redact_document(document: dict) -> dict:
    """A redacted copy of a report document, with what was redacted counted."""
    redactor = Redactor()
    redactor.reserve(document)          # stand-ins anywhere in it keep their numbers
    out = redactor.data(document)
    out["redaction"] = {"enabled": True, "counts": redactor.summary()}
    return out
