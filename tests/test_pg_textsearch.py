"""BM25 lists from pg_textsearch's bm25 index (PostgreSQL 18 + pg_textsearch, ``pg_ext_url``):
each token one lexeme; every list bm25s's (scored by the index: up to its one-byte lengths; or its
candidates scored again exactly); filtered lists not short; updates in the index and seen by a
second reader; a failed update; bad queries answered; a restart. Without the extension
(``pg_url``, PostgreSQL 16), the postings tables, said at build and in explain()."""

import logging
import math
from collections import Counter

import numpy as np
import pytest
import sqlalchemy
from llama_index.core import Document, QueryBundle, StorageContext
from llama_index.core.vector_stores.types import ExactMatchFilter, MetadataFilters

from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
from llama_index_ext_causalrag.storage.pg import textsearch as ts
from pg_fixture import driver_url
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, make_docs

pytestmark = pytest.mark.postgres
K1, B, K = 1.5, 0.75, 10


def build(url, table, docs=None):
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(url, table, DIM), docstore=pg_docstore(url, table + "_docs")
    )
    return MultiGranularityIndex.from_documents(
        docs or make_docs(),
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=ctx,
        kvstore=pg_kvstore(url, table + "_kv"),
    )


def reopen(url, table):
    return MultiGranularityIndex.from_vector_store(
        pg_vector_store(url, table, DIM),
        pg_docstore(url, table + "_docs"),
        kvstore=pg_kvstore(url, table + "_kv"),
        embed_model=RandomEmbedding(dim=DIM),
    )


class Reference(dict):
    """``{g: [(id, score)]}``: bm25s's lists, best first; beside them, ``{g: {id: value}}`` for
    every unit scored: ``index``, the score pg_textsearch computes (its one-byte length);
    ``corrected``, that score moved to the exact length at one occurrence a term; ``once``, whether
    each query term in the unit occurs once; ``rounded``, whether its length is kept rounded."""

    def __init__(self):
        super().__init__()
        self.index, self.corrected, self.once, self.rounded = {}, {}, {}, {}


def reference_lists(memory, query, k):
    """:class:`Reference`: bm25s's BM25 of every list of ``memory`` (an in-memory index) for
    ``query``, in float64, best first, ties by id descending."""
    from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer

    terms = Counter(BM25Tokenizer()(query))
    out = Reference()
    for g in GS:
        units = [
            (u.node_id, Counter(t))
            for u, t in zip(memory._state.units, memory._state.tokens)
            if u.metadata["umg_granularity"]
            <= g
            <= u.metadata.get("umg_granularity_max", u.metadata["umg_granularity"])
        ]
        n, avgdl = len(units), sum(sum(c.values()) for _, c in units) / len(units)
        df = Counter(t for _, c in units for t in c)
        scored = []
        out.index[g], out.corrected[g], out.once[g], out.rounded[g] = {}, {}, {}, {}
        for nid, c in units:
            dl = sum(c.values())
            norm, stored = (K1 * (1 - B + B * x / avgdl) for x in (dl, ts.stored_length(dl)))
            idf = {t: w * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t, w in terms.items() if c[t]}
            s = sum(v * c[t] / (c[t] + norm) for t, v in idf.items())
            if s > 0:
                scored.append((nid, s))
                out.index[g][nid] = sum(v * c[t] / (c[t] + stored) for t, v in idf.items())
                out.corrected[g][nid] = out.index[g][nid] * (1 + stored) / (1 + norm)
                out.once[g][nid] = all(c[t] == 1 for t in idf)
                out.rounded[g][nid] = ts.stored_length(dl) != dl
        scored.sort(key=lambda p: p[0], reverse=True)  # ties by id, descending
        out[g] = sorted(scored, key=lambda p: -float(f"{p[1]:.6g}"))
    return out


def sparse_lists(index, query, k, filters=None):
    found = index.as_fusion_retriever().source.lists(QueryBundle(query), k, filters)
    return {g: list(zip(r.ids, r.scores)) for (e, g), r in found.items() if e == "sparse"}


def assert_lists_equal(got, want, gs=GS):
    """``got`` (a source's lists) is ``want`` (full reference lists): the same scores, in order, and
    the same ids; among equal scores, the bm25 index hands over any of them when more than
    TIE_MARGIN tie at the cut (the caller orders the ones it got by id)."""
    from llama_index_ext_causalrag.experts.dense import TIE_MARGIN

    for g in gs:
        assert len(got[g]) == min(K, len(want[g])), g
        ref = want[g][: len(got[g])]
        assert [s for _, s in got[g]] == pytest.approx([s for _, s in ref], rel=6e-6), g
        for (i, s), (j, _) in zip(got[g], ref):
            tied = [u for u, t in want[g] if t == pytest.approx(s, rel=6e-6)]
            assert (i == j) if len(tied) <= TIE_MARGIN else (i in tied), (g, i, j, len(tied))


def assert_lists_match(got, want, scores, gs=GS):
    """``got`` is ``want`` (a :class:`Reference`) as lists scored ``scores`` give it: exactly
    (:func:`assert_lists_equal`), or by the bm25 index: its best ``K`` by its own scores (one-byte
    lengths), each score moved to the unit's exact length (bm25s's where each query term occurs
    once, else at most 1/8 below it), best first."""
    if scores == ts.EXACT_SCORES:
        return assert_lists_equal(got, want, gs)
    for g in gs:
        exact, index = dict(want[g]), want.index[g]
        assert len(got[g]) == min(K, len(want[g])), g
        for i, s in got[g]:
            assert s == pytest.approx(want.corrected[g][i], rel=1e-5), (g, i)
            assert exact[i] * 7 / 8 * (1 - 1e-5) <= s <= exact[i] * (1 + 1e-5), (g, i, s, exact[i])
        assert [s for _, s in got[g]] == sorted((s for _, s in got[g]), reverse=True), g
        kept = {i for i, _ in got[g]}
        left = [s for i, s in index.items() if i not in kept]
        if kept and left:
            assert max(left) <= min(index[i] for i in kept) * (1 + 1e-5), g


@pytest.fixture(params=[ts.INDEX_SCORES, ts.EXACT_SCORES])
def scores(request, monkeypatch):
    """How the lists are scored: as the extension allows (1.0: by the index), or forced exact."""
    if request.param == ts.EXACT_SCORES:
        monkeypatch.setattr(ts, "scores_status", lambda tables: ts.EXACT_SCORES)
    return request.param


# ---- tests ---------------------------------------------------------------------------------------
def test_each_token_stays_one_lexeme_of_the_simple_configuration(pg_ext_url):
    tokens = {"tp53": 3, "x_y": 1, "foo-bar": 2, "3.5": 1, "ñandú": 1, "ｄ３": 1, "α-β": 1, "a" * 1500: 2, "the": 1}
    engine = sqlalchemy.create_engine(driver_url(pg_ext_url, "psycopg2"))
    with engine.connect() as c:
        vector = c.execute(
            sqlalchemy.text("SELECT to_tsvector('simple', :t)::text"), {"t": ts.query_text(tokens)}
        ).scalar()
        counts = {w.split("':")[0].strip("'"): len(w.split("':")[1].split(",")) for w in vector.split(" ")}
        in_sql = [c.execute(sqlalchemy.text(f"SELECT {ts.lexeme_sql(':t')}"), {"t": t}).scalar() for t in tokens]
    engine.dispose()
    assert counts == {ts.lexeme(t): n for t, n in tokens.items()}
    assert in_sql == [ts.lexeme(t) for t in tokens]
    assert len({ts.lexeme(t) for t in tokens}) == len(tokens) and len(ts.lexeme("a" * 1500)) == 32


def test_bm25_lists_are_the_in_memory_lists(pg_ext_url, pg_table, caplog, scores):
    memory = MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    with caplog.at_level(logging.INFO):
        index = build(pg_ext_url, pg_table)
    assert index._backend.bm25_lists == ts.TEXTSEARCH and index._backend.tables.scores == scores
    said = [r.message for r in caplog.records if "BM25 lists from pg_textsearch bm25 indexes" in r.message]
    assert len(said) == 1 and f"{scores} scores" in said[0]
    for q in QUERIES:
        got = sparse_lists(index, q, 10)
        # bm25s's float32 sums order near-ties by their last bits: the reference is its formula in float64
        assert_lists_match(got, reference_lists(memory, q, 10), scores)
    described = index.as_fusion_retriever().source.describe()[-1]
    assert "pg_textsearch" in described and ("exact lengths" in described) == (scores == ts.INDEX_SCORES)
    reader = reopen(pg_ext_url, pg_table)
    assert reader._backend.bm25_lists == ts.TEXTSEARCH
    assert_lists_match(sparse_lists(reader, QUERIES[0], 10), reference_lists(memory, QUERIES[0], 10), scores)


def test_index_scores_take_exact_lengths_and_are_bm25s_where_each_query_term_occurs_once(pg_ext_url, pg_table):
    memory = MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    index = build(pg_ext_url, pg_table)
    assert index._backend.tables.scores == ts.INDEX_SCORES
    ratios, moved = [], 0
    # the test queries' terms are in every sentence; each sentence's own term, once in a unit
    for q in QUERIES + [f"r{d}x{i} r{d}x{i + 1}" for d in range(4) for i in range(0, 14, 3)]:
        want = reference_lists(memory, q, 10)
        for g, found in sparse_lists(index, q, 10).items():
            for i, s in found:
                ratios.append(s / dict(want[g])[i])
                if want.once[g][i]:
                    assert s == pytest.approx(dict(want[g])[i], rel=1e-5), (q, g, i)
                    moved += want.rounded[g][i] and want.index[g][i] > dict(want[g])[i] * 1.001
    # the index's own score of such a unit was above bm25s's: its length is the corrected part
    assert moved > 0
    # a term a unit holds more than once: the score is a little below bm25s's
    assert max(ratios) < 1 + 1e-5 and min(ratios) < 1 - 1e-3


def test_a_length_is_kept_as_pg_textsearch_keeps_it():
    # pg_textsearch 1.0's src/segment/fieldnorm.c, FIELDNORM_DECODE_TABLE: a length is the largest entry not above it
    table = [*range(41), 42, 44, 46, 48, 50, 52, 54, 56, 60, 64, 68, 72, 76, 80, 84, 88, 96, 104, 112, 120, 128]
    table += [136, 144, 152, 168, 184, 200, 216, 232, 248, 264, 280, 312, 344, 376, 408, 440, 472, 504, 536, 600]
    table += [664, 728, 792, 856, 920, 984, 1048, 1176, 1304, 1432, 1560, 1688, 1816, 1944, 2072, 2328, 2584]
    assert [ts.stored_length(n) for n in range(2600)] == [max(v for v in table if v <= n) for n in range(2600)]
    assert ts.stored_length(536870935) == 503316504 and ts.stored_length(536870936) == 536870936
    # a list's lengths at once: the same lengths, and the same scores to the last bit as one at a time
    lengths = np.array([*range(2600), 536870935, 536870936])
    assert ts.stored_length(lengths).tolist() == [ts.stored_length(int(n)) for n in lengths]
    scores = np.linspace(0.1, 9.0, lengths.size)
    one_by_one = [ts.length_corrected(float(s), int(n), 61.3, K1, B) for s, n in zip(scores, lengths)]
    assert ts.length_corrected(scores, lengths, 61.3, K1, B).tolist() == one_by_one
    # a unit of each term once: the score moved from the stored length to the exact one is bm25s's
    idf, avgdl, dl = 1.7, 60.0, 300
    index = idf / (1 + K1 * (1 - B + B * ts.stored_length(dl) / avgdl))
    assert ts.length_corrected(index, dl, avgdl, K1, B) == pytest.approx(idf / (1 + K1 * (1 - B + B * dl / avgdl)))


def test_a_reopen_chooses_exact_scores_and_is_refused_index_scores_the_server_lacks(pg_ext_url, pg_table, monkeypatch):
    memory = MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    build(pg_ext_url, pg_table)
    stores = (pg_vector_store(pg_ext_url, pg_table, DIM), pg_docstore(pg_ext_url, pg_table + "_docs"))
    kw = dict(kvstore=pg_kvstore(pg_ext_url, pg_table + "_kv"), embed_model=RandomEmbedding(dim=DIM))
    exact = MultiGranularityIndex.from_vector_store(*stores, bm25_scores="exact", **kw)
    assert exact._backend.tables.scores == ts.EXACT_SCORES and reopen(pg_ext_url, pg_table)._backend.tables.scores == (
        ts.INDEX_SCORES
    )
    for q in QUERIES:
        assert_lists_match(sparse_lists(exact, q, 10), reference_lists(memory, q, 10), ts.EXACT_SCORES)
    with pytest.raises(ValueError, match=r"bm25_scores must be one of \('index', 'exact'\), got 'fast'"):
        MultiGranularityIndex.from_vector_store(*stores, bm25_scores="fast", **kw)
    monkeypatch.setattr(ts, "scores_status", lambda tables: ts.EXACT_SCORES)  # an extension without the function
    with pytest.raises(
        ValueError, match=r"bm25_scores='index' reads .*bm25_get_current_score\(\).*pass bm25_scores='exact'"
    ):
        MultiGranularityIndex.from_vector_store(*stores, bm25_scores="index", **kw)
    assert MultiGranularityIndex.from_vector_store(*stores, **kw)._backend.tables.scores == ts.EXACT_SCORES


def test_without_the_score_function_the_candidates_are_scored_exactly(pg_ext_url):
    class Catalog:
        def __init__(self, found):
            self.found = found

        def _fetch(self, sql, params):
            assert "to_regprocedure('bm25_get_current_score()')" in sql
            return [(self.found,)]

    assert ts.scores_status(Catalog(True)) == ts.INDEX_SCORES
    assert ts.scores_status(Catalog(False)) == ts.EXACT_SCORES
    with pytest.raises(ValueError, match="scores='bm25'.*'index' or 'exact'"):
        ts.TextSearchTables(pg_vector_store(pg_ext_url, "unused_scores", DIM), GS, DIM, scores="bm25")


def test_both_ways_of_scoring_candidates_give_the_same_lists_bit_for_bit(pg_ext_url, pg_table, monkeypatch):
    # a query's term counts read as one record (the short query's way) or by expanding every term of
    # a unit (the way of a query of hundreds of terms): the same ids and the same floats
    monkeypatch.setattr(ts, "scores_status", lambda tables: ts.EXACT_SCORES)
    index = build(pg_ext_url, pg_table)
    by_record = {q: sparse_lists(index, q, 10) for q in QUERIES}
    monkeypatch.setattr(ts, "RECORD_TERMS", 0)
    for q in QUERIES:
        assert sparse_lists(index, q, 10) == by_record[q]
        assert any(by_record[q].values()), q


def test_filtered_lists_are_not_short_and_a_filter_nothing_passes_is_empty(pg_ext_url, pg_table, scores):
    docs = make_docs(n_docs=12, n_sent=20)
    index = build(pg_ext_url, pg_table, docs)
    only = MetadataFilters(filters=[ExactMatchFilter(key="title", value="paper 7")])
    for q in ("drought forest trees", "result reported study"):
        got = sparse_lists(index, q, 8, only)
        # each unit scored as in the unfiltered list (by the index: the score of the row the join kept)
        everyone = {g: dict(found) for g, found in sparse_lists(index, q, 1000).items()}
        assert all(everyone[g][i] == s for g, found in got.items() for i, s in found), q
        memory = MultiGranularityIndex.from_documents(
            [d for d in docs if d.metadata["title"] == "paper 7"],
            granularities=GS,
            embed_model=RandomEmbedding(dim=DIM),
        )
        for g in GS:
            matching = [i for i, _ in reference_lists(memory, q, 1000)[g]]
            assert len(got[g]) == min(8, len(matching)) and len(got[g]) > 0
            assert all(i.startswith("doc7::") for i, _ in got[g])
    nobody = MetadataFilters(filters=[ExactMatchFilter(key="no_such_key", value="x")])
    assert all(v == [] for v in sparse_lists(index, "drought forest", 8, nobody).values())
    assert index.as_retriever(similarity_top_k=5, filters=nobody).retrieve("drought forest") == []


def test_updates_reach_the_bm25_index_and_a_second_reader_sees_them(pg_ext_url, pg_table, scores):
    index = build(pg_ext_url, pg_table)
    reader = reopen(pg_ext_url, pg_table)
    new = Document(
        text=" ".join(f"Sentence {i} on zyxomycin resistance in forest trees." for i in range(6)), id_="doc9"
    )
    docs = make_docs()
    before = sparse_lists(reader, "zyxomycin", 5)
    assert all(v == [] for v in before.values())
    index.insert(new)
    index.delete_ref_doc("doc1")
    changed = Document(
        text="Doc two now speaks of zyxomycin. And of kinases.", id_="doc2", metadata={"title": "paper 2"}
    )
    index.refresh_ref_docs([changed])
    docs = [d for d in docs if d.id_ not in ("doc1", "doc2")] + [new, changed]
    memory = MultiGranularityIndex.from_documents(docs, granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    for q in ("zyxomycin", "kinase signalling phosphorylation", QUERIES[-1]):
        want = reference_lists(memory, q, 10)
        assert_lists_match(sparse_lists(index, q, 10), want, scores)
        assert_lists_match(sparse_lists(reader, q, 10), want, scores)  # the other object, at its next query


def bm25_layout(url, index):
    """``{granularity: (memtable documents, segments)}`` of each bm25 index of ``index``, as
    pg_textsearch's ``bm25_summarize_index`` reports them (the memtable read as the index reads it)."""
    import re

    tables = index._backend.tables
    out = {}
    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"))
    with engine.connect() as conn:
        for g, idx in tables.bm25_indexes.items():
            text = conn.execute(sqlalchemy.text("SELECT bm25_summarize_index(:i)"), {"i": idx}).scalar()
            memtable = int(ts._MEMTABLE_DOCS.search(text).group(1))
            segments = int(re.search(r"Total: (\d+) segments", text).group(1))
            out[g] = (memtable, segments)
    engine.dispose()
    return out


def test_inserts_wait_in_the_memtable_until_it_holds_its_share_then_the_index_is_rebuilt(
    pg_ext_url, pg_table, monkeypatch, scores
):
    """Rows written after a bm25 index exists wait in pg_textsearch's memtable, whose postings a
    query scores one by one; once it holds REBUILD_SHARE of an index's rows, the insert's end
    rebuilds the index as one segment. The lists are bm25s's either way."""
    index = build(pg_ext_url, pg_table)
    assert set(bm25_layout(pg_ext_url, index).values()) == {(0, 1)}  # a build: the index made after the rows
    docs = make_docs()
    query = "zyxomycin kinases"
    monkeypatch.setattr(ts, "REBUILD_SHARE", 0.99)
    first = Document(text="Zyxomycin binds kinases. Forest trees resist zyxomycin.", id_="doc9")
    index.insert(first)
    layout = bm25_layout(pg_ext_url, index)
    assert all(memtable > 0 and segments == 1 for memtable, segments in layout.values()), layout
    memory = MultiGranularityIndex.from_documents(
        docs + [first], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    assert_lists_match(sparse_lists(index, query, 10), reference_lists(memory, query, 10), scores)
    monkeypatch.setattr(ts, "REBUILD_SHARE", 0.01)
    second = Document(text="Kinases of forest trees. Zyxomycin again, and kinases.", id_="doc10")
    index.insert(second)
    assert set(bm25_layout(pg_ext_url, index).values()) == {(0, 1)}
    memory = MultiGranularityIndex.from_documents(
        docs + [first, second], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    assert_lists_match(sparse_lists(index, query, 10), reference_lists(memory, query, 10), scores)


def test_an_unreadable_index_report_is_a_warning_and_the_rows_are_still_found(
    pg_ext_url, pg_table, monkeypatch, caplog
):
    index = build(pg_ext_url, pg_table)
    tables = index._backend.tables
    monkeypatch.setattr(tables, "bm25_indexes", {g: f"{idx}_gone" for g, idx in tables.bm25_indexes.items()})
    with caplog.at_level(logging.WARNING):
        index.insert(Document(text="Zyxomycin binds kinases.", id_="doc9"))
    assert any("bm25_summarize_index" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    found = sparse_lists(index, "zyxomycin", 5)
    assert all(ids and ids[0][0].startswith("doc9") for ids in found.values()), found  # from the memtable


def test_queries_of_stop_words_no_indexable_term_or_two_thousand_terms_answer(pg_ext_url, pg_table):
    index = build(pg_ext_url, pg_table)
    retriever = index.as_retriever(similarity_top_k=5)
    for q in ("the of and is", "!!! ???", " ".join(f"term{i}" for i in range(1990)) + " drought forest trees"):
        found = sparse_lists(index, q, 5)
        assert set(found) == set(GS)
        assert len(retriever.retrieve(q)) == 5  # the dense lists still answer
    long_q = " ".join(f"term{i}" for i in range(1990)) + " drought forest trees"
    assert [i for i, _ in sparse_lists(index, long_q, 5)[2]] == [
        i for i, _ in sparse_lists(index, "drought forest trees", 5)[2]
    ]


def test_without_the_extension_the_postings_tables_serve_and_say_so(pg_url, pg_table, caplog):
    with caplog.at_level(logging.INFO):
        index = build(pg_url, pg_table)
    assert index._backend.bm25_lists == ts.POSTINGS
    said = [r.message for r in caplog.records if "BM25 lists from postings tables" in r.message]
    assert len(said) == 1 and "not installed" in said[0] and "shared_preload_libraries" in said[0]
    assert "postings tables" in index.as_fusion_retriever().source.describe()[-1]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        reopen(pg_url, pg_table)
    assert sum("BM25 lists from postings tables" in r.message for r in caplog.records) == 1


class _Catalog:
    """A database as textsearch_status sees it: one catalog row, and CREATE EXTENSION's outcome."""

    def __init__(self, created, available, preload, create_fails=False):
        self.row, self.create_fails, self.created = (created, available, preload), create_fails, []

    def _fetch(self, sql, params):
        return [self.row]

    def _execute(self, statements):
        if self.create_fails:
            raise RuntimeError('permission denied to create extension "pg_textsearch"\nHINT: ...')
        self.created += statements


@pytest.mark.parametrize(
    "row, usable, why",
    [
        ((None, None, ""), False, "not installed"),
        ((None, "0.6.1", "pg_textsearch"), False, "1.0 or later is needed"),
        (("1.0.0", "1.0.0", ""), False, "not in shared_preload_libraries"),
        (("1.0.0", "1.0.0", "$libdir/pg_textsearch"), True, "pg_textsearch 1.0.0"),
    ],
)
def test_the_extension_is_used_only_when_installed_recent_and_preloaded(row, usable, why):
    assert ts.textsearch_status(_Catalog(*row)) == (usable, ts.textsearch_status(_Catalog(*row))[1])
    got = ts.textsearch_status(_Catalog(*row))
    assert got[0] is usable and why in got[1]


def test_the_extension_is_created_at_build_only_and_a_failed_create_is_a_reason():
    catalog = _Catalog(None, "1.0.0", "pg_textsearch")
    assert ts.textsearch_status(catalog) == (False, "pg_textsearch 1.0.0 is installed but not created in this database")
    assert ts.textsearch_status(catalog, create=True) == (True, "pg_textsearch 1.0.0") and catalog.created
    usable, why = ts.textsearch_status(_Catalog(None, "1.0.0", "pg_textsearch", create_fails=True), create=True)
    assert not usable and why.startswith("CREATE EXTENSION pg_textsearch failed: permission denied")


def test_a_server_restarted_between_two_queries_of_one_index_object(pg_ext_url, pg_table):
    from causalrag_bench.pgserver_extend import restart_extend_server

    build(pg_ext_url, pg_table)
    index = reopen(pg_ext_url, pg_table)
    retriever = index.as_retriever(similarity_top_k=5)
    before = [n.node.node_id for n in retriever.retrieve("photosynthesis chlorophyll light")]
    lists = sparse_lists(index, "photosynthesis chlorophyll light", 10)
    restart_extend_server()  # the bm25 indexes are read again from disk by the new server
    assert [n.node.node_id for n in retriever.retrieve("photosynthesis chlorophyll light")] == before
    assert sparse_lists(index, "photosynthesis chlorophyll light", 10) == lists


def test_filtered_hnsw_dense_lists_are_not_short(pg_ext_url, pg_table, monkeypatch):
    """pgvector's iterative scan (on by default for HNSW lists) keeps searching until a filtered
    list is full; without it the same statement returns fewer rows than match."""
    from llama_index_ext_causalrag.multigranularity import HNSW
    from llama_index_ext_causalrag.storage.pg.served import ServedTables

    docs = make_docs(n_docs=12, n_sent=20)
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(pg_ext_url, pg_table, DIM), docstore=pg_docstore(pg_ext_url, pg_table + "_docs")
    )
    index = MultiGranularityIndex.from_documents(
        docs,
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=ctx,
        ann=HNSW(m=4, ef_construction=8, ef_search=1),
    )
    only = MetadataFilters(filters=[ExactMatchFilter(key="title", value="paper 7")])
    source = index.as_fusion_retriever().source

    def dense(k):
        found = source.lists(QueryBundle("drought forest trees"), k, only)
        return {g: r.ids for (e, g), r in found.items() if e == "dense"}

    memory = MultiGranularityIndex.from_documents(
        [d for d in docs if d.id_ == "doc7"], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    matching = Counter(
        g
        for u in memory._state.units
        for g in GS
        if u.metadata["umg_granularity"] <= g <= u.metadata.get("umg_granularity_max", u.metadata["umg_granularity"])
    )
    full = dense(8)
    assert {g: len(ids) for g, ids in full.items()} == {g: min(8, matching[g]) for g in GS}
    assert all(i.startswith("doc7::") for ids in full.values() for i in ids)
    settings = ServedTables._settings
    monkeypatch.setattr(
        ServedTables,
        "_settings",
        lambda self, kind, k, filtered=False: settings(self, kind, k, filtered).replace(
            "hnsw.iterative_scan = relaxed_order", "hnsw.iterative_scan = off"
        ),
    )
    assert any(len(ids) < 8 for ids in dense(8).values())


def test_a_failed_update_leaves_the_lists_and_their_statistics_as_before(pg_ext_url, pg_table, monkeypatch, scores):
    """A rolled-back update leaves the lists as they were: the statistics they are scored with roll
    back with it (pg_textsearch's own, which choose the candidates, are rebuilt)."""
    from llama_index_ext_causalrag.multigranularity.store_backend import StoreBackend

    index = build(pg_ext_url, pg_table)
    memory = MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))

    def broken(self, params, state):
        raise RuntimeError("kvstore down (scripted)")

    monkeypatch.setattr(StoreBackend, "save_state", broken)
    new = Document(text=" ".join(f"Sentence {i} on drought in forest trees." for i in range(30)), id_="doc9")
    with pytest.raises(RuntimeError, match="kvstore down"):
        index.insert(new)
    monkeypatch.undo()
    for q in ("drought forest trees", QUERIES[0]):
        assert_lists_match(sparse_lists(index, q, 10), reference_lists(memory, q, 10), scores)


def test_index_scored_lists_go_out_in_one_bm25_statement_beside_two_dense_ones(pg_ext_url, pg_table, monkeypatch):
    import re

    index = build(pg_ext_url, pg_table)
    tables = index._backend.tables
    sent = []
    for name in ("_fetch_prepared", "_fetch"):
        fetch = getattr(type(tables), name)
        monkeypatch.setattr(type(tables), name, lambda self, *a, _f=fetch: sent.append(a[-2]) or _f(self, *a))
    assert index.as_retriever(similarity_top_k=5).retrieve(QUERIES[0])
    dense, sparse = ([sql for sql in sent if f"'{kind}'" in sql] for kind in ("dense", "sparse"))
    assert len(dense) == 2 and len(sparse) == 1
    assert sorted(int(g) for sql in dense for g in set(re.findall(r'__g(\d+)"', sql))) == sorted(GS)
    assert sorted(set(int(g) for g in re.findall(r'__g(\d+)"', sparse[0]))) == sorted(GS)
