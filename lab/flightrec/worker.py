"""One torchrun worker (gloo, CPU) that records its collectives in PyTorch's Flight
Recorder and dumps it on demand, with one rank leaving a collective out.

Run under torchrun with TORCH_FR_BUFFER_SIZE > 0, e.g.

    TORCH_FR_BUFFER_SIZE=64 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=out/nccl_trace_rank_ \
      torchrun --standalone --nproc-per-node 3 lab/flightrec/worker.py --scenario missing

Every rank runs three collectives of the default group (all_reduce, broadcast, barrier:
#1-#3), then the scenario:

  complete   every rank runs all_reduce #4 too; each dumps once it completed, and exits 0
  missing    ranks other than --late-rank start all_reduce #4 (async_op=True, so that
             they can dump while it is pending); --late-rank "computes" (sleeps) instead
  subgroup   a group of ranks 2 and 3 is made (new_group: #1 of that group on its members);
             ranks 0 and 1 start all_reduce #4 of the default group, rank 2 starts a
             broadcast in the subgroup, rank 3 (the late rank) sleeps: rank 2 waits for
             rank 3 in the subgroup, and ranks 0 and 1 wait for both in the default group

DUMP_AFTER_S seconds after the scenario started, each rank writes its Flight Recorder
dump as PyTorch's default writer names it (TORCH_NCCL_DEBUG_INFO_TEMP_FILE followed by the
rank): torch._C._distributed_c10d._dump_fr_trace() (the pickle), or its _json form with
--json.  Then the waiting ranks wait for their collective until gloo's timeout (--timeout-s)
raises, and the late rank sleeps until torchrun stops it.
"""
import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as c10d


def dump(rank: int, as_json: bool) -> None:
    path = os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/tmp/nccl_trace_rank_") + str(rank)
    data = c10d._dump_fr_trace_json() if as_json else c10d._dump_fr_trace()
    with open(path, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())
    print(f"rank {rank}: Flight Recorder dump written to {path} ({len(data)} bytes)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=["complete", "missing", "subgroup"], required=True)
    p.add_argument("--late-rank", type=int, default=2)
    p.add_argument("--timeout-s", type=float, default=8.0)
    p.add_argument("--dump-after-s", type=float, default=2.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} pid {os.getpid()} up", flush=True)
    t = torch.ones(16)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    dist.barrier()
    sub = dist.new_group([2, 3]) if args.scenario == "subgroup" else None

    work = None
    late = rank == args.late_rank
    if args.scenario == "complete":
        dist.all_reduce(t)
        time.sleep(0.5)             # the others' records retire
        dump(rank, args.json)
        dist.destroy_process_group()
        return 0
    if args.scenario == "missing" and not late:
        work = dist.all_reduce(torch.ones(64), async_op=True)
    elif args.scenario == "subgroup" and rank in (0, 1):
        work = dist.all_reduce(torch.ones(64), async_op=True)
    elif args.scenario == "subgroup" and rank == 2:
        work = dist.broadcast(torch.ones(8), src=2, group=sub, async_op=True)
    time.sleep(args.dump_after_s)
    dump(rank, args.json)
    if work is None:
        print(f"rank {rank}: computing instead of joining the collective", flush=True)
        time.sleep(3 * args.timeout_s)
        return 0
    work.wait()                     # raises once gloo's timeout runs out
    return 0


if __name__ == "__main__":
    sys.exit(main())
