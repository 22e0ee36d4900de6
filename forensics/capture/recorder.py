"""One worker process's record: the ring of its last engine steps, the step in flight,
and the snapshot written from them.

Written so that it cannot hurt the process it runs in:

- no device call, no tensor touched: a snapshot is written when the CUDA context may be
  dead, so it holds only what Python already has (the step facts, thread stacks);
- every public method catches its own failures (``guarded``): a full disk, a read-only
  folder or a vLLM object of an unexpected shape loses a fact or a snapshot, never the
  worker's step;
- the snapshot file is created with ``O_EXCL | O_NOFOLLOW`` (never through a link planted
  at its name, never over a file it did not create) and replaced only by a rename of a
  temporary file it created beside it, after checking that the name still holds the file
  it created.

The file holds one JSON object whose first key is the schema marker (data/capture.toml).
While the worker runs, its content is rewritten in place at the start of each step with
``reason = "live"`` and the step in flight (a few hundred bytes, one ``pwrite``), and its
``done`` flag set to 1 (one byte) when the step returns: a worker killed by SIGKILL or a
fatal signal cannot write anything at its death, so what it was doing must already be on
disk.  On an exception out of execute_model, and at exit, the
whole snapshot (the ring, every thread's stack) replaces it.
"""

from __future__ import annotations

import collections
import functools
import json
import mmap
import os
import socket
import sys
import threading
import time
import traceback
from json.encoder import encode_basestring_ascii as _encode

from forensics.capture.steps import step_facts

SCHEMA = "forensics.capture/1"
LIVE_BYTES = 4096                                      # the live record's mapped page
_DONE_AT = len('{"schema":"%s","done":' % SCHEMA)     # the offset of the live record's done flag


def guarded(fn):
    """``fn`` that returns None instead of raising (the plugin never raises into vLLM)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            return None
    return call


class Recorder:
    """The record of one process (a worker; several workers in one process share it and
    are told apart by their rank in each step)."""

    def __init__(self, directory: str, ring_steps: int = 64, max_requests: int = 64, max_threads: int = 64,
                 max_frames: int = 64, startup: dict | None = None, live_requests: int = 8):
        self.directory = directory
        self.ring: collections.deque = collections.deque(maxlen=ring_steps)
        self.max_requests = max_requests
        self.live_requests = live_requests
        self.host = _host()
        self.max_threads = max_threads
        self.max_frames = max_frames
        self.startup = dict(startup or {})
        self.steps = 0
        self.current: dict | None = None
        self.rank = None
        self.local_rank = None
        self.pid = os.getpid()
        self.path: str | None = None
        self._fd: int | None = None
        self._map = None
        self._identity: tuple[int, int] | None = None
        self._live_len = 0
        self._live_step = None
        # every completed step's capture cost and duration, summed: the live record carries
        # them, so that even a worker killed with SIGKILL leaves its overhead measured
        self.cost_steps, self.cost_us, self.cost_s = 0, 0.0, 0.0
        self._live_head: str | None = None   # the live record's constant part (rank and pid known)
        self._final_for = -1          # the step count when the last full snapshot was written
        self._lock = threading.Lock()
        self.failures = 0             # parts that failed (kept for the snapshot and the tests)

    # -- steps ---------------------------------------------------------------------------

    def begin(self, worker, scheduler_output) -> dict | None:
        try:
            started = time.perf_counter()
            if self.rank is None:
                self._identify(worker)
            self.steps += 1
            facts = step_facts(self.steps, scheduler_output, self.max_requests)
            self.current = facts
            self._write_live()
            facts["capture_us"] = (time.perf_counter() - started) * 1e6
            return facts
        except Exception:
            self.failures += 1
            return None

    def end(self, facts: dict | None, error: BaseException | None = None) -> None:
        try:
            if facts is None:
                return
            started = time.perf_counter()
            facts["t1"] = time.time()
            if error is not None:
                facts["error"] = type(error).__name__
            self.ring.append(facts)
            if self.current is facts:
                self.current = None
            if self._fd is not None and self._live_step == facts.get("step") and error is None:
                # the live record's step returned: a process killed now was between steps
                if self._map is not None:
                    self._map[_DONE_AT] = 0x31          # "1"
                else:
                    os.pwrite(self._fd, b"1", _DONE_AT)
            facts["capture_us"] = round(facts.get("capture_us", 0.0) + (time.perf_counter() - started) * 1e6, 2)
            self.cost_steps += 1
            self.cost_us += facts["capture_us"]
            self.cost_s += facts["t1"] - facts["t0"]
        except Exception:
            self.failures += 1

    def collective(self, name: str) -> None:
        try:
            current = self.current
            if current is not None:
                counts = current.setdefault("collectives", {})
                counts[name] = counts.get(name, 0) + 1
        except Exception:
            self.failures += 1

    def _identify(self, worker) -> None:
        for attr in ("rank", "local_rank"):
            value = getattr(worker, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, attr, value)
        self.startup.setdefault("config", config_of(worker))

    # -- the snapshot file -----------------------------------------------------------------

    def _name(self, n: int) -> str:
        rank = "x" if self.rank is None else str(self.rank)
        return os.path.join(self.directory, f"forensics-snapshot-rank{rank}-pid{self.pid}"
                                            + (f".{n}" if n else "") + ".json")

    def _open(self) -> None:
        """Creates the snapshot file, never through a link, never over an existing file
        (a previous process with the same pid: the next free name)."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for n in range(16):
            path = self._name(n)
            try:
                fd = os.open(path, flags, 0o644)
            except FileExistsError:
                continue
            st = os.fstat(fd)
            self._fd, self.path, self._identity = fd, path, (st.st_dev, st.st_ino)
            self._map_live()
            return
        raise FileExistsError("no free snapshot name")

    def _map_live(self) -> None:
        """The live record's page, mapped: a step's record is then a memory copy, no
        system call, and the page cache keeps it when the process is killed.  The file
        starts as LIVE_BYTES spaces (JSON's whitespace, so the record needs no end
        marker); without mmap the record is written with pwrite."""
        try:
            os.pwrite(self._fd, b" " * LIVE_BYTES, 0)
            self._map = mmap.mmap(self._fd, LIVE_BYTES)
        except Exception:
            self._map = None

    def _write_live(self) -> None:
        """The step in flight, on disk before the step runs (module docstring).  Formatted
        by hand rather than by json.dumps: this runs on every step, and a decode step of a
        small model takes about a millisecond (README.md, "Capture plugin")."""
        if self._fd is None:
            self._open()
        if self._live_head is None:
            # "done" is rewritten in place, one byte, when the step returns (end())
            head = {"schema": SCHEMA, "done": 0, "reason": "live", "pid": self.pid, "rank": self.rank,
                    "local_rank": self.local_rank, "host": self.host}
            self._live_head = json.dumps(head, separators=(",", ":"))[:-1] + ',"steps_seen":'
        current = self.current or {}
        requests = current.get("requests") or ()
        more = current.get("more", 0)
        if len(requests) > self.live_requests:
            more += len(requests) - self.live_requests
            requests = requests[:self.live_requests]
        # the step number and the costs are this module's own ints and floats; what came
        # from vLLM goes through _j / _s
        data = ("%s%d,\"in_flight\":{\"step\":%d,\"t0\":%r,\"tokens\":%s,\"phase\":\"%s\",\"requests\":[%s],"
                "\"more\":%d},\"cost\":{\"steps\":%d,\"capture_us\":%.1f,\"step_s\":%.6f}}" % (
                    self._live_head, self.steps, self.steps, current.get("t0", 0.0), _j(current.get("tokens")),
                    current.get("phase", "idle"),
                    ",".join(["[%s,%s,%s]" % (_s(r[0]), _j(r[1]), _j(r[2])) for r in requests]),
                    more if type(more) is int else 0, self.cost_steps, self.cost_us, self.cost_s)).encode()
        if len(data) < self._live_len:
            data += b" " * (self._live_len - len(data))     # JSON allows trailing whitespace
        if self._map is not None and len(data) <= LIVE_BYTES:
            self._map[:len(data)] = data
        else:
            os.pwrite(self._fd, data, 0)
        self._live_len = len(data)
        self._live_step = current.get("step")

    def _head(self, reason: str) -> dict:
        return {"schema": SCHEMA, "reason": reason, "written": round(time.time(), 6), "pid": self.pid,
                "rank": self.rank, "local_rank": self.local_rank, "host": self.host, "steps_seen": self.steps}

    def snapshot(self, reason: str, error: BaseException | None = None) -> str | None:
        """Writes the whole snapshot (reason: exception | exit); its path, or None."""
        try:
            with self._lock:
                return self._snapshot(reason, error)
        except Exception:
            self.failures += 1
            return None

    def _snapshot(self, reason: str, error: BaseException | None) -> str | None:
        if self._final_for == self.steps and reason == "exit":
            return self.path        # the exception's snapshot already says it; nothing ran since
        if self.path is None:
            self._open()
        doc = self._head(reason)
        doc["in_flight"] = self.current
        doc["steps"] = list(self.ring)
        doc["startup"] = self.startup
        if error is not None:
            doc["error"] = {"type": type(error).__name__, "message": str(error)[:2000],
                            "frames": _frames(error.__traceback__, self.max_frames)}
        doc["threads"] = threads(self.max_threads, self.max_frames)
        doc["capture_failures"] = self.failures
        doc["cost"] = {"steps": self.cost_steps, "capture_us": round(self.cost_us, 1), "step_s": round(self.cost_s, 6)}
        data = json.dumps(doc, separators=(",", ":"), default=str).encode()
        self._replace(data)
        self._final_for = self.steps
        return self.path

    def _replace(self, data: bytes) -> None:
        """Temporary file beside it, then rename - only while the name still holds the
        file this process created."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        tmp = f"{self.path}.tmp{os.getpid()}.{threading.get_ident()}"
        fd = os.open(tmp, flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        try:
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) != self._identity:
                raise FileExistsError(f"{self.path} is no longer the file this process created")
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
        st = os.lstat(self.path)
        self._identity = (st.st_dev, st.st_ino)
        if self._map is not None:
            self._map.close()
            self._map = None            # later live records are written with pwrite
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._live_len = 0
        # a later step's live record goes into this same file again
        self._fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        if os.fstat(self._fd).st_ino != self._identity[1]:
            os.close(self._fd)
            self._fd = None
        else:
            self._live_len = len(data)


def _j(value) -> str:
    """A number (or None) as JSON; anything else as a JSON string."""
    if type(value) is int or type(value) is float:
        return repr(value)
    return "null" if value is None else _encode(str(value))


def _s(value) -> str:
    return "null" if value is None else _encode(str(value))


def _host() -> str | None:
    try:
        return socket.gethostname()
    except Exception:
        return None


def _frames(tb, limit: int) -> list:
    out = []
    for summary in traceback.extract_tb(tb)[-limit:]:
        out.append([summary.filename, summary.lineno, summary.name])
    return out


def threads(max_threads: int, max_frames: int) -> list:
    """Every thread's Python stack, innermost frame last (as a traceback reads), by
    ``sys._current_frames`` - no signal, no device."""
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in list(sys._current_frames().items())[:max_threads]:
        stack = []
        while frame is not None and len(stack) < max_frames:
            code = frame.f_code
            stack.append([code.co_filename, frame.f_lineno, code.co_name])
            frame = frame.f_back
        stack.reverse()
        thread = names.get(ident)
        out.append({"ident": ident, "name": thread.name if thread else None,
                    "daemon": thread.daemon if thread else None, "frames": stack})
    return out


_CONFIG = (
    ("tensor_parallel_size", ("parallel_config", "tensor_parallel_size")),
    ("pipeline_parallel_size", ("parallel_config", "pipeline_parallel_size")),
    ("data_parallel_size", ("parallel_config", "data_parallel_size")),
    ("distributed_executor_backend", ("parallel_config", "distributed_executor_backend")),
    ("enforce_eager", ("model_config", "enforce_eager")),
    ("dtype", ("model_config", "dtype")),
    ("max_model_len", ("model_config", "max_model_len")),
    ("cudagraph_mode", ("compilation_config", "cudagraph_mode")),
    ("compilation_mode", ("compilation_config", "mode")),
    ("max_num_batched_tokens", ("scheduler_config", "max_num_batched_tokens")),
    ("max_num_seqs", ("scheduler_config", "max_num_seqs")),
    ("enable_chunked_prefill", ("scheduler_config", "enable_chunked_prefill")),
    ("block_size", ("cache_config", "block_size")),
    ("kv_cache_dtype", ("cache_config", "cache_dtype")),
)


def config_of(worker) -> dict:
    """The backend choices the worker's vLLM config holds (attribute access only; a
    value is kept as text when it is not a plain JSON value)."""
    out = {}
    config = getattr(worker, "vllm_config", None)
    for key, (part, attr) in _CONFIG:
        try:
            value = getattr(getattr(config, part, None), attr, None)
        except Exception:
            continue
        if value is None:
            continue
        out[key] = value if isinstance(value, (bool, int, float, str)) else str(value)[:200]
    try:
        backend = getattr(getattr(worker, "model_runner", None), "attn_backend", None)
        if backend is not None:
            out["attention_backend"] = getattr(backend, "__name__", str(backend))[:200]
    except Exception:
        pass
    return out
