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
        table_name="units", embed_dim=DIM,
    )


def build(vector_store, docstore, model, **kw):
    ctx = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=model, storage_context=ctx, **kw)


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
    kv = PostgresKVStore(table_name="docs", connection_string=f"postgresql+psycopg2://u:pw@127.0.0.1:{port}/umg",
                         async_connection_string=f"postgresql+asyncpg://u:pw@127.0.0.1:{port}/umg")
    vs, model = SimpleVectorStore(), RandomEmbedding(dim=DIM)
    with pytest.raises(ConnectionError, match=f"docstore \\(PostgresDocumentStore at .*127.0.0.1:{port}/umg"):
        build(vs, PostgresDocumentStore(kv), model)
    assert model.text_calls == 0 and not vs.data.embedding_dict


def test_unreachable_database_on_reopen(tmp_path):
    index = build(SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    index.persist(tmp_path / "bm25")
    port, vs = unreachable_store()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        MultiGranularityIndex.from_vector_store(vs, index.docstore, tmp_path / "bm25", embed_model=RandomEmbedding(dim=DIM))


def test_declared_dimension_differs_from_embedder():
    pytest.importorskip("psycopg2")
    from llama_index.vector_stores.postgres import PGVectorStore

    vs = PGVectorStore(connection_string="postgresql+psycopg2://u:p@127.0.0.1:1/x",
                       async_connection_string="postgresql+asyncpg://u:p@127.0.0.1:1/x", embed_dim=1536)
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
        MultiGranularityIndex.from_vector_store(index.dense[2].vector_store, index.docstore, tmp_path / "bm25",
                                                embed_model=RandomEmbedding(dim=DIM + 1))


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
    with pytest.raises(ValueError, match="rejects 32-dimensional"):
        build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))


@pytest.mark.postgres
def test_postgres_table_already_holding_an_index_is_refused(pg_url, pg_table):
    build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
    with pytest.raises(ValueError, match="already holds nodes"):
        build(pg_vector_store(pg_url, pg_table, DIM), SimpleDocumentStore(), RandomEmbedding(dim=DIM))
