"""Property tests (hypothesis) that call every reader DIRECTLY, so that an exception in
any of them fails the test (``case.parse_source`` would turn it into a problem line).

Inputs: arbitrary text and bytes, random mixtures of real log lines (every recording
under tests/data), generated records of each format, mutated (truncated, spliced, NUL
bytes, invalid UTF-8, control characters, terminal escapes, 1+ MiB lines), and mutated
core dumps.  Properties: nothing raises; every line is accounted for; records round-trip
their fields; the normaliser strips what it promises; the redactor never lets a planted
secret through and is idempotent; every renderer renders whatever the pipeline built.

The example budget is modest and derandomized (FORENSICS_PROPERTY_EXAMPLES, default 30
per property); FORENSICS_FUZZ=1 uses random seeds for a long run.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import random
import re
import struct
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from forensics.case import parse_source
from forensics.events import Kind
from forensics.inputs.normalise import Line, Normaliser, clean_escapes
from forensics.parsers import registry
from forensics.parsers.base import ParsedSource
from forensics.parsers.coredumps.cpu import CoreDumpError, ElfCoreParser, read_cpu_core
from forensics.parsers.coredumps.gpu import CudaCoredumpParser, dump_event, read_cuda_core
from forensics.parsers.text.lines import LineParser
from forensics.parsers.text.stream import EventFactory
from forensics.redact import Redactor, redact_document
from forensics.report import REPORTERS, Options, render
from forensics.report.document import build
from tests.helpers import analyze_texts, parse_text, source_of
from tests.test_elfcore import segv_core
from tests.test_nvcudmp import gpu_dump

EXAMPLES = int(os.environ.get("FORENSICS_PROPERTY_EXAMPLES", "30"))
LONG_FUZZ = os.environ.get("FORENSICS_FUZZ") == "1"
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not LONG_FUZZ, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
FEW = settings(SETTINGS, max_examples=max(3, EXAMPLES // 8))

DATA = Path(__file__).resolve().parent / "data"
REAL_DUMP = DATA / "gpu/tp4_oob_write_coredump/core_885.nvcudmp"


# --- the checks: a parser called directly, and the invariants of what it returned --------

def check_text(data: str | bytes, relpath: str = "console.log") -> ParsedSource:
    """The text parser on ``data`` (exceptions propagate) and the invariants it promises."""
    parsed = parse_text(data, relpath)
    assert parsed.relpath == relpath and parsed.kind
    assert parsed.lines is not None and parsed.unparsed_lines is not None
    assert parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines, \
        (parsed.event_lines, parsed.noise_lines, parsed.counted_lines, parsed.unparsed_lines, parsed.lines)
    assert min(parsed.event_lines, parsed.noise_lines, parsed.counted_lines, parsed.unparsed_lines) >= 0
    assert len(parsed.unparsed_samples) <= min(5, parsed.unparsed_lines)
    for event in parsed.events:
        assert event.source == relpath and 0 <= event.line <= parsed.lines, (event.line, parsed.lines)
        assert isinstance(event.message, str)
    for problem in parsed.problems:
        assert isinstance(problem, str) and problem and "Traceback (most recent" not in problem
    assert all(count > 0 for count in parsed.formats.values())
    return parsed


def check_core(data: bytes, relpath: str) -> ParsedSource:
    """Both core readers directly: only CoreDumpError may come out of the decoders, and
    the parser classes never raise (a problem line or events, never nothing)."""
    for decode in (read_cpu_core, read_cuda_core):
        try:
            dump = decode(io.BytesIO(data), len(data), relpath)
        except CoreDumpError as exc:
            assert str(exc) and "\n" not in str(exc)
        else:
            if decode is read_cuda_core:
                dump_event(dump, relpath, None)
    source = source_of(data, relpath)
    reader = {"elf-core": ElfCoreParser, "cuda-coredump": CudaCoredumpParser}.get(source.kind)
    if reader is None:
        return ParsedSource(relpath, source.kind, problems=list(source.problems))
    parsed = reader().parse(source)
    assert parsed.events or parsed.problems
    return parsed


# --- strategies ------------------------------------------------------------------------------

def _real_lines() -> list[str]:
    """Lines of every recording and hand-made case under tests/data (answer keys excluded)."""
    lines: list[str] = []
    for path in sorted(DATA.rglob("*")):
        if not path.is_file() or path.suffix in (".toml", ".md", ".py", ".xml", ".nvcudmp", ".c", ".gz", ".zip",
                                                 ".tar", ".bin") or "core" in path.name or path.stat().st_size > 2 << 20:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        lines.extend(line for line in text.splitlines()[:300])
    return lines


REAL_LINES = _real_lines()
word = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters="_"), min_size=1,
               max_size=12)
message = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=80) \
    .map(str.strip).filter(bool)
plain_message = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd"), whitelist_characters=" .,:=-_/"),
                        min_size=1, max_size=60).map(lambda s: re.sub(r"\s+", " ", s).strip()).filter(bool)
pid = st.integers(1, 4_000_000)
levels = st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
stamp = st.tuples(st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
                  st.integers(0, 59))
fileinfo = st.one_of(word.map(lambda w: f"{w}.py"), st.tuples(word, word).map(lambda t: f"v1/{t[0]}/{t[1]}.py"))
process = st.one_of(st.integers(0, 7).map(lambda r: f"Worker_TP{r}"),
                    st.tuples(st.integers(0, 3), st.integers(0, 7)).map(lambda t: f"Worker_PP{t[0]}_TP{t[1]}"),
                    st.sampled_from(["EngineCore_DP0", "APIServer"]))


@st.composite
def record(draw, msg=message):
    proc, p, lvl, when, fi, line, text = (draw(process), draw(pid), draw(levels), draw(stamp), draw(fileinfo),
                                          draw(st.integers(1, 99999)), draw(msg))
    head = f"{lvl} {'%02d-%02d %02d:%02d:%02d' % when} [{fi}:{line}]"
    return dict(process=proc, pid=p, level=lvl, stamp=when, fileinfo=fi, lineno=line, message=text,
                text=f"({proc} pid={p}) {head} {text}")


frame = st.tuples(st.text("abcdefgh/_.", min_size=1, max_size=30).map(lambda s: "/" + s.strip("/") + ".py"),
                  st.integers(1, 99999), word,
                  st.text(st.characters(whitelist_categories=("Ll", "Nd", "Zs"), whitelist_characters="()._="),
                          min_size=1, max_size=40).map(str.strip).filter(bool))
exc_type = st.sampled_from(["RuntimeError", "torch.AcceleratorError", "ValueError", "KeyError", "OSError"])


@st.composite
def traceback_block(draw):
    frames = draw(st.lists(frame, min_size=1, max_size=6))
    etype, emsg = draw(exc_type), draw(plain_message)
    lines = ["Traceback (most recent call last):"]
    for f, n, fn, code in frames:
        lines += [f'  File "{f}", line {n}, in {fn}', f"    {code}"]
    lines.append(f"{etype}: {emsg}")
    return frames, etype, emsg, lines


@st.composite
def sanitizer_log(draw):
    kernel, n, pc = draw(word), draw(st.integers(1, 30)), draw(st.integers(16, 4096))
    lines = ["========= COMPUTE-SANITIZER"]
    for i in range(n):
        lines += ["========= Invalid __global__ write of size 4 bytes",
                  f"=========     at {kernel}+0x{pc:x} in k.cu:7",
                  f"=========     by thread ({i % 32},0,0) in block ({i // 32},0,0)",
                  f"=========     Address 0x{0x7f0000000000 + i * 4:x} is out of bounds",
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


CONTROL = st.sampled_from(["\x00", "\x1b[31m", "\x1b[0m", "\x1b]0;title\x07", "\x1b[2J", "\r", "\x08", "\x0c",
                           "\x7f", "\u202e", "\ufeff", "\ufffd", "^[[33m", "^M", "\t"])


@st.composite
def real_mixture(draw) -> bytes:
    """Real lines, some generated records, shuffled, with control characters and bad bytes."""
    lines = draw(st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=40))
    lines += [r["text"] for r in draw(st.lists(record(), max_size=5))]
    rng = draw(st.randoms(use_true_random=False))
    rng.shuffle(lines)
    out = []
    for line in lines:
        raw = line.encode()
        roll = rng.random()
        if roll < 0.08:
            at = rng.randrange(len(raw) + 1)
            raw = raw[:at] + draw(CONTROL).encode() + raw[at:]
        elif roll < 0.12:
            raw = raw.replace(b"e", b"\xe9", 2).replace(b"a", b"\xc3(", 1)          # invalid UTF-8
        elif roll < 0.15:
            raw = raw[: rng.randrange(len(raw) + 1)]                               # cut mid-line
        elif roll < 0.17:
            raw = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 40)))    # binary junk
        out.append(raw)
    return draw(st.sampled_from([b"\n", b"\r\n"])).join(out) + draw(st.sampled_from([b"", b"\n"]))


def mutate(data: bytes, choice: int, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    if choice == 0 and len(data) > 1:                          # truncate at a byte (never to nothing: the
        return data[: rng.randrange(1, len(data))]             # empty stream has its own test, a known bug)
    if choice == 1:                                            # random bytes spliced in
        at = rng.randrange(len(data) + 1)
        return data[:at] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))) + data[at:]
    if choice == 2:                                            # invalid UTF-8 and NUL bytes
        return data.replace(b"e", b"\xe9", 3).replace(b"a", b"\x00", 2)
    if choice == 3 and lines:                                  # duplicated and reordered lines
        rng.shuffle(lines)
        return b"\n".join(lines + lines[: len(lines) // 2])
    if choice == 4:                                            # a line past the 1 MiB cap
        return data + b"\n" + b"Z" * ((1 << 20) + 17) + b"\n" + data
    if choice == 5:                                            # terminal escapes everywhere
        return data.replace(b" ", b" \x1b[1;31m", 5).replace(b"\n", b"\x1b[0m\n", 5)
    return data


DOCUMENT = st.tuples(st.lists(record(), max_size=6), traceback_block(), sanitizer_log(), xid_line()).map(
    lambda t: ("\n".join([r["text"] for r in t[0]] + t[1][3] + t[2][2] + [t[3][2]]) + "\n").encode())


# --- the text parser ----------------------------------------------------------------------------

@SETTINGS
@given(st.text(max_size=2000))
def test_text_parser_on_arbitrary_text(text):
    assume(text)
    check_text(text)


@SETTINGS
@given(st.binary(min_size=1, max_size=4096))
def test_text_parser_on_arbitrary_bytes(data):
    check_text(data, "blob.log")


@SETTINGS
@given(real_mixture())
def test_text_parser_on_mixtures_of_real_line_shapes(data):
    check_text(data)


@SETTINGS
@given(DOCUMENT, st.integers(0, 6), st.randoms(use_true_random=False))
def test_text_parser_on_mutated_documents(data, choice, rng):
    parsed = check_text(mutate(data, choice, rng))
    if choice == 4:
        assert any("longer than 1,048,576 bytes were cut" in p for p in parsed.problems)


@FEW
@given(st.integers(1 << 20, (1 << 20) + (1 << 18)), st.sampled_from([b"x", b"ab", b"(Worker_TP0 pid=1) ", b"\xff", b"\x1b[31m"]))
def test_text_parser_on_huge_lines(size, unit):
    data = b"INFO 12-02 10:00:00 [a.py:1] " + unit * (size // len(unit)) + b"\nERROR 12-02 10:00:01 [a.py:2] end\n"
    parsed = check_text(data)
    if size >= (1 << 20) + len(unit):
        assert any("were cut" in p for p in parsed.problems)


@SETTINGS
@given(record())
def test_vllm_record_round_trips_through_normaliser_and_line_parser(rec):
    (line,) = list(Normaliser().feed(1, rec["text"])) + list(Normaliser().flush())
    assert (line.env.process, line.env.pid) == (rec["process"], rec["pid"])
    parsed = LineParser().parse(line.text)
    when = parsed.stamp
    assert (parsed.format, parsed.level, parsed.fileinfo, parsed.lineno) == \
        ("vllm", rec["level"], rec["fileinfo"], rec["lineno"])
    assert (when.month, when.day, when.hour, when.minute, when.second) == rec["stamp"]
    assert parsed.message == rec["message"]


@SETTINGS
@given(traceback_block())
def test_traceback_round_trips(block):
    frames, etype, emsg, lines = block
    parsed = check_text("\n".join(lines) + "\n", "worker.log")
    (event,) = [e for e in parsed.events if e.attrs.get("chain")]
    (exc,) = event.attrs["chain"]
    assert (exc.type, exc.message) == (etype, emsg)
    assert [(f.file, f.line, f.function, f.code) for f in exc.frames] == list(frames)
    assert parsed.event_lines == len(lines)


@SETTINGS
@given(sanitizer_log())
def test_sanitizer_reports_collapse_to_one_finding(log):
    kernel, n, lines = log
    parsed = check_text("\n".join(lines) + "\n", "cs.log")
    (finding,) = [e for e in parsed.events if e.attrs.get("report") == "access"]
    assert finding.attrs["kernel"] == kernel and finding.attrs["count"] == n


@SETTINGS
@given(xid_line())
def test_xid_lines_round_trip(x):
    xid, p, text = x
    parsed = check_text(text + "\n", "dmesg.txt")
    (event,) = [e for e in parsed.events if e.kind == Kind.XID]
    assert (int(event.attrs["xid"]), event.pid) == (xid, p)


@SETTINGS
@given(st.lists(record(plain_message), min_size=1, max_size=10), st.lists(record(plain_message), min_size=1,
                                                                          max_size=10), st.randoms())
def test_interleaving_two_streams_gives_each_process_the_same_events(a, b, rng):
    def own(recs, who):
        return [r["text"].replace(f"({r['process']} pid={r['pid']})", who) for r in recs]
    a, b = own(a, "(Worker_TP0 pid=111)"), own(b, "(Worker_TP1 pid=222)")
    merged, ia, ib = [], 0, 0
    while ia < len(a) or ib < len(b):
        if ib >= len(b) or (ia < len(a) and rng.random() < 0.5):
            merged.append(a[ia])
            ia += 1
        else:
            merged.append(b[ib])
            ib += 1

    def per_pid(lines):
        out: dict = {}
        for e in check_text("\n".join(lines) + "\n").events:
            out.setdefault(e.pid, []).append((e.kind, e.message))
        return out

    assert per_pid(merged) == {**per_pid(a), **per_pid(b)}


# --- each block parser, driven directly ----------------------------------------------------------

BLOCK_FORMATS = [(f.name, importlib.import_module(f.reader), s["text"]) for f in registry.formats_of_kind("block")
                 for s in f.samples]


def run_block(module, lines: list[str]):
    """Open the block at the first line its module starts on, feed it lines until it
    refuses one, close it: the block contract (block.py) with nothing in between."""
    parser = LineParser()
    for i, text in enumerate(lines):
        block = module.start(text, None)
        if block is None:
            continue
        taken = []
        for n, line in enumerate(lines[i:], i + 1):
            if not block.accepts(line, n, None):
                break
            taken.append(n)
        make = EventFactory("block.log").at(Line(i + 1, text), parser.parse(text))
        result = block.close(make)
        accounted = sorted(result.used) + [n for n, _ in result.unparsed]
        assert len(accounted) + result.counted + result.noise == len(taken), (accounted, result, taken)
        assert set(accounted) <= set(taken) and len(set(accounted)) == len(accounted)
        assert all(e.source == "block.log" for e in result.events)
        return result
    return None


@pytest.mark.parametrize("name, module, sample", BLOCK_FORMATS, ids=[f"{n}-{i}" for i, (n, _, _) in
                                                                      enumerate(BLOCK_FORMATS)])
def test_every_block_format_parses_its_sample(name, module, sample):
    result = run_block(module, sample.rstrip("\n").split("\n"))
    assert result is not None and result.problems == []
    assert result.events or name == "python-warning"


@SETTINGS
@given(st.sampled_from(BLOCK_FORMATS), st.randoms(use_true_random=False),
       st.lists(st.one_of(st.sampled_from(REAL_LINES), message, CONTROL), max_size=6))
def test_block_parsers_on_mutated_samples(fmt, rng, extra):
    _name, module, sample = fmt
    lines = sample.rstrip("\n").split("\n")
    for text in extra:                                   # foreign lines anywhere
        lines.insert(rng.randrange(len(lines) + 1), text)
    if rng.random() < 0.5:                               # cut: before a line, or inside one
        cut = rng.randrange(1, len(lines) + 1)
        lines = lines[:cut]
        lines[-1] = lines[-1][: rng.randrange(len(lines[-1]) + 1)]
    if rng.random() < 0.3:
        rng.shuffle(lines)
    run_block(module, lines)


# --- the core dump readers --------------------------------------------------------------------

CORES = [("core.4242", segv_core()), ("core_1.nvcudmp", gpu_dump())]
if REAL_DUMP.is_file():
    CORES.append(("core_885.nvcudmp", REAL_DUMP.read_bytes()))


@SETTINGS
@given(st.sampled_from(CORES), st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1,
                                        max_size=24),
       st.one_of(st.none(), st.integers(0, 1 << 30)),
       st.lists(st.tuples(st.integers(0, 1 << 30), st.sampled_from([0, 1, 0xFFFFFFFF, 1 << 40, (1 << 64) - 1])),
                max_size=4))
def test_core_readers_on_mutated_dumps(core, bytes_to_set, cut, words_to_set):
    name, raw = core
    data = bytearray(raw)
    # the headers and section/program header tables are where a hostile dump hurts
    hot = [0, max(0, len(data) - 4096)]
    for pos, value in bytes_to_set:
        base = hot[pos % 2] if pos % 3 else 0
        data[(base + pos) % len(data)] = value
    for pos, value in words_to_set:
        at = (hot[pos % 2] + pos) % max(1, len(data) - 8)
        struct.pack_into("<Q", data, at - at % 4, value)
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    check_core(bytes(data), name)


@SETTINGS
@given(st.binary(max_size=2048), st.sampled_from([b"", b"\x7fELF", b"\x7fELF\x02\x01\x01",
                                                  b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00\xbe\x00",
                                                  b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x04\x00\x3e\x00"]))
def test_core_readers_on_random_bytes(data, magic):
    check_core(magic + data, "core")


# --- the normaliser ------------------------------------------------------------------------------

@SETTINGS
@given(st.lists(st.one_of(st.text(max_size=300), st.sampled_from(REAL_LINES),
                          st.tuples(st.sampled_from(REAL_LINES), CONTROL).map("".join)), max_size=30))
def test_normaliser_never_raises_and_strips_escapes(raws):
    norm = Normaliser()
    out = []
    for n, raw in enumerate(raws, 1):
        out.extend(norm.feed(n, raw))
    out.extend(norm.flush())
    assert all(1 <= line.lineno <= len(raws) for line in out)
    for line in out:
        assert "\x1b" not in line.text and "\r" not in line.text
        assert isinstance(line.env.wrappers, tuple)


@SETTINGS
@given(st.text(max_size=400))
def test_clean_escapes_is_idempotent_and_removes_escape_bytes(text):
    once = clean_escapes(text)
    assert "\x1b" not in once
    assert clean_escapes(once) == once


@SETTINGS
@given(st.datetimes(datetime(2000, 1, 1), datetime(2099, 12, 31)), record(plain_message),
       st.sampled_from(["kubectl", "compose", "both"]))
def test_wrapped_records_keep_their_envelope(when, rec, wrap):
    raw = rec["text"]
    if wrap in ("compose", "both"):
        raw = f"vllm-tp-1  | {raw}"
    if wrap in ("kubectl", "both"):
        raw = f"{when.strftime('%Y-%m-%dT%H:%M:%S.%f')}Z {raw}"
    (line,) = list(Normaliser().feed(7, raw))
    assert line.lineno == 7 and (line.env.process, line.env.pid) == (rec["process"], rec["pid"])
    assert line.text.endswith(rec["message"])
    if wrap in ("kubectl", "both"):
        assert line.env.time == when
    if wrap in ("compose", "both"):
        assert line.env.container == "vllm-tp-1"


# --- the redactor --------------------------------------------------------------------------------

# secret -> the lines it is planted in ({} is the secret), as logs carry them
SECRETS = {
    "hf_" + "Q7x" * 10: ["token {} from", "HF_TOKEN={}", "{}"],
    "sk-proj-" + "A1b2C3d4" * 3: ["OPENAI_API_KEY={}", "using key {}"],
    "AKIA" + "ABCDEFGHIJKLMNOP": ["aws id {} ok", "{}"],
    "alice.smith@corp-mail.com": ["owner {}", "<{}>"],
    "10.9.8.7": ["connect to {}:29500 failed", "peer {} closed", "MASTER_ADDR={}"],
    "hunter2pass": ["pip index https://bob:{}@pypi.org/simple"],      # a public host: no host pseudonym
    "Zm9vYmFyYmF6cXV4": ["Authorization: Bearer {}"],
}
SECRET_LINES = [form.format(secret) for secret, forms in SECRETS.items() for form in forms]


def _plant(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    for _secret, forms in SECRETS.items():
        at = rng.randrange(len(lines) + 1)
        lines.insert(at, rng.choice(["", "INFO ", "(Worker_TP0 pid=1) "]) + rng.choice(forms).format(_secret))
    return "\n".join(lines)


REDACTABLE = st.one_of(DOCUMENT.map(lambda b: b.decode()), real_mixture().map(lambda b: b.decode("utf-8", "replace")),
                       st.text(max_size=500))


@SETTINGS
@given(REDACTABLE, st.randoms(use_true_random=False))
def test_redaction_never_lets_a_planted_secret_through(text, rng):
    planted = _plant(text, rng)
    redactor = Redactor()
    redacted = redactor.text(planted)
    for secret in SECRETS:
        assert secret not in redacted, secret
    counts = redactor.summary()
    assert counts["hf-token"] >= 1 and counts["email"] >= 1 and counts["password-in-url"] >= 1


@SETTINGS
@given(REDACTABLE, st.randoms(use_true_random=False))
def test_redaction_is_idempotent(text, rng):
    once = Redactor().text(_plant(text, rng))
    assert Redactor().text(once) == once


def test_re_redacting_never_merges_two_hosts():
    text = "fetching weights from store.corp.com\nDec 02 10:42:37 gpu-node-7 kernel: NVRM: Xid 79, pid=1\n"
    once = Redactor().text(text)
    assert "store.corp.com" not in once and "gpu-node-7" not in once
    assert Redactor().text(once) == once


@SETTINGS
@given(st.recursive(st.one_of(st.none(), st.integers(), st.booleans(), st.text(max_size=40),
                              st.sampled_from(SECRET_LINES)),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=20))
def test_redacting_a_document_keeps_its_shape_and_no_secret(value):
    out = redact_document({"payload": value})
    assert out["redaction"]["enabled"] is True
    flat = json.dumps(out["payload"])
    assert not any(json.dumps(secret)[1:-1] in flat for secret in SECRETS)

    def shape(v):
        if isinstance(v, dict):
            return {k: shape(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [shape(x) for x in v]
        return type(v).__name__
    assert shape(out["payload"]) == shape(value)


# --- the renderers ---------------------------------------------------------------------------------

def check_renderers(case) -> dict[str, str]:
    document = build(case)
    json.dumps(document.to_json(), default=str)
    outputs = {}
    for fmt in REPORTERS:
        for redact in (False, True):
            out = io.StringIO()
            render(document, fmt, out, Options(redact=redact, explain=True, verbose=True))
            text = out.getvalue()
            assert text.strip(), (fmt, redact)
            assert "\x1b]" not in text and "\x07" not in text           # no terminal injection from the input
            if fmt == "json":
                assert json.loads(text)["schema"] == "forensics.report/1"
            outputs[f"{fmt}{'-redacted' if redact else ''}"] = text
    return outputs


@FEW
@given(st.one_of(DOCUMENT, real_mixture()), st.integers(0, 6), st.randoms(use_true_random=False))
def test_every_renderer_renders_whatever_the_pipeline_built(data, choice, rng):
    text = mutate(data, choice if choice != 4 else 6, rng)
    planted = _plant(text.decode("utf-8", "replace"), rng)
    case = analyze_texts({"server.log": planted, "dmesg.txt": text})
    outputs = check_renderers(case)
    for fmt in ("markdown-redacted", "html-redacted", "json-redacted"):
        assert not any(secret in outputs[fmt] for secret in SECRETS), fmt


# --- the properties can fail -------------------------------------------------------------------

def test_a_parser_that_raises_fails_the_properties(monkeypatch):
    """The checks above call the parsers directly: a parser that raises makes them fail,
    where the pipeline's parse_source would only have turned it into a problem line."""
    from forensics.parsers.text import traceback

    def broken(self, make):
        raise RuntimeError("planted parser bug")
    monkeypatch.setattr(traceback.TracebackBlock, "close", broken)
    text = "Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\n    g()\nValueError: x\n"
    with pytest.raises(RuntimeError, match="planted parser bug"):
        check_text(text)
    # ... while the pipeline would have swallowed it: that is why the properties never use it
    swallowed = parse_source(source_of(text, "console.log"))
    assert any("the reader failed (RuntimeError: planted parser bug)" in p for p in swallowed.problems)
    with pytest.raises(Exception) as info:
        test_traceback_round_trips()
    assert "planted parser bug" in repr(info.value) or "planted parser bug" in str(info.getrepr())


def test_a_core_reader_that_raises_fails_the_properties(monkeypatch):
    from forensics.parsers.coredumps import cpu

    def broken(*args, **kwargs):
        raise KeyError("planted decoder bug")
    monkeypatch.setattr(cpu, "_note_into", broken)
    with pytest.raises(CoreDumpError):          # guarded: the decoder's bug becomes one sentence ...
        read_cpu_core(io.BytesIO(segv_core()), len(segv_core()), "core")
    monkeypatch.setattr(cpu, "read_cpu_core", lambda *a, **k: (_ for _ in ()).throw(KeyError("planted")))
    with pytest.raises(KeyError):               # ... but an escape from the reader fails the check
        check_core(segv_core(), "core.1")


def test_text_parser_on_an_empty_stream():
    parsed = check_text(b"", "empty.log")
    assert parsed.lines == 0 and parsed.events == []
