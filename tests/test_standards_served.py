"""A StandardsIndex built into PostgreSQL and reopened reads no unit and answers from the store.

On both test servers: PostgreSQL 16 (BM25 from postings tables) and PostgreSQL 18 with
pg_textsearch (BM25 candidates from its bm25 index). Results equal the in-memory index's (ids in
order; scores within 1e-6: the database's cosines are double precision, the in-memory float32).
"""

import logging

import pytest
from llama_index.core import Document
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from _update_helpers import assert_same_results
from fakes import HashEmbedding
from llama_index_ext_causalrag import StandardsIndex
from llama_index_ext_causalrag.standards import backend as standards_backend
from llama_index_ext_causalrag.standards.served import ServedStructureAwareRetriever
from llama_index_ext_causalrag.storage import stores
from standards_fixtures import TOY_RECOVERY
from store_helpers import pg_docstore, pg_kvstore, pg_vector_store
from test_standards_store import DIM, QUERIES, build, docs, parser

pytestmark = pytest.mark.postgres

NO_MATCH = "zzzz qqqq"  # no BM25 term in the corpus: every unit ranked densely
ALL_QUERIES = [*QUERIES, NO_MATCH]
SETTINGS = [
    {},
    {"preset": "paper"},
    {"neighbour_pick": "fused", "max_per_section": 1},
    {"use_bm25": False},
    {"prefilter_k": 3, "similarity_top_k": 4},
    {"prefilter_k": None, "graph_rerank": False},
    {"expand": False},
]


@pytest.fixture(params=["pg_url", "pg_ext_url"])
def server(request):
    return request.getfixturevalue(request.param)


def stores_of(url, table):
    return (
        pg_vector_store(url, table, DIM),
        pg_docstore(url, table + "_docs"),
        pg_kvstore(url, table + "_kv"),
    )


def reopen(url, table):
    vs, ds, kv = stores_of(url, table)
    return StandardsIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=HashEmbedding())


def memory(documents=None):
    return StandardsIndex.from_documents(documents or docs(), parser=parser(), embed_model=HashEmbedding())


def test_reopened_index_reads_no_unit_and_answers_as_in_memory(server, pg_table, monkeypatch):
    built = build(*stores_of(server, pg_table))
    want = memory()

    def refuse(*args, **kwargs):
        raise AssertionError("a served index read every unit at open")

    for name in ("get_nodes_at_once", "fetch_embeddings"):
        monkeypatch.setattr(standards_backend, name, refuse)
    monkeypatch.setattr(stores, "all_nodes", refuse)
    served = reopen(server, pg_table)
    monkeypatch.undo()
    assert served.unit_ids == [] and len(served.graph) == 0  # nothing of the corpus in the process
    assert isinstance(served.as_retriever(), ServedStructureAwareRetriever)
    assert not isinstance(built.as_retriever(), ServedStructureAwareRetriever)  # the builder holds its units
    assert "served by" in served._backend.describe()
    for kw in SETTINGS:
        assert_same_results(served.as_retriever(**kw), want.as_retriever(**kw), [*QUERIES, NO_MATCH], tol=1e-6)


def test_kvstore_holds_parameters_only(pg_url, pg_table):
    vs, ds, kv = stores_of(pg_url, pg_table)
    build(vs, ds, kv)
    files = kv.get("head", collection=f"{pg_table}/causalrag_index")["files"]
    assert sorted(files) == ["manifest.json", "params.json"]


def test_filters_go_into_the_statements(pg_url, pg_table):
    build(*stores_of(pg_url, pg_table))
    served, want = reopen(pg_url, pg_table), memory()
    only = MetadataFilters(filters=[MetadataFilter(key="doc_id", value="rfc9991")])
    kinds = MetadataFilters(filters=[MetadataFilter(key="node_kind", value="chunk", operator=FilterOperator.NE)])
    nobody = MetadataFilters(filters=[MetadataFilter(key="no_such_key", value="x")])
    for f in (only, kinds):
        got_r = served.as_retriever(filters=f)
        assert_same_results(got_r, want.as_retriever(filters=f), [*QUERIES, NO_MATCH], tol=1e-6)
    assert {n.node.metadata["doc_id"] for q in QUERIES for n in served.as_retriever(filters=only).retrieve(q)} == {
        "rfc9991"
    }
    assert served.as_retriever(filters=nobody).retrieve(QUERIES[0]) == []


def test_an_update_is_seen_by_another_index_object(pg_url, pg_table, caplog):
    first = [d for d in docs() if d.doc_id != "rfc9991"]
    built = build(*stores_of(pg_url, pg_table), documents=first)
    served = reopen(pg_url, pg_table)
    retriever = served.as_retriever()
    assert_same_results(retriever, memory(first).as_retriever(), QUERIES, tol=1e-6)
    built.insert(Document(text=TOY_RECOVERY, id_="rfc9991"))  # cites rfc9990: its units' records change too
    assert_same_results(retriever, memory().as_retriever(), QUERIES, tol=1e-6)
    changed = Document(text=TOY_RECOVERY.replace("loss", "drop"), id_="rfc9991")
    built.refresh_ref_docs([changed])
    assert_same_results(retriever, memory([*first, changed]).as_retriever(), QUERIES, tol=1e-6)
    built.delete_ref_doc("rfc9991")
    assert_same_results(retriever, memory(first).as_retriever(), QUERIES, tol=1e-6)
    with pytest.raises(ValueError, match="parsed documents"):
        served.insert(Document(text=TOY_RECOVERY, id_="rfc9991"))


def test_smoothing_is_refused_naming_the_fix(pg_url, pg_table):
    build(*stores_of(pg_url, pg_table))
    served = reopen(pg_url, pg_table)
    with pytest.raises(ValueError, match="smoothing_alpha=0.5.*in memory"):
        served.as_retriever(smoothing_alpha=0.5)
    with pytest.raises(ValueError, match="holds no graph"):
        _ = served.as_retriever().graph


def test_budget_cut_uses_the_stores_idf(pg_url, pg_table, caplog):
    build(*stores_of(pg_url, pg_table))
    served, want = reopen(pg_url, pg_table), memory()
    kw = {"budget_tokens": 40, "fit_mode": "sentences"}
    with caplog.at_level(logging.WARNING):
        assert_same_results(served.as_retriever(**kw), want.as_retriever(**kw), QUERIES, tol=1e-6)
    terms = want.as_retriever()._sparse.tokenizer("loss detection packets")
    assert served.as_retriever().query_evidence().idf(terms) == pytest.approx(
        want.as_retriever().query_evidence().idf(terms), rel=1e-9
    )


def test_explain_of_a_served_query_names_its_stages(pg_url, pg_table):
    import json

    build(*stores_of(pg_url, pg_table))
    served, want = reopen(pg_url, pg_table), memory()
    got, ref = served.as_retriever().explain(QUERIES[0]), want.as_retriever().explain(QUERIES[0])
    assert [s["name"] for s in got.stages] == [s["name"] for s in ref.stages]
    assert [n.node.node_id for n in got.nodes] == [n.node.node_id for n in ref.nodes]
    d = got.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert any(n["label"] != n["id"] for n in d["graph"]["nodes"])  # section paths of the returned nodes


def test_a_failed_update_leaves_the_served_index_as_it_was(pg_url, pg_table, monkeypatch):
    first = [d for d in docs() if d.doc_id != "rfc9991"]
    built = build(*stores_of(pg_url, pg_table), documents=first)
    served = reopen(pg_url, pg_table)

    def fail(*args, **kwargs):
        raise RuntimeError("killed before the state was saved")

    monkeypatch.setattr(standards_backend.StoresBackend, "_save", fail)
    with pytest.raises(RuntimeError, match="killed"):
        built.insert(Document(text=TOY_RECOVERY, id_="rfc9991"))
    monkeypatch.undo()
    assert_same_results(served.as_retriever(), memory(first).as_retriever(), ALL_QUERIES, tol=1e-6)
    assert_same_results(reopen(pg_url, pg_table).as_retriever(), memory(first).as_retriever(), ALL_QUERIES, tol=1e-6)
    built.insert(Document(text=TOY_RECOVERY, id_="rfc9991"))  # the writer goes on from the old state
    assert_same_results(served.as_retriever(), memory().as_retriever(), ALL_QUERIES, tol=1e-6)


def test_a_served_index_persists_its_parameters_and_reopens_from_them(pg_url, pg_table, tmp_path):
    built = build(*stores_of(pg_url, pg_table))
    reopen(pg_url, pg_table).persist(tmp_path / "a")
    built.persist(tmp_path / "b")
    for d in ("a", "b"):
        assert sorted(p.name for p in (tmp_path / d).iterdir()) == ["manifest.json", "params.json"]
        vs, ds, _ = stores_of(pg_url, pg_table)
        again = StandardsIndex.from_vector_store(vs, ds, persist_dir=tmp_path / d, embed_model=HashEmbedding())
        assert_same_results(again.as_retriever(), memory().as_retriever(), QUERIES, tol=1e-6)
