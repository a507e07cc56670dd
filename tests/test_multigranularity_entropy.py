"""Pure UMG math (entropy.py): hand-computed values and invariants."""

import numpy as np
import pytest

from llama_index_ext_causalrag.multigranularity.entropy import (
    confidence,
    evidence_utility,
    expert_distribution,
    fuse,
    normalized_entropy,
    pool_rows,
    span_overlap,
)

LN3 = np.log(3.0)
# p = (0, 1/3, 2/3): H = (1/3) ln 3 + (2/3) ln(3/2), normalised by ln 3
C_123 = 1.0 - ((1 / 3) * LN3 + (2 / 3) * np.log(1.5)) / LN3


def test_module_is_pure():
    import ast

    import llama_index_ext_causalrag.multigranularity.entropy as m

    tree = ast.parse(open(m.__file__, encoding="utf-8").read())
    mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    mods += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    # our own pure helpers (llama_index_ext_causalrag.text.spans) are allowed; LlamaIndex is not
    assert mods and not any(x == "llama_index" or x.startswith("llama_index.") for x in mods)


def test_expert_distribution_min_max_then_sum():
    np.testing.assert_allclose(expert_distribution(np.array([1.0, 2.0, 3.0])), [0.0, 1 / 3, 2 / 3])
    np.testing.assert_allclose(expert_distribution(np.array([-2.0, 0.0])), [0.0, 1.0])


def test_expert_distribution_flat_is_uniform_and_empty_is_empty():
    np.testing.assert_allclose(expert_distribution(np.array([4.0, 4.0, 4.0, 4.0])), [0.25] * 4)
    assert expert_distribution(np.array([])).size == 0


def test_expert_distribution_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        expert_distribution(np.array([1.0, np.nan]))


def test_confidence_hand_values():
    np.testing.assert_allclose(confidence(np.array([0.0, 1 / 3, 2 / 3])), C_123, rtol=1e-12)
    np.testing.assert_allclose(C_123, 0.420620, atol=1e-6)
    assert confidence(np.array([0.0, 0.0, 1.0])) == pytest.approx(1.0)
    assert confidence(np.full(5, 0.2)) == pytest.approx(0.0, abs=1e-12)
    assert normalized_entropy(np.array([1.0])) == 0.0


def test_confidence_decreases_as_scores_flatten():
    sharp = confidence(expert_distribution(np.array([10.0, 1.0, 1.0, 0.0])))
    flat = confidence(expert_distribution(np.array([10.0, 9.0, 9.5, 0.0])))
    assert sharp > flat


def test_fuse_entropy_weights_hand_values():
    lists = [
        (np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0])),  # c = C_123
        (np.array([2, 3]), np.array([5.0, 1.0])),  # p = (1, 0), c = 1
    ]
    res = fuse(lists, n_units=4)
    w1, w2 = C_123 / (C_123 + 1.0), 1.0 / (C_123 + 1.0)
    np.testing.assert_allclose(res.confidences, [C_123, 1.0])
    np.testing.assert_allclose(res.weights, [w1, w2])
    np.testing.assert_allclose(res.P, [0.0, w1 / 3, 2 * w1 / 3 + w2, 0.0])
    assert res.P.sum() == pytest.approx(1.0)


def test_fuse_equal_weights_hand_values():
    lists = [(np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0])), (np.array([2, 3]), np.array([5.0, 1.0]))]
    res = fuse(lists, n_units=4, weighting="equal")
    np.testing.assert_allclose(res.P, [0.0, 1 / 6, 1 / 3 + 1 / 2, 0.0])


def test_fuse_empty_list_gets_no_weight_and_flat_lists_fall_back_to_equal():
    res = fuse([(np.array([0, 1]), np.array([3.0, 1.0])), (np.array([], dtype=int), np.array([]))], 2)
    np.testing.assert_allclose(res.weights, [1.0, 0.0])
    np.testing.assert_allclose(res.P, [1.0, 0.0])
    flat = fuse([(np.array([0, 1]), np.array([2.0, 2.0])), (np.array([1, 2]), np.array([7.0, 7.0]))], 3)
    # both confidences 0 -> equal weights instead of 0/0
    np.testing.assert_allclose(flat.confidences, [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(flat.P, [0.25, 0.5, 0.25])
    single = fuse([(np.array([0]), np.array([7.0]))], 1)
    assert single.confidences[0] == pytest.approx(1.0)  # one candidate holds all the mass


def test_fuse_does_not_modify_inputs_and_validates():
    scores = np.array([1.0, 2.0])
    fuse([(np.array([0, 1]), scores)], 2)
    np.testing.assert_array_equal(scores, [1.0, 2.0])
    with pytest.raises(ValueError, match="out of range"):
        fuse([(np.array([0, 5]), scores)], 2)
    with pytest.raises(ValueError, match="weighting"):
        fuse([(np.array([0, 1]), scores)], 2, weighting="max")


def test_evidence_utility_sqrt_length():
    np.testing.assert_allclose(evidence_utility(np.array([0.5, 0.2]), np.array([4, 100])), [0.25, 0.02])
    np.testing.assert_allclose(evidence_utility(np.array([0.5, 0.2]), np.array([4, 100]), alpha=0), [0.5, 0.2])
    with pytest.raises(ValueError, match="alpha"):
        evidence_utility(np.array([0.5]), np.array([4]), alpha=-1)


def test_span_overlap_relative_to_shorter():
    assert span_overlap((0, 10), (5, 20)) == pytest.approx(0.5)
    assert span_overlap((0, 100), (10, 20)) == pytest.approx(1.0)
    assert span_overlap((0, 10), (10, 20)) == 0.0


def test_pool_rows_normalised_mean():
    X = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    out = pool_rows(X, [[0, 1], [2]])
    np.testing.assert_allclose(out, [[np.sqrt(0.5), np.sqrt(0.5)], [np.sqrt(0.5), np.sqrt(0.5)]], rtol=1e-6)
    with pytest.raises(ValueError, match="empty"):
        pool_rows(X, [[]])


def test_best_window_takes_the_evidence_run_that_fits():
    from llama_index_ext_causalrag.multigranularity.fitting import best_window

    tok = np.full(6, 10.0)
    assert best_window(np.array([0, 0, 1, 2, 0, 0.0]), tok, 25) == (2, 4)
    # equal evidence: the run with more tokens, then the one centred on the evidence
    assert best_window(np.array([0, 0, 0, 1, 0, 0.0]), tok, 30) == (2, 5)
    assert best_window(np.zeros(3), np.full(3, 50.0), 30) == (0, 0)  # nothing fits
    with pytest.raises(ValueError):
        best_window(np.array([1.0, -1.0]), np.ones(2), 5)


def test_best_sentences_greedy_by_evidence_per_token():
    from llama_index_ext_causalrag.multigranularity.fitting import best_sentences

    ev = np.array([0, 3, 1, 2, 0, 5.0])
    tok = np.full(6, 10.0)
    # ratios 0.5 (5), 0.3 (1), 0.2 (3), 0.1 (2); each costs 11 with the join token
    assert best_sentences(ev, tok, 33) == [(1, 2), (3, 4), (5, 6)]
    assert best_sentences(ev, tok, 44) == [(1, 4), (5, 6)]
    assert best_sentences(ev, tok, 200) == [(1, 4), (5, 6)]  # no evidence, never picked
    # a long sentence with more evidence loses to a short one with more evidence per token
    assert best_sentences(np.array([4.0, 3.0]), np.array([40.0, 10.0]), 45) == [(1, 2)]
