"""Lab-only platform plugin (entry point group vllm.platform_plugins).

vLLM 0.32's CpuPlatform has ray_device_key = "" and refuses
`--distributed-executor-backend ray` ("current platform cpu does not support
ray."). With VLLM_LAB_RAY_CPU=1 this plugin activates, in every process (Ray
actors included), a CpuPlatform subclass that asks Ray for "GPU" bundles,
which a Ray head started with `--num-gpus 2` hands out. Nothing else changes:
the workers still compute on the CPU. Unset, the plugin stays out of the way.
"""
import os


def detect():
    if os.environ.get("VLLM_LAB_RAY_CPU") == "1":
        return "vllm_fault_inject.ray_cpu_platform.RayCpuPlatform"
    return None
