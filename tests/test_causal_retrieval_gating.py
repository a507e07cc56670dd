"""Pure CausalRAG2 retrieval math (gating.py) on hand-made graphs, values computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from llama_index_ext_causalrag.causal_graph.expansion import (
    GATE,
    HIERARCHY,
    MEMBERSHIP,
    RELATION,
    UnifiedGraph,
    best_first_expand,
    cosine_to,
    gain,
    lexical_overlap,
    mmr_select,
    path_is_causal,
    seed_scores,
)


def test_seed_scores_by_hand() -> None:
    cos = np.array([1.0, 0.5, 0.0])
    lex = np.array([0.0, 1.0, 1.5])  # 1.5 = full overlap + verbatim bonus
    np.testing.assert_allclose(seed_scores(cos, lex, 0.7), [0.7, 0.65, 0.45])
    np.testing.assert_allclose(seed_scores(cos, lex, 1.0), cos)
    with pytest.raises(ValueError, match="one shape"):
        seed_scores(cos, lex[:2])


def test_lexical_overlap_share_of_distinct_query_terms() -> None:
    postings = {"drought": np.array([0, 2]), "yield": np.array([2]), "crop": np.array([1])}
    lex = lexical_overlap(["drought", "yield", "yield", "rain"], postings, 4)
    np.testing.assert_allclose(lex, [1 / 3, 0.0, 2 / 3, 0.0])
    np.testing.assert_allclose(lexical_overlap([], postings, 3), np.zeros(3))


def test_cosine_to_equals_matmul() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(7, 5)).astype(np.float32)
    q = rng.normal(size=5).astype(np.float32)
    np.testing.assert_allclose(cosine_to(m, q), m @ q, rtol=1e-5)


def test_mmr_lambda_one_is_plain_top_k_and_diversity_penalises_duplicates() -> None:
    s = np.array([0.9, 0.89, 0.5, 0.1])
    e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    assert mmr_select(s, e, 3, lam=1.0) == [0, 1, 2]
    # lam = 0.5: after 0, the duplicate 1 scores 0.445 - 0.5 = -0.055, node 2 scores 0.25 - 0 = 0.25
    assert mmr_select(s, e, 2, lam=0.5) == [0, 2]
    assert mmr_select(s, e, 0) == []
    assert sorted(mmr_select(s, e, 10)) == [0, 1, 2, 3]  # k larger than n: every node once
    assert mmr_select(s, e, 2, pool=1) == [0]


def test_mmr_rows_reads_a_subset_in_place() -> None:
    # rows=members gives the same picks as passing the subset's embeddings (no copy needed)
    rng = np.random.default_rng(3)
    e = rng.normal(size=(40, 6))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    members = np.array([3, 7, 8, 15, 21, 22, 30, 38])
    s = rng.random(len(members))
    assert mmr_select(s, e, 4, 0.6, 5, rows=members) == mmr_select(s, e[members], 4, 0.6, 5)
    assert mmr_select(s, e, 4, 0.6, rows=members[:3]) == [int(i) for i in np.argsort(-s)[:4]]  # shape mismatch


def test_expansion_fanout_keeps_the_best_neighbours_ties_in_adjacency_order() -> None:
    # a hub 0 with six equal-score neighbours and one better one: fanout 3 takes the better one,
    # then the first two equal ones in the order the edges were given
    edges = [(0, j, RELATION) for j in (6, 2, 5, 1, 4, 3)] + [(0, 7, RELATION)]
    g = UnifiedGraph.from_edges(8, edges)
    s = np.array([1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9])
    reached = best_first_expand(
        g, s, {0: 1.0}, gamma=1.0, weights={RELATION: 1.0, GATE: 1.0, HIERARCHY: 1.0, MEMBERSHIP: 1.0}, max_fanout=3
    )
    assert [r.node for r in reached] == [0, 7, 6, 2]


def test_gain_formula() -> None:
    assert gain(0.5, 0, None) == pytest.approx(0.5)
    assert gain(0.5, 2, GATE) == pytest.approx(0.5 * 0.49 * 1.2)
    assert gain(0.5, 1, RELATION) == pytest.approx(0.5 * 0.7 * 0.8)
    assert gain(1.0, 1, HIERARCHY, gamma=0.5, weights={HIERARCHY: 2.0}) == pytest.approx(1.0)


def _graph() -> UnifiedGraph:
    # 0 -relation- 1 -relation- 2 ; 0 -membership- 3 (module) -gate- 4 (module) -membership- 5
    edges = [(0, 1, RELATION), (1, 2, RELATION), (0, 3, MEMBERSHIP), (3, 4, GATE), (4, 5, MEMBERSHIP)]
    return UnifiedGraph.from_edges(6, edges, causal_edges=[(1, 2)])


def test_best_first_expansion_gains_paths_and_order() -> None:
    scores = np.array([1.0, 0.6, 0.9, 0.4, 0.8, 0.9])
    out = best_first_expand(_graph(), scores, {0: 1.0}, max_fanout=5, max_nodes=10)
    by = {r.node: r for r in out}
    assert set(by) == {0, 1, 2, 3, 4, 5}
    # hop 1: gain(1) = 0.6*0.7*0.8 = 0.336 ; gain(3) = 0.4*0.7*1.0 = 0.28
    assert by[1].gain == pytest.approx(0.336)
    assert by[3].gain == pytest.approx(0.28)
    # hop 2: gate edge: gain(4) = 0.8*0.49*1.2 = 0.4704 ; relation: gain(2) = 0.9*0.49*0.8 = 0.3528
    assert by[4].gain == pytest.approx(0.4704)
    assert by[2].gain == pytest.approx(0.3528)
    assert by[5].gain == pytest.approx(0.9 * 0.343)
    assert by[5].path == [0, 3, 4, 5] and by[5].edge_types == [MEMBERSHIP, GATE, MEMBERSHIP]
    assert by[2].path == [0, 1, 2] and by[2].hop == 2 and by[2].seed == 0
    # a true priority queue, not hop by hop: node 2 (hop 2, gain 0.3528) is popped before
    # node 3 (hop 1, gain 0.28); a breadth-first expansion would give [0, 1, 3, 2, 4, 5]
    assert [r.node for r in out] == [0, 1, 2, 3, 4, 5]


def test_fanout_max_nodes_and_min_gain_stop_the_search() -> None:
    scores = np.array([1.0, 0.5, 0.9, 0.4, 0.8, 0.9])
    g = _graph()
    one = best_first_expand(g, scores, {0: 1.0}, max_fanout=1, max_nodes=10)
    # from 0 only the best neighbour is pushed (1 and 3 tie at 0.28; the stable sort keeps the first listed)
    assert len({1, 3} & {r.node for r in one}) == 1
    assert len(best_first_expand(g, scores, {0: 1.0}, max_nodes=3)) == 3
    few = best_first_expand(g, scores, {0: 1.0}, min_gain=0.3)
    assert [r.node for r in few] == [0]  # both hop-1 gains are 0.28 < 0.3
    assert best_first_expand(g, scores, {}, max_nodes=10) == []


def test_seed_keeps_best_of_two_paths() -> None:
    g = UnifiedGraph.from_edges(3, [(0, 2, RELATION), (1, 2, GATE)])
    out = best_first_expand(g, np.array([1.0, 1.0, 1.0]), {0: 1.0, 1: 0.9})
    by = {r.node: r for r in out}
    assert by[2].edge_types == [GATE] and by[2].seed == 1
    assert by[2].gain == pytest.approx(1.0 * 0.7 * 1.2)


def test_without_removes_one_edge_type() -> None:
    g = _graph().without(GATE)
    out = best_first_expand(g, np.ones(6), {0: 1.0})
    assert {r.node for r in out} == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="edge type"):
        UnifiedGraph.from_edges(2, [(0, 1, "friend")])


def test_path_is_causal() -> None:
    causal = {(1, 2): True}
    assert path_is_causal([0, 3, 4], [MEMBERSHIP, GATE], causal)
    assert path_is_causal([1, 2], [RELATION], causal)
    assert not path_is_causal([0, 1, 2], [RELATION, RELATION], causal)  # 0-1 is bare co-occurrence
    assert not path_is_causal([0, 3], [MEMBERSHIP], causal)
    assert not path_is_causal([0], [], causal)
