"""How fast `forensics collect` copies and redacts a large log (issue 20: it crawled at
~0.3 MB/s).  Builds a log of the given size from the real recordings in ../shared (or the
samples), runs the log step of collect on it, and prints MB/s and the rule runs per line.

    python -m bench.collect --mb 200
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from forensics.collect import Bundle, Collector, Options

ROOT = Path(__file__).resolve().parent.parent


def _corpus() -> str:
    text = []
    for folder in (ROOT.parent / "shared" / "recordings", ROOT / "samples"):
        for path in sorted(folder.rglob("*.log")) if folder.is_dir() else ():
            text.append(path.read_text(encoding="utf-8", errors="replace"))
    return "".join(text) or "INFO nothing\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    unit = _corpus().encode()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "logs" / "server.log"
        log.parent.mkdir()
        with open(log, "wb") as fh:
            for _ in range(args.mb * 1_000_000 // len(unit) + 1):
                fh.write(unit)
        size = log.stat().st_size
        bundle = Bundle(str(Path(tmp) / "b.tar.gz"), redact=True)
        collector = Collector(Options(logs=(str(log.parent),), log_timeout=3600), bundle)
        started = time.perf_counter()
        collector.logs()
        seconds = time.perf_counter() - started
        bundle.commit()
        lines = unit.count(b"\n") * (size // len(unit))
        print(f"collect, one log of {size / 1e6:.0f} MB: {size / 1e6 / seconds:.1f} MB/s "
              f"({seconds:.1f} s; {bundle.redactor.rule_runs / max(lines, 1):.2f} rule runs per line; "
              f"redacted {sum(bundle.redactor.counts.values())} values)")


if __name__ == "__main__":
    main()
