"""Redaction for reports that leave the machine (knowledge in data/redaction.toml).

One ``Redactor`` per report: the same secret, host or user always gets the same
stand-in, so that lanes and correlations in the report still line up.
"""

from __future__ import annotations

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


class Redactor:
    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self._pseudonyms: dict[tuple[str, str], str] = {}
        self._numbers: dict[str, set[int]] = {}     # kind -> stand-in numbers written or already in the text
        self._next: dict[str, int] = {}             # kind -> the lowest number that may be free
        data = knowledge.load("redaction")
        self._public = frozenset(h.lower() for h in data.get("public", {}).get("hosts", ()))
        self._rules = [(r["kind"], re.compile(r["pattern"]), r["replace"], r.get("allow") == "public",
                        _CHECKS[r["check"]] if "check" in r else None)
                       for r in data["rule"]]
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
        for kind, pattern, replace, allow_public, check in self._rules:
            value = pattern.sub(lambda m, k=kind, r=replace, a=allow_public, c=check: self._replace(k, r, m, a, c),
                                value)
        return value

    def data(self, value: Any) -> Any:
        """Every string inside a JSON-like structure, redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

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


def redact_document(document: dict) -> dict:
    """A redacted copy of a report document, with what was redacted counted."""
    redactor = Redactor()
    redactor.reserve(document)          # stand-ins anywhere in it keep their numbers
    out = redactor.data(document)
    out["redaction"] = {"enabled": True, "counts": redactor.summary()}
    return out
