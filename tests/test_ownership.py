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
