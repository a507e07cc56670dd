"""Every ```python snippet of docs/llm.md runs offline with a scripted Settings.llm and MockEmbedding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.embeddings import MockEmbedding

from fakes import ScriptedLLM
from llama_index_ext_causalrag.causal_graph.extract import OfflineEntityExtractor

DOC = Path(__file__).resolve().parent.parent / "docs" / "llm.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
_FENCED = re.compile(r"<<<DATA\n(.*?)\nDATA>>>", re.S)


def any_step(prompt: str, i: int) -> str:
    data = "\n".join(_FENCED.findall(prompt))
    if prompt.startswith("Extract the key entities"):
        ex = OfflineEntityExtractor().extract_text("u", data)
        return json.dumps(
            {
                "entities": [{"name": e.name} for e in ex.entities],
                "relations": [{"source": r.source, "target": r.target} for r in ex.relations],
            }
        )
    if "community of a knowledge graph" in prompt:
        return json.dumps({"title": "A topic", "summary": "What it is about."})
    if "Two topics" in prompt:
        return "no - unrelated"
    return "NOT_USEFUL"


@pytest.fixture
def offline_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old_llm, old_embed = Settings._llm, Settings._embed_model
    Settings.llm = ScriptedLLM(any_step)
    Settings.embed_model = MockEmbedding(embed_dim=8)
    yield
    Settings._llm, Settings._embed_model = old_llm, old_embed


def test_the_doc_has_snippets():
    assert len(SNIPPETS) >= 5


@pytest.mark.parametrize("k", range(len(SNIPPETS)))
def test_doc_snippet_runs(k, offline_settings, capsys):
    exec(compile(SNIPPETS[k], f"docs/llm.md snippet {k + 1}", "exec"), {"__name__": "__doc_snippet__"})
