"""The per-granularity tables of a store-backed MultiGranularityIndex on PostgreSQL: kept in step
with the vector store's table by whoever writes, equal to the in-memory index (exact search and a
wide HNSW), old-layout tables opened with a warning and upgraded, bad parameters refused by name."""

import logging
import re
import threading

import numpy as np
import pytest
import sqlalchemy
from llama_index.core import Document, StorageContext
from llama_index.core.schema import TextNode

from llama_index_ext_causalrag.multigranularity import HNSW, MultiGranularityIndex
from llama_index_ext_causalrag.storage.pg_lists import CONNECTIONS, GranularityTables, split_by_work
from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store
from pg_fixture import driver_url
from store_helpers import RandomEmbedding, pg_docstore, pg_kvstore, pg_vector_store
from test_multigranularity_store import DIM, GS, QUERIES, assert_equal_to_memory, make_docs

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def memory_index():
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM))


def build(pg_url, table, **kwargs):
    ctx = StorageContext.from_defaults(vector_store=pg_vector_store(pg_url, table, DIM),
                                       docstore=pg_docstore(pg_url, table + "_docs"))
    return MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM),
                                                storage_context=ctx, kvstore=pg_kvstore(pg_url, table + "_kv"), **kwargs)


def reopen(pg_url, table, **kwargs):
    return MultiGranularityIndex.from_vector_store(
        pg_vector_store(pg_url, table, DIM), pg_docstore(pg_url, table + "_docs"),
        kvstore=pg_kvstore(pg_url, table + "_kv"), embed_model=RandomEmbedding(dim=DIM), **kwargs)


def lists_of(pg_url, table):
    """``{g: sorted node ids}`` of each per-granularity table, and the same computed from the main table's metadata."""
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        got = {g: sorted(r[0] for r in c.execute(sqlalchemy.text(f'SELECT node_id FROM "data_{table}__g{g}"')))
               for g in GS}
        rows = c.execute(sqlalchemy.text(f'SELECT node_id, metadata_ FROM "data_{table}"')).fetchall()
    engine.dispose()
    want = {g: sorted(nid for nid, m in rows if m["umg_granularity"] <= g <= m.get("umg_granularity_max", m["umg_granularity"]))
            for g in GS}
    return got, want


def test_lists_follow_every_write_to_the_table(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table)
    got, want = lists_of(pg_url, pg_table)
    assert got == want and sum(map(len, got.values())) >= len(memory_index.units)
    index.insert(Document(text="Sentence one about chlorophyll. Sentence two about kinases. Sentence three.", id_="new"))
    index.delete_ref_doc("doc1")
    index.refresh_ref_docs([Document(text="A new text for doc2. It has two sentences.", id_="doc2")])
    got, want = lists_of(pg_url, pg_table)
    assert got == want
    assert not any("doc1" in i for ids in got.values() for i in ids) or index._backend.row_ids.maps
    # LlamaIndex's own add and delete_nodes, not only this package's writes, keep them in step
    vs = pg_vector_store(pg_url, pg_table, DIM)
    node = TextNode(text="by hand", id_="hand", metadata={"umg_granularity": 2, "umg_granularity_max": 4},
                    embedding=[1.0] + [0.0] * (DIM - 1))
    vs.add([node])
    got, want = lists_of(pg_url, pg_table)
    assert got == want and "hand" in got[2] and "hand" in got[4] and "hand" not in got[8]
    vs.delete_nodes(node_ids=["hand"])
    got, want = lists_of(pg_url, pg_table)
    assert got == want and "hand" not in got[2]


def test_store_index_on_lists_equals_in_memory_after_updates(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table)
    assert index._backend.layout == "granularity_tables"
    assert_equal_to_memory(index, memory_index)
    new = Document(text=" ".join(f"Sentence {i} on drought forest trees r9x{i}." for i in range(9)), id_="doc9")
    index.insert(new)
    memory = MultiGranularityIndex.from_documents(make_docs() + [new], granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    assert_equal_to_memory(reopen(pg_url, pg_table), memory)


def test_wide_hnsw_equals_exact_and_other_parameters_are_refused(pg_url, pg_table, memory_index):
    index = build(pg_url, pg_table, ann=HNSW(m=8, ef_construction=32, ef_search=1000))
    assert index._backend.tables.ann == HNSW(m=8, ef_construction=32, ef_search=1000)
    assert_equal_to_memory(index, memory_index)
    assert_equal_to_memory(reopen(pg_url, pg_table), memory_index)
    narrow = reopen(pg_url, pg_table, ann=HNSW(m=8, ef_construction=32, ef_search=5))
    assert narrow._backend.tables.ann.ef_search == 5
    with pytest.raises(ValueError, match="m and ef_construction"):
        reopen(pg_url, pg_table, ann=HNSW(m=16, ef_construction=32))
    # an HNSW index built by hand with other parameters than the index records
    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    with engine.begin() as c:
        c.execute(sqlalchemy.text(f'DROP INDEX "data_{pg_table}__g4_hnsw"'))
        c.execute(sqlalchemy.text(f'CREATE INDEX ON "data_{pg_table}__g4" USING hnsw (embedding vector_cosine_ops) '
                                  "WITH (m = 4, ef_construction = 16)"))
    engine.dispose()
    with pytest.raises(ValueError, match=rf"data_{pg_table}__g4.*m=4, ef_construction=16"):
        reopen(pg_url, pg_table)


def test_tables_written_before_the_layout_open_with_a_warning_and_upgrade(pg_url, pg_table, memory_index, caplog):
    build(pg_url, pg_table)
    vs = pg_vector_store(pg_url, pg_table, DIM)
    GranularityTables(vs, GS, DIM).drop()  # what an earlier version wrote: the table alone
    with caplog.at_level(logging.WARNING):
        old = reopen(pg_url, pg_table)
    assert old._backend.layout == "filtered" and "index.upgrade_store()" in caplog.text
    assert_equal_to_memory(old, memory_index)
    old.upgrade_store()
    assert old._backend.layout == "granularity_tables"
    got, want = lists_of(pg_url, pg_table)
    assert got == want
    assert_equal_to_memory(old, memory_index)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = reopen(pg_url, pg_table)
    assert again._backend.layout == "granularity_tables" and "upgrade_store" not in caplog.text
    # the upgraded index object still takes updates (it wrote the head it holds)
    new = Document(text=" ".join(f"Sentence {i} on bacteria antibiotic resistance r8x{i}." for i in range(9)), id_="doc8")
    old.insert(new)
    memory = MultiGranularityIndex.from_documents(make_docs() + [new], granularities=GS, embed_model=RandomEmbedding(dim=DIM))
    assert_equal_to_memory(reopen(pg_url, pg_table), memory)
    got, want = lists_of(pg_url, pg_table)
    assert got == want


def test_bad_ann_and_long_table_names_are_refused(pg_url, pg_table):
    with pytest.raises(ValueError, match="ef_search must be an int"):
        HNSW(ef_search=0)
    with pytest.raises(TypeError, match="ann must be None"):
        build(pg_url, pg_table, ann={"m": 16})
    with pytest.raises(ValueError, match="ann= builds HNSW indexes in PostgreSQL"):
        MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=RandomEmbedding(dim=DIM), ann=HNSW())
    model = RandomEmbedding(dim=DIM)
    ctx = StorageContext.from_defaults(vector_store=pg_vector_store(pg_url, "t" * 50, DIM),
                                       docstore=pg_docstore(pg_url, pg_table + "_docs"))
    with pytest.raises(ValueError, match="PostgreSQL keeps 63: use a table_name of at most 43 characters"):
        MultiGranularityIndex.from_documents(make_docs(), granularities=GS, embed_model=model, storage_context=ctx)
    assert model.text_calls == 0  # refused before anything was embedded


def test_every_list_goes_out_at_once_in_statements_of_equal_work(pg_url, pg_table, monkeypatch):
    index = build(pg_url, pg_table)
    calls = []
    tables = index._backend.tables
    orig = type(tables)._fetch
    monkeypatch.setattr(type(tables), "_fetch",
                        lambda self, *a: calls.append((threading.get_ident(), a[0])) or orig(self, *a))
    index.as_fusion_retriever().retrieve(QUERIES[0])
    assert len(calls) == min(CONNECTIONS, len(GS))
    assert len({thread for thread, _ in calls}) == len(calls)  # each statement on its own connection's thread
    named = sorted(int(g) for _, sql in calls for g in re.findall(r"__g(\d+)", sql))
    assert named == sorted(GS)  # every list in exactly one statement


def test_split_by_work_puts_the_finest_scan_alone_and_spreads_hnsw_lists():
    assert split_by_work([2, 4, 8, 16, 32], 2) == [[2], [4, 8, 16, 32]]
    assert split_by_work([32, 2, 4], 2) == [[2], [4, 32]]
    assert split_by_work([4], 2) == [[4]]
    assert split_by_work([2, 4, 8], 1) == [[2, 4, 8]]
    assert split_by_work([2, 4, 8, 16, 32], 2, ann=True) == [[2, 8, 32], [4, 16]]  # HNSW: equal work a list


def test_copy_rows_fill_the_lists(pg_url, pg_table):
    vs = pg_vector_store(pg_url, pg_table, DIM)
    tables = GranularityTables(vs, GS, DIM)
    tables.create()
    nodes = [TextNode(text=f"n{i}", id_=f"n{i}", metadata={"umg_granularity": g, "umg_granularity_max": g})
             for i, g in enumerate([2, 4, 8, 2])]
    add_nodes_to_vector_store(vs, nodes, np.eye(4, DIM, dtype=np.float32))
    got = tables.query(np.eye(1, DIM, dtype=np.float32)[0], 10)
    assert got[2][0] == ["n0", "n3"] and got[4][0] == ["n1"] and got[8][0] == ["n2"]
    assert got[2][1][0] == pytest.approx(1.0)


def test_lists_left_beside_an_emptied_table_are_made_afresh(pg_url, pg_table, memory_index):
    """Lists of another dimension, left after the table was dropped by hand, do not break a build."""
    vs = pg_vector_store(pg_url, pg_table, DIM)
    GranularityTables(vs, GS, 8).create()  # 8-dimensional lists beside an empty 32-dimensional table
    index = build(pg_url, pg_table)
    got, want = lists_of(pg_url, pg_table)
    assert got == want and got[2]
    assert_equal_to_memory(index, memory_index)


def test_an_index_opened_before_another_writer_inserted_answers_from_its_own_units(pg_url, pg_table, memory_index):
    build(pg_url, pg_table)
    reader = reopen(pg_url, pg_table)
    writer = reopen(pg_url, pg_table)
    writer.insert(Document(text=" ".join(f"Sentence {i}: photosynthesis chlorophyll light in study 0." for i in range(9)),
                           id_="doc7"))
    for q in QUERIES:  # the new rows are in the tables; the reader does not hold their units
        got = reader.as_retriever(similarity_top_k=10).retrieve(q)
        assert got and not any(n.node.ref_doc_id == "doc7" for n in got)
    assert any(n.node.ref_doc_id == "doc7" for n in writer.as_retriever(similarity_top_k=10).retrieve(QUERIES[0]))
