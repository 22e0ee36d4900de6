"""One torchrun worker: all_reduce over gloo (CPU) in a loop; one rank can misbehave.

Run under torchrun, e.g.

    torchrun --standalone --nproc-per-node 4 lab/torchrun/worker.py --fault raise --fault-rank 2

Every option can also be given as an environment variable (FAULT, FAULT_RANK, ...),
which is handy when torchrun's own flags already make the command line long.

Faults (only on --fault-rank, at --fault-step):
  none     all ranks finish normally
  raise    RuntimeError('CUDA error: an illegal memory access was encountered')
  sigkill  the rank kills itself with SIGKILL
  segv     the rank reads address 0 (ctypes.string_at(0)) -> SIGSEGV; faulthandler is on
  hang     the rank stops joining collectives: a long "compute" (sleep 60 s in a loop)
           while the others wait in all_reduce until the gloo timeout fires

DO NOT shift line numbers in this file without re-recording the cases: the expected.toml
files under tests/data/realworld/rec_torchrun_* name lines of this file.
"""
import argparse
import ctypes
import faulthandler
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def parse_args():
    env = os.environ.get
    p = argparse.ArgumentParser()
    p.add_argument("--fault", default=env("FAULT", "none"),
                   choices=["none", "raise", "sigkill", "segv", "hang"])
    p.add_argument("--fault-rank", type=int, default=int(env("FAULT_RANK", "2")))
    p.add_argument("--fault-step", type=int, default=int(env("FAULT_STEP", "5")))
    p.add_argument("--steps", type=int, default=int(env("STEPS", "20")))
    p.add_argument("--step-sleep-s", type=float, default=float(env("STEP_SLEEP_S", "0.2")))
    p.add_argument("--timeout-s", type=float, default=float(env("GLOO_TIMEOUT_S", "60")),
                   help="process-group timeout (the gloo collective timeout)")
    p.add_argument("--stack-dump-s", type=float, default=float(env("STACK_DUMP_S", "0")),
                   help="hang fault: faulthandler dumps all threads of the stalled rank "
                        "this many seconds after it stalls (0: off)")
    p.add_argument("--record", action="store_true", default=env("RECORD", "0") == "1",
                   help="wrap main() in torch.distributed.elastic's @record "
                        "(writes the error file torchrun asks for)")
    return p.parse_args()


def long_compute(args):
    """The 'stalled' rank: busy on something else, never reaching the next all_reduce."""
    if args.stack_dump_s > 0:
        faulthandler.dump_traceback_later(args.stack_dump_s, repeat=False)
    while True:
        time.sleep(60)


def misbehave(args):
    if args.fault == "raise":
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if args.fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if args.fault == "segv":
        ctypes.string_at(0)
    if args.fault == "hang":
        long_compute(args)


def train_step(step, rank, world_size, args):
    if args.fault != "none" and rank == args.fault_rank and step == args.fault_step:
        misbehave(args)
    grad = torch.full((1024,), float(rank + step))
    dist.all_reduce(grad)
    expected = sum(r + step for r in range(world_size))
    assert grad[0].item() == expected, (grad[0].item(), expected)


def main(args):
    faulthandler.enable()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world_size} pid {os.getpid()} up (fault={args.fault} "
          f"on rank {args.fault_rank} at step {args.fault_step})", flush=True)
    for step in range(args.steps):
        train_step(step, rank, world_size, args)
        if rank == 0:
            print(f"step {step} all_reduce ok", flush=True)
        time.sleep(args.step_sleep_s)
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


@record
def main_recorded(args):
    main(args)


if __name__ == "__main__":
    args = parse_args()
    if args.record:
        main_recorded(args)
    else:
        main(args)
    sys.exit(0)
