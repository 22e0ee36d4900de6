"""grammars/python_traceback.lark and the per-process assembler, on real tracebacks."""

from forensics.parsers.traceback import TracebackAssembler, parse_block
from tests.conftest import RECORDINGS

import pytest


def blocks_of(lines, header=None):
    asm = TracebackAssembler()
    out = []
    for n, line in enumerate(lines, 1):
        done, _ = asm.feed(line, n, header)
        out += done
    return out + asm.flush()


def test_unraisable_del_from_real_worker_log():
    path = RECORDINGS / "gpu/s1a_tp4_prefill_crash/worker_TP2.log"
    if not path.exists():
        pytest.skip("shared recordings not available")
    lines = path.read_text().splitlines()[9:16]   # the "Exception ignored in" block, raw stderr
    (block,) = blocks_of(lines)
    (exc,) = parse_block(block.text)
    assert exc.unraisable_in.startswith("<function SignalPadBuffer.__del__")
    assert exc.type == "RuntimeError"
    assert exc.message == "CUDA error code=700(b'CUDA_ERROR_ILLEGAL_ADDRESS')"
    assert [(f.function, f.line) for f in exc.frames] == [("__del__", 49), ("checkCudaErrors", 25)]
    assert exc.frames[0].code == "checkCudaErrors(cuda.cuMemFree(self.signal_pads_dev))"


def test_torch_multiline_cuda_error_text_is_one_message():
    path = RECORDINGS / "gpu/s5a_triton_oob_async/console.txt"
    if not path.exists():
        pytest.skip("shared recordings not available")
    (block,) = blocks_of(path.read_text().splitlines()[1:])
    (exc,) = parse_block(block.text)
    assert exc.type == "torch.AcceleratorError"
    assert exc.message.splitlines()[0] == "CUDA error: an illegal memory access was encountered"
    assert "CUDA_LAUNCH_BLOCKING=1" in exc.message
    assert exc.frames[-1].code.startswith('print(f"key norm: {key_norm.item()')


def test_chained_traceback_hand_made():
    # hand-made, CPython's chained layout
    text = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "    g()",
        "KeyError: 'x'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "b.py", line 2, in h',
        "    raise RuntimeError('CUDA error: misaligned address') from e",
        "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "RuntimeError: CUDA error: misaligned address",
    ]
    (block,) = blocks_of(text)
    chain = parse_block(block.text)
    assert [e.type for e in chain] == ["KeyError", "RuntimeError"]
    assert chain[1].chained_by == "cause"
    assert chain[1].frames[0].code.startswith("raise RuntimeError")


def test_two_tracebacks_in_one_vllm_record_are_two_blocks():
    header = ("pid", "Worker_TP0", "ERROR", "12-02 10:34:18", "multiproc_executor.py", 1063)
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    f()",
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "Traceback (most recent call last):", '  File "x.py", line 1, in f', "    f()",
             "RuntimeError: CUDA error: an illegal memory access was encountered", ""]
    blocks = blocks_of(lines, header)
    assert len(blocks) == 2
    assert all(parse_block(b.text) for b in blocks)


def test_interleaved_processes_are_assembled_separately():
    asm = {1: TracebackAssembler(), 2: TracebackAssembler()}
    stream = [(1, "Traceback (most recent call last):"), (2, "Traceback (most recent call last):"),
              (1, '  File "a.py", line 1, in f'), (2, '  File "b.py", line 9, in g'),
              (2, "    g()"), (1, "    f()"), (1, "ValueError: one"), (2, "OSError: two"),
              (1, "next line"), (2, "next line")]
    done = []
    for n, (pid, text) in enumerate(stream, 1):
        done += asm[pid].feed(text, n, None)[0]
    chains = [parse_block(b.text) for b in done]
    assert sorted(c[0].type for c in chains) == ["OSError", "ValueError"]


def test_garbage_block_does_not_parse_and_does_not_raise():
    assert parse_block("Traceback (most recent call last):\n\x00\x01\n") in (None, ())
