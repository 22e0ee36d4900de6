"""Each piece of knowledge has one owner (issue 25): the grammar owns every field of what
it parses, the catalogues (forensics/data/*.toml) own every table, and a binary layout
is declared once, by field name.  Read from the source with ast where it is about the
code's shape, so that a copy that creeps back in fails here, not in a review.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from forensics.parsers.coredumps import elf, gpu

PACKAGE = Path(__file__).resolve().parents[1] / "forensics"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# --- binary layouts: declared once ---------------------------------------------------------

@pytest.mark.parametrize("module", [elf, gpu], ids=lambda m: m.__name__)
def test_core_readers_unpack_only_through_declared_layouts(module):
    # no inline format string with a magic offset: struct is called by elf.Layout alone
    # (cpu.py's notes go through NOTE_LAYOUTS and note_field, its own declared table)
    path = Path(module.__file__)
    calls = [node for node in ast.walk(_tree(path)) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
             and node.func.value.id == "struct" and node.func.attr.startswith("unpack")]
    assert not calls, [f"{path.name}:{c.lineno}" for c in calls]


def test_the_gpu_tables_fit_their_documented_rows():
    for table in gpu.TABLES.values():
        row = table.row
        names = [f.name for f in row.fields]
        assert len(names) == len(set(names)), row.name
        values = row.unpack(bytes(row.size))
        always = [f.name for f in row.fields if f.since is None]
        assert all(values[name] is not None for name in always), row.name     # the base fields fit its size
    # a row an older driver wrote lacks what a later one appended: None, not garbage
    sm = gpu.TABLES[gpu.SHT_SM_TABLE].row.unpack(bytes(8))
    assert sm["smId"] == 0 and sm["exception"] is None and sm["errorPC"] is None


def test_a_layout_reads_fields_by_name_in_either_byte_order():
    layout = elf.Layout("pair", 12, (elf.Field("a", 0, "I"), elf.Field("b", 4, "2H"), elf.Field("c", 10, "H")))
    data = bytes.fromhex("01000000 0200 0300 ffff 0400")
    assert layout.unpack(data) == {"a": 1, "b": (2, 3), "c": 4}
    assert layout.with_order(False).unpack(bytes.fromhex("00000001 0002 0003 ffff 0004")) == {"a": 1, "b": (2, 3),
                                                                                             "c": 4}
    with pytest.raises(ValueError):
        elf.Layout("overlap", 8, (elf.Field("a", 0, "I"), elf.Field("b", 2, "I")))


def test_every_gpu_event_attribute_names_a_field_of_its_part():
    parts = {"grid": (gpu.CudaGrid,), "exception": (gpu.CudaException,), "device": (gpu.CudaDevice,),
             "where": (gpu.LaneFault, gpu.WarpFault, gpu.SmFault), "lane": (gpu.LaneFault,),
             "dump": (gpu.CudaCoreDump,), "derived": (gpu._Derived,)}
    for attr, part, name in gpu.EVENT_ATTRS:
        fields = {f.name for cls in parts[part] for f in dataclasses.fields(cls)}
        assert name in fields, f"{attr}: {part} has no field {name}"
    assert len({a for a, _p, _n in gpu.EVENT_ATTRS}) == len(gpu.EVENT_ATTRS)


def test_the_elf_reader_is_its_own_module():
    # both core readers import it; neither reaches into the other
    for path in (PACKAGE / "parsers" / "coredumps").glob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not (path.name == "gpu.py" and node.module.endswith("coredumps.cpu")), path.name
                assert not (path.name == "cpu.py" and node.module.endswith("coredumps.gpu")), path.name
    assert inspect.getmodule(gpu.ElfImage) is elf


# --- signals: one table ---------------------------------------------------------------------

def _signal_name(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("SIG") \
        and node.value[3:].isupper() and node.value[3:].isalpha()


def test_the_signals_catalogue_is_the_only_signals_table():
    # a mapping (or list) of signal names anywhere in the package is a second table: the
    # numbers, texts and names are data/signals.toml's, read through knowledge
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Dict):
                values = [v for v in (*node.keys, *node.values) if _signal_name(v)]
            elif isinstance(node, (ast.Set, ast.List, ast.Tuple)):
                values = [v for v in node.elts if _signal_name(v)]
            else:
                continue
            if len(values) >= 2:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, "signal tables outside data/signals.toml: " + ", ".join(found)


def test_the_signals_catalogue_is_whole():
    from forensics import knowledge
    table = knowledge.signal_table()
    assert [s.number for s in table] == list(range(1, 32))          # Linux's standard signals, each once
    assert len({s.name for s in table}) == len(table) and len({s.text for s in table}) == len(table)
    assert knowledge.signal_name(31) == "SIGSYS" and 31 in knowledge.crash_signals()    # no longer "signal 31"
    assert {s.name for s in table if s.faulthandler} == {"SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL"}
    assert knowledge.fault_address_signals() <= knowledge.crash_signals()
    assert knowledge.faulthandler_signal("Segmentation fault") == "SIGSEGV"
    assert knowledge.faulthandler_signal("Killed") is None        # faulthandler does not catch SIGKILL
    assert knowledge.signal_number("SIGTERM") == 15 and knowledge.signal_number("SIGNOPE") is None


@pytest.mark.parametrize(("module", "name", "flag"), [("forensics.story", "_CRASH_SIGNALS", "crash_signals"),
                                                      ("forensics.rules.failure", "_STOP_SIGNALS", "stop_signals")])
def test_the_stages_signal_sets_agree_with_the_catalogue(module, name, flag):
    # story.py and rules/failure.py still hold their sets of numbers (a one-line change
    # each to read knowledge.crash_signals() / stop_signals()); until then they must agree
    import importlib
    from forensics import knowledge
    copy = getattr(importlib.import_module(module), name, None)
    if copy is None:
        pytest.skip(f"{module} no longer keeps {name}")
    assert frozenset(copy) == getattr(knowledge, flag)()


# --- guards: the grammars' terminals --------------------------------------------------------

def _terminal_sources(name: str) -> dict[str, str]:
    """Each terminal's definition in grammars/<name>.lark, as written (continuation lines joined)."""
    import re
    from forensics import grammar
    out: dict[str, str] = {}
    current = None
    for line in grammar.grammar_text(name).splitlines():
        found = re.match(r"(_?[A-Z][A-Z0-9_]*)(?:\.\d+)?\s*:\s*(.*)", line)
        if found:
            current = found.group(1)
            out[current] = found.group(2)
        elif current and re.match(r"\s+\|", line):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


def _top_level_alternation(regex: str) -> bool:
    depth, in_class, escaped = 0, False, False
    for char in regex:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
    return False


def test_no_composite_terminal_takes_a_piece_with_a_bare_alternation():
    # lark joins a composite terminal's pieces as they are: a piece /a|b/ inside "X: P /c/"
    # becomes a|bc - the piece must group its alternatives, /(?:a|b)/
    import re
    from forensics import grammar
    found = []
    literal = re.compile(r'"(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)*/[imslux]*')
    for name in grammar.names():
        sources = _terminal_sources(name)
        for terminal, body in sources.items():
            for used in re.findall(r"\b_?[A-Z][A-Z0-9_]*\b", literal.sub(" ", body)):
                piece = sources.get(used, "").strip()
                if piece.startswith("/") and _top_level_alternation(piece[1:piece.rindex("/")]):
                    found.append(f"{name}.lark: {terminal} uses {used}")
    assert not found, found


# --- the grammar owns every field: no transformer re-parses a token -------------------------

# what a regex does to text; str has none of these methods
REGEX_METHODS = frozenset({"match", "fullmatch", "search", "findall", "finditer", "sub", "subn"})


def _parser_modules():
    import importlib
    import pkgutil
    import forensics.parsers
    for info in pkgutil.walk_packages(forensics.parsers.__path__, "forensics.parsers."):
        yield importlib.import_module(info.name)


def _transformers():
    from lark import Transformer
    for module in _parser_modules():
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Transformer) and obj.__module__ == module.__name__:
                yield module, obj


def _regex_calls(module, tree: ast.AST, seen: set[str]) -> list[str]:
    """Regex calls in ``tree`` and in the module's own functions it calls (transitively):
    ``re.<anything>(...)`` and ``<x>.match/search/...(...)`` on anything but a str literal."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id == "re":
                found.append(f"re.{func.attr} at line {node.lineno}")
            elif func.attr in REGEX_METHODS and not isinstance(func.value, ast.Constant):
                found.append(f".{func.attr}() at line {node.lineno}")
        elif isinstance(func, ast.Name) and func.id not in seen:
            helper = getattr(module, func.id, None)
            if inspect.isfunction(helper) and helper.__module__ == module.__name__:
                seen.add(func.id)
                source = inspect.getsource(helper)
                found += [f"{func.id}: {f}" for f in _regex_calls(module, ast.parse(_dedent(source)), seen)]
    return found


def _dedent(source: str) -> str:
    import textwrap
    return textwrap.dedent(source)


def _reparses(module, cls) -> list[str]:
    tree = ast.parse(_dedent(inspect.getsource(cls)))
    return _regex_calls(module, tree, set())


TRANSFORMERS = sorted(_transformers(), key=lambda mc: (mc[0].__name__, mc[1].__name__))


def test_the_walk_finds_every_transformer():
    names = {f"{m.__name__.rsplit('.', 1)[-1]}.{c.__name__}" for m, c in TRANSFORMERS}
    assert {"traceback._ToExceptions", "native._ToCrash", "text._ToReport", "cuda_gdb._ToLine", "pytest._ToFields",
            "launcher._ToSummary", "launcher._ToRecord", "stackdump._PySpy", "envreport._ToLine"} <= names, names


@pytest.mark.parametrize(("module", "cls"), TRANSFORMERS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_no_transformer_reparses_a_token_with_a_regex(module, cls):
    # the grammar splits a line into one token per field: a transformer reads the fields
    # by name, it does not take a coarse token apart again with a regex of its own
    assert not _reparses(module, cls), f"{cls.__name__} re-parses token text: {_reparses(module, cls)}"


@pytest.mark.parametrize(("module", "cls"), TRANSFORMERS, ids=lambda x: getattr(x, "__name__", str(x)))
def test_transformers_take_their_tokens_inline(module, cls):
    from lark.visitors import _VArgsWrapper
    methods = [v for k, v in vars(cls).items() if not k.startswith("_") and callable(v)]
    assert methods and all(isinstance(m, _VArgsWrapper) for m in methods), f"{cls.__name__}: v_args(inline=True)"


def test_the_walk_sees_a_regex_in_a_transformer_and_its_helpers(tmp_path, monkeypatch):
    import importlib
    (tmp_path / "planted_transformer.py").write_text('''
import re
from lark import Transformer
PATTERN = re.compile(r"(\\d+)")
def helper(text):
    return PATTERN.match(text)
class T(Transformer):
    def field(self, token):
        return helper(str(token))
    def other(self, token):
        return re.split(",", str(token))
''', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("planted_transformer")
    found = _reparses(module, module.T)
    assert any(f.startswith("helper: .match()") for f in found) and any(f.startswith("re.split") for f in found)


# --- knowledge in the catalogues ------------------------------------------------------------

def test_relay_exceptions_are_relay_kinds():
    from forensics import knowledge
    from forensics.events import RELAY, Kind
    relays = knowledge.relay_exceptions()
    assert {"ChildFailedError", "EngineDeadError", "RayTaskError", "KeyboardInterrupt"} <= set(relays)
    assert all(Kind(kind) in RELAY for kind in relays.values()), relays


def test_line_formats_say_their_levels_as_pythons():
    # a format's printed level names (glog's E, NCCL's WARN) -> Python's, in data/formats.toml;
    # each name is one its grammar's LEVEL terminal reads
    from forensics.parsers import terminals
    from forensics.parsers.formats import formats_of_kind
    python = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    for fmt in formats_of_kind("line"):
        assert set(fmt.levels.values()) <= python, fmt.name
        for printed in fmt.levels:
            assert terminals.terminal(fmt.grammar, "LEVEL").fullmatch(printed), (fmt.name, printed)
    glog = next(f for f in formats_of_kind("line") if f.name == "glog")
    assert glog.levels["F"] == "CRITICAL"


def test_exception_raised_from_is_read_in_one_place():
    # c10's throw site: the native crash grammar's raised_from rule, read alone by
    # parsers/text/raised.py for messages and raw lines; no module spells it as a regex
    import re
    from forensics.parsers.text import raised
    found = raised.find("CUDA error: an illegal memory access was encountered\n"
                        "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 "
                        "(most recent call first):")
    assert (found.function, found.file, found.line) == ("c10_cuda_check_implementation",
                                                         "/pytorch/c10/cuda/CUDAException.cpp", 43)
    assert raised.read("Exception raised from somewhere unknown").file is None
    spelled = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if re.search(r"re\.compile\([^)]*Exception raised from", p.read_text(encoding="utf-8"))]
    assert not spelled, spelled


def test_continuation_prefixes_are_only_in_the_catalogue():
    # torch's advice after an exception's message ("CUDA kernel errors might be ...") is
    # data/messages.toml's; the parsers ask knowledge for it
    from forensics import knowledge
    native = knowledge.native_continuations()
    assert native and set(native) <= set(knowledge.message_continuations())
    for path in (PACKAGE / "parsers").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not any(prefix in text for prefix in native if len(prefix) > 12), path.name
