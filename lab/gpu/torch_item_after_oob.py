"""PyTorch: a raw CuPy kernel on torch's current stream writes far out of bounds;
the error surfaces later, at .item(), as torch.AcceleratorError."""
import json
import os

import cupy as cp
import torch

SRC = r'''
extern "C" __global__
void scatter_kv_slots_kernel(float* kv_cache, const long long* slot_mapping, int num_tokens) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < num_tokens) {
        long long slot = slot_mapping[t];
        kv_cache[slot] = 1.0f;  // FAULT_LINE
    }
}
'''

def main():
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    kv_cache = torch.zeros(16 * 1024, device=dev)
    slot_mapping = torch.arange(64, device=dev, dtype=torch.int64)
    slot_mapping[17] = 1 << 42       # corrupted slot id: 16 TiB past the cache
    hidden = torch.randn(64, 256, device=dev)
    logits = torch.tanh(hidden).sum(dim=1)
    next_token = torch.argmax(logits)   # queued before the bad kernel

    kernel = cp.RawKernel(SRC, "scatter_kv_slots_kernel", options=("-lineinfo",))
    stream = torch.cuda.current_stream()
    truth = {"pid": os.getpid(), "kernel": "scatter_kv_slots_kernel",
             "kv_cache": hex(kv_cache.data_ptr()), "bad_slot": 1 << 42,
             "target_address": hex(kv_cache.data_ptr() + 4 * (1 << 42)), "grid": [1, 1, 1],
             "block": [64, 1, 1], "stream": hex(stream.cuda_stream)}
    d = os.environ.get("MINI_TRUTH_DIR")
    if d:
        with open(os.path.join(d, "torch_item_after_oob.json"), "w") as f:
            json.dump(truth, f, indent=1)
    with cp.cuda.ExternalStream(stream.cuda_stream):
        kernel((1,), (64,), (cp.from_dlpack(kv_cache), cp.from_dlpack(slot_mapping), cp.int32(64)))
    print("next token:", next_token.item())


if __name__ == "__main__":
    main()
