"""torchrun job on ONE GPU: gloo world group + one NCCL group of size 1 per rank.

    torchrun --standalone --nproc-per-node 2 lab/gpu/torchrun/nccl_watchdog_oob.py

Each step: a bf16 "forward" (matmuls), a Triton scatter of 64 rows into a KV cache,
an all_reduce in the rank's own NCCL group (so ProcessGroupNCCL's watchdog tracks it),
host-side work, then a gloo all_reduce over the world. At --fault-step, rank
--fault-rank scatters one row to a corrupted slot (~16 TiB past the cache): the kernel
faults while the host thread is already in CPU-only code, so the NCCL watchdog, which
polls the pending all_reduce's CUDA event, is the first to see error 700.
--dry-cpu runs the same control flow on CPU with gloo only (no fault), for testing.
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import scatter_rows  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=2)
    p.add_argument("--bad-slot", type=lambda s: int(s, 0), default=1 << 34)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--host-work-s", type=float, default=2.0,
                   help="CPU-only work on the faulting rank before the gloo all_reduce")
    p.add_argument("--gloo-timeout-s", type=int, default=60)
    p.add_argument("--dry-cpu", action="store_true")
    return p.parse_args()


def main():
    a = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.gloo_timeout_s))
    dev = torch.device("cpu" if a.dry_cpu else "cuda:0")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    # one single-rank NCCL group per rank; every rank creates every group, same order
    groups = [dist.new_group([r], backend="gloo" if a.dry_cpu else "nccl") for r in range(world)]
    tp_group = groups[rank]
    dtype = torch.float32 if a.dry_cpu else torch.bfloat16
    hidden = 256 if a.dry_cpu else a.hidden
    print(f"rank {rank}/{world} pid {os.getpid()} device {dev} "
          f"(fault: rank {a.fault_rank} step {a.fault_step})", flush=True)

    gen = torch.Generator(device=dev).manual_seed(rank)
    weights = [torch.randn(hidden, hidden, device=dev, dtype=dtype, generator=gen) / hidden ** 0.5
               for _ in range(a.layers)]
    kv_cache = torch.zeros(4096, 256, device=dev)
    for step in range(a.steps):
        x = torch.randn(hidden, hidden, device=dev, dtype=dtype, generator=gen)
        for w in weights:
            x = torch.nn.functional.gelu(x @ w)
        rows = x[:64, :256].float()
        slots = torch.arange(64, device=dev) + 64 * step
        if rank == a.fault_rank and step == a.fault_step:
            slots[7] = a.bad_slot                      # corrupted slot id
        scatter_rows(kv_cache, rows, slots)
        partial = rows.sum(dim=0)
        dist.all_reduce(partial, group=tp_group)       # NCCL, enqueued only (no host sync)
        if rank == a.fault_rank:
            time.sleep(a.host_work_s)                  # host-side work, no CUDA calls
        done = torch.tensor([float(step)])
        dist.all_reduce(done)                          # gloo, CPU tensor
        if rank == 0:
            print(f"step {step} done", flush=True)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    print(f"rank {rank} finished", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
