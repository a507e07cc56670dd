"""StandardsIndex in a vector store + docstore + kvstore: identical results to the in-memory
index, reopened from the stores alone (Simple* stores reloaded from disk, and PostgreSQL)."""

import asyncio
from typing import List

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from _update_helpers import assert_same_results
from fakes import HashEmbedding
from llama_index_ext_causalrag import StandardsIndex
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.storage.persistence import CorruptIndexError
from llama_index_ext_causalrag.storage.row_ids import row_id
from standards_fixtures import ETSI_TEXT, TOY_RECOVERY, TOY_TRANSPORT
from store_helpers import pg_docstore, pg_kvstore, pg_vector_store, stored_node_ids

DIM = 64
QUERIES = [
    "ACK frames acknowledge packets",
    "loss detection per packet number space",
    "stream states TLS",
    "power requirements of toy radios",
    "overview of frames",
    "ordered bytes streams",
    "intro to recovery",
    "terms and definitions",
    "EMC standard references",
    "extra notes",
    "abstract transport",
]


class CountingEmbedding(HashEmbedding):
    """HashEmbedding that counts the texts it embeds for indexing."""

    text_calls: int = 0

    def _get_text_embedding(self, text: str) -> List[float]:
        self.text_calls += 1
        return super()._get_text_embedding(text)


def docs():
    return [
        Document(text=TOY_TRANSPORT, id_="rfc9990"),
        Document(text=TOY_RECOVERY, id_="rfc9991"),
        Document(text=ETSI_TEXT, id_="en300999"),
    ]


def parser():
    return StructuredDocumentParser(chunk_size=24, chunk_overlap=0)  # small chunks: chunked sections too


def build(vs, ds, kv, documents=None, model=None, **kw):
    ctx = StorageContext.from_defaults(vector_store=vs, docstore=ds)
    return StandardsIndex.from_documents(
        documents or docs(),
        parser=parser(),
        embed_model=model or HashEmbedding(),
        storage_context=ctx,
        kvstore=kv,
        **kw,
    )


@pytest.fixture(scope="module")
def memory_index():
    return StandardsIndex.from_documents(docs(), parser=parser(), embed_model=HashEmbedding())


def assert_identical(index, memory_index, queries=QUERIES, tol=0.0):
    """Same ids in the same order, scores within ``tol`` (a served index's cosines are the database's,
    in double precision, the in-memory ones float32: 1e-7 apart)."""
    assert_same_results(index.as_retriever(), memory_index.as_retriever(), queries, tol=tol)
    got_r, want_r = index.as_retriever(), memory_index.as_retriever()

    async def all_async():
        return await asyncio.gather(*[got_r.aretrieve(q) for q in queries])

    for q, got in zip(queries, asyncio.run(all_async())):
        want = want_r.retrieve(q)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in want]
        assert all(abs(a.score - b.score) <= tol for a, b in zip(got, want))


def reload_simple(vs, ds, kv, d):
    vs.persist(str(d / "vector_store.json"))
    ds.persist(str(d / "docstore.json"))
    kv.persist(str(d / "kvstore.json"))
    return (
        SimpleVectorStore.from_persist_path(str(d / "vector_store.json")),
        SimpleDocumentStore.from_persist_path(str(d / "docstore.json")),
        SimpleKVStore.from_persist_path(str(d / "kvstore.json")),
    )


def test_what_goes_where(memory_index):
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    build(vs, ds, kv)
    assert stored_node_ids(vs) == set(memory_index.unit_ids)
    assert set(ds.docs) == set(memory_index._nodes) and len(ds.docs) > len(memory_index.unit_ids)
    meta = vs.data.metadata_dict[row_id("rfc9990::2.1")]
    assert meta["section_path"] == memory_index.node("rfc9990::2.1").metadata["section_path"]
    assert meta["doc_id"] == "rfc9990" and meta["node_kind"] == "section"
    head = kv.get("head", collection="causalrag/causalrag_index")
    assert head["class"] == "StandardsIndex@store" and "graph.json" in head["files"]


def test_simple_stores_on_disk_reopen_identical_without_embedding(memory_index, tmp_path):
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    index = build(vs, ds, kv)
    assert_identical(index, memory_index)
    fresh = CountingEmbedding()
    reopened = StandardsIndex.from_vector_store(
        *reload_simple(vs, ds, kv, tmp_path)[:2],
        embed_model=fresh,
        kvstore=SimpleKVStore.from_persist_path(str(tmp_path / "kvstore.json")),
    )
    assert_identical(reopened, memory_index)
    assert reopened.edges() == memory_index.edges() and reopened.warnings == memory_index.warnings
    assert fresh.text_calls == 0


def test_persist_dir_and_preset(memory_index, tmp_path):
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    index = build(vs, ds, None, preset="first")
    index.persist(tmp_path / "graph")
    assert not (tmp_path / "graph" / "nodes.json").exists() and not (tmp_path / "graph" / "embeddings.npy").exists()
    reopened = StandardsIndex.from_vector_store(vs, ds, tmp_path / "graph", embed_model=HashEmbedding())
    assert reopened.preset == "first"
    assert_same_results(reopened.as_retriever(), memory_index.as_retriever(preset="first"), QUERIES, tol=0.0)
    with pytest.raises(
        ValueError,
        match="holds a StandardsIndex@store, not a StandardsIndex; load it with StandardsIndex.from_vector_store",
    ):
        StandardsIndex.from_persist_dir(tmp_path / "graph")


def test_bad_input(tmp_path):
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    build(vs, ds, kv)
    with pytest.raises(ValueError, match="already holds nodes"):
        build(vs, SimpleDocumentStore(), SimpleKVStore())
    with pytest.raises(ValueError, match="already holds a StandardsIndex@store"):
        build(SimpleVectorStore(), SimpleDocumentStore(), kv)
    with pytest.raises(ValueError, match="holds 64-dimensional embeddings, the embed_model gives 32"):
        build(vs, SimpleDocumentStore(), None, model=HashEmbedding(dim=32))
    with pytest.raises(ValueError, match="dimension"):
        StandardsIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=HashEmbedding(dim=32))
    with pytest.raises(ValueError, match="exactly one of persist_dir="):
        StandardsIndex.from_vector_store(vs, ds, embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="pass storage_context= too"):
        StandardsIndex.from_documents(docs(), kvstore=kv, embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="lacks 19 of the index's 19 vectors"):
        StandardsIndex.from_vector_store(SimpleVectorStore(), ds, kvstore=kv, embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="the docstore lacks nodes"):
        StandardsIndex.from_vector_store(vs, SimpleDocumentStore(), kvstore=kv, embed_model=HashEmbedding())
    with pytest.raises(FileNotFoundError, match="holds no index"):
        StandardsIndex.from_vector_store(vs, ds, kvstore=kv, namespace="other", embed_model=HashEmbedding())


def test_a_multigranularity_namespace_is_not_a_standards_index():
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    MultiGranularityIndex.from_documents(
        [Document(text="One. Two. Three. Four.", id_="d")],
        granularities=(1, 2),
        embed_model=HashEmbedding(),
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        kvstore=kv,
    )
    with pytest.raises(ValueError, match="holds a MultiGranularityIndex@store, not a StandardsIndex@store"):
        StandardsIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=HashEmbedding())


def test_unreachable_database_is_named_and_nothing_is_built():
    from test_store_bad_input import unreachable_store

    port, vs = unreachable_store()
    ds, model = SimpleDocumentStore(), CountingEmbedding()
    vs.embed_dim = DIM
    with pytest.raises(ConnectionError) as err:
        build(vs, ds, SimpleKVStore(), model=model)
    assert f"127.0.0.1:{port}/umg" in str(err.value) and "secret" not in str(err.value)
    assert model.text_calls == 0 and not ds.docs


def test_changed_kv_value_is_refused(tmp_path):
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    build(vs, ds, kv)
    coll = "causalrag/causalrag_index"
    gen = kv.get("head", collection=coll)["generation"]
    value = kv.get(f"{gen}/graph.json/0", collection=coll)
    kv.put(f"{gen}/graph.json/0", {"text": value["text"].replace("cites", "cited")}, collection=coll)
    with pytest.raises(CorruptIndexError, match="graph.json does not match"):
        StandardsIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=HashEmbedding())


@pytest.mark.postgres
def test_postgres_index_identical_to_memory_and_reopens_from_the_stores(memory_index, pg_url, pg_table):
    kv_table = pg_table + "_kv"
    index = build(
        pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs"), pg_kvstore(pg_url, kv_table)
    )
    assert_identical(index, memory_index)
    fresh = CountingEmbedding()
    reopened = StandardsIndex.from_vector_store(
        pg_vector_store(pg_url, pg_table, DIM),
        pg_docstore(pg_url, pg_table + "_docs"),
        kvstore=pg_kvstore(pg_url, kv_table),
        embed_model=fresh,
    )
    assert type(reopened._backend.docstore).__name__ == "PostgresDocumentStore"
    assert_identical(reopened, memory_index, tol=1e-6)  # served by the database (tests/test_standards_served.py)
    assert fresh.text_calls == 0
    import sqlalchemy

    from pg_fixture import driver_url

    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.connect() as conn:
        row = conn.execute(
            sqlalchemy.text(f"SELECT metadata_ FROM data_{pg_table} WHERE node_id = :r"), {"r": row_id("rfc9990::2.1")}
        ).scalar()
    engine.dispose()
    assert (
        row["section_path"] == memory_index.node("rfc9990::2.1").metadata["section_path"]
        and row["node_kind"] == "section"
    )
