"""The Markdown report as GitHub shows it: rendered by a CommonMark renderer with GFM
tables (markdown-it-py, rich's own dependency), nothing Markdown meant as formatting is
left as literal escapes or backticks - not in the <summary> lines (raw HTML, where
Markdown does not apply), not in the prose."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from tests.test_reports import RECORDINGS, case_of, rendered

GFM = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")


def _text(fragment: str) -> str:
    """What a reader sees of an HTML fragment: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rendered_markdown_shows_no_escapes_or_stray_backticks(path):
    page = GFM.render(rendered(case_of(path), "markdown"))
    summaries = re.findall(r"<summary>(.*?)</summary>", page, flags=re.S)
    for summary in summaries:
        seen = _text(summary)
        assert not re.search(r"\\[()_*\[\]`#<>|-]", seen), summary
        assert "`" not in seen, summary
    # the prose (headings, paragraphs, lists, table cells) outside code: what Markdown
    # escaped must come out as the character itself
    prose = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", page, flags=re.S)
    seen = _text(prose)
    assert not re.search(r"\\[()_*\[\]`#<>|]", seen), [m.group(0) for m in re.finditer(r".{30}\\[()_*\[\]`#<>|].{30}", seen)][:3]
    assert "`" not in seen


def test_the_verdict_quote_renders_as_a_blockquote_with_its_code():
    page = GFM.render(rendered(case_of(RECORDINGS[0]), "markdown"))
    assert "<blockquote>" in page
