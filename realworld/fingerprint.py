"""Fingerprints of a saved excerpt, printed as the TOML lines of a case file.

    python realworld/fingerprint.py realworld/excerpts/vllm-0001.txt
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def excerpt_lines(text: str) -> list[str]:
    """The excerpt's lines as fingerprinted: newlines unified, leading and trailing blank
    lines dropped, everything else (trailing spaces included) kept."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprints(lines: list[str]) -> dict:
    return {
        "lines": len(lines),
        "sha256": sha("\n".join(lines) + "\n"),
        "first_line_sha256": sha(lines[0]) if lines else sha(""),
        "last_line_sha256": sha(lines[-1]) if lines else sha(""),
    }


def main(argv: list[str]) -> int:
    for name in argv:
        text = Path(name).read_bytes().decode("utf-8", errors="replace")
        for key, value in fingerprints(excerpt_lines(text)).items():
            print(f"{key} = {value!r}".replace("'", '"'))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
