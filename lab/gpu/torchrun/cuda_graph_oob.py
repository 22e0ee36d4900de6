"""One process: a CUDA graph whose captured work writes out of bounds on replay.

    python3 lab/gpu/torchrun/cuda_graph_oob.py

The graph captures a small "decode step": a matmul, a Triton scatter of the rows into a
KV cache at the slots held in a static tensor, and the logits. Before replay
--bad-replay the static slot tensor gets a corrupted slot id (~16 TiB past the cache);
the replay faults and the error (700) surfaces at the next host sync, .item().
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import scatter_rows  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--replays", type=int, default=4)
    p.add_argument("--bad-replay", type=int, default=2)
    p.add_argument("--bad-slot", type=lambda s: int(s, 0), default=1 << 34)
    return p.parse_args()


def main():
    a = parse_args()
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    kv_cache = torch.zeros(4096, 256, device=dev)
    w = torch.randn(256, 256, device=dev) / 16
    static_x = torch.randn(64, 256, device=dev)
    static_slots = torch.arange(64, device=dev)

    def decode_step():
        h = torch.tanh(static_x @ w)
        scatter_rows(kv_cache, h, static_slots)
        return h.sum(dim=1)

    side = torch.cuda.Stream()                       # warm-up (compiles the Triton kernel)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            decode_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_logits = decode_step()
    print(f"pid {os.getpid()}: captured decode step into a CUDA graph", flush=True)

    for i in range(a.replays):
        static_x.copy_(torch.randn(64, 256, device=dev))
        slots = torch.arange(64) + 64 * (i + 1)
        if i == a.bad_replay:
            slots[5] = a.bad_slot                    # corrupted slot id
        static_slots.copy_(slots)
        graph.replay()
        token = static_logits.argmax().item()
        print(f"replay {i}: next token {token}", flush=True)


if __name__ == "__main__":
    main()
