#!/usr/bin/env bash
# Record the real console of a 4-rank torchrun job (gloo, CPU) with one misbehaving rank.
#
#   PATH=/work/venvs/torch/bin:$PATH bash lab/torchrun/record.sh SCENARIO [OUT_ROOT]
#
# Writes OUT_ROOT/rec_torchrun_<SCENARIO>/console.txt (stdout+stderr merged, as a
# terminal shows them; PYTHONUNBUFFERED=1 so the interleaving is the one a terminal sees)
# and prints the exact command and its exit status. OUT_ROOT defaults to
# tests/data/realworld. Run from the repository root. expected.toml is written by hand
# afterwards (it is the answer key: what we broke and what really happened).
set -u
scenario=${1:?scenario: raise sigkill segv hang hang_pyspy record_logdir tee two_nodes}
out_root=${2:-tests/data/realworld}
dir=$out_root/rec_torchrun_$scenario
mkdir -p "$dir"
export PYTHONUNBUFFERED=1

W=lab/torchrun/worker.py
TR="torchrun --standalone --nproc-per-node 4"

case $scenario in
  raise)    cmd="$TR $W --fault raise --fault-rank 2 --fault-step 5" ;;
  sigkill)  cmd="$TR $W --fault sigkill --fault-rank 1 --fault-step 5" ;;
  segv)     cmd="$TR $W --fault segv --fault-rank 3 --fault-step 5" ;;
  hang)     cmd="$TR $W --fault hang --fault-rank 3 --fault-step 5 --timeout-s 10 --stack-dump-s 5" ;;
  tee)      cmd="$TR --tee 3 $W --fault raise --fault-rank 2 --fault-step 5" ;;
  record_logdir)
    rm -rf "$dir/logs"
    # a fixed --rdzv-id instead of --standalone's random one, so the log dir name is stable
    cmd="torchrun --nnodes 1 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29533 --rdzv-id job42"
    cmd="$cmd --log-dir $dir/logs --redirects 3 --tee 3 $W --record --fault raise --fault-rank 2 --fault-step 5"
    ;;
  hang_pyspy)
    # like hang, but instead of faulthandler a py-spy dump of every rank, 6 s after the
    # stall, into pyspy_rank<N>.txt beside the console
    cmd="$TR $W --fault hang --fault-rank 3 --fault-step 5 --timeout-s 10"
    rm -f "$dir"/pyspy_rank*.txt
    (
      sleep 1
      for _ in $(seq 60); do   # wait until step 5 is reached (rank 0 prints step 4)
        grep -q "step 4 all_reduce ok" "$dir/console.txt" 2>/dev/null && break
        sleep 0.2
      done
      sleep 6
      for r in 0 1 2 3; do
        pid=$(sed -n "s/^rank $r\/4 pid \([0-9]*\) up.*/\1/p" "$dir/console.txt")
        [ -n "$pid" ] && py-spy dump --pid "$pid" > "$dir/pyspy_rank$r.txt" 2>&1
      done
    ) &
    ;;
  two_nodes)
    # two torchrun agents on this host as "node 0" and "node 1" (2 workers each, static
    # rendezvous); global rank 3 = node 1's local rank 1 raises. Each node's console goes
    # to its own file, as each node's terminal would show it. --tee 3 adds [default<local>]:
    # in front of torch's own [rank<global>]: prefix.
    rm -f "$dir"/console.txt
    two="torchrun --nnodes 2 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29544 --tee 3"
    args="$W --fault raise --fault-rank 3 --fault-step 5"
    echo "+ $two --node-rank 0 $args > $dir/node0_console.txt 2>&1 &"
    echo "+ $two --node-rank 1 $args > $dir/node1_console.txt 2>&1"
    $two --node-rank 0 $args > "$dir/node0_console.txt" 2>&1 &
    pid0=$!
    $two --node-rank 1 $args > "$dir/node1_console.txt" 2>&1
    echo "node 1 exit status $?"
    wait $pid0
    echo "node 0 exit status $?"
    exit 0
    ;;
  *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac

echo "+ $cmd"
$cmd > "$dir/console.txt" 2>&1
status=$?
wait
echo "exit status $status"
