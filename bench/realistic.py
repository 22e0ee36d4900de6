"""A second benchmark generator, built from a real recording's line shapes, so that the
benchmark cannot be tuned to one generator's lines.

The source is a real vLLM console recorded at DEBUG level with a crash at its end
(default: tests/data/realworld/rec_vllm_mp_tp2_debug_accelerator_error_rank0/console.log,
see its expected.toml for how it was made).  Its lines before the crash are the serving
traffic (DEBUG step lines, stats, access lines, request logs, the unrelated DEBUG
tracebacks such a console holds); the generator repeats them with their numbers varied
(never their time stamps, which stay before the crash) until the size is reached, then
appends the crash itself, unchanged.  The verdict on the bundle must equal the verdict on
the crash recording alone (bench/run.py checks it).

    python bench/realistic.py OUT_DIR SIZE [--mode MODE]

Modes:
  realistic  one console, the recording's own mix of lines
  dense      as realistic, and every 20th line a per-request error with a traceback
             (hand-made in vLLM's shape: "Error in preprocessing prompt inputs" + ValueError)
  files      the traffic spread over 400 rotated per-process files, the crash in the last
  ranks      the traffic spread over 8 large files (one per node), the crash in a ninth
  gzip       realistic, written as console.log.gz
  longline   realistic, with a few 8 MB lines without a newline (a binary blob pasted in)

Modes of issue 24 (EXTRA_MODES; a small bundle is realistic at 256M, ``--sizes``):
  sanitizer  one compute-sanitizer memcheck log: a long earlier session of
             "Invalid __global__ read/write" reports at many distinct kernels, PCs, source
             lines, threads and blocks (the layout of compute-sanitizer 2025.3, as in the
             recordings of tests/data/gpu; kernels and frames are generated), then a real
             recorded session appended unchanged (SANITIZER_SOURCE: a CuPy kernel writes out
             of bounds, the error surfaces at a later Tensor.item()).  Its crash alone is
             that recording.
  smallfiles about 2,000 small per-process files (rank0/, rank1/, server/ by the writer's
             prefix, rotated), the crash in zz_crash.log
  tqdm       realistic, after a first part without a newline: tqdm progress bars
             separated by "\r" only (TQDM_SHARE of the size)
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests/data/realworld/rec_vllm_mp_tp2_debug_accelerator_error_rank0/console.log"
SANITIZER_SOURCE = Path(__file__).resolve().parents[1] / "tests/data/gpu/torch_item_after_oob/compute-sanitizer_memcheck.txt"
# the modes whose crash is SOURCE (tests/test_speed.py runs each of them)
MODES = ("realistic", "dense", "files", "ranks", "gzip", "longline")
EXTRA_MODES = ("sanitizer", "smallfiles", "tqdm")
ALL_MODES = MODES + EXTRA_MODES
SMALL_FILES = 2000
TQDM_SHARE = 0.25           # of the bundle: the first part, bars without a newline
# the record header: kept as it is (pid, level, time stamp, file:line)
_HEADER = re.compile(r"^(\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ")
_NUMBER = re.compile(r"\d+")
_IDENTITY = re.compile(r"rank|world|size=|pid|TP\d|tp_|device|cuda:\d|port|version|Worker", re.I)


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def split_recording(lines: list[str]) -> tuple[list[str], list[str]]:
    """(serving lines, the crash): the crash starts at the first ERROR record."""
    start = next(i for i, line in enumerate(lines) if " ERROR " in line[:80])
    return lines[:start], lines[start:]


def _body_start(line: str) -> int:
    header = _HEADER.match(line)
    return header.end() if header else (line.find("] ") + 2 if line.startswith("[") else 0)


def _vary(line: str, rng: random.Random) -> str:
    """The line with the numbers of its message varied (same digit count)."""
    cut = _body_start(line)
    body = _NUMBER.sub(lambda m: str(rng.randrange(10 ** (len(m.group()) - 1), 10 ** len(m.group())))
                       if len(m.group()) > 1 else str(rng.randrange(10)), line[cut:])
    return line[:cut] + body


def _request_error(prefix_line: str, rng: random.Random) -> list[str]:
    """A per-request error with its traceback, under the API server's record header."""
    header = _HEADER.match(prefix_line)
    head = header.group(0).replace(" DEBUG ", " ERROR ").replace(" INFO ", " ERROR ") if header else ""
    n = rng.randrange(4097, 9000)
    return [head + "Error in preprocessing prompt inputs",
            head + "Traceback (most recent call last):",
            head + '  File "/opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/serving_completion.py", '
                   "line 141, in create_completion",
            head + "    engine_prompts = await self._preprocess_completion(",
            head + f"ValueError: This model's maximum context length is 4096 tokens. However, you requested {n} "
                   "tokens in the prompt. Please reduce the length of the prompt."]


# --- sanitizer mode -------------------------------------------------------------------

SANITIZER_NAME = "compute-sanitizer.log"
SANITIZER_KERNELS = 3000        # distinct kernels in the long session (each with a few PCs)
# words kernels are named from (generated names in the shapes serving stacks give kernels)
_FAMILIES = ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "reshape_and_cache", "paged_attention",
             "silu_and_mul", "topk_softmax", "moe_align_block_size", "gather_cache", "scatter_kv",
             "oneshot_allreduce", "twoshot_allgather", "sampler_top_p", "copy_blocks", "dequant_gemm",
             "flash_fwd_splitkv", "merge_attn_states", "per_token_quant", "apply_penalties", "prefix_prefill")
_DTYPES = ("float", "__half", "__nv_bfloat16", "c10::BFloat16", "c10::Half", "int8_t", "uint8_t")
_MODULES = ("_C.abi3.so", "_moe_C.abi3.so", "libtorch_cuda.so", "_custom_ops.cpython-312-x86_64-linux-gnu.so",
            "flashinfer_kernels.so", "libnccl.so.2")
_PY_FRAMES = ("forward in layernorm.py", "forward in linear.py", "forward in attention.py",
              "execute_model in gpu_model_runner.py", "execute_model in gpu_worker.py", "worker_busy_loop in "
              "multiproc_executor.py", "_sample in sampler.py", "forward_cuda in custom_op.py")


def _kernels(rng: random.Random) -> list[tuple[str, str, list[tuple[str, int]], list[str]]]:
    """(signature, source file, [(PC, source line)], host frames) of each kernel."""
    out = []
    for i in range(SANITIZER_KERNELS):
        family = rng.choice(_FAMILIES)
        name = f"{family}_{rng.choice(('v1', 'v2', 'sm90', 'll', 'split', 'tma'))}_{i}_kernel"
        dtype = rng.choice(_DTYPES)
        form = rng.randrange(3)
        if form == 0:       # extern "C" (a NVRTC or Triton kernel): the bare name
            signature = name
        elif form == 1:     # a C++ kernel: its parameters
            signature = f"{name}({dtype} *, const {dtype} *, int, int)"
        else:               # a template: return type, namespace, arguments
            signature = (f"void vllm::{name}<{dtype}, {rng.choice((64, 128, 256))}, {rng.choice(('true', 'false'))}>"
                         f"({dtype} *, const {dtype} *, const int *, float, int)")
        source = f"{family}_{i % 97}.cu"
        pcs = [(f"0x{rng.randrange(0x40, 0x4000) & ~0xf:x}", rng.randrange(10, 900)) for _ in range(rng.randrange(1, 5))]
        module = rng.choice(_MODULES)
        frames = [f"{name}_launcher(at::Tensor&, at::Tensor const&) in {family}.cpp:{rng.randrange(20, 400)} "
                  f"[0x{rng.randrange(0x10000, 0x3000000):x}] in {module}",
                  f" [0x{rng.randrange(0x10000, 0x3000000):x}] in {module}",
                  "_PyObject_MakeTpCall [0x148fb4] in python3",
                  "_PyEval_EvalFrameDefault [0x1d710e] in python3",
                  "PyObject_Vectorcall [0x1499b4] in python3",
                  "_PyEval_EvalFrameDefault [0x1d710e] in python3",
                  " [0x2a1c9] in libc.so.6",
                  "__libc_start_main [0x2a28a] in libc.so.6",
                  "_start [0x257a04] in python3"]
        frames += [f"{rng.choice(_PY_FRAMES)}:{rng.randrange(20, 2000)}" for _ in range(rng.randrange(2, 5))]
        out.append((signature, source, pcs, frames))
    return out


def _launch(kernel, rng: random.Random) -> list[str]:
    """The reports of one faulting launch: one per faulting thread, threads in a row."""
    signature, source, pcs, frames = kernel
    pc, line = rng.choice(pcs)
    access = rng.choice(("read", "write"))
    size = rng.choice((1, 2, 4, 8, 16))
    block = (rng.randrange(132), rng.randrange(4), 0)
    first = rng.randrange(0, 1024, 32)
    base = rng.randrange(0x7f0000000000, 0x7fff00000000) & ~0xfff
    alloc = rng.choice((512, 4096, 65536, 2097152))
    over = rng.randrange(1, 1 << 40)
    out = []
    for t in range(first, first + rng.choice((1, 1, 2, 4, 8, 32))):
        address = base + alloc + over + t * size
        out += [f"========= Invalid __global__ {access} of size {size} bytes",
                f"=========     at {signature}+{pc} in {source}:{line}",
                f"=========     by thread ({t},0,0) in block ({block[0]},{block[1]},{block[2]})",
                f"=========     Access to 0x{address:x} is out of bounds",
                f"=========     and is {address - base - alloc + 1:,} bytes after the nearest allocation at "
                f"0x{base:x} of size {alloc:,} bytes",
                "=========     Saved host backtrace up to driver entry point at kernel launch time",
                *(f"=========         Host Frame: {frame}" for frame in frames),
                "========= "]
    return out


def _sanitizer_bundle(out: Path, size: int, rng: random.Random) -> Path:
    """One memcheck log: a long session (``--print-limit 0 --destroy-on-device-error
    kernel``: each faulting launch is reported thread by thread and the program goes on)
    that ends with its summary, then a real recorded session appended unchanged."""
    out.mkdir(parents=True, exist_ok=True)
    crash = SANITIZER_SOURCE.read_bytes()
    kernels = _kernels(rng)
    target = out / SANITIZER_NAME
    budget = max(size - len(crash), 0)
    written = errors = 0
    with open(target, "w", encoding="utf-8") as fh:
        fh.write("========= COMPUTE-SANITIZER\n")
        while written < budget:
            lines = _launch(rng.choice(kernels), rng)
            chunk = "\n".join(lines) + "\n"
            errors += sum(1 for line in lines if line.startswith("========= Invalid"))
            written += len(chunk)
            fh.write(chunk)
        fh.write(f"========= ERROR SUMMARY: {errors:,} errors\n")
    with open(target, "ab") as fh:
        fh.write(crash)
    return target


# --- tqdm mode ------------------------------------------------------------------------

_BAR = " ▏▎▍▌▋▊▉█"


def _tqdm_bars(size: int, rng: random.Random):
    """tqdm's default layout ("desc: 37%|███▋      | 370/1000 [00:12<00:21, 29.41it/s]"),
    each redraw after a "\\r", about ``size`` characters in all."""
    written, total, n, elapsed = 0, rng.randrange(500, 5000), 0, 0.0
    while written < size:
        if n >= total:
            total, n, elapsed = rng.randrange(500, 5000), 0, 0.0
        n += 1
        elapsed += rng.uniform(0.001, 0.05)
        frac = n / total
        full, part = divmod(int(frac * 10 * 8), 8)
        bar = ("█" * full + (_BAR[part] if full < 10 else "")).ljust(10)
        rate = n / elapsed
        left = (total - n) / rate
        text = (f"\rProcessed prompts: {frac * 100:3.0f}%|{bar}| {n}/{total} [{int(elapsed) // 60:02d}:"
                f"{int(elapsed) % 60:02d}<{int(left) // 60:02d}:{int(left) % 60:02d}, {rate:.2f}it/s]")
        written += len(text.encode())
        yield text


# --- smallfiles mode ------------------------------------------------------------------

_WRITER = re.compile(r"^\((\w+?)(?:_TP(\d+))? pid=\d+\) ")


def _per_process_files(out: Path, chunks, pool: list[str], per_file: int) -> None:
    """The traffic in about SMALL_FILES files, each of one writer (rank<N>/ for a tensor
    parallel worker, server/ for the rest, by the line's prefix), rotated: a writer's
    lines fill its current file, then the next one of its share of the files."""
    writers: dict[str, int] = {}
    for line in pool:
        m = _WRITER.match(line)
        key = f"rank{m.group(2)}" if m and m.group(2) else "server"
        writers[key] = writers.get(key, 0) + len(line) + 1      # the writer's share of the bytes
    total = sum(writers.values())
    files = {k: max(1, round(SMALL_FILES * n / total)) for k, n in writers.items()}
    handles: dict[str, object] = {}
    index = dict.fromkeys(files, 0)
    written = dict.fromkeys(files, 0)
    try:
        for chunk in chunks:
            m = _WRITER.match(chunk)
            key = f"rank{m.group(2)}" if m and m.group(2) and f"rank{m.group(2)}" in files else "server"
            handle = handles.get(key)
            if handle is None:
                (out / key).mkdir(exist_ok=True)
                handle = handles[key] = open(out / key / f"worker.{index[key]:04d}.log", "w", encoding="utf-8")  # noqa: SIM115
            handle.write(chunk)
            written[key] += len(chunk)
            if written[key] >= per_file and index[key] + 1 < files[key]:
                handle.close()
                index[key] += 1
                written[key] = 0
                handles[key] = open(out / key / f"worker.{index[key]:04d}.log", "w", encoding="utf-8")  # noqa: SIM115
    finally:
        for handle in handles.values():
            handle.close()



def generate(out: Path, size: int, mode: str = "realistic", source: Path = SOURCE, seed: int = 7) -> Path:
    """Writes the bundle into ``out``; returns the file or folder to analyse."""
    rng = random.Random(seed)
    if mode == "sanitizer":
        return _sanitizer_bundle(out, size, rng)
    lines = source.read_text(encoding="utf-8").splitlines()
    serving, crash = split_recording(lines)
    # traffic only: lines that name no identity (rank, world size, pid, device), so that
    # varying their numbers cannot invent a rank
    # and only what a running server repeats: the lines after start-up completed
    started = next((i for i, line in enumerate(serving) if "Application startup complete" in line), 0)
    pool = [line for line in serving[started + 1:] if line.strip() and not _IDENTITY.search(line[_body_start(line):])]
    api_line = next((line for line in serving if line.startswith("(APIServer")), pool[0])
    out.mkdir(parents=True, exist_ok=True)
    crash_text = "\n".join(crash) + "\n"
    budget = max(size - len(crash_text.encode()), 0)

    def body():
        written, n = 0, 0
        if mode == "tqdm":
            # a progress bar redrawn with "\r" only, for the first part of the console
            # (a non-tty stderr keeps every redraw); the bar's last redraw ends its line
            share = int(budget * TQDM_SHARE)
            for bar in _tqdm_bars(share, rng):
                written += len(bar.encode())
                yield bar
            yield "\n"
            written += 1
        yield from (line + "\n" for line in serving)
        while written < budget:
            n += 1
            if mode == "dense" and n % 20 == 0:
                chunk = "".join(line + "\n" for line in _request_error(api_line, rng))
            elif mode == "longline" and n % 400_000 == 0:
                chunk = "".join(rng.choice("ABCDEFGHabcdefgh0123456789+/") for _ in range(64)) * (8 << 14) + "\n"
            else:
                chunk = _vary(rng.choice(pool), rng) + "\n"
            written += len(chunk)
            yield chunk

    if mode == "gzip":
        target = out / "console.log.gz"
        with gzip.open(target, "wt", encoding="utf-8", compresslevel=1) as fh:
            fh.writelines(body())
            fh.write(crash_text)
        return target
    if mode == "smallfiles":
        _per_process_files(out, body(), pool, max(budget // SMALL_FILES, 1))
        (out / "zz_crash.log").write_text(crash_text, encoding="utf-8")
        return out
    if mode in ("files", "ranks"):
        count = 400 if mode == "files" else 8
        handles = [open(out / f"worker_{i:03d}.log", "w", encoding="utf-8") for i in range(count)]  # noqa: SIM115
        try:
            for i, chunk in enumerate(body()):
                handles[i % len(handles)].write(chunk)
        finally:
            for handle in handles:
                handle.close()
        (out / "zz_crash.log").write_text(crash_text, encoding="utf-8")
        return out
    target = out / "console.log"
    with open(target, "w", encoding="utf-8") as fh:
        fh.writelines(body())
        fh.write(crash_text)
    return target


def crash_source(mode: str) -> Path:
    """The recording appended to a bundle of this mode: its crash alone."""
    return SANITIZER_SOURCE if mode == "sanitizer" else SOURCE


def crash_offset(target: Path, source: Path | None = None) -> int:
    """How many lines later the crash's lines are in the bundle than in ``source`` (by
    default the crash of the bundle's own mode): the traffic before it in a single-file
    bundle; in a folder, whose crash file holds the crash without the recording's
    serving lines, a negative number."""
    if source is None:
        source = SANITIZER_SOURCE if target.name == SANITIZER_NAME else SOURCE
    if target.is_dir():
        target = target / "zz_crash.log"
    opener = gzip.open if target.suffix == ".gz" else open
    with opener(target, "rb") as fh:
        total = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
    return total - source.read_bytes().count(b"\n")


_POSITION = re.compile(r"[^\s\"'(]*?([\w.-]+\.(?:log|txt)(?:\.gz)?):(\d+)")
# the crash's file in a bundle, and the recordings it comes from: one name, "crash.log"
_CRASH_FILES = ("console.log", "zz_crash.log", "compute-sanitizer_memcheck.txt", "compute-sanitizer.log")
# a stream of no process (a paste, a tool's log) is keyed by its file's path
_STREAM = re.compile(r"stream:[^\s\"']*/([\w.-]+)")
# what a bundle may say differently from its crash alone: where the inputs were, how many
# lines it read, the rules' prose (it quotes counts)
_NOT_COMPARED = ("explanation", "notes", "rule_failures")


def verdict_fields(document: dict, offset: int = 0) -> dict:
    """The verdict of a report document, field by field, with every ``file.log:N``
    position made relative to the crash (``N - offset``, the file's name without its
    folder) and each process's status beside it: what must not change when a crash is
    buried in traffic."""
    def place(match: re.Match) -> str:
        name = "crash.log" if match.group(1).startswith(_CRASH_FILES) else match.group(1)
        return f"{name}:{int(match.group(2)) - offset}"
    verdict = {k: v for k, v in document["verdict"].items() if k not in _NOT_COMPARED}
    def stream(match: re.Match) -> str:
        return "stream:crash.log" if match.group(1).startswith(_CRASH_FILES) else f"stream:{match.group(1)}"
    fields = json.loads(_STREAM.sub(stream, _POSITION.sub(place, json.dumps(verdict))))
    fields["statuses"] = sorted((s["who"], s["status"]) for s in document["stories"])
    return fields


def differing_fields(got: dict, want: dict) -> dict:
    """The fields of two ``verdict_fields`` that differ: {field: (got, want)}."""
    return {k: (got.get(k), want.get(k)) for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("size")
    parser.add_argument("--mode", choices=ALL_MODES, default="realistic")
    args = parser.parse_args()
    print(generate(args.out, _size(args.size), args.mode))


if __name__ == "__main__":
    main()
