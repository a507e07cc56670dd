"""A CausalGraphIndex built into PostgreSQL keeps its units' terms in the database: a reopened index
reads no unit and no posting, and each query's lexical unit scores come from one statement over the
store's postings (``causal_graph/unit_terms.py``), equal to the in-memory postings' scores bit for bit.

On both test servers: PostgreSQL 16 and PostgreSQL 18 with pg_textsearch (postings tables on both:
an overlap needs every unit holding a term, not a top-k)."""

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph import backend as cg_backend
from llama_index_ext_causalrag.causal_graph.retriever import terms_of
from llama_index_ext_causalrag.causal_graph.unit_terms import TERMS_FILE, ServedTerms, TermPostings
from llama_index_ext_causalrag.causal_graph.units import unit_texts
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_causal_graph_served import PRESETS, TOPIC, answers, docs_with_topics, plots
from test_causal_graph_store import DIM, QUERIES, TEXTS, build, changed, make_docs

pytestmark = pytest.mark.postgres

LEX_QUERIES = [*QUERIES, "plot sampled drought wheat", "quantum chromodynamics", "the of and", ""]
LAND = MetadataFilters(filters=[MetadataFilter(key="topic", value="land")])
SEA_OR_HEALTH = MetadataFilters(
    filters=[MetadataFilter(key="topic", value=["sea", "health"], operator=FilterOperator.IN)]
)
NO_SUCH_KEY = MetadataFilters(filters=[MetadataFilter(key="no_such_key", value="x")])


@pytest.fixture(params=["pg_url", "pg_ext_url"])
def server(request):
    return request.getfixturevalue(request.param)


def stores(url, table):
    return pg_vector_store(url, table, DIM), pg_docstore(url, table + "_docs"), pg_kvstore(url, table + "_kv")


def reopen(url, table):
    vs, ds, kv = stores(url, table)
    return CausalGraphIndex.from_vector_store(vs, ds, kvstore=kv, embed_model=RandomEmbedding(dim=DIM))


def served_lex(index, filters=None):
    src = index._state._stored
    assert isinstance(src.postings, ServedTerms)
    return [src.postings.lexical(sorted(terms_of(q)), len(src.ids), filters) for q in LEX_QUERIES]


def memory_lex(index):
    """The in-memory postings' scores over ``index``'s units, in its unit order."""
    postings = TermPostings.from_texts(unit_texts(index.units), terms_of)
    return [postings.lexical(sorted(terms_of(q)), len(index.units)) for q in LEX_QUERIES]


def assert_lex_equal(got, want):
    for q, g, w in zip(LEX_QUERIES, got, want):
        assert g.shape == w.shape and np.array_equal(g, w), q  # the same float: count / distinct terms


def test_open_reads_no_unit_and_no_posting_and_answers_as_in_memory(server, pg_table, monkeypatch, tmp_path):
    memory = build(plots())
    build(plots(), stores=stores(server, pg_table))

    def refuse(*args, **kwargs):
        raise AssertionError("the open read the units' postings or texts")

    monkeypatch.setattr(TermPostings, "load", refuse)
    monkeypatch.setattr(TermPostings, "from_texts", refuse)
    monkeypatch.setattr(
        cg_backend, "get_nodes_at_once", lambda ds, ids: refuse() if len(ids) > 2 else [ds.get_node(i) for i in ids]
    )
    index = reopen(server, pg_table)
    monkeypatch.undo()
    assert index._state.unit_ids == [u.node_id for u in memory.units]  # ids in the process, no posting
    assert "unit terms from the served lists" in index._backend.describe()
    lex = served_lex(index)
    assert any(v.any() for v in lex) and not lex[-1].any() and not lex[-2].any()  # stop words only: no term
    assert_lex_equal(lex, memory_lex(memory))
    for name in sorted(PRESETS):
        assert answers(index.as_retriever(**PRESETS[name])) == answers(memory.as_retriever(**PRESETS[name])), name
    idf_terms = sorted(terms_of(" ".join(QUERIES)) | {"no_such_term"})
    assert index.as_retriever().unit_idf(idf_terms) == memory.as_retriever().unit_idf(idf_terms)
    index.persist(tmp_path / "ix")  # the state's folder holds no postings either
    assert not (tmp_path / "ix" / TERMS_FILE).exists()
    assert (
        CausalGraphIndex.from_vector_store(
            *stores(server, pg_table)[:2], persist_dir=tmp_path / "ix", embed_model=RandomEmbedding(dim=DIM)
        )._state._stored.postings.nbytes
        == 0
    )


def test_filters_go_into_the_terms_statement(server, pg_table):
    memory = build(docs_with_topics())
    build(docs_with_topics(), stores=stores(server, pg_table))
    index = reopen(server, pg_table)
    want = memory_lex(memory)
    topic = np.array([TOPIC[u.ref_doc_id] for u in memory.units])
    for filters, allowed in ((LAND, {"land"}), (SEA_OR_HEALTH, {"sea", "health"})):
        keep = np.isin(topic, sorted(allowed))
        assert keep.any() and not keep.all()
        assert_lex_equal(served_lex(index, filters), [np.where(keep, w, 0.0) for w in want])  # outside: 0
        for kw in (PRESETS["ppr"], PRESETS["causalrag2"]):
            got = answers(index.as_retriever(filters=filters, **kw))
            assert got == answers(memory.as_retriever(filters=filters, **kw))
    assert not any(v.any() for v in served_lex(index, NO_SUCH_KEY))  # a key no unit has: nothing, no error
    assert answers(index.as_retriever(filters=NO_SUCH_KEY)) == [[] for _ in QUERIES]


def test_updates_keep_the_terms_current_for_a_second_reader(server, pg_table):
    first = make_docs(("drought", "reef", "insulin", "wheat"))
    build(first, stores=stores(server, pg_table))
    reader = reopen(server, pg_table)
    retriever = reader.as_retriever(similarity_top_k=6)  # made before the writes, not remade
    retriever.retrieve(QUERIES[0])
    writer = reopen(server, pg_table)
    memory = build(first)
    steps = [
        ("insert", lambda ix: ix.insert(Document(text=TEXTS["fungi"], id_="fungi"))),
        ("refresh", lambda ix: ix.refresh_ref_docs([changed(Document(text=TEXTS["drought"], id_="drought"))])),
        ("delete", lambda ix: ix.delete_ref_doc("reef")),
    ]
    for name, step in steps:
        step(writer)
        step(memory)
        retriever.retrieve(QUERIES[0])  # the reader's next query follows the writer's state
        current = retriever._current()._index
        assert current._state.unit_ids == [u.node_id for u in memory.units], name
        assert_lex_equal(served_lex(current), memory_lex(memory))
        assert answers(retriever) == answers(memory.as_retriever(similarity_top_k=6)), name
    assert any(u.startswith("fungi::") for u in reader._state.unit_ids)


def test_a_failed_update_leaves_the_terms_as_they_were(pg_url, pg_table, monkeypatch):
    first = make_docs(("drought", "reef", "insulin", "wheat"))
    built = build(first, stores=stores(pg_url, pg_table))
    memory = build(first)

    def fail(*args, **kwargs):
        raise RuntimeError("killed before the state was saved")

    monkeypatch.setattr(cg_backend.StoresBackend, "_save_state", fail)
    with pytest.raises(RuntimeError, match="killed"):
        built.insert(Document(text=TEXTS["fungi"], id_="fungi"))
    with pytest.raises(RuntimeError, match="killed"):
        built.delete_ref_doc("reef")
    monkeypatch.undo()
    index = reopen(pg_url, pg_table)
    served = index._backend.served
    ids, _ = served.overlap(sorted(terms_of(TEXTS["fungi"] + " " + TEXTS["reef"])))
    assert not any(i.startswith("fungi::") for i in ids) and any(i.startswith("reef::") for i in ids)
    assert served.doc_freq(sorted(terms_of(TEXTS["fungi"]))) == TermPostings.from_texts(
        unit_texts(memory.units), terms_of
    ).doc_freq(sorted(terms_of(TEXTS["fungi"])))
    assert_lex_equal(served_lex(index), memory_lex(memory))
    built.insert(Document(text=TEXTS["fungi"], id_="fungi"))  # the writer goes on from the old state
    memory.insert(Document(text=TEXTS["fungi"], id_="fungi"))
    assert_lex_equal(served_lex(reopen(pg_url, pg_table)), memory_lex(memory))
