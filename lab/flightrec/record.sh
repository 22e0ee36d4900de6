#!/usr/bin/env bash
# Record real Flight Recorder dumps of a torchrun job (gloo, CPU) with one late rank.
#
#   PATH=/work/torchenv/bin:$PATH bash lab/flightrec/record.sh SCENARIO [OUT_ROOT]
#
# SCENARIO: missing | missing_json | subgroup | complete.  Writes
# OUT_ROOT/gloo_<SCENARIO>/nccl_trace_rank_<N> (each rank's dump, written by the worker on
# demand under PyTorch's default name) and console.txt (torchrun's stdout+stderr merged,
# PYTHONUNBUFFERED=1).  OUT_ROOT defaults to tests/data/flightrec.  Run from the
# repository root, so that the dumps' frames name lab/flightrec/worker.py as a relative path.
set -u
scenario=${1:?scenario: missing missing_json subgroup complete}
out_root=${2:-tests/data/flightrec}
dir=$out_root/gloo_$scenario
rm -rf "$dir"
mkdir -p "$dir"
export PYTHONUNBUFFERED=1 TORCH_FR_BUFFER_SIZE=64 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$dir/nccl_trace_rank_
W=lab/flightrec/worker.py
case $scenario in
  missing)      cmd="torchrun --standalone --nproc-per-node 3 $W --scenario missing --late-rank 2" ;;
  missing_json) cmd="torchrun --standalone --nproc-per-node 3 $W --scenario missing --late-rank 2 --json" ;;
  subgroup)     cmd="torchrun --standalone --nproc-per-node 4 $W --scenario subgroup --late-rank 3" ;;
  complete)     cmd="torchrun --standalone --nproc-per-node 2 $W --scenario complete" ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
echo "+ TORCH_FR_BUFFER_SIZE=$TORCH_FR_BUFFER_SIZE TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$TORCH_NCCL_DEBUG_INFO_TEMP_FILE $cmd > $dir/console.txt 2>&1"
$cmd > "$dir/console.txt" 2>&1
echo "exit status $?"
ls -l "$dir"
