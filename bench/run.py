"""The benchmark: generate bundles, time `forensics analyze` on them beside baselines over
the same bytes, and check the verdict.

Two generators, so that the fast path cannot be tuned to one: `bench/generate.py`
(synthetic 8-rank console) and `bench/realistic.py` (built from a real DEBUG recording's
line shapes, in the modes realistic, dense, files, gzip, longline).  Baselines, in the same
run: `grep -c -F` with the analyzer's own anchors (ripgrep and lnav too when installed), and
a Python loop over the lines with one regex of the words that matter most (LOOP_PATTERN).  For the realistic bundles the verdict must
equal the verdict on the embedded crash recording alone.

    python bench/run.py                      # 100 MB of every mode
    python bench/run.py --sizes 100M,1G      # and 1 GB (slow to generate)
    python bench/run.py --write bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import generate as synthetic  # noqa: E402
from bench import realistic  # noqa: E402
from forensics.parsers.scan import anchors  # noqa: E402

def _size(text: str) -> int:
    return realistic._size(text)


def peak_run(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stdout) of the analyzer in a child of its own."""
    code = ("import re,subprocess,sys,time\n"
            "t=time.perf_counter()\n"
            "p=subprocess.Popen(sys.argv[1:],stdout=subprocess.PIPE)\n"
            "out,_=p.communicate()\n"
            "w=time.perf_counter()-t\n"
            "import resource\n"
            "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024)\n"
            "sys.stdout.write(out.decode('utf-8','replace'))\n")
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True).stdout
    first, _, rest = out.partition("\n")
    wall, rss = first.split()
    return float(wall), float(rss), rest


def wall(cmd: list[str], **kw) -> float | None:
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        return None
    started = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - started


def files_of(target: Path) -> list[str]:
    return sorted(str(p) for p in target.rglob("*") if p.is_file()) if target.is_dir() else [str(target)]


# the baseline a user would write: one regex of the few words that matter most
LOOP_PATTERN = rb"ERROR|Traceback|CUDA error|NCCL|Xid"


def python_loop(files: list[str]) -> float:
    pattern = re.compile(LOOP_PATTERN)
    started = time.perf_counter()
    n = 0
    for name in files:
        opener = __import__("gzip").open if name.endswith(".gz") else open
        with opener(name, "rb") as fh:
            for line in fh:
                if pattern.search(line):
                    n += 1
    return time.perf_counter() - started


def headline(target: Path) -> str:
    cmd = [sys.executable, "-m", "forensics", "analyze", str(target), "-q", "--format", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    import json
    return json.loads(out)["verdict"]["headline"] if out else "(no report)"


def run_one(generator: str, mode: str, size: int, work: Path, check_verdict: bool) -> dict:
    out = work / f"{generator}-{mode}-{size}"
    if generator == "realistic":
        target = realistic.generate(out, size, mode)
    else:
        synthetic.generate(out, size)
        target = out
    files = files_of(target)
    total = sum(os.path.getsize(f) for f in files)
    pattern = work / "anchors.txt"
    pattern.write_bytes(b"\n".join(anchors()) + b"\n")
    t, rss, _ = peak_run([sys.executable, "-m", "forensics", "analyze", str(target), "--format", "json", "-o", os.devnull])
    gz = target.suffix == ".gz"
    grep = wall(["sh", "-c", f"zcat {files[0]} | grep -c -F -f {pattern}"] if gz else
                ["grep", "-c", "-F", "-f", str(pattern), *files])
    rg = wall(["sh", "-c", f"zcat {files[0]} | rg -c -F -f {pattern}"] if gz else
              ["rg", "-c", "-F", "-f", str(pattern), *files]) if shutil.which("rg") else None
    # lnav indexes every line (format detection, levels, times), then prints the lines of the
    # loop's pattern: the nearest thing lnav does to this job
    lnav = wall(["lnav", "-n", "-c", ":filter-in " + LOOP_PATTERN.decode(), *files]) if shutil.which("lnav") else None
    row = {"generator": generator, "mode": mode, "bytes": total, "wall": t, "rss": rss, "grep": grep, "rg": rg,
           "lnav": lnav, "loop": python_loop(files), "same_verdict": None}
    if check_verdict and generator == "realistic":
        row["same_verdict"] = headline(target) == headline(realistic.SOURCE)
    shutil.rmtree(out, ignore_errors=True)
    return row


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
    from forensics.parsers import scan
    from forensics.inputs import sources
    tools = ", ".join(f"{name} {_version([name, '--version'])}" for name in ("rg", "lnav") if shutil.which(name))
    return (f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}; anchors matched with {scan.scanner_name()}, gzip read with "
            f"{sources.gzip_reader_name()}; {tools or 'no rg or lnav'}")


def _version(cmd: list[str]) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True).stdout.split()
    return out[1] if len(out) > 1 else "?"


def table(rows: list[dict]) -> str:
    def secs(value):
        return "-" if value is None else f"{value:.2f}"

    def ratio(other):
        return f"{r['wall'] / r[other]:.1f}x" if r[other] else "-"

    out = ["| generator | mode | size (MB) | forensics (s) | peak RSS (MB) | grep -F (s) | rg (s) | lnav (s) | "
           "Python loop (s) | forensics / rg | forensics / lnav | same verdict |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        verdict = {True: "yes", False: "NO", None: "-"}[r["same_verdict"]]
        out.append(f"| {r['generator']} | {r['mode']} | {r['bytes'] / 1e6:,.0f} | {r['wall']:.2f} | {r['rss']:,.0f} | "
                   f"{secs(r['grep'])} | {secs(r['rg'])} | {secs(r['lnav'])} | {r['loop']:.2f} | {ratio('rg')} | "
                   f"{ratio('lnav')} | {verdict} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100M", help="comma-separated sizes, e.g. 100M,1G")
    ap.add_argument("--modes", default=",".join(realistic.MODES))
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-"))
    rows = []
    try:
        for size in (_size(s) for s in args.sizes.split(",")):
            if not args.no_synthetic:
                rows.append(run_one("synthetic", "8 ranks", size, work, False))
            for mode in args.modes.split(","):
                rows.append(run_one("realistic", mode, size, work, True))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = f"Machine: {machine()}\n\n{table(rows)}\n"
    print(result)
    if args.write:
        args.write.write_text("# Benchmark results\n\nProduced by `python bench/run.py --sizes " + args.sizes
                              + "` (one run; ratios are from the same run).\n\n" + result)


if __name__ == "__main__":
    main()
