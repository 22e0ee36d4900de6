"""Re-emit a recorded console as a log collector would show it.

  python wrap.py compose CONSOLE STAMPS [--service vllm-1] > out
  python wrap.py kubectl CONSOLE STAMPS > out     # kubectl logs --timestamps
  python wrap.py cri     CONSOLE STAMPS > out     # /var/log/pods/.../0.log

STAMPS has one unix time per console line (written by run.py as each line
arrived). Lines are bytes as recorded; only the prefix is added.

compose: docker compose logs, no colour: the service name left-aligned in a
  field one wider than the longest name, then " | " (one service: "vllm-1  | ").
kubectl: RFC3339Nano UTC stamp (Go layout: trailing zeros of the fraction
  dropped), one space, the line.
cri:     "<RFC3339Nano> stdout F <line>"; a line longer than 16384 bytes is
  written as 16384-byte "P" records and a final "F" record, each with its own
  stamp (all the same here). Everything is tagged stdout because the console
  was captured as one merged stream.
"""
import argparse
import datetime as dt
import sys

MAX_CRI = 16384


def rfc3339nano(t):
    sec = int(t)
    ns = int(round((t - sec) * 1e6)) * 1000
    if ns >= 10**9:
        sec, ns = sec + 1, ns - 10**9
    base = dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{ns:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fmt", choices=["compose", "kubectl", "cri"])
    ap.add_argument("console")
    ap.add_argument("stamps")
    ap.add_argument("--service", default="vllm-1")
    a = ap.parse_args()
    lines = open(a.console, "rb").read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    stamps = [float(s) for s in open(a.stamps).read().split()]
    assert len(stamps) == len(lines), (len(stamps), len(lines))
    out = sys.stdout.buffer
    width = len(a.service) + 1
    for line, t in zip(lines, stamps):
        if a.fmt == "compose":
            out.write(f"{a.service:<{width}} | ".encode() + line + b"\n")
        elif a.fmt == "kubectl":
            out.write(rfc3339nano(t).encode() + b" " + line + b"\n")
        else:
            ts = rfc3339nano(t).encode()
            parts = [line[i:i + MAX_CRI] for i in range(0, len(line), MAX_CRI)] or [b""]
            for i, part in enumerate(parts):
                tag = b"F" if i == len(parts) - 1 else b"P"
                out.write(ts + b" stdout " + tag + b" " + part + b"\n")


if __name__ == "__main__":
    main()
