"""Command line: ``forensics analyze PATH...`` and friends.

Exit codes: 0 analysed (whatever the verdict, unless --exit-code), 2 usage error
(a bad option, nothing readable in what was given, an unwritable -o, a broken --kb
entry), 3 a failure was found (only with --exit-code), 1 internal error (with --debug,
the traceback).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import sys
from pathlib import Path

import click

from forensics import __version__, inert
from forensics.events import RANK_LIMIT

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_FAILURE_FOUND = 0, 1, 2, 3
FORMATS = ("terminal", "json", "markdown", "html")


def _forceable() -> list[str]:
    from forensics.parsers.registry import forceable
    return sorted(forceable())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forensics")
def main() -> None:
    """Explain why a multi-GPU inference server or job died.

    \b
    Example:
      forensics analyze logs/            # every file under logs/, any format
      kubectl logs vllm-0 --timestamps | forensics analyze -
    """


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True,
              help="Report format (markdown: ready to paste into a GitHub issue; html: one self-contained page).")
@click.option("--redact/--no-redact", default=None,
              help="Redact secrets, hosts, IPs, user names and request contents. Default: on for markdown and "
                   "html, off for terminal and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write the report to this file instead of stdout (checked before the analysis starts).")
@click.option("--title-file", type=click.Path(dir_okay=False),
              help="Markdown: write the suggested issue title to this file and leave it out of the body "
                   "(gh issue create --title \"$(cat TITLE)\" --body-file REPORT).")
@click.option("--explain", is_flag=True,
              help="The full derivation: how each rule decided, and what each process's lines say "
              "happened to it (its story, the observation that decided its status).")
@click.option("--timeline-limit", type=click.IntRange(min=0), default=400, show_default=True,
              help="Most timeline entries in the JSON report (0: all).")
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(),
              help="A folder of extra known-issue entries (*.toml); may be repeated.")
@click.option("--kind", help="Read every input as this format instead of recognising it (see forensics formats).")
@click.option("--follow-links", is_flag=True, help="Follow symbolic links that lead outside the folders given.")
@click.option("--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where inputs are parsed: this machine's cores, or a Dask cluster.")
@click.option("--scheduler", help="Dask scheduler address (tcp://host:8786); needs --engine dask.")
@click.option("--exit-code", "exit_code", is_flag=True,
              help=f"Exit with {EXIT_FAILURE_FOUND} when a failure is found (for scripts and CI).")
@click.option("-q", "--quiet", is_flag=True, help="Terminal: the verdict only; no progress bar.")
@click.option("-v", "--verbose", is_flag=True, help="Terminal: the whole report and how each rule decided.")
@click.option("--full", is_flag=True, help="Terminal: every section, not only the first screen.")
@click.option("--show", "show", callback=lambda ctx, param, value: _sections(value),
              help="Terminal: the verdict and these sections, comma-separated: known-issues, next-steps, "
                   "explain, processes, timeline, checklist, env, inputs.")
@click.option("--pager/--no-pager", default=True, show_default=True,
              help="Terminal: page a report taller than the screen (less -FRX, or $PAGER), only on a TTY.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of internal errors.")
def analyze(paths, fmt, redact, output, title_file, explain, timeline_limit, kb_dirs, kind, follow_links, engine,
            scheduler, exit_code, quiet, verbose, full, show, pager, debug) -> None:
    """Analyse crash evidence: folders (recursively), files, archives, or - for stdin.

    \b
    Examples:
      forensics analyze samples/gpu_tp4_oob_del_cumemfree
      kubectl logs vllm-0 --timestamps | forensics analyze -
      forensics analyze run1/ dmesg.txt --format markdown -o issue.md --title-file title.txt
    """
    if kind is not None and kind not in _forceable():
        raise click.UsageError(f"--kind {kind!r} is not a format; use one of: {', '.join(_forceable())}")
    if scheduler and engine != "dask":
        raise click.UsageError("--scheduler needs --engine dask")
    if title_file and fmt != "markdown":
        raise click.UsageError("--title-file is for --format markdown")
    _check_output(output, paths)
    _check_output(title_file, paths)
    if "-" in paths and sys.stdin.isatty():
        click.echo("forensics: reading the log from the terminal: paste it, then press Ctrl-D "
                   "(or pipe it: kubectl logs POD | forensics analyze -)", err=True)
    from forensics.case import NothingToAnalyse, OutputIsInput, analyze as run_analysis
    from forensics.engines import EngineUnavailable
    from forensics.kb import KnowledgeBaseError
    try:
        with _progress(paths, enabled=not quiet and fmt == "terminal") as on_source:
            case = run_analysis(*paths, kb_dirs=list(kb_dirs), on_source=on_source, kind=kind, engine=engine,
                                scheduler=scheduler, follow_links=follow_links, outputs=(output, title_file))
    except (KnowledgeBaseError, EngineUnavailable) as exc:
        raise _usage(str(exc)) from None
    except (NothingToAnalyse, OutputIsInput) as exc:
        _error(exc)
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001
        if debug:
            raise
        _error(f"internal error: {type(exc).__name__}: {exc}. Re-run with --debug and report it with the inputs.")
        sys.exit(EXIT_INTERNAL)
    _write_report(case, fmt, redact, output, title_file, explain, quiet, verbose, timeline_limit, debug,
                  full=full, show=show, pager=pager and not output)
    if exit_code and case.verdict.failed:
        sys.exit(EXIT_FAILURE_FOUND)


def _sections(value: str | None) -> tuple[str, ...]:
    from forensics.report.document import show_names
    known = show_names()
    if not value:
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise click.BadParameter(f"{', '.join(map(inert.plain, unknown))}: not a section; use "
                                 f"{', '.join(known)}", param_hint="--show")
    return names


def _write_report(case, fmt, redact, output, title_file, explain, quiet, verbose, timeline_limit,
                  debug: bool = False, full: bool = False, show: tuple = (), pager: bool = False) -> None:
    from forensics.report import REPORTERS, Options, render
    from forensics.report.document import build
    if redact is None:
        redact = REPORTERS[fmt].redact_by_default
    document = build(case, None if fmt == "html" or not timeline_limit else timeline_limit)
    options = Options(redact=redact, explain=explain, quiet=quiet, verbose=verbose, title_separately=bool(title_file),
                      full=full or fmt != "terminal" or bool(output), show=show, pager=pager and fmt == "terminal")
    try:
        if title_file:
            from forensics.report.markdown import title
            doc = document.redacted() if redact else document
            with open(title_file, "w", encoding="utf-8") as fh:
                fh.write(title(doc) + "\n")
        if output:
            with open(output, "w", encoding="utf-8", errors="replace") as out:
                render(document, fmt, out, options)
        else:
            render(document, fmt, sys.stdout, options)
            sys.stdout.flush()
    except OSError as exc:
        _error(f"cannot write the report: {exc.strerror or exc}")
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - a renderer bug is one sentence, not a traceback
        if debug:
            raise
        _error(f"internal error while writing the report: {type(exc).__name__}: {exc}. "
               "Re-run with --debug and report it with the inputs.")
        sys.exit(EXIT_INTERNAL)


def _shown(path: object) -> str:
    """A path as an error message shows it (forensics.inert.name: one line, no escape
    sequence, invisible characters visible)."""
    return inert.name(os.fspath(path) if isinstance(path, os.PathLike) else path)


def _usage(message: str) -> click.UsageError:
    """A usage error whose text is inert (click prints it to the terminal as it is)."""
    return click.UsageError(inert.plain(message))


def _error(message: object) -> None:
    click.echo(inert.plain(f"forensics: {message}"), err=True)


_STANDARD_STREAMS = ("/dev/stdout", "/dev/stderr", "/dev/null", "-")


def _check_output(output: str | None, inputs, option: str = "-o") -> None:
    """Refuse, before any analysis, an output the report could not be written to or that
    is one of the paths given.  An input found inside a folder given (through links and
    hard links too) is refused while the inputs are listed: ``analyze(outputs=...)``,
    which compares the files it actually reads with every output by device and inode."""
    if not output or output in _STANDARD_STREAMS:
        return
    path = Path(output)
    shown = _shown(output)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise _usage(f"{option} {shown}: the folder {_shown(parent)} does not exist")
    if path.exists():
        try:
            st = path.stat()
        except OSError as exc:
            raise _usage(f"{option} {shown}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(st.st_mode):
            raise _usage(f"{option} {shown}: not a regular file; give a file path")
        for given in inputs:
            if given == "-":
                continue
            try:
                same = os.path.samefile(given, output)
            except OSError:
                continue
            if same:
                raise _usage(f"{option} {shown} is one of the inputs; it would be overwritten")
        if not os.access(path, os.W_OK):
            raise _usage(f"{option} {shown}: not writable")
    elif not os.access(parent, os.W_OK):
        raise _usage(f"{option} {shown}: the folder {_shown(parent)} is not writable")


@main.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown"]), default="terminal", show_default=True)
@click.option("--redact/--no-redact", default=None,
              help="Redact secrets, hosts, IPs and user names, as analyze does. Default: on for markdown, "
                   "off for terminal and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(), help="Extra known-issue folders.")
def compare(runs, fmt, redact, output, kb_dirs) -> None:
    """Compare several crash bundles: restarts of one server, or before/after an upgrade.

    \b
    Groups the runs by crash signature, lists the environment fields that differ and
    says how often each signature reproduced.
    Example:
      forensics compare crash-1/ crash-2/ crash-3/ after-upgrade/
    """
    missing = [r for r in runs if not Path(r).exists()]
    if missing:
        raise _usage(f"{', '.join(map(_shown, missing))} does not exist; give one folder (or file) per run.")
    _check_output(output, runs)
    from forensics.case import NothingToAnalyse, OutputIsInput
    from forensics.compare import compare as run_compare, render
    from forensics.kb import KnowledgeBaseError
    try:
        result = run_compare(list(runs), kb_dirs=list(kb_dirs), outputs=(output,))
    except KnowledgeBaseError as exc:
        raise _usage(str(exc)) from None
    except (NothingToAnalyse, OutputIsInput) as exc:
        _error(exc)
        sys.exit(EXIT_USAGE)
    if redact is None:
        redact = fmt == "markdown"         # like analyze: what is pasted into an issue is redacted
    try:
        with (open(output, "w", encoding="utf-8", errors="replace") if output else
              contextlib.nullcontext(sys.stdout)) as out:
            render(result, fmt, out, redact=redact)
    except OSError as exc:
        _error(f"cannot write the comparison: {exc.strerror or exc}")
        sys.exit(EXIT_USAGE)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--rank", "ranks", multiple=True, type=click.IntRange(0, RANK_LIMIT - 1),
              help="Only these ranks (repeatable).")
@click.option("--kind", "kinds", multiple=True, help="Only these event kinds (repeatable), e.g. cuda-error.")
@click.option("--severity", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
              help="Only events at or above this severity.")
@click.option("--since", help="Only events at or after this time (ISO, e.g. 2026-12-02T10:42:36).")
@click.option("--until", help="Only events at or before this time.")
@click.option("--csv", "csv_path", help="Write the filtered timeline as CSV (- for stdout).")
@click.option("--jsonl", "jsonl_path", help="Write it as JSON lines (- for stdout).")
@click.option("--parquet", "parquet_path", type=click.Path(dir_okay=False), help="Write it as Parquet (needs pyarrow).")
@click.option("--limit", type=click.IntRange(min=0), default=200, show_default=True,
              help="Rows shown in the terminal (0: all).")
def timeline(paths, ranks, kinds, severity, since, until, csv_path, jsonl_path, parquet_path, limit) -> None:
    """The merged per-rank timeline of every input, filtered; or exported for pandas.

    \b
    Examples:
      forensics timeline logs/ --rank 2 --severity ERROR
      forensics timeline logs/ --kind cuda-error --kind xid
      forensics timeline logs/ --since 2026-12-02T10:42:36 --csv timeline.csv
    """
    from forensics.events import Kind
    valid = sorted(k.value for k in Kind)
    bad = [k for k in kinds if k not in valid]
    if bad:
        raise _usage(f"--kind {', '.join(bad)}: not an event kind; use one of: {', '.join(valid)}")
    files = {"--csv": csv_path, "--jsonl": jsonl_path, "--parquet": parquet_path}
    for option, path in files.items():
        _check_output(path, paths, option)
    import pandas as pd

    from forensics.case import NothingToAnalyse, OutputIsInput, analyze as run_analysis
    try:
        case = run_analysis(*paths, outputs=tuple(p for p in files.values() if p and p != "-"))
    except (NothingToAnalyse, OutputIsInput) as exc:
        _error(exc)
        sys.exit(EXIT_USAGE)
    frame = case.timeline
    levels = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    if ranks:
        frame = frame[frame["rank"].isin(ranks)]
    if kinds:
        frame = frame[frame["kind"].isin(kinds)]
    if severity:
        frame = frame[frame["severity"].map(levels.index) >= levels.index(severity.upper())]
    for bound, keep in ((since, lambda t, b: t >= b), (until, lambda t, b: t <= b)):
        if bound:
            try:
                when = pd.Timestamp(bound)
            except ValueError:
                raise click.BadParameter(inert.plain(f"{bound!r} is not a time; use ISO form like "
                                                     "2026-12-02T10:42:36")) from None
            frame = frame[keep(frame["time"], when)]
    try:
        if csv_path:
            # every text cell inert (inert.csv_cell): no formula for a spreadsheet, no
            # escape sequence for a terminal, whether it goes to a file or to stdout
            text_columns = [c for c in frame.columns if frame[c].dtype == object or
                            pd.api.types.is_string_dtype(frame[c].dtype)]
            safe = frame.assign(**{c: frame[c].map(inert.csv_cell) for c in text_columns})
            safe.to_csv(sys.stdout if csv_path == "-" else csv_path, index=False)
        if jsonl_path:
            # JSON escapes control characters, and pandas writes ASCII only: nothing to strip
            frame.to_json(sys.stdout if jsonl_path == "-" else jsonl_path, orient="records", lines=True,
                          date_format="iso")
        if parquet_path:
            try:
                frame.to_parquet(parquet_path, index=False)
            except ImportError:
                raise _usage("--parquet needs pyarrow: pip install pyarrow (or use --csv / --jsonl)") from None
    except OSError as exc:
        _error(f"cannot write the timeline: {exc.strerror or exc}")
        sys.exit(EXIT_USAGE)
    if csv_path or jsonl_path or parquet_path:
        if "-" not in (csv_path, jsonl_path):
            click.echo(f"{len(frame)} events written.", err=True)
        return
    from forensics.report import Options
    from forensics.report.terminal import render_timeline
    render_timeline(frame, sys.stdout, Options(), limit=limit or None)


@main.command()
@click.argument("logs", nargs=-1, type=click.Path(exists=True))
@click.option("-o", "--output", required=True, help="The bundle to write (.tar.gz).")
@click.option("--k8s", "pod", help="Also collect `kubectl logs --timestamps` (and --previous) of this pod.")
@click.option("-n", "--namespace", help="The pod's namespace (with --k8s).")
@click.option("--container", "containers", multiple=True, help="Also collect `docker logs -t` of this container (repeatable).")
@click.option("--core-dir", "core_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Another folder to look for CUDA/CPU core dumps in (repeatable).")
@click.option("--python", "python", default=sys.executable, show_default="this Python",
              help="The server's Python, for collect_env and pip freeze.")
@click.option("--timeout", default=60, show_default=True, type=click.FloatRange(1, 3600), help="Seconds per step.")
@click.option("--redact/--no-redact", default=True, show_default=True, help="Redact the bundle's text like a shared report.")
def collect(logs, output, pod, namespace, containers, core_dirs, python, timeout, redact) -> None:
    """Gather the crash evidence on this host (or in this pod) into one bundle:
    the kernel log and clock, nvidia-smi, the PyTorch/vLLM environment report,
    pip freeze, the variables that matter, the LOGS given, core dumps and a
    manifest.  A missing tool or a refused permission is a manifest line, never
    a failure; nothing but -o is written.

    \b
    Examples:
      forensics collect /var/log/vllm/ -o crash.tar.gz
      forensics collect --k8s vllm-0 -n serving -o crash.tar.gz
      forensics analyze crash.tar.gz
    """
    if namespace and not pod:
        raise click.UsageError("--namespace needs --k8s POD")
    if not output.endswith((".tar.gz", ".tgz")):
        raise _usage(f"-o {_shown(output)}: give a .tar.gz path")
    _check_output(output, logs)
    _check_collect_output(output, logs)
    from forensics.collect import Options, collect as run_collect
    options = Options(logs=tuple(logs), k8s_pod=pod, namespace=namespace, containers=tuple(containers),
                      core_dirs=tuple(core_dirs), redact=redact, timeout=timeout, python=python)
    try:
        steps = run_collect(options, output)
    except OSError as exc:
        click.echo(inert.plain(f"forensics: cannot write {output}: {exc.strerror or exc}; no bundle was written"), err=True)
        sys.exit(EXIT_INTERNAL)
    except Exception as exc:  # noqa: BLE001 - said, never a half-written bundle
        click.echo(inert.plain(f"forensics: collect failed: {type(exc).__name__}: {exc}; no bundle was written"), err=True)
        sys.exit(EXIT_INTERNAL)
    for step in steps:
        click.echo(inert.plain(step.line()))
    ok = sum(s.status == "ok" for s in steps)
    click.echo(f"{_shown(output)}: {ok} of {len(steps)} steps gave output; read it with: "
               f"forensics analyze {shlex.quote(_shown(output))}")


def _check_collect_output(output: str, logs) -> None:
    """collect writes its bundle beside -o and renames it into place: what it would
    destroy is the file of that name (not a link's target, not another hard link), so
    -o may not name an existing file inside a folder of LOGS."""
    where = Path(os.path.realpath(Path(output).parent)) / Path(output).name
    if not where.exists():
        return
    for given in logs:
        folder = Path(os.path.realpath(given))
        if folder.is_dir() and where.is_relative_to(folder):
            raise _usage(f"-o {_shown(output)} is inside {_shown(given)}, one of the folders collected; "
                         "it would replace a file there: give a path outside it")


@main.command()
def rules() -> None:
    """The analysis pipeline: each rule in order, what it reads and writes, what it does."""
    from forensics.rules import PIPELINE
    for n, rule in enumerate(PIPELINE, 1):
        click.echo(f"{n:2}. {rule.name}")
        click.echo(f"    reads:  {', '.join(rule.reads) or '-'}")
        click.echo(f"    writes: {', '.join(rule.writes) or '(notes only)'}")
        click.echo(_indent(rule.doc(), 4))
        click.echo("")


@main.command()
def formats() -> None:
    """Every input format forensics reads, and what --kind accepts."""
    from forensics.parsers.registry import formats as all_formats
    for fmt in all_formats():
        click.echo(f"{fmt.name:24} {fmt.kind:9} {fmt.what}")


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell-completion script.

    \b
    Example (bash):
      eval "$(forensics completion bash)"
    """
    from click.shell_completion import get_completion_class
    cls = get_completion_class(shell)
    click.echo(cls(main, {}, "forensics", "_FORENSICS_COMPLETE").source())


def _indent(text: str, n: int, width: int = 88) -> str:
    import textwrap
    return textwrap.fill(text, width=width, initial_indent=" " * n, subsequent_indent=" " * n)


PROGRESS_AFTER_S = 1.0          # a run shorter than this shows no bar
PROGRESS_POLL_S = 0.1


@contextlib.contextmanager
def _progress(paths, enabled: bool):
    """Bytes read across all inputs, with rate and ETA, on stderr, only when stderr is a
    terminal and the run lasts over a second: it advances inside one large file, over
    many files, on compressed files and on stdin (no total: a pulse and the bytes
    read).  The readers count into a shared meter (forensics/inputs/progress.py) that
    the worker processes count into too; a thread here shows it."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    import threading

    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    from forensics.inputs import progress as meter
    total = _input_bytes(paths)
    sized = "-" not in paths and total > 0
    meter.start()
    done = {"inputs": 0}
    stop = threading.Event()

    def show() -> None:
        if stop.wait(_seconds(os.environ.get("FORENSICS_PROGRESS_AFTER"), PROGRESS_AFTER_S)):
            return
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("reading", total=total if sized else None)
            while not stop.is_set():
                read = meter.bytes_read()
                stage = "analysing" if sized and read >= total else f"reading ({done['inputs']} inputs done)"
                bar.update(task, completed=read, description=stage)
                stop.wait(PROGRESS_POLL_S)

    thread = threading.Thread(target=show, name="forensics-progress", daemon=True)
    thread.start()

    def advance(source, parsed):
        done["inputs"] += 1
    try:
        yield advance
    finally:
        stop.set()
        thread.join(timeout=2)
        meter.stop()


def _seconds(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if 0 <= value <= 60 else default


def _input_bytes(paths) -> int:
    total = 0
    for given in paths:
        path = Path(given)
        try:
            if path.is_file():
                total += path.stat().st_size
            elif path.is_dir():
                for n, p in enumerate(path.rglob("*")):
                    if n > 20000:
                        break
                    if p.is_file() and not p.is_symlink():
                        total += p.stat().st_size
        except OSError:
            continue
    return total


if __name__ == "__main__":  # pragma: no cover
    main()
