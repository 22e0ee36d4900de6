"""torchrun job, 2 ranks: rank 1 is stuck in a GPU kernel, rank 0 times out in gloo.

    torchrun --standalone --nproc-per-node 2 lab/gpu/torchrun/gloo_timeout_gpu_hang.py

Rank 1 launches a kernel that spins waiting for a peer's flag that is never set (it
gives up after --spin-s seconds) and then blocks in torch.cuda.synchronize();
faulthandler.dump_traceback_later prints its stack --dump-after-s seconds into the
wait. Rank 0 waits in a gloo all_reduce whose timeout is --gloo-timeout-s seconds,
times out first, and torchrun then stops rank 1.
--dry-cpu runs the same control flow on CPU (rank 1 sleeps instead), for testing.
"""
import argparse
import datetime
import faulthandler
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import wait_for_flag  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--spin-s", type=float, default=40.0)
    p.add_argument("--dump-after-s", type=float, default=5.0)
    p.add_argument("--gloo-timeout-s", type=int, default=10)
    p.add_argument("--dry-cpu", action="store_true")
    return p.parse_args()


def main():
    a = parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.gloo_timeout_s))
    dev = torch.device("cpu" if a.dry_cpu else "cuda:0")
    print(f"rank {rank}/{world} pid {os.getpid()} device {dev}", flush=True)
    if rank == 1:
        flag = torch.zeros(1, dtype=torch.int32, device=dev)
        faulthandler.dump_traceback_later(a.dump_after_s, repeat=False)
        print(f"rank 1: waiting on the GPU for the peer's flag (gives up after {a.spin_s:.0f} s)",
              flush=True)
        wait_for_flag(flag, a.spin_s)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        else:
            time.sleep(a.spin_s)
        faulthandler.cancel_dump_traceback_later()
    ready = torch.ones(1)
    print(f"rank {rank}: all_reduce (gloo, timeout {a.gloo_timeout_s} s)", flush=True)
    dist.all_reduce(ready)
    print(f"rank {rank}: all_reduce done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
