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
    "text": 0,
    "choices": 0,
    "validation": 0,
    "fusion": 0,
    "presets": 0,
    "version": 0,
    "explain": 0,  # stage recording and the page: the methods and causal_graph use them
    "llm": 1,
    "embeddings": 1,
    "storage": 2,
    "experts": 3,
    "pipeline": 4,
    "query_engine": 4,
    "chat_engine": 4,
    "contract": 5,
    "multigranularity": 6,
    "standards": 6,
    "hypothesis": 6,
    "causal_graph": 7,
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
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


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
        f"{m} -> {d}"
        for m, deps in graph.items()
        for d in deps
        if _layer(d) > _layer(m) and not (d.count(".") == 1 and m.startswith(d + "."))
    )
    assert up == []


def test_every_top_level_module_has_a_layer_and_the_root_is_small():
    tops = {
        p.stem if p.is_file() else p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert tops <= set(LAYERS), sorted(tops - set(LAYERS))
    root_modules = [p for p in ROOT.glob("*.py")]
    assert len(root_modules) <= 10, sorted(p.name for p in root_modules)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The storage folder's own floors (docs/layout.md): the driver protocol and store-neutral pieces at the
# bottom, one folder per store above them (never importing another store's folder), the registration in
# storage/__init__.py above those, the generic code that asks drivers (rows, locks, journal, commits) on top.
STORAGE = f"{PKG}.storage"
STORAGE_FLOORS = {
    "drivers": 0,
    "ann": 0,
    "terms": 0,
    "row_ids": 0,
    "filters": 0,
    "persistence": 0,
    "index_backend": 0,
    "unit_docstore": 0,
    "update_plan": 0,
    "pg": 1,
    "milvus": 1,
    "": 2,  # storage/__init__.py: one registration line a store
    "stores": 3,
    "writelock": 3,
    "journal": 3,
    "kvstate": 3,
    "sync": 3,
}
STORE_FOLDERS = ("pg", "milvus")
# modules outside storage/ that name a store's folder: none (methods reach stores through their drivers)
NAMES_A_STORE_TODAY: Set[str] = set()


def _storage_part(module: str) -> str:
    rest = module[len(STORAGE) :].lstrip(".")
    return rest.split(".")[0]


def _across_store_folders(graph: Dict[str, Set[str]]) -> List[str]:
    """``module -> import`` pairs where one store's folder imports another's."""
    return sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        for d in deps
        if _storage_part(m) in STORE_FOLDERS
        and _storage_part(d) in STORE_FOLDERS
        and _storage_part(m) != _storage_part(d)
    )


def test_the_storage_folder_keeps_its_floors_and_store_folders_never_import_each_other():
    graph = _graph()
    inside = {
        m: {d for d in deps if d == STORAGE or d.startswith(STORAGE + ".")}
        for m, deps in graph.items()
        if m == STORAGE or m.startswith(STORAGE + ".")
    }
    assert {_storage_part(m) for m in inside} <= set(STORAGE_FLOORS), sorted(
        {_storage_part(m) for m in inside} - set(STORAGE_FLOORS)
    )
    up = sorted(
        f"{m} -> {d}"
        for m, deps in inside.items()
        for d in deps
        if STORAGE_FLOORS[_storage_part(d)] > STORAGE_FLOORS[_storage_part(m)]
    )
    assert up == []
    assert _across_store_folders(inside) == []


def test_no_module_outside_a_store_folder_imports_it_but_the_registration():
    graph = _graph()
    naming = {
        m
        for m, deps in graph.items()
        if not (m.startswith(STORAGE + ".pg") or m.startswith(STORAGE + ".milvus"))
        and m != STORAGE
        and any(d.startswith(f"{STORAGE}.{f}") for f in STORE_FOLDERS for d in deps)
    }
    assert naming <= NAMES_A_STORE_TODAY, sorted(naming - NAMES_A_STORE_TODAY)


def test_the_floor_check_sees_a_store_folder_importing_another():
    graph = {f"{STORAGE}.milvus.served": {f"{STORAGE}.pg.lists", f"{STORAGE}.milvus.filters"}}
    assert _across_store_folders(graph) == [f"{STORAGE}.milvus.served -> {STORAGE}.pg.lists"]
