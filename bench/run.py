"""The benchmark: generate bundles, time `forensics analyze` on them, and compare with
`grep -c -E` (the analyzer's own anchor patterns) and `cat > /dev/null` over the same bytes.

    python bench/run.py                 # 10 MB and 100 MB
    python bench/run.py --with-1g       # also 1 GB (slow to generate; not in CI)
    python bench/run.py --write bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.generate import generate  # noqa: E402
from forensics.parsers.prefilter import anchors  # noqa: E402


def timed(cmd, **kw) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of a command run as a child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def run_one(label: str, size: int, work: Path) -> dict:
    bundle = work / label
    generate(bundle, size)
    files = sorted(str(p) for p in bundle.iterdir())
    total = sum(os.path.getsize(f) for f in files)
    pattern = work / "anchors.txt"
    pattern.write_text("\n".join(re.escape(a.decode()) for a in anchors()) + "\n")
    analyze = [sys.executable, "-m", "forensics", "analyze", str(bundle), "--format", "json", "-o", os.devnull]
    # a child per measurement so peak RSS is the analyzer's own
    wall, rss = _isolated(analyze)
    # stdout to a pipe, not /dev/null: GNU grep stops at the first match when it sees /dev/null
    grep_wall, _ = timed(["grep", "-c", "-E", "-f", str(pattern), *files], stdout=subprocess.PIPE)
    cat_wall, _ = timed(["sh", "-c", f"cat {' '.join(files)} > /dev/null"])
    return {"label": label, "bytes": total, "wall": wall, "rss": rss, "grep": grep_wall, "cat": cat_wall}


def _isolated(cmd) -> tuple[float, float]:
    code = ("import resource,subprocess,sys,time;t=time.perf_counter();subprocess.run(sys.argv[1:],check=True);"
            "w=time.perf_counter()-t;print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024)")
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True).stdout
    wall, rss = out.split()
    return float(wall), float(rss)


def _startup(work: Path) -> float:
    """Wall time of the analyzer on a one-line input: the fixed cost in every row."""
    tiny = work / "tiny"
    tiny.mkdir()
    (tiny / "server.log").write_text("(Worker_TP0 pid=1) INFO 12-02 10:00:00 [a.py:1] hello\n")
    cmd = [sys.executable, "-m", "forensics", "analyze", str(tiny), "--format", "json", "-o", os.devnull]
    return min(_isolated(cmd)[0] for _ in range(3))


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def table(rows: list[dict]) -> str:
    out = ["| input | size (MB) | forensics (s) | MB/s | peak RSS (MB) | grep -c -E (s) | cat (s) | forensics / grep |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mb = r["bytes"] / 1e6
        out.append(f"| {r['label']} | {mb:,.0f} | {r['wall']:.2f} | {mb / r['wall']:,.0f} | {r['rss']:,.0f} | "
                   f"{r['grep']:.2f} | {r['cat']:.2f} | {r['wall'] / max(r['grep'], 1e-3):.1f}x |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--with-1g", action="store_true")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    sizes = [("10 MB", 10 << 20), ("100 MB", 100 << 20)] + ([("1 GB", 1 << 30)] if args.with_1g else [])
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-"))
    try:
        rows = [run_one(label.replace(" ", ""), size, work) for label, size in sizes]
        startup = _startup(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = f"Machine: {machine()}\n\n{table(rows)}\n"
    result += f"\nStart-up (the same command on a one-line input): {startup:.2f} s\n"
    if len(rows) >= 3:
        r100, r1g = rows[1], rows[2]
        result += (f"\n100 MB -> 1 GB: time x{r1g['wall'] / r100['wall']:.1f} "
                   f"(x{(r1g['wall'] - startup) / (r100['wall'] - startup):.1f} without the fixed start-up), "
                   f"peak RSS {100 * (r1g['rss'] / r100['rss'] - 1):+.0f}%\n")
    print(result)
    if args.write:
        args.write.write_text("# Benchmark results\n\nProduced by `python bench/run.py"
                              + (" --with-1g" if args.with_1g else "") + "`.\n\n" + result)


if __name__ == "__main__":
    main()
