"""Every ```python block of README.md and docs/ runs as written, with the real defaults.

Blocks of one file run in order in one fresh interpreter (as a reader pastes them), in an empty
folder, with no API key in the environment and nothing substituted: the embedder is the packaged
offline default and no LLM is configured unless a block configures one. A block whose first line
is ``# needs: ...`` (a hosted service, e.g. ``# needs: OPENAI_API_KEY``) is the only kind skipped.
Files whose blocks use PostgreSQL are marked ``postgres``: their blocks start the server the
``postgres`` extra ships, as the docs show; files whose blocks use Milvus (a Milvus Lite file)
are marked ``milvus``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).with_name("_snippet_runner.py")
FILES = [
    p
    for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if "```python" in p.read_text(encoding="utf-8")
]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NEEDS = re.compile(r"^# needs: \S")
MIN_RUN_BLOCKS = 30


def python_blocks(path: Path) -> List[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def runnable_blocks(path: Path) -> List[Tuple[str, str]]:
    """``(label, code)`` of the blocks that run here: all but those starting ``# needs: ...``."""
    name = str(path.relative_to(ROOT))
    return [
        (f"{name}[python block {i + 1}]", code) for i, code in enumerate(python_blocks(path)) if not NEEDS.match(code)
    ]


def _uses_postgres(path: Path) -> bool:
    return any("postgres" in code for _, code in runnable_blocks(path))


def _uses_milvus(path: Path) -> bool:
    return any("milvus" in code.lower() for _, code in runnable_blocks(path))


def _marks(path: Path) -> list:
    return ([pytest.mark.postgres] if _uses_postgres(path) else []) + (
        [pytest.mark.milvus] if _uses_milvus(path) else []
    )


def _user_env() -> dict:
    """This environment without API keys or anything pointing the library at test doubles; the
    library and the bench are this tree's (what a user who installed this clone imports), not
    whichever copy is installed: a run of one checkout imported another, mid-merge, and failed."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.endswith("_API_KEY") or k.startswith("OPENAI_") or k == "PYTHONPATH")
    }
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}


@pytest.mark.parametrize("path", [pytest.param(p, marks=_marks(p), id=str(p.relative_to(ROOT))) for p in FILES])
def test_python_snippets_run(path: Path, tmp_path):
    blocks = runnable_blocks(path)
    if not blocks:
        pytest.skip(f"{path.name}: every python block needs a hosted service")
    done = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(blocks),
        cwd=tmp_path,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    ran = [line[4:] for line in done.stdout.splitlines() if line.startswith("ran ")]
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert ran == [label for label, _ in blocks]


def test_snippets_that_run_are_most_of_them():
    total = sum(len(python_blocks(p)) for p in FILES)
    run = sum(len(runnable_blocks(p)) for p in FILES)
    assert run >= MIN_RUN_BLOCKS, (run, total)
    for p in FILES:  # a skipped block says what it needs on its first line, nothing else skips
        for code in python_blocks(p):
            if "needs:" in code.split("\n", 1)[0]:
                assert NEEDS.match(code), (p.name, code.split("\n", 1)[0])


def test_no_block_sets_a_hosted_model_globally():
    """A block that sets ``Settings.llm``/``Settings.embed_model`` to a hosted model is marked ``# needs:``,
    so the blocks after it never call a hosted model by accident."""
    for p in FILES:
        for code in python_blocks(p):
            if re.search(r"Settings\.(llm|embed_model)\s*=", code) and re.search(r"OpenAI|Anthropic|Cohere", code):
                assert NEEDS.match(code), (p.name, code[:200])


def test_readme_has_snippets_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert len(python_blocks(ROOT / "README.md")) >= 5
    assert "METHODS" not in text and "../shared" not in text and "/work/" not in text
