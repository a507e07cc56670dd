"""benchmarks/scripts/multi_article_reach.py: primary and secondary gold, ranks, umgp's split, headroom."""

import json
import sys
from pathlib import Path

from causalrag_bench import perf_tables
from test_eval_bench import write_holisqa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
import multi_article_reach as reach  # noqa: E402

QA = [
    # gold in A1 (two sentences), A3 and A4 (a copy of A1, added below): A1 is primary
    {
        "qa_id": "M1",
        "question": "How does MEK inhibition affect ERK activation in tumour cells?",
        "answer": "-",
        "context_sentence_ids": ["S2", "S3", "S7", "S10"],
    },
    {
        "qa_id": "S1",
        "question": "How does influenza virus enter epithelial cells?",
        "answer": "-",
        "context_sentence_ids": ["S4", "S5"],
    },
]


def test_ranks_are_one_based_and_stable_on_ties():
    assert reach._ranks(reach.np.asarray([0.2, 0.9, 0.2, 0.5])).tolist() == [3, 1, 4, 2]


def _add_copy_of_a1(root):
    """A4: the same title and sentences as A1 (S8-S10), as HolisQA holds duplicated abstracts."""
    sents = [json.loads(line) for line in (root / "sentences.jsonl").read_text().splitlines()]
    copy = [
        {**s, "sentence_id": f"S{8 + i}", "article_id": "A4"}
        for i, s in enumerate(x for x in sents if x["article_id"] == "A1")
    ]
    with (root / "sentences.jsonl").open("a") as f:
        f.writelines(json.dumps(s) + "\n" for s in copy)
    with (root / "articles.jsonl").open("a") as f:
        f.write(json.dumps({"article_id": "A4", "title": "Kinase signalling"}) + "\n")


def test_script_splits_gold_and_bounds_the_headroom(tmp_path, capsys):
    data = write_holisqa(tmp_path / "biology", QA)
    _add_copy_of_a1(data)
    out = tmp_path / "out"
    assert (
        reach.main(
            [
                "--path",
                str(data),
                "--budgets",
                "16,1024",
                "--top-articles",
                "1",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads((out / "results.json").read_text())
    dom = report["domains"]["biology"]
    (row,) = dom["questions"]  # only the multi-article question
    assert row["qid"] == "M1" and row["primary"] == "A1"
    a3, a4 = row["secondary"]
    assert (a3["doc"], a3["same_text_as_primary"], a4["doc"], a4["same_text_as_primary"]) == ("A3", False, "A4", True)
    assert all(1 <= g["rank"] <= 10 for g in row["gold_sentence_ranks"])
    s = dom["summary"]
    assert (s["questions"], s["gold_secondary_share"], s["sentences"], s["secondary_articles_same_text"]) == (
        1,
        50.0,
        10,
        1,
    )
    assert s["single_article_far_pct"] == 0.0  # S1's article is its top article by both rankers
    # A3 does not match a question on MEK and ERK: it is not the question's top article
    assert min(a3["dense_rank"], a3["bm25_rank"]) > 1 and s["questions_primary_far"] == 0
    for b in ("16", "1024"):
        part = row["budgets"][b]
        assert part["primary"] <= 1 / 2 + 1e-9 and part["secondary"] <= 1 / 2 + 1e-9
        # headroom: uncovered secondary gold in reachable articles only
        assert part["headroom"] <= 1 / 2 - part["secondary"] + 1e-9
        if not a3["graph_reached"] and not a4["graph_reached"] and min(a4["dense_rank"], a4["bm25_rank"]) > 1:
            assert part["headroom"] == 0
    # 1024 tokens hold the primary article's gold; 16 tokens hold less of it
    assert row["budgets"]["1024"]["primary"] == 1 / 2
    assert row["budgets"]["16"]["primary"] < 1 / 2
    assert "biology" in capsys.readouterr().out

    table = perf_tables.multi_article_reach_table(report)
    assert "| gold sentences in secondary articles | 50.0% |" in table
    assert "| secondary articles that are a copy of the primary (same text) | 1 of 2 |" in table
    assert (
        f"`umgp` CR@1024: primary + secondary gold | 50.0 + {100 * row['budgets']['1024']['secondary']:.1f} |" in table
    )
    assert "multi_article_reach.py --path" in table
