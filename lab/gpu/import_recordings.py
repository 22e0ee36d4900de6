#!/usr/bin/env python3
"""Copies recorded bundles from an unpacked recordings.tgz (record.py --rec DIR) into
tests/data/gpu/<bundle>/ and writes tests/data/gpu/<bundle>.truth.toml (ground truth by
construction: from the programs' sources, the driver's commands.jsonl and the sidecar JSON
the programs wrote while running).  Never edits a recorded file.

    python3 lab/gpu/import_recordings.py REC_DIR [REC_DIR ...]
"""
import glob
import json
import os
import re
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAB = os.path.join(ROOT, "lab", "gpu")
DEST = os.path.join(ROOT, "tests", "data", "gpu")
DEVICE_ROOT = "/work/main"  # where the repository sat on the GPU machine


def src_line(rel, needle):
    with open(os.path.join(LAB, rel)) as f:
        for i, line in enumerate(f, 1):
            if needle in line:
                return i, line.strip()
    raise KeyError((rel, needle))


def dev_path(rel):
    return "%s/lab/gpu/%s" % (DEVICE_ROOT, rel)


def tv(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(tv(x) for x in v) + "]"
    return json.dumps(str(v))


class Toml:
    def __init__(self, header):
        self.lines = ["# " + l for l in header.splitlines()] + [""]

    def kv(self, **kw):
        for k, v in kw.items():
            if v is None:
                continue
            key = k if re.match(r"^[A-Za-z0-9_-]+$", k) else json.dumps(k)
            self.lines.append("%s = %s" % (key, tv(v)))

    def table(self, name, array=False, **kw):
        self.lines += ["", ("[[%s]]" if array else "[%s]") % name]
        self.kv(**kw)

    def text(self):
        return "\n".join(self.lines) + "\n"


def versions_line(rec):
    v = open(os.path.join(rec, "versions.txt")).read()
    drv = re.search(r"Driver Version: (\S+)", v).group(1)
    cs = re.search(r"Version (\d{4}\.\d+\.\d+)", v).group(1)
    torch = re.search(r"torch (\S+)", v).group(1)
    cb = re.search(r"cuda-bindings (\S+)", v).group(1)
    gdb = re.search(r"NVIDIA \(R\) cuda-gdb (\S+)", v).group(1)
    py = re.search(r"Python (\S+)", v).group(1)
    return ("one NVIDIA H200 (sm_90, 132 SMs) in a Firecracker VM, driver %s, CUDA 13.0 (nvcc 13.0.88), "
            "Python %s, torch %s, cuda-bindings %s, compute-sanitizer %s, cuda-gdb %s"
            % (drv, py, torch, cb, cs, gdb))


def commands(rec, bundle):
    out = []
    with open(os.path.join(rec, "commands.jsonl")) as f:
        for line in f:
            c = json.loads(line)
            if c["bundle"] == bundle:
                out.append(c)
    return out


def xid_lines(bdir):
    p = os.path.join(bdir, "dmesg.txt")
    if not os.path.exists(p):
        return []
    res = []
    for line in open(p):
        m = re.search(r"Xid \(([^)]*)\): (\d+), (?:pid=(\d+), name=([^,]+), )?(.*)", line)
        if m:
            res.append({"xid": int(m.group(2)), "pid": int(m.group(3)) if m.group(3) else None,
                        "name": m.group(4), "line": line.rstrip("\n")})
    return res


def base_doc(rec, bundle, what):
    t = Toml("Ground truth for bundle %s, by construction (lab/gpu/import_recordings.py).\n"
             "This file is the answer key: do not feed it to the analyzer.\n%s" % (bundle, what))
    t.kv(bundle=bundle, schema="gpu-crash-truth/1", real_recording=True,
         produced_on=versions_line(rec),
         produced_by="lab/gpu/record.py on the GPU machine; commands in tests/data/gpu/README.md")
    return t


def add_xids(t, bdir):
    for x in xid_lines(bdir):
        t.table("kernel_log.xid", array=True, xid=x["xid"], pid=x["pid"], process_name=x["name"],
                line=x["line"])


def add_commands(t, rec, bundle):
    for c in commands(rec, bundle):
        t.table("commands", array=True, cmd=c["cmd"], env=" ".join("%s=%s" % kv for kv in c["env"].items()),
                exit_status=c["rc"], duration_s=c["duration_s"], started=c["started"])


# ---------------------------------------------------------------- TP=4 bundles
def tp4(rec, bundle, variant):
    bdir = os.path.join(rec, "bundles", bundle)
    side = os.path.join(rec, "sidecar", bundle)
    fault = json.load(open(os.path.join(side, "fault_rank2.json")))
    engine = json.load(open(os.path.join(side, "engine.json")))
    pids = {r: json.load(open(os.path.join(side, "worker_TP%d.json" % r)))["pid"] for r in range(4)}
    exits = {}
    for line in open(os.path.join(bdir, "exit_codes.txt")):
        m = re.match(r"(\S+) pid=(\d+) exit_code=(-?\d+)", line)
        if m:
            exits[m.group(1)] = int(m.group(3))
    server = open(os.path.join(bdir, "server.log"), encoding="utf-8", errors="replace").read()
    kl, kcode = src_line("csrc/tp_signal_kernels.cu", "FAULT_LINE")
    descr = {
        "plain": "Plain run: the error surfaces as CUDA error 700 first in SignalPadBuffer.__del__ "
                 "(cuMemFree, printed as an unraisable exception) and then in the normal path (cuMemAlloc).",
        "memcheck": "Same run under compute-sanitizer memcheck (--target-processes all, text log per process).",
        "memcheck_xml": "Same run under compute-sanitizer memcheck (--target-processes all, --xml --save per process).",
        "coredump": "Same run with GPU core dumps on exception; cuda-gdb transcript of the dump.",
    }[variant]
    t = base_doc(rec, bundle, descr)
    t.table("fault", kind="illegal_address_write",
            description="out-of-bounds write far past rank 2's signal pad: the flag offset passed to the kernel "
                        "was corrupted on purpose (+%s words), so threads 0..3 of the only block store 4 bytes "
                        "each about 16 TiB past the pad" % fault["planted_add_words"],
            kernel=fault["kernel"], kernel_source="lab/gpu/csrc/tp_signal_kernels.cu:%d" % kl,
            kernel_source_path_on_device=dev_path("csrc/tp_signal_kernels.cu"),
            kernel_source_line=kcode.split("//")[0].strip(), access="global store, 4 bytes",
            grid=fault["grid"], block=fault["block"],
            faulting_threads=["thread (%d,0,0) block (0,0,0)" % i for i in range(4)],
            faulting_rank=fault["rank"], faulting_process="Worker_TP%d" % fault["rank"],
            faulting_pid=fault["pid"], buffer="signal pad (SignalPadBuffer, cuMemAlloc)",
            buffer_base=fault["signal_pads_dev"], buffer_size_bytes=fault["signal_pad_bytes"],
            target_addresses=fault["target_addresses"], planted_offset_words=fault["planted_add_words"],
            faulting_step=fault["step"], num_computed_tokens_at_fault=8064, chunk_size_tokens=8064,
            prompt_tokens=36000, launched_at=fault["launched_at"],
            launch_api="cuLaunchKernel (cuda.bindings.driver), cubin built with nvcc -cubin -arch=sm_90 -lineinfo",
            launch_site="%s:%d in _launch_flags, called from all_reduce <- execute_model" % (
                dev_path("minitp/signal_pad.py"), src_line("minitp/signal_pad.py", "cuda.cuLaunchKernel(self.flag_fn")[0]),
            error_code_without_tools=700, error_name_without_tools="CUDA_ERROR_ILLEGAL_ADDRESS")
    del_line = src_line("minitp/signal_pad.py", "cuda.cuMemFree(self.signal_pads_dev)")
    alloc_line = src_line("minitp/signal_pad.py", "cuda.cuMemAlloc(self.size_bytes)")
    if variant == "plain":
        t.table("surface", summary="first visible in Worker_TP2 (pid %d) as RuntimeError: CUDA error code=700"
                "(b'CUDA_ERROR_ILLEGAL_ADDRESS') at cuMemFree in SignalPadBuffer.__del__ during step 3; the "
                "faulting kernel was oneshot_allreduce_flag_kernel launched in step 2" % fault["pid"],
                surface_is_not_the_faulting_kernel=True, step_when_surfaced=3)
        t.table("surfaces", array=True, order=1, how="unraisable exception in __del__ ('Exception ignored in: "
                "<function SignalPadBuffer.__del__ ...>')", exception="RuntimeError: CUDA error code=700"
                "(b'CUDA_ERROR_ILLEGAL_ADDRESS')", error_code=700, error_name="CUDA_ERROR_ILLEGAL_ADDRESS",
                api_call="cuMemFree", file=dev_path("minitp/signal_pad.py"), line=del_line[0],
                function="__del__", code=del_line[1], step=3)
        t.table("surfaces", array=True, order=2, how="raised in the normal call path and logged by the worker "
                "with logger.exception('WorkerProc hit an exception.'); the worker then exited 1",
                exception="RuntimeError: CUDA error code=700(b'CUDA_ERROR_ILLEGAL_ADDRESS')", error_code=700,
                error_name="CUDA_ERROR_ILLEGAL_ADDRESS", api_call="cuMemAlloc",
                file=dev_path("minitp/signal_pad.py"), line=alloc_line[0], function="__init__",
                code=alloc_line[1], call_chain="busy_loop -> execute_model -> ensure_workspace -> "
                "SignalPadBuffer.__init__ -> checkCudaErrors", step=3)
        t.table("surfaces", array=True, order=3, how="secondary noise: the half-built SignalPadBuffer whose "
                "__init__ raised is collected and its __del__ fails", exception="AttributeError: "
                "'SignalPadBuffer' object has no attribute 'signal_pads_dev'", file=dev_path("minitp/signal_pad.py"),
                line=del_line[0], function="__del__", is_root_cause=False)
    elif variant == "coredump":
        t.table("surface", summary="Worker_TP2 (pid %d) wrote a GPU core dump when the driver noticed the "
                "exception (during step 3, after 'Growing custom all-reduce workspace') and was then aborted by "
                "the CUDA driver (SIGABRT, exit -6); no Python-level CUDA error was printed" % fault["pid"],
                step_when_surfaced=3, faulting_process_signal="SIGABRT")
    else:
        codes = re.findall(r"\(Worker_TP2 pid=\d+\) RuntimeError: CUDA error code=(\d+)\(b'([A-Z_]+)'\)", server)
        t.table("surface", summary="under compute-sanitizer memcheck the invalid write is caught inside the "
                "kernel and reported by the sanitizer (4 invalid 4-byte writes, threads 0..3); the kernel is "
                "terminated, so Worker_TP2 (pid %d) sees error %s (%s), not 700, first from cuMemFree in "
                "SignalPadBuffer.__del__ and then from cuMemAlloc in the normal path during step 3"
                % (fault["pid"], codes[0][0] if codes else "?", codes[0][1] if codes else "?"),
                step_when_surfaced=3, error_code_under_sanitizer=int(codes[0][0]) if codes else None,
                error_name_under_sanitizer=codes[0][1] if codes else None,
                first_api=("cuMemFree in __del__ (%s:%d)" % (dev_path("minitp/signal_pad.py"), del_line[0])),
                second_api=("cuMemAlloc in __init__ (%s:%d)" % (dev_path("minitp/signal_pad.py"), alloc_line[0])))
    gloo = {}
    for m in re.finditer(r"\(Worker_TP(\d) pid=\d+\) ERROR [^\]]*\] RuntimeError: (\[[^\n\r]*Connection [^\r\n]*)", server):
        gloo.setdefault(int(m.group(1)), m.group(2))
    ar_line = src_line("minitp/signal_pad.py", "dist.all_reduce(partial_cpu)")
    t.table("ranks", tp_size=4, first_failing_rank=2, first_failing_process="Worker_TP2")
    for r in range(4):
        if r == 2:
            continue
        t.table("ranks.other_ranks", array=True, rank=r, process="Worker_TP%d" % r, pid=pids[r],
                failure_kind="gloo_connection_closed_by_peer" if r in gloo else "see server.log",
                message=gloo.get(r), step=3, exit_code=exits.get("Worker_TP%d" % r),
                file=dev_path("minitp/signal_pad.py"), line=ar_line[0], function="all_reduce", code=ar_line[1])
    t.table("processes", engine_pid=engine["pid"], engine_exit_code=exits.get("EngineCore_DP0"))
    t.table("processes.exit_codes", **{k: v for k, v in exits.items()})
    fe = re.search(r"EngineCore_DP0 pid=\d+\) ERROR [^\]]*\] RuntimeError: ([^\r\n]*)", server)
    t.table("engine", fatal_error_logged="EngineCore encountered a fatal error.",
            fatal_error_message=fe.group(1) if fe else None,
            fatal_error_points_at_faulting_rank=bool(fe and "700" in fe.group(1)))
    if variant in ("memcheck", "memcheck_xml"):
        logs = sorted(glob.glob(os.path.join(bdir, "compute-sanitizer.*")))
        t.table("sanitizer", tool="memcheck", files=[os.path.basename(p) for p in logs],
                note="one file only: the %%p in the file name expanded to a pid that is none of the engine "
                     "(%d) or worker (%s) pids, and that one file holds the reports of all target processes"
                     % (engine["pid"], ", ".join(str(pids[r]) for r in range(4))),
                faulting_pid=fault["pid"],
                expected_report="Invalid __global__ write of size 4 bytes in oneshot_allreduce_flag_kernel "
                                "at tp_signal_kernels.cu:%d" % kl)
    if variant == "coredump":
        gdb = open(os.path.join(bdir, "cuda-gdb_cudacore.txt")).read()
        dumps = [os.path.basename(p) for p in glob.glob(os.path.join(bdir, "*.nvcudmp*"))]
        exc = re.search(r"CUDA Exception: (.*)", gdb)
        pc = re.search(r"triggered at PC (0x[0-9a-f]+)\s+(\S+)\s+\(([^)]*)\)", gdb)
        kt = re.search(r"\*\s+\d+\s+-\s+\d+\s+\d+\s+\S+\s+\S+\s+(\(\S+\))\s+(\(\S+\))\s+(\S+)", gdb)
        dev = re.search(r"\*\s+0\s+\S+\s+(NVIDIA \S+)\s+(\S+)\s+(sm_\d+)\s+(\d+)", gdb)
        ep = re.search(r"\$1 = .*?(0x[0-9a-f]+) <([^>]*)>", gdb)
        focus = re.search(r"\[Current focus set to ([^\]]*)\]", gdb)
        t.table("coredump", files=dumps, faulting_pid=fault["pid"],
                generation_flags="skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,"
                                 "skip_local_memory,skip_constbank_memory",
                device_name=dev.group(1) if dev else None, device_description=dev.group(2) if dev else None,
                sm_arch=dev.group(3) if dev else None, sm_count=int(dev.group(4)) if dev else None,
                kernel=pc.group(2) if pc else None, exception=exc.group(1).strip() if exc else None,
                error_pc=pc.group(1) if pc else None, error_pc_source=pc.group(3) if pc else None,
                errorpc_printed=(ep.group(1) + " <" + ep.group(2) + ">") if ep else None,
                grid_dim=kt.group(1) if kt else None, block_dim=kt.group(2) if kt else None,
                focus=focus.group(1) if focus else None,
                faulting_lanes=len(re.findall(r"active 0x[0-9a-f]+\s+\(\d+,0,0\) Warp Illegal Address", gdb)))
    add_xids(t, bdir)
    add_commands(t, rec, bundle)
    return t


# ------------------------------------------------------- single-process bundles
SINGLES = {
    "misaligned_address": dict(
        kind="misaligned_address", kernel="pack_kv_header_kernel(char*, int, int)", src="csrc/misaligned_address.cu",
        error_code=716, error_name="cudaErrorMisalignedAddress", error_string="misaligned address",
        surface_api="cudaDeviceSynchronize", surface_needle="cudaDeviceSynchronize());",
        grid=[2, 1, 1], block=[128, 1, 1], tool="memcheck",
        sanitizer_error_code=719, sanitizer_error_name="cudaErrorLaunchFailure",
        note="4-byte store to packed + i*13 + 1; every thread's address is misaligned"),
    "device_assert": dict(
        kind="device_assert", kernel="validate_token_ids_kernel(const int*, int, int)", src="csrc/device_assert.cu",
        error_code=710, error_name="cudaErrorAssert", error_string="device-side assert triggered",
        surface_api="cudaDeviceSynchronize", surface_needle="cudaDeviceSynchronize());",
        grid=[8, 1, 1], block=[128, 1, 1], tool="memcheck",
        failing_threads=["block [1,0,0], thread [5,0,0] (token 133 = 32000)", "block [5,0,0], thread [60,0,0] (token 700 = -1)"],
        note="assert(id >= 0 && id < vocab_size) fails for two planted token ids"),
    "shared_race": dict(
        kind="shared_memory_race", kernel="block_sum_missing_sync_kernel(const float*, float*, int)",
        src="csrc/shared_race.cu", grid=[16, 1, 1], block=[256, 1, 1], tool="racecheck",
        race_write=("csrc/shared_race.cu", "RACE_WRITE_LINE"), race_read=("csrc/shared_race.cu", "RACE_READ_LINE"),
        note="no __syncthreads() between writing partial[t] and reading partial[t + s]; no CUDA error without tools"),
    "uninit_read": dict(
        kind="uninitialized_global_read", kernel="add_bias_kernel(float*, const float*, int, int)",
        src="csrc/uninit_read.cu", grid=[128, 1, 1], block=[256, 1, 1], tool="initcheck",
        note="bias buffer from cudaMalloc is read without ever being written; no CUDA error without tools"),
}


def single(rec, bundle):
    bdir = os.path.join(rec, "bundles", bundle)
    s = SINGLES[bundle]
    t = base_doc(rec, bundle, "Single-process program lab/gpu/%s (nvcc -g -lineinfo -arch=sm_90)." % s["src"])
    needle = {"uninit_read": "UNINIT_LINE", "shared_race": "RACE_READ_LINE"}.get(bundle, "FAULT_LINE")
    fl = src_line(s["src"], needle)
    t.table("fault", kind=s["kind"], kernel=s["kernel"], kernel_source="lab/gpu/%s:%d" % (s["src"], fl[0]),
            kernel_source_path_on_device=dev_path(s["src"]), kernel_source_line=fl[1].split("//")[0].strip(),
            grid=s["grid"], block=s["block"], description=s["note"], failing_threads=s.get("failing_threads"),
            error_code_without_tools=s.get("error_code"), error_name_without_tools=s.get("error_name"),
            error_string=s.get("error_string"))
    if "race_write" in s:
        w = src_line(*s["race_write"])
        r = src_line(*s["race_read"])
        t.kv(race_write_site="lab/gpu/%s:%d" % (s["race_write"][0], w[0]),
             race_read_site="lab/gpu/%s:%d" % (s["race_read"][0], r[0]))
    if "surface_api" in s:
        sl = src_line(s["src"], s["surface_needle"])
        t.table("surface", api_call=s["surface_api"], file=os.path.basename(s["src"]), line=sl[0],
                function="main", code=sl[1], printed_by="checkCudaErrors macro (lab/gpu/csrc/cuda_check.h)")
    t.table("sanitizer", tool=s["tool"], files=sorted(f for f in os.listdir(bdir) if f.startswith("compute-sanitizer")),
            error_code_under_sanitizer=s.get("sanitizer_error_code"),
            error_name_under_sanitizer=s.get("sanitizer_error_name"))
    if os.path.exists(os.path.join(bdir, "cuda-gdb.txt")):
        gdb = open(os.path.join(bdir, "cuda-gdb.txt")).read()
        exc = re.search(r"CUDA Exception: (.*)", gdb)
        pc = re.search(r"triggered at PC (0x[0-9a-f]+)\s+(.+?)\s+\(([^)]*)\)", gdb)
        t.table("cuda_gdb", exception=exc.group(1).strip() if exc else None, error_pc=pc.group(1) if pc else None,
                kernel=pc.group(2) if pc else None, source=pc.group(3) if pc else None,
                signal="CUDA_EXCEPTION_6" if "CUDA_EXCEPTION_6" in gdb else None)
    add_xids(t, bdir)
    add_commands(t, rec, bundle)
    return t


def torch_item(rec, bundle):
    bdir = os.path.join(rec, "bundles", bundle)
    side = json.load(open(os.path.join(rec, "sidecar", bundle, "torch_item_after_oob.json")))
    t = base_doc(rec, bundle, "PyTorch program lab/gpu/torch_item_after_oob.py: a CuPy RawKernel on torch's "
                 "current stream writes out of bounds; the error surfaces at a later .item().")
    fl = src_line("torch_item_after_oob.py", "FAULT_LINE")
    it = src_line("torch_item_after_oob.py", "next_token.item()")
    t.table("fault", kind="illegal_address_write", kernel=side["kernel"], faulting_pid=side["pid"],
            kernel_source="NVRTC source string in lab/gpu/torch_item_after_oob.py, line %d of the file" % fl[0],
            kernel_source_line=fl[1].split("//")[0].strip(), grid=side["grid"], block=side["block"],
            faulting_threads=["thread (17,0,0) block (0,0,0)"], buffer_base=side["kv_cache"],
            bad_index=side["bad_slot"], target_address=side["target_address"], stream=side["stream"],
            error_code_without_tools=700, error_name_without_tools="cudaErrorIllegalAddress")
    t.table("surface", exception="torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
            file=dev_path("torch_item_after_oob.py"), line=it[0], function="main", code=it[1],
            api=".item() (device-to-host copy + stream sync)", surface_is_not_the_faulting_kernel=True)
    t.table("sanitizer", tool="memcheck", files=sorted(f for f in os.listdir(bdir) if f.startswith("compute-sanitizer")),
            expected_report="Invalid __global__ write of size 4 bytes in scatter_kv_slots_kernel by thread (17,0,0)",
            error_under_sanitizer="cudaErrorLaunchFailure (719) at cudaStreamSynchronize inside .item()")
    t.table("secondary", exception="cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS",
            how="Exception ignored in 'cupy.cuda.function.Module.__dealloc__' (moduleUnload at interpreter exit)",
            is_root_cause=False, also="DeprecationWarning for cupy ExternalStream (noise)")
    add_xids(t, bdir)
    add_commands(t, rec, bundle)
    return t


def cpu_core(rec, bundle):
    bdir = os.path.join(rec, "bundles", bundle)
    t = base_doc(rec, bundle, "Host-side SIGSEGV of a tiny C program with an ELF core file (gcc -g -O0).")
    fl = src_line("csrc/segv.c", "FAULT_LINE")
    cores = [f for f in os.listdir(bdir) if f.startswith("core.")]
    t.table("fault", kind="host_segfault", signal="SIGSEGV", exit_status=139, program="segv",
            source="lab/gpu/csrc/segv.c:%d" % fl[0], function="prompt_length", code=fl[1].split("/*")[0].strip(),
            null_pointer_argument="req=0x0", top_frame="strlen in libc.so.6 (no symbols: shown as ??)",
            core_files=cores, core_pid=int(cores[0].split(".")[-1].split(".")[0]) if cores else None,
            core_pattern_used="/tmp/cpu_cores/core.%e.%p (set by record.py; default was 'core')")
    add_commands(t, rec, bundle)
    return t


BUNDLE_TEXT = {
    "tp4_oob_write_del_cumemfree": "TP=4 miniature (EngineCore_DP0 + Worker_TP0..3 on one GPU, gloo on 127.0.0.1). "
        "In step 2 rank 2 launches oneshot_allreduce_flag_kernel with a corrupted flag offset (store ~16 TiB past its "
        "signal pad). Nothing syncs; in step 3 the worker grows its workspace: the old SignalPadBuffer's __del__ gets "
        "CUDA error 700 from cuMemFree ('Exception ignored in: <function SignalPadBuffer.__del__ ...>'), then "
        "cuMemAlloc raises 700 in the normal path, the worker logs 'WorkerProc hit an exception.' and exits 1; ranks "
        "0, 1, 3 fail in the gloo all_reduce ('Connection closed by peer'); the engine logs 'EngineCore encountered a "
        "fatal error.' Files: server.log (engine console: its own lines and every worker line, prefixed), "
        "worker_TP<n>.log (each worker's own unprefixed copy of what its Python wrote to stdout/stderr), "
        "exit_codes.txt, dmesg.txt (NVRM Xid lines that appeared during the run).",
    "tp4_oob_write_memcheck": "The same TP=4 run under compute-sanitizer memcheck with --target-processes all and "
        "--log-file compute-sanitizer.%p.log (one text log per process, engine included).",
    "tp4_oob_write_memcheck_xml": "The same TP=4 run under compute-sanitizer memcheck with --target-processes all and "
        "--xml --save compute-sanitizer.%p.xml.",
    "tp4_oob_write_coredump": "The same TP=4 run with GPU core dumps on exception (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1, "
        "progress shown, small dump). Rank 2 writes core_<pid>.nvcudmp and is then aborted by the driver (exit -6); "
        "cuda-gdb_cudacore.txt is a cuda-gdb -batch transcript on the dump (target cudacore, info cuda kernels/devices/"
        "sms/warps/lanes, bt, p $errorpc).",
    "misaligned_address": "Standalone CUDA C++ program: 4-byte stores to misaligned addresses -> 716 "
        "cudaErrorMisalignedAddress at cudaDeviceSynchronize. console.log (plain run), compute-sanitizer_memcheck.txt, "
        "compute-sanitizer_memcheck.xml, cuda-gdb.txt (cuda-gdb -batch: run, bt, info cuda kernels, info cuda lanes), "
        "dmesg.txt (Xid lines of all four runs).",
    "device_assert": "Standalone CUDA C++ program: device-side assert() fails in two threads -> assertion lines from "
        "the device, then 710 cudaErrorAssert. console.log, compute-sanitizer_memcheck.txt, compute-sanitizer_memcheck.xml.",
    "shared_race": "Standalone CUDA C++ program: shared-memory race (missing __syncthreads). console.log (no error, "
        "result may be wrong), compute-sanitizer_racecheck.txt (--racecheck-report all), compute-sanitizer_racecheck.xml.",
    "uninit_read": "Standalone CUDA C++ program: reads a cudaMalloc'ed buffer never written. console.log (no error), "
        "compute-sanitizer_initcheck.txt, compute-sanitizer_initcheck.xml.",
    "torch_item_after_oob": "PyTorch program: a CuPy RawKernel (NVRTC, -lineinfo) on torch's current stream writes "
        "~16 TiB past a tensor; the error surfaces at a later .item() as torch.AcceleratorError. console.log, "
        "compute-sanitizer_memcheck.txt, compute-sanitizer_memcheck.xml.",
    "cpu_segv_core": "Tiny C program dereferencing NULL (SIGSEGV) with an ELF core (ulimit -c unlimited, "
        "core_pattern set to /tmp/cpu_cores/core.%e.%p). console.log, core.segv.<pid>, cuda-gdb_core.txt "
        "(cuda-gdb -batch bt on the core; the program binary is not in the bundle: rebuild with "
        "gcc -g -O0 lab/gpu/csrc/segv.c).",
}


def write_readme(recs, bundles):
    L = ["# tests/data/gpu: real GPU crash recordings", "",
         "Every file inside a bundle folder `tests/data/gpu/<bundle>/` is a real recording: output written by "
         "real programs, tools and the kernel on a real NVIDIA H200, copied here unedited. Nothing in a bundle "
         "was typed or edited by hand. The folders hold only recorded outputs so that the analyzer can be run on "
         "a whole folder; the answer key for each is `<bundle>.truth.toml` next to it (ground truth by "
         "construction: the planted bug, the pids and addresses the programs wrote to a side channel outside "
         "the bundle, source lines, what cuda-gdb printed). Do not feed the truth files or this README to the "
         "analyzer.", "",
         "Programs and driver: `lab/gpu/` (`record.py` runs everything on the GPU machine into `/tmp/rec` and is "
         "then tarred back; `import_recordings.py` copies bundles here and writes the truth files). The "
         "repository sat at `/work/main` on the GPU machine, so tracebacks and debug info show "
         "`/work/main/lab/gpu/...`.", ""]
    for rec in recs:
        v = open(os.path.join(rec, "versions.txt")).read()
        L += ["## Machine and versions (as printed there, recording `%s`)" % os.path.basename(rec.rstrip("/")), "",
              "```"]
        keep = []
        for block in v.split("$ ")[1:]:
            cmd = block.splitlines()[0]
            if cmd.startswith("nvidia-smi"):
                body = [l for l in block.splitlines()[1:] if "Driver Version" in l or "H200" in l]
            elif cmd.startswith("dmesg"):
                body = ["(dmesg readable: %s)" % ("yes" if "dmesg_rc=0" in block else "no")]
            else:
                body = [l for l in block.splitlines()[1:] if l.strip()][:4]
            keep.append("$ " + cmd)
            keep += body
        L += keep + ["```", ""]
    L += ["## Bundles", ""]
    for rec, bundle in bundles:
        L += ["### %s" % bundle, "", BUNDLE_TEXT.get(bundle, ""), "",
              "Recorded on the H200 at %s (UTC). Exact commands, in order, as run by `lab/gpu/record.py` "
              "(paths: `/tmp/rec/bundles/%s` is this folder; `/tmp/rec/sidecar/%s` is the side channel "
              "for the truth file; `/tmp/rec/build` holds what record.py built from lab/gpu/csrc):" % (
                  commands(rec, bundle)[0]["started"] if commands(rec, bundle) else "?", bundle, bundle), ""]
        for c in commands(rec, bundle):
            env = " ".join("%s=%s" % kv for kv in c["env"].items())
            L += ["- exit status %d, %.1f s:" % (c["rc"], c["duration_s"]), "", "  ```",
                  "  " + (env + " " if env else "") + c["cmd"], "  ```", ""]
        files = sorted(os.listdir(os.path.join(DEST, bundle)))
        L += ["Files: " + ", ".join("`%s` (%d bytes)" % (f, os.path.getsize(os.path.join(DEST, bundle, f)))
                                   for f in files), ""]
    bc = commands(recs[0], "_build")
    if bc:
        L += ["## Build (on the GPU machine, by record.py)", "", "```"] + \
             open(os.path.join(recs[0], "build", "build_commands.txt")).read().splitlines() + ["```", ""]
    with open(os.path.join(DEST, "README.md"), "w") as f:
        f.write("\n".join(L))


def main():
    os.makedirs(DEST, exist_ok=True)
    done = []
    for rec in sys.argv[1:]:
        for bdir in sorted(glob.glob(os.path.join(rec, "bundles", "*"))):
            bundle = os.path.basename(bdir)
            dst = os.path.join(DEST, bundle)
            if os.path.exists(dst):
                shutil.rmtree(dst)
            shutil.copytree(bdir, dst)
            for p in glob.glob(os.path.join(dst, "**"), recursive=True):
                if os.path.isfile(p):
                    os.chmod(p, 0o644)
            if bundle.startswith("tp4_"):
                variant = {"tp4_oob_write_del_cumemfree": "plain", "tp4_oob_write_memcheck": "memcheck",
                           "tp4_oob_write_memcheck_xml": "memcheck_xml", "tp4_oob_write_coredump": "coredump"}[bundle]
                t = tp4(rec, bundle, variant)
            elif bundle == "torch_item_after_oob":
                t = torch_item(rec, bundle)
            elif bundle == "cpu_segv_core":
                t = cpu_core(rec, bundle)
            else:
                t = single(rec, bundle)
            with open(os.path.join(DEST, bundle + ".truth.toml"), "w") as f:
                f.write(t.text())
            print("imported", bundle)
            done.append((rec, bundle))
    write_readme(sys.argv[1:], done)


if __name__ == "__main__":
    main()
