"""The format registry: every input format forensics reads, declared once.

Each format names its grammar, the module that reads it and how it is recognised:

- ``line`` formats are record headers (vLLM, c10/glog, SGLang, NCCL ...): tried on
  every line by ``parsers/text/lines.py``, in the order given there;
- ``block`` formats start on a line and run for as long as lines keep their shape (a
  traceback, a faulthandler dump, a native crash, a launcher summary): recognised per
  stream, anywhere inside an input, in the order below;
- ``collector`` formats gather one tool's lines from a whole input (compute-sanitizer
  reports are collapsed across the file; a cuda-gdb transcript's stops span lines);
- ``binary`` formats are whole files recognised by their magic (core dumps, the
  sanitizer's XML).

Sample lines of every format live in data/formats.toml and are parsed by
tests/test_registry.py.  Adding a format: its grammar, its module, one entry here, and
its samples.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from forensics.parsers.text import launcher, native, stackdump, warning
from forensics.parsers.text import traceback as tb


@dataclass(frozen=True)
class Format:
    name: str
    kind: str                       # line | block | collector | binary
    grammar: str | None
    reader: str                     # module (and class for binary readers) that reads it
    what: str


FORMATS: tuple[Format, ...] = (
    Format("vllm", "line", "vllm_record", "forensics.parsers.text.lines", "vLLM logger records, 0.4 - 0.33"),
    Format("glog", "line", "glog", "forensics.parsers.text.lines", "c10 / glog lines (ProcessGroupNCCL, elastic agent)"),
    Format("sglang", "line", "sglang", "forensics.parsers.text.lines", "SGLang's [date time DPn TPn EPn] envelope"),
    Format("nccl", "line", "nccl", "forensics.parsers.text.lines", "NCCL_DEBUG lines host:pid:tid [dev] NCCL LEVEL"),
    Format("trtllm", "line", "tensorrt_llm", "forensics.parsers.text.lines", "TensorRT-LLM and TensorRT loggers"),
    Format("uvicorn", "line", "uvicorn", "forensics.parsers.text.lines", "uvicorn's access and lifecycle lines"),
    Format("pylog", "line", "python_logging", "forensics.parsers.text.lines", "Python logging (launchers, Ray)"),
    Format("kernel", "line", "kernel_log", "forensics.parsers.text.lines", "dmesg, dmesg -T, journalctl -k, syslog"),
    Format("python-traceback", "block", "python_traceback", "forensics.parsers.text.traceback",
           "Python tracebacks, chained, unraisable, and fragments without a header"),
    Format("faulthandler", "block", "python_faulthandler", "forensics.parsers.text.stackdump",
           "CPython faulthandler dumps (crashes and timeouts)"),
    Format("py-spy", "block", "py_spy", "forensics.parsers.text.stackdump", "py-spy dump of a live process"),
    Format("native-exception", "block", "native_crash", "forensics.parsers.text.native",
           "std::terminate with what(), PyTorch's segfault banner, absl's signal handler"),
    Format("python-warning", "block", None, "forensics.parsers.text.warning",
           "warnings.showwarning output: location, message, source line (noise)"),
    Format("torchrun-summary", "block", "torchrun_summary", "forensics.parsers.text.launcher",
           "torch.distributed.elastic's ChildFailedError summary"),
    Format("compute-sanitizer", "collector", "compute_sanitizer", "forensics.parsers.sanitizer.text",
           "compute-sanitizer text reports, collapsed per kernel and PC"),
    Format("cuda-gdb", "collector", "cuda_gdb", "forensics.parsers.text.cuda_gdb",
           "cuda-gdb transcripts: exception stops, focus, info tables"),
    Format("compute-sanitizer-xml", "binary", None, "forensics.parsers.sanitizer.xml:SanitizerXmlParser",
           "compute-sanitizer --xml output"),
    Format("cuda-coredump", "binary", None, "forensics.parsers.coredumps.gpu:CudaCoredumpParser",
           "CUDA GPU core dumps (.nvcudmp)"),
    Format("elf-core", "binary", None, "forensics.parsers.coredumps.cpu:ElfCoreParser", "Linux CPU core dumps"),
    Format("text", "binary", None, "forensics.parsers.text.stream:TextParser", "any text input"),
)

# Block formats in the order their start is tried on a line that no open block took.
_STARTERS: tuple[Callable[[str, Any], Any], ...] = (
    lambda text, header: stackdump.start(text),
    lambda text, header: native.start(text),
    lambda text, header: launcher.start(text),
    lambda text, header: warning.start(text),
    tb.start,
)


def start_block(text: str, header: tuple | None):
    """The block that starts at this line, if any."""
    for starter in _STARTERS:
        block = starter(text, header)
        if block is not None:
            return block
    return None


def reader_for(source_kind: str):
    """A new reader object (``.parse(Source) -> ParsedSource``) for a source kind."""
    entry = next((f for f in FORMATS if f.kind == "binary" and f.name == source_kind), None)
    if entry is None:
        return None
    module, _, cls = entry.reader.partition(":")
    return getattr(importlib.import_module(module), cls)()


# --kind values a user may force (text formats are all read by the text reader)
FORCEABLE: dict[str, str] = {f.name: ("text" if f.kind != "binary" else f.name) for f in FORMATS}
