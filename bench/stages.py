"""Where the time goes: the stages of one `forensics analyze --format json` run on one
generated bundle, wall and CPU seconds each, and the functions that cost most.

The pipeline is run in this process as the CLI runs it (forensics.cli's `analyze`
command, JSON report to a file); the stages are measured from outside, by wrapping the
functions at their boundaries (nothing under forensics/ is changed):

  imports     importing forensics.cli (the interpreter's own start is not included)
  discover    listing and sniffing the inputs (inputs/discover.py discover)
  read+scan   the bytes read and searched for anchors: the iterator of physical lines
              (parsers/text/stream.py _Run._physical: scan.Scanner.lines on the fast path,
              reader.iter_lines below it)
  parse       the rest of case.parse_source: normaliser, record headers, the format
              registry, blocks, the sanitizer assembler, the message catalogue
  timeline    case.analyze_parsed without the rules (ordering, process table, runs)
  rules       rules.run (the verdict)
  render      report/document.py build and the JSON renderer
  other       what is left of the command (option handling, writing the file)

Time is exclusive: a stage's clock stops while a stage inside it runs.  With --detail the
parse stage is split further (normalise, line header, sanitizer, blocks, catalogue) and so
is read+scan (anchor search: Hyperscan and its per-match callback, scan._matches; storm
templates: the error-storm accounting of each hit line, scan.Scanner._repeats).  Each of
those wrappers costs about a microsecond a call, so --detail inflates line-heavy bundles
(10-20% on a sanitizer log): compare totals without it.  Files are parsed in this process
(the local-processes engine is replaced by the serial one, so that each stage is seen);
the wall time of a normal run, with its worker processes, is bench/run.py's.

    python bench/stages.py sanitizer 256M                 # generate, then measure
    python bench/stages.py dense 1G --profile 25          # and cProfile's top 25 functions
    python bench/stages.py files 256M --cache /tmp/bundles  # reuse run.py --cache's bundle
    python bench/stages.py --bundle /tmp/x/console.log    # any bundle
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

_STARTED = (time.perf_counter(), time.process_time())
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import forensics.cli  # noqa: E402  (timed: the imports stage)

_IMPORTED = (time.perf_counter(), time.process_time())

from bench import realistic  # noqa: E402
from bench import run as bench_run  # noqa: E402

STAGES = ("imports", "discover", "read+scan", "parse", "timeline", "rules", "render", "other")
DETAIL = ("anchor search", "storm templates", "normalise", "line header", "sanitizer", "blocks", "catalogue")


class Clock:
    """Exclusive wall and CPU time per stage: entering a stage stops its parent's clock."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.stack: list[str] = ["other"]
        self._mark = (time.perf_counter(), time.process_time())

    def _charge(self) -> None:
        now = (time.perf_counter(), time.process_time())
        top = self.stack[-1]
        self.wall[top] = self.wall.get(top, 0.0) + now[0] - self._mark[0]
        self.cpu[top] = self.cpu.get(top, 0.0) + now[1] - self._mark[1]
        self._mark = now

    def enter(self, stage: str) -> None:
        self._charge()
        self.stack.append(stage)
        self.calls[stage] = self.calls.get(stage, 0) + 1

    def leave(self) -> None:
        self._charge()
        self.stack.pop()

    def call(self, stage: str, fn):
        """``fn`` timed as ``stage`` (the stage is left however it ends)."""
        def timed(*args, **kwargs):
            self.enter(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()
        timed.__wrapped__ = fn
        return timed

    def iterate(self, stage: str, iterator):
        """An iterator whose every step (the code that produces the next item) is timed as ``stage``."""
        iterator = iter(iterator)
        while True:
            self.enter(stage)
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.leave()
            yield item

    def generator(self, stage: str, fn):
        def timed(*args, **kwargs):
            return self.iterate(stage, fn(*args, **kwargs))
        return timed


def serial() -> None:
    """Files parsed in this process, one after the other (the local-processes engine's
    workers would hide their stages)."""
    from forensics import engines
    engines.parse_processes = lambda sources, parse, workers=None, on_source=None: \
        engines.parse_local(sources, parse, on_source)


def _wrap(owner, name: str, wrapper) -> None:
    """``owner.name`` replaced by ``wrapper(owner.name)`` where it exists (a stage that a
    later version of forensics renamed is left out, not an error)."""
    if hasattr(owner, name):
        setattr(owner, name, wrapper(getattr(owner, name)))


def instrument(clock: Clock, detail: bool) -> None:
    """Wraps the stage boundaries (module attributes, looked up at call time)."""
    from forensics import case, rules
    from forensics.parsers.text import stream
    from forensics.report import document
    import forensics.report as report
    serial()
    _wrap(case, "discover", lambda fn: clock.generator("discover", fn))
    _wrap(case, "parse_source", lambda fn: clock.call("parse", fn))
    _wrap(stream._Run, "_physical", lambda fn: lambda self, s: clock.iterate("read+scan", fn(self, s)))
    _wrap(case, "analyze_parsed", lambda fn: clock.call("timeline", fn))
    _wrap(rules, "run", lambda fn: clock.call("rules", fn))
    _wrap(document, "build", lambda fn: clock.call("render", fn))
    _wrap(report, "render", lambda fn: clock.call("render", fn))
    if detail:
        from forensics.inputs.normalise import Normaliser
        from forensics.parsers import scan
        from forensics.parsers.sanitizer.text import SanitizerAssembler
        from forensics.parsers.text import classify
        from forensics.parsers.text.lines import LineParser
        _wrap(scan, "_matches", lambda fn: clock.call("anchor search", fn))
        _wrap(scan.Scanner, "_repeats", lambda fn: clock.call("storm templates", fn))
        _wrap(Normaliser, "feed", lambda fn: clock.generator("normalise", fn))
        _wrap(LineParser, "parse", lambda fn: clock.call("line header", fn))
        for name in ("feed", "feed_repeat", "flush", "events"):
            _wrap(SanitizerAssembler, name, lambda fn: clock.call("sanitizer", fn))
        _wrap(stream._Run, "_close", lambda fn: clock.call("blocks", fn))
        _wrap(classify, "message_kind", lambda fn: clock.call("catalogue", fn))


def analyze(target: Path, out: Path) -> None:
    """The CLI's analyze command, in this process."""
    forensics.cli.main.main(["analyze", str(target), "--format", "json", "-o", str(out), "--no-pager"],
                            standalone_mode=False)


def profile(target: Path, out: Path, top: int, sorts: tuple[str, ...]) -> str:
    """cProfile's top functions (by own time, then by cumulative time), with file:line and
    share: a run of its own, without the stage clocks (files parsed serially here too)."""
    import cProfile
    import pstats
    serial()
    profiler = cProfile.Profile()
    profiler.enable()
    analyze(target, out)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = sum(v[2] for v in stats.stats.values())        # every function's own time: the whole run
    root = str(Path(__file__).resolve().parents[1]) + os.sep
    lines = [f"cProfile, {total:.2f} s in all (profiled: the profiler's overhead is in every figure)"]
    for sort in sorts:
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2 if sort == "tottime" else 3])[:top]
        lines += ["", f"top {top} by {'own time' if sort == 'tottime' else 'cumulative time'}:", "",
                  "| function | file:line | calls | own s | own % | cumulative s | cumulative % |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for (file, line, name), (cc, nc, tt, ct, _) in rows:
            where = "(built-in)" if file == "~" else file.replace(root, "")
            if "site-packages" in where:
                where = where.split("site-packages" + os.sep, 1)[1]
            elif os.sep + "lib" + os.sep + "python3" in where:          # the standard library
                where = "stdlib/" + where.split(os.sep + "lib" + os.sep, 1)[1].split(os.sep, 1)[1]
            calls = f"{nc:,}" if cc == nc else f"{nc:,}/{cc:,}"
            lines.append(f"| `{name}` | {where}{'' if file == '~' else f':{line}'} | {calls} | {tt:.2f} | "
                         f"{100 * tt / total:.1f} | {ct:.2f} | {100 * ct / total:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="realistic", choices=realistic.ALL_MODES)
    ap.add_argument("size", nargs="?", default="256M")
    ap.add_argument("--bundle", type=Path, help="measure this bundle instead of generating one")
    ap.add_argument("--cache", type=Path, help="the bundle cache of bench/run.py --cache (reused, kept)")
    ap.add_argument("--detail", action="store_true", help="split the parse stage (a little overhead)")
    ap.add_argument("--profile", type=int, metavar="N", help="then a second run under cProfile: its top N functions")
    ap.add_argument("--sort", default="tottime,cumtime", help="tottime, cumtime or both (the default)")
    ap.add_argument("--profile-only", type=int, help=argparse.SUPPRESS)    # the profiled child
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-stages-"))
    if args.profile_only:
        try:
            print(profile(args.bundle, work / "profiled.json", args.profile_only, tuple(args.sort.split(","))))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        if args.bundle:
            target, folder = args.bundle, None
        else:
            if args.cache:
                args.cache.mkdir(parents=True, exist_ok=True)
            target, folder = bench_run.bundle("realistic", args.mode, realistic._size(args.size), work, args.cache)
        files = bench_run.files_of(target)
        size = sum(os.path.getsize(f) for f in files)
        load = os.getloadavg()
        clock = Clock()
        clock.wall["imports"] = _IMPORTED[0] - _STARTED[0]
        clock.cpu["imports"] = _IMPORTED[1] - _STARTED[1]
        instrument(clock, args.detail)
        out = work / "report.json"
        started = (time.perf_counter(), time.process_time())
        clock._mark = started
        analyze(target, out)
        clock._charge()
        wall = time.perf_counter() - started[0] + clock.wall["imports"]
        cpu = time.process_time() - started[1] + clock.cpu["imports"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{args.mode if not args.bundle else target}: {size / 1e6:,.0f} MB in {len(files):,} file(s); "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; wall {wall:.2f} s, CPU {cpu:.2f} s, "
              f"peak RSS {rss:,.0f} MB (this process; files parsed serially)\n")
        print("| stage | wall s | wall % | CPU s | calls |\n|---|---:|---:|---:|---:|")
        for stage in STAGES + (DETAIL if args.detail else ()):
            if stage in clock.wall:
                print(f"| {stage} | {clock.wall[stage]:.2f} | {100 * clock.wall[stage] / wall:.1f} | "
                      f"{clock.cpu[stage]:.2f} | {clock.calls.get(stage, 1):,} |")
        if args.profile:
            print(flush=True)
            import subprocess
            subprocess.run([sys.executable, __file__, "--bundle", str(target), "--profile-only", str(args.profile),
                            "--sort", args.sort], check=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
