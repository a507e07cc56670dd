"""A CausalGraphIndex reopened from PostgreSQL holds no unit text and no unit vector: a query reads
the units it needs from the stores (``causal_graph/units.py``), with the in-memory index's answers,
``filters=`` pushed into the vector store's query, and another index object's insert seen once
the reader is reopened."""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph import backend as cg_backend
from llama_index_ext_causalrag.causal_graph.unit_terms import ServedTerms
from llama_index_ext_causalrag.causal_graph.units import StoredUnits
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_causal_graph_store import DIM, QUERIES, TEXTS, build, make_docs

pytestmark = pytest.mark.postgres

TOPIC = {"drought": "land", "wheat": "land", "fungi": "land", "reef": "sea", "coast": "sea", "insulin": "health"}
PRESETS = {
    "ppr": dict(similarity_top_k=5),
    "causalrag2": dict(preset="causalrag2", similarity_top_k=5),
    "nogates_no_filter": dict(preset="nogates", use_filter=False, similarity_top_k=6),
    "statements": dict(
        preset="causalrag2", use_filter=False, similarity_top_k=8, include_summaries=True, include_statements=True
    ),
    "small_pool": dict(preset="causalrag2", similarity_top_k=3, mmr_pool=4, text_candidates=3),
}


def docs_with_topics():
    return [Document(text=TEXTS[n], id_=n, metadata={"topic": TOPIC[n]}) for n in TEXTS]


def stores(pg_url, table):
    return pg_vector_store(pg_url, table, DIM), pg_docstore(pg_url, table + "_docs"), pg_kvstore(pg_url, table + "_kv")


def reopen(pg_url, table, model=None):
    vs, ds, kv = stores(pg_url, table)
    return CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=model or RandomEmbedding(dim=DIM))


def answers(retriever, queries=QUERIES):
    return [[(n.node.node_id, round(float(n.score), 6), n.node.text) for n in retriever.retrieve(q)] for q in queries]


@pytest.fixture(scope="module")
def memory():
    return build(docs_with_topics())


@pytest.fixture
def served(pg_url, pg_table, memory):
    build(docs_with_topics(), stores=stores(pg_url, pg_table))
    return reopen(pg_url, pg_table)


def plots(n=12):
    """``n`` field reports per fixture text (distinct ids, one distinct sentence each)."""
    return [
        Document(text=f"{TEXTS[k]} Plot {i} was sampled in {1990 + i}.", id_=f"{k}{i}") for i in range(n) for k in TEXTS
    ]


def test_opening_reads_no_unit_and_holds_no_text_or_vector(pg_url, pg_table, monkeypatch):
    memory = build(plots())
    build(plots(), stores=stores(pg_url, pg_table))
    monkeypatch.setattr(
        cg_backend,
        "get_nodes_at_once",
        lambda ds, ids: pytest.fail("the open read every unit") if len(ids) > 2 else [ds.get_node(i) for i in ids],
    )
    index = reopen(pg_url, pg_table)
    st = index._state
    assert st.in_stores and isinstance(st._stored, StoredUnits)
    assert st._units is None and st._unit_embeddings is None and st._source is None
    assert st.unit_ids == [u.node_id for u in memory.units]  # ids only: the terms are the store's
    assert isinstance(st._stored.postings, ServedTerms) and st._stored.postings.nbytes == 0
    assert not any(
        isinstance(v, np.ndarray) and v.ndim == 2 and v.shape[0] == len(st.unit_ids) for v in vars(st._stored).values()
    )
    held = st._stored
    index.as_retriever(**PRESETS["small_pool"]).retrieve("quantum chromodynamics")  # no term, no entity shared
    assert (
        len(held._rows.data) <= 6 + 16 and len(held._nodes.data) <= 6
    )  # its best units, the list's margin; the 6 kept
    for name in sorted(PRESETS):
        got = answers(index.as_retriever(**PRESETS[name]), QUERIES[:3])
        assert got == answers(memory.as_retriever(**PRESETS[name]), QUERIES[:3]), name
    assert st._units is None and st._unit_embeddings is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_served_answers_equal_the_in_memory_index(served, memory, name):
    kw = PRESETS[name]
    got, want = served.as_retriever(**kw), memory.as_retriever(**kw)
    assert answers(got) == answers(want)

    async def all_async():
        return await asyncio.gather(*[got.aretrieve(q) for q in QUERIES])

    for q, nodes in zip(QUERIES, asyncio.run(all_async())):
        assert [n.node.node_id for n in nodes] == [n.node.node_id for n in want.retrieve(q)], q


def test_filters_are_pushed_into_the_store_query_and_equal_memory(served, memory, monkeypatch):
    """On PostgreSQL the unit list is the served list's statement (filters inside), not a VectorStoreQuery."""
    seen = []
    lists = type(served._backend.served)
    original = lists.dense

    def spy(self, qvec, k, filters):
        seen.append(SimpleNamespace(filters=filters))
        return original(self, qvec, k, filters)

    monkeypatch.setattr(lists, "dense", spy)
    monkeypatch.setattr(
        type(served._backend.vector_store), "query", lambda *a, **k: pytest.fail("a served index queried the store")
    )
    land = MetadataFilters(filters=[MetadataFilter(key="topic", value="land")])
    sea_or_health = MetadataFilters(
        filters=[MetadataFilter(key="topic", value=["sea", "health"], operator=FilterOperator.IN)]
    )
    for filters, allowed in ((land, {"land"}), (sea_or_health, {"sea", "health"})):
        for kw in (PRESETS["ppr"], PRESETS["causalrag2"]):
            seen.clear()
            got = answers(served.as_retriever(filters=filters, **kw))
            assert got == answers(memory.as_retriever(filters=filters, **kw))
            assert seen and all(q.filters is filters for q in seen)  # the top-k is the store's, filtered
            ids = {i for nodes in got for i, _, _ in nodes}
            assert ids and {TOPIC[i.split("::")[0]] for i in ids} <= allowed
    nothing = MetadataFilters(filters=[MetadataFilter(key="no_such_key", value="x")])
    assert answers(served.as_retriever(filters=nothing)) == [[] for _ in QUERIES]


def test_another_objects_insert_is_seen_at_the_readers_next_query(pg_url, pg_table):
    first = make_docs(("drought", "reef", "insulin", "wheat"))
    build(first, stores=stores(pg_url, pg_table))
    reader = reopen(pg_url, pg_table)
    retriever = reader.as_retriever(similarity_top_k=6)  # made before the write, not remade
    before = answers(retriever)
    assert not any(n.node.node_id.startswith("fungi::") for n in retriever.retrieve("soil fungi decompose leaf litter"))
    writer = reopen(pg_url, pg_table)
    writer.insert(Document(text=TEXTS["fungi"], id_="fungi"))
    # the reader's next query reopens the state the writer committed (graph, unit ids) and answers from it
    got = retriever.retrieve("soil fungi decompose leaf litter")
    assert any(n.node.node_id.startswith("fungi::") for n in got)
    assert any(u.startswith("fungi::") for u in reader._state.unit_ids)
    writer.delete_ref_doc("fungi")
    assert answers(retriever) == before  # and the delete at the query after it
    writer.insert(Document(text=TEXTS["fungi"], id_="fungi"))
    fresh = reopen(pg_url, pg_table)
    assert any(u.startswith("fungi::") for u in fresh._state.unit_ids)
    got = fresh.as_retriever(similarity_top_k=6).retrieve("soil fungi decompose leaf litter")
    assert any(n.node.node_id.startswith("fungi::") for n in got)
    memory = build(first)
    memory.insert(Document(text=TEXTS["fungi"], id_="fungi"))
    assert answers(fresh.as_retriever(similarity_top_k=6)) == answers(memory.as_retriever(similarity_top_k=6))


def test_units_another_object_deleted_are_left_out_with_a_warning_not_an_error(pg_url, pg_table, caplog):
    """A state whose units another object deleted (a query between the rows' delete and the new
    state's commit reads one): those units fail as a filter fails, with a warning."""
    first = make_docs(("drought", "reef", "insulin", "wheat"))
    build(first, stores=stores(pg_url, pg_table))
    reader = reopen(pg_url, pg_table)  # opened before the delete, nothing read yet
    old = reader._state
    reopen(pg_url, pg_table).delete_ref_doc("reef")
    with caplog.at_level("WARNING"):
        reef = [i for i, u in enumerate(old.unit_ids) if u.startswith("reef::")]
        emb, ok = old._stored._vectors(np.arange(len(old.unit_ids)), None)
        got = reader.as_retriever(similarity_top_k=6).retrieve("coral reef bleaching")
    assert reef and not ok[reef].any() and ok[[i for i in range(len(ok)) if i not in reef]].all()
    assert "gone from the vector store" in caplog.text and "reopen the index" in caplog.text
    assert got and not any(n.node.ref_doc_id == "reef" for n in got)  # the query itself follows the delete
