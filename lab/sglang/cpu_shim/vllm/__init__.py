# Stand-in for the one vllm symbol SGLang 0.5.23 imports on a non-CUDA, non-CPU-engine
# device (sglang/srt/layers/rotary_embedding/base.py). Not vLLM. See lab/sglang/README.md.
