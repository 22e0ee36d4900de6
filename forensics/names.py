"""Kernel names: the one place where a name printed by a tool becomes the name we show
and the name a signature is built from.

Every source prints kernels its own way:

- compute-sanitizer: ``void ns::k<float, 4>(float *, int)+0x1a0`` (a full signature
  with return type, templates, parameters and a PC offset), older CUDA-MEMCHECK
  ``/path/file.cu:75:void ns::k<...>(...)``;
- GPU core dumps: a mangled symbol ``_ZN4vllm6kernelIfEEvPT_`` (demangled by c++filt
  when installed, else by the small Itanium reader below);
- cuda-gdb: ``k<<<(1,1,1),(32,1,1)>>> (p=0x7f...) at file.cu:26``;
- device asserts: ``void k(const int *, int)``, or ``operator()`` for a lambda (PyTorch's
  ATen kernels), or ``unknown`` (Triton / Inductor kernels);
- Triton / Inductor: ``triton_poi_fused_index_0`` or ``triton_red_fused_..._2`` with
  content hashes in file names.

``plain`` gives the kernel as a reader wants to see it (template arguments kept, no
return type, no parameters, no offsets); ``normalise`` the stable form for signatures.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess

UNNAMED = frozenset({"", "?", "??", "unknown", "<unknown>", "operator", "operator()", "lambda", "(anonymous)"})


def is_named(kernel: str | None) -> bool:
    """False for the placeholders tools print when they do not know the kernel."""
    return bool(kernel) and kernel.strip() not in UNNAMED and not kernel.strip().startswith("<lambda")


def plain(signature: str | None) -> str:
    """``void ns::k<float, 4>(float *, int)+0x1a0`` -> ``ns::k<float, 4>``.

    Balanced brackets decide: the parameter list is the last ``(...)`` at template depth
    0, the return type is what precedes the last space outside brackets.  A template
    argument or a parameter is never taken for the name."""
    if not signature:
        return ""
    text = signature.strip()
    text = re.sub(r"<<<(?:[^<>]|<(?!<<))*>>>", "", text)  # cuda-gdb launch configuration (no rescan per "<<<")
    text = re.sub(r"\+0x[0-9a-fA-F]+$", "", text)       # PC offset
    # CUDA-MEMCHECK's "/path/file.cu:75:void k(...)": the location comes first
    loc = re.match(r"^[^\s():<>]+\.(?:cu|cuh|cpp|cc|h|hpp|py):\d+:", text)
    if loc:
        text = text[loc.end():]
    text = _drop_parameters(text)
    text = _drop_return_type(text)
    return text.strip()


def _drop_parameters(text: str) -> str:
    depth_angle = 0
    depth_paren = 0
    cut = None
    for i, ch in enumerate(text):
        if ch == "<":
            depth_angle += 1
        elif ch == ">" and depth_angle:
            depth_angle -= 1
        elif ch == "(":
            if depth_angle == 0 and depth_paren == 0 and i > 0 and not text[:i].endswith("operator"):
                cut = i
                break
            depth_paren += 1
        elif ch == ")" and depth_paren:
            depth_paren -= 1
    return text[:cut] if cut is not None else text


def _drop_return_type(text: str) -> str:
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        ch = text[i]
        if ch in ">)":
            depth += 1
        elif ch in "<(":
            depth -= 1
        elif ch == " " and depth == 0:
            return text[i + 1:]
    return text


def strip_templates(name: str) -> str:
    """Template arguments removed by balancing brackets (they may nest)."""
    depth, kept = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
            continue
        if ch == ">" and depth:
            depth -= 1
            continue
        if depth == 0:
            kept.append(ch)
    return "".join(kept)


@functools.lru_cache(maxsize=None)
def _normalisers() -> tuple[tuple[re.Pattern, str], ...]:
    from forensics import knowledge
    return tuple((re.compile(p), r) for p, r in knowledge.load("signature")["kernels"]["normalisers"])


def normalise(name: str | None) -> str:
    """The stable form of a kernel name for signatures: no template arguments,
    parameters, offsets, launch configurations, content hashes or ordinals."""
    text = strip_templates(plain(name))
    for pattern, replacement in _normalisers():
        text = pattern.sub(replacement, text)
    return text.strip()


def from_device_assert(function: str | None, file: str | None, line: int | str | None) -> str:
    """The kernel a device-side assert line names: its function without the signature;
    for a lambda (``operator()``, ATen's kernels) or Triton's ``unknown``, the source
    file and line, which is what identifies it (``IndexKernel.cu:92``,
    ``cxyz.py:31`` for an Inductor-generated kernel)."""
    name = plain(function or "")
    if is_named(name) and not name.endswith("operator()"):
        return name
    base = (file or "?").rsplit("/", 1)[-1]
    return f"{base}:{line}" if line not in (None, "") else base


# --- demangling ----------------------------------------------------------------------------

def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> demangled with ``c++filt`` when it is on PATH (one process for all)."""
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {}
    try:
        done = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(names):
        return {}
    return {m: d for m, d in zip(names, lines) if d and d != m}


def from_symbol(symbol: str, demangled: str | None = None) -> str:
    """The kernel name as cuda-gdb's ``info cuda kernels`` shows it, from a cubin symbol.

    ``far_write(int*)`` -> ``far_write``; ``void ns::k<float>(float*)`` -> ``ns::k<float>``.
    Without c++filt a small Itanium reader recovers the (possibly nested) name of simple
    symbols; anything it does not understand keeps the symbol as it is."""
    if demangled:
        return plain(demangled)
    if not symbol.startswith("_Z"):
        return symbol
    return _itanium_name(symbol) or symbol


_SOURCE_NAME = re.compile(r"(\d+)")


def _itanium_name(symbol: str) -> str | None:
    """``_Z9far_writePi`` -> far_write; ``_ZN4vllm6kernelEv`` -> vllm::kernel (else None)."""
    pos = 2
    nested = symbol.startswith("_ZN")
    if nested:
        pos = 3
        while pos < len(symbol) and symbol[pos] in "rVKRO":   # cv / ref qualifiers
            pos += 1
    parts = []
    while pos < len(symbol):
        m = _SOURCE_NAME.match(symbol, pos)
        if not m:
            break
        length = int(m.group(1))
        start = m.end()
        if length <= 0 or start + length > len(symbol):
            return None
        parts.append(symbol[start:start + length])
        pos = start + length
        if not nested:
            break
        if pos < len(symbol) and symbol[pos] == "E":
            break
        if pos < len(symbol) and symbol[pos] == "I":   # template args: give up on the tail
            break
    return "::".join(parts) if parts else None
