"""Signal pads for the one-shot all-reduce, allocated with cuMemAlloc."""
import datetime
import json
import logging
import os

import numpy as np
import torch
import torch.distributed as dist
from cuda.bindings import driver as cuda

from minitp.cuda_utils import checkCudaErrors

logger = logging.getLogger("minitp.worker")

FLAG_SLOT_WORDS = 32            # one flag slot = 128 bytes
BYTES_PER_TOKEN = 256           # signal-pad bytes reserved per token of workspace


class SignalPadBuffer:
    def __init__(self, size_bytes: int, rank: int, world_size: int):
        self.size_bytes = size_bytes
        self.rank = rank
        self.world_size = world_size
        self.signal_pads_dev = int(checkCudaErrors(cuda.cuMemAlloc(self.size_bytes)))
        checkCudaErrors(cuda.cuMemsetD32(self.signal_pads_dev, 0, self.size_bytes // 4))

    def __del__(self):
        checkCudaErrors(cuda.cuMemFree(self.signal_pads_dev))


class TPCommunicator:
    """Gloo process group on the CPU plus this rank's signal pad on the GPU."""

    def __init__(self, rank, world_size, init_method, module, stream, max_num_tokens,
                 gloo_timeout_s, fault):
        self.rank = rank
        self.world_size = world_size
        self.stream = stream
        self.fault = fault
        logger.info("world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=gloo",
                    world_size, rank, rank, init_method)
        dist.init_process_group("gloo", init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=gloo_timeout_s))
        self.flag_fn = checkCudaErrors(cuda.cuModuleGetFunction(module, b"oneshot_allreduce_flag_kernel"))
        self.max_num_tokens = max_num_tokens
        self._ws = SignalPadBuffer(max_num_tokens * BYTES_PER_TOKEN, rank, world_size)
        logger.info("Custom all-reduce workspace initialized: rank=%d world_size=%d "
                    "kernel=oneshot_allreduce_flag_kernel signal_pads_dev=0x%x "
                    "signal_pad_bytes=%d max_num_tokens=%d",
                    rank, world_size, self._ws.signal_pads_dev, self._ws.size_bytes,
                    max_num_tokens)

    def ensure_workspace(self, num_tokens: int):
        if num_tokens <= self.max_num_tokens:
            return
        new_max = self.max_num_tokens * 2
        while new_max < num_tokens:
            new_max *= 2
        new_bytes = new_max * BYTES_PER_TOKEN
        logger.info("Growing custom all-reduce workspace: max_num_tokens %d -> %d, "
                    "signal pad %d -> %d bytes", self.max_num_tokens, new_max,
                    self._ws.size_bytes, new_bytes)
        self._ws = None  # release the old pad before allocating the larger one
        self._ws = SignalPadBuffer(new_bytes, self.rank, self.world_size)
        self.max_num_tokens = new_max

    def _launch_flags(self, step: int):
        pad = self._ws.signal_pads_dev
        peer_stride_words = self._ws.size_bytes // 4 // self.world_size
        flag_offset_words = (step % 4) * FLAG_SLOT_WORDS
        planted = self.fault is not None and self.fault["rank"] == self.rank \
            and self.fault["step"] == step
        if planted:
            flag_offset_words += self.fault["add_words"]
        grid, block = (1, 1, 1), (32, 1, 1)
        if planted:
            targets = [hex(pad + 4 * (flag_offset_words + p * peer_stride_words))
                       for p in range(self.world_size)]
            rec = {"pid": os.getpid(), "rank": self.rank, "step": step,
                   "kernel": "oneshot_allreduce_flag_kernel",
                   "signal_pads_dev": hex(pad), "signal_pad_bytes": self._ws.size_bytes,
                   "flag_offset_words": hex(flag_offset_words),
                   "planted_add_words": hex(self.fault["add_words"]),
                   "peer_stride_words": peer_stride_words,
                   "target_addresses": targets, "grid": list(grid), "block": list(block),
                   "launched_at": datetime.datetime.now().isoformat(timespec="milliseconds")}
            d = os.environ.get("MINI_TRUTH_DIR")
            if d:
                with open(os.path.join(d, "fault_rank%d.json" % self.rank), "w") as f:
                    json.dump(rec, f, indent=1)
        args = [np.array([pad], dtype=np.uint64),
                np.array([flag_offset_words], dtype=np.uint64),
                np.array([peer_stride_words], dtype=np.uint64),
                np.array([step + 1], dtype=np.uint32),
                np.array([self.world_size], dtype=np.int32)]
        argp = np.array([a.ctypes.data for a in args], dtype=np.uint64)
        checkCudaErrors(cuda.cuLaunchKernel(self.flag_fn, *grid, *block, 0, self.stream,
                                            argp.ctypes.data, 0))

    def all_reduce(self, step: int, partial: float) -> float:
        self._launch_flags(step)
        partial_cpu = torch.tensor([partial], dtype=torch.float32)
        dist.all_reduce(partial_cpu)
        return float(partial_cpu[0])
