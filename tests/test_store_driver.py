"""A store joins the package by a driver in a folder of its own and one registration line
(tests/toy_store): a MultiGranularityIndex builds into it, answers, updates and reopens on it,
and the generic code asks the driver (bulk rows, one commit with the state head, lost
connections, descriptions) without naming the store."""

from __future__ import annotations

import pytest
from llama_index.core import StorageContext

from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.storage.drivers import driver_for, is_connection_error, register, unregister
from llama_index_ext_causalrag.storage.stores import describe_store
from store_helpers import RandomEmbedding
from test_multigranularity_store import DIM, GS, QUERIES, assert_equal_to_memory, make_docs
from toy_store.driver import TOY, ToyDocumentStore, ToyKVStore, ToyOutage, ToyVectorStore


@pytest.fixture
def toy():
    register(TOY)  # the one registration line
    TOY.calls.clear()
    TOY.fail_commit = False
    yield TOY
    unregister(TOY)


def stores():
    return ToyVectorStore(), ToyDocumentStore(), ToyKVStore()


def build(vs, ds, kv, docs):
    return MultiGranularityIndex.from_documents(
        docs,
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        kvstore=kv,
    )


def reopen(vs, ds, kv):
    return MultiGranularityIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))


def answers(index):
    return [[n.node.node_id for n in index.as_retriever(similarity_top_k=8).retrieve(q)] for q in QUERIES[:5]]


def test_the_registered_driver_owns_its_stores_and_the_generic_code_asks_it(toy):
    vs, ds, kv = stores()
    assert driver_for(vs) is toy and driver_for(ds) is toy and driver_for(kv) is toy
    assert describe_store(vs) == "ToyVectorStore (toy, in memory)"
    assert is_connection_error(RuntimeError("down")) is False
    try:
        raise RuntimeError("the query failed") from ToyOutage("unreachable")
    except RuntimeError as e:
        assert is_connection_error(e)  # the chain holds the toy's outage
    unregister(toy)
    assert driver_for(vs) is not toy and not is_connection_error(ToyOutage("unreachable"))
    register(toy)


def test_a_multigranularity_index_builds_answers_updates_and_reopens_on_the_toy_store(toy):
    docs = make_docs()
    vs, ds, kv = stores()
    index = build(vs, ds, kv, docs[:-1])
    writes = [c for c in toy.calls if c[0] == "write_vectors"]
    assert writes and max(c[1] for c in writes) <= 7  # the driver's bulk write, in its batch size
    assert_equal_to_memory(
        index, MultiGranularityIndex.from_documents(docs[:-1], granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    )
    reader = reopen(vs, ds, kv)
    before = answers(reader)
    toy.calls.clear()
    index.insert(docs[-1])
    assert [c for c in toy.calls if c[0] == "commit"] == [("commit", len(index.units) - len(reader.units), True)]
    memory = MultiGranularityIndex.from_documents(docs, granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    assert_equal_to_memory(index, memory)
    assert_equal_to_memory(reopen(vs, ds, kv), memory)
    assert answers(reopen(vs, ds, kv)) != before


def test_a_commit_the_toy_store_refuses_leaves_rows_and_head_as_before(toy):
    docs = make_docs()
    vs, ds, kv = stores()
    index = build(vs, ds, kv, docs[:-1])
    before, rows_before = answers(index), set(vs.data.embedding_dict)
    head_before = kv.get("head", collection=f"{index._backend.kv.collection}")
    toy.fail_commit = True
    with pytest.raises(RuntimeError, match="refused the commit"):
        index.insert(docs[-1])
    assert set(vs.data.embedding_dict) == rows_before  # no row of the update was written
    assert kv.get("head", collection=index._backend.kv.collection) == head_before
    assert answers(index) == before and answers(reopen(vs, ds, kv)) == before
    toy.fail_commit = False
    index.insert(docs[-1])
    assert answers(reopen(vs, ds, kv)) == answers(index) != before


def test_each_recorded_layout_name_finds_the_driver_that_serves_it():
    from llama_index_ext_causalrag.storage.drivers import GENERIC, driver_for_layout
    from llama_index_ext_causalrag.storage.milvus.driver import MILVUS_DRIVER
    from llama_index_ext_causalrag.storage.pg.driver import PG

    assert driver_for_layout("served") is PG and driver_for_layout("granularity_tables") is PG
    assert driver_for_layout("milvus") is MILVUS_DRIVER and driver_for_layout("filtered") is GENERIC
    assert "served" in PG.served_layouts and "granularity_tables" not in PG.served_layouts
    with pytest.raises(
        ValueError,
        match=r"store layout 'cassandra'.*known: \['filtered', 'granularity_tables', "
        r"'milvus', 'served'\]",
    ):
        driver_for_layout("cassandra")


@pytest.mark.parametrize("layout", [None, "filtered", "cassandra"])
def test_an_index_on_the_toy_store_reopens_by_its_recorded_layout(toy, tmp_path, layout):
    """The toy store has the generic layout ("filtered"): an index written before layouts were
    recorded (no name) opens as one too; a name no driver serves is refused naming it."""
    from _persisted_helpers import rewrite_json

    docs = make_docs()
    vs, ds, kv = stores()
    index = build(vs, ds, kv, docs)
    assert index._backend.layout == "filtered"
    index.persist(tmp_path / "ix")

    def recorded(params):
        params.pop("store_layout")
        return params if layout is None else {**params, "store_layout": layout}

    rewrite_json(tmp_path / "ix", "params.json", recorded)

    def open_():
        return MultiGranularityIndex.from_vector_store(
            vs, ds, persist_dir=tmp_path / "ix", embed_model=RandomEmbedding(dim=DIM)
        )

    if layout == "cassandra":
        with pytest.raises(ValueError, match="store layout 'cassandra', which no registered store driver serves"):
            open_()
        return
    reopened = open_()
    assert reopened._backend.layout == "filtered" and answers(reopened) == answers(index)
