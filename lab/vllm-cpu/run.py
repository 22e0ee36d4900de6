"""Start `vllm serve` (TP=2 on the CPU), send requests, wait for the crash,
save the console.

  python run.py OUT_DIR --model MODEL_DIR [--executor mp|ray]
      [--fault cuda_error|oom|sigkill|sigsegv|stall] [--rank R] [--pos P]
      [--style short|torch] [--debug] [--stream --max-tokens N]
      [--wait S] [--env K=V ...] [-- extra vllm serve args]

OUT_DIR gets:
  console.log     stdout+stderr of the server process tree, bytes as printed
  console.stamps  wall-clock arrival time (unix s) of each console line
  events.jsonl    what the driver did and what the HTTP client saw
  run.json        argv and environment overrides
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--model", required=True)
p.add_argument("--executor", default="mp")
p.add_argument("--tp", type=int, default=2)
p.add_argument("--port", type=int, default=18000)
p.add_argument("--fault", default="")
p.add_argument("--rank", type=int, default=0)
p.add_argument("--pos", type=int, default=512)
p.add_argument("--style", default="short")
p.add_argument("--debug", action="store_true")
p.add_argument("--stream", action="store_true")
p.add_argument("--max-tokens", type=int, default=16)
p.add_argument("--wait", type=float, default=120, help="s to wait for the long request")
p.add_argument("--ready-timeout", type=float, default=400)
p.add_argument("--env", action="append", default=[])
p.add_argument("--ray-head", action="store_true",
               help="start `ray start --head --num-gpus N` first (N = --tp), stop it after")
p.add_argument("extra", nargs="*")
a = p.parse_args()

os.makedirs(a.out, exist_ok=True)
events = open(os.path.join(a.out, "events.jsonl"), "w")


def event(kind, **kw):
    kw.update(unix=round(time.time(), 3), event=kind)
    events.write(json.dumps(kw) + "\n")
    events.flush()
    print("[driver]", kind, {k: v for k, v in kw.items() if k != "body"}, file=sys.stderr)


env_over = {
    "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1",
}
if a.fault:
    env_over.update(VLLM_FAULT_INJECT=a.fault, VLLM_FAULT_RANK=str(a.rank),
                    VLLM_FAULT_POS=str(a.pos),
                    VLLM_FAULT_RECORD=os.path.abspath(os.path.join(a.out, "fault_record.jsonl")))
    if a.style != "short":
        env_over["VLLM_FAULT_STYLE"] = a.style
if a.debug:
    env_over["VLLM_LOGGING_LEVEL"] = "DEBUG"
for kv in a.env:
    k, v = kv.split("=", 1)
    env_over[k] = v

argv = [sys.executable, os.path.join(HERE, "vllm_cli.py"), "serve", a.model,
        "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(a.port),
        "--max-model-len", "4096", "--max-num-batched-tokens", "512",
        "--enable-chunked-prefill", "--dtype", "bfloat16",
        "--tensor-parallel-size", str(a.tp), "--distributed-executor-backend", a.executor,
        *a.extra]

env = dict(os.environ, **env_over)
env.pop("VIRTUAL_ENV", None)
ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
if a.ray_head:
    head = [ray_bin, "start", "--head", "--port", "6379", "--num-cpus", "2",
            "--num-gpus", str(a.tp), "--include-dashboard", "false", "--disable-usage-stats"]
    r = subprocess.run(head, env=env, capture_output=True, text=True)
    event("ray_head", argv=head, returncode=r.returncode, output=(r.stdout + r.stderr)[-2000:])
    env["RAY_ADDRESS"] = env_over["RAY_ADDRESS"] = "127.0.0.1:6379"
json.dump({"argv": argv, "env_overrides": env_over}, open(os.path.join(a.out, "run.json"), "w"), indent=1)
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                        cwd=a.out, start_new_session=True)
event("start", pid=proc.pid, argv=argv)


def pump():
    with open(os.path.join(a.out, "console.log"), "wb") as log, \
            open(os.path.join(a.out, "console.stamps"), "w") as st:
        for line in iter(proc.stdout.readline, b""):
            st.write(f"{time.time():.6f}\n")
            log.write(line)
            log.flush()
            st.flush()


pumper = threading.Thread(target=pump, daemon=True)
pumper.start()
base = f"http://127.0.0.1:{a.port}"


def http(name, path, body=None, timeout=30, stream=False):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if stream:
                n = 0
                for line in r:
                    if line.strip():
                        n += 1
                        if n in (1, 10, 20, 40) or n % 50 == 0:
                            event("stream_progress", name=name, chunks=n)
                text = f"{n} stream lines"
            else:
                text = r.read().decode(errors="replace")
            event("http", name=name, path=path, status=r.status, t_send=round(t0, 3), body=text[:400])
            return r.status
    except urllib.error.HTTPError as e:
        event("http", name=name, path=path, status=e.code, t_send=round(t0, 3),
              body=e.read().decode(errors="replace")[:400])
        return e.code
    except Exception as e:  # noqa: BLE001
        event("http", name=name, path=path, status=0, t_send=round(t0, 3),
              client_exception=f"{type(e).__name__}: {e}")
        return 0


def stop_server(reason):
    if proc.poll() is not None:
        return
    event("send_signal", signal="SIGINT", pid=proc.pid, reason=reason)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        event("kill_group", signal="SIGKILL", pgid=proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


t_start = time.time()
ready = False
while time.time() - t_start < a.ready_timeout and proc.poll() is None:
    try:
        with urllib.request.urlopen(base + "/health", timeout=2) as r:
            ready = r.status == 200
    except Exception:  # noqa: BLE001
        pass
    if ready:
        break
    time.sleep(0.5)
event("ready" if ready else "not_ready", after_s=round(time.time() - t_start, 1),
      returncode=proc.poll())

if ready:
    http("short_13_tokens", "/v1/completions",
         {"model": "tiny-llama", "prompt": "the gpu rank tensor kernel memory error worker engine",
          "max_tokens": 8, "temperature": 0})
    time.sleep(1)
    long_prompt = [2 + (i * 7) % 1000 for i in range(2000)]
    body = {"model": "tiny-llama", "prompt": long_prompt, "max_tokens": a.max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": a.stream}
    th = threading.Thread(target=http, args=("long_2000_tokens", "/v1/completions", body),
                          kwargs={"timeout": a.wait, "stream": a.stream}, daemon=True)
    th.start()
    th.join(a.wait + 5)
    if th.is_alive():
        event("long_request_still_open", after_s=a.wait)
    if proc.poll() is None:
        http("health_after", "/health", timeout=10)
        http("short_after", "/v1/completions",
             {"model": "tiny-llama", "prompt": "the gpu", "max_tokens": 4}, timeout=10)
    deadline = time.time() + 30
    while proc.poll() is None and time.time() < deadline:
        time.sleep(0.5)

stop_server("driver done")
event("server_exit", returncode=proc.returncode)
pumper.join(10)
# whatever is left of the process group (workers, ray daemons) is ended here
try:
    os.killpg(proc.pid, signal.SIGKILL)
    event("leftover_group_killed", pgid=proc.pid)
except ProcessLookupError:
    pass
if a.ray_head:
    r = subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, text=True)
    event("ray_stop", returncode=r.returncode, output=(r.stdout + r.stderr)[-500:])
