"""Kernels shared by the torchrun GPU recordings.

scatter_rows(dst, src, slots): a Triton kernel that copies row i of src into row
slots[i] of dst (a KV-cache style scatter). A corrupted slot id makes it write far
past the end of dst -> CUDA error 700 (illegal memory access), asynchronously.

wait_for_flag(flag, timeout_s): a CuPy kernel on torch's current stream that spins
until flag[0] != 0 (as a custom all-reduce waits for a peer's signal); nobody sets
the flag, so it spins until its own timeout -> a GPU "hang" of timeout_s seconds.

Imports of triton and cupy are lazy so that the scripts' CPU dry runs need neither.
"""
import torch

_scatter = None
_spin = None


def _scatter_kernel():
    global _scatter
    if _scatter is None:
        import triton
        import triton.language as tl

        @triton.jit
        def scatter_rows_kernel(dst_ptr, src_ptr, slot_ptr, n_cols, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            slot = tl.load(slot_ptr + row)            # int64 slot id
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            vals = tl.load(src_ptr + row * n_cols + cols, mask=mask)
            tl.store(dst_ptr + slot * n_cols + cols, vals, mask=mask)

        _scatter = scatter_rows_kernel
    return _scatter


def scatter_rows(dst, src, slots):
    """dst[slots[i], :] = src[i, :] (no bounds check, like a real cache-write kernel)."""
    n_rows, n_cols = src.shape
    if not dst.is_cuda:                                   # CPU dry run: checked copy
        ok = slots < dst.shape[0]
        dst[slots[ok]] = src[ok]
        return
    block = 1 << (n_cols - 1).bit_length()
    _scatter_kernel()[(n_rows,)](dst, src, slots, n_cols, BLOCK=block)


SPIN_SRC = r'''
extern "C" __global__
void wait_for_peer_flag_kernel(volatile int* flag, unsigned long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if (*flag != 0) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < timeout_ns);
}
'''


def wait_for_flag(flag, timeout_s):
    """Spins on the GPU until flag[0] != 0 or timeout_s passed; returns at once (async)."""
    global _spin
    if not flag.is_cuda:                                  # CPU dry run
        return
    import cupy as cp
    if _spin is None:
        _spin = cp.RawKernel(SPIN_SRC, "wait_for_peer_flag_kernel")
    stream = torch.cuda.current_stream()
    with cp.cuda.ExternalStream(stream.cuda_stream):
        _spin((1,), (1,), (cp.from_dlpack(flag), cp.uint64(int(timeout_s * 1e9))))
