"""Every third-party package the library imports at module level is a declared, bounded dependency."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llama_index_ext_causalrag"
# import name -> distribution, where they differ
DISTRIBUTION = {"llama_index": "llama-index-core"}


def _module_level_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(f.read_text(encoding="utf-8")).body:  # not inside functions or try blocks
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", PACKAGE.name):
                    found.setdefault(top, set()).add(str(f.relative_to(ROOT)))
    return found


def _declared() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    out = {}
    for spec in deps:
        name = re.match(r"[A-Za-z0-9_.\-]+", spec).group(0)
        out[re.sub(r"[-_.]+", "-", name).lower()] = spec
    return out


def test_module_level_imports_are_declared_with_bounded_pins():
    declared = _declared()
    imports = _module_level_imports()
    assert "tenacity" in imports  # the LLM layer's retry policy
    for top, files in imports.items():
        dist = DISTRIBUTION.get(top, top).replace("_", "-").lower()
        assert dist in declared, f"{top} (imported by {sorted(files)[:3]}) is not in pyproject dependencies"
        assert ">=" in declared[dist] and "<" in declared[dist].replace("<=", ""), declared[dist]
