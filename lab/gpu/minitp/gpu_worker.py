"""One tensor-parallel worker of the miniature (rank N of 4, all on cuda:0)."""
import argparse
import json
import os
import sys

import numpy as np
from cuda.bindings import driver as cuda

from minitp.cuda_utils import checkCudaErrors
from minitp.logger import Tee, init_logger

logger = None


class Worker:
    def __init__(self, args):
        self.rank = args.rank
        self.world_size = args.world_size
        self.num_steps_total = args.num_steps_total
        logger.info("Initializing worker: rank=%d world_size=%d local_rank=%d device=cuda:0 pid=%d",
                    self.rank, self.world_size, self.rank, os.getpid())
        checkCudaErrors(cuda.cuInit(0))
        self.device = checkCudaErrors(cuda.cuDeviceGet(0))
        self.ctx = checkCudaErrors(cuda.cuDevicePrimaryCtxRetain(self.device))
        checkCudaErrors(cuda.cuCtxSetCurrent(self.ctx))
        name = checkCudaErrors(cuda.cuDeviceGetName(128, self.device)).split(b"\0")[0].decode()
        major = checkCudaErrors(cuda.cuDeviceGetAttribute(
            cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device))
        minor = checkCudaErrors(cuda.cuDeviceGetAttribute(
            cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device))
        sms = checkCudaErrors(cuda.cuDeviceGetAttribute(
            cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.device))
        mem = checkCudaErrors(cuda.cuDeviceTotalMem(self.device))
        logger.info("Device cuda:0: %s, compute capability %d.%d, %.1f GiB, %d SMs",
                    name, major, minor, mem / 2**30, sms)
        self.module = checkCudaErrors(cuda.cuModuleLoad(args.cubin.encode()))
        self.norm_fn = checkCudaErrors(cuda.cuModuleGetFunction(self.module, b"fused_add_rmsnorm_shard_kernel"))
        self.stream = checkCudaErrors(cuda.cuStreamCreate(cuda.CUstream_flags.CU_STREAM_NON_BLOCKING.value))
        self.rows, self.cols = 64, 1024
        nbytes = self.rows * self.cols * 4
        self.hidden = int(checkCudaErrors(cuda.cuMemAlloc(nbytes)))
        self.residual = int(checkCudaErrors(cuda.cuMemAlloc(nbytes)))
        checkCudaErrors(cuda.cuMemsetD32(self.hidden, 0x3f800000, nbytes // 4))
        checkCudaErrors(cuda.cuMemsetD32(self.residual, 0, nbytes // 4))
        from minitp.signal_pad import TPCommunicator
        fault = None
        if args.inject_fault:
            kv = dict(p.split("=") for p in args.inject_fault.split(","))
            fault = {"rank": int(kv["rank"]), "step": int(kv["step"]), "add_words": int(kv["add"], 0)}
        self.comm = TPCommunicator(self.rank, self.world_size, args.init_method, self.module,
                                   self.stream, args.workspace_max_num_tokens,
                                   args.gloo_timeout_s, fault)
        logger.info("Loading weights of model 'mini' shard %d/%d took %.4f GiB",
                    self.rank, self.world_size, 2 * nbytes / 2**30)

    def _forward(self):
        args = [np.array([self.hidden], dtype=np.uint64), np.array([self.residual], dtype=np.uint64),
                np.array([self.rows], dtype=np.int32), np.array([self.cols], dtype=np.int32),
                np.array([1e-6], dtype=np.float32)]
        argp = np.array([a.ctypes.data for a in args], dtype=np.uint64)
        checkCudaErrors(cuda.cuLaunchKernel(self.norm_fn, self.rows, 1, 1, 256, 1, 1, 0,
                                            self.stream, argp.ctypes.data, 0))

    def execute_model(self, sched):
        step = sched["step"]
        nct = sched["num_computed_tokens"]
        n = sched["num_scheduled_tokens"]
        self.comm.ensure_workspace(nct + n)
        self._forward()
        total = self.comm.all_reduce(step, float(n))
        if nct + n >= sched["prompt_len"]:
            # last prefill chunk: the sampler reads the logits back (a sync point)
            checkCudaErrors(cuda.cuStreamSynchronize(self.stream))
        logger.info("Finished step %d (prefill) for %s: num_scheduled_tokens=%d num_computed_tokens=[%d]",
                    step, sched["req_id"], n, nct + n)
        return {"ok": True, "rank": self.rank, "step": step, "total": total}

    def busy_loop(self, result):
        while True:
            line = sys.stdin.readline()
            if not line:
                logger.info("Engine closed the input pipe; Worker_TP%d exiting.", self.rank)
                return 0
            msg = json.loads(line)
            if msg["type"] == "shutdown":
                logger.info("Worker_TP%d shutting down.", self.rank)
                return 0
            try:
                out = self.execute_model(msg["sched"])
            except Exception as e:
                logger.exception("WorkerProc hit an exception.")
                result.write(json.dumps({"ok": False, "rank": self.rank, "error": str(e)}) + "\n")
                result.flush()
                logger.error("Worker_TP%d is exiting after a fatal error in execute_model.", self.rank)
                return 1
            result.write(json.dumps(out) + "\n")
            result.flush()


def main():
    global logger
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--init-method", required=True)
    ap.add_argument("--cubin", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--result-fd", type=int, required=True)
    ap.add_argument("--workspace-max-num-tokens", type=int, default=16128)
    ap.add_argument("--gloo-timeout-s", type=float, default=60)
    ap.add_argument("--num-steps-total", type=int, default=5)
    ap.add_argument("--inject-fault", default="")
    args = ap.parse_args()
    own = open(os.path.join(args.log_dir, "worker_TP%d.log" % args.rank), "a")
    sys.stdout = Tee(sys.__stdout__, own)
    sys.stderr = Tee(sys.__stderr__, own)
    logger = init_logger("minitp.worker", sys.stdout)
    result = os.fdopen(args.result_fd, "w")
    d = os.environ.get("MINI_TRUTH_DIR")
    if d:
        with open(os.path.join(d, "worker_TP%d.json" % args.rank), "w") as f:
            json.dump({"rank": args.rank, "pid": os.getpid()}, f)
    try:
        worker = Worker(args)
    except Exception as e:
        logger.exception("WorkerProc failed to start.")
        result.write(json.dumps({"ok": False, "rank": args.rank, "error": str(e)}) + "\n")
        result.flush()
        sys.stdout.flush()
        os._exit(1)
    result.write(json.dumps({"ok": True, "ready": True, "rank": args.rank}) + "\n")
    result.flush()
    rc = worker.busy_loop(result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
