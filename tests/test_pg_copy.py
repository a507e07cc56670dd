"""Bulk rows into PostgreSQL by binary COPY are the rows PGVectorStore.add writes, byte for byte."""

from __future__ import annotations

import numpy as np
import psycopg2
import pytest
import sqlalchemy
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_ext_causalrag.storage.pg import copy as copy_module
from llama_index_ext_causalrag.storage.pg.copy import supports_copy
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store
from pg_fixture import driver_url

pytestmark = pytest.mark.postgres
DIM = 24


def _nodes(n: int = 60) -> list[TextNode]:
    rng = np.random.default_rng(0)
    words = ["cell", "gene", "kinase", "tumour", "signal", "naïve", "ΔpH", 'quote"d', "tab\there", "line\nbreak"]
    out = []
    for i in range(n):
        node = TextNode(
            id_=f"doc{i // 7}::s{i}",
            text=" ".join(rng.choice(words, 9)),
            metadata={"umg_granularity": int(i % 3), "title": f"T{i}", "score": 0.5 + i},
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i // 7}")
        out.append(node)
    return out


def _store(pg_url: str, table: str, **kw):
    from llama_index.vector_stores.postgres import PGVectorStore

    return PGVectorStore(
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
        table_name=table,
        embed_dim=DIM,
        **kw,
    )


def _rows(pg_url: str, table: str, tsv: bool = False) -> list:
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    cols = "node_id, text, metadata_::text, embedding::text" + (", text_search_tsv::text" if tsv else "")
    try:
        with engine.connect() as c:
            return c.execute(sqlalchemy.text(f"SELECT {cols} FROM public.data_{table} ORDER BY node_id")).fetchall()
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "kw",
    [{}, {"use_jsonb": True}, {"use_jsonb": True, "hybrid_search": True, "text_search_config": "english"}],
    ids=["json", "jsonb", "jsonb+hybrid"],
)
@pytest.mark.parametrize("scheme", ["node_id", "uuid5"])
@pytest.mark.parametrize("chunk", [None, 97], ids=["1MB-reads", "97-byte-reads"])
def test_copy_writes_the_rows_pgvectorstore_add_writes(pg_url, pg_table, kw, scheme, chunk, monkeypatch):
    if chunk:  # the payload sent in pieces that cut rows, fields and UTF-8 characters
        monkeypatch.setattr(copy_module, "COPY_CHUNK", chunk)
    nodes = _nodes()
    emb = np.random.default_rng(1).normal(size=(len(nodes), DIM)).astype(np.float32)
    row_ids = RowIds(scheme)
    via_add, via_copy = _store(pg_url, pg_table + "a", **kw), _store(pg_url, pg_table + "c", **kw)
    assert supports_copy(via_copy)
    via_add.add(  # LlamaIndex's own path
        [row_ids.to_row(n, row.tolist()) for n, row in zip(nodes, emb)]
    )
    ids = add_nodes_to_vector_store(via_copy, nodes, emb, batch_size=25, row_ids=row_ids)  # 3 COPYs
    assert ids == [n.node_id for n in nodes]
    tsv = "hybrid_search" in kw
    want, got = _rows(pg_url, pg_table + "a", tsv), _rows(pg_url, pg_table + "c", tsv)
    assert len(got) == len(nodes) and got == want


def test_a_failed_copy_writes_nothing_and_names_the_store(pg_url, pg_table):
    store = _store(pg_url, pg_table)
    nodes = _nodes(10)
    add_nodes_to_vector_store(store, nodes[:3], np.ones((3, DIM), dtype=np.float32))
    with pytest.raises(ValueError, match=f"PGVectorStore at .*table '{pg_table}'.* holds {DIM}-dimensional"):
        add_nodes_to_vector_store(store, nodes[3:], np.ones((7, DIM + 1), dtype=np.float32))
    assert [r[0] for r in _rows(pg_url, pg_table)] == sorted(n.node_id for n in nodes[:3])


@pytest.mark.parametrize("where", ["server", "client"])
def test_a_write_failing_after_some_batches_leaves_only_the_rows_before_it(pg_url, pg_table, monkeypatch, where):
    """Batches are encoded while the one before is sent: a failure in the server's COPY of the third
    batch, or in encoding the third while the second is in flight, removes the batches committed."""
    store = _store(pg_url, pg_table)
    nodes = _nodes(12)
    add_nodes_to_vector_store(store, nodes[:3], np.ones((3, DIM), dtype=np.float32))
    new = nodes[3:]
    if where == "server":  # PostgreSQL refuses NUL in text: the third COPY fails
        new[7] = TextNode(id_=new[7].node_id, text="bad \x00 byte")
    else:
        from llama_index_ext_causalrag.storage.pg import copy as pg_copy

        encode, calls = pg_copy.encode_rows, []

        def failing(*a, **k):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("encoding failed")
            return encode(*a, **k)

        monkeypatch.setattr(pg_copy, "encode_rows", failing)
    with pytest.raises(psycopg2.Error if where == "server" else RuntimeError):
        add_nodes_to_vector_store(store, new, np.ones((len(new), DIM), dtype=np.float32), batch_size=3)
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
        docstore = PostgresDocumentStore(
            PostgresKVStore(
                table_name=f"{pg_table}_docs",
                connection_string=driver_url(pg_url, "psycopg2"),
                async_connection_string=driver_url(pg_url, "asyncpg"),
            )
        )
    else:
        docstore = SimpleDocumentStore()
    from llama_index.core import Document
    from llama_index.core.schema import IndexNode

    # TextNodes are parsed in one step on PostgreSQL; other node types go through json_to_doc
    nodes = _nodes(30) + [
        Document(text="a whole document", id_="doc-x", metadata={"k": 1}),
        IndexNode(text="points elsewhere", id_="index-x", index_id="elsewhere"),
    ]
    add_nodes_to_docstore(docstore, nodes)
    ids = [n.node_id for n in reversed(nodes)][::2] + ["doc-x"]
    got = get_nodes_at_once(docstore, ids)
    assert got == docstore.get_nodes(ids) and [type(n) for n in got] == [type(n) for n in docstore.get_nodes(ids)]
    assert type(got[0]).__name__ == "IndexNode" and type(got[-1]).__name__ == "Document"
    with pytest.raises(ValueError, match="doc_id nowhere not found"):
        get_nodes_at_once(docstore, [*ids, "nowhere"])


@pytest.mark.parametrize("use_jsonb", [False, True], ids=["json", "jsonb"])
def test_units_read_with_their_parents_come_once_each(pg_url, pg_table, use_jsonb):
    from llama_index_ext_causalrag.storage.pg.docstore import read_nodes

    docstore = _docstore(pg_url, pg_table + "_p", use_jsonb)
    parents = [TextNode(id_=f"p{i}", text=f"parent {i}") for i in range(3)]
    units = [
        TextNode(
            id_=f"u{i}",
            text=f"unit {i}",
            relationships={NodeRelationship.PARENT: parents[i % 2].as_related_node_info()},
        )
        for i in range(4)
    ]
    orphan = TextNode(id_="orphan", text="no parent")
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_docstore

    add_nodes_to_docstore(docstore, [*parents, *units, orphan])
    # p0 asked for as a unit and the parent of u0, u2; p2 nobody's parent; "gone" not stored
    got = read_nodes(docstore, ["u0", "u1", "u2", "p0", "orphan", "gone"], with_parents=True)
    assert sorted(got) == ["orphan", "p0", "p1", "u0", "u1", "u2"]
    assert got["p1"] == parents[1] and got["u2"] == units[2] and got["orphan"] == orphan
    assert read_nodes(docstore, ["orphan"], with_parents=True) == {"orphan": orphan}
    assert read_nodes(docstore, [], with_parents=True) == {}


def _docstore(pg_url: str, table: str, use_jsonb: bool = False):
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    return PostgresDocumentStore(
        PostgresKVStore(
            table_name=table,
            connection_string=driver_url(pg_url, "psycopg2"),
            async_connection_string=driver_url(pg_url, "asyncpg"),
            use_jsonb=use_jsonb,
        )
    )


def _kv_rows(pg_url: str, table: str) -> list:
    """Every (collection, key, value as stored) of a kvstore table: json is kept as sent."""
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    try:
        with engine.connect() as c:
            return c.execute(
                sqlalchemy.text(f"SELECT namespace, key, value::text FROM public.data_{table} ORDER BY namespace, key")
            ).fetchall()
    finally:
        engine.dispose()


def _doc_nodes(version: int) -> list:
    """Version 0: two documents, their chunks (metadata, prev/next/parent/child links, unicode,
    COPY's special characters in ids and text), a chunk whose document has no metadata.
    Version 1: some of those chunks changed, new chunks of the same and of a new document,
    a chunk of a document stored in LlamaIndex's legacy shape."""
    from llama_index.core.schema import Document, IndexNode

    def chunk(nid, doc, text, **metadata):
        node = TextNode(id_=nid, text=text, metadata=metadata, excluded_llm_metadata_keys=["page"])
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc, metadata={"n": 1})
        return node

    docs = [
        Document(id_="doc0", text="Kinase ΔpH 😀", metadata={"title": "naïve"}),
        Document(id_="doc\t1\\x", text='tab\tline\nbreak \\ quote"', metadata={}),
    ]
    a = chunk("doc0::s0", "doc0", "cell gene ΔpH 😀", title="naïve", page=1, tags=["a", "β"])
    b = chunk("doc0::s1", "doc0", "back\\slash\ttab\nnew line\r", title="other", nested={"k": [1, 2.5, None]})
    c = chunk("doc\t1\\x::s0", "doc\t1\\x", "no metadata here")
    a.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=b.node_id)
    b.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=a.node_id)
    b.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id="doc0")
    docs[0].relationships[NodeRelationship.CHILD] = [
        RelatedNodeInfo(node_id=a.node_id),
        RelatedNodeInfo(node_id=b.node_id),
    ]
    if version == 0:
        return [*docs, a, b, c, IndexNode(id_="index", text="points elsewhere", index_id="doc0")]
    return [
        chunk("doc0::s0", "doc0", "cell gene, changed", title="changed"),  # an update: new text, same key
        chunk("doc0::s2", "doc0", "a new chunk of a stored document", title="new", page=3),
        chunk("doc\t1\\x::s1", "doc\t1\\x", "first metadata for this document", kind="x", page=2),
        chunk("doc\t1\\x::s2", "doc\t1\\x", "later chunks' metadata wins", kind="y"),
        chunk("doc2::s0", "doc2", "a new document", lang="de"),
        chunk("doc2::s1", "doc2", "its second chunk", lang="fr", extra=True),
        chunk("legacy::s9", "legacy", "joins a legacy entry", title="L"),
        Document(id_="doc0", text="Kinase ΔpH 😀 (revised)", metadata={"title": "naïve"}),
    ]


@pytest.mark.parametrize("use_jsonb", [False, True], ids=["json", "jsonb"])
@pytest.mark.parametrize("chunk", [None, 97], ids=["1MB-reads", "97-character-reads"])
def test_docstore_rows_are_the_rows_add_documents_writes(pg_url, pg_table, use_jsonb, chunk, monkeypatch):
    if chunk:  # the COPY text sent in pieces that cut rows and fields
        monkeypatch.setattr(copy_module, "COPY_CHUNK", chunk)
    from llama_index_ext_causalrag.storage.pg.docstore import supports_bulk_docstore
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_docstore

    theirs, ours = _docstore(pg_url, pg_table + "a", use_jsonb), _docstore(pg_url, pg_table + "c", use_jsonb)
    assert supports_bulk_docstore(ours)
    ours.add_documents = None  # add_nodes_to_docstore must not fall back to it
    legacy = {"doc_ids": ["legacy::s0"], "extra_info": {"from": "0.9"}}
    for step in (0, 1):
        if step == 1:  # a ref doc stored by an older LlamaIndex
            for store in (theirs, ours):
                store._kvstore.put("legacy", dict(legacy), collection=store._ref_doc_collection)
        theirs.add_documents(_doc_nodes(step), allow_update=True, batch_size=1000)
        add_nodes_to_docstore(ours, _doc_nodes(step))
        want, got = _kv_rows(pg_url, pg_table + "a"), _kv_rows(pg_url, pg_table + "c")
        assert len(got) > len(_doc_nodes(step)) and got == want
    assert ours.get_node("doc0::s0") == theirs.get_node("doc0::s0") == _doc_nodes(1)[0]
    assert ours.get_all_ref_doc_info() == theirs.get_all_ref_doc_info()
    assert ours.get_ref_doc_info("doc0").node_ids == ["doc0::s0", "doc0::s1", "doc0::s2"]
    assert ours.get_ref_doc_info("legacy").node_ids == ["legacy::s0", "legacy::s9"]
    assert ours.get_document_hash("doc2::s1") == _doc_nodes(1)[5].hash
    for store in (theirs, ours):
        store.delete_ref_doc("doc\t1\\x")
    assert _kv_rows(pg_url, pg_table + "c") == _kv_rows(pg_url, pg_table + "a")
    assert ours.get_ref_doc_info("doc\t1\\x") is None and ours.get_node("doc\t1\\x::s1", raise_error=False) is None


def test_a_failed_docstore_write_writes_nothing(pg_url, pg_table):
    from llama_index_ext_causalrag.storage.pg.docstore import write_nodes

    store = _docstore(pg_url, pg_table)
    first = _doc_nodes(0)
    write_nodes(store, first)
    before = _kv_rows(pg_url, pg_table)
    bad = TextNode(id_="doc0::bad", text="x", metadata={"score": float("nan")})  # NaN: not JSON to PostgreSQL
    bad.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="doc0")
    with pytest.raises(Exception, match="(?i)nan"):  # the fifth COPY fails; four were upserted before it
        write_nodes(store, [*_doc_nodes(1), bad], batch_size=2)
    assert _kv_rows(pg_url, pg_table) == before
    with pytest.raises(ValueError, match="node id 'doc0::s0' occurs twice"):
        write_nodes(store, [*_doc_nodes(1), first[2]])
    assert _kv_rows(pg_url, pg_table) == before


def test_only_a_postgres_kvstore_on_psycopg2_takes_the_copy_path(pg_url, pg_table):
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    from llama_index_ext_causalrag.storage.pg.docstore import supports_bulk_docstore

    def on(url):
        return PostgresDocumentStore(
            PostgresKVStore(table_name="t", connection_string=url, async_connection_string="postgresql+asyncpg://u@h/d")
        )

    assert supports_bulk_docstore(on("postgresql://u@h/d")) and supports_bulk_docstore(
        on("postgresql+psycopg2://u@h/d")
    )
    assert not supports_bulk_docstore(on("postgresql+psycopg://u@h/d"))
    assert not supports_bulk_docstore(SimpleDocumentStore())

    class OwnAdd(PostgresDocumentStore):
        def add_documents(self, *a, **kw):
            raise AssertionError("not called here")

    assert not supports_bulk_docstore(OwnAdd(on("postgresql://u@h/d")._kvstore))
