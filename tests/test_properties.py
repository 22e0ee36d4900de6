"""Property tests (hypothesis) for every grammar and binary reader.

Strategies generate valid records of each format; mutations then truncate, splice,
duplicate, reorder, and pour in random bytes, invalid UTF-8, NUL bytes and 1 MB lines.
Properties: no exception escapes; valid records round-trip their fields; every line is
accounted for; interleaving two processes' streams gives each process the same events.

The example budget is fixed (FORENSICS_PROPERTY_EXAMPLES, default 200 per strategy) and
derandomized, so CI is repeatable.  The long fuzz run (README, "Fuzzing") sets
FORENSICS_FUZZ=1 for random seeds and a much larger budget.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.events import Kind
from forensics.parsers import kernel_log
from forensics.parsers.traceback import TracebackAssembler, parse_block
from forensics.parsers.vllm_log import LineParser
from forensics.redact import Redactor
from forensics.sources import Source, _classify

EXAMPLES = int(os.environ.get("FORENSICS_PROPERTY_EXAMPLES", "200"))
LONG_FUZZ = os.environ.get("FORENSICS_FUZZ") == "1"     # random seeds, for the long run
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG_FUZZ,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- strategies for valid records ------------------------------------------------------------

word = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="_"),
               min_size=1, max_size=12)
message = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1,
                  max_size=80).map(str.strip).filter(bool)
pid = st.integers(1, 4_000_000)
levels = st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
stamp = st.tuples(st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
                  st.integers(0, 59)).map(lambda t: "%02d-%02d %02d:%02d:%02d" % t)
fileinfo = st.one_of(word.map(lambda w: f"{w}.py"),
                     st.tuples(word, word).map(lambda t: f"v1/{t[0]}/{t[1]}.py"))
process = st.one_of(
    st.integers(0, 7).map(lambda r: f"Worker_TP{r}"),
    st.tuples(st.integers(0, 3), st.integers(0, 7)).map(lambda t: f"Worker_PP{t[0]}_TP{t[1]}"),
    st.integers(0, 7).map(lambda r: f"VllmWorker rank={r}"),
    st.integers(0, 7).map(lambda r: f"VllmWorker TP{r}"),
    st.sampled_from(["EngineCore_DP0", "EngineCore", "APIServer", "ApiServer_1", "VllmWorkerProcess"]),
)


@st.composite
def record(draw):
    proc, p, lvl, when, fi, line, msg = (draw(process), draw(pid), draw(levels), draw(stamp),
                                          draw(fileinfo), draw(st.integers(1, 99999)), draw(message))
    bracket = draw(st.booleans())
    loc = f"[{fi}:{line}]" if bracket else f"{fi}:{line}]"
    return dict(process=proc, pid=p, level=lvl, stamp=when, fileinfo=fi, lineno=line, message=msg,
                text=f"({proc} pid={p}) {lvl} {when} {loc} {msg}")


frame = st.tuples(st.text("abcdefgh/_.", min_size=1, max_size=30).map(lambda s: "/" + s.strip("/") + ".py"),
                  st.integers(1, 99999), word,
                  st.text(st.characters(whitelist_categories=("Ll", "Nd", "Zs"), whitelist_characters="()._="),
                          min_size=1, max_size=40).map(str.strip).filter(bool))
exc_type = st.sampled_from(["RuntimeError", "torch.AcceleratorError", "ValueError", "KeyError", "OSError"])


@st.composite
def traceback_block(draw):
    frames = draw(st.lists(frame, min_size=1, max_size=6))
    etype, emsg = draw(exc_type), draw(message)
    lines = ["Traceback (most recent call last):"]
    for f, n, fn, code in frames:
        lines += [f'  File "{f}", line {n}, in {fn}', f"    {code}"]
    lines.append(f"{etype}: {emsg}")
    return frames, etype, emsg, lines


@st.composite
def sanitizer_log(draw):
    kernel = draw(word)
    n = draw(st.integers(1, 30))
    pc = draw(st.integers(16, 4096))
    lines = ["========= COMPUTE-SANITIZER"]
    for i in range(n):
        lines += ["========= Invalid __global__ write of size 4 bytes",
                  f"=========     at {kernel}+0x{pc:x} in k.cu:7",
                  f"=========     by thread ({i % 32},0,0) in block ({i // 32},0,0)",
                  f"=========     Access to 0x{0x7f0000000000 + i * 4:x} is out of bounds",
                  "=========     Saved host backtrace up to driver entry point at kernel launch time",
                  "=========         Host Frame: main in k.cu:20 [0x8e54] in k",
                  "========= "]
    lines.append(f"========= ERROR SUMMARY: {n} errors")
    return kernel, n, lines


@st.composite
def xid_line(draw):
    xid, p = draw(st.sampled_from([13, 31, 43, 45, 48, 79, 94])), draw(pid)
    body = f"NVRM: Xid (PCI:0000:{draw(st.integers(0, 255)):02x}:00): {xid}, pid={p}, name=python3, channel 0x0000000a"
    envelope = draw(st.sampled_from(["[   62.489435] ", "[Wed Dec  2 10:42:37 2026] ",
                                     "Dec 02 10:42:37 gpu-node-7 kernel: ", ""]))
    return xid, p, envelope + body


# --- mutations ------------------------------------------------------------------------------

def mutate(data: bytes, choice: int, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    if choice == 0 and data:                                   # truncate at a byte
        return data[: rng.randrange(len(data))]
    if choice == 1:                                            # random bytes spliced in
        at = rng.randrange(len(data) + 1)
        return data[:at] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))) + data[at:]
    if choice == 2:                                            # invalid UTF-8 and NUL bytes
        return data.replace(b"e", b"\xe9", 3).replace(b"a", b"\x00", 2)
    if choice == 3 and lines:                                  # duplicated and reordered lines
        rng.shuffle(lines)
        return b"\n".join(lines + lines[: len(lines) // 2])
    if choice == 4:                                            # a 1 MB line
        return data + b"\n" + b"Z" * (1 << 20) + b"\n" + data
    return data


def parse_bytes(data: bytes, name: str = "input.log"):
    source = _classify(name, None, data[:65536], size=len(data), mtime=None, data=data)
    return analyze_source(source)


def analyze_source(source: Source):
    from forensics.case import parse_source
    return parse_source(source, {})


# --- properties -------------------------------------------------------------------------------

@SETTINGS
@given(record())
def test_vllm_record_round_trips(rec):
    line = LineParser().parse(rec["text"])
    assert (line.form, line.process, line.pid, line.level, line.stamp, line.fileinfo, line.lineno, line.message) == \
        ("record", rec["process"], rec["pid"], rec["level"], rec["stamp"], rec["fileinfo"], rec["lineno"],
         rec["message"])


@SETTINGS
@given(traceback_block())
def test_traceback_round_trips(block):
    frames, etype, emsg, lines = block
    asm = TracebackAssembler()
    done = []
    for n, text in enumerate(lines + ["next unrelated line"], 1):
        done += asm.feed(text, n, None)[0]
    (only,) = done
    (exc,) = parse_block(only.text)
    assert (exc.type, exc.message) == (etype, emsg)
    assert [(f.file, f.line, f.function, f.code) for f in exc.frames] == [(f, n, fn, code) for f, n, fn, code in frames]


@SETTINGS
@given(sanitizer_log())
def test_sanitizer_reports_collapse_to_one_finding(log):
    kernel, n, lines = log
    parsed = parse_bytes(("\n".join(lines) + "\n").encode(), "cs.log")
    (finding,) = [e for e in parsed.events if e.attrs.get("report") == "access"]
    assert finding.attrs["kernel"] == kernel and finding.attrs["count"] == n
    assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


@SETTINGS
@given(xid_line())
def test_xid_lines_round_trip(x):
    xid, p, text = x
    parsed = parse_bytes((text + "\n").encode(), "dmesg.txt")
    (event,) = [e for e in parsed.events if e.kind == Kind.XID]
    assert (int(event.attrs["xid"]), event.pid) == (xid, p)
    assert kernel_log.parse(text) is not None or text.startswith("NVRM")


@SETTINGS
@given(st.lists(record(), min_size=1, max_size=12), st.lists(record(), min_size=1, max_size=12), st.randoms())
def test_interleaving_two_streams_gives_each_process_the_same_events(a, b, rng):
    a = [dict(r, pid=111, process="Worker_TP0", text=r["text"].replace(f"({r['process']} pid={r['pid']})",
                                                                        "(Worker_TP0 pid=111)")) for r in a]
    b = [dict(r, pid=222, process="Worker_TP1", text=r["text"].replace(f"({r['process']} pid={r['pid']})",
                                                                        "(Worker_TP1 pid=222)")) for r in b]
    merged, ia, ib = [], 0, 0
    while ia < len(a) or ib < len(b):
        if ib >= len(b) or (ia < len(a) and rng.random() < 0.5):
            merged.append(a[ia]["text"]); ia += 1
        else:
            merged.append(b[ib]["text"]); ib += 1

    def per_pid(lines):
        parsed = parse_bytes(("\n".join(lines) + "\n").encode())
        out = {}
        for e in parsed.events:
            out.setdefault(e.pid, []).append((e.kind, e.message))
        return out

    together = per_pid(merged)
    alone = {**per_pid([r["text"] for r in a]), **per_pid([r["text"] for r in b])}
    assert together == alone


DOCUMENT = st.tuples(st.lists(record(), max_size=8), traceback_block(), sanitizer_log(), xid_line()).map(
    lambda t: ("\n".join([r["text"] for r in t[0]] + t[1][3] + t[2][2] + [t[3][2]]) + "\n").encode())


@SETTINGS
@given(DOCUMENT, st.integers(0, 5), st.randoms(use_true_random=False))
def test_mutated_documents_never_crash_and_lines_add_up(data, choice, rng):
    mutated = mutate(data, choice, rng)
    parsed = parse_bytes(mutated)
    if parsed.lines is not None:
        assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


@SETTINGS
@given(st.binary(max_size=4096))
def test_random_bytes_never_crash(data):
    parsed = parse_bytes(data, "blob")
    assert parsed.kind


SECRET = "hf_" + "Q" * 30


@SETTINGS
@given(DOCUMENT, st.integers(0, 5), st.randoms(use_true_random=False))
def test_redaction_holds_under_mutation(data, choice, rng):
    planted = data.replace(b"\n", f" token {SECRET} from 10.9.8.7\n".encode(), 3)
    text = mutate(planted, choice, rng).decode("utf-8", errors="replace")
    redacted = Redactor().text(text)
    assert SECRET not in redacted and "10.9.8.7" not in redacted


CORE = Path(__file__).resolve().parent / "data/gpu/tp4_oob_write_coredump/core_885.nvcudmp"


@SETTINGS
@given(st.integers(0, 1 << 30), st.integers(0, 255), st.integers(0, 6))
def test_mutated_gpu_core_dump_never_crashes(position, value, choice):
    data = bytearray(CORE.read_bytes())
    rng = random.Random(position ^ value)
    if choice == 0:
        data = data[: position % len(data)]
    else:
        for _ in range(choice * 4):
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        data[position % len(data)] = value
    parsed = parse_bytes(bytes(data), "core_885.nvcudmp")
    assert parsed.kind
