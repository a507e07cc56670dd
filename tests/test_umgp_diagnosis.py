"""benchmarks/scripts/diagnose_umgp.py: gold-token shares, which list holds missed gold, the table."""

import sys
from pathlib import Path

import numpy as np
import pytest

from causalrag_bench.perf_tables import umgp_diagnosis_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
import diagnose_umgp as dx  # noqa: E402


def test_node_kind_reads_the_promotion_provenance():
    assert dx.node_kind({"stage": "parent_promotion", "promoted_from": ["c1", "c2"]}) == "parent_whole"
    assert dx.node_kind({"promoted_from": ["c1"], "fitted_from": "p", "fit_mode": "sentences"}) == "parent_fitted"
    assert dx.node_kind({"promoted_from": []}) == "unit_whole"
    assert dx.node_kind({"promoted_from": [], "fitted_from": "u", "fit_mode": "truncated"}) == "unit_fitted"


def test_gold_token_share_weighs_each_piece_by_its_characters_inside_gold():
    gold = [("d", 90, 110)]
    pieces = [
        dx.Piece("parent_whole", ("d", 0, 100), 20.0, "p1"),  # 10 of 100 chars gold: 2.0 gold tokens
        dx.Piece("parent_fitted", ("d", 100, 120), 5.0, "p2"),  # 10 of 20: 2.5
        dx.Piece("parent_fitted", ("e", 90, 110), 4.0, "p3"),  # another document: none
        dx.Piece("unit_whole", None, 3.0, "u1"),
    ]  # unplaced: none
    out = dx.gold_token_share(pieces, gold)
    assert out["parent_whole"] == {"tokens": 20.0, "gold_tokens": pytest.approx(2.0), "pieces": 1, "with_gold": 1}
    assert out["parent_fitted"]["tokens"] == 9.0 and out["parent_fitted"]["gold_tokens"] == pytest.approx(2.5)
    assert out["parent_fitted"]["pieces"] == 2 and out["parent_fitted"]["with_gold"] == 1
    assert out["unit_whole"]["gold_tokens"] == 0.0 and "unit_fitted" not in out
    stats = dx.context_stats(pieces, gold, "span")
    # the union of ("d", 0, 100) and ("d", 100, 120) covers all of the gold span
    assert stats["cr"] == 1.0 and stats["pieces"] == 4 and stats["passages"] == 4 and stats["docs"] == 2


def test_first_holding_needs_one_span_covering_three_quarters_of_the_gold():
    ranked = dx.RankedSpans.of([("d", 0, 10), ("e", 0, 100), None, ("d", 0, 50)])
    assert ranked.first_holding(("d", 10, 30)) == 4  # rank 1 touches it, rank 2 is another document
    assert ranked.first_holding(("d", 0, 8)) == 1
    assert ranked.first_holding(("d", 35, 55)) == 4  # 15 of 20 chars: exactly 75%
    assert ranked.first_holding(("d", 40, 60)) is None  # 10 of 20 chars
    assert ranked.first_holding(("d", 40, 60), rule="doc") == 4  # any overlap
    assert ranked.take(np.asarray([1, 0])).first_holding(("d", 0, 8)) == 2
    assert dx.RankedSpans.of([]).first_holding(("d", 0, 8)) is None


def _missed_example():
    gold = [("d", 0, 10), ("d", 100, 110), ("d", 200, 210), ("d", 300, 310), ("d", 400, 410)]
    context = [("d", 0, 20), ("d", 380, 395)]  # covers gold 0; the context's piece of passage ("d", 380, 420)
    others = {"bm25": [("d", 95, 115)], "dense": []}
    ranked = {
        "sparse@2": dx.RankedSpans.of([("x", 0, 5), ("x", 5, 9), ("d", 100, 112)]),  # gold 1 at rank 3
        "dense@2": dx.RankedSpans.of([("x", 0, 5)] * 150 + [("d", 198, 212)]),  # gold 2 at rank 151
        "fused": dx.RankedSpans.of([("d", 300, 320)]),  # gold 3
    }
    return dx.missed_gold(gold, context, others, ranked, [("d", 380, 420)])


def test_missed_gold_is_put_where_it_was_lost():
    rows = _missed_example()
    assert len(rows) == 4  # gold 0 is in the context
    assert [r["contexts"]["bm25"] for r in rows] == [True, False, False, False]
    assert rows[0]["ranks"] == {"sparse@2": 3, "dense@2": None, "fused": None}
    assert rows[1]["ranks"]["dense@2"] == 151
    assert [dx.lost_at(r, per_list=100) for r in rows] == [
        "fusion",
        "list_depth",
        "passage_not_taken",
        "cut_from_taken_passage",
    ]
    assert dx.lost_at(rows[1], per_list=200) == "fusion"  # a deeper list would have held it
    assert dx.best_rank({"sparse@2": 7, "sparse@32": 2, "dense@2": 1}, "sparse") == 2


def test_source_shares_count_each_missed_span_once_per_source():
    shares = dx.source_shares(_missed_example(), per_list=100)
    assert shares["bm25_context"] == 25.0 and shares["dense_context"] == 0.0
    assert shares["sparse_lists"] == 25.0 and shares["sparse_top10"] == 25.0
    assert shares["dense_lists"] == 0.0 and shares["dense_deeper_only"] == 25.0
    assert shares["sparse_not_dense"] == 25.0 and shares["fused_candidates"] == 25.0
    assert shares["bm25_context_not_sparse_lists"] == 0.0
    assert dx.source_shares([], per_list=100)["bm25_context"] is None


def test_list_weights_are_the_entropy_confidences_normalised():
    p = np.asarray([2 / 3, 1 / 3])  # [2, 1, 0] min-max normalised, over its sum
    c = 1 - float(-(p * np.log(p)).sum() / np.log(3))
    w = dx.list_weights(
        {
            "sparse@2": np.asarray([3.0, 1.0]),
            "dense@2": np.asarray([2.0, 1.0, 0.0]),
            "dense@4": np.asarray([0.5, 0.5, 0.5]),
        }
    )
    np.testing.assert_allclose([w["sparse@2"], w["dense@2"], w["dense@4"]], [1 / (1 + c), c / (1 + c), 0.0], atol=1e-12)
    eq = dx.list_weights({"a": np.asarray([3.0, 1.0]), "b": np.asarray([0.5, 0.5])}, weighting="equal")
    assert eq == {"a": 0.5, "b": 0.5}


def _record(group, gold, umgp_pieces, missed):
    ctx = {
        name: dx.context_stats(
            umgp_pieces if name == "umgp" else [dx.Piece("chunk", ("d", 0, 10), 10.0, "c")], gold, "span"
        )
        for name in dx.CONTEXTS
    }
    return {
        "group": group,
        "n_gold": len(gold),
        "sparse_weight": 0.5,
        "budgets": {64: {"contexts": ctx, "missed": missed}},
    }


def test_summary_pools_gold_tokens_and_the_table_shows_them():
    gold = [("d", 0, 10), ("d", 50, 60)]
    recs = [
        _record("A", gold, [dx.Piece("parent_whole", ("d", 0, 40), 40.0, "p")], _missed_example()[:1]),
        _record(
            "B",
            gold,
            [dx.Piece("parent_fitted", ("d", 50, 60), 10.0, "q"), dx.Piece("unit_whole", ("d", 0, 10), 10.0, "u")],
            [],
        ),
    ]
    setup = dx.Setup(None, None, {}, [("sparse@2", None, None), ("dense@2", None, None)], 100, 1000, "span")
    s = dx.summarise(recs, [64], setup)
    u = s["budgets"]["64"]["contexts"]["umgp"]
    assert u["CR"] == 75.0 and u["tokens"] == 30.0  # (1/2 + 2/2) / 2; (40 + 20) / 2
    assert u["gold_share"] == pytest.approx(round(100 * 30 / 60, 1))  # 10 of 40, 10 of 10, 10 of 10 gold tokens
    assert u["kinds"]["parent_whole"]["gold_share"] == 25.0 and u["kinds"]["parent_fitted"]["tokens"] == 5.0
    assert s["budgets"]["64"]["missed"] == 1 and s["budgets"]["64"]["lost_at"]["fusion"] == 100.0
    assert s["budgets"]["64"]["lists"] == {"sparse@2": 100.0, "dense@2": 0.0}
    assert s["budgets"]["64"]["lists_top10"] == {"sparse@2": 100.0, "dense@2": 0.0}
    report = {
        "dataset": "holisqa",
        "path": "$DATA/holisqa/biology",
        "n_questions": 2,
        "corpus_size": 1,
        "budgets": [64],
        "command": "python benchmarks/scripts/diagnose_umgp.py x",
        "settings": {"candidates": 50, "candidates_per_list": 100, "lists": ["sparse@2", "dense@2"]},
        "all": s,
        "groups": {"A": dx.summarise(recs[:1], [64], setup)},
    }
    lines = umgp_diagnosis_table(report).splitlines()
    assert lines[2].startswith(
        "| all (2) | 64 | 75.0 / 50.0 / 50.0 / 50.0 | 50.0 / 100.0 / 100.0 / 100.0 "
        "| 30 / 10 / 10 / 10 | 20 (25.0%) | 5 (100.0%) | 5 (100.0%) | – | 1.5 / 1.5 / 1.0 | 1.0 / 1.0 |"
    )
    assert lines[3].startswith("| A (1) | 64 | 50.0 /")
    missed = next(ln for ln in lines if ln.startswith("| all (2) | 64 | 1 (25.0%)"))
    assert "| sparse top 10 at 2 | dense top 10 at 2 |" in lines[5]
    assert (
        "| 100.0 (100.0) | 0.0 (0.0) | 100.0 | 0.0 | 100.0 / 0.0 | 0.0 | 0.0 / 0.0 / 100.0 / 0.0 / 0.0 | 0.50 |"
        in missed
    )
    assert "`python benchmarks/scripts/diagnose_umgp.py x`" in lines[-1]
