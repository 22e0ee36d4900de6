#!/usr/bin/env python3
"""Driver: records real GPU crash output on a CUDA machine.

Run from the repository root:
    PYTHONUNBUFFERED=1 python3 lab/gpu/record.py --rec /tmp/rec [SCENARIO ...]
Writes /tmp/rec/bundles/<bundle>/ (recorded outputs only), /tmp/rec/sidecar/<bundle>/
(ground-truth side channel written by the programs), /tmp/rec/build/, versions.txt and
commands.jsonl (every command run, its env additions, exit status and duration).
Each scenario runs in its own subprocess under `timeout`; a failing one does not stop the rest.
"""
import argparse
import glob
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = time.monotonic()
ARGS = None
FAULT = "rank=2,step=2,add=0x40000000000"
CORE_FLAGS = ("skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,"
              "skip_local_memory,skip_constbank_memory")


def left():
    return ARGS.deadline_s - (time.monotonic() - T0)


def log(msg):
    print("[record %6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def sh(bundle, cmd, timeout, env_add=None, cwd=None):
    """Runs one shell command under `timeout`, records it in commands.jsonl."""
    t = max(5, min(timeout, left() - 5))
    env = dict(os.environ)
    env.update(env_add or {})
    full = "timeout -k 10 %d bash -c %s" % (t, shlex.quote(cmd))
    log("%s: %s (timeout %ds)" % (bundle, cmd, t))
    start = time.time()
    p = subprocess.run(full, shell=True, env=env, cwd=cwd or ARGS.root)
    dur = time.time() - start
    rec = {"bundle": bundle, "cmd": cmd, "env": env_add or {}, "cwd": cwd or ARGS.root,
           "rc": p.returncode, "timeout_s": t, "timed_out": p.returncode in (124, 137),
           "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start)),
           "duration_s": round(dur, 2)}
    with open(os.path.join(ARGS.rec, "commands.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    log("  -> rc=%d in %.1fs" % (p.returncode, dur))
    return p.returncode


def dmesg_lines():
    try:
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20).stdout.splitlines()
    except Exception:
        return None


class Bundle:
    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(ARGS.rec, "bundles", name)
        self.side = os.path.join(ARGS.rec, "sidecar", name)
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs(self.side, exist_ok=True)

    def __enter__(self):
        self.dm0 = dmesg_lines()
        return self

    def __exit__(self, *exc):
        dm1 = dmesg_lines()
        if self.dm0 is not None and dm1 is not None:
            new = dm1[len(self.dm0):]
            with open(os.path.join(self.side, "dmesg_new_lines.txt"), "w") as f:
                f.write("\n".join(new) + ("\n" if new else ""))
            nv = [l for l in new if "NVRM" in l or "Xid" in l]
            if nv:
                with open(os.path.join(self.dir, "dmesg.txt"), "w") as f:
                    f.write("\n".join(nv) + "\n")
        if exc[0] is not None:
            log("scenario %s raised %r" % (self.name, exc[1]))
            with open(os.path.join(self.side, "driver_error.txt"), "w") as f:
                f.write(repr(exc[1]) + "\n")
        return True  # never let one scenario stop the others


def q(s):
    return shlex.quote(s)


def versions():
    cmds = ["date -u", "uname -a", "nvidia-smi", "cat /proc/driver/nvidia/version",
            "nvcc --version", "compute-sanitizer --version", "cuda-gdb --version | head -3",
            "gcc --version | head -1", "python3 -V",
            "python3 -c 'import torch, cupy, triton, numpy; from cuda import bindings; "
            "print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda); print(\"cupy\", cupy.__version__); "
            "print(\"triton\", triton.__version__); print(\"cuda-bindings\", bindings.__version__); "
            "print(\"numpy\", numpy.__version__)'",
            "cat /proc/sys/kernel/core_pattern", "ulimit -c", "dmesg | tail -3; echo dmesg_rc=$?"]
    with open(os.path.join(ARGS.rec, "versions.txt"), "w") as f:
        for c in cmds:
            p = subprocess.run(c, shell=True, capture_output=True, text=True, timeout=60)
            f.write("$ %s\n%s%s\n" % (c, p.stdout, p.stderr))


def build():
    b = os.path.join(ARGS.rec, "build")
    os.makedirs(b, exist_ok=True)
    cs = os.path.join(HERE, "csrc")
    jobs = ["nvcc -cubin -arch=sm_90 -lineinfo -o %s/tp_signal_kernels.cubin %s/tp_signal_kernels.cu" % (b, cs)]
    for n in ["misaligned_address", "device_assert", "shared_race", "uninit_read"]:
        jobs.append("cd %s && nvcc -g -lineinfo -arch=sm_90 -o %s/%s %s.cu" % (cs, b, n, n))
    jobs.append("cd %s && gcc -g -O0 -o %s/segv segv.c" % (cs, b))
    cmd = " & ".join("( %s ) > %s/build_%d.log 2>&1" % (j, b, i) for i, j in enumerate(jobs)) + "; wait"
    with open(os.path.join(b, "build_commands.txt"), "w") as f:
        f.write("\n".join(jobs) + "\n")
    sh("_build", cmd, 180)


def tp4_cmd(bundle, extra=""):
    return ("cd %s && exec python3 -m minitp.core --cubin %s --log-dir %s --tensor-parallel-size 4 "
            "--max-num-batched-tokens 8064 --prompt-len 36000 --workspace-max-num-tokens 16128 "
            "--inject-fault %s %s" % (q(HERE), q(os.path.join(ARGS.rec, "build", "tp_signal_kernels.cubin")),
                                      q(bundle.dir), FAULT, extra))


def tp4_env(bundle):
    return {"PYTHONUNBUFFERED": "1", "PYTHONPATH": HERE, "MINI_TRUTH_DIR": bundle.side,
            "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def sc_tp4_plain():
    with Bundle("tp4_oob_write_del_cumemfree") as b:
        sh(b.name, tp4_cmd(b) + " > %s 2>&1" % q(os.path.join(b.dir, "server.log")), 150, tp4_env(b))


def sc_tp4_memcheck():
    with Bundle("tp4_oob_write_memcheck") as b:
        cmd = tp4_cmd(b, "--gloo-timeout-s 180").replace(
            "exec python3", "exec compute-sanitizer --tool memcheck --target-processes all "
            "--log-file %s python3" % q(os.path.join(b.dir, "compute-sanitizer.%p.log")))
        sh(b.name, cmd + " > %s 2>&1" % q(os.path.join(b.dir, "server.log")), 240, tp4_env(b))


def sc_tp4_memcheck_xml():
    with Bundle("tp4_oob_write_memcheck_xml") as b:
        cmd = tp4_cmd(b, "--gloo-timeout-s 180").replace(
            "exec python3", "exec compute-sanitizer --tool memcheck --target-processes all "
            "--xml --save %s python3" % q(os.path.join(b.dir, "compute-sanitizer.%p.xml")))
        sh(b.name, cmd + " > %s 2>&1" % q(os.path.join(b.dir, "server.log")), 240, tp4_env(b))


def cudagdb_core(bundle, dump, out):
    cmd = ("cuda-gdb -nx -batch -ex %s -ex 'info cuda kernels' -ex 'info cuda devices' "
           "-ex 'info cuda sms' -ex 'info cuda warps' -ex 'info cuda lanes' -ex bt -ex 'p $errorpc' "
           "> %s 2>&1" % (q("target cudacore " + dump), q(out)))
    sh(bundle, cmd, 120)


def sc_tp4_coredump():
    with Bundle("tp4_oob_write_coredump") as b:
        env = tp4_env(b)
        env.update({"CUDA_ENABLE_COREDUMP_ON_EXCEPTION": "1", "CUDA_COREDUMP_SHOW_PROGRESS": "1",
                    "CUDA_COREDUMP_FILE": os.path.join(b.dir, "core_%p.nvcudmp"),
                    "CUDA_COREDUMP_GENERATION_FLAGS": CORE_FLAGS,
                    "CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION": "0"})
        sh(b.name, tp4_cmd(b) + " > %s 2>&1" % q(os.path.join(b.dir, "server.log")), 180, env)
        for dump in sorted(glob.glob(os.path.join(b.dir, "*.nvcudmp"))):
            cudagdb_core(b.name, dump, os.path.join(b.dir, "cuda-gdb_cudacore.txt"))
            if os.path.getsize(dump) > 10 * 2**20:
                with open(dump, "rb") as fi, gzip.open(dump + ".gz", "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                os.remove(dump)


def single(name, tool, gdb=False, xml=True, prog=None, env=None):
    with Bundle(name) as b:
        prog = prog or os.path.join(ARGS.rec, "build", name)
        env = dict(env or {}, PYTHONUNBUFFERED="1", MINI_TRUTH_DIR=b.side)
        sh(name, "%s > %s 2>&1" % (prog, q(os.path.join(b.dir, "console.log"))), 90, env)
        extra = " --racecheck-report all" if tool == "racecheck" else ""
        sh(name, "compute-sanitizer --tool %s%s %s > %s 2>&1" % (
            tool, extra, prog, q(os.path.join(b.dir, "compute-sanitizer_%s.txt" % tool))), 150, env)
        if xml:
            sh(name, "compute-sanitizer --tool %s --xml --save %s %s > %s 2>&1" % (
                tool, q(os.path.join(b.dir, "compute-sanitizer_%s.xml" % tool)), prog,
                q(os.path.join(b.side, "console_xml_run.log"))), 150, env)
        if gdb:
            sh(name, "cuda-gdb -nx -batch -ex run -ex bt -ex 'info cuda kernels' -ex 'info cuda lanes' "
               "%s > %s 2>&1" % (prog, q(os.path.join(b.dir, "cuda-gdb.txt"))), 120, env)


def sc_misaligned():
    single("misaligned_address", "memcheck", gdb=True)


def sc_assert():
    single("device_assert", "memcheck")


def sc_race():
    single("shared_race", "racecheck")


def sc_uninit():
    single("uninit_read", "initcheck")


def sc_torch():
    single("torch_item_after_oob", "memcheck",
           prog="python3 %s" % q(os.path.join(HERE, "torch_item_after_oob.py")))


def sc_cpu_core():
    with Bundle("cpu_segv_core") as b:
        cp = "/proc/sys/kernel/core_pattern"
        with open(os.path.join(b.side, "core_pattern_before.txt"), "w") as f:
            f.write(open(cp).read())
        cores = "/tmp/cpu_cores"
        os.makedirs(cores, exist_ok=True)
        try:
            with open(cp, "w") as f:
                f.write(cores + "/core.%e.%p\n")
        except OSError as e:
            with open(os.path.join(b.side, "core_pattern_not_writable.txt"), "w") as f:
                f.write(repr(e) + "\n")
            return
        prog = os.path.join(ARGS.rec, "build", "segv")
        sh(b.name, "ulimit -c unlimited; cd %s && bash -c './segv; echo \"exit status $?\"' > %s 2>&1" % (
            q(os.path.dirname(prog)), q(os.path.join(b.dir, "console.log"))), 60)
        for c in glob.glob(cores + "/core.segv.*"):
            dst = os.path.join(b.dir, os.path.basename(c))
            shutil.copy(c, dst)
            if os.path.getsize(dst) > 2 * 2**20:
                with open(dst, "rb") as fi, gzip.open(dst + ".gz", "wb") as fo:
                    shutil.copyfileobj(fi, fo)
                os.remove(dst)
                continue
            sh(b.name, "cuda-gdb -nx -batch -ex bt -ex 'info registers rip' -ex 'info frame' %s %s > %s 2>&1"
               % (q(prog), q(dst), q(os.path.join(b.dir, "cuda-gdb_core.txt"))), 60)


SCENARIOS = {"tp4_plain": sc_tp4_plain, "misaligned": sc_misaligned, "assert": sc_assert,
             "race": sc_race, "uninit": sc_uninit, "coredump": sc_tp4_coredump,
             "torch": sc_torch, "memcheck": sc_tp4_memcheck, "memcheck_xml": sc_tp4_memcheck_xml,
             "cpu_core": sc_cpu_core}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--rec", default="/tmp/rec")
    ap.add_argument("--root", default=os.getcwd())
    ap.add_argument("--deadline-s", type=float, default=520)
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    ARGS = ap.parse_args()
    os.makedirs(ARGS.rec, exist_ok=True)
    versions()
    build()
    for s in ARGS.scenarios:
        if left() < 20:
            log("deadline: skipping %s" % s)
            with open(os.path.join(ARGS.rec, "skipped.txt"), "a") as f:
                f.write(s + "\n")
            continue
        try:
            SCENARIOS[s]()
        except Exception as e:  # keep going
            log("scenario %s failed in the driver: %r" % (s, e))
    subprocess.run("du -ab %s | sort -k2 > %s/sizes.txt" % (q(ARGS.rec), q(ARGS.rec)), shell=True)
    log("done")


if __name__ == "__main__":
    main()
