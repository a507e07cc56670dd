"""The library never imports the benchmark; the benchmark finds methods through entry points."""

import importlib
import pkgutil
import subprocess
import sys

import llama_index_ext_causalrag


def _library_modules():
    yield "llama_index_ext_causalrag"
    for m in pkgutil.walk_packages(llama_index_ext_causalrag.__path__, "llama_index_ext_causalrag."):
        yield m.name


def test_importing_the_library_loads_no_benchmark_module():
    names = list(_library_modules())
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}:\n"
        "    importlib.import_module(n)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'causalrag_bench' or m.endswith('.bench'))\n"
        "print(repr(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(names) > 20
    assert out.stdout.strip() == "[]", out.stdout


def test_no_library_module_is_named_like_the_benchmark():
    assert not [n for n in _library_modules() if n.rsplit(".", 1)[-1] in {"bench", "eval", "cli", "loaders"}]


def test_bench_registry_is_filled_from_entry_points():
    from importlib.metadata import entry_points

    from causalrag_bench.registry import ENTRY_POINT_GROUP, available

    eps = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert {"baselines", "umg", "standards", "causalrag2", "hcqr"} <= eps
    names = available()
    assert {"dense", "bm25", "rrf", "umgp", "standards", "causalrag2", "hcqr"} <= set(names)
    assert importlib.import_module("causalrag_bench.umg").__name__ in sys.modules
