"""``forensics collect``: gather the evidence on the crashed host before it is gone.

Every step is a command (or a read of /proc) with a timeout and an output cap.  A
missing tool, a permission refused, a timeout or a non-zero exit is a line in the
manifest, never a failure of the collection.  Nothing is written but the bundle given
with ``-o`` (a .tar.gz): outputs are held in memory up to a cap, logs and core dumps are
streamed into it from where they lie.  Text is redacted by the same rules as reports
unless ``redact=False`` (core dumps are binary and go in as they are, if at all).

What it writes is what ``forensics analyze`` reads: the kernel log raw and with
``-T``, the host clock (so dmesg's seconds since boot land on the wall clock), ``nvidia-smi
-q`` and a per-GPU query, the PyTorch/vLLM environment report, ``pip freeze``, the
variables that matter, the logs given, core dumps, and ``MANIFEST.txt``.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator

from forensics import __version__, knowledge
from forensics.redact import Redactor

STEP_TIMEOUT = 60                 # seconds per command
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
        where = f" -> {self.member}" if self.member else ""
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
    core_dirs: tuple[str, ...] = ()
    redact: bool = True
    timeout: float = STEP_TIMEOUT
    python: str = sys.executable


class Bundle:
    """The .tar.gz being written: members from bytes or from a re-readable stream."""

    def __init__(self, path: str, redact: bool) -> None:
        self._tar = tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.redactor = Redactor() if redact else None
        self.members: set[str] = set()

    def text(self, name: str, data: bytes) -> tuple[int, str]:
        if self.redactor is not None:
            data = self.redactor.text(data.decode("utf-8", "replace")).encode("utf-8")
        return self.raw(name, data)

    def raw(self, name: str, data: bytes) -> tuple[int, str]:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self.members.add(name)
        return len(data), hashlib.sha256(data).hexdigest()

    def stream(self, name: str, open_: Callable[[], Iterator[bytes]]) -> tuple[int, str]:
        """A member written from chunks produced twice: once to learn the size (tar
        needs it first), once to write; nothing is spooled anywhere."""
        size = sum(len(chunk) for chunk in open_())
        digest = hashlib.sha256()

        class _Reader(io.RawIOBase):
            def __init__(self) -> None:
                self._chunks, self._rest = open_(), b""

            def readable(self) -> bool:
                return True

            def readinto(self, buffer) -> int:
                while not self._rest:
                    chunk = next(self._chunks, None)
                    if chunk is None:
                        return 0
                    digest.update(chunk)
                    self._rest = chunk
                n = min(len(buffer), len(self._rest))
                buffer[:n], self._rest = self._rest[:n], self._rest[n:]
                return n

        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, int(time.time()), 0o644
        self._tar.addfile(info, io.BufferedReader(_Reader(), 1 << 20))
        self.members.add(name)
        return size, digest.hexdigest()

    def close(self) -> None:
        self._tar.close()


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
            path = Path(given)
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()) if path.is_dir() else [path]
            for file in files:
                self.copy_log(file, path if path.is_dir() else file.parent)

    def copy_log(self, file: Path, root: Path) -> None:
        started = time.monotonic()
        name = f"logs/{root.name}/{file.relative_to(root)}" if file != root else f"logs/{file.name}"
        step = Step(f"log {file.name}", "ok")
        try:
            size = file.stat().st_size
            if not file.is_file():
                raise OSError("not a regular file")
        except OSError as exc:
            step.status, step.detail = "failed", f"{file}: {exc.strerror if hasattr(exc, 'strerror') and exc.strerror else exc}"
            self.steps.append(step)
            return
        limit = min(size, MAX_LOG)
        redactor = self.bundle.redactor

        def chunks() -> Iterator[bytes]:
            # read to the size seen now (a log still written grows), line by line so
            # that redaction sees whole lines; a fresh redactor per pass gives the same text
            local = Redactor() if redactor is not None else None
            with open(file, "rb") as fh:
                left = limit
                while left > 0:
                    line = fh.readline(min(left, 1 << 20))
                    if not line:
                        break
                    left -= len(line)
                    yield local.text(line.decode("utf-8", "replace")).encode() if local is not None else line

        try:
            step.member = name
            step.size, step.sha256 = self.bundle.stream(name, chunks)
            step.detail = f"copied{' (redacted)' if redactor is not None else ''}" + \
                (f"; cut at {MAX_LOG:,} bytes of {size:,}" if size > MAX_LOG else "")
        except OSError as exc:
            step.status, step.detail, step.member = "failed", f"{file}: {exc.strerror or exc}", None
        step.seconds = time.monotonic() - started
        self.steps.append(step)

    def core_dumps(self) -> None:
        total = 0
        for path in _core_candidates(self.options):
            started = time.monotonic()
            try:
                size = path.stat().st_size
            except OSError as exc:
                self.steps.append(Step(f"core {path.name}", "failed", f"{path}: {exc.strerror or exc}"))
                continue
            if size > MAX_CORE or total + size > MAX_CORES:
                self.steps.append(Step(f"core {path.name}", "skipped",
                                       f"{path}: {size:,} bytes, past the cap ({MAX_CORE:,} each, {MAX_CORES:,} in all); "
                                       "copy it by hand if it matters"))
                continue

            def chunks(p=path, n=size) -> Iterator[bytes]:
                with open(p, "rb") as fh:
                    left = n
                    while left > 0 and (chunk := fh.read(min(left, 1 << 20))):
                        left -= len(chunk)
                        yield chunk
            step = Step(f"core {path.name}", "ok", f"from {path.parent}", f"cores/{path.name}")
            try:
                step.size, step.sha256 = self.bundle.stream(step.member, chunks)
                total += step.size
            except OSError as exc:
                step.status, step.detail, step.member = "failed", f"{path}: {exc.strerror or exc}", None
            step.seconds = time.monotonic() - started
            self.steps.append(step)
        if not any(s.name.startswith("core ") for s in self.steps):
            self.steps.append(Step("core dumps", "ok", "none found in " + ", ".join(
                str(d) for d in _core_dirs(self.options)) or "no folder"))

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


def _core_dirs(options: Options) -> list[Path]:
    dirs = [Path(d) for d in options.core_dirs]
    try:
        pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
        if pattern.startswith("/"):
            dirs.append(Path(pattern).parent)
    except OSError:
        pass
    dirs += [Path(d) for d in CORE_DIRS] + [Path.cwd()]
    dirs += [Path(p) if Path(p).is_dir() else Path(p).parent for p in options.logs]
    seen, out = set(), []
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


def _core_candidates(options: Options) -> Iterable[Path]:
    seen = set()
    for folder in _core_dirs(options):
        for pattern in CORE_GLOBS:
            for name in sorted(glob.glob(str(folder / pattern))):
                path = Path(name)
                if path.is_file() and not path.is_symlink() and path.resolve() not in seen and _is_core(path):
                    seen.add(path.resolve())
                    yield path


def _is_core(path: Path) -> bool:
    """An ELF core file (CPU cores are ET_CORE; CUDA core dumps are ELF too), or a
    compressed one where systemd keeps them - not any file whose name starts with core."""
    if path.parent == Path("/var/lib/systemd/coredump"):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(18)
    except OSError:
        return False
    if not head.startswith(ELF_MAGIC):
        return False
    if "nvcudmp" in path.name or path.name.startswith("cuda_coredump"):
        return True
    e_type = int.from_bytes(head[16:18], "little" if head[5:6] == b"\x01" else "big")
    return e_type == 4                      # ET_CORE


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]


def collect(options: Options, output: str, env: dict | None = None) -> list[Step]:
    """Run every step into the bundle ``output``; returns the steps (also in MANIFEST.txt)."""
    bundle = Bundle(output, options.redact)
    started = datetime.now(timezone.utc).astimezone()
    try:
        steps = Collector(options, bundle, env).run()
        manifest = ["forensics collect manifest", f"forensics: {__version__}",
                    f"collected: {started.isoformat(timespec='seconds')}",
                    f"redacted: {'yes' if options.redact else 'no'}"]
        manifest += [s.line() for s in steps]
        bundle.text("MANIFEST.txt", ("\n".join(manifest) + "\n").encode())
    finally:
        bundle.close()
    return steps
