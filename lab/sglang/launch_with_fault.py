"""Start a real SGLang server (python -m sglang.launch_server's main) with a planted fault.

    SGLANG_LAB_FAULT=raise python lab/sglang/launch_with_fault.py --model-path M --device cpu ...

SGLang starts its scheduler processes with multiprocessing "spawn", so each child
re-runs this file's top level as __mp_main__: the patch below is installed in every
process. With SGLANG_LAB_FAULT=raise, LlamaModel.forward on TP rank
SGLANG_LAB_FAULT_TP_RANK (default 0) raises
RuntimeError('CUDA error: an illegal memory access was encountered') at the
SGLANG_LAB_FAULT_AT_PREFILL-th prefill (extend) forward (default 2: the server's own
warm-up request is the first, the first real request the second).
With SGLANG_LAB_FAULT=hang that rank instead sleeps forever there (its peers wait in
their all-reduce until --dist-timeout).
With SGLANG_LAB_CPU_TP=1, tensor parallelism on --device cpu uses gloo groups (see
allow_cpu_tensor_parallel).

DO NOT shift line numbers in this file without re-recording: expected.toml files under
tests/data/realworld/rec_sglang_* name lines of this file.
"""
import os
import sys
import time

FAULT = os.environ.get("SGLANG_LAB_FAULT", "none")
FAULT_TP_RANK = int(os.environ.get("SGLANG_LAB_FAULT_TP_RANK", "0"))
FAULT_AT_PREFILL = int(os.environ.get("SGLANG_LAB_FAULT_AT_PREFILL", "2"))


def stall_forever():
    """The 'hang' fault: this rank never reaches its next collective."""
    while True:
        time.sleep(60)


def install_fault():
    from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank
    from sglang.srt.models import llama

    original_forward = llama.LlamaModel.forward
    prefills_seen = 0

    def forward(self, input_ids, positions, forward_batch, *args, **kwargs):
        nonlocal prefills_seen
        if forward_batch.forward_mode.is_extend():
            prefills_seen += 1
            if (get_tensor_model_parallel_rank() == FAULT_TP_RANK
                    and prefills_seen == FAULT_AT_PREFILL):
                if FAULT == "hang":
                    stall_forever()
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return original_forward(self, input_ids, positions, forward_batch, *args, **kwargs)

    llama.LlamaModel.forward = forward


def allow_cpu_tensor_parallel():
    """--device cpu without SGLang's CPU engine (which needs a CPU build of sgl-kernel)
    still asks for PyNccl and custom all-reduce when tp > 1: use plain torch.distributed
    (gloo) groups instead."""
    from sglang.srt.distributed import parallel_state

    original = parallel_state.init_model_parallel_group

    def init_model_parallel_group(*args, **kwargs):
        kwargs.update(use_pynccl=False, use_custom_allreduce=False)
        return original(*args, **kwargs)

    parallel_state.init_model_parallel_group = init_model_parallel_group


if os.environ.get("SGLANG_LAB_CPU_TP", "0") == "1":
    allow_cpu_tensor_parallel()
if FAULT in ("raise", "hang"):
    install_fault()


if __name__ == "__main__":
    from sglang.launch_server import run_server
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    load_plugins()
    server_args = prepare_server_args(sys.argv[1:])
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
