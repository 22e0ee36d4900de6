"""Python warnings as ``warnings.showwarning`` prints them: the location and message,
then the offending source line indented.  Known to say nothing about a crash: noise,
counted as such, so that their source lines do not read as unparsed."""

from __future__ import annotations

import re

from forensics.parsers.text.block import BlockResult

START = re.compile(r"\S+\.py:\d+: [A-Z]\w*Warning: ")


class WarningBlock:
    format = "python-warning"

    def __init__(self) -> None:
        self.linenos: list[int] = []

    def accepts(self, text: str, lineno: int, header) -> bool:
        if self.linenos and (len(self.linenos) >= 2 or not text.startswith("  ") or not text.strip()):
            return False
        self.linenos.append(lineno)
        return True

    def close(self, make) -> BlockResult:
        return BlockResult(noise=len(self.linenos))


def start(text: str, header: tuple | None = None) -> WarningBlock | None:
    return WarningBlock() if START.match(text) else None
