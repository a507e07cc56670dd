"""MultiGranularityIndex(lexical="store"): the sparse lists served by the vector store's full-text search."""

import asyncio

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_ext_causalrag.experts import SparseExpert, VectorStoreTextExpert
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.storage.kvstate import KVState
from llama_index_ext_causalrag.storage.row_ids import row_id
from llama_index_ext_causalrag.text.provenance import get_provenance
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store

DIM = 32
GS = (2, 4)
TOPICS = ["photosynthesis chlorophyll light", "kinase signalling phosphorylation", "drought forest trees"]
QUERIES = ["chlorophyll light in study 1", "kinase phosphorylation result", "drought trees reported"]


def make_docs(n_docs: int = 3, n_sent: int = 8):
    return [
        Document(
            text=" ".join(
                f"Sentence {i} of study {d} reports {TOPICS[(d + i) % 3]} result r{d}x{i}." for i in range(n_sent)
            ),
            id_=f"doc{d}",
        )
        for d in range(n_docs)
    ]


def build(vector_store, docstore, embed_model=None, **kw):
    ctx = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
    return MultiGranularityIndex.from_documents(
        make_docs(), granularities=GS, storage_context=ctx, embed_model=embed_model or RandomEmbedding(dim=DIM), **kw
    )


def fts_store(pg_url, table):
    from llama_index.vector_stores.postgres import PGVectorStore

    from pg_fixture import driver_url

    return PGVectorStore(
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
        table_name=table,
        embed_dim=DIM,
        hybrid_search=True,
        text_search_config="english",
    )


def test_store_lexical_is_refused_up_front_for_a_store_without_text_search():
    model = RandomEmbedding(dim=DIM)
    with pytest.raises(
        ValueError,
        match=r"lexical='store' needs a vector store with full-text search, got "
        r"SimpleVectorStore.*hybrid_search=True.*lexical='bm25'",
    ):
        build(SimpleVectorStore(), SimpleDocumentStore(), model, lexical="store")
    assert model.text_calls == 0  # refused before anything was embedded


def test_lexical_values_are_checked():
    with pytest.raises(ValueError, match=r"lexical must be one of \('bm25', 'store'\), got 'pg'"):
        build(SimpleVectorStore(), SimpleDocumentStore(), lexical="pg")
    with pytest.raises(ValueError, match="lexical='store' needs an index built into stores; pass storage_context="):
        MultiGranularityIndex.from_documents(
            make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM), lexical="store"
        )
    with pytest.raises(ValueError, match="VectorStoreTextExpert needs a vector store with full-text search"):
        VectorStoreTextExpert(SimpleVectorStore(), docstore=SimpleDocumentStore())


def test_the_default_store_index_keeps_bm25s():
    index = build(SimpleVectorStore(), SimpleDocumentStore())
    assert all(isinstance(e, SparseExpert) for e in index.sparse.values())


@pytest.mark.postgres
def test_postgres_without_hybrid_search_is_refused_up_front(pg_url, pg_table):
    model = RandomEmbedding(dim=DIM)
    with pytest.raises(
        ValueError,
        match=r"needs a vector store with full-text search, got PGVectorStore at .*"
        r"hybrid_search=True",
    ):
        build(pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs"), model, lexical="store")
    assert model.text_calls == 0


@pytest.mark.postgres
def test_postgres_full_text_serves_the_sparse_lists_and_survives_reopen_and_insert(pg_url, pg_table):
    def stores():
        return (
            fts_store(pg_url, pg_table),
            pg_docstore(pg_url, pg_table + "_docs"),
            pg_kvstore(pg_url, pg_table + "_kv"),
        )

    vs, ds, kv = stores()
    built = build(vs, ds, kvstore=kv, lexical="store")
    head = KVState(kv, pg_table).head()
    assert head is not None and not [f for f in head["files"] if f.startswith("bm25/")]  # no bm25s stored
    vs, ds, kv = stores()
    model = RandomEmbedding(dim=DIM)
    index = MultiGranularityIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=model)
    assert model.text_calls == 0 and index._backend.lexical == "store"  # the build's choice, from its params
    for ix in (built, index):
        assert set(ix.sparse) == set(GS) and all(type(e) is VectorStoreTextExpert for e in ix.sparse.values())
    # a sparse list is the store's own TEXT_SEARCH answer under the granularity's filter
    expert = index.sparse[2]
    raw = vs.query(
        VectorStoreQuery(
            query_str=QUERIES[0], mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=100, filters=expert.filters
        )
    )
    got = expert.with_top_k(100).retrieve(QUERIES[0])
    assert got and sorted(row_id(n.node.node_id) for n in got) == sorted(raw.ids)  # rows keyed by uuid5(node id)
    assert [n.score for n in got] == sorted(raw.similarities, reverse=True)
    retriever = index.as_retriever(similarity_top_k=5)
    sync = {q: retriever.retrieve(q) for q in QUERIES}

    async def all_async():
        return await asyncio.gather(*[retriever.aretrieve(q) for q in QUERIES])

    for q, nodes in zip(QUERIES, asyncio.run(all_async())):
        assert nodes and [n.node.node_id for n in nodes] == [n.node.node_id for n in sync[q]], q
    fused = index.as_fusion_retriever(similarity_top_k=5).retrieve(QUERIES[1])
    assert any(k.startswith("sparse@") for n in fused for k in get_provenance(n)["scores"])
    index.insert(Document(text="Zymogen granules hold trypsinogen. They are secreted on demand.", id_="new"))
    hits = index.sparse[2].retrieve("zymogen trypsinogen")
    assert hits and all(n.node.ref_doc_id == "new" for n in hits)


@pytest.mark.postgres
def test_postgres_store_lexical_index_cannot_be_reopened_with_bm25_or_without_text_search(pg_url, pg_table):
    vs, ds, kv = (
        fts_store(pg_url, pg_table),
        pg_docstore(pg_url, pg_table + "_docs"),
        pg_kvstore(pg_url, pg_table + "_kv"),
    )
    build(vs, ds, kvstore=kv, lexical="store")
    with pytest.raises(ValueError, match="built with lexical='store' and stores no BM25"):
        MultiGranularityIndex.from_vector_store(
            fts_store(pg_url, pg_table), ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM), lexical="bm25"
        )
    with pytest.raises(ValueError, match="needs a vector store with full-text search"):
        MultiGranularityIndex.from_vector_store(
            pg_vector_store(pg_url, pg_table, DIM), ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM)
        )
