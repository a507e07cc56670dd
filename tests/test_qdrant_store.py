"""The three indexes on a plain ``QdrantVectorStore`` in local mode (no server:
``QdrantClient(path=...)``), compared with the in-memory index; skipped without
``llama-index-vector-stores-qdrant``.

Qdrant takes only UUIDs or unsigned integers as point ids, and our node ids are readable
strings (``doc0::s0-2``): the indexes store each unit under ``uuid5(node id)`` with its id in
the payload (:mod:`llama_index_ext_causalrag.storage.row_ids`), and retrievers return the readable ids.
Qdrant normalises vectors of a cosine collection when it stores them, so the vectors read back
(``StandardsIndex``, ``CausalGraphIndex``) and the scores computed from them agree to ~1e-7,
not to the bit.
"""

import asyncio

import pytest

pytest.importorskip("llama_index.vector_stores.qdrant")

from llama_index.core import Settings, StorageContext  # noqa: E402
from llama_index.core.schema import MetadataMode  # noqa: E402
from llama_index.core.storage.docstore import SimpleDocumentStore  # noqa: E402
from llama_index.core.storage.kvstore import SimpleKVStore  # noqa: E402
from llama_index.vector_stores.qdrant import QdrantVectorStore  # noqa: E402
from qdrant_client import AsyncQdrantClient, QdrantClient  # noqa: E402

from llama_index_ext_causalrag import MultiGranularityIndex, StandardsIndex  # noqa: E402
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY, row_id  # noqa: E402
from store_helpers import RandomEmbedding, causal_case, standards_case  # noqa: E402

TOL = 1e-6
COLLECTION = "units"


@pytest.fixture(autouse=True)
def _no_settings_llm(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)


def umg_case():
    from test_multigranularity_store import DIM, GS, QUERIES, make_docs

    return MultiGranularityIndex, make_docs(), dict(granularities=GS), lambda: RandomEmbedding(dim=DIM), QUERIES


def umg_short_case():
    """Documents shorter than the coarsest window: a unit in several granularities' lists
    (the filter ``umg_granularity <= g <= umg_granularity_max`` on int payloads)."""
    from test_multigranularity_store import DIM, QUERIES, SHORT_DOCS_GS, make_short_docs

    return (
        MultiGranularityIndex,
        make_short_docs(),
        dict(granularities=SHORT_DOCS_GS),
        lambda: RandomEmbedding(dim=DIM),
        QUERIES,
    )


CASES = {"umgp": umg_case, "umgp_short_docs": umg_short_case, "standards": standards_case, "causalrag2": causal_case}
UPDATE_CASES = {"umgp": umg_case, "standards": standards_case, "causalrag2": causal_case}


def qdrant(path):
    return QdrantVectorStore(client=QdrantClient(path=path), collection_name=COLLECTION)  # created by the first add


def build(cls, documents, kw, model, vs, ds, kv):
    return cls.from_documents(
        documents,
        embed_model=model(),
        kvstore=kv,
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        **kw,
    )


def unit_ids(index):
    return list(index.unit_ids) if isinstance(index, StandardsIndex) else [u.node_id for u in index.units]


def points(vs):
    """``{point id: node id in the payload}`` of every point of the collection."""
    got, offset = {}, None
    while True:
        batch, offset = vs.client.scroll(COLLECTION, limit=256, offset=offset, with_payload=True)
        got.update({str(p.id): p.payload[NODE_ID_KEY] for p in batch})
        if offset is None:
            return got


def assert_close(got, want):
    assert [n.node.node_id for n in got] == [n.node.node_id for n in want]
    assert all(abs(a.score - b.score) <= TOL for a, b in zip(got, want))


def assert_same(index, memory, queries):
    for q in queries:
        got = index.as_retriever().retrieve(q)
        assert_close(got, memory.as_retriever().retrieve(q))
        for n in got:  # the readable id, and no trace of the row id in what the LLM or embedder sees
            assert NODE_ID_KEY not in n.node.metadata
            assert NODE_ID_KEY not in n.node.get_content(MetadataMode.ALL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_on_qdrant_local_equals_in_memory_and_reopens(name, tmp_path):
    cls, documents, kw, model, queries = CASES[name]()
    memory = cls.from_documents(documents, embed_model=model(), **kw)
    path, ds, kv = str(tmp_path / "qdrant"), SimpleDocumentStore(), SimpleKVStore()
    vs = qdrant(path)
    built = build(cls, documents, kw, model, vs, ds, kv)
    assert points(vs) == {row_id(i): i for i in unit_ids(memory)}  # point id uuid5(node id), the id in the payload
    assert set(unit_ids(memory)) <= set(ds.docs)  # the docstore keeps the readable ids
    assert_same(built, memory, queries)
    if cls is MultiGranularityIndex:  # each granularity's list, filtered in Qdrant, holds that granularity's units
        for g, expert in built.dense.items():
            want = {u.node_id for u in memory.units if g in u.metadata["umg_granularities"]}
            assert {n.node.node_id for n in expert.with_top_k(len(memory.units)).retrieve(queries[0])} == want, g
    vs.client.close()

    # a second client on the folder, as another process would open it
    vs = qdrant(path)
    reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model())
    assert_same(reopened, memory, queries)

    # local mode lets one client at a time open the folder: the async one replaces the sync one
    vs.client.close()

    async def all_async():
        vs._aclient = AsyncQdrantClient(path=path)
        r = reopened.as_retriever()
        try:
            return await asyncio.gather(*[r.aretrieve(q) for q in queries])
        finally:
            await vs._aclient.close()

    for q, got in zip(queries, asyncio.run(all_async())):
        assert_close(got, memory.as_retriever().retrieve(q))


@pytest.mark.parametrize("name", sorted(UPDATE_CASES))
def test_insert_and_delete_ref_doc_on_qdrant_equal_the_in_memory_updates(name, tmp_path):
    cls, documents, kw, model, queries = UPDATE_CASES[name]()
    first, extra, gone = documents[:-1], documents[-1], documents[0].doc_id
    memory = cls.from_documents(first, embed_model=model(), **kw)
    path, ds, kv = str(tmp_path / "qdrant"), SimpleDocumentStore(), SimpleKVStore()
    vs = qdrant(path)
    index = build(cls, first, kw, model, vs, ds, kv)
    for ix in (memory, index):
        ix.insert(extra)
        ix.delete_ref_doc(gone)
    assert points(vs) == {row_id(i): i for i in unit_ids(memory)}  # the deleted document's points are gone
    assert not [i for i in ds.docs if ds.get_node(i).ref_doc_id == gone]
    assert_same(index, memory, queries)
    vs.client.close()

    vs = qdrant(path)
    reopened = cls.from_vector_store(vs, ds, kvstore=kv, embed_model=model())
    assert_same(reopened, memory, queries)
    vs.client.close()
