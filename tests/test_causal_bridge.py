"""CausalBridgeRetriever and its pure helpers (``bridging.py``), offline.

A tiny corpus, the offline extractor, a biased hashing embedder (every cosine positive, so
graph nodes far from the query still carry gain) and a scripted first stage.
"""

from __future__ import annotations

import asyncio
from typing import List, Optional

import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import Document, MetadataMode, NodeWithScore, QueryBundle

from fakes import HashEmbedding
from llama_index_ext_causalrag.causal_graph import CausalBridgeRetriever, CausalGraphIndex, Gate
from llama_index_ext_causalrag.causal_graph.bridge_evidence import pick_bridge_units, sentence_evidence
from llama_index_ext_causalrag.causal_graph.expansion import GATE
from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance
from llama_index_ext_causalrag.text.tokens import count_tokens

QUERY = "How does drought stress change crop yield?"
TEXTS = {
    "alpha": "Drought stress reduces crop yield. Crop yield depends on soil moisture. Soil moisture "
    "affects root growth. Root growth limits crop yield under drought stress.",
    "beta": "Irrigation canals raise soil moisture. Soil moisture protects crop yield in dry summers. "
    "Dry summers bring drought stress to the valley.",
    # shares no word with the query or the others: reachable only through a gate
    "gamma": "Locust swarms devour grain harvests. Grain harvests feed rural markets. Rural markets "
    "set bread prices. Bread prices follow grain harvests.",
}


class BiasedHashEmbedding(HashEmbedding):
    """HashEmbedding plus a constant dimension: every cosine is positive."""

    def _vec(self, text: str) -> List[float]:
        v = np.asarray(super()._vec(text) + [1.5])
        return (v / np.linalg.norm(v)).tolist()


class FixedRetriever(BaseRetriever):
    """A first stage returning the units of one document, best first (no ``retrieve_for_budget``)."""

    def __init__(self, nodes: List[NodeWithScore]) -> None:
        self._nodes = nodes
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list(self._nodes)


def _module_of(index: CausalGraphIndex, name: str) -> str:
    g = index.graph
    ent = next(e.id for e in g.entities.values() if e.name.lower() == name)
    return next(m.id for m in g.modules.values() if not m.children and ent in m.members)


@pytest.fixture(scope="module")
def index() -> CausalGraphIndex:
    docs = [Document(text=t, doc_id=k) for k, t in TEXTS.items()]
    ix = CausalGraphIndex.from_documents(
        docs, embed_model=BiasedHashEmbedding(), show_progress=False, chunk_size=16, min_entity_units=1
    )
    a, c = _module_of(ix, "drought stress"), _module_of(ix, "rural markets")
    assert a != c
    ix.graph.gates[:] = [
        Gate(source=min(a, c), target=max(a, c), level=ix.graph.modules[a].level, score=1.0, reason="test gate")
    ]
    return ix


@pytest.fixture(scope="module")
def first(index: CausalGraphIndex) -> FixedRetriever:
    alpha = [u for u in index.units if u.ref_doc_id == "alpha"]
    return FixedRetriever([NodeWithScore(node=u, score=1.0 - 0.1 * i) for i, u in enumerate(alpha)])


GRAPH_KW = dict(min_gain=0.0, entity_seeds=1, seeds_per_level=0, unit_seeds=0)


def _bridge(index, first, preset="causalrag2", **kw) -> CausalBridgeRetriever:
    opts = dict(bridge_share=0.5, context_seeds=0, max_bridge_docs=2)
    opts.update(kw)
    return index.as_bridge_retriever(first, preset=preset, similarity_top_k=4, **opts, **GRAPH_KW)


def _docs(nodes: List[NodeWithScore], stage: Optional[str] = None) -> List[str]:
    return [n.node.ref_doc_id for n in nodes if stage is None or get_provenance(n).get("stage") == stage]


def _tokens(nodes: List[NodeWithScore]) -> int:
    return sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes)


# ---- pure helpers ---------------------------------------------------------------------
def test_pick_bridge_units_skips_covered_docs_caps_docs_and_filters_by_relative_score() -> None:
    docs = ["a", "a", "b", "c", "d", "b"]
    scores = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.6, 4: 0.65, 5: 0.7}
    rel = {0: 1.0, 1: 1.0, 2: 0.9, 3: 0.95, 4: 0.5, 5: 0.9}
    # a is covered; b (0.7, tie -> lower unit first), then d would come, but rel 0.5 < 0.6; then c
    assert pick_bridge_units(scores, rel, docs, {"a"}, max_docs=2, min_relative=0.6) == [(0.7, 2), (0.7, 5), (0.6, 3)]
    assert pick_bridge_units(scores, rel, docs, {"a"}, max_docs=1) == [(0.7, 2), (0.7, 5)]
    assert pick_bridge_units(scores, rel, docs, {"a", "b", "c", "d"}, max_docs=5) == []


def test_sentence_evidence_by_hand() -> None:
    ev = sentence_evidence(
        [{"drought", "yield"}, {"locust"}, set()],
        {"drought", "yield", "crop", "stress"},
        ["drought cuts yield", "locust swarm", "nothing here"],
        {"locust swarm": 0.5, "": 9.0},
    )
    np.testing.assert_allclose(ev, [0.5, 0.5, 0.0])


# ---- the retriever --------------------------------------------------------------------
def test_is_a_retriever_and_validates_its_arguments(index, first) -> None:
    r = _bridge(index, first)
    assert isinstance(r, BaseRetriever) and r.first_stage is first
    for bad in (
        dict(bridge_share=1.0),
        dict(bridge_share=-0.1),
        dict(min_relative_score=1.5),
        dict(max_bridge_docs=-1),
        dict(context_seeds=1.5),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            _bridge(index, first, **bad)
    with pytest.raises(TypeError, match="GatedExpansionRetriever"):
        CausalBridgeRetriever(first, first)
    with pytest.raises(ValueError, match="empty query"):
        r.retrieve("  ")


@pytest.mark.parametrize("budget", [40, 60, 120])
def test_reserved_share_holds_only_other_documents_within_the_budget(index, first, budget) -> None:
    r = _bridge(index, first)
    out = r.retrieve_for_budget(QUERY, budget)
    bridge = [n for n in out if get_provenance(n).get("stage") == "bridge"]
    assert bridge, "the fixture is built so that something is bridged"
    assert set(_docs(bridge)) <= {"beta", "gamma"}  # never the first stage's document
    assert _tokens(out) <= budget
    assert _tokens(bridge) <= int(0.5 * budget)
    assert out[-len(bridge) :] == bridge  # the first stage's context comes first
    # bridge pieces are whole sentences of their unit, at the right place in the document
    for n in bridge:
        doc, text = TEXTS[n.node.ref_doc_id], n.node.get_content(metadata_mode=MetadataMode.NONE)
        assert doc[n.node.start_char_idx : n.node.end_char_idx] == text and text.rstrip().endswith(".")
        assert PROVENANCE_KEY not in n.node.get_content(metadata_mode=MetadataMode.LLM)


def test_no_share_is_the_first_stage_alone(index, first) -> None:
    out = _bridge(index, first, bridge_share=0.0).retrieve_for_budget(QUERY, 60)
    assert _docs(out) == ["alpha"] * len(out) and not _docs(out, "bridge")


def test_gates_reach_a_document_the_no_gates_ablation_cannot(index, first) -> None:
    gated = _bridge(index, first).retrieve_for_budget(QUERY, 200)
    nogates = _bridge(index, first, preset="nogates").retrieve_for_budget(QUERY, 200)
    assert "gamma" in _docs(gated, "bridge")
    assert "gamma" not in _docs(nogates, "bridge")
    via = [get_provenance(n) for n in gated if n.node.ref_doc_id == "gamma"]
    assert all(p["via_gate"] and GATE in p["edge_types"] for p in via)


def test_no_graph_ablation_ranks_by_text_alone(index, first) -> None:
    out = _bridge(index, first, use_graph=False, max_bridge_docs=1).retrieve_for_budget(QUERY, 200)
    provs = [get_provenance(n) for n in out if get_provenance(n).get("stage") == "bridge"]
    # the text-only bridge takes beta (it shares the query's words), never gamma
    assert provs and {n.node.ref_doc_id for n in out[-len(provs) :]} == {"beta"}
    assert all(not p["use_graph"] and "path" not in p for p in provs)


def test_unbudgeted_retrieve_gives_the_last_places_to_bridge_units(index, first) -> None:
    r = _bridge(index, first)
    out = r.retrieve(QUERY)
    assert len(out) <= 4 and _docs(out, "bridge") and _docs(out)[0] == "alpha"
    assert asyncio.run(r.aretrieve(QUERY))[-1].node.node_id == out[-1].node.node_id


def test_budget_aware_first_stage_is_refitted_to_the_tokens_left(index) -> None:
    docs = [Document(text=t, doc_id=k) for k, t in TEXTS.items()]
    mg = MultiGranularityIndex.from_documents(docs, embed_model=BiasedHashEmbedding())
    umgp = mg.as_retriever(similarity_top_k=4)
    r = index.as_bridge_retriever(umgp, bridge_share=0.5, budget_tokens=60, context_seeds=5, **GRAPH_KW)
    out = r.retrieve(QUERY)
    first_docs = {n.node.ref_doc_id for n in umgp.retrieve_for_budget(QUERY, 60)}
    assert _tokens(out) <= 60
    assert not set(_docs(out, "bridge")) & first_docs
    assert [n.node.node_id for n in r.retrieve_for_budget(QUERY, 60)] == [n.node.node_id for n in out]


def test_protect_top_doc_never_cuts_the_top_document(index) -> None:
    alpha = [u for u in index.units if u.ref_doc_id == "alpha"]
    beta = [u for u in index.units if u.ref_doc_id == "beta"]
    ranked = [NodeWithScore(node=u, score=1.0) for u in alpha] + [NodeWithScore(node=beta[0], score=0.5)]
    first = FixedRetriever(ranked)
    budget = _tokens(ranked) + 2
    out = _bridge(index, first, protect_top_doc=True, bridge_share=0.9).retrieve_for_budget(QUERY, budget)
    kept = [n for n in out if get_provenance(n).get("stage") != "bridge"]
    assert [n.node.node_id for n in kept] == [u.node_id for u in alpha]  # beta's node gave way, alpha whole
    assert _docs(out, "bridge") and _tokens(out) <= budget
    assert _tokens(out) - _tokens(kept) <= _tokens(ranked[-1:])  # at most the tail's tokens
    # only the top document: nothing to take, the first stage unchanged
    only = FixedRetriever(ranked[:-1])
    assert _docs(_bridge(index, only, protect_top_doc=True).retrieve_for_budget(QUERY, budget), "bridge") == []
