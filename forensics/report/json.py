"""The JSON report: the document's facts as they are (schema forensics.report/1).

ASCII only: control characters, C1 codes and bidi overrides from the logs stay in the
data but as \\u escapes, so that `cat report.json` cannot drive a terminal."""

from __future__ import annotations

import json
from typing import TextIO

from forensics.report.document import Document


def render(document: Document, out: TextIO, options) -> None:
    out.write(json.dumps(document.to_json(), indent=2, default=str, ensure_ascii=True) + "\n")
