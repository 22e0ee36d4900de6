"""Command line: ``forensics analyze PATH...``.

Exit codes: 0 analysed (whatever the verdict), 2 usage error (bad option, nothing to
read), 1 unexpected internal error (with --debug, the traceback).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from forensics import __version__
from forensics.kinds import FORCEABLE

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE = 0, 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="forensics")
def main() -> None:
    """Explain why a multi-GPU inference server died.

    \b
    Example:
      forensics analyze logs/            # every file under logs/, any format
      forensics analyze logs/ --format json > report.json
    """


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown", "html"]), default="terminal",
              show_default=True, help="Report format (markdown: ready to paste into a GitHub issue; "
                                      "html: one self-contained page with an interactive timeline).")
@click.option("--redact/--no-redact", default=None,
              help="Redact secrets, hosts, IPs, user names and request contents. "
                   "Default: on for markdown and html, off for terminal and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write the report to this file instead of stdout.")
@click.option("--explain", is_flag=True, help="Show how each rule reached its conclusion.")
@click.option("--timeline-limit", type=int, default=400, show_default=True,
              help="Most timeline entries in the JSON report (0: all).")
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(),
              help="A folder of extra known-issue entries (*.toml); may be repeated.")
@click.option("--kind", type=click.Choice(sorted(FORCEABLE)),
              help="Read every input as this format instead of detecting it.")
@click.option("--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where inputs are parsed: this machine's cores, or a Dask cluster.")
@click.option("--scheduler", help="Dask scheduler address (tcp://host:8786); default: a local cluster.")
@click.option("-q", "--quiet", is_flag=True, help="Terminal: the verdict only; no progress bar.")
@click.option("-v", "--verbose", is_flag=True,
              help="Terminal: also how each rule decided and samples of unparsed lines.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of internal errors.")
def analyze(paths: tuple[str, ...], fmt: str, redact: bool | None, output: str | None, explain: bool,
            timeline_limit: int, kb_dirs: tuple[str, ...], kind: str | None, engine: str,
            scheduler: str | None, quiet: bool, verbose: bool, debug: bool) -> None:
    """Analyse crash evidence: directories (recursively), files, or - for stdin.

    \b
    Examples:
      forensics analyze samples/gpu_tp4_oob_del_cumemfree
      kubectl logs vllm-0 --timestamps | forensics analyze -
      forensics analyze run1/ dmesg.txt sanitizer.*.log --format json -o report.json
    """
    missing = [p for p in paths if p != "-" and not Path(p).exists()]
    if missing and len(missing) == len(paths):
        raise click.UsageError(f"nothing to analyse: {', '.join(missing)} does not exist. "
                               "Give a folder or files collected from the crashed server.")
    from forensics.case import analyze as run_analysis
    from forensics.kb import KnowledgeBaseError
    try:
        with _progress(paths, enabled=not quiet) as on_source:
            case = run_analysis(*paths, kb_dirs=list(kb_dirs), on_source=on_source, kind=kind,
                                engine=engine, scheduler=scheduler)
    except KnowledgeBaseError as exc:
        raise click.UsageError(str(exc)) from None
    except RuntimeError as exc:
        if debug or "dask" not in str(exc):
            raise
        raise click.UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001
        if debug:
            raise
        click.echo(f"forensics: internal error: {type(exc).__name__}: {exc}. "
                   "Re-run with --debug and report it with the inputs.", err=True)
        sys.exit(EXIT_INTERNAL)
    out = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    try:
        if redact is None:
            redact = fmt in ("markdown", "html")
        if fmt == "json":
            out.write(case.to_json(timeline_limit=timeline_limit or None, redact=redact) + "\n")
        elif fmt == "markdown":
            from forensics.report.markdown import render as render_markdown
            out.write(render_markdown(case, redact=redact))
        elif fmt == "html":
            from forensics.report.html import render as render_html
            out.write(render_html(case, redact=redact))
        else:
            from forensics.report.terminal import render
            from rich.console import Console
            console = Console(file=out, width=_width(out)) if output else Console(width=_width(out))
            render(case, console, explain=explain or verbose, quiet=quiet, verbose=verbose)
    finally:
        if output:
            out.close()


@main.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True)
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(), help="Extra known-issue folders.")
def compare(runs: tuple[str, ...], fmt: str, kb_dirs: tuple[str, ...]) -> None:
    """Compare several crash bundles: restarts of one server, or before/after an upgrade.

    \b
    Groups the runs by crash signature, lists the environment fields that differ and
    says how often each signature reproduced.
    Example:
      forensics compare crash-1/ crash-2/ crash-3/ after-upgrade/
    """
    missing = [r for r in runs if not Path(r).exists()]
    if missing:
        raise click.UsageError(f"{', '.join(missing)} does not exist; give one folder (or file) per run.")
    from forensics.compare import compare as run_compare
    from forensics.kb import KnowledgeBaseError
    try:
        result = run_compare(list(runs), kb_dirs=list(kb_dirs))
    except KnowledgeBaseError as exc:
        raise click.UsageError(str(exc)) from None
    if fmt == "json":
        import json
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
        return
    from forensics.report.terminal import render_comparison
    from rich.console import Console
    render_comparison(result, Console(width=_width(sys.stdout)))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--rank", "ranks", multiple=True, type=int, help="Only these ranks (repeatable).")
@click.option("--kind", "kinds", multiple=True, help="Only these event kinds (repeatable), e.g. cuda-error.")
@click.option("--severity", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
              help="Only events at or above this severity.")
@click.option("--since", help="Only events at or after this time (ISO, e.g. 2026-12-02T10:42:36).")
@click.option("--until", help="Only events at or before this time.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="Write the filtered timeline as CSV.")
@click.option("--jsonl", "jsonl_path", type=click.Path(dir_okay=False), help="Write it as JSON lines.")
@click.option("--parquet", "parquet_path", type=click.Path(dir_okay=False),
              help="Write it as Parquet (needs pyarrow).")
@click.option("--limit", type=int, default=200, show_default=True, help="Rows shown in the terminal (0: all).")
def timeline(paths, ranks, kinds, severity, since, until, csv_path, jsonl_path, parquet_path, limit) -> None:
    """The merged per-rank timeline of every input, filtered; or exported for pandas.

    \b
    Examples:
      forensics timeline logs/ --rank 2 --severity ERROR
      forensics timeline logs/ --kind cuda-error --kind xid
      forensics timeline logs/ --since 2026-12-02T10:42:36 --csv timeline.csv
    """
    import pandas as pd

    from forensics.case import analyze as run_analysis
    missing = [p for p in paths if p != "-" and not Path(p).exists()]
    if missing and len(missing) == len(paths):
        raise click.UsageError(f"nothing to read: {', '.join(missing)} does not exist.")
    frame = run_analysis(*paths).timeline
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
                raise click.BadParameter(f"{bound!r} is not a time; use ISO form like 2026-12-02T10:42:36") from None
            frame = frame[keep(frame["time"], when)]
    if csv_path:
        frame.to_csv(csv_path, index=False)
    if jsonl_path:
        frame.to_json(jsonl_path, orient="records", lines=True, date_format="iso")
    if parquet_path:
        try:
            frame.to_parquet(parquet_path, index=False)
        except ImportError:
            raise click.UsageError("--parquet needs pyarrow: pip install pyarrow (or use --csv / --jsonl)") from None
    if csv_path or jsonl_path or parquet_path:
        click.echo(f"{len(frame)} events written.", err=True)
        return
    from forensics.report.terminal import render_timeline
    from rich.console import Console
    render_timeline(frame, Console(width=_width(sys.stdout)), limit=limit or None)


PROGRESS_MIN_BYTES = 20 * 1024 * 1024


@contextlib.contextmanager
def _progress(paths, enabled: bool):
    """A progress bar on stderr for large inputs, only when stderr is a terminal."""
    total = _input_bytes(paths)
    if not enabled or total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("reading", total=total)

        def advance(source, parsed):
            progress.update(task, advance=source.size or 0, description=f"reading {source.relpath[-40:]}")
        yield advance


def _input_bytes(paths) -> int:
    total = 0
    for given in paths:
        path = Path(given)
        try:
            if path.is_file():
                total += path.stat().st_size
            elif path.is_dir():
                total += sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        except OSError:
            continue
    return total


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


def _width(stream) -> int | None:
    # A pipe or file gets 80 columns; a terminal its own width.
    return None if getattr(stream, "isatty", lambda: False)() else 80


if __name__ == "__main__":  # pragma: no cover
    main()
