"""Every regex of the knowledge files, and the text pipeline, stay linear on long lines.

A log line may be 1 MiB (longer ones are cut there).  A backtracking regex that is
searched over a line can cost the square of its length: a part that matches a run
(``\\d+``, ``\\s*``, ``[\\w.-]+`` ...) tried from every position of a long run of such
characters rescans the run each time, and a 1 MiB line of digits or blanks then takes
minutes (hostile input must never hang the analysis).  Here every pattern of
forensics/data/*.toml is searched over 1 MiB lines made of one repeated unit, as it is
used (searched; redaction rules substituted, so every match is found), and whole lines
go through the normaliser, the line parser and the classifier.

Each check first runs on 64 KiB with a tight bound, so that a quadratic pattern fails in
about a second instead of hanging the suite; linear patterns take milliseconds on 1 MiB
and the bounds leave a wide margin for a loaded machine.
"""

from __future__ import annotations

import re
import time
from importlib import resources

import pytest

from forensics import kb, knowledge
from forensics.inputs.normalise import Normaliser
from forensics.parsers.text import messages
from forensics.parsers.text.lines import LineParser
from tests.helpers import parse_text

MIB = 1 << 20
PROBE = 64 << 10
PROBE_SECONDS = 0.5        # linear: a few ms; quadratic: seconds
LINE_SECONDS = 3.0         # linear: at most ~0.5 s; quadratic: minutes

# runs of one character class each, at 1 MiB
UNITS = ["7", " ", "\t", "a", "=", "[", ":"]
# more shapes, at 64 KiB only (enough to show a quadratic, at a fraction of the cost):
# "a." and "1 " alternate two classes (dotted names, numbered words), "(" and "<" open
# brackets that a pattern may look for the end of
PROBE_UNITS = ["A", "a.", "1 ", "(", "<", "-", "_", "/"]

# the keys that hold regexes; under `samples` only example lines
REGEX_KEYS = {"pattern", "patterns", "guard", "skip_files", "files", "functions",
              "surface_file", "surface_function", "origin_kernel", "message"}


def _data_files() -> list[str]:
    root = resources.files("forensics.data")
    names = sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))
    issues = sorted("known_issues/" + p.name[:-5] for p in root.joinpath("known_issues").iterdir()
                    if p.name.endswith(".toml"))
    return names + issues


def _load(name: str) -> dict:
    return knowledge.tomllib.loads(resources.files("forensics.data").joinpath(f"{name}.toml")
                                   .read_text(encoding="utf-8"))


def _regexes(value, name: str, key: str | None = None, where: str = ""):
    """(where, pattern text) for every regex in a catalogue."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "samples":
                continue
            if k == "environment" and isinstance(v, dict):     # a known issue: regexes unless versions
                yield from ((f"{where}.environment.{e}", c) for e, c in v.items()
                            if e not in kb.VERSION_KEYS and isinstance(c, str))
                continue
            yield from _regexes(v, name, k, f"{where}.{k}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if key == "normalisers":                          # (regex, replacement) pairs
                yield f"{where}[{i}]", item[0]
            else:
                yield from _regexes(item, name, key, f"{where}[{i}]")
    elif isinstance(value, str) and key in REGEX_KEYS:
        if key == "message" and not name.startswith("known_issues/"):
            return                                            # a CUDA error's text, not a regex
        yield where, value


def _literals(pattern: str) -> str:
    """The words a pattern spells out, to build lines that get past its first literal."""
    return " ".join(re.findall(r"(?<!\\)[A-Za-z_][A-Za-z_ ]{2,}[A-Za-z_]", pattern)[:6])


def _lines(pattern: str):
    """(line, whether it is run at 1 MiB or only probed at 64 KiB)."""
    yield from ((u * (MIB // len(u)), True) for u in UNITS)
    yield from ((u * (PROBE // len(u)), False) for u in PROBE_UNITS)
    words = _literals(pattern)
    if words:       # past the pattern's first words, into what follows them
        yield from ((words + " " + u * (PROBE // len(u)) + "x", False) for u in (" ", "a", "7", "."))


def _bounded(fn, seconds: float, what: str) -> None:
    started = time.monotonic()
    fn()
    elapsed = time.monotonic() - started
    assert elapsed < seconds, f"{what}: {elapsed:.2f}s (bound {seconds}s) - a quadratic regex?"


@pytest.mark.parametrize("name", _data_files())
def test_every_pattern_of_a_data_file_is_linear_on_1mib_lines(name):
    found = [(where, re.compile(text)) for where, text in _regexes(_load(name), name)]
    substituted = name == "redaction"

    def run(pattern, line):
        if substituted:
            for _ in pattern.finditer(line):
                pass
        else:
            pattern.search(line)

    for where, pattern in found:
        for line, whole in _lines(pattern.pattern):
            what = f"{name}.toml{where} {pattern.pattern[:60]!r} on {line[:30]!r}..."
            _bounded(lambda: run(pattern, line[:PROBE]), PROBE_SECONDS, what + " (64 KiB)")
            if whole:
                _bounded(lambda: run(pattern, line), LINE_SECONDS, what)


def test_the_catalogues_regexes_are_all_found():
    counts = {name: sum(1 for _ in _regexes(_load(name), name)) for name in _data_files()}
    for name in ("wrappers", "noise", "messages", "redaction", "formats", "cuda_error_forms", "processes",
                 "surface_apis", "signature", "cuda_errors"):
        assert counts[name] > 0, name
    assert sum(counts.values()) > 200


@pytest.mark.parametrize("pattern", [knowledge._message_texts(), messages._trigger_index()[0]],
                         ids=["cuda-messages", "message-triggers"])
def test_patterns_built_from_the_catalogues_are_linear(pattern):
    for line, whole in _lines(""):
        _bounded(lambda: [None for _ in pattern.finditer(line[:PROBE])], PROBE_SECONDS, repr(line[:10]))
        if whole:
            _bounded(lambda: [None for _ in pattern.finditer(line)], LINE_SECONDS, repr(line[:10]))


# whole lines through the stages: bare runs, and runs behind the starts that lead the
# stages into their deeper patterns (a record header, a CUDA error, a traceback frame,
# a torch rank prefix, a launcher line that carries a rank field)
PIPELINE_LINES = [u * (MIB // len(u)) for u in ("7", " ", "\t", "a", "=", "[", ":", "a.")] + [
    "INFO 12-02 10:00:00 [a.py:1] x" + " " * MIB,
    "RuntimeError: CUDA error: " + "a" * MIB,
    "a.cu:1 cudaFoo(" + " " * MIB,
    '  File "' + " " * MIB,
    "[rank0]: " + "E " * (MIB // 2),
    "2025-05-26T10:46:35.402601Z  INFO text_generation_launcher: " + " " * MIB + "x",
]
LOG = b"(Worker_TP0 pid=11) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal memory access " \
      b"was encountered\n"


@pytest.mark.parametrize("line", PIPELINE_LINES, ids=lambda line: repr(line[:12]))
def test_the_normaliser_line_parser_and_classifier_are_linear_on_1mib_lines(line):
    parse_text(LOG)                                          # grammars built before timing
    _bounded(lambda: list(Normaliser().feed(1, line[:PROBE])), PROBE_SECONDS, "normaliser (64 KiB)")
    _bounded(lambda: list(Normaliser().feed(1, line)), LINE_SECONDS, "normaliser")
    _bounded(lambda: LineParser().parse(line), LINE_SECONDS, "line parser")
    _bounded(lambda: messages.classify(line), LINE_SECONDS, "message classifier")
    _bounded(lambda: knowledge.find_cuda_error(line), LINE_SECONDS, "CUDA error forms")
    data = line.encode() + b"\n" + LOG
    _bounded(lambda: parse_text(data[:PROBE] + b"\n" + LOG, "long.log"), 2 * PROBE_SECONDS + 1, "parser (64 KiB)")
    started = time.monotonic()
    parsed = parse_text(data, "long.log")
    elapsed = time.monotonic() - started
    assert elapsed < 3 * LINE_SECONDS, f"{elapsed:.2f}s for a 1 MiB line"
    assert 11 in [e.pid for e in parsed.events]              # the line after it is still read
