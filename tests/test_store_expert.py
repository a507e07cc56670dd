"""VectorStoreExpert: same top-k and scores as DenseExpert, on SimpleVectorStore and on PGVectorStore."""

import asyncio

import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters, SimpleVectorStore

from llama_index_ext_causalrag.experts import DenseExpert, VectorStoreExpert, add_nodes_to_vector_store
from llama_index_ext_causalrag.text.provenance import get_provenance
from store_helpers import RandomEmbedding, pg_vector_store

N, DIM, K = 80, 32, 8
QUERIES = [f"query number {i} about topic {i % 7}" for i in range(20)]


def make_nodes():
    return [
        TextNode(
            id_=f"n{i:03d}",
            text=f"node {i} says something about topic {i % 7}",
            metadata={"umg_granularity": 2 if i % 2 else 4, "title": f"t{i % 5}"},
        )
        for i in range(N)
    ]


@pytest.fixture(scope="module")
def corpus():
    nodes = make_nodes()
    model = RandomEmbedding(dim=DIM)
    emb = np.asarray(model.get_text_embedding_batch([n.text for n in nodes]), dtype=np.float32)
    return nodes, emb, model


def simple_store(nodes, emb):
    store = SimpleVectorStore()
    add_nodes_to_vector_store(store, nodes, emb, batch_size=7)
    ds = SimpleDocumentStore()
    ds.add_documents(nodes)
    return store, ds


def g_filter(g):
    return MetadataFilters(filters=[MetadataFilter(key="umg_granularity", value=g)])


def assert_same(expert, dense, queries=QUERIES):
    for q in queries:
        got, want = expert.retrieve(q), dense.retrieve(q)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in want], q
        np.testing.assert_allclose([n.score for n in got], [n.score for n in want], atol=1e-5)


def test_is_a_retriever_with_provenance(corpus):
    nodes, emb, model = corpus
    store, ds = simple_store(nodes, emb)
    expert = VectorStoreExpert(store, model, similarity_top_k=K, docstore=ds, name="dense@x")
    assert isinstance(expert, BaseRetriever)
    top = expert.retrieve(QUERIES[0])
    assert len(top) == K
    assert get_provenance(top[0])["expert"] == "dense@x"


def test_simple_store_equals_dense_expert(corpus):
    nodes, emb, model = corpus
    store, ds = simple_store(nodes, emb)
    assert_same(
        VectorStoreExpert(store, model, similarity_top_k=K, docstore=ds),
        DenseExpert(nodes, embed_model=model, embeddings=emb, similarity_top_k=K),
    )


def test_simple_store_filter_equals_dense_expert_on_that_granularity(corpus):
    nodes, emb, model = corpus
    store, ds = simple_store(nodes, emb)
    idx = [i for i, n in enumerate(nodes) if n.metadata["umg_granularity"] == 4]
    dense = DenseExpert([nodes[i] for i in idx], embed_model=model, embeddings=emb[idx], similarity_top_k=K)
    assert_same(VectorStoreExpert(store, model, similarity_top_k=K, filters=g_filter(4), docstore=ds), dense)


def test_aretrieve_equals_retrieve(corpus):
    nodes, emb, model = corpus
    store, ds = simple_store(nodes, emb)
    expert = VectorStoreExpert(store, model, similarity_top_k=K, docstore=ds)
    for q in QUERIES[:5]:
        a = asyncio.run(expert.aretrieve(q))
        assert [(n.node.node_id, n.score) for n in a] == [(n.node.node_id, n.score) for n in expert.retrieve(q)]


def test_writer_batches_keeps_metadata_and_leaves_input_nodes_alone(corpus, monkeypatch):
    nodes, emb, _ = corpus
    calls = []
    orig = SimpleVectorStore.add
    monkeypatch.setattr(
        SimpleVectorStore, "add", lambda self, batch, **kw: calls.append(len(batch)) or orig(self, batch)
    )
    store = SimpleVectorStore()
    ids = add_nodes_to_vector_store(store, nodes, emb, batch_size=30)
    assert calls == [30, 30, 20] and ids == [n.node_id for n in nodes]
    assert all(n.embedding is None for n in nodes)
    assert store.data.metadata_dict["n003"]["umg_granularity"] == 2
    np.testing.assert_allclose(store.get("n003"), emb[3], rtol=1e-6)


def test_store_without_text_needs_a_docstore():
    with pytest.raises(ValueError, match="docstore"):
        VectorStoreExpert(SimpleVectorStore(), RandomEmbedding())


def test_writer_rejects_missing_embeddings_and_wrong_dimension(corpus):
    nodes, emb, _ = corpus
    with pytest.raises(ValueError, match="no embedding"):
        add_nodes_to_vector_store(SimpleVectorStore(), nodes)
    store = SimpleVectorStore()
    add_nodes_to_vector_store(store, nodes[:2], emb[:2])
    with pytest.raises(ValueError, match=f"holds {DIM}-dimensional"):
        add_nodes_to_vector_store(store, nodes[2:4], np.ones((2, DIM + 1)))


# ---- PostgreSQL + pgvector --------------------------------------------------------------
@pytest.mark.postgres
def test_pgvector_equals_dense_expert_sync_and_async(corpus, pg_url, pg_table):
    nodes, emb, model = corpus
    store = pg_vector_store(pg_url, pg_table, DIM)
    add_nodes_to_vector_store(store, nodes, emb, batch_size=25)
    dense = DenseExpert(nodes, embed_model=model, embeddings=emb, similarity_top_k=K)
    expert = VectorStoreExpert(store, model, similarity_top_k=K)
    assert_same(expert, dense)

    async def both():
        return await asyncio.gather(*[expert.aretrieve(q) for q in QUERIES])

    for q, got in zip(QUERIES, asyncio.run(both())):
        want = dense.retrieve(q)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in want]
        np.testing.assert_allclose([n.score for n in got], [n.score for n in want], atol=1e-5)


@pytest.mark.postgres
def test_pgvector_granularity_filter_and_metadata_round_trip(corpus, pg_url, pg_table):
    nodes, emb, model = corpus
    store = pg_vector_store(pg_url, pg_table, DIM)
    add_nodes_to_vector_store(store, nodes, emb)
    for g in (2, 4):
        idx = [i for i, n in enumerate(nodes) if n.metadata["umg_granularity"] == g]
        dense = DenseExpert([nodes[i] for i in idx], embed_model=model, embeddings=emb[idx], similarity_top_k=K)
        assert_same(VectorStoreExpert(store, model, similarity_top_k=K, filters=g_filter(g)), dense)
    got = VectorStoreExpert(store, model, similarity_top_k=1).retrieve(nodes[5].text)[0].node
    assert got.node_id == "n005" and got.text == nodes[5].text
    assert got.metadata["umg_granularity"] == 2 and got.metadata["title"] == "t0"
