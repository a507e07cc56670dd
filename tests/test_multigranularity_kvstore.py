"""MultiGranularityIndex complete in the stores: BM25, unit order and parameters in a kvstore,
reopened from the three stores alone (Simple* stores reloaded from disk, and PostgreSQL)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llama_index.core import StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, assert_equal_to_memory, ids, make_docs

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def memory_index():
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def build(vector_store, docstore, kvstore, model=None, docs=None, **kw):
    ctx = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
    return MultiGranularityIndex.from_documents(
        docs or make_docs(),
        granularities=GS,
        storage_context=ctx,
        embed_model=model or RandomEmbedding(dim=DIM),
        kvstore=kvstore,
        **kw,
    )


def reload_simple(vs, ds, kv, d):
    vs.persist(str(d / "vector_store.json"))
    ds.persist(str(d / "docstore.json"))
    kv.persist(str(d / "kvstore.json"))
    return (
        SimpleVectorStore.from_persist_path(str(d / "vector_store.json")),
        SimpleDocumentStore.from_persist_path(str(d / "docstore.json")),
        SimpleKVStore.from_persist_path(str(d / "kvstore.json")),
    )


def test_simple_stores_on_disk_reopen_with_the_stores_alone(memory_index, tmp_path):
    vs, ds, kv = SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()
    index = build(vs, ds, kv)
    assert_equal_to_memory(index, memory_index)
    fresh = RandomEmbedding(dim=DIM)
    vs2, ds2, kv2 = reload_simple(vs, ds, kv, tmp_path)
    reopened = MultiGranularityIndex.from_vector_store(vs2, ds2, kvstore=kv2, embed_model=fresh)
    assert_equal_to_memory(reopened, memory_index)
    assert fresh.text_calls == 0
    assert not list(tmp_path.glob("**/bm25"))  # nothing beside the stores


def test_persist_dir_still_works_for_a_kvstore_index(memory_index, tmp_path):
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    index = build(vs, ds, SimpleKVStore())
    index.persist(tmp_path / "bm25")
    assert_equal_to_memory(
        MultiGranularityIndex.from_vector_store(vs, ds, tmp_path / "bm25", embed_model=RandomEmbedding(dim=DIM)),
        memory_index,
    )


def test_exactly_one_source_and_kvstore_needs_stores():
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    with pytest.raises(ValueError, match="exactly one of persist_dir= .* and kvstore=.*got neither"):
        MultiGranularityIndex.from_vector_store(vs, ds)
    with pytest.raises(ValueError, match="got both"):
        MultiGranularityIndex.from_vector_store(vs, ds, "somewhere", kvstore=SimpleKVStore())
    with pytest.raises(ValueError, match="pass storage_context= too"):
        MultiGranularityIndex.from_documents(make_docs(), kvstore=SimpleKVStore(), embed_model=RandomEmbedding(dim=DIM))
    with pytest.raises(ValueError, match="namespace='x' names a collection of a kvstore; pass kvstore= too"):
        build(vs, ds, None, namespace="x")


def test_two_indexes_in_one_kvstore_need_two_namespaces(memory_index):
    kv = SimpleKVStore()
    a_vs, a_ds = SimpleVectorStore(), SimpleDocumentStore()
    build(a_vs, a_ds, kv)
    model = RandomEmbedding(dim=DIM)
    b_vs, b_ds = SimpleVectorStore(), SimpleDocumentStore()
    with pytest.raises(ValueError, match="already holds a MultiGranularityIndex@store .* pass another namespace="):
        build(b_vs, b_ds, kv, model)
    assert model.text_calls == 0 and not b_ds.docs and not b_vs.data.embedding_dict
    small = make_docs(n_docs=2)
    build(b_vs, b_ds, kv, docs=small, namespace="second")
    a = MultiGranularityIndex.from_vector_store(a_vs, a_ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
    b = MultiGranularityIndex.from_vector_store(
        b_vs, b_ds, kvstore=kv, namespace="second", embed_model=RandomEmbedding(dim=DIM)
    )
    assert_equal_to_memory(a, memory_index, QUERIES[:4])
    assert len(b.units) < len(a.units) == len(memory_index.units)


class RefusingKVStore(SimpleKVStore):
    """Reachable, but every write fails (the docstore's own SimpleKVStore is not affected)."""

    def put(self, key, val, collection="data"):
        raise ConnectionRefusedError("kv went away")


def test_failed_kvstore_write_leaves_no_rows_behind():
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        build(vs, ds, RefusingKVStore())
    assert not ds.docs and not vs.data.embedding_dict


REOPEN_SCRIPT = """
import json, sys
sys.path[:0] = {paths!r}
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
url, table, queries = {url!r}, {table!r}, {queries!r}
model = RandomEmbedding(dim={dim})
index = MultiGranularityIndex.from_vector_store(pg_vector_store(url, table, {dim}), pg_docstore(url, table + "_docs"),
                                                kvstore=pg_kvstore(url, "kv"), embed_model=model)
retriever = index.as_retriever(similarity_top_k=10)
print(json.dumps({{"ids": [[n.node.node_id for n in retriever.retrieve(q)] for q in queries], "embedded": model.text_calls}}))
"""


@pytest.mark.postgres
def test_postgres_index_reopens_in_another_process_from_the_stores_alone(memory_index, pg_url, pg_table):
    build(pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs"), pg_kvstore(pg_url, "kv"))
    queries = QUERIES[:6]
    script = REOPEN_SCRIPT.format(
        paths=[str(TESTS.parent), str(TESTS)], url=pg_url, table=pg_table, queries=queries, dim=DIM
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    want = memory_index.as_retriever(similarity_top_k=10)
    assert got["ids"] == [ids(want.retrieve(q)) for q in queries]
    assert got["embedded"] == 0


@pytest.mark.postgres
def test_postgres_two_indexes_in_one_database_and_a_foreign_table(memory_index, pg_url, pg_table):
    kv = pg_kvstore(pg_url, "kv_shared")
    build(pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs"), kv)
    other = pg_table + "_b"
    build(pg_vector_store(pg_url, other, DIM), pg_docstore(pg_url, other + "_docs"), kv, docs=make_docs(n_docs=2))
    a = MultiGranularityIndex.from_vector_store(
        pg_vector_store(pg_url, pg_table, DIM),
        pg_docstore(pg_url, pg_table + "_docs"),
        kvstore=kv,
        embed_model=RandomEmbedding(dim=DIM),
    )
    assert_equal_to_memory(a, memory_index, QUERIES[:4])
    with pytest.raises(
        ValueError, match=f"was built into PGVectorStore table '{pg_table}', got PGVectorStore table '{other}'"
    ):
        MultiGranularityIndex.from_vector_store(
            pg_vector_store(pg_url, other, DIM),
            pg_docstore(pg_url, other + "_docs"),
            kvstore=kv,
            namespace=pg_table,
            embed_model=RandomEmbedding(dim=DIM),
        )
    with pytest.raises(FileNotFoundError, match="holds no index"):
        MultiGranularityIndex.from_vector_store(
            pg_vector_store(pg_url, pg_table + "_none", DIM),
            SimpleDocumentStore(),
            kvstore=kv,
            embed_model=RandomEmbedding(dim=DIM),
        )


def test_unreachable_kvstore_is_named_before_anything_is_embedded():
    pytest.importorskip("psycopg2")
    from llama_index.storage.kvstore.postgres import PostgresKVStore

    from test_store_bad_input import closed_port

    port = closed_port()
    kv = PostgresKVStore(
        table_name="kv",
        connection_string=f"postgresql+psycopg2://u:pw@127.0.0.1:{port}/umg",
        async_connection_string=f"postgresql+asyncpg://u:pw@127.0.0.1:{port}/umg",
    )
    vs, ds, model = SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM)
    with pytest.raises(
        ConnectionError, match=f"cannot reach the kvstore \\(PostgresKVStore at .*127.0.0.1:{port}/umg.*table 'kv'"
    ):
        build(vs, ds, kv, model)
    assert model.text_calls == 0 and not ds.docs and not vs.data.embedding_dict
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        MultiGranularityIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=model)
