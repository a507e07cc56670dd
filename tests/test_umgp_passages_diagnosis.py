"""benchmarks/scripts/diagnose_umgp_passages.py and tune_umgp_fusion.py: the stage a gold passage was
lost at, the paired differences, and the fusion modes tried."""

import sys
from pathlib import Path

import numpy as np
import pytest

from llama_index_ext_causalrag.multigranularity.entropy import fuse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "scripts"))
import diagnose_umgp_passages as dx  # noqa: E402
import tune_umgp_fusion as tf  # noqa: E402


def _ranks(**by_row):
    rows = {"fusion": [], "fusion_nolen": [], "dense_expert": [], "sparse_expert": [], "umgp_passages": [], "rrf": []}
    rows.update({k: [v] for k, v in by_row.items()})
    return {k: v if v else [[]] for k, v in rows.items()}


def test_where_lost_names_the_first_stage_without_the_passage_in_its_first_five():
    five = ["a", "b", "c", "d", "g"]
    assert dx.where_lost("g", 0, _ranks(fusion=five)) == "promotion"
    assert dx.where_lost("g", 0, _ranks(fusion=["a"], fusion_nolen=five)) == "length_penalty"
    assert dx.where_lost("g", 0, _ranks(dense_expert=five)) == "fusion_dense_only"
    assert dx.where_lost("g", 0, _ranks(sparse_expert=five)) == "fusion_sparse_only"
    assert dx.where_lost("g", 0, _ranks(dense_expert=five, sparse_expert=five)) == "fusion_both"
    # sixth place is not the first five
    assert dx.where_lost("g", 0, _ranks(dense_expert=["a", "b", "c", "d", "e", "g"])) == "experts"


def test_changes_count_lost_and_gained_gold_by_stage_and_length():
    ranks = _ranks(rrf=["g1", "x", "g2"], umgp_passages=["x", "g2", "g3"], dense_expert=["g1"])
    out = dx.changes([["g1", "g2", "g3"]], ranks, "rrf", long_docs={"g3"})
    # g1: rrf has it, umgp does not (the dense expert alone has it: lost at fusion); g2 both; g3 gained
    assert out["lost"] == {"total": 1, "stage:fusion_dense_only": 1, "short": 1}
    assert out["gained"] == {"total": 1, "long": 1}


def test_paired_difference_and_its_standard_error():
    ranks = {"umgp_passages": [["a", "b"], ["x", "y"]], "rrf": [["a", "x"], ["x", "c"]]}
    gold = [["a", "b"], ["c"]]
    # per question at k=2: umgp 1.0 and 0.0, rrf 0.5 and 1.0: differences +0.5 and -1.0
    out = dx.paired(gold, ranks, "rrf", 2)
    assert out["diff"] == -25.0 and out["questions_differing"] == 2
    assert out["se"] == pytest.approx(100 * np.std([0.5, -1.0], ddof=1) / np.sqrt(2), abs=0.01)


def test_fuse_mode_sum_is_the_package_fusion_and_mm_skips_the_mass_normalisation():
    cands = [(np.array([0, 1, 2]), np.array([0.9, 0.8, 0.1])), (np.array([2, 3]), np.array([5.0, 1.0]))]
    tf.MODE["name"] = "sum"
    assert np.allclose(tf.fuse_mode(cands, 4).P, fuse(cands, 4).P)
    tf.MODE["name"] = "mm"
    res = tf.fuse_mode(cands, 4)
    base = fuse(cands, 4)
    w = base.confidences / base.confidences.sum()
    # min-max values: list 0 gives 1, 0.875, 0; list 1 gives 1, 0; then P is normalised to sum 1
    raw = np.array([w[0] * 1.0, w[0] * 0.875, w[1] * 1.0, 0.0])
    assert np.allclose(res.P, raw / raw.sum())
    tf.MODE["name"] = "rrf60"
    res = tf.fuse_mode(cands, 4)
    raw = np.array([1 / 61, 1 / 62, 1 / 63 + 1 / 61, 1 / 62]) / 2
    assert np.allclose(res.P, raw / raw.sum())
    tf.MODE["name"] = "sum"


def test_confidence_on_the_top_scores_and_the_dense_prior():
    s = np.array([1.0, 0.9, 0.2, 0.1, 0.0])
    from llama_index_ext_causalrag.multigranularity.entropy import confidence, expert_distribution

    assert tf.list_confidence("mm_c2", s, dense=False) == pytest.approx(confidence(expert_distribution(s[:2])))
    full = confidence(expert_distribution(s))
    assert tf.list_confidence("sum_dw2", s, dense=True) == pytest.approx(2 * full)
    assert tf.list_confidence("sum_dw2", s, dense=False) == pytest.approx(full)
