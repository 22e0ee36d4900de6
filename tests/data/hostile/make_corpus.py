"""Builds the hostile-input corpus in this folder (hand-made, deliberately bad inputs).

Run from the repository root: python tests/data/hostile/make_corpus.py
Each file's expected problem line is in expected.toml; tests/test_hostile.py checks them.
"""

import gzip
import io
import pickle
import random
import struct
import tarfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
LOG = b"(Worker_TP0 pid=11) ERROR 12-02 10:00:00 [a.py:1] WorkerProc hit an exception.\n"


def tar_with(name: str, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
    with tarfile.open(HERE / name, "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def info(name, data=b"", kind=tarfile.REGTYPE, link=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    return ti


def main() -> None:
    random.seed(7)
    tar_with("traversal.tar", [(info("../../etc/cron.d/evil.log", LOG), LOG), (info("ok/server.log", LOG), LOG)])
    tar_with("absolute.tar", [(info("/tmp/absolute.log", LOG), LOG)])
    tar_with("symlink.tar", [(info("passwd.log", kind=tarfile.SYMTYPE, link="/etc/passwd"), None)])
    tar_with("device.tar", [(info("zero.log", kind=tarfile.CHRTYPE), None)])
    # nested three deep: outer.tar > middle.tar > inner.tar > server.log
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as t:
        ti = info("server.log", LOG)
        t.addfile(ti, io.BytesIO(LOG))
    middle = io.BytesIO()
    with tarfile.open(fileobj=middle, mode="w") as t:
        t.addfile(info("inner.tar", inner.getvalue()), io.BytesIO(inner.getvalue()))
    tar_with("nested.tar", [(info("middle.tar", middle.getvalue()), middle.getvalue())])
    # zip bomb: 64 MiB of zeros in one member
    with zipfile.ZipFile(HERE / "zipbomb.zip", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("huge.log", b"\0" * (64 << 20))
    with zipfile.ZipFile(HERE / "zipslip.zip", "w") as z:
        z.writestr("../../outside.log", LOG)
    # a gzip stream cut in half
    gz = gzip.compress(LOG * 2000)
    (HERE / "cut.log.gz").write_bytes(gz[: len(gz) // 2])
    # ELF: section header table past the end; absurd counts; truncated real GPU dump
    ehdr = bytearray(64)
    ehdr[:4] = b"\x7fELF"
    ehdr[4], ehdr[5], ehdr[6] = 2, 1, 1
    struct.pack_into("<HHIQQQIHHHHHH", ehdr, 16, 4, 190, 1, 0, 0, 1 << 40, 0, 64, 0, 0, 64, 0xFFFF, 0xFFFE)
    (HERE / "elf_sections_past_end.nvcudmp").write_bytes(bytes(ehdr))
    core = REPO / "tests/data/gpu/tp4_oob_write_coredump/core_885.nvcudmp"
    if core.exists():
        (HERE / "truncated.nvcudmp").write_bytes(core.read_bytes()[:5000])
    cpu = bytearray(ehdr)
    struct.pack_into("<HH", cpu, 16, 4, 62)       # ET_CORE, x86-64: a CPU core
    struct.pack_into("<Q", cpu, 32, 1 << 50)      # program headers far past the end
    struct.pack_into("<HHH", cpu, 54, 56, 0xFFFF, 0)
    (HERE / "cpu_core_phdrs_past_end").write_bytes(bytes(cpu))
    (HERE / "junk.bin").write_bytes(bytes(random.getrandbits(8) for _ in range(20000)))
    (HERE / "bad_utf8.log").write_bytes(b"\xff\xfe\xfd" + LOG + b"caf\xe9 \xc3\x28 broken\n")
    (HERE / "nul_bytes.log").write_bytes(LOG.replace(b"WorkerProc", b"Worker\0Proc") + b"\0\0\0\n")
    (HERE / "huge_line.log").write_bytes(b"INFO 12-02 10:00:00 [a.py:1] " + b"x" * (3 << 20) + b"\n" + LOG)
    (HERE / "empty.log").write_bytes(b"")
    (HERE / "cut_traceback.log").write_bytes(
        b"(Worker_TP1 pid=12) Traceback (most recent call last):\n"
        b'(Worker_TP1 pid=12)   File "/srv/model.py", line 40, in forward\n'
        b"(Worker_TP1 pid=12)     out = self.attn(x)\n"
        b'(Worker_TP1 pid=12)   File "/srv/attn.py", line 9')
    (HERE / "cut_sanitizer.log").write_bytes(
        b"========= COMPUTE-SANITIZER\n"
        b"========= Invalid __global__ write of size 4 bytes\n"
        b"=========     at k+0x10 in k.cu:3\n"
        b"=========     by thread (0,0,0) in block (0,0,0)\n")
    (HERE / "restarts.log").write_bytes(
        b"(EngineCore_DP0 pid=20) INFO 12-02 09:00:00 [core.py:140] Initializing a V1 LLM engine (v0.30.0) with config: model='m', tensor_parallel_size=2\n"
        b"(Worker_TP1 pid=22) ERROR 12-02 09:05:00 [a.py:1] RuntimeError: CUDA error: an illegal memory access was encountered\n"
        b"(EngineCore_DP0 pid=20) INFO 12-02 10:00:00 [core.py:140] Initializing a V1 LLM engine (v0.30.0) with config: model='m', tensor_parallel_size=2\n"
        b"(Worker_TP0 pid=22) INFO 12-02 10:00:05 [a.py:1] reused pid, healthy\n")
    flight_recorder_dumps()
    print("corpus written to", HERE)


class _Planted:
    """Unpickled by pickle, it would create PLANTED: a stand-in for os.system."""

    def __reduce__(self):
        return (open, (PLANTED, "w"))


PLANTED = "/tmp/forensics-flightrec-PWNED"


def flight_recorder_dumps() -> None:
    """Flight Recorder dumps that must be refused: a GLOBAL among the entries, a memo bomb
    (10**9 items from 300 bytes), a real dump cut in half."""
    dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {}, "entries": [{"profiling_name": "nccl:all_reduce", "frames": [_Planted()]}]}
    (HERE / "nccl_trace_rank_7").write_bytes(pickle.dumps(dump, protocol=2))
    head = b"\x80\x02}(X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\x09\x00\x00\x00pg_config"
    body = b"X\x01\x00\x00\x00aq\x00"
    for level in range(1, 10):
        body += b"(h" + bytes([level - 1]) + b"2" * 9 + b"lq" + bytes([level])
    (HERE / "fr_memo_bomb_rank_0").write_bytes(head + body + b"u.")
    real = REPO / "tests/data/flightrec/gloo_missing/nccl_trace_rank_0"
    if real.exists():
        data = real.read_bytes()
        (HERE / "fr_cut_rank_1").write_bytes(data[: len(data) // 2])


if __name__ == "__main__":
    main()
