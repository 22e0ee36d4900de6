"""Environment reports: PyTorch's and vLLM's collect_env, ``nvidia-smi -q``, ``pip
freeze``, environment-variable dumps, and the clock and manifest `forensics collect`
writes.  Each becomes one ENVIRONMENT event whose ``facts`` the environment rule reads
(versions, GPU model, driver, ECC and remapped-row counters, boot time ...).

Which line starts a report and which of its keys fill which environment key is data
(forensics/data/env_reports.toml); each line is read by grammars/env_report.lark.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar, knowledge
from forensics.events import Kind, Severity
from forensics.parsers.text.block import BlockResult

MAX_LINES = 5000          # a report longer than this is not a report


@dataclass(frozen=True)
class Report:
    name: str
    starts: tuple[str, ...]
    keys: dict


@functools.lru_cache(maxsize=None)
def _reports() -> tuple[Report, ...]:
    return tuple(Report(r["name"], tuple(r["starts"]), dict(r.get("keys", {})))
                 for r in knowledge.load("env_reports")["report"])


@functools.lru_cache(maxsize=None)
def _packages() -> dict[str, str]:
    return {k.lower(): v for k, v in knowledge.load("env_reports")["packages"].items()}


@functools.lru_cache(maxsize=None)
def _prefixes() -> tuple[str, ...]:
    return tuple(knowledge.load("env_reports")["variables"]["prefixes"])


@v_args(inline=True)
class _ToLine(Transformer):
    def entry(self, *items):
        indent, key, value = "", None, ""
        for item in items:
            if item.type == "INDENT":
                indent = str(item)
            elif item.type == "KEY":
                key = str(item).strip()
            elif item.type == "VALUE":
                value = str(item).strip()
        return ("entry", len(indent.expandtabs(4)), key, value)

    def section(self, *items):
        indent = next((str(i) for i in items if i.type == "INDENT"), "")
        return ("section", len(indent.expandtabs(4)), str(items[-1]).strip(), "")

    def gpu(self, *items):
        indent = next((str(i) for i in items if i.type == "INDENT"), "")
        return ("gpu", len(indent.expandtabs(4)), str(items[-1]), "")

    def package(self, *items):
        named = {i.type: str(i) for i in items}
        return ("package", 0, named["PACKAGE"], named["VERSION"])

    def package_url(self, name, url):
        return ("package", 0, str(name), str(url))

    def variable(self, name, value=None):
        return ("variable", 0, str(name), str(value) if value is not None else "")


def read_line(text: str):
    """(kind, indent, key, value) of one report line, or None."""
    try:
        return grammar.transforming("env_report", _ToLine()).parse(text.rstrip())
    except LarkError:
        return None


@dataclass
class ReportBlock:
    """A key/value report, from its start line to the first line that is not its own."""

    report: Report | None                      # None: a package list or a variable dump
    kind: str                                  # report name, "pip-freeze" or "env-vars"
    linenos: list[int] = field(default_factory=list)
    rows: list[tuple[int, tuple]] = field(default_factory=list)
    loose: list[tuple[int, str]] = field(default_factory=list)   # lines inside that are not key/value

    @property
    def format(self) -> str:
        return self.kind

    def accepts(self, text: str, lineno: int, header) -> bool:
        if header is not None or len(self.linenos) >= MAX_LINES:
            return False
        if not text.strip():
            if self.report is None:
                return False          # a package list or a variable dump ends at a blank line
            self.linenos.append(lineno)
            return True
        row = read_line(text)
        if self.report is None:
            wanted = "package" if self.kind == "pip-freeze" else "variable"
            if row is None or row[0] != wanted:
                return False
        elif row is None or row[0] in ("package_url", "variable"):
            # collect_env lists paths (cuDNN) and topology tables under a key: keep them
            # as part of the report when they look like continuations
            if not (text[:1].isspace() or text.startswith("/") or "\t" in text) and self.rows:
                return False
            self.linenos.append(lineno)
            self.loose.append((lineno, text))
            return True
        self.linenos.append(lineno)
        self.rows.append((lineno, row))
        return True

    def close(self, make) -> BlockResult:
        facts, gpus = self._facts()
        used = [n for n in self.linenos if n not in {m for m, _ in self.loose}]
        if self.report is None and len(self.rows) < 3:
            # two "x==1" lines are not a package list
            return BlockResult([], [], [(n, f"{r[2]}=={r[3]}" if r[0] == "package" else f"{r[2]}={r[3]}")
                                        for n, r in self.rows], [])
        shown = ", ".join(f"{k} {v}" for k, v in list(facts.items())[:6])
        message = f"{self.kind}: {shown}" if shown else f"{self.kind}: nothing of note"
        attrs = {"tool": self.kind, "facts": facts}
        if gpus:
            attrs["gpus"] = gpus
        event = make(Kind.ENVIRONMENT, message, Severity.INFO, attrs)
        return BlockResult([event], used, [], [], noise=len(self.loose))

    def _facts(self) -> tuple[dict, list]:
        facts: dict = {}
        gpus: list[dict] = []
        packages = _packages()
        stack: list[tuple[int, str]] = []        # (indent, section label)
        for _, (kind, indent, key, value) in self.rows:
            if kind == "package":
                wanted = packages.get(key.lower())
                if wanted and wanted not in facts:
                    facts[wanted] = value
                continue
            if kind == "variable":
                if key.startswith(_prefixes()):
                    facts[f"env:{key}"] = value
                continue
            while stack and stack[-1][0] >= indent:
                stack.pop()
            if kind == "gpu":
                gpus.append({"bus_id": key})
                stack = []
                continue
            if kind == "section" or (kind == "entry" and not value):
                stack.append((indent, key))
                continue
            keys = self.report.keys if self.report is not None else {}
            path = "/".join([label for _, label in stack if not label.startswith("GPU ")] + [key])
            target = keys.get(path)
            if target is None:
                continue
            if gpus:
                gpus[-1].setdefault(target, value)
            facts.setdefault(target, value)
        return facts, gpus


def start(text: str, header: tuple | None = None) -> ReportBlock | None:
    if header is not None:
        return None
    stripped = text.strip()
    for report in _reports():
        if any(stripped.startswith(s) for s in report.starts):
            block = ReportBlock(report, report.name)
            return block
    if "==" in text or "=" in text[:64]:
        row = read_line(text)
        if row is not None and row[0] == "package":
            return ReportBlock(None, "pip-freeze")
        if row is not None and row[0] == "variable" and row[2].startswith(_prefixes()):
            return ReportBlock(None, "env-vars")
    return None
