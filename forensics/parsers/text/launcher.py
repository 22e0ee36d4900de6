"""torchrun's ChildFailedError summary (grammars/torchrun_summary.lark): every failed
rank with its exit code, pid, host and error, and the launcher's "Root Cause (first
observed failure)" - which is only the earliest timestamp, not evidence of a cause.
"""

from __future__ import annotations

from datetime import datetime

import re

from lark import Transformer, v_args
from lark.exceptions import LarkError

from forensics import grammar
from forensics.events import Kind, Severity
from forensics.knowledge import claimed_int
from forensics.parsers.text.block import BlockResult, unparsable

START = re.compile(r"={20,}\s*$")
_TITLE = re.compile(r"\S.* FAILED\s*$")


@v_args(inline=True)
class _ToSummary(Transformer):
    def start(self, title, failures, root):
        return {"program": title, "failures": failures, "root_cause": root}

    def title(self, text):
        return str(text).removesuffix(" FAILED").strip()

    def failures(self, *items):
        return list(items)

    def root(self, failure):
        return failure

    def failure(self, index, *fields):
        out = {"index": claimed_int(index)}
        for field in fields:
            out.update(field)
        return out

    def time(self, value=None):
        text = str(value or "").strip()
        try:        # torchrun writes 2025-08-19_11:02:46
            when = datetime.strptime(text, "%Y-%m-%d_%H:%M:%S") if text else None
        except ValueError:
            when = None
        return {"time": text or None, "failed_at": when}

    def host(self, value=None):
        return {"host": str(value or "").strip() or None}

    def rank(self, rank, local_rank):
        return {"rank": claimed_int(rank), "local_rank": claimed_int(local_rank)}

    def exitcode(self, code, pid, _signal=None):
        return {"exit_code": claimed_int(code), "pid": claimed_int(pid)}

    def error_file(self, value=None):
        text = str(value or "").strip()
        return {"error_file": None if text in ("<N/A>", "") else text}

    def traceback(self, *items):
        lines = [str(i).strip() if getattr(i, "type", None) == "VALUE" else i for i in items]
        return {"traceback": "\n".join(lines).strip()}

    def cont(self, text):
        return str(text)


class SummaryBlock:
    format = "torchrun-summary"

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.linenos: list[int] = []
        self.rules = 0

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.rules >= 2:
            return False
        if len(self.lines) == 1 and not _TITLE.match(text):
            return False                   # a line of "=" not followed by "<program> FAILED"
        if START.match(text):
            self.rules += 1
        self.lines.append(text)
        self.linenos.append(lineno)
        return True

    def close(self, make):
        pairs = [(n, t) for n, t in zip(self.linenos, self.lines) if t.strip()]
        blank = [n for n, t in zip(self.linenos, self.lines) if not t.strip()]
        if len(pairs) < 3:
            return BlockResult([], blank, pairs, [])
        text = "".join(t.rstrip() + "\n" for _, t in pairs)
        try:
            summary = grammar.transforming("torchrun_summary", _ToSummary()).parse(text)
        except (LarkError, ValueError, TypeError):
            return unparsable(self.linenos, self.lines, "a torchrun failure summary")
        root = summary["root_cause"]
        failed = [root] + summary["failures"]
        ranks = ", ".join(str(f.get("rank", "?")) for f in failed)
        message = (f"torchrun: {summary['program']} failed on rank(s) {ranks}; the launcher names rank "
                   f"{root.get('rank', '?')} as root cause (first observed failure, by timestamp)")
        event = make(Kind.LAUNCHER_SUMMARY, message, Severity.ERROR, summary)
        return BlockResult([event], [n for n, _ in pairs] + blank)


def start(text: str, header: tuple | None = None) -> SummaryBlock | None:
    return SummaryBlock() if START.match(text) else None
