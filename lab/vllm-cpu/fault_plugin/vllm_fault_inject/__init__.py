"""Test-only vLLM general plugin: make one tensor-parallel rank misbehave.

Controlled by environment variables (read in every vLLM process):

  VLLM_FAULT_INJECT  what to do: cuda_error | oom | sigkill | sigsegv | stall
                     (unset or empty: the plugin does nothing)
  VLLM_FAULT_RANK    tensor-parallel rank that misbehaves (default 0)
  VLLM_FAULT_POS     fire on the forward whose first position equals this
                     (default 512 = 2nd prefill chunk with
                     --max-num-batched-tokens 512)
  VLLM_FAULT_STYLE   cuda_error only: "short" (default) raises
                     RuntimeError('CUDA error: an illegal memory access was
                     encountered'); "torch" raises torch.AcceleratorError with
                     the full multi-line text torch >= 2.8 prints
  VLLM_FAULT_RECORD  optional path: one JSON line is appended when it fires
  VLLM_LAB_RAY_CPU   "1": activate the platform plugin in ray_cpu.py so that
                     --distributed-executor-backend ray runs on the CPU

The wrapper replaces LlamaForCausalLM.forward, which runs outside the
torch.compile'd backbone, so the raise is an ordinary Python frame.
"""
import ctypes
import faulthandler
import json
import os
import signal
import time

CUDA_MSG = "CUDA error: an illegal memory access was encountered"
CUDA_MSG_TORCH = (
    "CUDA error: an illegal memory access was encountered\n"
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/"
    "cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API "
    "call, so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
OOM_MSG = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a total "
    "capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch "
    "memory, this process has 78.12 GiB memory in use. Of the allocated memory "
    "74.50 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

_fired = False


def _record(mode, rank, positions):
    path = os.environ.get("VLLM_FAULT_RECORD")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({
            "unix": time.time(), "pid": os.getpid(), "mode": mode,
            "tp_rank": rank, "first_position": int(positions[0]),
            "num_tokens": int(positions.numel()),
        }) + "\n")


def register():
    mode = os.environ.get("VLLM_FAULT_INJECT", "")
    if not mode:
        return
    import torch
    from vllm.model_executor.models import llama

    cls = llama.LlamaForCausalLM
    if getattr(cls, "_fault_inject_wrapped", False):
        return
    original = cls.forward
    want_rank = int(os.environ.get("VLLM_FAULT_RANK", "0"))
    want_pos = int(os.environ.get("VLLM_FAULT_POS", "512"))
    style = os.environ.get("VLLM_FAULT_STYLE", "short")

    def forward(self, input_ids, positions, *args, **kwargs):
        global _fired
        if not _fired and positions.numel() and int(positions[0]) == want_pos:
            from vllm.distributed import get_tensor_model_parallel_rank

            rank = get_tensor_model_parallel_rank()
            if rank == want_rank:
                _fired = True
                _record(mode, rank, positions)
                # each misbehaviour happens right here, in this forward frame
                if mode == "cuda_error" and style == "torch":
                    raise torch.AcceleratorError(CUDA_MSG_TORCH)
                if mode == "cuda_error":
                    raise RuntimeError(CUDA_MSG)
                if mode == "oom":
                    raise torch.OutOfMemoryError(OOM_MSG.format(rank=rank))
                if mode == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if mode == "sigsegv":
                    faulthandler.enable()
                    ctypes.string_at(0)  # real NULL read -> SIGSEGV
                if mode == "stall":
                    while True:
                        time.sleep(3600)
                raise ValueError(f"unknown VLLM_FAULT_INJECT={mode!r}")
        return original(self, input_ids, positions, *args, **kwargs)

    cls.forward = forward
    cls._fault_inject_wrapped = True
