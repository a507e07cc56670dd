"""Stores that cannot serve the index: unreachable database, wrong embedding dimension, failed writes."""

import socket

import numpy as np
import pytest
from llama_index.core import StorageContext
from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag.experts import add_nodes_to_vector_store
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from store_helpers import RandomEmbedding, pg_vector_store
from test_multigranularity_store import DIM, GS, make_docs


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_store():
    pytest.importorskip("psycopg2")
    from llama_index.vector_stores.postgres import PGVectorStore

    port = closed_port()
    return port, PGVectorStore(
        connection_string=f"postgresql+psycopg2://postgres:secret@127.0.0.1:{port}/umg",
        async_connection_string=f"postgresql+asyncpg://postgres:secret@127.0.0.1:{port}/umg",
        table_name="units",
        embed_dim=DIM,
    )


def build(vector_store, docstore, model, **kw):
    ctx = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
    return MultiGranularityIndex.from_documents(
        make_docs(), granularities=GS, embed_model=model, storage_context=ctx, **kw
    )


def test_unreachable_database_is_named_and_nothing_is_built(tmp_path):
    port, vs = unreachable_store()
    ds, model = SimpleDocumentStore(), RandomEmbedding(dim=DIM)
    with pytest.raises(ConnectionError) as err:
        build(vs, ds, model)
    msg = str(err.value)
    assert f"127.0.0.1:{port}/umg" in msg and "table 'units'" in msg and "secret" not in msg
    assert model.text_calls == 0 and not ds.docs


def test_unreachable_docstore_is_named_before_anything_is_embedded():
    pytest.importorskip("psycopg2")
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    port = closed_port()
    kv = PostgresKVStore(
        table_name="docs",
        connection_string=f"postgresql+psycopg2://u:pw@127.0.0.1:{port}/umg",
        async_connection_string=f"postgresql+asyncpg://u:pw@127.0.0.1:{port}/umg",
    )
    vs, model = SimpleVectorStore(), RandomEmbedding(dim=DIM)
    with pytest.raises(ConnectionError, match=f"docstore \\(PostgresDocumentStore at .*127.0.0.1:{port}/umg"):
        build(vs, PostgresDocumentStore(kv), model)
    assert model.text_calls == 0 and not vs.data.embedding_dict


def test_unreachable_database_on_reopen(tmp_path):
    index = build(SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    index.persist(tmp_path / "bm25")
    port, vs = unreachable_store()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        MultiGranularityIndex.from_vector_store(
            vs, index.docstore, tmp_path / "bm25", embed_model=RandomEmbedding(dim=DIM)
        )


def test_declared_dimension_differs_from_embedder():
    pytest.importorskip("psycopg2")
    from llama_index.vector_stores.postgres import PGVectorStore

    vs = PGVectorStore(
        connection_string="postgresql+psycopg2://u:p@127.0.0.1:1/x",
        async_connection_string="postgresql+asyncpg://u:p@127.0.0.1:1/x",
        embed_dim=1536,
    )
    with pytest.raises(ValueError, match="holds 1536-dimensional embeddings, the embed_model gives 32"):
        build(vs, SimpleDocumentStore(), RandomEmbedding(dim=DIM))


def test_simple_store_with_other_dimension_is_refused():
    vs = SimpleVectorStore()
    add_nodes_to_vector_store(vs, [TextNode(id_="x", text="x")], np.ones((1, 16)))
    with pytest.raises(ValueError, match="holds 16-dimensional"):
        build(vs, SimpleDocumentStore(), RandomEmbedding(dim=DIM))


def test_reopen_with_another_embedder_dimension(tmp_path):
    index = build(SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    index.persist(tmp_path / "bm25")
    with pytest.raises(ValueError, match="dimension"):
        MultiGranularityIndex.from_vector_store(
            index.dense[2].vector_store, index.docstore, tmp_path / "bm25", embed_model=RandomEmbedding(dim=DIM + 1)
        )


def test_failed_vector_write_leaves_no_units_behind(monkeypatch):
    def refuse(self, nodes, **kw):
        raise ConnectionRefusedError("store went away")

    monkeypatch.setattr(SimpleVectorStore, "add", refuse)
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    with pytest.raises(ConnectionError, match="could not write to the vector store"):
        build(vs, ds, RandomEmbedding(dim=DIM))
    assert not ds.docs and not vs.data.embedding_dict


def test_writer_undoes_earlier_batches_on_failure(monkeypatch):
    orig, calls = SimpleVectorStore.add, []

    def flaky(self, nodes, **kw):
        calls.append(len(nodes))
        if len(calls) == 3:
            raise ConnectionRefusedError("dropped")
        return orig(self, nodes)

    monkeypatch.setattr(SimpleVectorStore, "add", flaky)
    vs = SimpleVectorStore()
    nodes = [TextNode(id_=f"n{i}", text=f"t{i}") for i in range(10)]
    with pytest.raises(ConnectionError):
        add_nodes_to_vector_store(vs, nodes, np.eye(10, 8), batch_size=4)
    assert not vs.data.embedding_dict


@pytest.mark.postgres
def test_existing_table_of_another_dimension(pg_url, pg_table):
    small = pg_vector_store(pg_url, pg_table, 16)
    add_nodes_to_vector_store(small, [TextNode(id_="x", text="x")], np.ones((1, 16)))
    # the table's column type, read from the catalog (no probe query scanning the table)
    with pytest.raises(ValueError, match="holds 16-dimensional embeddings, the embed_model gives 32"):
        build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))


@pytest.mark.postgres
def test_postgres_table_already_holding_an_index_is_refused(pg_url, pg_table):
    build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    with pytest.raises(ValueError, match="already holds nodes"):
        build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))


class LazyCollectionVectorStore(SimpleVectorStore):
    """A store whose collection exists only after the first ``add`` (as ``QdrantVectorStore``
    creates it): until then a query raises as Qdrant's local mode does."""

    created: bool = False

    def add(self, nodes, **kw):
        self.created = True
        return super().add(nodes, **kw)

    def query(self, query, **kw):
        if not self.created:
            raise ValueError("Collection units not found")
        return super().query(query, **kw)


def test_a_collection_created_by_the_first_add_is_built_into_and_reopened():
    from llama_index.core.storage.kvstore import SimpleKVStore

    from llama_index_ext_causalrag import CausalGraphIndex, StandardsIndex
    from llama_index_ext_causalrag.causal_graph import ExtractiveSummarizer, OfflineEntityExtractor, OfflineGateJudge
    from test_standards_store import docs as standards_docs
    from test_standards_store import parser

    offline = dict(
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        min_entity_units=1,
        show_progress=False,
    )
    cases = [
        (MultiGranularityIndex, make_docs(), dict(granularities=GS)),
        (StandardsIndex, standards_docs(), dict(parser=parser())),
        (CausalGraphIndex, make_docs(), offline),
    ]
    for cls, documents, kw in cases:
        vs, ds, kv = LazyCollectionVectorStore(), SimpleDocumentStore(), SimpleKVStore()
        ctx = StorageContext.from_defaults(vector_store=vs, docstore=ds)
        built = cls.from_documents(
            documents, embed_model=RandomEmbedding(dim=DIM), storage_context=ctx, kvstore=kv, **kw
        )
        memory = cls.from_documents(documents, embed_model=RandomEmbedding(dim=DIM), **kw)
        reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
        q = "drought reduces growth"
        want = [n.node.node_id for n in memory.as_retriever().retrieve(q)]
        assert want and [n.node.node_id for n in built.as_retriever().retrieve(q)] == want, cls.__name__
        assert [n.node.node_id for n in reopened.as_retriever().retrieve(q)] == want, cls.__name__
        with pytest.raises(ValueError, match="has no collection yet \\(Collection units not found\\)"):
            cls.from_vector_store(LazyCollectionVectorStore(), ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))


def test_a_multigranularity_index_is_not_reopened_on_an_empty_or_another_vector_store():
    from llama_index.core.storage.kvstore import SimpleKVStore

    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    build(vs, ds, RandomEmbedding(dim=DIM), kvstore=kv)
    with pytest.raises(
        ValueError, match="the vector store \\(SimpleVectorStore\\) is empty; pass the vector store the index"
    ):
        MultiGranularityIndex.from_vector_store(
            SimpleVectorStore(), ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM)
        )
    other = SimpleVectorStore()
    other.add([TextNode(id_="elsewhere", text="x", embedding=[1.0] * DIM)])
    with pytest.raises(ValueError, match="holds 'elsewhere', not a node of the index"):
        MultiGranularityIndex.from_vector_store(other, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))


def test_storage_errors_name_the_public_call_that_reached_them(tmp_path):
    """The storage checks take no owner argument: they name the public call running them
    (validation.caller), else themselves."""
    from llama_index_ext_causalrag import CausalGraphIndex, StandardsIndex
    from llama_index_ext_causalrag.storage.stores import check_empty

    vs = SimpleVectorStore()
    add_nodes_to_vector_store(vs, [TextNode(id_="x", text="x")], np.ones((1, 16)))
    with pytest.raises(ValueError, match=r"^MultiGranularityIndex\.from_documents: the vector store .* holds 16-dim"):
        build(vs, SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    index = build(SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    index.persist(tmp_path / "ix")
    with pytest.raises(ValueError, match=r"^MultiGranularityIndex\.from_vector_store: the index in .* was embedded"):
        MultiGranularityIndex.from_vector_store(
            index.dense[2].vector_store, index.docstore, tmp_path / "ix", embed_model=RandomEmbedding(dim=DIM + 1)
        )
    for cls in (MultiGranularityIndex, StandardsIndex, CausalGraphIndex):
        with pytest.raises(ValueError, match=rf"^{cls.__name__}\.from_vector_store: pass exactly one of persist_dir="):
            cls.from_vector_store(SimpleVectorStore(), SimpleDocumentStore())
    with pytest.raises(ValueError, match=r"^check_empty: the vector store \(SimpleVectorStore\) already holds nodes"):
        check_empty(vs, 16, "X.from_vector_store")
