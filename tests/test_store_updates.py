"""insert / refresh_ref_docs / delete_ref_doc on store-backed indexes equal a store-backed rebuild
(same rows in the vector store and docstore, same results, same state reopened from the kvstore)."""

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from _update_helpers import assert_same_results
from fakes import HashEmbedding
from llama_index_ext_causalrag import StandardsIndex
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from standards_fixtures import ETSI_TEXT, TOY_RECOVERY, TOY_TRANSPORT
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, ids, make_docs
from test_standards_store import QUERIES as STD_QUERIES
from test_standards_store import parser


class RefusingKVStore(SimpleKVStore):
    def put(self, key, val, collection="data"):
        raise ConnectionRefusedError("kv went away")


def simple():
    return SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()


def vector_ids(vs):
    if hasattr(vs, "data"):
        return set(vs.data.embedding_dict)
    import sqlalchemy

    engine = sqlalchemy.create_engine(vs.connection_string)
    with engine.connect() as conn:
        out = {r[0] for r in conn.execute(sqlalchemy.text(f"SELECT node_id FROM data_{vs.table_name}"))}
    engine.dispose()
    return out


def doc_ids(ds):
    return set(ds.docs)


# ---- MultiGranularityIndex --------------------------------------------------------------------
def mgi(stores, documents, namespace=None):
    vs, ds, kv = stores
    return MultiGranularityIndex.from_documents(
        documents,
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        kvstore=kv,
        namespace=namespace,
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
    )


def same_mgi_results(a, b, queries=QUERIES):
    for make in (
        lambda ix: ix.as_retriever(similarity_top_k=10),
        lambda ix: ix.as_fusion_retriever(similarity_top_k=10),
    ):
        ra, rb = make(a), make(b)
        for q in queries:
            assert ids(ra.retrieve(q)) == ids(rb.retrieve(q)), q


def changed(doc):
    return Document(text=doc.text.replace("reports", "finds"), id_=doc.doc_id, metadata=doc.metadata)


def final_docs():
    d = make_docs(5)
    return [changed(d[1]), d[2], d[3], d[4]]


def update_mgi(index):
    d = make_docs(5)
    index.insert([d[3], d[4]])
    assert index.refresh_ref_docs([d[2], changed(d[1])]) == [False, True]
    index.delete_ref_doc("doc0")


def test_mgi_updates_on_simple_stores_equal_a_rebuild(tmp_path):
    stores = simple()
    index = mgi(stores, make_docs(5)[:3])
    update_mgi(index)
    rebuild_stores = simple()
    rebuild = mgi(rebuild_stores, final_docs())
    assert [u.node_id for u in index.units] == [u.node_id for u in rebuild.units]
    assert vector_ids(stores[0]) == vector_ids(rebuild_stores[0])
    assert doc_ids(stores[1]) == doc_ids(rebuild_stores[1])
    same_mgi_results(index, rebuild)
    memory = MultiGranularityIndex.from_documents(final_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    same_mgi_results(index, memory)
    reopened = MultiGranularityIndex.from_vector_store(
        stores[0], stores[1], kvstore=stores[2], embed_model=RandomEmbedding(dim=DIM)
    )
    same_mgi_results(reopened, rebuild)
    # an update of the reopened index (BM25 tokens recomputed from the docstore's units), also to a folder
    reopened.insert(make_docs(6)[5], persist_dir=tmp_path / "state")
    rebuild_stores = simple()
    rebuild = mgi(rebuild_stores, final_docs() + [make_docs(6)[5]])
    assert vector_ids(stores[0]) == vector_ids(rebuild_stores[0])
    same_mgi_results(reopened, rebuild)
    from_dir = MultiGranularityIndex.from_vector_store(
        stores[0], stores[1], tmp_path / "state", embed_model=RandomEmbedding(dim=DIM)
    )
    same_mgi_results(from_dir, rebuild, QUERIES[:5])


def test_mgi_failed_update_leaves_stores_and_index_as_they_were():
    vs, ds, _ = stores = simple()
    index = mgi(stores, make_docs(5)[:3])
    before = (vector_ids(vs), doc_ids(ds), [u.node_id for u in index.units])
    want = [ids(index.as_retriever().retrieve(q)) for q in QUERIES[:5]]
    index._backend.kv.kvstore = RefusingKVStore(
        data=index._backend.kv.kvstore._collections_mappings
    )  # reads see the index
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        index.insert(make_docs(5)[3])
    with pytest.raises(ConnectionError):
        index.refresh_ref_docs([changed(make_docs(5)[1])])
    assert (vector_ids(vs), doc_ids(ds), [u.node_id for u in index.units]) == before
    assert [ids(index.as_retriever().retrieve(q)) for q in QUERIES[:5]] == want
    unit = next(u for u in index.units if u.ref_doc_id == "doc1")
    assert ds.get_node(unit.node_id).text == unit.text  # the refreshed text was rolled back


def test_update_errors_name_the_index_and_the_operation():
    """The store writes take no owner argument: an update's errors name the index and the
    operation from the public call running it."""
    index = mgi(simple(), make_docs(5)[:3])
    index._backend.kv.kvstore = RefusingKVStore(data=index._backend.kv.kvstore._collections_mappings)
    with pytest.raises(ConnectionError, match=r"^MultiGranularityIndex insert: cannot write to the kvstore"):
        index.insert(make_docs(5)[3])
    with pytest.raises(ConnectionError, match=r"^MultiGranularityIndex refresh: cannot write to the kvstore"):
        index.refresh_ref_docs([changed(make_docs(5)[1])])


def test_mgi_delete_of_unknown_and_last_document():
    index = mgi(simple(), make_docs(1))
    index.delete_ref_doc("nope")
    with pytest.raises(ValueError, match="would leave the index without units"):
        index.delete_ref_doc("doc0")


@pytest.mark.postgres
def test_mgi_updates_on_postgres_equal_a_rebuild(pg_url, pg_table):
    def pg(table):
        return (
            pg_vector_store(pg_url, table, DIM),
            pg_docstore(pg_url, table + "_docs"),
            pg_kvstore(pg_url, "kv_updates"),
        )

    index = mgi(pg(pg_table), make_docs(5)[:3])
    update_mgi(index)
    rebuild = mgi(pg(pg_table + "_r"), final_docs())
    assert vector_ids(pg(pg_table)[0]) == vector_ids(pg(pg_table + "_r")[0])
    same_mgi_results(index, rebuild, QUERIES[:6])
    vs, ds, kv = pg(pg_table)
    reopened = MultiGranularityIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
    same_mgi_results(reopened, rebuild, QUERIES[:6])


# ---- StandardsIndex ---------------------------------------------------------------------------
def std(stores, documents):
    vs, ds, kv = stores
    return StandardsIndex.from_documents(
        documents,
        parser=parser(),
        embed_model=HashEmbedding(),
        kvstore=kv,
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
    )


def transport(text=TOY_TRANSPORT):
    return Document(text=text, id_="rfc9990")


def recovery():
    return Document(text=TOY_RECOVERY, id_="rfc9991")


def etsi():
    return Document(text=ETSI_TEXT, id_="en300999")


CHANGED_TRANSPORT = TOY_TRANSPORT.replace(
    "ACK frames acknowledge packets.", "ACK frames acknowledge packets and ranges."
)


def update_std(index):
    index.insert(recovery())  # resolves the ext::RFC9991 placeholders to real sections
    assert index.refresh_ref_docs([transport(CHANGED_TRANSPORT), recovery()]) == [True, False]
    index.delete_ref_doc("en300999")


def test_standards_updates_on_simple_stores_equal_a_rebuild(tmp_path):
    stores = simple()
    index = std(stores, [transport(), etsi()])
    assert any(v.startswith("ext::RFC9991") for _, v in index.edges("cites"))
    update_std(index)
    rebuild_stores = simple()
    rebuild = std(rebuild_stores, [transport(CHANGED_TRANSPORT), recovery()])
    assert index.edges() == rebuild.edges() and not any(v.startswith("ext::RFC9991") for _, v in index.edges("cites"))
    assert vector_ids(stores[0]) == vector_ids(rebuild_stores[0])
    assert doc_ids(stores[1]) == doc_ids(rebuild_stores[1])
    assert_same_results(index.as_retriever(), rebuild.as_retriever(), STD_QUERIES, tol=0.0)
    reopened = StandardsIndex.from_vector_store(stores[0], stores[1], kvstore=stores[2], embed_model=HashEmbedding())
    assert_same_results(reopened.as_retriever(), rebuild.as_retriever(), STD_QUERIES, tol=0.0)
    index.insert(etsi(), persist_dir=tmp_path / "graph")
    from_dir = StandardsIndex.from_vector_store(stores[0], stores[1], tmp_path / "graph", embed_model=HashEmbedding())
    assert_same_results(from_dir.as_retriever(), index.as_retriever(), STD_QUERIES, tol=0.0)


def test_standards_failed_update_leaves_stores_and_index_as_they_were():
    vs, ds, _ = stores = simple()
    index = std(stores, [transport(), etsi()])
    before = (vector_ids(vs), doc_ids(ds), list(index.unit_ids), index.edges())
    want = [[n.node.node_id for n in index.as_retriever().retrieve(q)] for q in STD_QUERIES]
    index._backend.kv.kvstore = RefusingKVStore(
        data=index._backend.kv.kvstore._collections_mappings
    )  # reads see the index
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        index.insert(recovery())
    with pytest.raises(ConnectionError):
        index.refresh_ref_docs([transport(CHANGED_TRANSPORT)])
    assert (vector_ids(vs), doc_ids(ds), list(index.unit_ids), index.edges()) == before
    assert [[n.node.node_id for n in index.as_retriever().retrieve(q)] for q in STD_QUERIES] == want
    assert "ACK frames acknowledge packets." in ds.get_node("rfc9990::2.1").text


@pytest.mark.postgres
def test_standards_updates_on_postgres_equal_a_rebuild(pg_url, pg_table):
    def pg(table):
        return (
            pg_vector_store(pg_url, table, 64),
            pg_docstore(pg_url, table + "_docs"),
            pg_kvstore(pg_url, "kv_std_updates"),
        )

    index = std(pg(pg_table), [transport(), etsi()])
    update_std(index)
    rebuild = std(pg(pg_table + "_r"), [transport(CHANGED_TRANSPORT), recovery()])
    assert vector_ids(pg(pg_table)[0]) == vector_ids(pg(pg_table + "_r")[0])
    assert_same_results(index.as_retriever(), rebuild.as_retriever(), STD_QUERIES, tol=0.0)
    vs, ds, kv = pg(pg_table)
    reopened = StandardsIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=HashEmbedding())
    # reopened, the index is served: PostgreSQL computes the cosines in double precision (float32 in memory)
    assert_same_results(reopened.as_retriever(), rebuild.as_retriever(), STD_QUERIES, tol=1e-6)
