"""``forensics collect``: gather the evidence on the crashed host before it is gone.

Every step is a command (or a read of /proc) with a timeout and an output cap.  A
missing tool, a permission refused, a timeout or a non-zero exit is a line in the
manifest, never a failure of the collection.  Text is redacted by the same rules as
reports unless ``redact=False`` (core dumps are binary and go in as they are, if at all);
the manifest counts what was redacted, per kind, and says which members were not.

Safe to run as root on a host whose log folder the server's user can write:

- every file is opened relative to its folder's descriptor with ``O_NOFOLLOW`` and checked
  on the descriptor (``fstat``): a link swapped in between a check and an open is never
  followed, a FIFO or device never read;
- each file is read once, to the size it had when opened (a log truncated or rotated
  while read gives a shorter member, said so, never a corrupt bundle);
- core dumps found by sweeping folders are taken only when owned by the server's user
  (the owners of the logs given); another user's ``/tmp/core.N`` stays where it is;
- the bundle is written to a private temporary file beside ``-o`` and renamed into place
  only when complete: a bundle exists complete, or the run says it failed.

What it writes is what ``forensics analyze`` reads: the kernel log raw and with
``-T``, the host clock (so dmesg's seconds since boot land on the wall clock), ``nvidia-smi
-q`` and a per-GPU query, the PyTorch/vLLM environment report, ``pip freeze``, the
variables that matter, the logs given, core dumps, and ``MANIFEST.txt``.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import hashlib
import importlib.util
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from forensics import __version__, inert, knowledge
from forensics.redact import Redactor

STEP_TIMEOUT = 60                 # seconds per command
LOG_TIMEOUT = 600                 # seconds to copy one log (redacted at ~10 MB/s: a few GB)
BLOCK = 4 << 20                   # bytes read and redacted at a time
LONG_LINE = 1 << 20               # a "line" past this many bytes without a newline is cut here
MAX_OUTPUT = 64 << 20             # bytes kept of one command's output
MAX_LOG = 4 << 30                 # bytes of one log copied into the bundle
MAX_CORE = 4 << 30                # one core dump
MAX_CORES = 16 << 30              # all core dumps together
GPU_QUERY = ("name,pci.bus_id,driver_version,serial,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
             "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,"
             "remapped_rows.failure,temperature.gpu,clocks_event_reasons.active")
# where core dumps are looked for, besides the folders of the logs given and the
# kernel's core_pattern: CUDA's default (cwd) and the usual spool folders
CORE_GLOBS = ("core", "core.*", "*.nvcudmp", "*.nvcudmp.*", "cuda_coredump*")
ELF_MAGIC = b"\x7fELF"
CORE_DIRS = ("/var/lib/systemd/coredump", "/var/crash", "/tmp")
SYSTEMD_CORES = "/var/lib/systemd/coredump"
# a file is opened as itself or not at all: never through a link (O_NOFOLLOW), never
# blocking on a FIFO planted in the folder (O_NONBLOCK; cleared for reading regular files)
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


@dataclasses.dataclass
class Step:
    """What one step did: its line in the manifest."""

    name: str
    status: str                   # ok | failed | unavailable | timed out | skipped
    detail: str = ""
    member: str | None = None     # where its output is in the bundle
    size: int = 0
    sha256: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        where = f" -> {_shown(self.member)}" if self.member else ""
        facts = [self.detail] if self.detail else []
        if self.member:
            facts.append(f"{self.size} bytes")
            facts.append(f"sha256 {self.sha256}")
        facts.append(f"{self.seconds:.2f} s")
        return f"step {self.name}: {self.status} ({', '.join(facts)}){where}"


@dataclasses.dataclass
class Options:
    logs: tuple[str, ...] = ()
    k8s_pod: str | None = None
    namespace: str | None = None
    containers: tuple[str, ...] = ()
    core_dirs: tuple[str, ...] = ()    # given by the operator: every core in them is taken
    redact: bool = True
    timeout: float = STEP_TIMEOUT
    log_timeout: float = LOG_TIMEOUT
    python: str = sys.executable


class Bundle:
    """The .tar.gz being written, into a private temporary file beside its path: renamed
    into place by ``commit`` once complete, removed by ``discard`` if the run fails."""

    def __init__(self, path: str, redact: bool) -> None:
        self.path = path
        folder = os.path.dirname(os.path.abspath(path))
        fd, self.partial = tempfile.mkstemp(prefix=".forensics-collect-", suffix=".partial", dir=folder)
        self._file = os.fdopen(fd, "wb")
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)              # never collected into itself
        self._tar = tarfile.open(fileobj=self._file, mode="w:gz", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.redactor = Redactor() if redact else None
        self.members: set[str] = set()
        self.unredacted: list[str] = []                     # members that went in as they were

    def text(self, name: str, data: bytes) -> tuple[int, str]:
        if self.redactor is not None:
            data = self.redactor.lines(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        else:
            self.unredacted.append(name)
        return self.raw(name, data)

    def raw(self, name: str, data: bytes) -> tuple[int, str]:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self.members.add(name)
        return len(data), hashlib.sha256(data).hexdigest()

    def spooled(self, name: str, spool, size: int, digest: str) -> tuple[int, str]:
        """A member from a spool file already written (its size known only now)."""
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, int(time.time()), 0o644
        spool.seek(0)
        self._tar.addfile(info, spool)
        self.members.add(name)
        return size, digest

    def from_descriptor(self, name: str, fd: int, size: int) -> tuple[int, str, int]:
        """A member of exactly ``size`` bytes read once from ``fd``: (size, sha256, bytes
        short).  A file that shrank while read is padded with NULs to the size tar was
        promised (and the caller says so): the bundle stays whole."""
        digest = hashlib.sha256()
        short = 0

        class _Reader(io.RawIOBase):
            def __init__(self) -> None:
                self.left = size

            def readable(self) -> bool:
                return True

            def readinto(self, buffer) -> int:
                nonlocal short
                if self.left <= 0:
                    return 0
                want = min(len(buffer), self.left, 1 << 20)
                chunk = os.read(fd, want)
                if not chunk:                                   # shorter than when opened
                    chunk = bytes(want)
                    short += want
                digest.update(chunk)
                n = len(chunk)
                buffer[:n] = chunk
                self.left -= n
                return n

        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, int(time.time()), 0o644
        self._tar.addfile(info, io.BufferedReader(_Reader(), 1 << 20))
        self.members.add(name)
        return size, digest.hexdigest(), short

    def commit(self) -> None:
        self._tar.close()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.partial, self.path)       # replaces a link at -o itself, never its target

    def discard(self) -> None:
        try:
            self._tar.close()
        except Exception:  # noqa: BLE001 - the bundle is being thrown away
            pass
        self._file.close()
        try:
            os.unlink(self.partial)
        except OSError:
            pass


def run_command(argv: list[str], timeout: float, env: dict | None = None) -> tuple[str, bytes, str]:
    """(status, output, detail) of one command; never raises."""
    tool = shutil.which(argv[0], path=(env or os.environ).get("PATH"))
    if tool is None:
        return "unavailable", b"", f"{argv[0]} not found"
    try:
        proc = subprocess.Popen([tool, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env)
    except OSError as exc:
        return "unavailable", b"", f"{argv[0]}: {exc.strerror or exc}"
    chunks, kept = [], 0
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        while True:
            if time.monotonic() > deadline:
                timed_out = True
                break
            try:
                data = proc.stdout.read(1 << 16)
            except BlockingIOError:
                data = None
            if data:
                if kept < MAX_OUTPUT:
                    chunks.append(data[:MAX_OUTPUT - kept])
                    kept += len(chunks[-1])
                continue
            if data == b"" or (data is None and proc.poll() is not None):
                if data is None:
                    continue
                break
            time.sleep(0.01)
    finally:
        if timed_out or proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    output = b"".join(chunks)
    if timed_out:
        return "timed out", output, f"no answer within {timeout:g} s"
    if proc.returncode != 0:
        first = output.decode("utf-8", "replace").strip().splitlines()[:1]
        return "failed", output, f"exit {proc.returncode}" + (f": {first[0][:200]}" if first else "")
    return "ok", output, "exit 0"


class Collector:
    def __init__(self, options: Options, bundle: Bundle, env: dict | None = None) -> None:
        self.options, self.bundle, self.env = options, bundle, env
        self.steps: list[Step] = []
        self.log_owners: set[int] = set()          # owners of the log files read

    # -- the steps --------------------------------------------------------------------

    def command(self, name: str, argv: list[str], member: str, redact: bool = True,
                transform: Callable[[bytes], bytes] | None = None) -> Step:
        started = time.monotonic()
        status, output, detail = run_command(argv, self.options.timeout, self.env)
        step = Step(name, status, detail)
        if output and status in ("ok", "failed", "timed out"):
            if transform is not None and status == "ok":
                output = transform(output)
            step.member = member
            step.size, step.sha256 = (self.bundle.text if redact else self.bundle.raw)(member, output)
        step.seconds = time.monotonic() - started
        self.steps.append(step)
        return step

    def clock(self) -> None:
        started = time.monotonic()
        now = datetime.now(timezone.utc).astimezone()
        try:
            uptime = float(Path("/proc/uptime").read_text().split()[0])
        except (OSError, ValueError, IndexError) as exc:
            self.steps.append(Step("clock", "unavailable", f"/proc/uptime: {exc}"))
            return
        boot = now.timestamp() - uptime
        boot_at = datetime.fromtimestamp(boot, now.tzinfo)
        text = ("forensics collect clock\n"
                f"date: {now.isoformat(timespec='seconds')}\n"
                f"uptime: {uptime:.2f}\n"
                f"boot time: {boot_at.isoformat(timespec='microseconds')}\n")
        step = Step("clock", "ok", "date and /proc/uptime", "host/clock.txt")
        step.size, step.sha256 = self.bundle.raw(step.member, text.encode())
        step.seconds = time.monotonic() - started
        self.steps.append(step)

    def environment_report(self) -> None:
        python = self.options.python
        if _importable(python, "vllm", self.env):
            self.command("collect-env", [python, "-m", "vllm.collect_env"], "env/collect_env.txt")
        elif _importable(python, "torch", self.env):
            self.command("collect-env", [python, "-m", "torch.utils.collect_env"], "env/collect_env.txt")
        else:
            self.steps.append(Step("collect-env", "unavailable", f"neither vllm nor torch importable by {python}"))
        self.command("pip-freeze", [python, "-m", "pip", "freeze"], "env/pip_freeze.txt")

    def variables(self) -> None:
        prefixes = tuple(knowledge.load("env_reports")["variables"]["prefixes"])
        source = self.env if self.env is not None else os.environ
        chosen = sorted((k, v) for k, v in source.items() if k.startswith(prefixes))
        step = Step("environment", "ok", f"{len(chosen)} variables ({', '.join(p.rstrip('_') for p in prefixes[:5])} ...)")
        if chosen:
            step.member = "env/environment.txt"
            body = "".join(f"{k}={v}\n" for k, v in chosen).encode()
            step.size, step.sha256 = self.bundle.text(step.member, body)
        self.steps.append(step)

    def logs(self) -> None:
        for given in self.options.logs:
            root = Path(given)
            try:
                fd, st = _open_given(root)
            except OSError as exc:
                why = "a symbolic link: not followed (give the file it points to)" if exc.errno == errno.ELOOP \
                    else _why(exc)
                self.steps.append(Step(f"log {_shown(root.name or given)}", "failed", f"{_shown(given)}: {why}"))
                continue
            try:
                if stat.S_ISDIR(st.st_mode):
                    for relative, file_fd, file_st, problem in _walk(fd, root.name or "logs"):
                        self._log_entry(relative, file_fd, file_st, problem)
                else:
                    self._log_entry(root.name, fd, st, None)
                    fd = None
            finally:
                if fd is not None:
                    os.close(fd)

    def _log_entry(self, relative: str, fd: int | None, st: os.stat_result | None, problem: str | None) -> None:
        name = f"logs/{relative}"
        label = f"log {_shown(relative.rsplit('/', 1)[-1])}"
        if fd is None:
            self.steps.append(Step(label, "skipped", f"{_shown(relative)}: {problem}"))
            return
        try:
            if (st.st_dev, st.st_ino) == self.bundle.identity:
                return                                   # the bundle being written, in the folder
            if st.st_uid not in (0, os.geteuid()):
                self.log_owners.add(st.st_uid)
            if os.geteuid() == 0 and st.st_nlink > 1 and st.st_uid == 0:
                # a hard link to a root file planted in the folder (without protected_hardlinks)
                self.steps.append(Step(label, "skipped", f"{_shown(relative)}: a root-owned file with "
                                                         f"{st.st_nlink} links; copy it by hand if it is a log"))
                return
            self.copy_log(fd, st, name, label)
        finally:
            os.close(fd)

    def copy_log(self, fd: int, st: os.stat_result, name: str, label: str) -> None:
        """One log, read once from its descriptor to the size it had when opened, redacted
        block by block into a private spool, then into the bundle."""
        started = time.monotonic()
        deadline = started + self.options.log_timeout
        size = st.st_size
        limit = min(size, MAX_LOG)
        redactor = self.bundle.redactor
        step = Step(label, "ok")
        _blocking(fd)
        try:
            with tempfile.TemporaryFile(prefix=".forensics-collect-") as spool:
                digest, written, read, carry, cut = hashlib.sha256(), 0, 0, b"", None
                while read < limit:
                    if time.monotonic() > deadline:
                        cut = f"timed out: cut after {self.options.log_timeout:g} s at {read:,} of {size:,} bytes"
                        break
                    chunk = os.read(fd, min(BLOCK, limit - read))
                    if not chunk:
                        break
                    read += len(chunk)
                    block, carry = _whole_lines(carry + chunk, last=read >= limit)
                    out = _redacted(redactor, block)
                    spool.write(out)
                    digest.update(out)
                    written += len(out)
                if carry:
                    out = _redacted(redactor, carry)
                    spool.write(out)
                    digest.update(out)
                    written += len(out)
                step.member = name
                step.size, step.sha256 = self.bundle.spooled(name, spool, written, digest.hexdigest())
            facts = ["copied (redacted)" if redactor is not None else "copied (not redacted: --no-redact)"]
            if cut:
                step.status = "timed out"
                facts.append(cut)
            elif read < limit:
                facts.append(f"shrank while read: {read:,} of the {size:,} bytes it had when opened "
                             "(rotated or truncated?)")
            if size > MAX_LOG:
                facts.append(f"cut at {MAX_LOG:,} bytes of {size:,}")
            step.detail = "; ".join(facts)
            if redactor is None:
                self.bundle.unredacted.append(name)
        except OSError as exc:
            step.status, step.detail, step.member = "failed", f"{_shown(name)}: {_why(exc)}", None
        step.seconds = time.monotonic() - started
        self.steps.append(step)

    def core_dumps(self) -> None:
        total = 0
        owners = self.server_uids()
        for path, fd, st, given in _core_candidates(self.options):
            started = time.monotonic()
            label = f"core {_shown(path.name)}"
            try:
                owner = _core_owner(path, st)
                if not given and owner not in owners:
                    self.steps.append(Step(label, "skipped", f"{_shown(str(path))}: owned by uid {owner}, not the server's "
                                           f"({', '.join(map(str, sorted(owners))) or 'none known'}); give its folder "
                                           "with --core-dir to take it"))
                    continue
                size = st.st_size
                if size > MAX_CORE or total + size > MAX_CORES:
                    self.steps.append(Step(label, "skipped",
                                           f"{_shown(str(path))}: {size:,} bytes, past the cap ({MAX_CORE:,} each, "
                                           f"{MAX_CORES:,} in all); copy it by hand if it matters"))
                    continue
                step = Step(label, "ok", f"from {_shown(str(path.parent))}; not redacted (binary)", f"cores/{_safe(path.name)}")
                _blocking(fd)
                try:
                    step.size, step.sha256, short = self.bundle.from_descriptor(step.member, fd, size)
                    total += step.size
                    self.bundle.unredacted.append(step.member)
                    if short:
                        step.status = "failed"
                        step.detail += f"; shrank while read: its last {short:,} bytes are NULs"
                except OSError as exc:
                    step.status, step.detail, step.member = "failed", f"{_shown(str(path))}: {_why(exc)}", None
                step.seconds = time.monotonic() - started
                self.steps.append(step)
            finally:
                os.close(fd)
        if not any(s.name.startswith("core ") for s in self.steps):
            self.steps.append(Step("core dumps", "ok", "none found in " + (", ".join(
                _shown(str(d)) for d, _ in _core_dirs(self.options)) or "no folder")))

    def server_uids(self) -> set[int]:
        """Whose core dumps a sweep may take: the owners of the logs given (the server's
        user), and the user running collect when it is not root."""
        uids = set(self.log_owners)
        for given in self.options.logs:
            try:
                uids.add(os.stat(given).st_uid)
            except OSError:
                pass
        if os.geteuid() != 0:
            uids.add(os.geteuid())
        return uids

    def kubernetes(self) -> None:
        pod, options = self.options.k8s_pod, self.options
        ns = ["-n", options.namespace] if options.namespace else []
        self.command(f"kubectl-logs {pod}", ["kubectl", "logs", pod, *ns, "--all-containers", "--timestamps"],
                     f"logs/k8s_{_safe(pod)}.log")
        self.command(f"kubectl-logs-previous {pod}", ["kubectl", "logs", pod, *ns, "--all-containers", "--timestamps",
                                                      "--previous"], f"logs/k8s_{_safe(pod)}_previous.log")

    def docker(self, container: str) -> None:
        self.command(f"docker-logs {container}", ["docker", "logs", "-t", container], f"logs/docker_{_safe(container)}.log")

    # -- all of it --------------------------------------------------------------------

    def run(self) -> list[Step]:
        self.command("dmesg", ["dmesg"], "host/dmesg.txt")
        self.command("dmesg-T", ["dmesg", "-T"], "host/dmesg_T.txt")
        self.clock()
        self.command("nvidia-smi-q", ["nvidia-smi", "-q"], "gpu/nvidia-smi_q.txt")
        self.command("nvidia-smi-query", ["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv"],
                     "gpu/nvidia-smi_query.txt", transform=query_as_report)
        self.environment_report()
        self.variables()
        self.logs()
        if self.options.k8s_pod:
            self.kubernetes()
        for container in self.options.containers:
            self.docker(container)
        self.core_dumps()
        return self.steps


def query_as_report(output: bytes) -> bytes:
    """nvidia-smi's CSV (one header, one row per GPU) as a key/value report, the shape
    the analyzer reads for every GPU report."""
    rows = [line.split(", ") for line in output.decode("utf-8", "replace").splitlines() if line.strip()]
    if len(rows) < 2:
        return output
    header, out = rows[0], ["forensics collect nvidia-smi query"]
    for row in rows[1:]:
        fields = dict(zip(header, row))
        bus = fields.get("pci.bus_id", "").strip()
        out.append(f"GPU {bus}" if bus else "GPU")
        out.extend(f"    {key.split(' ')[0]} : {value.strip()}" for key, value in fields.items())
    return ("\n".join(out) + "\n").encode()


def _importable(python: str, module: str, env: dict | None) -> bool:
    if python == sys.executable:
        return importlib.util.find_spec(module) is not None
    status, _, _ = run_command([python, "-c", f"import importlib.util,sys; sys.exit(importlib.util.find_spec('{module}') is None)"],
                               30, env)
    return status == "ok"


def _core_dirs(options: Options) -> list[tuple[Path, bool]]:
    """(folder, given by the operator) where core dumps are looked for."""
    dirs = [(Path(d), True) for d in options.core_dirs]
    try:
        pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
        if pattern.startswith("/"):
            dirs.append((Path(pattern).parent, False))
    except OSError:
        pass
    dirs += [(Path(d), False) for d in CORE_DIRS] + [(Path.cwd(), False)]
    dirs += [(Path(p) if Path(p).is_dir() else Path(p).parent, False) for p in options.logs]
    seen, out = set(), []
    for d, given in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            out.append((d, given))
    return out


def _core_candidates(options: Options) -> Iterator[tuple[Path, int, os.stat_result, bool]]:
    """(path, open descriptor, its fstat, given) of each core dump: opened without
    following links, checked on the descriptor; the caller closes it."""
    seen = set()
    for folder, given in _core_dirs(options):
        try:
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            names = sorted(e.name for e in os.scandir(dir_fd))
            for name in names:
                if not any(fnmatch.fnmatchcase(name, g) for g in CORE_GLOBS) and str(folder) != SYSTEMD_CORES:
                    continue
                try:
                    fd = os.open(name, OPEN_FILE, dir_fd=dir_fd)
                except OSError:
                    continue                                  # a link (ELOOP), gone, refused
                st = os.fstat(fd)
                key = (st.st_dev, st.st_ino)
                if not stat.S_ISREG(st.st_mode) or key in seen or not _is_core(fd, name, str(folder)):
                    os.close(fd)
                    continue
                seen.add(key)
                yield folder / name, fd, st, given
        finally:
            os.close(dir_fd)


def _is_core(fd: int, name: str, folder: str) -> bool:
    """An ELF core file (CPU cores are ET_CORE; CUDA core dumps are ELF too), or a
    compressed one where systemd keeps them - not any file whose name starts with core."""
    if folder == SYSTEMD_CORES:
        return name.startswith("core.")
    try:
        head = os.pread(fd, 18, 0)
    except OSError:
        return False
    if not head.startswith(ELF_MAGIC):
        return False
    if "nvcudmp" in name or name.startswith("cuda_coredump"):
        return True
    e_type = int.from_bytes(head[16:18], "little" if head[5:6] == b"\x01" else "big")
    return e_type == 4                      # ET_CORE


def _core_owner(path: Path, st: os.stat_result) -> int:
    """Whose process dumped it: systemd-coredump keeps every core as root and names the
    owner (core.COMM.UID.BOOT_ID.PID.USEC[.zst]); elsewhere the file's owner."""
    if str(path.parent) == SYSTEMD_CORES:
        parts = path.name.split(".")
        if parts[-1] in ("zst", "lz4", "xz", "gz"):
            parts = parts[:-1]
        if len(parts) >= 6 and parts[-4].isdigit():
            return int(parts[-4])
    return st.st_uid


def _open_given(path: Path) -> tuple[int, os.stat_result]:
    """A log or folder named on the command line.  A folder is opened as named (the
    operator chose it); a file without following a final link (the server's user may
    have swapped it for one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except NotADirectoryError:
        fd = os.open(path, OPEN_FILE)
    st = os.fstat(fd)
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file or a folder")
    return fd, st


def _walk(dir_fd: int, prefix: str, depth: int = 0) -> Iterator[tuple[str, int | None, os.stat_result | None, str | None]]:
    """(relative name, descriptor, fstat, problem) of each file under the folder open at
    ``dir_fd``, in name order.  Every entry is opened relative to its folder's descriptor
    with O_NOFOLLOW and judged by fstat of what was opened: a link put in place of a file
    or a folder at any moment is refused, never followed.  The caller closes descriptors."""
    try:
        names = sorted(e.name for e in os.scandir(dir_fd))
    except OSError as exc:
        yield prefix, None, None, f"cannot list: {_why(exc)}"
        return
    for name in names:
        relative = f"{prefix}/{name}"
        try:
            fd = os.open(name, OPEN_FILE, dir_fd=dir_fd)
        except OSError as exc:
            yield relative, None, None, ("a symbolic link: not followed" if exc.errno == errno.ELOOP else _why(exc))
            continue
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            yield relative, fd, st, None
        elif stat.S_ISDIR(st.st_mode) and depth < 32:
            try:
                yield from _walk(fd, relative, depth + 1)
            finally:
                os.close(fd)
        else:
            os.close(fd)
            yield relative, None, None, "not a regular file (a FIFO, socket or device): not read"


def _blocking(fd: int) -> None:
    os.set_blocking(fd, True)


def _whole_lines(data: bytes, last: bool) -> tuple[bytes, bytes]:
    """(the complete lines of ``data``, the rest): redaction sees whole lines; a "line"
    past LONG_LINE bytes is cut there (a NUL hole, a binary blob)."""
    if last:
        return data, b""
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) > LONG_LINE:
        return data, b""
    return data[:end], data[end:]


def _redacted(redactor: Redactor | None, block: bytes) -> bytes:
    """A block of log lines, redacted (bytes kept as they were where no rule matched:
    undecodable bytes round-trip); a run of NULs (a hole left by copytruncate) as it is."""
    if redactor is None or not block or not block.strip(b"\0"):
        return block
    return redactor.lines(block.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _shown(text: str) -> str:
    """A name as the manifest shows it (inert.name): one line, control and invisible
    characters and backslashes escaped, so that a file name cannot forge a manifest line."""
    return inert.name(text)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


def collect(options: Options, output: str, env: dict | None = None) -> list[Step]:
    """Run every step into the bundle ``output``; returns the steps (also in MANIFEST.txt).
    The bundle appears at ``output`` complete, or not at all (the error is raised)."""
    bundle = Bundle(output, options.redact)
    started = datetime.now(timezone.utc).astimezone()
    try:
        steps = Collector(options, bundle, env).run()
        manifest = ["forensics collect manifest", f"forensics: {__version__}",
                    f"collected: {started.isoformat(timespec='seconds')}",
                    f"redacted: {_redaction_line(bundle)}"]
        manifest += [s.line() for s in steps]
        bundle.raw("MANIFEST.txt", ("\n".join(manifest) + "\n").encode("utf-8", "surrogateescape"))
        bundle.commit()
    except BaseException:
        bundle.discard()
        raise
    return steps


def _redaction_line(bundle: Bundle) -> str:
    """What the manifest says of redaction: the counts per kind, and the members that
    went in as they were - never a bare "yes"."""
    if bundle.redactor is None:
        return "no (--no-redact): every member is as it was on the host"
    counts = bundle.redactor.summary()
    said = f"{sum(counts.values())} values ({', '.join(f'{k} {n}' for k, n in counts.items())})" if counts else "0 values"
    binary = [m for m in bundle.unredacted if m.startswith("cores/")]
    return said + (f"; not redacted (binary): {len(binary)} core dumps" if binary else "")
