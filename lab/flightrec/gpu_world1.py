"""Real NCCL Flight Recorder dumps from one GPU (world size 1): on demand, and on a
watchdog timeout, written by PyTorch itself.

    TORCH_NCCL_TRACE_BUFFER_SIZE=64 TORCH_NCCL_DUMP_ON_TIMEOUT=1 \
      TORCH_NCCL_DEBUG_INFO_TEMP_FILE=OUT/timeout/nccl_trace_rank_ \
      python3 lab/flightrec/gpu_world1.py OUT

1. three all_reduce, each waited for: records in state "completed";
2. a long kernel (torch.cuda._sleep) on the compute stream, then an async all_reduce,
   which NCCL's stream must wait for: its record stays "scheduled";
3. while it waits, the dump on demand: OUT/ondemand/nccl_trace_rank_0 (the pickle of
   torch._C._distributed_c10d._dump_nccl_trace()) and OUT/ondemand_json/nccl_trace_rank_0
   (_dump_nccl_trace_json());
4. the collective's timeout (5 s) runs out: the watchdog writes its own dump to
   TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank (OUT/timeout/nccl_trace_rank_0) and takes the
   process down.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch._C._distributed_c10d as c10d


def write(path: str, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())
    print(f"wrote {path} ({len(data)} bytes)", flush=True)


def main() -> None:
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "timeout"), exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, timeout=timedelta(seconds=5),
                            device_id=torch.device("cuda", 0))
    print(f"torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, {torch.cuda.get_device_name(0)}", flush=True)
    t = torch.ones(1024, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
        torch.cuda.synchronize()
    time.sleep(1.0)                           # the watchdog sees them complete
    torch.cuda._sleep(40 * 2_000_000_000)     # about 40 s of GPU clock cycles
    work = dist.all_reduce(torch.ones(4096, device="cuda"), async_op=True)
    time.sleep(1.0)
    write(os.path.join(out, "ondemand", "nccl_trace_rank_0"), c10d._dump_nccl_trace())
    write(os.path.join(out, "ondemand_json", "nccl_trace_rank_0"), c10d._dump_nccl_trace_json())
    try:
        work.wait()
    except Exception as exc:                  # noqa: BLE001 - what the timeout raises is recorded
        print(f"wait raised {type(exc).__name__}: {exc}", flush=True)
    time.sleep(30)                            # the watchdog dumps, then aborts the process
    print("still alive after 30 s", flush=True)


if __name__ == "__main__":
    main()
