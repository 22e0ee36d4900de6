"""torchrun job, 2 ranks on ONE GPU: rank 0 runs out of GPU memory, rank 1 is left
waiting in a gloo all_reduce.

    torchrun --standalone --nproc-per-node 2 lab/gpu/torchrun/oom_rank0.py

Both ranks "load weights" and rank 1 also takes its KV cache; after a barrier rank 0
asks for a KV cache larger than what is left on the card -> torch.OutOfMemoryError.
Rank 1 meanwhile all_reduces the number of KV blocks (gloo) and loses its peer.
Sizes in GiB. --dry-cpu: same flow on CPU with tiny sizes and a raised error, for testing.
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist

GiB = 1 << 30


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--weights-gib", type=float, nargs=2, default=[40, 60],
                   help="weights of rank 0 and rank 1")
    p.add_argument("--kv-gib", type=float, nargs=2, default=[50, 10],
                   help="KV cache of rank 0 (after the barrier) and rank 1 (before it)")
    p.add_argument("--gloo-timeout-s", type=int, default=60)
    p.add_argument("--dry-cpu", action="store_true")
    return p.parse_args()


def alloc(gib, dev):
    n = int(gib * GiB) // 2
    if dev.type == "cpu":
        n //= GiB                                    # dry run: tiny
    return torch.empty(n, dtype=torch.bfloat16, device=dev)


def main():
    a = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.gloo_timeout_s))
    dev = torch.device("cpu" if a.dry_cpu else "cuda:0")
    print(f"rank {rank}/{world} pid {os.getpid()} device {dev}", flush=True)
    weights = alloc(a.weights_gib[rank], dev)
    print(f"rank {rank}: weights loaded ({a.weights_gib[rank]:.0f} GiB)", flush=True)
    if rank == 1:
        kv_cache = alloc(a.kv_gib[1], dev)
    dist.barrier()
    if rank == 0:
        if a.dry_cpu:
            raise torch.OutOfMemoryError("dry run")
        kv_cache = alloc(a.kv_gib[0], dev)
    num_blocks = torch.tensor([kv_cache.numel() // (16 * 1024)])
    dist.all_reduce(num_blocks, op=dist.ReduceOp.MIN)
    print(f"rank {rank}: {int(num_blocks)} KV blocks, {weights.numel()} weight elements", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
