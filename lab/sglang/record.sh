#!/usr/bin/env bash
# Record the real console of an SGLang server (CPU, tiny random Llama) whose model
# forward raises a planted CUDA error on the first real request.
#
#   [FAULT=raise|hang] [EXTRA_ARGS="--dist-timeout 20"] bash lab/sglang/record.sh NAME TP [OUT_ROOT]
#   (from the repository root; the fault is planted on the last TP rank unless
#   FAULT_TP_RANK says otherwise)
#
# Needs /work/venvs/sglang (pip install sglang) and the model made by
# lab/sglang/make_tiny_model.py in /work/venvs/tiny-llama. Writes
# OUT_ROOT/rec_sglang_NAME/console.txt (stdout+stderr merged).
set -u
name=${1:?name}; tp=${2:-1}; out_root=${3:-tests/data/realworld}
dir=$out_root/rec_sglang_$name
mkdir -p "$dir"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export PATH=/work/venvs/sglang/bin:$PATH   # as with the venv activated: SGLang runs py-spy from PATH
export PYTHONPATH=$PWD/lab/sglang/cpu_shim          # pure-torch vllm._custom_ops.rotary_embedding
export SGLANG_LAB_CPU_TP=1 SGLANG_LAB_FAULT=${FAULT:-raise} SGLANG_LAB_FAULT_TP_RANK=${FAULT_TP_RANK:-$((tp - 1))}
export SGLANG_CPU_OMP_THREADS_BIND=${SGLANG_CPU_OMP_THREADS_BIND:-$(seq -s "|" 0 $((tp - 1)))}  # one core per TP rank
port=30111
cmd="/work/venvs/sglang/bin/python lab/sglang/launch_with_fault.py --model-path /work/venvs/tiny-llama --device cpu --tp-size $tp --max-total-tokens 2048 --host 127.0.0.1 --port $port ${EXTRA_ARGS:-}"
echo "+ SGLANG_LAB_CPU_TP=1 SGLANG_CPU_OMP_THREADS_BIND=$SGLANG_CPU_OMP_THREADS_BIND SGLANG_LAB_FAULT=$SGLANG_LAB_FAULT SGLANG_LAB_FAULT_TP_RANK=$SGLANG_LAB_FAULT_TP_RANK $cmd"
timeout 400 $cmd > "$dir/console.txt" 2>&1 &
server=$!
for _ in $(seq 300); do
  grep -q "The server is fired up and ready to roll" "$dir/console.txt" && break
  kill -0 $server 2>/dev/null || break
  sleep 1
done
echo "+ curl -s http://127.0.0.1:$port/generate -d '{\"text\": \"the quick brown fox\", ...}'"
curl -s -m 120 "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
  -d '{"text": "the quick brown fox", "sampling_params": {"max_new_tokens": 8}}'
echo " (curl exit $?)"
wait $server
echo "server exit status $?"
