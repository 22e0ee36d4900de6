"""The JSON report: the document as it is (schema forensics.report/1)."""

from __future__ import annotations

import json
from typing import TextIO


def render(document: dict, out: TextIO, options) -> None:
    out.write(json.dumps(document, indent=2, default=str, ensure_ascii=False) + "\n")
