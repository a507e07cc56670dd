import numpy as np
import pytest

from llama_index_ext_causalrag.fusion import min_max_normalize, reciprocal_rank_fusion, top_k_indices


def test_rrf_hand_computed():
    got = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]], k=60)
    assert list(got)[:2] == ["b", "a"]
    np.testing.assert_allclose(got["b"], 1 / 62 + 1 / 61)
    np.testing.assert_allclose(got["a"], 1 / 61)
    np.testing.assert_allclose(got["d"], 1 / 62)


def test_rrf_weights():
    got = reciprocal_rank_fusion([["a"], ["b"]], k=0, weights=[1.0, 3.0])
    assert got == {"b": 3.0, "a": 1.0}
    with pytest.raises(ValueError, match="one weight per ranking"):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


def test_min_max_and_top_k():
    np.testing.assert_allclose(min_max_normalize(np.array([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(min_max_normalize(np.array([5.0, 5.0])), [1.0, 1.0])
    assert top_k_indices(np.array([0.1, 0.9, 0.5, 0.9]), 3).tolist() == [1, 3, 2]
    assert top_k_indices(np.array([1.0]), 0).tolist() == []
