"""Helpers the tests share: run text through the pipeline, call a parser directly
(nothing swallowed), and build rule evidence by hand.

Parsers are called directly here (``parse_text``), not through ``case.parse_source``,
which turns a parser's exception into a problem line: a test that must fail when a
parser raises has to see the exception.
"""

from __future__ import annotations

import io
from datetime import datetime
from typing import Iterable

from forensics.case import Case, analyze, analyze_parsed
from forensics.events import Event, Kind, Severity, freeze
from forensics.inputs.sources import Source, classify
from forensics.parsers.base import ParsedSource
from forensics.parsers.text.stream import TextParser
from forensics.rules import PIPELINE, Evidence
from forensics.rules.base import Draft, Rule, VerdictView
from forensics.timeline import ProcessTable


def source_of(data: str | bytes, relpath: str = "console.log") -> Source:
    """An in-memory input, classified by its content like a file would be."""
    raw = data.encode() if isinstance(data, str) else data

    def opener():
        return io.BytesIO(raw)

    return classify(relpath, None, raw[:65536], size=len(raw), mtime=None, opener=opener)


def parse_text(data: str | bytes, relpath: str = "console.log") -> ParsedSource:
    """The text parser on ``data``, directly: an exception in any parser propagates."""
    return TextParser().parse(source_of(data, relpath))


def analyze_text(data: str | bytes, relpath: str = "console.log") -> Case:
    """The whole pipeline on one in-memory input (as ``forensics analyze -`` would)."""
    raw = data.encode() if isinstance(data, str) else data
    return analyze("-", stdin=io.BytesIO(raw))


def analyze_texts(files: dict[str, str | bytes]) -> Case:
    """The pipeline after parsing, on several in-memory inputs (a bundle)."""
    return analyze_parsed([parse_text(text, name) for name, text in files.items()])


def event(kind: Kind, message: str = "", *, source: str = "console.log", line: int = 1, time: datetime | None = None,
          pid: int | None = None, rank: int | None = None, process: str | None = None, role: str | None = None,
          host: str | None = None, severity: Severity = Severity.ERROR, seq: int | None = None, **attrs) -> Event:
    """A hand-built event, as a parser would have produced it."""
    return Event(kind=kind, message=message, source=source, line=line, severity=severity, time=time, pid=pid,
                 process=process, rank=rank, role=role, host=host, seq=seq if seq is not None else line,
                 attrs=freeze(attrs))


def evidence_of(events: Iterable[Event], **kw) -> Evidence:
    """Evidence as the pipeline builds it: identities learned from the events."""
    events = list(events)
    table = ProcessTable.learn(events)
    return Evidence(events=tuple(table.resolve(e) for e in events), processes=table, **kw)


def run_rules(evidence: Evidence, until: type[Rule] | None = None):
    """The pipeline's rules in order on hand-built evidence, up to and including
    ``until``; returns the draft verdict's values (a dict by field name)."""
    draft = Draft()
    for rule_class in PIPELINE:
        rule = rule_class()
        view = VerdictView(draft, rule)
        if rule.predicate(evidence, view):
            rule.action(evidence, view)
        if rule_class is until:
            break
    return draft.values


def read_pty(pid: int, fd: int, seconds: float = 120) -> str:
    """What a child started with ``pty.fork()`` printed on its terminal, until it exits."""
    import os
    import time
    chunks, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode("utf-8", "replace")
