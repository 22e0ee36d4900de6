"""Every regex of the knowledge files and the grammars, and the text pipeline, stay
linear on long lines.

A log line may be 1 MiB (longer ones are cut there).  A backtracking regex can cost the
square of a line's length - a repeat retried over a long run from every start position,
from every step of a lazy run, or from every copy of its start that a line repeats -
and one hostile or unlucky line then stalls the analysis for hours (issue 20).  Here:

- every regex of forensics/data/*.toml (found by key: every string of every file is
  classified, and a new key fails until it is) and every terminal of grammars/*.lark is
  run as the code runs it (searched; substituted for redaction and normalisers, so every
  match is found; a guard matched at a line's start; a terminal matched where a token
  starts) on lines built from the pattern itself (tests/pumps.py: the text that reaches
  each repeat, then long runs of what the repeat accepts; that text and a run repeated;
  the pattern's own samples repeated) and on the reproductions of issue 20;
- whole lines go through the normaliser, the line parser, the classifier and the text
  parser.

The bound is a ratio measured in this run (tests/pumps.py: the time on 4N characters over
the time on N, linear ~4, quadratic ~16, with a floor under which timer noise cannot
fail it), not a wall-clock limit.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import pytest

from forensics import grammar, kb, knowledge
from forensics.inputs.normalise import Normaliser
from forensics.parsers import terminals
from forensics.parsers.text import messages
from forensics.parsers.text.lines import LineParser
from tests.helpers import parse_text
from tests.pumps import Pump, linear, pumps

# --- which strings are regexes -------------------------------------------------------------
#
# A string's key path: tables by name, list items as [] ("message[].pattern"); an item
# of a list inside a list by its index ("kernels.normalisers[][0]").  `*` in a glob is any
# text.  Every path of a file must match one glob below, or
# test_every_string_of_the_data_files_is_classified fails: a new key is either a regex
# (checked here) or text, never overlooked.

REGEX = {
    "prefilter": ["identity.patterns[]", "identity.tag"],
    "cuda_error_forms": ["form[].pattern"],
    "cuda_errors": ["recognise.patterns[]"],
    "environment_facts": ["fact[].pattern"],
    "formats": ["format[].guard"],
    "messages": ["message[].pattern"],
    "noise": ["noise[].pattern"],
    "prefilter": ["identity.patterns[]", "identity.tag"],
    "processes": ["quoted_process[].pattern", "rank_hint[].pattern", "role[].pattern"],
    "redaction": ["rule[].pattern", "rule[].gate", "names.secret"],
    "signature": ["fault_class[].pattern", "kernels.normalisers[][0]", "surface.skip_files[]"],
    "surface_apis": ["api[].pattern", "skip.files[]", "skip.functions[]", "going_down.functions[]"],
    "wrappers": ["wrapper[].pattern"],
    # a known issue's environment conditions are regexes, except version ranges
    "known_issues/*": ["match.any[].surface_file", "match.any[].surface_function", "match.any[].origin_kernel",
                       "match.any[].message", "match.environment.*"],
}
TEXT = {
    "*": ["*samples[]*", "*.sample"],         # example lines: the test input of the patterns
    "cuda_error_forms": ["form[].id", "form[].library", "form[].triggers[]", "form[].api", "form[].error"],
    "cuda_errors": ["error[].*"],
    "cuda_exceptions": ["unknown.*", "exception[].*", "generation_flag[].*", "xid_sm_exception.*"],
    "environment_facts": ["fact[].key", "fact[].triggers[]", "fact[].type", "fact[].join"],
    "env_reports": ["report[].name", "report[].what", "report[].starts[]", "report[].keys.*", "packages.*",
                    "variables.prefixes[]"],
    "formats": ["format[].name", "format[].kind", "format[].grammar", "format[].reader", "format[].what",
                "format[].joins", "format[].levels.*"],
    "known_issues/*": ["id", "title", "status", "workaround", "does_not_prove", "references[]", "match.errors[]",
                       "match.failure_kinds[]", "match.phases[]", "match.any[].why", "match.any[].surface_api",
                       "match.any[].phase"],
    "messages": ["continuations.prefixes[].text", "continuations.prefixes[].native", "message[].id", "message[].kind", "message[].severity",
                 "message[].phase", "message[].triggers[]", "message[].environment.*", "message[].fields.*",
                 "message[].structured.*", "message[].constants.*"],
    "next_steps": ["step[].id", "step[].when", "step[].title", "step[].why", "step[].action", "step[].command",
                   "step[].engines[]", "step[].vllm_at_least"],
    "nccl": ["peer.words[]", "peer.results[]"],
    "flightrec": ["detect.*", "names.suffixes[]", "states.*", "frames.skip_files[]", "sizes.must_match[]"],
    "capture": ["snapshot.*", "step_target[].*", "collective_target[].*", "startup.*", "coredump.*"],
    "noise": ["noise[].id"],
    "phases": ["startup.frames[].function", "startup.frames[].file", "startup.messages[]",
               "startup.exceptions[]"],
    "prefilter": ["anchors.always[]", "anchors.skip_triggers[]"],
    "processes": ["quoted_process[].id", "role[].role", "relay_exceptions.*", "vllm_v0.markers[]", "launcher.files[]", "frame_process[].file",
                  "frame_process[].name"],
    "redaction": ["public.hosts[]", "rule[].kind", "rule[].replace", "rule[].allow", "rule[].check",
                  "rule[].triggers[]"],
    "signals": ["signal[].*", "watchdog.exceptions[]"],
    "signature": ["fault_class[].class", "kernels.normalisers[][1]"],
    "surface_apis": ["api[].api", "api[].what"],
    "wrappers": ["wrapper[].id", "wrapper[].what", "wrapper[].at", "wrapper[].decoder", "wrapper[].needs"],
    "xid": ["xid[].name", "xid[].meaning", "xid[].lean", "xid[].next"],
}
# How the code runs them, where it does not search: substituted (every match found:
# redact.py, names.py) or matched at a line's start (a format's guard: lines.py; the
# prefilter's storm tag: scan.py)
SUBSTITUTED = {"redaction:rule[].pattern", "signature:kernels.normalisers[][0]"}
MATCHED = {"formats:format[].guard", "prefilter:identity.tag"}
# compiled with re.MULTILINE by the code that uses them
MULTILINE = {"redaction:rule[].pattern", "processes:quoted_process[].pattern"}
SAMPLE_KEYS = ("text", "line", "sample")

# The shapes issue 20 reported, tried on every pattern: the text after a CUDA error
# padded with blanks, vLLM's logo blocks, a config dump's start repeated
ISSUE_20 = [
    Pump("RuntimeError: CUDA error: an illegal memory access was encountered", " ", "x"),
    Pump("RuntimeError: CUDA error: an illegal memory access was encountered", " ", ""),
    Pump("", "\u2588", ""),
    Pump("", "\u2580\u2584 ", "version"),
    Pump("", "args: Namespace(", ""),
    Pump("args: Namespace(", " ", ")x"),
]


def _data_files() -> list[str]:
    root = resources.files("forensics.data")
    names = sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))
    issues = sorted("known_issues/" + p.name[:-5] for p in root.joinpath("known_issues").iterdir()
                    if p.name.endswith(".toml"))
    return names + issues


@lru_cache(maxsize=None)
def _load(name: str) -> dict:
    return knowledge.tomllib.loads(resources.files("forensics.data").joinpath(f"{name}.toml")
                                   .read_text(encoding="utf-8"))


def _strings(value, path: str = "", in_list: bool = False, table=None):
    """(key path, string, the table that holds it) for every string of a data file."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else key, False, value)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]" if in_list else f"{path}[]", True, table)
    elif isinstance(value, str):
        yield path, value, table


def _glob(glob: str, text: str) -> bool:
    """``*`` is any text; everything else (the brackets of "[]" too) stands for itself."""
    return re.fullmatch(".*".join(map(re.escape, glob.split("*"))), text, re.S) is not None


def _kind(name: str, path: str) -> str | None:
    for kind, table in (("regex", REGEX), ("text", TEXT)):
        for file_glob, globs in table.items():
            if _glob(file_glob, name) and any(_glob(g, path) for g in globs):
                return kind
    return None


def _samples(table) -> list[str]:
    """The example lines kept beside a pattern (its table's samples)."""
    if not isinstance(table, dict):
        return []
    found = [table[k] for k in SAMPLE_KEYS if isinstance(table.get(k), str)]
    for item in table.get("samples", ()):
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            found.extend(item[k] for k in SAMPLE_KEYS if isinstance(item.get(k), str))
    return found


def _data_regexes() -> list[tuple[str, str, re.Pattern, list[str]]]:
    """(id, key, compiled as the code compiles it, samples) of every regex of the data files."""
    out = []
    seen: dict[str, int] = {}
    for name in _data_files():
        data = _load(name)
        for path, text, table in _strings(data):
            if _kind(name, path) != "regex":
                continue
            if name.startswith("known_issues/") and path.startswith("match.environment."):
                if path.rsplit(".", 1)[1] in kb.VERSION_KEYS:
                    continue                    # a version range, not a regex
            key = f"{'known_issues/*' if name.startswith('known_issues/') else name}:{path}"
            if name == "redaction":
                text = text.replace("{{secret}}", data["names"]["secret"])
            label = next((table[k] for k in ("id", "name", "kind") if isinstance(table, dict)
                          and isinstance(table.get(k), str)), None)
            ident = f"{name}.toml:{path}" + (f"({label})" if label else "")
            seen[ident] = seen.get(ident, 0) + 1
            if seen[ident] > 1:
                ident += f"#{seen[ident]}"
            out.append((ident, key, re.compile(text, re.MULTILINE if key in MULTILINE else 0), _samples(table)))
    return out


def _grammar_terminals() -> list[tuple[str, re.Pattern]]:
    """(id, compiled) of every terminal of every grammar, as lark's lexer compiles it - the
    ones its rules use and the ones its readers take by name (block guards, fast paths)."""
    return [(f"{name}.lark:{key}", pattern) for name in grammar.names()
            for key, pattern in terminals.every_terminal(name).items()]


DATA_REGEXES = _data_regexes()
TERMINALS = _grammar_terminals()


def _failures(run, pattern: re.Pattern, samples=(), enough: int = 2, extra=ISSUE_20) -> list[str]:
    """How ``run`` fails to stay linear on the pattern's pumps (the first few)."""
    found = []
    for pump in pumps(pattern.pattern, pattern.flags, samples, extra):
        why = linear(run, pump)
        if why:
            found.append(f"{pump}: {why}")
            if len(found) >= enough:            # a quadratic shows on many pumps; each costs seconds
                break
    return found


def _runner(key: str, pattern: re.Pattern):
    if key in SUBSTITUTED:
        def run(line):
            for _ in pattern.finditer(line):
                pass
        return run
    return pattern.match if key in MATCHED else pattern.search


def _param(ident, key, pattern, samples):
    return pytest.param(ident, key, pattern, samples, id=ident)


@pytest.mark.parametrize(("ident", "key", "pattern", "samples"), [_param(*item) for item in DATA_REGEXES])
def test_every_regex_of_the_data_files_is_linear(ident, key, pattern, samples):
    failures = _failures(_runner(key, pattern), pattern, samples)
    assert not failures, f"{ident} {pattern.pattern[:80]!r} is super-linear on:\n  " + "\n  ".join(failures)


@pytest.mark.parametrize(("ident", "pattern"), [pytest.param(i, p, id=i) for i, p in TERMINALS])
def test_every_terminal_of_the_grammars_is_linear(ident, pattern):
    # lark's lexer matches a terminal where a token may start; the rest of a long line follows
    failures = _failures(pattern.match, pattern)
    assert not failures, f"{ident} {pattern.pattern[:80]!r} is super-linear on:\n  " + "\n  ".join(failures)


def test_every_string_of_the_data_files_is_classified():
    unknown = {f"{name}.toml: {path}" for name in _data_files() for path, _text, _table in _strings(_load(name))
               if _kind(name, path) is None}
    assert not unknown, "classify these keys in REGEX or TEXT above:\n  " + "\n  ".join(sorted(unknown))


def test_the_regexes_are_all_found():
    per_file: dict[str, int] = {}
    for ident, _key, _pattern, _samples in DATA_REGEXES:
        name = ident.split(".toml:")[0]
        per_file[name] = per_file.get(name, 0) + 1
    for name in ("wrappers", "noise", "messages", "redaction", "formats", "cuda_error_forms", "processes",
                 "surface_apis", "signature", "cuda_errors", "known_issues/flashinfer-mnnvl-allreduce-ima"):
        assert per_file.get(name, 0) > 0, name
    assert len(DATA_REGEXES) > 250
    assert {n.split(".lark:")[0] for n, _p in TERMINALS} == set(grammar.names())
    assert len(TERMINALS) > 150
    # every glob of REGEX matches some key (a renamed key is not silently skipped)
    keys = {key for _i, key, _p, _samples in DATA_REGEXES}
    for name, globs in REGEX.items():
        for glob in globs:
            assert any(_glob(f"{name}:{glob}", k) for k in keys), f"{name}: {glob}"


@pytest.mark.parametrize("bad", [
    r"CUDA error: (?P<text>[^\n]+?)\s*(?:\\n|'|\"|$)",       # blanks after the message
    r"[\u2580-\u259f].*\bversion\s+(?P<v>\d+\.\d+\S*)\s*$",   # a line of logo blocks
    r"args: Namespace\((?P<config>.*)\)$",                     # the start repeated
    r"Using \[(?P<list>[^\]]*)\] all-reduce backends",         # an opening bracket repeated
    r"^[│┃║╎┆] ?(?P<body>.*?)\s*[│┃║╎┆]?\s*$",                 # cubic: blanks split every way
    r"\d+x",                                                   # a search from every digit
    r"a\s*\S*\s*$",                                            # two runs of blanks around a word
])
def test_the_pumps_find_the_quadratic_shapes_of_issue_20(bad):
    """The check itself: shapes that issue 20 reported (or the old forms of patterns fixed
    for it) fail it, with pumps derived from the pattern alone."""
    pattern = re.compile(bad)
    assert _failures(pattern.search, pattern, enough=1, extra=())


def test_the_pumps_find_a_lazy_run_that_rescans_blanks():
    key = re.compile(r"[A-Za-z0-9(\/][^:=\n]*?(?=[ \t]*:(?:[ \t]|$))")   # env_report.lark's KEY, before
    assert _failures(key.match, key, enough=1, extra=())


# --- patterns built from the catalogues ---------------------------------------------------

@pytest.mark.parametrize("pattern", [knowledge._message_texts(), messages._trigger_index()[0]],
                         ids=["cuda-messages", "message-triggers"])
def test_patterns_built_from_the_catalogues_are_linear(pattern):
    def run(line):
        for _ in pattern.finditer(line):
            pass
    failures = _failures(run, pattern)
    assert not failures, "\n".join(failures)


# --- whole lines through the stages -------------------------------------------------------
# bare runs, and runs behind the starts that lead the stages into their deeper patterns
# (a record header, a CUDA error, a traceback frame, a torch rank prefix, a launcher line
# that carries a rank field, vLLM's logo, a config dump, an environment report's key)

RECORD = "INFO 12-02 10:00:00 [a.py:1] "
PIPELINE_PUMPS = [Pump("", u, "") for u in ("7", " ", "\t", "a", "=", "[", ":", "a.", "\u2588")] + ISSUE_20 + [
    Pump(head, unit, tail) for head, unit, tail in (
        (RECORD + "x", " ", ""), ("RuntimeError: CUDA error: ", "a", ""), ("a.cu:1 cudaFoo(", " ", ""),
        ('  File "', " ", ""), ("[rank0]: ", "E ", ""),
        ("2025-05-26T10:46:35.402601Z  INFO text_generation_launcher: ", " ", "x"),
        (RECORD, "\u2580\u2584 ", "version 1.0 x"), (RECORD, "args: Namespace(", ""), ("PyTorch version", " ", "x"))]
LOG = b"(Worker_TP0 pid=11) ERROR 12-02 10:00:00 [a.py:1] RuntimeError: CUDA error: an illegal memory access " \
      b"was encountered\n"
STAGES = {
    "normaliser": lambda line: list(Normaliser().feed(1, line)),
    "line parser": lambda line: LineParser().parse(line),
    "message classifier": messages.classify,
    "CUDA error forms": knowledge.find_cuda_error,
}


@pytest.mark.parametrize("pump", PIPELINE_PUMPS, ids=str)
def test_the_normaliser_line_parser_and_classifier_are_linear(pump):
    parse_text(LOG)                                          # grammars built before timing
    failures = [f"{stage}: {why}" for stage, run in STAGES.items() if (why := linear(run, pump))]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("pump", list(dict.fromkeys(PIPELINE_PUMPS[::3] + PIPELINE_PUMPS[-3:])), ids=str)
def test_the_text_parser_is_linear_and_reads_on_after_a_long_line(pump):
    parse_text(LOG)
    why = linear(lambda line: parse_text(line.encode() + b"\n" + LOG, "long.log"), pump)
    assert why is None, why
    parsed = parse_text(pump.line(1 << 20).encode() + b"\n" + LOG, "long.log")
    assert 11 in [e.pid for e in parsed.events]              # the line after a 1 MiB line is still read
