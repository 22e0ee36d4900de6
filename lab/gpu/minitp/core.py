"""EngineCore of the miniature: starts the TP workers, relays their output, runs one request."""
import argparse
import datetime
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from minitp.logger import PrefixedStream, init_logger

VERSION = "0.1.0"
logger = None
_out_lock = threading.RLock()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _relay(proc_name, pid, pipe, sink):
    """Reads a worker's stdout/stderr pipe line by line and writes it with the worker's prefix."""
    prefix = "(%s pid=%d) " % (proc_name, pid)
    for raw in iter(pipe.readline, b""):
        line = raw.decode("utf-8", "replace")
        if not line.endswith("\n"):
            line += "\n"
        with _out_lock:
            sink.write(prefix + line)
            sink.flush()


class WorkerHandle:
    def __init__(self, rank, proc, result_r, relay):
        self.rank = rank
        self.proc = proc
        self.result = os.fdopen(result_r, "rb", buffering=0)
        self.buf = b""
        self.relay = relay
        self.exited_at = None

    @property
    def name(self):
        return "Worker_TP%d" % self.rank


class EngineCore:
    def __init__(self, args):
        self.args = args
        self.workers = []
        logger.info("Initializing a V1 LLM engine (v%s) with config: model='mini', "
                    "tensor_parallel_size=%d, max_num_batched_tokens=%d, enable_chunked_prefill=True, "
                    "dtype=torch.bfloat16", VERSION, args.tensor_parallel_size,
                    args.max_num_batched_tokens)
        port = _free_port()
        init_method = "tcp://127.0.0.1:%d" % port
        env = dict(os.environ)
        env.update({"GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1",
                    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                    "NVSHMEM_DISABLE_NVLS": "1"})
        for rank in range(args.tensor_parallel_size):
            r, w = os.pipe()
            cmd = [sys.executable, "-m", "minitp.gpu_worker", "--rank", str(rank),
                   "--world-size", str(args.tensor_parallel_size), "--init-method", init_method,
                   "--cubin", args.cubin, "--log-dir", args.log_dir, "--result-fd", str(w),
                   "--workspace-max-num-tokens", str(args.workspace_max_num_tokens),
                   "--gloo-timeout-s", str(args.gloo_timeout_s)]
            if args.inject_fault:
                cmd += ["--inject-fault", args.inject_fault]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(w,), env=env)
            os.close(w)
            t = threading.Thread(target=_relay, args=("Worker_TP%d" % rank, proc.pid, proc.stdout,
                                                      sys.__stdout__), daemon=True)
            t.start()
            self.workers.append(WorkerHandle(rank, proc, r, t))
        self._collect("startup", self.args.startup_timeout_s)
        logger.info("All %d workers are ready.", len(self.workers))

    def _collect(self, what, timeout_s):
        """Waits for one JSON reply from every worker; raises on a failure or a dead worker."""
        pending = {w.result.fileno(): w for w in self.workers}
        replies = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Timed out after %.0f s waiting for workers %s (%s)" % (
                    timeout_s, sorted(w.name for w in pending.values()), what))
            ready, _, _ = select.select(list(pending), [], [], min(left, 1.0))
            for fd in ready:
                w = pending[fd]
                chunk = os.read(fd, 65536)
                if not chunk:
                    del pending[fd]
                    raise RuntimeError("Worker proc %s died unexpectedly, shutting down executor."
                                       % w.name)
                w.buf += chunk
                if b"\n" in w.buf:
                    line, w.buf = w.buf.split(b"\n", 1)
                    msg = json.loads(line)
                    del pending[fd]
                    if not msg.get("ok"):
                        raise RuntimeError("Worker failed with error '%s', please check the stack "
                                           "trace above for the root cause" % msg.get("error"))
                    replies[w.rank] = msg
        return replies

    def _broadcast(self, msg):
        data = (json.dumps(msg) + "\n").encode()
        for w in self.workers:
            try:
                w.proc.stdin.write(data)
                w.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass

    def run_request(self, req_id, prompt_len):
        chunk = self.args.max_num_batched_tokens
        nct, step = 0, 0
        logger.info("Added request %s (prompt_len=%d).", req_id, prompt_len)
        while nct < prompt_len:
            step += 1
            n = min(chunk, prompt_len - nct)
            self.sched = {"step": step, "req_id": req_id, "num_scheduled_tokens": n,
                          "num_computed_tokens": nct, "prompt_len": prompt_len}
            self._broadcast({"type": "execute_model", "sched": self.sched})
            self._collect("step %d" % step, self.args.step_timeout_s)
            nct += n
            logger.info("Finished step %d (prefill) for %s: num_scheduled_tokens=%d "
                        "num_computed_tokens=[%d]", step, req_id, n, nct)
        return nct

    def shutdown(self, grace_s):
        self._broadcast({"type": "shutdown"})
        deadline = time.monotonic() + grace_s
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("%s pid=%d did not exit within %.0f s; sending SIGKILL.",
                               w.name, w.proc.pid, grace_s)
                w.proc.send_signal(signal.SIGKILL)
                w.proc.wait()
        for w in self.workers:
            w.relay.join(timeout=5)
            try:
                w.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def write_exit_codes(self, engine_rc):
        path = os.path.join(self.args.log_dir, "exit_codes.txt")
        with open(path, "w") as f:
            for w in self.workers:
                f.write("%s pid=%d exit_code=%d\n" % (w.name, w.proc.pid, w.proc.returncode))
            f.write("EngineCore_DP0 pid=%d exit_code=%d\n" % (os.getpid(), engine_rc))


def main():
    global logger
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensor-parallel-size", type=int, default=4)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8064)
    ap.add_argument("--prompt-len", type=int, default=36000)
    ap.add_argument("--workspace-max-num-tokens", type=int, default=16128)
    ap.add_argument("--cubin", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--inject-fault", default="")
    ap.add_argument("--gloo-timeout-s", type=float, default=60)
    ap.add_argument("--startup-timeout-s", type=float, default=300)
    ap.add_argument("--step-timeout-s", type=float, default=180)
    ap.add_argument("--worker-grace-s", type=float, default=30)
    args = ap.parse_args()
    engine_out = PrefixedStream(sys.__stdout__, "(EngineCore_DP0 pid=%d) " % os.getpid())
    engine_out.lock = _out_lock
    logger = init_logger("minitp.engine", engine_out)
    d = os.environ.get("MINI_TRUTH_DIR")
    if d:
        with open(os.path.join(d, "engine.json"), "w") as f:
            json.dump({"pid": os.getpid()}, f)
    engine = None
    rc = 0
    try:
        engine = EngineCore(args)
        req_id = "cmpl-%s-0" % uuid.uuid4().hex
        engine.run_request(req_id, args.prompt_len)
        logger.info("Request %s finished prefill of %d tokens.", req_id, args.prompt_len)
    except Exception:
        rc = 1
        if engine is not None and getattr(engine, "sched", None):
            logger.error("Dumping scheduler output for model execution: %s", engine.sched)
        logger.exception("EngineCore encountered a fatal error.")
    if engine is not None:
        engine.shutdown(args.worker_grace_s)
        engine.write_exit_codes(rc)
        for w in engine.workers:
            logger.info("%s pid=%d exited with code %d", w.name, w.proc.pid, w.proc.returncode)
    logger.info("EngineCore_DP0 exiting with code %d", rc)
    sys.__stdout__.flush()
    sys.exit(rc)


if __name__ == "__main__":
    main()
