"""MultiGranularityIndex in a vector store + docstore: equal to the in-memory index, reopened without re-embedding."""

import asyncio

import pytest
from llama_index.core import Document, StorageContext
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag.experts import VectorStoreExpert
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.text.provenance import get_provenance
from store_helpers import RandomEmbedding, pg_docstore, pg_vector_store

DIM = 32
GS = (2, 4, 8)
TOPICS = [
    "photosynthesis chlorophyll light",
    "kinase signalling phosphorylation",
    "drought forest trees",
    "bacteria antibiotic resistance",
    "market pricing revenue",
]
QUERIES = [f"{TOPICS[i % 5]} in study {i % 4}" for i in range(10)] + [
    f"result r{i % 4}x{i} reported" for i in range(10)
]


def make_docs(n_docs: int = 4, n_sent: int = 14):
    return [
        Document(
            text=" ".join(
                f"Sentence {i} of study {d} reports {TOPICS[(d + i) % 5]} result r{d}x{i}." for i in range(n_sent)
            ),
            id_=f"doc{d}",
            metadata={"title": f"paper {d}"},
        )
        for d in range(n_docs)
    ]


@pytest.fixture(scope="module")
def memory_index():
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def ids(nws):
    return [n.node.node_id for n in nws]


def assert_equal_to_memory(index, memory_index, queries=QUERIES):
    """Top-10 ids (and texts) of retrieve and aretrieve equal the in-memory index's, for the
    full retriever and for fusion alone. The async calls share one event loop: PGVectorStore's
    async engine stays bound to the loop that first used it."""
    pairs = [
        (make(index), make(memory_index))
        for make in (
            lambda ix: ix.as_retriever(similarity_top_k=10),
            lambda ix: ix.as_fusion_retriever(similarity_top_k=10),
        )
    ]
    for got_r, want_r in pairs:
        for q in queries:
            got, want = got_r.retrieve(q), want_r.retrieve(q)
            assert ids(got) == ids(want), q
            assert [n.node.text for n in got] == [n.node.text for n in want]

    async def all_async():
        return [await asyncio.gather(*[got_r.aretrieve(q) for q in queries]) for got_r, _ in pairs]

    for (_, want_r), results in zip(pairs, asyncio.run(all_async())):
        for q, got in zip(queries, results):
            assert ids(got) == ids(want_r.retrieve(q)), q


def build(vector_store, docstore, embed_model=None):
    ctx = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
    return MultiGranularityIndex.from_documents(
        make_docs(), granularities=GS, embed_model=embed_model or RandomEmbedding(dim=DIM), storage_context=ctx
    )


def test_no_storage_context_is_the_in_memory_index(memory_index):
    assert memory_index._backend.kind == "memory"
    assert memory_index.embeddings.shape[1] == DIM


def test_simple_store_index_equals_in_memory_and_reopens_without_embedding(memory_index, tmp_path):
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    index = build(vs, ds)
    assert all(isinstance(e, VectorStoreExpert) for e in index.dense.values())
    assert len(vs.data.embedding_dict) == len(memory_index.units)
    assert len(ds.docs) == len(memory_index.units)
    assert_equal_to_memory(index, memory_index)
    index.persist(tmp_path / "bm25")
    fresh = RandomEmbedding(dim=DIM)
    reopened = MultiGranularityIndex.from_vector_store(vs, ds, tmp_path / "bm25", embed_model=fresh)
    assert_equal_to_memory(reopened, memory_index)
    assert fresh.text_calls == 0


def test_one_query_embedding_serves_every_granularity():
    model = RandomEmbedding(dim=DIM)
    fusion = build(SimpleVectorStore(), SimpleDocumentStore(), model).as_fusion_retriever()
    model.query_calls = 0
    fusion.retrieve(QUERIES[0])
    asyncio.run(fusion.aretrieve(QUERIES[1]))
    assert model.query_calls == 2


def test_store_index_is_not_loadable_as_an_in_memory_one(tmp_path):
    index = build(SimpleVectorStore(), SimpleDocumentStore())
    index.persist(tmp_path / "ix")
    with pytest.raises(ValueError, match="MultiGranularityIndex@store"):
        MultiGranularityIndex.from_persist_dir(tmp_path / "ix", embed_model=RandomEmbedding(dim=DIM))


def test_building_into_a_non_empty_store_is_refused():
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    build(vs, ds)
    with pytest.raises(ValueError, match="already holds nodes"):
        build(vs, ds)


@pytest.mark.postgres
def test_postgres_index_equals_in_memory_reopens_without_embedding_queries_no_docstore(
    memory_index, pg_url, pg_table, tmp_path, monkeypatch
):
    builder = RandomEmbedding(dim=DIM)
    index = build(pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs"), builder)
    assert builder.text_calls > 0
    assert_equal_to_memory(index, memory_index)
    index.persist(tmp_path / "bm25")

    fresh = RandomEmbedding(dim=DIM)
    vs, ds = pg_vector_store(pg_url, pg_table, DIM), pg_docstore(pg_url, pg_table + "_docs")
    reopened = MultiGranularityIndex.from_vector_store(vs, ds, tmp_path / "bm25", embed_model=fresh)
    assert reopened._backend.layout == "served"
    assert_equal_to_memory(reopened, memory_index)
    assert fresh.text_calls == 0
    # promotion replaced units by their parents, taken from the units the index holds: a query reads no docstore
    fetched = []
    cls = type(ds)
    for name in ("get_node", "get_nodes", "get_document"):
        orig = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *a, _o=orig, **k: fetched.append(a) or _o(self, *a, **k))
    top = reopened.as_retriever(similarity_top_k=3).retrieve(QUERIES[0])
    parent_ids = {u.node_id for u in memory_index.units if u.metadata["umg_granularity"] == max(GS)}
    assert top and all(n.node.node_id in parent_ids for n in top)
    assert all(get_provenance(n)["stage"] == "parent_promotion" for n in top)
    assert fetched == []


@pytest.mark.postgres
def test_postgres_hnsw_index_with_wide_search_equals_exact(memory_index, pg_url, pg_table):
    """An HNSW table works too; with ef_search above the row count its lists equal exact search
    (a narrower ef_search makes them approximate, and pgvector filters granularity after the scan)."""
    from llama_index.vector_stores.postgres import PGVectorStore

    from pg_fixture import driver_url

    vs = PGVectorStore(
        connection_string=driver_url(pg_url, "psycopg2"),
        async_connection_string=driver_url(pg_url, "asyncpg"),
        table_name=pg_table,
        embed_dim=DIM,
        hnsw_kwargs={"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_ef_search": 1000},
    )
    index = build(vs, SimpleDocumentStore())
    assert len(memory_index.units) < 1000
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.connect() as conn:
        indexdef = conn.execute(
            sqlalchemy.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"),
            {"n": f"data_{pg_table}_embedding_idx"},
        ).scalar()
    engine.dispose()
    assert indexdef and "hnsw" in indexdef
    assert_equal_to_memory(index, memory_index, QUERIES[:5])


# Documents shorter than the coarsest window: their whole-document unit belongs to several
# granularities (umg_granularities [4, 8] for a 3-sentence document with GS (2, 4, 8)).
SHORT_DOCS_GS = (2, 4, 8)


def make_short_docs():
    return [
        Document(
            text=" ".join(f"Short note {d} line {i} mentions {TOPICS[(d + i) % 5]}." for i in range(n)), id_=f"short{d}"
        )
        for d, n in enumerate([1, 2, 3, 5, 6, 9, 14])
    ]


def short_index(**kw):
    return MultiGranularityIndex.from_documents(
        make_short_docs(), granularities=SHORT_DOCS_GS, embed_model=RandomEmbedding(dim=DIM), **kw
    )


def assert_lists_equal(index, memory):
    """Every granularity's dense list holds the units of that granularity, as in memory."""
    for g in SHORT_DOCS_GS:
        want = {u.node_id for u in memory.units if g in u.metadata["umg_granularities"]}
        source = index.as_fusion_retriever(expert_names=("dense",), granularities=[g]).source
        got = set(source.lists(QueryBundle(QUERIES[0]), 100)[("dense", g)].ids)
        assert got == want, g
    assert_equal_to_memory(index, memory)


def test_units_shared_by_several_granularities_are_in_each_of_their_store_lists():
    memory = short_index()
    shared = [u for u in memory.units if len(u.metadata["umg_granularities"]) > 1]
    assert shared and all(u.metadata["umg_granularity_max"] == max(u.metadata["umg_granularities"]) for u in shared)
    vs, ds = SimpleVectorStore(), SimpleDocumentStore()
    assert_lists_equal(short_index(storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds)), memory)


@pytest.mark.postgres
def test_postgres_units_shared_by_several_granularities_are_in_each_of_their_lists(pg_url, pg_table):
    from store_helpers import pg_kvstore

    memory = short_index()

    def stores():
        return (
            pg_vector_store(pg_url, pg_table, DIM),
            pg_docstore(pg_url, pg_table + "_docs"),
            pg_kvstore(pg_url, pg_table + "_kv"),
        )

    vs, ds, kv = stores()
    built = short_index(storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds), kvstore=kv)
    assert_lists_equal(built, memory)
    vs, ds, kv = stores()
    assert_lists_equal(
        MultiGranularityIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM)), memory
    )


def test_units_written_without_the_coarsest_granularity_keep_the_old_filter_with_a_warning(caplog):
    from llama_index_ext_causalrag.multigranularity.store_experts import dense_experts
    from llama_index_ext_causalrag.storage.row_ids import RowIds

    units = [u.model_copy(deep=True) for u in short_index().units]
    for u in units:
        del u.metadata["umg_granularity_max"]
    with caplog.at_level("WARNING"):
        experts = dense_experts(
            SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM), units, RowIds.for_new_index()
        )
    assert "written by an earlier version" in caplog.text
    assert [(f.key, f.value) for f in experts[4].filters.filters] == [("umg_granularity", 4)]


def test_units_whose_granularities_are_not_consecutive_are_refused():
    from llama_index_ext_causalrag.multigranularity.store_experts import dense_experts
    from llama_index_ext_causalrag.storage.row_ids import RowIds

    units = [u.model_copy(deep=True) for u in short_index().units]
    shared = next(u for u in units if len(u.metadata["umg_granularities"]) == 2)
    shared.metadata["umg_granularities"] = [shared.metadata["umg_granularity"]]
    with pytest.raises(ValueError, match="not the consecutive granularities"):
        dense_experts(
            SimpleVectorStore(), SimpleDocumentStore(), RandomEmbedding(dim=DIM), units, RowIds.for_new_index()
        )


def test_duplicate_documents_tie_in_the_same_order_in_memory_and_in_a_store():
    """Two documents with the same text (HolisQA has 40 such pairs) give units with equal
    vectors and BM25 scores: exact ties, ordered by node id (descending) in every list and in the
    fused ranking, so a store returns them in the in-memory order."""
    docs = make_docs() + [
        Document(text=d.text, id_=f"dup{d.id_[-1]}", metadata=dict(d.metadata)) for d in make_docs()[:2]
    ]

    def index(**kw):
        return MultiGranularityIndex.from_documents(docs, granularities=GS, embed_model=RandomEmbedding(dim=DIM), **kw)

    memory = index()
    store = index(
        storage_context=StorageContext.from_defaults(vector_store=SimpleVectorStore(), docstore=SimpleDocumentStore())
    )
    queries = [f"{TOPICS[i % 5]} in study {i % 2}" for i in range(10)]
    assert_equal_to_memory(store, memory, queries)
    got = ids(memory.as_fusion_retriever(similarity_top_k=10).retrieve(queries[0]))
    pairs = [(g, g.replace("doc", "dup", 1)) for g in got if g.startswith(("doc0::", "doc1::"))]
    assert pairs, got
    for orig, dup in pairs:  # the duplicate's unit is right before the original's: id "dup0" > "doc0"
        assert dup in got and got.index(dup) == got.index(orig) - 1, (orig, got)
