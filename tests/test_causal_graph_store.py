"""CausalGraphIndex in a vector store + docstore + kvstore: the same results as the in-memory
index, reopened from the stores alone without embedding anything (Simple* stores written to disk
and read back, and PostgreSQL), updates written to the stores and undone there on a failure,
and stores that cannot serve the index refused."""

import asyncio
import json
from typing import List

import numpy as np
import pytest
from llama_index.core import Document, Settings, StorageContext
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from _update_helpers import assert_same_results
from llama_index_ext_causalrag.causal_graph import (
    CausalGraphIndex,
    ExtractiveSummarizer,
    OfflineEntityExtractor,
    OfflineGateJudge,
)
from llama_index_ext_causalrag.storage.persistence import CorruptIndexError
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import fetch_embeddings
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store, stored_node_ids

DIM = 32
COLLECTION = "causalrag/causalrag_index"
ROWS = RowIds("uuid5")  # how the indexes key their vector-store rows
TEXTS = {
    "drought": "Severe drought lowers soil moisture. Low soil moisture causes tree mortality. "
    "Tree mortality increases leaf litter. Leaf litter feeds soil fungi. "
    "Severe drought also reduces wheat yield. Heat waves cause severe drought.",
    "reef": "Ocean warming causes coral bleaching. Coral bleaching expels symbiotic algae. "
    "Losing symbiotic algae starves the reef fish. Heat waves cause ocean warming. "
    "Reef fish feed coastal fishermen.",
    "insulin": "Insulin resistance reduces glucose uptake. Low glucose uptake raises blood sugar. "
    "High blood sugar damages pancreatic cells. Obesity causes insulin resistance. "
    "Heat waves increase blood sugar in older adults.",
    "wheat": "Nitrogen fertilizer increases wheat yield. Wheat yield depends on root growth. "
    "Crop rotation improves root growth. Low soil moisture reduces wheat yield. "
    "Soil fungi help root growth.",
    "fungi": "Soil fungi decompose leaf litter. Decomposition releases soil nitrogen. "
    "Soil nitrogen supports root growth. Tree mortality leaves more leaf litter for soil fungi.",
    "coast": "Coastal fishermen depend on reef fish. Coral bleaching reduces reef fish. "
    "Ocean warming leads to coral bleaching. Obesity is common among coastal fishermen.",
}
QUERIES = [
    "what causes tree mortality?",
    "why does wheat yield drop in a drought?",
    "ocean warming and reef fish",
    "heat waves and blood sugar",
    "how do soil fungi help root growth?",
    "insulin resistance from obesity",
    "coastal fishermen income",
    "leaf litter decomposition releases nitrogen",
]
RETRIEVERS = {
    "causalrag2": lambda ix: ix.as_retriever(similarity_top_k=5),
    "graph_only_with_statements": lambda ix: ix.as_retriever(
        similarity_top_k=8, use_filter=False, include_summaries=True, include_statements=True
    ),
    "nogates": lambda ix: ix.as_retriever(preset="nogates", similarity_top_k=6),
}


class QueryOnlyEmbedding(RandomEmbedding):
    """Embeds queries; embedding any text for indexing fails the test."""

    def _get_text_embedding(self, text: str) -> List[float]:
        raise AssertionError(f"a reopened index embedded a text: {text[:60]!r}")


class RefusingKVStore(SimpleKVStore):
    def put(self, key, val, collection="data"):
        raise ConnectionRefusedError("kv went away")


@pytest.fixture(autouse=True)
def _no_settings_llm(monkeypatch):
    monkeypatch.setattr(Settings, "_llm", None)


def make_docs(names=tuple(TEXTS)):
    return [Document(text=TEXTS[n], id_=n) for n in names]


def changed(doc):
    return Document(text=doc.text.replace("Severe drought", "Long drought"), id_=doc.doc_id)


def build(documents=None, stores=None, model=None, **kw):
    """The offline build (keyphrases, extractive summaries, cue-sentence gates), in memory or,
    with ``stores`` = (vector store, docstore, kvstore or None), into the stores."""
    if stores is not None:
        vs, ds, kv = stores
        kw.update(storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds), kvstore=kv)
    return CausalGraphIndex.from_documents(
        documents if documents is not None else make_docs(),
        embed_model=model or RandomEmbedding(dim=DIM),
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        show_progress=False,
        chunk_size=24,
        max_cluster_size=3,
        min_entity_units=1,
        **kw,
    )


def simple():
    return SimpleVectorStore(), SimpleDocumentStore(), SimpleKVStore()


def reload_simple(stores, d):
    vs, ds, kv = stores
    vs.persist(str(d / "vector_store.json"))
    ds.persist(str(d / "docstore.json"))
    kv.persist(str(d / "kvstore.json"))
    return (
        SimpleVectorStore.from_persist_path(str(d / "vector_store.json")),
        SimpleDocumentStore.from_persist_path(str(d / "docstore.json")),
        SimpleKVStore.from_persist_path(str(d / "kvstore.json")),
    )


@pytest.fixture(scope="module")
def memory_index():
    index = build()
    index.unit_embeddings  # noqa: B018 - computed once, as as_retriever does
    return index


def results(index, queries=QUERIES):
    return {
        name: [[(n.node.node_id, n.score, n.node.text) for n in make(index).retrieve(q)] for q in queries]
        for name, make in RETRIEVERS.items()
    }


def assert_same_as(index, reference, queries=QUERIES):
    """retrieve and aretrieve give the reference's ids in its order, scores within 1e-6, same texts
    (the async calls in one event loop: PGVectorStore's async engine is bound to the first)."""
    made = {name: (make(index), make(reference)) for name, make in RETRIEVERS.items()}

    async def all_async():
        return {name: await asyncio.gather(*[got_r.aretrieve(q) for q in queries]) for name, (got_r, _) in made.items()}

    answers = asyncio.run(all_async())
    for name, (got_r, want_r) in made.items():
        assert_same_results(got_r, want_r, queries, tol=1e-6)
        for q, got in zip(queries, answers[name]):
            want = want_r.retrieve(q)
            assert [n.node.node_id for n in got] == [n.node.node_id for n in want], (name, q)
            assert [n.node.text for n in got] == [n.node.text for n in want], (name, q)
            assert np.allclose([n.score for n in got], [n.score for n in want], rtol=0, atol=1e-6), (name, q)


def assert_same_structure(index, reference, atol=0.0):
    """Graph (entities, relations, modules with summaries, gates), every vector (equal, or within
    ``atol`` after an update of a reopened index), the judged pairs and the known entity names."""
    assert index.graph.to_dict() == reference.graph.to_dict()
    assert [u.node_id for u in index.units] == [u.node_id for u in reference.units]
    assert [u.text for u in index.units] == [u.text for u in reference.units]
    for name in ("entity_embeddings", "module_embeddings", "unit_embeddings"):
        np.testing.assert_allclose(getattr(index, name), getattr(reference, name), rtol=0, atol=atol, err_msg=name)
    a, b = index._state.update, reference._state.update
    assert {k: (j.yes, j.score, j.reason) for k, j in a.judgements.items()} == {
        k: (j.yes, j.score, j.reason) for k, j in b.judgements.items()
    }
    assert sorted(a.names) == sorted(b.names)
    for n in a.names:  # an entity's name is stored once, as its (renormalised) entity row: last bits may move
        np.testing.assert_allclose(a.names[n], b.names[n], rtol=0, atol=1e-6, err_msg=n)


def vector_ids(vs):
    return stored_node_ids(vs)


def stored_graph(kv, namespace="causalrag"):
    """graph.json as the kvstore holds it (one chunk for these small indexes)."""
    coll = f"{namespace}/causalrag_index"
    head = kv.get("head", collection=coll)
    assert head["files"]["graph.json"] == {"encoding": "text", "chunks": 1}
    return head, json.loads(kv.get(f"{head['generation']}/graph.json/0", collection=coll)["text"])


# ---- build, what goes where, reopen ----------------------------------------------------------
def test_the_fixture_has_a_graph_worth_storing(memory_index):
    g = memory_index.graph
    assert len(memory_index.units) >= 10 and len(g.entities) >= 20 and g.relations and g.gates
    assert g.num_levels >= 2 and all(m.summary for m in g.modules.values())
    assert memory_index._backend.kind == "memory"


def test_what_goes_where(memory_index):
    vs, ds, kv = stores = simple()
    index = build(stores=stores)
    unit_ids = [u.node_id for u in memory_index.units]
    assert vector_ids(vs) == set(unit_ids) == set(ds.docs)
    np.testing.assert_array_equal(fetch_embeddings(vs, unit_ids, row_ids=ROWS), memory_index.unit_embeddings)
    assert ds.get_node(unit_ids[0]).text == memory_index.units[0].text
    head, graph = stored_graph(kv)
    assert head["class"] == "CausalGraphIndex@store"
    assert {
        "graph.json",
        "entity_embeddings.npy",
        "module_embeddings.npy",
        "update.json",
        "stats.json",
        "params.json",
    } <= set(head["files"])
    assert not {"docstore.json", "unit_embeddings.npy"} & set(head["files"])  # the stores hold those
    assert graph == memory_index.graph.to_dict()
    assert_same_as(index, memory_index)


def test_simple_stores_on_disk_reopen_identical_without_embedding(memory_index, tmp_path):
    stores = simple()
    index = build(stores=stores)
    fresh = QueryOnlyEmbedding(dim=DIM)
    vs, ds, kv = reload_simple(stores, tmp_path)
    reopened = CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=fresh)
    assert_same_as(reopened, memory_index)
    assert_same_structure(reopened, index)
    assert_same_structure(reopened, memory_index)
    assert reopened.params == index.params and reopened.build_stats == index.build_stats
    assert fresh.query_calls > 0 and fresh.text_calls == 0


def test_persist_dir_instead_of_a_kvstore(memory_index, tmp_path):
    vs, ds, _ = simple()
    index = build(stores=(vs, ds, None))
    index.persist(tmp_path / "graph")
    assert (tmp_path / "graph" / "graph.json").exists()
    assert (
        not (tmp_path / "graph" / "docstore.json").exists()
        and not (tmp_path / "graph" / "unit_embeddings.npy").exists()
    )
    reopened = CausalGraphIndex.from_vector_store(vs, ds, tmp_path / "graph", embed_model=QueryOnlyEmbedding(dim=DIM))
    assert_same_as(reopened, memory_index, QUERIES[:4])
    assert_same_structure(reopened, index)
    with pytest.raises(
        ValueError,
        match="holds a CausalGraphIndex@store, not a CausalGraphIndex; load it with CausalGraphIndex.from_vector_store",
    ):
        CausalGraphIndex.from_persist_dir(tmp_path / "graph")


def test_from_nodes_into_stores(memory_index):
    vs, ds, kv = simple()
    index = CausalGraphIndex.from_nodes(
        memory_index.units,
        embed_model=RandomEmbedding(dim=DIM),
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        show_progress=False,
        max_cluster_size=3,
        min_entity_units=1,
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        kvstore=kv,
    )
    assert vector_ids(vs) == {u.node_id for u in memory_index.units}
    reopened = CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=QueryOnlyEmbedding(dim=DIM))
    assert reopened.graph.to_dict() == memory_index.graph.to_dict()
    assert_same_as(reopened, index, QUERIES[:4])


# ---- updates ------------------------------------------------------------------------------------
def update(index):
    docs = make_docs()
    index.insert(docs[4])
    assert index.refresh_ref_docs([changed(docs[0]), docs[1]]) == [True, False]
    index.delete_ref_doc("insulin")


def test_updates_write_to_simple_stores_and_equal_the_in_memory_updates(tmp_path):
    memory = build(make_docs()[:4])
    stores = simple()
    index = build(make_docs()[:4], stores=stores)
    update(memory)
    update(index)
    assert_same_structure(index, memory)
    assert_same_as(index, memory)
    vs, ds, kv = stores
    unit_ids = [u.node_id for u in memory.units]
    assert vector_ids(vs) == set(unit_ids) == set(ds.docs)
    assert not any(i.startswith("insulin::") for i in unit_ids)
    np.testing.assert_array_equal(fetch_embeddings(vs, unit_ids, row_ids=ROWS), memory.unit_embeddings)
    assert ds.get_node("drought::0").text.startswith("Long drought")
    assert stored_graph(kv)[1] == memory.graph.to_dict()
    model = RandomEmbedding(dim=DIM)
    reopened = CausalGraphIndex.from_vector_store(
        *reload_simple(stores, tmp_path)[:2],
        embed_model=model,
        kvstore=SimpleKVStore.from_persist_path(str(tmp_path / "kvstore.json")),
    )
    assert_same_as(reopened, memory)
    # an update of the reopened index (offline extractions recomputed from the docstore's units), also to a folder
    model.text_calls = 0
    reopened.insert(make_docs()[5], persist_dir=tmp_path / "state")
    memory.insert(make_docs()[5])
    assert 0 < model.text_calls
    assert_same_structure(reopened, memory, atol=1e-6)
    assert_same_as(reopened, memory, QUERIES[:4])
    from_dir = CausalGraphIndex.from_vector_store(
        reopened._backend.vector_store,
        reopened._backend.docstore,
        tmp_path / "state",
        embed_model=QueryOnlyEmbedding(dim=DIM),
    )
    assert_same_as(from_dir, memory, QUERIES[:4])


def snapshot(index, stores):
    vs, ds, _ = stores
    unit_ids = sorted(vector_ids(vs))
    return (
        unit_ids,
        fetch_embeddings(vs, unit_ids, row_ids=ROWS).tolist(),
        {i: ds.get_node(i).text for i in ds.docs},
        [u.node_id for u in index.units],
        index.graph.to_dict(),
        results(index, QUERIES[:4]),
    )


def test_failed_kvstore_write_leaves_stores_and_index_as_they_were():
    stores = simple()
    index = build(make_docs()[:4], stores=stores)
    before = snapshot(index, stores)
    index._backend.kv.kvstore = RefusingKVStore(
        data=index._backend.kv.kvstore._collections_mappings
    )  # reads see the index
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        index.insert(make_docs()[4])
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        index.refresh_ref_docs([changed(make_docs()[0])])
    with pytest.raises(ConnectionError, match="cannot write to the kvstore"):
        index.delete_ref_doc("reef")
    assert snapshot(index, stores) == before
    assert stores[1].get_node("drought::0").text.startswith("Severe drought")  # the refreshed text was rolled back
    reopened = CausalGraphIndex.from_vector_store(
        stores[0], stores[1], kvstore=stores[2], embed_model=RandomEmbedding(dim=DIM)
    )
    assert snapshot(reopened, stores) == before


def test_failed_vector_write_puts_the_old_rows_back(monkeypatch):
    stores = simple()
    index = build(make_docs()[:4], stores=stores)
    before = snapshot(index, stores)
    orig, calls = SimpleVectorStore.add, []

    def drops_once(self, nodes, **kw):
        calls.append(len(nodes))
        if len(calls) == 1:
            raise ConnectionRefusedError("dropped")
        return orig(self, nodes, **kw)

    monkeypatch.setattr(SimpleVectorStore, "add", drops_once)
    with pytest.raises(ConnectionError, match="could not write to the vector store"):
        index.refresh_ref_docs([changed(make_docs()[0])])
    assert len(calls) == 2  # the failed write, then the old rows put back
    assert snapshot(index, stores) == before


# ---- stores that cannot serve the index ------------------------------------------------------------
def test_bad_input(tmp_path):
    vs, ds, kv = stores = simple()
    build(stores=stores)
    model = RandomEmbedding(dim=DIM)
    with pytest.raises(ValueError, match="already holds nodes"):
        build(stores=(vs, SimpleDocumentStore(), SimpleKVStore()), model=model)
    with pytest.raises(ValueError, match="already holds a CausalGraphIndex@store"):
        build(stores=(SimpleVectorStore(), SimpleDocumentStore(), kv), model=model)
    with pytest.raises(ValueError, match="holds 32-dimensional embeddings, the embed_model gives 16"):
        build(stores=(vs, SimpleDocumentStore(), None), model=RandomEmbedding(dim=16))
    assert model.text_calls == 0
    with pytest.raises(ValueError, match="dimension"):
        CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=16))
    with pytest.raises(ValueError, match="exactly one of persist_dir="):
        CausalGraphIndex.from_vector_store(vs, ds, embed_model=model)
    with pytest.raises(ValueError, match="pass storage_context= too"):
        build(kvstore=kv)
    with pytest.raises(ValueError, match=r"lacks the index.s vectors \(13 units"):
        CausalGraphIndex.from_vector_store(SimpleVectorStore(), ds, kvstore=kv, embed_model=model)
    with pytest.raises(ValueError, match="the docstore lacks units"):
        CausalGraphIndex.from_vector_store(vs, SimpleDocumentStore(), kvstore=kv, embed_model=model)
    with pytest.raises(FileNotFoundError, match="holds no index"):
        CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, namespace="other", embed_model=model)


def test_another_index_in_the_stores_is_refused():
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    vs, ds, kv = simple()
    MultiGranularityIndex.from_documents(
        make_docs()[:2],
        granularities=(1, 2),
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        kvstore=kv,
    )
    with pytest.raises(ValueError, match="holds a MultiGranularityIndex@store, not a CausalGraphIndex@store"):
        CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
    model = RandomEmbedding(dim=DIM)
    with pytest.raises(ValueError, match="already holds a MultiGranularityIndex@store"):
        build(stores=(SimpleVectorStore(), SimpleDocumentStore(), kv), model=model)
    with pytest.raises(ValueError, match="already holds nodes"):
        build(stores=(vs, SimpleDocumentStore(), SimpleKVStore()), model=model)
    assert model.text_calls == 0
    cg_vs, cg_ds, cg_kv = stores = simple()
    build(stores=stores)
    with pytest.raises(ValueError, match="holds a CausalGraphIndex@store, not a MultiGranularityIndex@store"):
        MultiGranularityIndex.from_vector_store(cg_vs, cg_ds, kvstore=cg_kv, embed_model=RandomEmbedding(dim=DIM))


def test_changed_kv_value_is_refused():
    vs, ds, kv = stores = simple()
    build(stores=stores)
    head = kv.get("head", collection=COLLECTION)
    key = f"{head['generation']}/graph.json/0"
    value = kv.get(key, collection=COLLECTION)
    kv.put(key, {"text": value["text"].replace("drought", "flood")}, collection=COLLECTION)
    with pytest.raises(CorruptIndexError, match="graph.json does not match"):
        CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))


def test_unreachable_database_is_named_and_nothing_is_embedded(tmp_path):
    from test_store_bad_input import closed_port, unreachable_store

    port, vs = unreachable_store()
    ds, model = SimpleDocumentStore(), RandomEmbedding(dim=DIM)
    with pytest.raises(ConnectionError) as err:
        build(stores=(vs, ds, SimpleKVStore()), model=model)
    assert f"127.0.0.1:{port}/umg" in str(err.value) and "table 'units'" in str(err.value)
    assert "secret" not in str(err.value)
    assert model.text_calls == 0 and not ds.docs

    from llama_index.storage.kvstore.postgres import PostgresKVStore

    kv_port = closed_port()
    kv = PostgresKVStore(
        table_name="state",
        connection_string=f"postgresql+psycopg2://u:secret@127.0.0.1:{kv_port}/kv",
        async_connection_string=f"postgresql+asyncpg://u:secret@127.0.0.1:{kv_port}/kv",
    )
    with pytest.raises(ConnectionError, match=f"cannot reach the kvstore .*127.0.0.1:{kv_port}/kv") as err:
        build(stores=(SimpleVectorStore(), ds, kv), model=model)
    assert "secret" not in str(err.value) and model.text_calls == 0 and not ds.docs

    good_vs, good_ds, _ = simple()
    build(stores=(good_vs, good_ds, None)).persist(tmp_path / "graph")
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}/umg"):
        CausalGraphIndex.from_vector_store(vs, good_ds, tmp_path / "graph", embed_model=RandomEmbedding(dim=DIM))


# ---- PostgreSQL + pgvector --------------------------------------------------------------------
def pg(pg_url, table, kv_table):
    return pg_vector_store(pg_url, table, DIM), pg_docstore(pg_url, table + "_docs"), pg_kvstore(pg_url, kv_table)


@pytest.mark.postgres
def test_postgres_index_equals_in_memory_and_reopens_without_embedding(memory_index, pg_url, pg_table):
    kv_table = pg_table + "_kv"
    index = build(stores=pg(pg_url, pg_table, kv_table))
    assert_same_as(index, memory_index)
    fresh = QueryOnlyEmbedding(dim=DIM)
    vs, ds, kv = pg(pg_url, pg_table, kv_table)  # new connections: what another process would open
    reopened = CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=fresh)
    assert type(reopened._backend.docstore).__name__ == "PostgresDocumentStore"
    assert_same_as(reopened, memory_index)
    assert_same_structure(reopened, memory_index)
    assert fresh.query_calls > 0 and fresh.text_calls == 0
    assert vector_ids(vs) == {u.node_id for u in memory_index.units}
    head, graph = stored_graph(pg_kvstore(pg_url, kv_table), namespace=pg_table)
    assert head["class"] == "CausalGraphIndex@store" and head["vector_store"] == {
        "class": "PGVectorStore",
        "table": pg_table,
    }
    assert graph == memory_index.graph.to_dict()
    assert graph["gates"] and all(m["summary"] for m in graph["modules"])


@pytest.mark.postgres
def test_postgres_insert_and_delete_through_the_stores(pg_url, pg_table):
    kv_table = pg_table + "_kv"
    memory = build(make_docs()[:4])
    index = build(make_docs()[:4], stores=pg(pg_url, pg_table, kv_table))
    update(memory)
    update(index)
    assert_same_as(index, memory, QUERIES[:4])
    vs, ds, kv = pg(pg_url, pg_table, kv_table)
    assert vector_ids(vs) == {u.node_id for u in memory.units}
    assert ds.get_node("drought::0").text.startswith("Long drought")
    assert ds.get_node("insulin::0", raise_error=False) is None
    reopened = CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
    assert_same_structure(reopened, memory)
    assert_same_as(reopened, memory)


@pytest.mark.postgres
def test_postgres_table_and_namespace_of_another_index_are_refused(pg_url, pg_table):
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    kv_table = pg_table + "_kv"
    vs, ds, kv = pg(pg_url, pg_table, kv_table)
    MultiGranularityIndex.from_documents(
        make_docs()[:2],
        granularities=(1, 2),
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=StorageContext.from_defaults(vector_store=vs, docstore=ds),
        kvstore=kv,
    )
    vs, ds, kv = pg(pg_url, pg_table, kv_table)
    with pytest.raises(ValueError, match="holds a MultiGranularityIndex@store, not a CausalGraphIndex@store"):
        CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))
    model = RandomEmbedding(dim=DIM)
    with pytest.raises(ValueError, match="already holds nodes"):
        build(stores=(vs, SimpleDocumentStore(), None), model=model)
    with pytest.raises(ValueError, match="already holds a MultiGranularityIndex@store"):
        build(
            stores=(pg_vector_store(pg_url, pg_table + "_new", DIM), SimpleDocumentStore(), kv),
            model=model,
            namespace=pg_table,
        )
    assert model.text_calls == 0
