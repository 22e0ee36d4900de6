"""The Python API (notebooks, scripts): ``forensics.analyze(...)`` and what it returns.

    >>> import forensics
    >>> case = forensics.analyze("crash-bundle/")
    >>> case.verdict.headline, case.verdict.first_failure
    >>> case.timeline.query("kind == 'cuda-error'")
    >>> print(case.report("markdown"))
"""

from __future__ import annotations

import io
from os import PathLike
from typing import Iterable

from forensics import case as _case
from forensics.report import REPORTERS, Options, render
from forensics.report.document import Document, build


class Case(_case.Case):
    """The result of an analysis: ``verdict`` (typed), ``timeline`` (pandas),
    ``sources`` (per-input accounting), ``report(format)``."""

    def document(self, timeline_limit: int | None = 400) -> dict:
        """The report document as the JSON report has it (a dict); ``report_document``
        is the typed one the renderers draw."""
        return build(self, timeline_limit).to_json()

    def report_document(self, timeline_limit: int | None = 400) -> Document:
        """The typed report document (forensics/report/document.py): its sections, each
        a frozen dataclass."""
        return build(self, timeline_limit)

    def report(self, fmt: str = "json", redact: bool | None = None, **options) -> str:
        """The report in one of ``forensics.report.REPORTERS`` (json, markdown, html,
        terminal); redaction defaults to the format's own default."""
        if fmt not in REPORTERS:
            raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(REPORTERS)}")
        if redact is None:
            redact = REPORTERS[fmt].redact_by_default
        out = io.StringIO()
        render(self.report_document(None if fmt == "html" else 400), fmt, out, Options(redact=redact, width=options.pop("width", 100), **options))
        return out.getvalue()

    def _repr_html_(self) -> str:
        v = self.verdict
        from forensics.inert import html_text
        rows = "".join(f"<tr><td>{html_text(r.rank if r.rank is not None else '-')}</td><td>{html_text(r.pid)}</td>"
                       f"<td>{html_text(r.role)}</td><td>{html_text(r.status.value)}</td><td>{html_text(r.failure or '')}</td></tr>"
                       for r in v.ranks[:32])
        return (f"<div><b>{html_text(v.headline)}</b><p>{html_text(v.summary)}</p>"
                f"<table><tr><th>rank</th><th>pid</th><th>role</th><th>status</th><th>how</th></tr>{rows}</table></div>")


def analyze(paths: str | PathLike | Iterable[str | PathLike], *more, kb: Iterable[str] | None = None,
            kind: str | None = None, follow_links: bool = False, engine: str = "local",
            scheduler: str | None = None) -> Case:
    """Analyse crash evidence: a folder, a file, ``-`` (stdin), or a list of them.

    Raises ``forensics.NothingToAnalyse`` when nothing given can be read (a missing
    path, an empty folder, only binary files) and ``forensics.KnowledgeBaseError`` for a
    broken ``kb`` entry."""
    if isinstance(paths, (str, PathLike)):
        given = [paths, *more]
    else:
        given = [*paths, *more]
    result = _case.analyze(*[str(p) for p in given], kb_dirs=[str(k) for k in kb] if kb else None, kind=kind,
                           follow_links=follow_links, engine=engine, scheduler=scheduler)
    out = Case.__new__(Case)
    out.__dict__.update(result.__dict__)
    return out
