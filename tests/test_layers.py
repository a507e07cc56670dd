"""The package's layers (docs/layout.md): no import cycle anywhere, imports point down, a small root."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PKG = "llama_index_ext_causalrag"
ROOT = Path(__file__).resolve().parents[1] / PKG

# lower rank = lower layer; a module may import its own layer and the ones below. A dotted key
# ("explain.html") ranks one module apart from the rest of its subpackage (longest key wins).
LAYERS = {
    "text": 0, "validation": 0, "fusion": 0, "presets": 0, "version": 0,
    "explain": 0,  # stage recording and the page: the methods and causal_graph use them
    "llm": 1, "embeddings": 1,
    "storage": 2,
    "experts": 3,
    "pipeline": 4, "query_engine": 4, "chat_engine": 4, "contract": 5,
    "multigranularity": 6, "standards": 6, "hypothesis": 6, "causal_graph": 7,
    "__init__": 8,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: Set[str]) -> Set[str]:
    """Package modules ``path`` imports anywhere (functions included), except under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(), str(path))
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    found: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PKG))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PKG) and node.level == 0:
            for a in node.names:  # "from pkg.sub import module" imports the module
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return {m for m in found if m in modules}


def _graph() -> Dict[str, Set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    return {_module_name(f): _imports(f, modules) - {_module_name(f)} for f in files}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_imports_its_parent_only(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    # a subpackage's __init__ re-exports its modules; importing the package is importing its __init__
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYERS["__init__"]
    key = next(".".join(parts[1:i]) for i in range(len(parts), 1, -1) if ".".join(parts[1:i]) in LAYERS)
    return LAYERS[key]


def test_no_import_cycle_in_the_library():
    assert _cycles(_graph()) == []


def test_imports_point_down_the_layers():
    graph = _graph()
    up = sorted(
        f"{m} -> {d}" for m, deps in graph.items() for d in deps
        if _layer(d) > _layer(m) and not (d.count(".") == 1 and m.startswith(d + "."))
    )
    assert up == []


def test_every_top_level_module_has_a_layer_and_the_root_is_small():
    tops = {p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert tops <= set(LAYERS), sorted(tops - set(LAYERS))
    root_modules = [p for p in ROOT.glob("*.py")]
    assert len(root_modules) <= 10, sorted(p.name for p in root_modules)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
