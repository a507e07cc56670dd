"""Every ```python block of README.md and docs/*.md runs as written.

Blocks of one file run in order in one namespace (as a reader pastes them), in a temporary
folder, offline: ``Settings.embed_model`` is a hashing embedder and ``Settings.llm`` a scripted
LLM, put back after every block (a block may set its own, e.g. ``OpenAI(...)``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core import Settings

from fakes import HashEmbedding, ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def _offline_settings() -> None:
    Settings.embed_model = HashEmbedding()
    Settings.llm = ScriptedLLM(lambda prompt, i: "yes")


@pytest.fixture
def restore_settings():
    saved = (getattr(Settings, "_llm", None), getattr(Settings, "_embed_model", None))
    yield
    Settings._llm, Settings._embed_model = saved


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_python_snippets_run(path: Path, tmp_path, monkeypatch, restore_settings):
    blocks = python_blocks(path)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__snippet__"}
    for i, code in enumerate(blocks):
        _offline_settings()
        try:
            exec(compile(code, f"{path.name}[python block {i + 1}]", "exec"), namespace)
        except Exception as e:  # name the block, keep the traceback
            raise AssertionError(f"{path.relative_to(ROOT)} python block {i + 1} failed: {e!r}\n{code}") from e


def test_readme_has_snippets_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert len(python_blocks(ROOT / "README.md")) >= 5
    assert "METHODS" not in text and "../shared" not in text and "/work/" not in text
