"""Archives (.tar, .tar.gz/.bz2/.xz, .zip) read as streams, never extracted to disk.

A bundle scraped off a dying machine is untrusted: member names with ``..`` or an
absolute path, links, device files, absurd compression ratios (zip bombs), archives
nested too deep, too many members - each is skipped with a problem line saying why, and
reading every member is capped, so nothing is written anywhere and memory stays flat.
Members are yielded in archive order and must be parsed before the next is asked for.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import PurePosixPath
from typing import BinaryIO, Iterator

from forensics.inputs.sources import SNIFF_BYTES, STDIN_NAME, Source, classify, display_name

MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 8 << 30          # expanded size of one member
MAX_TOTAL_BYTES = 32 << 30          # expanded size of one archive
MAX_RATIO = 200                     # expanded / compressed, per zip member
MAX_DEPTH = 2                       # an archive inside an archive, no deeper
MAX_NESTED_ZIP_BYTES = 64 << 20     # a zip inside an archive must fit in memory: cap it
MAX_HEADER_BYTES = 1 << 20          # a PAX or GNU long-name header (tarfile holds it in memory)
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
               zipfile.ZIP_LZMA: "lzma"}   # what Python's zipfile can read


class _BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads a PAX extended header or a GNU long name whole into memory, however
    large the header claims to be: refuse one past MAX_HEADER_BYTES."""

    def _proc_member(self, tarfile_):  # noqa: D401 - tarfile's hook
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                         tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) and self.size > MAX_HEADER_BYTES:
            raise tarfile.HeaderError(f"a {self.size:,}-byte extended header (names and attributes are "
                                      f"capped at {MAX_HEADER_BYTES:,})")
        return super()._proc_member(tarfile_)


class ArchiveLimitError(OSError):
    """Reading a member went past a safety cap."""


class _Capped(io.RawIOBase):
    """A read-once stream that refuses to go past ``limit`` bytes."""

    def __init__(self, head: bytes, rest: BinaryIO, limit: int, what: str) -> None:
        self._head, self._rest, self._limit, self._what, self._seen = head, rest, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
        else:
            data = self._rest.read(len(buffer))
            n = len(data)
            buffer[:n] = data
        self._seen += n
        if self._seen > self._limit:
            raise ArchiveLimitError(f"{self._what} expands past {self._limit:,} bytes; the rest is not read "
                                    "(a zip bomb, or raise the limit)")
        return n


def unsafe_name(name: str) -> str | None:
    """Why a member name is unsafe, or None."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in PurePosixPath(name.replace("\\", "/")).parts:
        return "path escapes the archive (..)"
    return None


def members(archive: Source, depth: int = 1) -> Iterator[Source]:
    kind = archive.kind
    try:
        if kind == "archive-tar":
            yield from _tar_members(archive, depth)
        else:
            yield from _zip_members(archive, depth)
    except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        yield Source(archive.relpath, archive.path, "unknown",
                     problems=(f"{archive.relpath}: archive unreadable or cut short ({exc}); "
                               "members before the damage were read",))


def _member_source(archive: Source, name: str, stream: BinaryIO, size: int | None, depth: int,
                   limit: int) -> Iterator[Source]:
    relpath = f"{archive.relpath}!{display_name(name)}"
    head = stream.read(SNIFF_BYTES)
    used = {"done": False}

    def opener() -> BinaryIO:
        if used["done"]:
            raise OSError(f"{relpath}: an archive member can be read only once")
        used["done"] = True
        return io.BufferedReader(_Capped(head, stream, limit, relpath), buffer_size=1 << 20)

    source = classify(relpath, None, head, size=size, mtime=archive.mtime, opener=opener)
    if source.kind.startswith("archive-"):
        if depth >= MAX_DEPTH:
            yield Source(relpath, None, "unknown",
                         problems=(f"{relpath}: archive nested more than {MAX_DEPTH} deep; skipped",))
            return
        yield from members(source, depth + 1)
        return
    yield source


def _tar_members(archive: Source, depth: int) -> Iterator[Source]:
    count, total = 0, 0
    # a stream ("r|"): never seeks, reads each member once, holds nothing
    with archive.open_binary() as raw, tarfile.open(fileobj=raw, mode="r|", tarinfo=_BoundedTarInfo) as tar:
        for member in tar:
            count += 1
            if count > MAX_MEMBERS:
                yield _skipped(archive, "...", f"more than {MAX_MEMBERS:,} members; the rest is not read")
                return
            why = unsafe_name(member.name)
            if why:
                yield _skipped(archive, member.name, f"{why}; skipped, never extracted")
                continue
            if member.isdir():
                continue
            if member.issym() or member.islnk():
                yield _skipped(archive, member.name, f"link to '{display_name(member.linkname)}'; not followed")
                continue
            if not member.isfile():
                yield _skipped(archive, member.name, "device, fifo or special file; skipped")
                continue
            if member.size > MAX_MEMBER_BYTES or total + member.size > MAX_TOTAL_BYTES or \
                    (archive.is_plain_file and archive.size is not None and member.offset_data + member.size > archive.size):
                # skipping a member in a stream means reading past it: a member claiming
                # 2**62 bytes would never end, so the rest of the archive is left unread
                yield _skipped(archive, member.name, f"claims {member.size:,} bytes, past the size cap or the "
                                                     "archive's own size; the rest of the archive is not read")
                return
            total += member.size
            stream = tar.extractfile(member)
            if stream is None:
                continue
            yield from _member_source(archive, member.name, stream, member.size, depth, MAX_MEMBER_BYTES)


def _zip_members(archive: Source, depth: int) -> Iterator[Source]:
    if archive.is_plain_file:
        handle = open(archive.path, "rb")  # noqa: SIM115
    else:
        # a zip needs random access: a zip inside an archive is held in memory, so only
        # a small one is read
        with archive.open_binary() as raw:
            held = raw.read(MAX_NESTED_ZIP_BYTES + 1)
        if len(held) > MAX_NESTED_ZIP_BYTES:
            what = "a zip read from stdin" if archive.relpath == STDIN_NAME else "a zip inside an archive"
            yield _skipped(archive, "", f"{what} larger than {MAX_NESTED_ZIP_BYTES >> 20} MiB (a zip is read from "
                                        "its end: it must be held in memory); save it to a file and give forensics "
                                        "that file")
            return
        handle = io.BytesIO(held)
    total = 0
    with handle, zipfile.ZipFile(handle) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            yield _skipped(archive, "...", f"{len(infos):,} members, more than {MAX_MEMBERS:,}; "
                                           f"only the first {MAX_MEMBERS:,} are read")
            infos = infos[:MAX_MEMBERS]
        for info in infos:
            why = unsafe_name(info.filename)
            if why:
                yield _skipped(archive, info.filename, f"{why}; skipped, never extracted")
                continue
            if info.is_dir():
                continue
            if info.flag_bits & 0x1:
                yield _skipped(archive, info.filename, "encrypted; decrypt it and give forensics the file")
                continue
            if info.compress_type not in ZIP_METHODS:
                yield _skipped(archive, info.filename, f"compression method {info.compress_type} "
                                                       f"({'Deflate64' if info.compress_type == 9 else 'unsupported'}); "
                                                       "extract it (unzip, 7z) and give forensics the file")
                continue
            mode = (info.external_attr >> 16) & 0o170000
            if mode and mode not in (0o100000,):
                yield _skipped(archive, info.filename, "link or special file; not followed")
                continue
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > MAX_MEMBER_BYTES or ratio > MAX_RATIO and info.file_size > (1 << 20):
                yield _skipped(archive, info.filename,
                               f"claims {info.file_size:,} bytes from {info.compress_size:,} "
                               f"(ratio {ratio:,.0f}): a zip bomb; skipped")
                continue
            if total + info.file_size > MAX_TOTAL_BYTES:
                yield _skipped(archive, info.filename, "past the archive's total size cap; skipped")
                continue
            total += info.file_size
            limit = min(MAX_MEMBER_BYTES, max(info.file_size, 1) + (1 << 16))   # declared size is a promise
            try:
                stream = zf.open(info)
            except (RuntimeError, NotImplementedError, zipfile.BadZipFile, OSError, ValueError) as exc:
                yield _skipped(archive, info.filename, f"unreadable ({exc}); skipped")
                continue
            with stream:
                yield from _member_source(archive, info.filename, stream, info.file_size, depth, limit)


def _skipped(archive: Source, name: str, why: str) -> Source:
    relpath = f"{archive.relpath}!{display_name(name)}"
    return Source(relpath, None, "unknown", problems=(f"{relpath}: {why}",))
