#!/usr/bin/env python3
"""Records the torchrun / PyTorch GPU crash consoles and the machine's environment.

Run on the GPU machine from the repository root:

    PYTHONUNBUFFERED=1 python3 lab/gpu/torchrun/record_all.py --rec /tmp/rec_tr
    tar czf $OUT/rec_tr.tgz -C /tmp rec_tr

Writes <rec>/<scenario>/console.txt (stdout+stderr of the command merged, as a terminal
shows them), <rec>/<scenario>/dmesg_new.txt (kernel lines that appeared meanwhile),
<rec>/env/*.txt, <rec>/versions.txt and <rec>/commands.jsonl (each command, its
environment additions, exit status, duration). Each command runs in its own process
group with its own timeout; one failing does not stop the rest; a global deadline
skips what no longer fits. --dry-cpu runs the scripts' CPU dry runs (no GPU needed).
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.monotonic()
A = None
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}


def left():
    return A.deadline_s - (time.monotonic() - T0)


def log(msg):
    print("[record_all %6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def run(name, cmd, out, timeout, env_add=None, cwd=None):
    """Runs cmd (a shell string), stdout+stderr -> out; kills its process group on timeout."""
    t = min(timeout, left() - 3)
    if t < 5:
        log("%s: SKIPPED (deadline) %s" % (name, cmd))
        return None
    env = dict(os.environ)
    env.update(SAFE_ENV)
    env.update(env_add or {})
    log("%s: %s > %s (timeout %.0fs)" % (name, cmd, out, t))
    start, t_start = time.time(), time.monotonic()
    with open(out, "w") as f:
        p = subprocess.Popen(cmd, shell=True, stdout=f, stderr=subprocess.STDOUT, env=env,
                             cwd=cwd or A.root, start_new_session=True)
        timed_out = False
        try:
            rc = p.wait(timeout=t)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGTERM)
            try:
                rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
    # leftovers of the group (a worker torchrun did not reap) must not outlive the scenario
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    dur = time.monotonic() - t_start
    rec = {"name": name, "cmd": cmd, "out": out, "env": dict(SAFE_ENV, **(env_add or {})),
           "cwd": cwd or A.root, "rc": rc, "timed_out": timed_out, "timeout_s": round(t),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(start)),
           "duration_s": round(dur, 2)}
    with open(os.path.join(A.rec, "commands.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    log("  -> rc=%s%s in %.1fs" % (rc, " (TIMED OUT)" if timed_out else "", dur))
    return rc


def dmesg():
    try:
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20).stdout.splitlines()
    except Exception as e:  # noqa: BLE001
        log("dmesg failed: %r" % e)
        return None


def scenario(name, cmd, timeout, env_add=None, full_dmesg=False):
    d = os.path.join(A.rec, name)
    os.makedirs(d, exist_ok=True)
    before = dmesg()
    run(name, cmd, os.path.join(d, "console.txt"), timeout, env_add)
    time.sleep(1)                                    # let the driver's Xid lines land
    after = dmesg()
    if before is not None and after is not None:
        with open(os.path.join(d, "dmesg_new.txt"), "w") as f:
            f.write("".join(l + "\n" for l in after[len(before):]))
    if full_dmesg:
        run(name + ":dmesg", "dmesg", os.path.join(d, "dmesg.txt"), 20)
        run(name + ":dmesg-T", "dmesg -T", os.path.join(d, "dmesg_T.txt"), 20)


def env_captures():
    d = os.path.join(A.rec, "env")
    os.makedirs(d, exist_ok=True)
    cmds = {
        "nvidia-smi.txt": "nvidia-smi",
        "nvidia-smi_q.txt": "nvidia-smi -q",
        "dmesg.txt": "dmesg",
        "dmesg_T.txt": "dmesg -T",
        "proc_uptime.txt": "cat /proc/uptime",
        "date_Is.txt": "date -Is",
        "collect_env.txt": "python3 -m torch.utils.collect_env",
        "pip_freeze.txt": "python3 -m pip freeze",
    }
    for fn, cmd in cmds.items():
        run("env:" + fn, cmd, os.path.join(d, fn), 90)
    fields = ["name", "driver_version", "pci.bus_id", "ecc.errors.uncorrected.volatile.total",
              "retired_pages.pending", "clocks_throttle_reasons.active"]
    q = "nvidia-smi --query-gpu=%s --format=csv"
    out = os.path.join(d, "nvidia-smi_query.txt")
    if run("env:query", q % ",".join(fields), out, 30) != 0:
        ok = [f for f in fields
              if run("env:probe " + f, q % f, os.path.join(d, "probe.tmp"), 30) == 0]
        os.remove(os.path.join(d, "probe.tmp"))
        run("env:query", q % ",".join(ok), out, 30)


def versions():
    cmds = ["date -u", "date -Is", "uname -a", "nvidia-smi", "cat /proc/driver/nvidia/version",
            "nvcc --version", "compute-sanitizer --version", "which python3 torchrun", "python3 -V",
            "python3 -c 'import torch, triton, cupy; print(\"torch\", torch.__version__, \"cuda\", "
            "torch.version.cuda, \"nccl\", torch.cuda.nccl.version()); print(\"triton\", "
            "triton.__version__); print(\"cupy\", cupy.__version__)'",
            "ulimit -c", "cat /proc/sys/kernel/core_pattern"]
    with open(os.path.join(A.rec, "versions.txt"), "w") as f:
        for c in cmds:
            f.write("$ %s\n" % c)
            f.flush()
            subprocess.run(c, shell=True, stdout=f, stderr=subprocess.STDOUT, timeout=60)


def main():
    global A
    p = argparse.ArgumentParser()
    p.add_argument("--rec", default="/tmp/rec_tr")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    p.add_argument("--deadline-s", type=float, default=420)
    p.add_argument("--dry-cpu", action="store_true")
    p.add_argument("only", nargs="*", help="scenario names (default: all)")
    A = p.parse_args()
    os.makedirs(A.rec, exist_ok=True)
    dry = " --dry-cpu" if A.dry_cpu else ""
    rel = os.path.relpath(HERE, A.root)
    tr = "torchrun --standalone --nproc-per-node 2 "
    plan = [
        ("nccl_watchdog_oob", tr + rel + "/nccl_watchdog_oob.py" + dry, 120, None, True),
        ("cuda_graph_oob", "python3 " + rel + "/cuda_graph_oob.py", 60, None, False),
        ("inductor_index_oob", "python3 " + rel + "/inductor_index_oob.py", 180, None, False),
        ("oom_rank0", tr + rel + "/oom_rank0.py" + dry, 90, None, False),
        ("gloo_timeout_gpu_hang", tr + rel + "/gloo_timeout_gpu_hang.py" + dry, 100, None, False),
        ("env", None, 0, None, False),
        ("nccl_watchdog_oob_memcheck",
         "compute-sanitizer --tool memcheck --target-processes all --print-limit 10 "
         + tr + rel + "/nccl_watchdog_oob.py --layers 2 --hidden 1024 --gloo-timeout-s 150",
         200, None, False),
        # the same without NCCL's benign API-error reports (cudaErrorNoKernelImageForDevice
        # from its kernel probing), which otherwise use up the print limit
        ("nccl_watchdog_oob_memcheck_noapi",
         "compute-sanitizer --tool memcheck --report-api-errors no --target-processes all "
         "--print-limit 10 "
         + tr + rel + "/nccl_watchdog_oob.py --layers 2 --hidden 1024 --gloo-timeout-s 150",
         200, None, False),
    ]
    if A.dry_cpu:
        plan = [s for s in plan if s[0] in ("nccl_watchdog_oob", "oom_rank0", "gloo_timeout_gpu_hang")]
    if A.only:
        plan = [s for s in plan if s[0] in A.only]
    if not A.dry_cpu:
        versions()
    for name, cmd, timeout, env_add, full in plan:
        if name == "env":
            env_captures()
            continue
        scenario(name, cmd, timeout, env_add, full)
        if name == "inductor_index_oob":             # keep the generated kernels it names
            text = open(os.path.join(A.rec, name, "console.txt"), errors="replace").read()
            for path in sorted(set(re.findall(r"(/\S+?\.py):\d+: unknown:", text))):
                for src in glob.glob(path):
                    shutil.copy(src, os.path.join(A.rec, name, "kernel_" + os.path.basename(src)))
    log("done; %s" % shlex.quote(A.rec))


if __name__ == "__main__":
    main()
