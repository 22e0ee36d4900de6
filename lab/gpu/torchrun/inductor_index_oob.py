"""One process: torch.compile'd embedding lookup with an out-of-range token id.

    python3 lab/gpu/torchrun/inductor_index_oob.py

Inductor turns table[token_ids] into a Triton kernel with a bounds check
(tl.device_assert 'index out of bounds: 0 <= tmpN < 32000'); the bad id makes the
device assert fire and the error (710, device-side assert) surfaces at .item().
"""
import argparse
import os

import torch


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--bad-id", type=int, default=32007)
    return p.parse_args()


@torch.compile
def embed(table, token_ids, scale):
    return table[token_ids] * scale


def main():
    a = parse_args()
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    table = torch.randn(a.vocab, 512, device=dev)
    token_ids = torch.randint(0, a.vocab, (4, 128), device=dev)
    token_ids[1, 77] = a.bad_id                      # token id past the vocabulary
    print(f"pid {os.getpid()}: compiling and running embed()", flush=True)
    h = embed(table, token_ids, 0.5)
    print("mean activation:", h.mean().item(), flush=True)


if __name__ == "__main__":
    main()
