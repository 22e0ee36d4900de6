"""The benchmark: generate bundles, time `forensics analyze` on them beside baselines over
the same bytes, and check the verdict.

Two generators, so that the fast path cannot be tuned to one: `bench/generate.py`
(synthetic 8-rank console) and `bench/realistic.py` (built from a real DEBUG recording's
line shapes, in the modes realistic, dense, files, ranks, gzip, longline, sanitizer,
smallfiles, tqdm).  Baselines, in the same run: `grep -c -F` with the analyzer's own
anchors (ripgrep and lnav too when installed), and a Python loop over the lines with one
regex of the words that matter most (LOOP_PATTERN).  For the realistic bundles the
verdict must equal the verdict on the embedded crash recording alone, field by field
(bench/realistic.py verdict_fields); the fields that differ are printed.  Each row also
gives the analyzer's CPU seconds, seconds per GB and peak RSS, and the machine's load
average when it started (the machine may be shared).

    python bench/run.py                                # 100 MB of every mode
    python bench/run.py --sizes 256M,1G,4G,8G          # the scaling statement, one run
    python bench/run.py --modes sanitizer,tqdm --sizes 256M --skip lnav,loop
    python bench/run.py --cache /tmp/bundles           # keep the bundles (bench/stages.py reuses them)
    python bench/run.py --write bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
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


def peak_run(cmd: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, peak RSS MB, CPU seconds, stdout) of the analyzer in a child of its
    own (CPU: user + system of the analyzer and its worker processes)."""
    code = ("import re,subprocess,sys,time\n"
            "t=time.perf_counter()\n"
            "p=subprocess.Popen(sys.argv[1:],stdout=subprocess.PIPE)\n"
            "out,_=p.communicate()\n"
            "w=time.perf_counter()-t\n"
            "import resource\n"
            "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(w, u.ru_maxrss/1024, u.ru_utime+u.ru_stime)\n"
            "sys.stdout.write(out.decode('utf-8','replace'))\n")
    out = subprocess.run([sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True).stdout
    first, _, rest = out.partition("\n")
    wall, rss, cpu = first.split()
    return float(wall), float(rss), float(cpu), rest


BASELINE_TIMEOUT_S = 900


def wall(cmd: list[str], **kw) -> float | None:
    """Wall seconds of a baseline; None when it is not installed or ran past the timeout."""
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        return None
    started = time.perf_counter()
    try:
        subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=BASELINE_TIMEOUT_S, **kw)
    except subprocess.TimeoutExpired:
        return None
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


_REFERENCE: dict[Path, dict] = {}


def report_of(target: Path, work: Path) -> dict | None:
    """The JSON report document of one analysis (not timed)."""
    out = work / "report.json"
    subprocess.run([sys.executable, "-m", "forensics", "analyze", str(target), "--format", "json", "-o", str(out)],
                   capture_output=True, text=True)
    return json.loads(out.read_text(encoding="utf-8")) if out.exists() else None


def reference_fields(source: Path, work: Path) -> dict:
    """The verdict fields of a crash recording alone (once per recording)."""
    if source not in _REFERENCE:
        _REFERENCE[source] = realistic.verdict_fields(report_of(source, work) or {"verdict": {}, "stories": []})
    return _REFERENCE[source]


def bundle(generator: str, mode: str, size: int, work: Path, cache: Path | None = None) -> tuple[Path, Path]:
    """(the bundle to analyse, the folder to remove afterwards - or the cache's, kept).
    With ``cache``, a bundle generated before for the same generator, mode and size is
    reused (bench/stages.py reads the same cache)."""
    folder = (cache or work) / f"{generator}-{mode.replace(' ', '')}-{size}"
    done = folder / ".generated"
    if cache is not None and done.exists():
        return folder / done.read_text(encoding="utf-8"), folder
    shutil.rmtree(folder, ignore_errors=True)
    if generator == "realistic":
        target = realistic.generate(folder / "bundle", size, mode)
    else:
        synthetic.generate(folder / "bundle", size)
        target = folder / "bundle"
    done.write_text(str(target.relative_to(folder)), encoding="utf-8")
    return target, folder


def run_one(generator: str, mode: str, size: int, work: Path, check_verdict: bool, skip: frozenset = frozenset(),
            cache: Path | None = None) -> dict:
    target, folder = bundle(generator, mode, size, work, cache)
    files = files_of(target)
    total = sum(os.path.getsize(f) for f in files)
    pattern = work / "anchors.txt"
    pattern.write_bytes(b"\n".join(anchors()) + b"\n")
    load = os.getloadavg()[0]
    report = work / "timed.json"
    report.unlink(missing_ok=True)
    t, rss, cpu, _ = peak_run([sys.executable, "-m", "forensics", "analyze", str(target), "--format", "json",
                               "-o", str(report)])
    gz = target.suffix == ".gz"
    grep = None if "grep" in skip else wall(["sh", "-c", f"zcat {files[0]} | grep -c -F -f {pattern}"] if gz else
                                            ["grep", "-c", "-F", "-f", str(pattern), *files])
    rg = wall(["sh", "-c", f"zcat {files[0]} | rg -c -F -f {pattern}"] if gz else
              ["rg", "-c", "-F", "-f", str(pattern), *files]) if shutil.which("rg") and "rg" not in skip else None
    # lnav indexes every line (format detection, levels, times), then prints the lines of the
    # loop's pattern: the nearest thing lnav does to this job
    lnav = wall(["lnav", "-n", "-c", ":filter-in " + LOOP_PATTERN.decode(), *files]) \
        if shutil.which("lnav") and "lnav" not in skip else None
    # seconds per GB of what was read: a compressed bundle's size as generated
    data = size if target.suffix == ".gz" else total
    row = {"generator": generator, "mode": mode, "bytes": total, "data": data, "files": len(files), "wall": t, "cpu": cpu,
           "rss": rss, "grep": grep, "rg": rg, "lnav": lnav, "loop": None if "loop" in skip else python_loop(files),
           "same_verdict": None, "differ": {}, "load": load}
    if check_verdict and generator == "realistic":
        document = json.loads(report.read_text(encoding="utf-8")) if report.exists() else None
        want = reference_fields(realistic.crash_source(mode), work)
        if document is None:
            row["same_verdict"], row["differ"] = False, {"(no report)": (None, None)}
        else:
            got = realistic.verdict_fields(document, realistic.crash_offset(target, realistic.crash_source(mode)))
            row["differ"] = realistic.differing_fields(got, want)
            row["same_verdict"] = not row["differ"]
    if cache is None:
        shutil.rmtree(folder, ignore_errors=True)
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

    out = ["| generator | mode | size (MB) | files | load | forensics (s) | CPU (s) | s/GB read | peak RSS (MB) | "
           "grep -F (s) | rg (s) | lnav (s) | Python loop (s) | forensics / rg | forensics / lnav | same verdict |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        verdict = {True: "yes", False: "NO", None: "-"}[r["same_verdict"]]
        if r["differ"]:
            verdict += " (" + ", ".join(r["differ"]) + ")"
        out.append(f"| {r['generator']} | {r['mode']} | {r['bytes'] / 1e6:,.0f} | {r['files']:,} | {r['load']:.2f} | "
                   f"{r['wall']:.2f} | {r['cpu']:.2f} | {r['wall'] / (r['data'] / 1e9):.2f} | {r['rss']:,.0f} | "
                   f"{secs(r['grep'])} | {secs(r['rg'])} | {secs(r['lnav'])} | {secs(r['loop'])} | {ratio('rg')} | "
                   f"{ratio('lnav')} | {verdict} |")
    return "\n".join(out)


def differences(rows: list[dict], width: int = 300) -> str:
    """What differs, field by field, on each bundle whose verdict is not its crash's."""
    out = []
    for r in rows:
        for name, (got, want) in r["differ"].items():
            out.append(f"- {r['mode']} {r['bytes'] / 1e6:,.0f} MB, `{name}`:\n  bundle: {json.dumps(got)[:width]}\n"
                       f"  crash alone: {json.dumps(want)[:width]}")
    return "\n".join(out)


def scaling(rows: list[dict]) -> str:
    """Per mode: seconds per GB and peak RSS at each size, in one line."""
    modes: dict[tuple, list[dict]] = {}
    for r in rows:
        modes.setdefault((r["generator"], r["mode"]), []).append(r)
    out = ["| generator | mode | " + " | ".join(f"{r['data'] / 1e6:,.0f} MB: s/GB, RSS" for r in
                                                next(iter(modes.values()))) + " |",
           "|---|---|" + "---:|" * len(next(iter(modes.values())))]
    for (generator, mode), group in modes.items():
        out.append(f"| {generator} | {mode} | " + " | ".join(
            f"{r['wall'] / (r['data'] / 1e9):.2f}, {r['rss']:,.0f} MB" for r in group) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100M", help="comma-separated sizes, e.g. 256M,1G,4G,8G")
    ap.add_argument("--modes", default=",".join(realistic.ALL_MODES))
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--skip", default="", help="baselines not to run: comma-separated grep, rg, lnav, loop")
    ap.add_argument("--cache", type=Path, help="keep generated bundles here and reuse them (bench/stages.py too)")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    skip = frozenset(s for s in args.skip.split(",") if s)
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in realistic.ALL_MODES]
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}; use {', '.join(realistic.ALL_MODES)}")
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-"))
    rows = []
    print(table([]), flush=True)
    try:
        for size in (_size(s) for s in args.sizes.split(",")):
            if not args.no_synthetic:
                rows.append(run_one("synthetic", "8 ranks", size, work, False, skip, args.cache))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
            for mode in modes:
                rows.append(run_one("realistic", mode, size, work, True, skip, args.cache))
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = f"Machine: {machine()}\n\n{table(rows)}\n"
    if any(r["differ"] for r in rows):
        result += f"\nFields that differ from the crash alone:\n\n{differences(rows)}\n"
    if len({r["bytes"] for r in rows}) > 1:
        result += f"\nScaling (seconds per GB, peak RSS):\n\n{scaling(rows)}\n"
    print(result)
    if args.write:
        args.write.write_text("# Benchmark results\n\nProduced by `python bench/run.py --sizes " + args.sizes
                              + "` (one run; ratios are from the same run).\n\n" + result)


if __name__ == "__main__":
    main()
