"""The package's stage layering, read from the source with ast (nothing is imported).

The pipeline is inputs -> parsers -> events -> timeline -> stories -> rules -> verdict -> report
document -> renderers (forensics/case.py runs it; cli.py and api.py are thin shells).
Each stage may use the shared foundations (knowledge, events, grammar, names, inert) and
the stages before it, never one after it.  Imports made inside functions count (they are
dependencies all the same, merely deferred); imports under ``if TYPE_CHECKING:`` do not
(they never run).  Dynamic imports by name (the format registry's readers in
data/formats.toml, the reporters in report/__init__.py) are checked too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

PACKAGE = Path(__file__).resolve().parents[1] / "forensics"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    deferred: bool       # inside a function body: runs on first call, not at import


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path):
    """(target module, line, deferred) for every forensics import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = module in PACKAGES

    def targets(node):
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        if node.level:
            base = module.split(".") if is_pkg else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        # "from forensics.report import markdown" imports the module forensics.report.markdown
        out = []
        for alias in node.names:
            sub = f"{prefix}.{alias.name}"
            out.append(sub if sub in MODULES else prefix)
        return out

    def visit(node, deferred: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    yield from visit_one(sub, deferred)
                continue
            yield from visit_one(child, deferred)

    def visit_one(node, deferred: bool):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in targets(node):
                if target == "forensics" or target.startswith("forensics."):
                    yield target, node.lineno, deferred
            return
        inner = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from visit(node, inner)

    yield from visit(tree, False)


def _graph() -> list[Edge]:
    edges = []
    for module, path in MODULES.items():
        for target, line, deferred in _imports(module, path):
            edges.append(Edge(module, target, line, deferred))
    return edges


EDGES = _graph()


def _dynamic_edges() -> list[Edge]:
    """Imports made by name: the registry's readers and the reporters."""
    edges = []
    formats = tomllib.loads((PACKAGE / "data" / "formats.toml").read_text(encoding="utf-8"))
    for entry in formats["format"]:
        if entry.get("reader"):
            edges.append(Edge("forensics.parsers.registry", entry["reader"].partition(":")[0], 0, True))
    reporters = (PACKAGE / "report" / "__init__.py").read_text(encoding="utf-8")
    for module in re.findall(r'"(forensics\.report\.\w+)"', reporters):
        edges.append(Edge("forensics.report", module, 0, True))
    return edges


ALL_EDGES = EDGES + _dynamic_edges()


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _violations(sources: tuple[str, ...], forbidden: tuple[str, ...], edges=ALL_EDGES) -> list[str]:
    return [f"{e.source} imports {e.target} (line {e.line})" for e in edges
            if _in(e.source, *sources) and _in(e.target, *forbidden)]


def _cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for e in edges:
        if e.target in MODULES and e.target != e.source:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


# --- the graph itself ------------------------------------------------------------------

def test_the_graph_is_read():
    """The reader must see what is there: these imports exist (so an empty or broken
    graph cannot make every layering test pass)."""
    assert len(MODULES) > 40
    have = {(e.source, e.target) for e in EDGES}
    for edge in (("forensics.case", "forensics.rules"), ("forensics.case", "forensics.parsers.registry"),
                 ("forensics.rules.base", "forensics.verdict"), ("forensics.report.markdown", "forensics.inert"),
                 ("forensics.cli", "forensics.case")):
        assert edge in have, edge
    # the TYPE_CHECKING import of Case in the report document is not a dependency
    assert ("forensics.report.document", "forensics.case") not in have
    assert ("forensics.report.sections", "forensics.case") not in have
    # a deferred import is seen and marked
    assert any(e.source == "forensics.cli" and e.target == "forensics.case" and e.deferred for e in EDGES)


def test_the_cycle_finder_finds_cycles():
    fake = [Edge("forensics.events", "forensics.verdict", 1, False), Edge("forensics.verdict", "forensics.events", 1, False)]
    assert _cycles(fake) == [["forensics.events", "forensics.verdict"]]


def test_every_forensics_import_names_an_existing_module():
    """(forensics/inputs/archives.py once imported forensics.sources, which does not
    exist: every archive input failed with ModuleNotFoundError.)"""
    missing = [f"{e.source} imports {e.target} (line {e.line})" for e in ALL_EDGES if e.target not in MODULES]
    assert not missing, missing


def test_no_import_cycles_at_import_time():
    cycles = _cycles([e for e in EDGES if not e.deferred])
    assert not cycles, cycles


def stage_of(module: str) -> str:
    """The stage a module belongs to: its subpackage (inputs, parsers, rules, report) or
    the module itself."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and module in PACKAGES):
        return ".".join(parts[:2])
    return module


def _stage_cycles(edges) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.target in MODULES and stage_of(e.source) != stage_of(e.target):
            graph.setdefault(stage_of(e.source), set()).add(stage_of(e.target))
    cycles, done = [], set()

    def walk(node: str, path: list[str]) -> None:
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            walk(nxt, path + [node])
        done.add(node)

    for node in sorted(graph):
        walk(node, [])
    return cycles


def test_stage_of():
    assert stage_of("forensics.parsers.text.stream") == "forensics.parsers"
    assert stage_of("forensics.parsers") == "forensics.parsers"
    assert stage_of("forensics.report.document") == "forensics.report"
    assert stage_of("forensics.case") == "forensics.case"
    assert _stage_cycles([Edge("forensics.rules.base", "forensics.case", 1, True),
                          Edge("forensics.case", "forensics.rules", 1, False)])


def test_no_module_cycle_even_counting_deferred_imports():
    """Deferred imports break cycles at run time but still tie modules together: apart
    from the package facade (forensics/__init__.py, whose analyze() defers to api.py and
    whose __version__ every layer may read), no two modules import each other, even
    counting the imports inside functions and the readers the registry imports by name
    (the walk in inputs/discover.py uses sources and archives, neither of which imports the
    other; the text reader asks parsers/blocks.py, not the registry, which block starts)."""
    edges = [e for e in ALL_EDGES if e.source != "forensics" and e.target != "forensics"]
    cycles = _cycles(edges)
    assert not cycles, cycles


def test_no_cycle_between_stages_even_counting_deferred_imports():
    """Between stages, likewise: apart from the package facade, the stages form no
    cycle, even counting the imports by name."""
    edges = [e for e in ALL_EDGES if e.source != "forensics" and e.target != "forensics"]
    cycles = _stage_cycles(edges)
    assert not cycles, cycles


# --- the stages --------------------------------------------------------------------------

SHELLS = ("forensics.cli", "forensics.api", "forensics.__main__", "forensics.compare")
STAGES_AFTER_PARSING = ("forensics.timeline", "forensics.collectives", "forensics.story", "forensics.rules",
                        "forensics.verdict", "forensics.case", "forensics.report", "forensics.redact", "forensics.engines",
                        "forensics.kb")


def test_inputs_use_only_the_knowledge_catalogues():
    """Finding, sniffing, decompressing and normalising inputs knows nothing about the
    formats' meaning: no parser, rule, report or verdict."""
    bad = _violations(("forensics.inputs",), ("forensics.parsers", "forensics.events", "forensics.grammar",
                                              *STAGES_AFTER_PARSING, *SHELLS))
    assert not bad, bad


def test_parsers_do_not_reach_into_later_stages():
    bad = _violations(("forensics.parsers",), (*STAGES_AFTER_PARSING, *SHELLS))
    assert not bad, bad


def test_the_timeline_sits_between_events_and_rules():
    bad = _violations(("forensics.timeline",), ("forensics.inputs", "forensics.parsers", "forensics.story",
                                                "forensics.rules",
                                                "forensics.verdict", "forensics.case", "forensics.report",
                                                "forensics.redact", *SHELLS))
    assert not bad, bad


def test_stories_sit_between_the_timeline_and_the_rules():
    """Stories read events and the process table; no rule, verdict, report or shell."""
    bad = _violations(("forensics.story",), ("forensics.inputs", "forensics.parsers", "forensics.rules",
                                             "forensics.verdict", "forensics.case", "forensics.report",
                                             "forensics.redact", *SHELLS))
    assert not bad, bad


def test_the_collectives_line_up_reads_events_only():
    """forensics/collectives.py lines the Flight Recorder dumps up from their events, for
    the stories: it knows the events and the catalogues, no parser (its records come as
    events), no process table, no rule."""
    bad = [f"{e.source} imports {e.target}" for e in ALL_EDGES
           if e.source == "forensics.collectives" and e.target not in ("forensics.events", "forensics.knowledge")]
    assert not bad, bad
    assert ("forensics.story", "forensics.collectives") in {(e.source, e.target) for e in EDGES}


def test_rules_read_evidence_and_write_the_verdict_only():
    bad = _violations(("forensics.rules",), ("forensics.inputs", "forensics.parsers", "forensics.case",
                                             "forensics.report", "forensics.redact", "forensics.engines", *SHELLS))
    assert not bad, bad


def test_the_verdict_is_a_leaf_of_typed_values():
    bad = [f"{e.source} imports {e.target}" for e in ALL_EDGES
           if e.source == "forensics.verdict" and e.target != "forensics.knowledge"]
    assert not bad, bad


def test_foundations_import_nothing_above_them():
    foundations = ("forensics.events", "forensics.knowledge", "forensics.grammar", "forensics.names",
                   "forensics.inert", "forensics.data")
    allowed = ("forensics.knowledge", "forensics.data")
    bad = [f"{e.source} imports {e.target}" for e in ALL_EDGES
           if e.source in foundations and not _in(e.target, *allowed)]
    assert not bad, bad


def test_event_columns_know_only_events():
    """forensics/columns.py is the events' other form: it imports the events module and
    nothing else of the package (parsers, the timeline and the case use it)."""
    bad = [f"{e.source} imports {e.target}" for e in ALL_EDGES
           if e.source == "forensics.columns" and e.target != "forensics.events"]
    assert not bad, bad
    assert any(e.source == "forensics.columns" for e in ALL_EDGES)


def test_the_report_document_reads_the_verdict_not_the_rules():
    """document.py and its sections (sections.py, on base.py) build the report from the
    Case and its Verdict; they never run or import a rule, a parser or an input reader
    (the Case they read is a type only)."""
    bad = _violations(("forensics.report.document", "forensics.report.sections", "forensics.report.base"), ("forensics.rules", "forensics.parsers", "forensics.inputs",
                                                       "forensics.timeline", "forensics.case", "forensics.engines",
                                                       "forensics.kb", *SHELLS))
    assert not bad, bad


RENDERERS = ("forensics.report.terminal", "forensics.report.markdown", "forensics.report.html",
             "forensics.report.json")


def test_renderers_only_render_the_document():
    """Terminal, Markdown, HTML and JSON turn the document into output: they import no
    verdict type, no rule, no case, no event (nothing recomputed from the analysis)."""
    present = [m for m in RENDERERS if m in MODULES]
    assert present == list(RENDERERS)
    bad = _violations(RENDERERS, ("forensics.verdict", "forensics.rules", "forensics.case", "forensics.timeline",
                                  "forensics.parsers", "forensics.inputs", "forensics.events", "forensics.engines",
                                  "forensics.kb", *SHELLS))
    assert not bad, bad


def test_redaction_works_on_documents_not_on_the_analysis():
    bad = _violations(("forensics.redact",), ("forensics.rules", "forensics.case", "forensics.parsers",
                                              "forensics.inputs", "forensics.verdict", "forensics.report", *SHELLS))
    assert not bad, bad


def test_the_pipeline_does_not_render():
    """case.py runs the stages and returns a Case; it renders nothing (api.py and cli.py
    do), and nothing but the shells drives the pipeline."""
    assert not _violations(("forensics.case",), ("forensics.report", "forensics.redact", "forensics.inert", *SHELLS))
    drivers = sorted({e.source for e in ALL_EDGES if e.target == "forensics.case"} - {"forensics"})
    assert drivers == ["forensics.api", "forensics.cli", "forensics.compare"], drivers


def test_only_the_entry_points_import_the_shells():
    importers = {e.target: set() for e in ALL_EDGES}
    for e in ALL_EDGES:
        importers[e.target].add(e.source)
    assert importers.get("forensics.cli", set()) <= {"forensics.__main__"}
    assert importers.get("forensics.api", set()) <= {"forensics"}


def test_dynamic_imports_stay_in_their_layer():
    dynamic = _dynamic_edges()
    readers = [e.target for e in dynamic if e.source == "forensics.parsers.registry"]
    reporters = [e.target for e in dynamic if e.source == "forensics.report"]
    assert readers and all(_in(t, "forensics.parsers") and t in MODULES for t in readers), readers
    assert sorted(reporters) == sorted(RENDERERS)


def test_the_capture_plugin_stands_alone():
    """forensics/capture/ is no analysis stage: it runs inside vLLM's workers (a
    ``vllm.general_plugins`` entry point), so it imports nothing of forensics outside
    itself (not even the catalogues' loader: it reads data/capture.toml by path), and no
    stage imports it (its snapshots reach the analysis as files, read by
    parsers/capture.py)."""
    assert any(_in(m, "forensics.capture") for m in MODULES)
    bad = [f"{e.source} imports {e.target}" for e in ALL_EDGES
           if _in(e.source, "forensics.capture") and not _in(e.target, "forensics.capture")]
    assert not bad, bad
    importers = [f"{e.source} imports {e.target}" for e in ALL_EDGES
                 if _in(e.target, "forensics.capture") and not _in(e.source, "forensics.capture")]
    assert not importers, importers
