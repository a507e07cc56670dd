"""Personalized PageRank (causal_graph/propagation.py) and PropagationRetriever on hand-made graphs."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_ext_causalrag import get_provenance
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Entity, Gate, Module
from llama_index_ext_causalrag.causal_graph.propagation import WeightedGraph, personalized_pagerank
from llama_index_ext_causalrag.causal_graph.propagation_retriever import PropagationRetriever


def test_pagerank_on_a_path_gives_the_hand_computed_distribution():
    # 0 - 1 - 2, restart at 0, d = 1/2: p0 = 1/2 + p1/4, p1 = (p0 + p2)/2, p2 = p1/4
    g = WeightedGraph.from_edges(3, np.array([0, 1]), np.array([1, 2]), np.array([1.0, 1.0]))
    p = personalized_pagerank(g, np.array([1.0, 0.0, 0.0]), damping=0.5)
    assert p == pytest.approx([7 / 12, 1 / 3, 1 / 12], abs=1e-7)


def test_pagerank_on_a_disconnected_graph_keeps_each_part_its_share():
    # node 3 has no edge: its mass p3 = (1 - d) r3 / (1 - d r3) = 1/3; the rest stays a distribution
    g = WeightedGraph.from_edges(4, np.array([0, 1]), np.array([1, 2]), np.array([1.0, 2.0]))
    p = personalized_pagerank(g, np.array([1.0, 0.0, 0.0, 1.0]), damping=0.5)
    assert p[3] == pytest.approx(1 / 3, abs=1e-7)
    assert p.sum() == pytest.approx(1.0)
    assert personalized_pagerank(g, np.zeros(4)).tolist() == [0.0] * 4


def test_pagerank_refuses_bad_input_by_name():
    g = WeightedGraph.from_edges(2, np.array([0]), np.array([1]), np.array([1.0]))
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank(g, np.ones(2), damping=1.0)
    with pytest.raises(ValueError, match="reset has shape"):
        personalized_pagerank(g, np.ones(3))
    with pytest.raises(ValueError, match="endpoints"):
        WeightedGraph.from_edges(2, np.array([0]), np.array([5]), np.array([1.0]))


DIM = 4


def _hand_index(gates: bool = True, entities: bool = True):
    """Entities alpha, beta (module M1), gamma (M2), delta (M3); unit u<i> mentions entity i; a
    gate joins M1 and M2. Names and vectors are chosen so only 'alpha' matches the query 'alpha'
    and, by text alone, u3 outranks u2."""
    names = ["alpha", "beta", "gamma", "delta"]
    units = [TextNode(id_=f"u{i}", text=f"{n} {n}") for i, n in enumerate(names)]
    g = CausalGraph()
    if entities:
        for i, n in enumerate(names):
            g.entities[f"E:{n}"] = Entity(id=f"E:{n}", name=n, unit_ids=[f"u{i}"])
        g.modules = {
            "M1": Module("M1", 0, ["E:alpha", "E:beta"], title="one"),
            "M2": Module("M2", 0, ["E:gamma"], title="two"),
            "M3": Module("M3", 0, ["E:delta"], title="three"),
        }
        if gates:
            g.gates = [Gate("M1", "M2", 0, score=1.0)]
    g.sort()
    ne, nm = len(g.entities), len(g.modules)
    unit_emb = np.zeros((4, DIM), np.float32)
    unit_emb[:, 0] = 1.0
    unit_emb[3, 1] = 0.5  # u3 is a little closer to the query than u0-u2
    idx = SimpleNamespace(
        graph=g,
        units=units,
        entity_ids=sorted(g.entities),
        module_ids=sorted(g.modules),
        entity_embeddings=np.tile(np.eye(1, DIM, 2, dtype=np.float32), (ne, 1)),
        module_embeddings=np.tile(np.eye(1, DIM, 3, dtype=np.float32), (nm, 1)),
        embed_model=None,
    )
    return idx, unit_emb


def _retrieve(idx, unit_emb, query="alpha", **kw):
    r = PropagationRetriever(idx, unit_embeddings=unit_emb, similarity_top_k=4, **kw)
    q = np.zeros(DIM, np.float32)
    q[1] = 1.0
    return r.retrieve(QueryBundle(query_str=query, embedding=q.tolist()))


def _dense_ppr(idx, unit_emb, text_share):
    """The retriever's PageRank solved directly: p = (1 - d) (I - d P^T)^-1 r (no power iteration)."""
    r = PropagationRetriever(idx, unit_embeddings=unit_emb, text_share=text_share)
    n = r._wgraph.n
    P = r._wgraph.transition.toarray().T  # P[i, j]: the chance to step from i to j
    s_nodes, units, _ = r._scores("alpha", np.eye(1, DIM, 1, dtype=np.float32)[0])
    reset, _ = r._reset(r._seeds(s_nodes), units.s)  # the unit scores' array, as _search passes it
    reset = reset / reset.sum()
    return np.linalg.solve(np.eye(n) - 0.5 * P.T, 0.5 * reset)[len(r._ids) :]


def test_units_are_ranked_by_their_pagerank_mass_and_a_gate_carries_mass_to_another_module():
    idx, emb = _hand_index(gates=True)
    nodes = _retrieve(idx, emb, text_share=0.0)
    assert [n.node.node_id for n in nodes] == ["u0", "u1", "u2", "u3"]
    expected = _dense_ppr(idx, emb, text_share=0.0)
    assert [n.score for n in nodes] == pytest.approx(expected.tolist(), abs=1e-7)
    assert nodes[2].score > 0 and nodes[3].score == 0  # gamma is reached through the gate, delta is not
    prov = get_provenance(nodes[0])
    assert prov["stage"] == "propagation" and prov["seeds"][0] == "alpha" and not prov["fallback"]


def test_without_the_gate_the_other_module_gets_no_mass_and_text_decides():
    idx, emb = _hand_index(gates=False)
    nodes = _retrieve(idx, emb, text_share=0.0)
    assert [n.node.node_id for n in nodes] == ["u0", "u1", "u3", "u2"]
    assert nodes[2].score == nodes[3].score == 0
    idx, emb = _hand_index(gates=True)
    assert [n.node.node_id for n in _retrieve(idx, emb, text_share=0.0, use_gates=False)] == ["u0", "u1", "u3", "u2"]


def test_a_query_matching_no_entity_falls_back_to_the_text_scores_and_says_so(caplog):
    idx, emb = _hand_index()
    with caplog.at_level(logging.INFO, logger="llama_index_ext_causalrag.causal_graph.propagation_retriever"):
        nodes = _retrieve(idx, emb, query="zebra")
    assert [n.node.node_id for n in nodes][0] == "u3"  # the closest unit by text score
    assert all(get_provenance(n)["fallback"] for n in nodes)
    assert "no entity or module shares a term" in caplog.text


def test_an_empty_graph_ranks_units_by_text_alone():
    idx, emb = _hand_index(entities=False)
    nodes = _retrieve(idx, emb)
    assert len(nodes) == 4 and nodes[0].node.node_id == "u3"
    assert all(get_provenance(n)["fallback"] for n in nodes)


def test_the_ppr_presets_come_from_the_facade(tmp_path):
    from llama_index.core import Document

    from llama_index_ext_causalrag.causal_graph import (
        CausalGraphIndex,
        ExtractiveSummarizer,
        OfflineEntityExtractor,
        OfflineGateJudge,
    )
    from llama_index_ext_causalrag.pipeline import PostprocessedRetriever

    docs = [
        Document(id_="a", text="Soil erosion reduces crop yields. Low crop yields cause a fall in farm income."),
        Document(id_="b", text="High fertilizer prices reduce farm income. Crop yields depend on soil erosion."),
    ]
    index = CausalGraphIndex.from_documents(
        docs,
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        show_progress=False,
    )
    r = index.as_retriever(preset="ppr", similarity_top_k=2)
    assert isinstance(r, PropagationRetriever)  # no causal filter: its units carry no expansion path
    assert not isinstance(index.as_retriever(preset="causalrag2"), PropagationRetriever)
    assert isinstance(
        index.as_retriever(preset="causalrag2", search="propagation", use_filter=True), PostprocessedRetriever
    )
    nodes = r.retrieve("Why did farm income fall?")
    assert nodes and get_provenance(nodes[0])["stage"] == "propagation"
    with pytest.raises(ValueError, match="search must be one of"):
        index.as_retriever(search="pagerank")
