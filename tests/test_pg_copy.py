"""Bulk rows into PostgreSQL by binary COPY are the rows PGVectorStore.add writes, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from pg_fixture import driver_url
from llama_index_ext_causalrag.storage.pg_copy import supports_copy
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

pytestmark = pytest.mark.postgres
DIM = 24


def _nodes(n: int = 60) -> list[TextNode]:
    rng = np.random.default_rng(0)
    words = ["cell", "gene", "kinase", "tumour", "signal", "naïve", "ΔpH", "quote\"d", "tab\there", "line\nbreak"]
    out = []
    for i in range(n):
        node = TextNode(id_=f"doc{i // 7}::s{i}", text=" ".join(rng.choice(words, 9)),
                        metadata={"umg_granularity": int(i % 3), "title": f"T{i}", "score": 0.5 + i})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i // 7}")
        out.append(node)
    return out


def _store(pg_url: str, table: str, **kw):
    from llama_index.vector_stores.postgres import PGVectorStore

    return PGVectorStore(connection_string=driver_url(pg_url, "psycopg2"),
                         async_connection_string=driver_url(pg_url, "asyncpg"),
                         table_name=table, embed_dim=DIM, **kw)


def _rows(pg_url: str, table: str, tsv: bool = False) -> list:
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    cols = "node_id, text, metadata_::text, embedding::text" + (", text_search_tsv::text" if tsv else "")
    try:
        with engine.connect() as c:
            return c.execute(sqlalchemy.text(f"SELECT {cols} FROM public.data_{table} ORDER BY node_id")).fetchall()
    finally:
        engine.dispose()


@pytest.mark.parametrize("kw", [{}, {"use_jsonb": True}, {"use_jsonb": True, "hybrid_search": True, "text_search_config": "english"}],
                         ids=["json", "jsonb", "jsonb+hybrid"])
@pytest.mark.parametrize("scheme", ["node_id", "uuid5"])
def test_copy_writes_the_rows_pgvectorstore_add_writes(pg_url, pg_table, kw, scheme):
    nodes = _nodes()
    emb = np.random.default_rng(1).normal(size=(len(nodes), DIM)).astype(np.float32)
    row_ids = RowIds(scheme)
    via_add, via_copy = _store(pg_url, pg_table + "a", **kw), _store(pg_url, pg_table + "c", **kw)
    assert supports_copy(via_copy)
    via_add.add(  # LlamaIndex's own path
        [row_ids.to_row(n, row.tolist()) for n, row in zip(nodes, emb)])
    ids = add_nodes_to_vector_store(via_copy, nodes, emb, batch_size=25, row_ids=row_ids)  # 3 COPYs
    assert ids == [n.node_id for n in nodes]
    tsv = "hybrid_search" in kw
    want, got = _rows(pg_url, pg_table + "a", tsv), _rows(pg_url, pg_table + "c", tsv)
    assert len(got) == len(nodes) and got == want


def test_a_failed_copy_writes_nothing_and_names_the_store(pg_url, pg_table):
    store = _store(pg_url, pg_table)
    nodes = _nodes(10)
    add_nodes_to_vector_store(store, nodes[:3], np.ones((3, DIM), dtype=np.float32))
    with pytest.raises(Exception):
        add_nodes_to_vector_store(store, nodes[3:], np.ones((7, DIM + 1), dtype=np.float32))
    assert [r[0] for r in _rows(pg_url, pg_table)] == sorted(n.node_id for n in nodes[:3])


def test_only_a_pgvectorstore_on_psycopg2_is_copied_into():
    from llama_index.core.vector_stores import SimpleVectorStore

    assert not supports_copy(SimpleVectorStore())


@pytest.mark.parametrize("kind", ["postgres", "simple"])
def test_nodes_read_at_once_are_the_nodes_read_one_by_one(pg_url, pg_table, kind):
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    from llama_index_ext_causalrag.storage.stores import add_nodes_to_docstore, get_nodes_at_once

    if kind == "postgres":
        docstore = PostgresDocumentStore(PostgresKVStore(
            table_name=f"{pg_table}_docs", connection_string=driver_url(pg_url, "psycopg2"),
            async_connection_string=driver_url(pg_url, "asyncpg")))
    else:
        docstore = SimpleDocumentStore()
    nodes = _nodes(30)
    add_nodes_to_docstore(docstore, nodes, "test")
    ids = [n.node_id for n in reversed(nodes)][::2]
    assert get_nodes_at_once(docstore, ids) == docstore.get_nodes(ids)
    with pytest.raises(ValueError, match="doc_id nowhere not found"):
        get_nodes_at_once(docstore, [*ids, "nowhere"])
