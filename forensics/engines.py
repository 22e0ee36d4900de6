"""Where the parsing of inputs runs: in this process, across local processes, or on a
Dask cluster.  Every engine returns the same ParsedSources in discovery order, so the
report is byte-identical whichever ran (tests/test_engines.py checks it).

Only the parse stage is distributed: it is where the bytes are.  Timeline and rules need
every event together and run here.  Streams (stdin, archive members) cannot travel to a
worker: they are parsed here.
"""

from __future__ import annotations

import dataclasses

import os
from typing import Any, Callable

from forensics.inputs.sources import Source
from forensics.parsers.base import ParsedSource

PARALLEL_MIN_BYTES = 32 << 20      # below this, starting processes costs more than it saves


def _travels(source: Source) -> bool:
    return source.path is not None and source.opener is None


def parse_local(sources: list[Source], parse: Callable[[Source], ParsedSource], on_source=None) -> list[ParsedSource]:
    out = []
    for source in sources:
        out.append(parse(source))
        if on_source:
            on_source(source, out[-1])
    return out


def parse_processes(sources: list[Source], parse: Callable[[Source], ParsedSource], workers: int | None = None,
                    on_source=None) -> list[ParsedSource]:
    """Large files in parallel on the local cores; everything else here."""
    big = [s for s in sources if _travels(s)]
    if len(big) < 2 or sum(s.size or 0 for s in big) < PARALLEL_MIN_BYTES:
        return parse_local(sources, parse, on_source)
    from concurrent.futures import ProcessPoolExecutor    # only when there is work to share

    results: dict[int, Any] = {}
    from forensics.inputs import progress
    meter = progress.meter()
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1,
                             initializer=progress.attach if meter is not None else None,
                             initargs=(meter,) if meter is not None else ()) as pool:
        futures = {i: pool.submit(parse, s) for i, s in enumerate(sources) if _travels(s)}
        for i, source in enumerate(sources):
            if i not in futures:
                results[i] = parse(source)
        for i, future in futures.items():
            results[i] = future.result()
    ordered = [results[i] for i in range(len(sources))]
    if on_source:
        for source, parsed in zip(sources, ordered):
            on_source(source, parsed)
    return ordered


SCHEDULER_TIMEOUT_S = 5


def parse_dask(sources: list[Source], parse: Callable[[Source], ParsedSource], scheduler: str | None,
               on_source=None) -> list[ParsedSource]:
    """One task per file on a Dask cluster (``scheduler``: its address; None: a local one)."""
    try:
        import dask.bag as db
        from distributed import Client
    except ImportError as exc:
        raise EngineUnavailable("the dask engine needs dask and distributed: pip install 'forensics[dask]'") from exc
    # a worker runs in a folder of its own, often on another host: a path given relative to
    # the folder forensics was started in is made absolute before it travels (the report
    # still shows it as given); that the path is there for the worker - shared storage -
    # is the user's to provide
    travelling = [(i, dataclasses.replace(s, path=s.path.absolute())) for i, s in enumerate(sources) if _travels(s)]
    results: dict[int, ParsedSource] = {}
    try:
        client = Client(scheduler, timeout=SCHEDULER_TIMEOUT_S) if scheduler else \
            Client(processes=False, dashboard_address=None)
    except (OSError, TimeoutError, ValueError) as exc:
        raise EngineUnavailable(f"no Dask scheduler answered at {scheduler} within {SCHEDULER_TIMEOUT_S} s "
                                f"({type(exc).__name__}); check the address (tcp://host:8786) or leave --scheduler "
                                "out for a local cluster") from exc
    try:
        if travelling:
            bag = db.from_sequence([s for _, s in travelling], npartitions=len(travelling))
            for (i, _), parsed in zip(travelling, bag.map(parse).compute()):
                results[i] = parsed
    finally:
        client.close()
    for i, source in enumerate(sources):
        if i not in results:
            results[i] = parse(source)
    ordered = [results[i] for i in range(len(sources))]
    if on_source:
        for source, parsed in zip(sources, ordered):
            on_source(source, parsed)
    return ordered


class EngineUnavailable(RuntimeError):
    """The chosen engine cannot run here (a package is missing)."""
