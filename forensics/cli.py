"""Command line: ``forensics analyze PATH...``.

Exit codes: 0 analysed (whatever the verdict), 2 usage error (bad option, nothing to
read), 1 unexpected internal error (with --debug, the traceback).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from forensics import __version__

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
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown"]), default="terminal",
              show_default=True, help="Report format (markdown: ready to paste into a GitHub issue).")
@click.option("--redact/--no-redact", default=None,
              help="Redact secrets, hosts, IPs, user names and request contents. "
                   "Default: on for markdown, off for terminal and json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write the report to this file instead of stdout.")
@click.option("--explain", is_flag=True, help="Show how each rule reached its conclusion.")
@click.option("--timeline-limit", type=int, default=400, show_default=True,
              help="Most timeline entries in the JSON report (0: all).")
@click.option("--kb", "kb_dirs", multiple=True, type=click.Path(),
              help="A folder of extra known-issue entries (*.toml); may be repeated.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks of internal errors.")
def analyze(paths: tuple[str, ...], fmt: str, redact: bool | None, output: str | None, explain: bool,
            timeline_limit: int, kb_dirs: tuple[str, ...], debug: bool) -> None:
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
        case = run_analysis(*paths, kb_dirs=list(kb_dirs))
    except KnowledgeBaseError as exc:
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
            redact = fmt == "markdown"
        if fmt == "json":
            out.write(case.to_json(timeline_limit=timeline_limit or None, redact=redact) + "\n")
        elif fmt == "markdown":
            from forensics.report.markdown import render as render_markdown
            out.write(render_markdown(case, redact=redact))
        else:
            from forensics.report.terminal import render
            console = Console(file=out, width=_width(out)) if output else Console(width=_width(out))
            render(case, console, explain=explain)
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
    render_comparison(result, Console(width=_width(sys.stdout)))


def _width(stream) -> int | None:
    # A pipe or file gets 80 columns; a terminal its own width.
    return None if getattr(stream, "isatty", lambda: False)() else 80


if __name__ == "__main__":  # pragma: no cover
    main()
