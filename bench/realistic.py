"""A second benchmark generator, built from a real recording's line shapes, so that the
benchmark cannot be tuned to one generator's lines.

The source is a real vLLM console recorded at DEBUG level with a crash at its end
(default: tests/data/realworld/rec_vllm_mp_tp2_debug_accelerator_error_rank0/console.log,
see its expected.toml for how it was made).  Its lines before the crash are the serving
traffic (DEBUG step lines, stats, access lines, request logs, the unrelated DEBUG
tracebacks such a console holds); the generator repeats them with their numbers varied
(never their time stamps, which stay before the crash) until the size is reached, then
appends the crash itself, unchanged.  The verdict on the bundle must equal the verdict on
the crash recording alone (bench/run.py checks it).

    python bench/realistic.py OUT_DIR SIZE [--mode MODE]

Modes:
  realistic  one console, the recording's own mix of lines
  dense      as realistic, and every 20th line a per-request error with a traceback
             (hand-made in vLLM's shape: "Error in preprocessing prompt inputs" + ValueError)
  files      the traffic spread over 400 rotated per-process files, the crash in the last
  ranks      the traffic spread over 8 large files (one per node), the crash in a ninth
  gzip       realistic, written as console.log.gz
  longline   realistic, with a few 8 MB lines without a newline (a binary blob pasted in)
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests/data/realworld/rec_vllm_mp_tp2_debug_accelerator_error_rank0/console.log"
MODES = ("realistic", "dense", "files", "ranks", "gzip", "longline")
# the record header: kept as it is (pid, level, time stamp, file:line)
_HEADER = re.compile(r"^(\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]+\] ")
_NUMBER = re.compile(r"\d+")
_IDENTITY = re.compile(r"rank|world|size=|pid|TP\d|tp_|device|cuda:\d|port|version|Worker", re.I)


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def split_recording(lines: list[str]) -> tuple[list[str], list[str]]:
    """(serving lines, the crash): the crash starts at the first ERROR record."""
    start = next(i for i, line in enumerate(lines) if " ERROR " in line[:80])
    return lines[:start], lines[start:]


def _body_start(line: str) -> int:
    header = _HEADER.match(line)
    return header.end() if header else (line.find("] ") + 2 if line.startswith("[") else 0)


def _vary(line: str, rng: random.Random) -> str:
    """The line with the numbers of its message varied (same digit count)."""
    cut = _body_start(line)
    body = _NUMBER.sub(lambda m: str(rng.randrange(10 ** (len(m.group()) - 1), 10 ** len(m.group())))
                       if len(m.group()) > 1 else str(rng.randrange(10)), line[cut:])
    return line[:cut] + body


def _request_error(prefix_line: str, rng: random.Random) -> list[str]:
    """A per-request error with its traceback, under the API server's record header."""
    header = _HEADER.match(prefix_line)
    head = header.group(0).replace(" DEBUG ", " ERROR ").replace(" INFO ", " ERROR ") if header else ""
    n = rng.randrange(4097, 9000)
    return [head + "Error in preprocessing prompt inputs",
            head + "Traceback (most recent call last):",
            head + '  File "/opt/venv/lib/python3.11/site-packages/vllm/entrypoints/openai/serving_completion.py", '
                   "line 141, in create_completion",
            head + "    engine_prompts = await self._preprocess_completion(",
            head + f"ValueError: This model's maximum context length is 4096 tokens. However, you requested {n} "
                   "tokens in the prompt. Please reduce the length of the prompt."]


def generate(out: Path, size: int, mode: str = "realistic", source: Path = SOURCE, seed: int = 7) -> Path:
    """Writes the bundle into ``out``; returns the file or folder to analyse."""
    rng = random.Random(seed)
    lines = source.read_text(encoding="utf-8").splitlines()
    serving, crash = split_recording(lines)
    # traffic only: lines that name no identity (rank, world size, pid, device), so that
    # varying their numbers cannot invent a rank
    # and only what a running server repeats: the lines after start-up completed
    started = next((i for i, line in enumerate(serving) if "Application startup complete" in line), 0)
    pool = [line for line in serving[started + 1:] if line.strip() and not _IDENTITY.search(line[_body_start(line):])]
    api_line = next((line for line in serving if line.startswith("(APIServer")), pool[0])
    out.mkdir(parents=True, exist_ok=True)
    crash_text = "\n".join(crash) + "\n"
    budget = max(size - len(crash_text.encode()), 0)

    def body():
        yield from (line + "\n" for line in serving)
        written, n = 0, 0
        while written < budget:
            n += 1
            if mode == "dense" and n % 20 == 0:
                chunk = "".join(line + "\n" for line in _request_error(api_line, rng))
            elif mode == "longline" and n % 400_000 == 0:
                chunk = "".join(rng.choice("ABCDEFGHabcdefgh0123456789+/") for _ in range(64)) * (8 << 14) + "\n"
            else:
                chunk = _vary(rng.choice(pool), rng) + "\n"
            written += len(chunk)
            yield chunk

    if mode == "gzip":
        target = out / "console.log.gz"
        with gzip.open(target, "wt", encoding="utf-8", compresslevel=1) as fh:
            fh.writelines(body())
            fh.write(crash_text)
        return target
    if mode in ("files", "ranks"):
        count = 400 if mode == "files" else 8
        handles = [open(out / f"worker_{i:03d}.log", "w", encoding="utf-8") for i in range(count)]  # noqa: SIM115
        try:
            for i, chunk in enumerate(body()):
                handles[i % len(handles)].write(chunk)
        finally:
            for handle in handles:
                handle.close()
        (out / "zz_crash.log").write_text(crash_text, encoding="utf-8")
        return out
    target = out / "console.log"
    with open(target, "w", encoding="utf-8") as fh:
        fh.writelines(body())
        fh.write(crash_text)
    return target


def crash_offset(target: Path, source: Path = SOURCE) -> int:
    """How many lines later the crash's lines are in the bundle than in ``source``: the
    traffic before it in a single-file bundle; in a folder, whose crash file holds the
    crash without the recording's serving lines, a negative number."""
    if target.is_dir():
        target = target / "zz_crash.log"
    opener = gzip.open if target.suffix == ".gz" else open
    with opener(target, "rb") as fh:
        total = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
    return total - source.read_bytes().count(b"\n")


_POSITION = re.compile(r"[^\s\"'(]*?([\w.-]+\.log(?:\.gz)?):(\d+)")
# what a bundle may say differently from its crash alone: where the inputs were, how many
# lines it read, the rules' prose (it quotes counts)
_NOT_COMPARED = ("explanation", "notes", "rule_failures")


def verdict_fields(document: dict, offset: int = 0) -> dict:
    """The verdict of a report document, field by field, with every ``file.log:N``
    position made relative to the crash (``N - offset``, the file's name without its
    folder) and each process's status beside it: what must not change when a crash is
    buried in traffic."""
    def place(match: re.Match) -> str:
        name = "crash.log" if match.group(1).startswith(("console.log", "zz_crash.log")) else match.group(1)
        return f"{name}:{int(match.group(2)) - offset}"
    verdict = {k: v for k, v in document["verdict"].items() if k not in _NOT_COMPARED}
    fields = json.loads(_POSITION.sub(place, json.dumps(verdict)))
    fields["statuses"] = sorted((s["who"], s["status"]) for s in document["stories"])
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("size")
    parser.add_argument("--mode", choices=MODES, default="realistic")
    args = parser.parse_args()
    print(generate(args.out, _size(args.size), args.mode))


if __name__ == "__main__":
    main()
