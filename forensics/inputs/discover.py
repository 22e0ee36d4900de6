"""Discovery: every input under the paths given (folders walked, archives expanded into
their members as streams, ``-`` for stdin), as ``Source`` objects (forensics/inputs/sources.py
says what one is).  Its own module so that the walk may use both the sources and the
archive readers, and neither of those imports the other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Iterator

from forensics.inputs.archives import members
from forensics.inputs.sources import Source, Walk, display_name, sniff, stdin_source

MAX_FILES = 10_000            # readable, non-empty files read from the folders given
MAX_DEPTH = 64                # folder depth walked


def discover(paths: list[str], *, follow_links: bool = False, walk: Walk | None = None,
             stdin: BinaryIO | None = None) -> Iterator[Source]:
    """Every input under ``paths`` (folders recursively, files, ``-`` for stdin)."""
    walk = walk if walk is not None else Walk()
    counted = 0
    for given in paths:
        walk.given += 1
        if given == "-":
            # a log, or a bundle (ssh node tar cz logs | forensics analyze -): the stream's
            # first bytes say which, and an archive's members are read from it in turn
            source = stdin_source(stdin)
            walk.check(source)
            yield from _expand(source)
            continue
        path = Path(given)
        if not os.path.lexists(path):
            yield Source(display_name(given), None, "unknown", problems=(f"{display_name(given)}: no such file or directory",))
            continue
        if path.is_dir():
            for source in _walk(path, follow_links, walk):
                walk.check(source)
                if source.readable and source.size != 0:
                    counted += 1
                    if counted > MAX_FILES:
                        yield Source("...", None, "unknown",
                                     problems=(f"more than {MAX_FILES:,} readable input files: the rest were not read; "
                                               "point forensics at the folder of the crashed server's logs",))
                        return
                yield from _expand(source)
        else:
            source = sniff(path, display_name(given))
            walk.check(source)
            yield from _expand(source)


def _expand(source: Source) -> Iterator[Source]:
    """A source as it is, or, for an archive, its members (streams, never extracted)."""
    if source.kind.startswith("archive-"):
        yield from members(source)
    else:
        yield source


def _walk(root: Path, follow_links: bool, walk: Walk) -> Iterator[Source]:
    """Files under ``root`` in sorted order, iteratively (no recursion limit), at most
    MAX_DEPTH deep; links that lead outside ``root`` are listed, not followed."""
    real_root = os.path.realpath(root)
    seen_dirs: set[tuple[int, int]] = set()
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            st = os.stat(folder)
        except OSError as exc:
            yield Source(_rel(folder, root) or display_name(str(folder)), folder, "unknown",
                         problems=(f"{_rel(folder, root)}: cannot read the folder ({exc.strerror or exc})",))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            yield Source(_rel(folder, root), folder, "unknown",
                         problems=(f"{_rel(folder, root)}: cannot list the folder ({exc.strerror or exc})",))
            continue
        subfolders = []
        for entry in entries:
            full = Path(entry.path)
            rel = _rel(full, root)
            try:
                is_link = entry.is_symlink()
                if is_link and not follow_links:
                    target = os.path.realpath(full)
                    if not (target == real_root or target.startswith(real_root + os.sep)):
                        walk.skipped_links += 1
                        yield Source(rel, full, "unknown",
                                     problems=(f"{rel}: a link to {display_name(target)}, outside the folder given; "
                                               "not followed (--follow-links to read it)",))
                        continue
                # through the link: a link to a folder is a folder (read where it is, or
                # followed with --follow-links), never a file to sniff
                if entry.is_dir():
                    if is_link and not follow_links:
                        continue            # a link to a folder inside the tree: read it once, there
                    subfolders.append(full)
                    continue
            except OSError:
                pass
            walk.files_seen += 1
            source = sniff(full, rel)
            if source.readable and source.size != 0:
                walk.readable += 1
            elif source.size == 0:
                walk.empty += 1
            yield source
        if subfolders and depth + 1 > MAX_DEPTH:
            yield Source(_rel(subfolders[0], root), subfolders[0], "unknown",
                         problems=(f"{_rel(folder, root)}: folders nested more than {MAX_DEPTH} deep; "
                                   "the deeper ones were not read",))
            continue
        for sub in reversed(subfolders):
            stack.append((sub, depth + 1))


def _rel(path: Path, root: Path) -> str:
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = str(path)
    return display_name(rel or ".")
