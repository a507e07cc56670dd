import pytest

from causalrag_bench import metrics as M

GOLD = [("d1", 100, 200), ("d2", 0, 40)]


def test_coverage_threshold_is_75_percent():
    assert M.recall([("d1", 125, 260)], GOLD[:1]) == 1.0  # 75 of 100 chars
    assert M.recall([("d1", 126, 260)], GOLD[:1]) == 0.0  # 74 of 100 chars


def test_coverage_unions_pieces_and_docs_matter():
    assert M.recall([("d1", 100, 140), ("d1", 140, 180)], GOLD[:1]) == 1.0
    assert M.recall([("d2", 100, 200)], GOLD[:1]) == 0.0
    assert M.recall([("d1", 100, 200)], GOLD) == 0.5


def test_doc_rule_counts_any_overlap():
    assert M.recall([("d2", 39, 90)], GOLD[1:], rule="doc") == 1.0
    assert M.recall([("d2", 40, 90)], GOLD[1:], rule="doc") == 0.0


def test_precision_counts_duplicates():
    assert M.precision([("d1", 100, 200)], GOLD) == 1.0
    assert M.precision([("d1", 150, 250)], GOLD) == 0.5
    assert M.precision([("d1", 100, 200), ("d1", 300, 400)], GOLD) == 0.5


def test_mrr_and_ap_hand_computed():
    retrieved = [("x", 0, 10), ("d2", 0, 40), ("x", 20, 30), ("d1", 100, 200)]
    assert M.mrr_at_k(retrieved, GOLD, 10) == 0.5
    assert M.mrr_at_k(retrieved, GOLD, 1) == 0.0
    # new gold at ranks 2 and 4: (1 * 1/2 + 1 * 2/4) / 2
    assert M.ap_at_k(retrieved, GOLD, 5) == pytest.approx(0.5)
    assert M.ap_at_k([("d1", 100, 200), ("d2", 0, 40)], GOLD, 5) == 1.0


def test_no_gold_is_an_error():
    with pytest.raises(ValueError, match="no gold"):
        M.recall([("d1", 0, 1)], [])
