"""A MultiGranularityIndex served by PostgreSQL (layout "served"): lists and BM25 statistics kept in
step with the vector store's table by whoever writes, equal to the in-memory index (exact search and
a wide HNSW, after updates), opened without reading a unit, a reader seeing another process's write
at its next query, bad parameters refused by name."""

import re
import threading
from collections import Counter

import pytest
import sqlalchemy
from llama_index.core import Document, StorageContext
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.multigranularity import HNSW, IVF, MultiGranularityIndex
from llama_index_ext_causalrag.storage.pg import served
from llama_index_ext_causalrag.storage.pg.lists import split_by_work
from llama_index_ext_causalrag.storage.pg.served import SPARSE_STATEMENTS, ServedTables
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY
from llama_index_ext_causalrag.storage.terms import TERMS_KEY, TERMS_LEN_KEY
from pg_fixture import driver_url
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, assert_equal_to_memory, make_docs

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def memory_index():
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def build(pg_url, table, **kwargs):
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(pg_url, table, DIM), docstore=pg_docstore(pg_url, table + "_docs")
    )
    return MultiGranularityIndex.from_documents(
        make_docs(),
        granularities=GS,
        embed_model=RandomEmbedding(dim=DIM),
        storage_context=ctx,
        kvstore=pg_kvstore(pg_url, table + "_kv"),
        **kwargs,
    )


def reopen(pg_url, table, **kwargs):
    return MultiGranularityIndex.from_vector_store(
        pg_vector_store(pg_url, table, DIM),
        pg_docstore(pg_url, table + "_docs"),
        kvstore=pg_kvstore(pg_url, table + "_kv"),
        embed_model=RandomEmbedding(dim=DIM),
        **kwargs,
    )


def lists_of(pg_url, table):
    """``{g: sorted node ids}`` of each dense list table, and the same computed from the main table's metadata."""
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        got = {
            g: sorted(r[0] for r in c.execute(sqlalchemy.text(f'SELECT node_id FROM "data_{table}__g{g}"'))) for g in GS
        }
        rows = c.execute(sqlalchemy.text(f'SELECT node_id, metadata_ FROM "data_{table}"')).fetchall()
    engine.dispose()
    want = {
        g: sorted(
            m.get(NODE_ID_KEY, nid)
            for nid, m in rows
            if m["umg_granularity"] <= g <= m.get("umg_granularity_max", m["umg_granularity"])
        )
        for g in GS
    }
    return got, want


def bm25_of(pg_url, table):
    """Per granularity, what the database keeps for BM25 (units, summed length, df) and the same from the rows."""
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        stats = {g: (n, t) for g, n, t in c.execute(sqlalchemy.text(f'SELECT g, n, total FROM "data_{table}__bn"'))}
        df = {(g, term): d for g, term, d in c.execute(sqlalchemy.text(f'SELECT g, term, df FROM "data_{table}__bdf"'))}
        rows = [m for (m,) in c.execute(sqlalchemy.text(f'SELECT metadata_ FROM "data_{table}"'))]
    engine.dispose()
    want_stats, want_df = {}, Counter()
    for m in rows:
        for g in GS:
            if m["umg_granularity"] <= g <= m.get("umg_granularity_max", m["umg_granularity"]):
                n, t = want_stats.get(g, (0, 0))
                want_stats[g] = (n + 1, t + m.get(TERMS_LEN_KEY, 0))
                want_df.update((g, term) for term in m.get(TERMS_KEY, {}))
    return (stats, df), (want_stats, dict(want_df))


def test_lists_and_bm25_statistics_follow_every_write_to_the_table(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table)
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    assert sum(map(len, lists_of(pg_url, pg_table)[0].values())) >= len(memory_index.units)
    index.insert(
        Document(text="Sentence one about chlorophyll. Sentence two about kinases. Sentence three.", id_="new")
    )
    index.delete_ref_doc("doc1")
    index.refresh_ref_docs([Document(text="A new text for doc2. It has two sentences.", id_="doc2")])
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    got, _ = lists_of(pg_url, pg_table)
    assert not any(i.startswith("doc1::") for ids in got.values() for i in ids)
    assert any(i.startswith("new::") for i in got[2])
    # LlamaIndex's own add and delete_nodes, not only this package's writes, keep them in step
    vs = pg_vector_store(pg_url, pg_table, DIM)
    node = TextNode(
        text="by hand",
        id_="hand",
        metadata={"umg_granularity": 2, "umg_granularity_max": 4, TERMS_KEY: {"hand": 1}, TERMS_LEN_KEY: 1},
        embedding=[1.0] + [0.0] * (DIM - 1),
    )
    vs.add([node])
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    got, _ = lists_of(pg_url, pg_table)
    assert "hand" in got[2] and "hand" in got[4] and "hand" not in got[8]
    vs.delete_nodes(node_ids=["hand"])
    got, want = lists_of(pg_url, pg_table)
    assert got == want and "hand" not in got[2]


def test_served_index_equals_in_memory_after_updates(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table)
    assert index._backend.layout == "served"
    assert_equal_to_memory(index, memory_index)
    new = Document(text=" ".join(f"Sentence {i} on drought forest trees r9x{i}." for i in range(9)), id_="doc9")
    index.insert(new)
    memory = MultiGranularityIndex.from_documents(
        make_docs() + [new], granularities=GS, embed_model=RandomEmbedding(dim=DIM)
    )
    assert_equal_to_memory(index, memory)
    assert_equal_to_memory(reopen(pg_url, pg_table), memory)
    index.delete_ref_doc("doc9")
    assert_equal_to_memory(index, memory_index)


def test_opening_reads_no_unit_and_holds_none(pg_url, pg_table, monkeypatch):
    """Stateless open: parameters and a catalog check; no docstore or vector-store row is read."""
    from llama_index_ext_causalrag.storage import stores
    from llama_index_ext_causalrag.storage.pg import docstore as pgd
    from llama_index_ext_causalrag.storage.pg import driver as pg_driver

    build(pg_url, pg_table)
    reads = []
    monkeypatch.setattr(pgd, "read_nodes", lambda *a, **k: reads.append(a) or {})
    monkeypatch.setattr(pg_driver, "read_nodes", lambda *a, **k: reads.append(a) or {})
    monkeypatch.setattr(stores, "get_nodes_at_once", lambda *a, **k: reads.append(a) or [])
    index = reopen(pg_url, pg_table)
    assert reads == []
    st = index._state
    assert st.staged is None and st.embeddings.size == 0 and not any(st.by_g.values())
    assert index.granularities == GS
    monkeypatch.undo()
    assert index.as_retriever(similarity_top_k=5).retrieve(QUERIES[0])


def test_wide_hnsw_equals_exact_and_other_parameters_are_refused(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table, ann=HNSW(m=8, ef_construction=32, ef_search=1000))
    assert index._backend.tables.ann == HNSW(m=8, ef_construction=32, ef_search=1000)
    assert_equal_to_memory(index, memory_index)
    assert_equal_to_memory(reopen(pg_url, pg_table), memory_index)
    narrow = reopen(pg_url, pg_table, ann=HNSW(m=8, ef_construction=32, ef_search=5))
    assert narrow._backend.tables.ann.ef_search == 5
    with pytest.raises(
        ValueError, match=r"built with HNSW\(m=8, ef_construction=32\).*pass HNSW\(m=8, ef_construction=32\)"
    ):
        reopen(pg_url, pg_table, ann=HNSW(m=16, ef_construction=32))
    with pytest.raises(ValueError, match=r"built with HNSW\(m=8, ef_construction=32\)"):
        reopen(pg_url, pg_table, ann=IVF(nlist=8, nprobe=8))
    # an HNSW index built by hand with other parameters than the index records
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        c.execute(sqlalchemy.text(f'DROP INDEX "data_{pg_table}__g4_hnsw"'))
        c.execute(
            sqlalchemy.text(
                f'CREATE INDEX ON "data_{pg_table}__g4" USING hnsw (embedding vector_cosine_ops) '
                "WITH (m = 4, ef_construction = 16)"
            )
        )
    engine.dispose()
    with pytest.raises(ValueError, match=rf"data_{pg_table}__g4.*m=4, ef_construction=16"):
        reopen(pg_url, pg_table)


def dense_statement(index, monkeypatch):
    """``(settings, sql, params)`` of the dense lists' statement of one query of ``index``."""
    tables = index._backend.tables
    sent = []
    fetch = type(tables)._fetch_prepared
    monkeypatch.setattr(
        type(tables), "_fetch_prepared", lambda self, st, sql, p: sent.append((st, sql, p)) or fetch(self, st, sql, p)
    )
    assert index.as_retriever(similarity_top_k=5).retrieve(QUERIES[0])
    monkeypatch.setattr(type(tables), "_fetch_prepared", fetch)
    return next(x for x in sent if "'dense'" in x[1])


def explained(pg_url, settings, sql, params, analyze=False):
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        cursor = c.connection.cursor()
        cursor.execute(settings)
        cursor.execute(("EXPLAIN (ANALYZE) " if analyze else "EXPLAIN ") + sql, params)
        out = "\n".join(r[0] for r in cursor.fetchall())
    engine.dispose()
    return out


def test_unfiltered_hnsw_lists_use_the_index_even_where_the_planner_would_scan(pg_url, pg_table, monkeypatch):
    """A list table of a few rows costs the planner less as a scan; with ``ann=HNSW`` the
    unfiltered dense statement searches the HNSW indexes all the same (filtered, the planner picks),
    once the list holds more than EXACT_PER_EF x ef_search rows (here: never fewer)."""
    monkeypatch.setattr(served, "EXACT_PER_EF", 0)
    index = build(pg_url, pg_table, ann=HNSW(m=8, ef_construction=32, ef_search=40))
    settings, sql, params = dense_statement(index, monkeypatch)
    used = set(re.findall(r'Index Scan using "?(\S+?_hnsw)"?', explained(pg_url, settings, sql, params)))
    assert used == {f"data_{pg_table}__g{g}_hnsw" for g in GS}
    # what the planner picks
    assert "_hnsw" not in explained(pg_url, settings.replace("SET LOCAL enable_seqscan = off; ", ""), sql, params)


def test_hnsw_lists_of_few_rows_are_scanned_exactly(pg_url, pg_table, monkeypatch):
    """A list of at most EXACT_PER_EF x ef_search rows (the statistics table's count, read in the
    statement) is scanned exactly: the in-memory index's lists, and its HNSW search never runs."""
    index = build(pg_url, pg_table, ann=HNSW(m=4, ef_construction=8, ef_search=1))
    memory = MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    rows = Counter(
        g
        for u in memory._state.units
        for g in GS
        if u.metadata["umg_granularity"] <= g <= u.metadata.get("umg_granularity_max", u.metadata["umg_granularity"])
    )
    k = 8 + TIE_MARGIN
    assert max(rows.values()) <= served.EXACT_PER_EF * k  # every list is small for ef_search 1
    settings, sql, params = dense_statement(index, monkeypatch)
    ran = explained(pg_url, settings, sql, params, analyze=True)
    assert re.findall(r"Index Scan using \S+_hnsw .*\(never executed\)", ran) and "Seq Scan" in ran
    assert not re.findall(r"Index Scan using \S+_hnsw .*actual time=\d", ran)
    for q in QUERIES[:6]:
        got, want = (ix.as_fusion_retriever().source.lists(QueryBundle(q), 8) for ix in (index, memory))
        for g in GS:
            assert got[("dense", g)].ids[:5] == want[("dense", g)].ids[:5], (q, g)
    monkeypatch.setattr(served, "EXACT_PER_EF", 0)  # no list small: the HNSW search runs
    settings, sql, params = dense_statement(index, monkeypatch)
    ran = explained(pg_url, settings, sql, params, analyze=True)
    assert re.findall(r"Index Scan using \S+_hnsw .*actual time=\d", ran)


def test_bad_ann_and_long_table_names_are_refused(pg_url, pg_table):
    with pytest.raises(ValueError, match="ef_search must be an int"):
        HNSW(ef_search=0)
    with pytest.raises(TypeError, match=r"ann must be None.*IVF\(nlist=..., nprobe=...\), got \{'m': 16\}"):
        build(pg_url, pg_table, ann={"m": 16})
    with pytest.raises(ValueError, match=r"ann=IVF\(nlist=64, nprobe=8\): IVF indexes are built on Milvus.*ann=HNSW"):
        build(pg_url, pg_table, ann=IVF(nlist=64, nprobe=8))
    with pytest.raises(ValueError, match="builds approximate indexes in PostgreSQL or Milvus.*drop ann="):
        MultiGranularityIndex.from_documents(
            make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM), ann=HNSW()
        )
    model = RandomEmbedding(dim=DIM)
    ctx = StorageContext.from_defaults(
        vector_store=pg_vector_store(pg_url, "t" * 50, DIM), docstore=pg_docstore(pg_url, pg_table + "_docs")
    )
    with pytest.raises(ValueError, match="PostgreSQL keeps 63: use a table_name of at most"):
        MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=model, storage_context=ctx)
    assert model.text_calls == 0  # refused before anything was embedded


def test_every_list_goes_out_at_once_dense_and_bm25_side_by_side(pg_url, pg_table, monkeypatch):
    index = build(pg_url, pg_table)
    calls = []
    tables = index._backend.tables
    fetch, prepared = type(tables)._fetch, type(tables)._fetch_prepared
    monkeypatch.setattr(
        type(tables), "_fetch", lambda self, *a: calls.append((threading.get_ident(), a[0])) or fetch(self, *a)
    )
    monkeypatch.setattr(
        type(tables),
        "_fetch_prepared",  # (settings, sql, params)
        lambda self, *a: calls.append((threading.get_ident(), a[1])) or prepared(self, *a),
    )
    index.as_fusion_retriever().retrieve(QUERIES[0])
    counter = [sql for _, sql in calls if sql.startswith("SELECT gen FROM")]
    # the dense lists in one statement, the BM25 lists in SPARSE_STATEMENTS; the counter after the lists is read with the nodes
    assert len(calls) == 1 + SPARSE_STATEMENTS and not counter
    assert len({thread for thread, _ in calls}) == len(calls)  # each statement on its own connection's thread
    assert all("__gen" in sql for _, sql in calls)  # and each reads the write counter in its snapshot
    dense = sorted(int(g) for _, sql in calls for g in re.findall(r"__g(\d+)", sql))
    sparse = sorted(int(g) for _, sql in calls for g in re.findall(r"__b(\d+)", sql))
    assert dense == sorted(GS) and sparse == sorted(GS)  # every list in exactly one statement


def test_index_builds_ask_for_enough_memory_to_build_in_memory_never_below_the_server(pg_url, pg_table, monkeypatch):
    from llama_index_ext_causalrag.storage.pg import lists as pg_lists

    index = build(pg_url, pg_table)
    tables = index._backend.tables
    ((largest, server),) = tables._fetch(
        "SELECT max(pg_relation_size(to_regclass(n))), pg_size_bytes(current_setting('maintenance_work_mem')) "
        "FROM unnest(%(n)s::text[]) n",
        {"n": [tables._name(lst) for lst in tables.lists.values()]},
    )
    mb = lambda sql: int(re.fullmatch(r"SET LOCAL maintenance_work_mem = '(\d+)MB'", sql).group(1))  # noqa: E731
    assert largest > 0 and mb(tables.build_memory_sql()) == max(server, 3 * largest) // 1024**2
    monkeypatch.setattr(pg_lists, "BUILD_MEMORY", 0)  # the cap below the server's setting: the server's
    assert mb(tables.build_memory_sql()) == server // 1024**2


def test_docs_and_rows_are_written_side_by_side_and_an_error_raised_once_both_ended(pg_url, pg_table, monkeypatch):
    import time

    from llama_index_ext_causalrag.storage import stores

    events = []

    def docs(docstore, nodes, fail=False):
        time.sleep(0.3)
        events.append("docs")
        if fail:
            raise RuntimeError("docs failed")

    def rows(*args, fail=True, **kwargs):
        events.append("rows")
        if fail:
            raise RuntimeError("rows failed")

    docstore, vector_store = pg_docstore(pg_url, pg_table + "_docs"), pg_vector_store(pg_url, pg_table, DIM)
    monkeypatch.setattr(stores, "add_nodes_to_docstore", docs)
    monkeypatch.setattr(stores, "add_nodes_to_vector_store", rows)
    with pytest.raises(RuntimeError, match="rows failed"):
        stores.add_nodes_and_rows(docstore, [], vector_store, [], None)
    assert events == ["rows", "docs"]  # the rows ran while the docstore's write slept; raised after it ended
    events.clear()
    monkeypatch.setattr(stores, "add_nodes_to_docstore", lambda d, n: docs(d, n, fail=True))
    monkeypatch.setattr(stores, "add_nodes_to_vector_store", lambda *a, **k: rows(fail=False))
    with pytest.raises(RuntimeError, match="docs failed"):
        stores.add_nodes_and_rows(docstore, [], vector_store, [], None)
    assert events == ["rows", "docs"]


def test_split_by_work_puts_the_finest_scan_alone_and_spreads_hnsw_lists():
    assert split_by_work([2, 4, 8, 16, 32], 2) == [[2], [4, 8, 16, 32]]
    assert split_by_work([32, 2, 4], 2) == [[2], [4, 32]]
    assert split_by_work([4], 2) == [[4]]
    assert split_by_work([2, 4, 8], 1) == [[2, 4, 8]]
    assert split_by_work([2, 4, 8, 16, 32], 2, ann=True) == [[2, 8, 32], [4, 16]]  # HNSW: equal work a list


def test_lists_left_beside_an_emptied_table_are_made_afresh(pg_url, pg_table, memory_index):
    """Lists of another dimension, left after the table was dropped by hand, do not break a build."""
    vs = pg_vector_store(pg_url, pg_table, DIM)
    ServedTables(vs, GS, 8).create()  # 8-dimensional lists beside an empty 32-dimensional table
    index = build(pg_url, pg_table)
    got, want = lists_of(pg_url, pg_table)
    assert got == want and got[2]
    assert_equal_to_memory(index, memory_index)


def test_a_reader_opened_before_another_process_wrote_sees_the_write_at_its_next_query(pg_url, pg_table):
    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table)
    retriever = reader.as_retriever(similarity_top_k=10)  # made before the write, not remade
    text = " ".join(f"Sentence {i}: zeolite catalysis cracking in study 0." for i in range(9))
    assert not any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))
    writer = reopen(pg_url, pg_table)
    writer.insert(Document(text=text, id_="doc7"))
    assert any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))
    writer.delete_ref_doc("doc7")
    assert not any(n.node.ref_doc_id == "doc7" for n in retriever.retrieve("zeolite catalysis cracking"))


def _refreshed_doc1():
    return Document(
        text=" ".join(f"Sentence {i}: basalt weathering sequesters carbon, site 1." for i in range(9)),
        id_="doc1",
        metadata={"title": "paper 1"},
    )


def _answer(retriever, query="basalt weathering carbon"):
    return [(n.node.node_id, n.node.get_content(), round(n.score, 9)) for n in retriever.retrieve(query)]


def test_an_update_is_one_transaction_a_reader_meanwhile_sees_the_old_state(pg_url, pg_table, monkeypatch):
    """Docstore rows, the replaced rows' removal and the new rows commit together (one database):
    a query run while the update is between its steps answers from the old state."""
    from llama_index_ext_causalrag.storage.pg import atomic as pg_atomic

    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table).as_retriever(similarity_top_k=10)
    writer = reopen(pg_url, pg_table)
    assert pg_atomic.shares_database(writer._backend.vector_store, writer.docstore)
    before = _answer(reader)
    counter = writer._backend.tables_for(GS).generation()
    during = []
    real_copy = pg_atomic.copy_on

    def copy_then_read(cursor, table, payload):  # the old rows are deleted in the writer's transaction by now
        during.append(_answer(reader))
        real_copy(cursor, table, payload)

    monkeypatch.setattr(pg_atomic, "copy_on", copy_then_read)
    writer.insert(_refreshed_doc1())
    assert during and during[0] == before
    after = _answer(reader)
    assert after != before and any("basalt" in text for _, text, _ in after)
    assert writer._backend.tables_for(GS).generation() > counter


def test_a_failure_inside_the_update_transaction_writes_nothing(pg_url, pg_table, monkeypatch):
    from llama_index_ext_causalrag.storage.pg import atomic as pg_atomic

    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table).as_retriever(similarity_top_k=10)
    before, lists_before = _answer(reader), lists_of(pg_url, pg_table)[0]

    def broken(cursor, table, payload):
        raise RuntimeError("disk full (scripted)")

    monkeypatch.setattr(pg_atomic, "copy_on", broken)
    writer = reopen(pg_url, pg_table)
    with pytest.raises(Exception, match="disk full"):
        writer.insert(_refreshed_doc1())
    assert _answer(reader) == before and lists_of(pg_url, pg_table)[0] == lists_before
    assert not any("basalt" in n.get_content() for n in writer.docstore.docs.values())


def test_a_write_committed_between_a_querys_statements_is_read_again(pg_url, pg_table, monkeypatch, caplog):
    """The lists come from one state, the nodes from the next: the counters differ, the query is
    read again and answers as a query after the write does."""
    from llama_index_ext_causalrag.multigranularity import served_source as served

    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table).as_retriever(similarity_top_k=10)
    writer = reopen(pg_url, pg_table)
    real_nodes = served.ServedSource.nodes
    calls = []

    def write_first(self, ids):
        calls.append(len(ids))
        if len(calls) == 1:
            writer.insert(_refreshed_doc1())
        return real_nodes(self, ids)

    monkeypatch.setattr(served.ServedSource, "nodes", write_first)
    with caplog.at_level("INFO", logger=served.__name__):
        got = _answer(reader)
    assert len(calls) == 2 and "a write landed during a query" in caplog.text
    monkeypatch.undo()
    assert got == _answer(reopen(pg_url, pg_table).as_retriever(similarity_top_k=10))
    assert any("basalt" in text for _, text, _ in got)


def test_the_write_counter_counts_writes_by_anyone_and_an_index_without_it_gains_it_at_open(pg_url, pg_table):
    index = build(pg_url, pg_table)
    tables = index._backend.tables_for(GS)
    n = tables.generation()
    vs = pg_vector_store(pg_url, pg_table, DIM)
    vs.add(
        [
            TextNode(
                text="a hand-written row",
                id_="hand",
                embedding=[0.1] * DIM,
                metadata={"umg_granularity": 2, "umg_n_tokens": 4, TERMS_KEY: {"hand": 1}, TERMS_LEN_KEY: 1},
            )
        ]
    )
    assert tables.generation() == n + 1
    vs.delete_nodes(node_ids=["hand"])
    assert tables.generation() == n + 2
    tables._execute([f"DROP TABLE {tables._name(tables.gen)}"])
    assert tables.missing() == [tables.gen]
    reopened = reopen(pg_url, pg_table)
    assert reopened._backend.tables_for(GS).missing() == [] and reopened.as_retriever().retrieve(QUERIES[0])


def test_nodes_read_once_are_kept_for_the_state_they_came_from(pg_url, pg_table, monkeypatch):
    """A repeated query reads no node (the index's node cache, valid for one write counter); a
    write by another process empties it: the next query reads the new text."""
    from llama_index_ext_causalrag.storage.pg import driver as pg_driver

    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table)
    retriever = reader.as_retriever(similarity_top_k=10)
    reads = []
    real = pg_driver.read_nodes
    monkeypatch.setattr(pg_driver, "read_nodes", lambda *a, **k: reads.append(len(a[1] or ())) or real(*a, **k))
    first = _answer(retriever)
    assert reads and len(reader._backend.cache) > 0
    reads.clear()
    assert _answer(retriever) == first and reads == []
    assert _answer(reader.as_retriever(similarity_top_k=10)) == first and reads == []  # every retriever of the index
    other = reopen(pg_url, pg_table)  # another process's index object: it writes, then answers with an empty cache
    other.insert(_refreshed_doc1())
    got = _answer(retriever)
    assert reads and any("basalt" in text for _, text, _ in got)
    assert got == _answer(other.as_retriever(similarity_top_k=10))


def _top(retriever, query):
    return [(n.node.node_id, n.node.get_content(), round(n.score, 6)) for n in retriever.retrieve(query)]


def _prepared_on_checkout(vector_store, after_checkout):
    """Calls ``after_checkout(dbapi_connection, info)`` at each checkout of ``vector_store``'s pool."""
    vector_store._initialize()

    def checkout(dbapi_connection, record, proxy):
        after_checkout(dbapi_connection, record.info)

    sqlalchemy.event.listen(vector_store._engine, "checkout", checkout)


def test_the_lists_are_prepared_once_a_connection_and_answered_where_a_pooler_drops_them(
    pg_url, pg_table, memory_index
):
    build(pg_url, pg_table)
    plain = reopen(pg_url, pg_table)
    vs = pg_vector_store(pg_url, pg_table, DIM)
    counts = []

    def count_prepared(dbapi_connection, info):
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'causalrag%%'")
            counts.append(cursor.fetchone()[0])
        dbapi_connection.commit()

    _prepared_on_checkout(vs, count_prepared)
    index = MultiGranularityIndex.from_vector_store(
        vs,
        pg_docstore(pg_url, pg_table + "_docs"),
        kvstore=pg_kvstore(pg_url, pg_table + "_kv"),
        embed_model=RandomEmbedding(dim=DIM),
    )
    retriever = index.as_retriever(similarity_top_k=10)
    want = {q: _top(memory_index.as_retriever(similarity_top_k=10), q) for q in QUERIES[:6]}
    assert {q: _top(retriever, q) for q in QUERIES[:6]} == want
    # prepared, and the same statements (dense, BM25 in SPARSE_STATEMENTS) at every query: never one more a connection
    assert 1 <= max(counts) <= 1 + SPARSE_STATEMENTS

    # a transaction-pooling proxy: each checkout a server session that never saw our PREPARE
    dropped = pg_vector_store(pg_url, pg_table, DIM)
    infos = []

    def deallocate(dbapi_connection, info):
        with dbapi_connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
        dbapi_connection.commit()
        infos.append(info)

    _prepared_on_checkout(dropped, deallocate)
    proxied = MultiGranularityIndex.from_vector_store(
        dropped,
        pg_docstore(pg_url, pg_table + "_docs"),
        kvstore=pg_kvstore(pg_url, pg_table + "_kv"),
        embed_model=RandomEmbedding(dim=DIM),
    )
    r = proxied.as_retriever(similarity_top_k=10)
    assert {q: _top(r, q) for q in QUERIES[:6]} == want
    assert any(info.get("causalrag_unprepared") for info in infos)  # sent as plain text from then on
    assert _top(plain.as_retriever(similarity_top_k=10), QUERIES[0]) == want[QUERIES[0]]


def _shared_term_nodes(n):
    """``n`` rows by hand, in two lists each, whose terms overlap (every batch raises the same df rows)."""
    import numpy as np

    vocab = ["kinase", "cell", "gene", "signal", "tumour", "protein", "ΔpH"]
    out = []
    for i in range(n):
        terms = Counter(vocab[(i + j) % len(vocab)] for j in range(1 + i % 5))
        out.append(
            TextNode(
                text=" ".join(terms.elements()),
                id_=f"hand{i}",
                metadata={
                    "umg_granularity": GS[i % 2],
                    "umg_granularity_max": GS[i % 2 + 1],
                    TERMS_KEY: dict(terms),
                    TERMS_LEN_KEY: sum(terms.values()),
                },
            )
        )
    return out, np.random.default_rng(0).normal(size=(n, DIM)).astype(np.float32)


def test_batches_sent_two_at_once_keep_lists_and_bm25_statistics_exact(pg_url, pg_table, monkeypatch):
    """A build sends two COPY batches at once (copy.SENDERS), on two connections: both batches'
    triggers raise the same document frequencies, taken in one order, so neither waits for the
    other in a cycle (no batch is sent again) and every count is the rows'."""
    import time

    from llama_index_ext_causalrag.storage.pg import copy
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

    build(pg_url, pg_table)
    copy_on, running, most, calls = copy.copy_on, [0], [0], []
    lock = threading.Lock()

    def counted(*args):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            calls.append(1)
        try:
            copy_on(*args)
            time.sleep(0.05)  # the transaction held open: the other batch's triggers meet its rows
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(copy, "copy_on", counted)
    nodes, emb = _shared_term_nodes(240)
    assert add_nodes_to_vector_store(pg_vector_store(pg_url, pg_table, DIM), nodes, emb, batch_size=12) == [
        n.node_id for n in nodes
    ]
    assert copy.SENDERS == 2 and most[0] == 2  # two batches were in the server at once
    assert len(calls) == 20  # and none was sent again
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    got, _ = lists_of(pg_url, pg_table)
    assert sum(i.startswith("hand") for ids in got.values() for i in ids) == 2 * len(nodes)


def test_a_second_batch_writes_its_lists_while_the_first_batch_is_uncommitted(pg_url, pg_table):
    """Two batches' triggers raise the same statistics rows, locked until each transaction ends:
    the trigger writes every list first and takes those rows last, so a second batch waits only
    for the first's commit, not for all of its trigger (a sequence bumped by each list row counts
    how far the waiting batch got; sequences are not transactional). With pg_textsearch a batch
    waits for the other's commit at its first list row anyway: pg_textsearch 1.0 keeps a bm25
    index locked from a transaction's first insert into it to its end."""
    import psycopg2

    from llama_index_ext_causalrag.storage.pg import copy

    build(pg_url, pg_table)
    vs = pg_vector_store(pg_url, pg_table, DIM)
    table = copy.table_of(vs)
    probe = f'"probe_{pg_table}"'
    first, second, watch = psycopg2.connect(pg_url), psycopg2.connect(pg_url), psycopg2.connect(pg_url)
    watch.autocommit = True
    with watch.cursor() as c:
        c.execute(
            f"CREATE SEQUENCE {probe}; CREATE FUNCTION {probe}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN PERFORM nextval('{probe}'); RETURN NEW; END $$"
        )
        for g in GS:
            c.execute(
                f'CREATE TRIGGER probe BEFORE INSERT ON "data_{pg_table}__g{g}" FOR EACH ROW EXECUTE FUNCTION {probe}()'
            )
    nodes, emb = _shared_term_nodes(40)
    payloads = [copy.encode_rows(vs, nodes[:20], emb[:20]), copy.encode_rows(vs, nodes[20:], emb[20:])]
    list_rows = 2 * 20  # each hand row is in two lists
    copy.copy_on(first.cursor(), table, payloads[0])  # its triggers ran; its transaction stays open
    sent = threading.Thread(target=lambda: (copy.copy_on(second.cursor(), table, payloads[1]), second.commit()))
    sent.start()
    try:
        with watch.cursor() as c:
            for _ in range(200):  # until the second batch waits for a row the first holds
                c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                    (second.get_backend_pid(),),
                )
                if c.fetchone()[0]:
                    break
                threading.Event().wait(0.05)
            else:
                pytest.fail("the second batch never waited for a row the first batch locked")
            c.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {probe}")
            assert c.fetchone()[0] == 2 * list_rows  # the first batch's list rows and all of the second's
    finally:
        first.commit()
        sent.join(30)
    assert not sent.is_alive()
    for conn in (first, second, watch):
        conn.close()
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    assert sum(i.startswith("hand") for ids in lists_of(pg_url, pg_table)[0].values() for i in ids) == 2 * list_rows


def test_a_batch_the_server_aborted_to_break_a_deadlock_is_sent_again(pg_url, pg_table, monkeypatch):
    from llama_index_ext_causalrag.storage.pg import copy
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

    class Deadlock(Exception):
        pgcode = "40P01"

    class Refused(Exception):
        pgcode = "23505"

    build(pg_url, pg_table)
    copy_on, calls = copy.copy_on, []

    def aborted_once(cursor, table, payload, error=Deadlock):
        calls.append(payload)
        if calls.count(payload) == 1:
            raise sqlalchemy.exc.DBAPIError("COPY", None, error(error.__name__))
        copy_on(cursor, table, payload)

    monkeypatch.setattr(copy, "copy_on", aborted_once)
    vs = pg_vector_store(pg_url, pg_table, DIM)
    nodes, emb = _shared_term_nodes(40)
    add_nodes_to_vector_store(vs, nodes, emb, batch_size=10)
    assert len(calls) == 8  # each of the four batches aborted once, then written
    for of in (lists_of, bm25_of):
        got, want = of(pg_url, pg_table)
        assert got == want
    assert sum(i.startswith("hand") for ids in lists_of(pg_url, pg_table)[0].values() for i in ids) == 80
    # any other error is not retried: the write fails and leaves nothing of it
    calls.clear()
    monkeypatch.setattr(copy, "copy_on", lambda c, t, p: aborted_once(c, t, p, error=Refused))
    more, _ = _shared_term_nodes(60)
    more = [n.model_copy(update={"id_": f"more{i}"}) for i, n in enumerate(more[40:])]
    with pytest.raises(sqlalchemy.exc.DBAPIError, match="Refused"):
        add_nodes_to_vector_store(vs, more, emb[:20], batch_size=10)
    assert len(calls) == 2
    assert not any(i.startswith("more") for ids in lists_of(pg_url, pg_table)[0].values() for i in ids)
