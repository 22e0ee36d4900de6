"""Generate a realistic crash bundle of a given size for the benchmark (synthetic, labelled).

8 tensor-parallel ranks interleaved in one server console at INFO/DEBUG (stats lines,
request lines, per-step debug lines), per-rank logs, a crash near the end (rank 3 hits
CUDA_ERROR_ILLEGAL_ADDRESS in a finalizer, the others die in the collective, the engine and
API server follow), a kernel log with the Xid, and a large compute-sanitizer log.

    python bench/generate.py OUT_DIR SIZE      # SIZE like 10M, 100M, 1G
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

RANKS = 8
PIDS = {r: 4100 + r for r in range(RANKS)}
ENGINE, API = 4050, 4000


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _stamp(second: int) -> str:
    return "12-02 %02d:%02d:%02d" % (8 + second // 3600 % 12, second // 60 % 60, second % 60)


def _bulk_line(rng: random.Random, second: int, i: int) -> str:
    r = rng.randrange(RANKS + 2)
    if r == RANKS:
        return (f"(APIServer pid={API}) INFO {_stamp(second)} [loggers.py:257] Engine 000: Avg prompt throughput: "
                f"{rng.uniform(100, 9000):.1f} tokens/s, Avg generation throughput: {rng.uniform(10, 900):.1f} tokens/s, "
                f"Running: {rng.randrange(64)} reqs, Waiting: {rng.randrange(8)} reqs, GPU KV cache usage: "
                f"{rng.uniform(0, 90):.1f}%, Prefix cache hit rate: {rng.uniform(0, 60):.1f}%")
    if r == RANKS + 1:
        return (f"(APIServer pid={API}) INFO {_stamp(second)} [logger.py:41] Received request cmpl-{i:08x}: "
                f"params: SamplingParams(n=1, temperature=0.7, max_tokens=256), lora_request: None.")
    return (f"(Worker_TP{r} pid={PIDS[r]}) DEBUG {_stamp(second)} [v1/worker/gpu_model_runner.py:2201] "
            f"step {i}: batch of {rng.randrange(1, 256)} requests, {rng.randrange(1, 8192)} scheduled, "
            f"padded to {rng.choice([256, 512, 1024, 2048])} for the graph")


def _crash(second: int) -> list[str]:
    s = _stamp(second)
    lines = []
    p = f"(Worker_TP3 pid={PIDS[3]}) "
    lines += [p + "Exception ignored in: <function SymmDeviceMemory.__del__ at 0x7f3a2c1e5d00>",
              p + "Traceback (most recent call last):",
              p + '  File "/usr/local/lib/python3.12/dist-packages/flashinfer/comm/mnnvl.py", line 836, in __del__',
              p + "    checkCudaErrors(cuda.cuMemFree(self.signal_pads_dev))",
              p + '  File "/usr/local/lib/python3.12/dist-packages/flashinfer/cuda_utils.py", line 53, in checkCudaErrors',
              p + "    raise RuntimeError(",
              p + "RuntimeError: CUDA error code=700(b'CUDA_ERROR_ILLEGAL_ADDRESS')"]
    for r in range(RANKS):
        if r == 3:
            continue
        q = f"(Worker_TP{r} pid={PIDS[r]}) ERROR {s} [multiproc_executor.py:1063] "
        lines += [q + "WorkerProc hit an exception.", q + "Traceback (most recent call last):",
                  q + '  File "/srv/vllm/distributed/communicator.py", line 77, in all_reduce',
                  q + "    dist.all_reduce(partial_cpu)",
                  q + "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547] Connection closed by peer [127.0.0.1]:12675"]
    lines += [f"(EngineCore_DP0 pid={ENGINE}) ERROR {s} [core.py:1512] EngineCore encountered a fatal error.",
              f"(APIServer pid={API}) ERROR {s} [async_llm.py:906] AsyncLLM output_handler failed.",
              f'(APIServer pid={API}) INFO:     10.0.0.12:51234 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error']
    return lines


def generate(out: Path, size: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    header = [f"(EngineCore_DP0 pid={ENGINE}) INFO {_stamp(0)} [core.py:140] Initializing a V1 LLM engine (v0.30.0) with config: "
              f"model='meta-llama/Llama-3.3-70B-Instruct', tensor_parallel_size={RANKS}, max_num_batched_tokens=8192"]
    header += [f"(Worker_TP{r} pid={PIDS[r]}) INFO {_stamp(1)} [parallel_state.py:1906] world_size={RANKS} rank={r} "
               f"local_rank={r} distributed_init_method=tcp://127.0.0.1:29500 backend=nccl" for r in range(RANKS)]
    console_budget = int(size * 0.85)
    written, i = 0, 0
    with open(out / "server.log", "w") as f:
        for line in header:
            f.write(line + "\n")
        second = 2
        while written < console_budget:
            chunk = []
            for _ in range(2000):
                i += 1
                if i % 400 == 0:
                    second += 1
                chunk.append(_bulk_line(rng, second, i))
            text = "\n".join(chunk) + "\n"
            f.write(text)
            written += len(text)
        for line in _crash(second + 1):
            f.write(line + "\n")
    with open(out / "dmesg.txt", "w") as f:
        f.write(f"[ 4021.489435] NVRM: Xid (PCI:0000:9b:00): 31, pid={PIDS[3]}, name=python3, channel 0x0000000a, "
                "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_10 faulted @ 0x8fa2_e4a00000. "
                "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n")
    report = ["========= Invalid __global__ write of size 4 bytes",
              "=========     at twoshotAllreduceKernel+0x140 in trtllm_mnnvl_allreduce.cuh:412",
              "=========     by thread ({t},0,0) in block ({b},0,0)",
              "=========     Access to 0x{a:x} is out of bounds",
              "=========     Saved host backtrace up to driver entry point at kernel launch time",
              "=========         Host Frame: all_reduce in communicator.py:75",
              "========= "]
    with open(out / "compute-sanitizer.4103.log", "w") as f:
        f.write("========= COMPUTE-SANITIZER\n")
        n, budget = 0, size - console_budget
        written = 0
        while written < budget:
            block = "\n".join(report).format(t=n % 1024, b=n // 1024, a=0x8fa2e4a00008 + n * 4) + "\n"
            f.write(block)
            written += len(block)
            n += 1
        f.write(f"========= ERROR SUMMARY: {n} errors\n")


if __name__ == "__main__":
    generate(Path(sys.argv[1]), _size(sys.argv[2]))
