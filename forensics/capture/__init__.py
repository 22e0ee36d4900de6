"""The vLLM capture plugin: what each worker was doing when it died, written by the
worker itself.

A vLLM general plugin (entry point group ``vllm.general_plugins``, installed with
``pip install 'forensics[vllm]'``; vLLM calls ``register()`` in every one of its
processes).  It is inert unless ``FORENSICS_CAPTURE=1``: then it wraps the V1 workers'
``execute_model`` (data/capture.toml [[step_target]]) to keep a bounded ring of the last
engine steps - step number, phase, tokens scheduled per request and where each chunk
starts, the collectives called (``FORENSICS_CAPTURE_COLLECTIVES=1``) - and writes one
JSON snapshot per worker process into ``FORENSICS_CAPTURE_DIR`` (default: the working
directory): the step in flight before each step runs (so a SIGKILL or a segfault still
leaves it), the whole ring and every thread's stack on an exception out of
execute_model and at exit.  ``forensics analyze`` reads the snapshots
(forensics/parsers/capture.py).  ``FORENSICS_COREDUMP=1`` also sets the lightweight CUDA
GPU core dump variables (data/capture.toml [coredump]) for the workers.

It runs inside vLLM, so it imports nothing of vLLM (it waits for vLLM's modules to be
imported, with an import hook), nothing of torch, nothing of forensics outside this
package, and it never raises into vLLM: every part is guarded, and a part that fails
costs a fact, never a step (tests/test_capture.py makes each part fail).
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import importlib.abc
import importlib.util
import os
import sys
import threading

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None  # type: ignore[assignment]

from forensics.capture.recorder import Recorder, guarded

_STATE: dict = {}
_LOCK = threading.Lock()
_WRAPPED = "__forensics_capture_wrapped__"
_DEPTH = threading.local()


def enabled(environ=os.environ) -> bool:
    return environ.get("FORENSICS_CAPTURE", "").strip() == "1"


@guarded
def catalogue() -> dict:
    """data/capture.toml, read beside this package without importing forensics.data."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "capture.toml")
    with open(path, "rb") as f:
        return tomllib.load(f)


def register() -> None:
    """The entry point vLLM calls in each of its processes; does nothing unless
    FORENSICS_CAPTURE=1, and never raises."""
    try:
        if not enabled():
            return
        _start()
    except Exception:
        pass


def _start() -> None:
    with _LOCK:
        if _STATE.get("started"):
            return
        _STATE["started"] = True
    data = catalogue() or {}
    directory = os.environ.get("FORENSICS_CAPTURE_DIR") or os.getcwd()
    _make_dir(directory)
    if os.environ.get("FORENSICS_COREDUMP", "").strip() == "1":
        coredump_env(data.get("coredump", {}), directory)
    ring = data.get("ring", {})
    _STATE["recorder"] = Recorder(directory, ring.get("steps", 64), ring.get("max_requests", 64),
                                  ring.get("max_threads", 64), ring.get("max_frames", 64),
                                  startup=startup_facts(data.get("startup", {})),
                                  live_requests=ring.get("live_requests", 8))
    targets = [(t["module"], t["cls"], (t["method"],), "step") for t in data.get("step_target", ())]
    if os.environ.get("FORENSICS_CAPTURE_COLLECTIVES", "").strip() == "1":
        targets += [(t["module"], t["cls"], tuple(t["methods"]), "collective")
                    for t in data.get("collective_target", ())]
    _STATE["targets"] = targets
    for module in {t[0] for t in targets}:
        if module in sys.modules:
            patch_module(sys.modules[module])
    if any(t[0] not in sys.modules for t in targets):
        sys.meta_path.insert(0, _Finder({t[0] for t in targets}))
    _enable_faulthandler()
    atexit.register(_at_exit)


@guarded
def _make_dir(directory: str) -> None:
    """FORENSICS_CAPTURE_DIR made when missing (each worker races to it: exist_ok)."""
    os.makedirs(directory, mode=0o755, exist_ok=True)


@guarded
def _enable_faulthandler() -> None:
    """A fatal signal's Python stacks on stderr (where forensics reads them), unless
    something already chose where faulthandler writes."""
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)


@guarded
def coredump_env(variables: dict, directory: str) -> None:
    """The lightweight CUDA core dump variables, for this process and the workers it
    starts; a variable already set is the user's choice and stays."""
    for name, value in variables.items():
        os.environ.setdefault(name, str(value).replace("{dir}", directory))


def startup_facts(spec: dict) -> dict:
    """Versions of the distributions that matter (metadata only, nothing imported) and
    the environment variables that choose backends (only those named)."""
    out: dict = {"python": sys.version.split()[0], "versions": {}, "environment": {}}
    try:
        from importlib import metadata
        for name in spec.get("distributions", ()):
            try:
                out["versions"][name] = metadata.version(name)
            except Exception:
                continue
    except Exception:
        pass
    for name in spec.get("environment", ()):
        if name in os.environ:
            out["environment"][name] = os.environ[name][:200]
    return out


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a target module right after it is executed (the plugin never imports
    vLLM's modules itself: importing them early would change what vLLM does)."""

    def __init__(self, modules: set[str]):
        self.modules = modules
        self.busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.modules or getattr(self.busy, "on", False):
            return None
        try:
            self.busy.on = True
            try:
                spec = importlib.util.find_spec(fullname)
            finally:
                self.busy.on = False
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return None
            spec.loader = _Loader(loader)
            return spec
        except Exception:
            return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)      # vLLM's own errors are vLLM's: not caught
        patch_module(module)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@guarded
def patch_module(module) -> None:
    for modname, cls_name, methods, what in _STATE.get("targets", ()):
        if modname != module.__name__:
            continue
        cls = getattr(module, cls_name, None)
        if cls is None:
            continue
        for method in methods:
            patch(cls, method, what)


@guarded
def patch(cls, method: str, what: str) -> bool:
    """Wraps ``cls.method`` as a step (what = "step") or a counted collective call; only a
    method the class itself defines, and once."""
    fn = cls.__dict__.get(method)
    if fn is None or not callable(fn) or getattr(fn, _WRAPPED, False):
        return False
    wrapper = wrap_step(fn) if what == "step" else wrap_collective(fn, method)
    setattr(cls, method, wrapper)
    return True


def _recorder() -> Recorder | None:
    return _STATE.get("recorder")


def wrap_step(fn):
    """execute_model, recorded: the step's facts before it runs, its end after; on an
    exception the snapshot, then the same exception re-raised.  A nested call (a
    subclass's execute_model calling its base's) is one step: the depth is per thread,
    shared by every wrapped class."""
    local = _DEPTH

    @functools.wraps(fn)
    def execute_model(self, *args, **kwargs):
        try:
            recorder = None if getattr(local, "depth", 0) else _recorder()
        except Exception:
            recorder = None
        if recorder is None:
            return fn(self, *args, **kwargs)
        facts = None
        try:
            local.depth = 1
            facts = recorder.begin(self, _scheduler_output(args, kwargs))
        except Exception:
            pass
        try:
            result = fn(self, *args, **kwargs)
        except BaseException as exc:
            local.depth = 0
            try:
                _failed(recorder, facts, exc)
            except Exception:
                pass
            raise
        local.depth = 0
        try:
            _ended(recorder, facts)
        except Exception:
            pass
        return result

    setattr(execute_model, _WRAPPED, True)
    return execute_model


def _scheduler_output(args, kwargs):
    try:
        return args[0] if args else kwargs.get("scheduler_output")
    except Exception:
        return None


def _ended(recorder, facts) -> None:
    try:
        recorder.end(facts)
    except Exception:
        pass


def _failed(recorder, facts, exc) -> None:
    try:
        recorder.end(facts, exc)
        recorder.current = facts            # the step it died in stays the step in flight
        recorder.snapshot("exception", exc)
    except Exception:
        pass


def wrap_collective(fn, name: str):
    @functools.wraps(fn)
    def collective(*args, **kwargs):
        try:
            recorder = _recorder()
            if recorder is not None:
                recorder.collective(name)
        except Exception:
            pass
        return fn(*args, **kwargs)

    setattr(collective, _WRAPPED, True)
    return collective


def _at_exit() -> None:
    """At exit: the snapshot, unless the exception's snapshot already said everything
    (Recorder.snapshot) or this process never ran a step (an API server, an engine
    core: no worker here)."""
    try:
        recorder = _recorder()
        if recorder is not None and recorder.steps:
            recorder.snapshot("exit")
    except Exception:
        pass
