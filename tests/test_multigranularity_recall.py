"""Recall settings of UMGP (issue 46): pseudo-relevance feedback, document evidence pooling,
evidence-aware budget allocation. Each changes the retrieval as claimed, is refused with its
value when out of range, and is off by default."""

import re
from typing import List

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from fakes import WordCountEmbedding as HashEmbedding
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex, ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.allocation import Passage, covered, passages_for_budget, plan_evidence
from llama_index_ext_causalrag.multigranularity.feedback import Feedback, expansion_terms, rocchio
from llama_index_ext_causalrag.multigranularity.presets import UMG_PRESETS, UMGConfig
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.source import ExpertSource
from llama_index_ext_causalrag.multigranularity.stages import FittingConfig, FusionConfig, PromotionConfig
from llama_index_ext_causalrag.multigranularity.windows import GRANULARITY_KEY, SENTENCE_SPAN_KEY
from llama_index_ext_causalrag.text.provenance import annotate, get_provenance
from llama_index_ext_causalrag.text.tokens import count_tokens


# ---- defaults and validation ----------------------------------------------------------
def test_the_new_settings_are_off_by_default():
    s = UMG_PRESETS["umgp"].settings()
    assert (s["dense_feedback"], s["lexical_feedback"], s["parent_evidence"], s["allocation"]) == (
        0.0,
        0,
        "children",
        "greedy",
    )
    assert (s["candidates_per_list"], s["candidates"]) == (100, 50)
    assert not Feedback().active


@pytest.mark.parametrize(
    "stage, kw, value",
    [
        (FusionConfig, {"dense_feedback": -0.5}, "-0.5"),
        (FusionConfig, {"dense_feedback": float("nan")}, "nan"),
        (FusionConfig, {"lexical_feedback": -2}, "-2"),
        (FusionConfig, {"lexical_feedback_weight": 1.5}, "1.5"),
        (FusionConfig, {"feedback_depth": 0}, "0"),
        (PromotionConfig, {"parent_evidence": "pooled"}, "'pooled'"),
        (FittingConfig, {"allocation": "knapsack"}, "'knapsack'"),
    ],
)
def test_bad_recall_settings_are_refused_naming_the_value(stage, kw, value):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=f"{name} must .*got {re.escape(value)}"):
        stage(**kw)
    with pytest.raises(ValueError, match=name):
        UMGConfig(**kw)  # by name, routed to its stage


def test_settings_by_name_go_to_their_stage():
    c = UMGConfig().with_settings(
        dense_feedback=0.2, feedback_depth=3, lexical_feedback=5, parent_evidence="document", allocation="evidence"
    )
    assert (c.fusion.dense_feedback, c.fusion.feedback_depth, c.fusion.lexical_feedback) == (0.2, 3, 5)
    assert c.promotion.parent_evidence == "document" and c.fitting.allocation == "evidence"


def test_the_postprocessor_refuses_bad_values(tmp_path):
    from llama_index.core.storage.docstore import SimpleDocumentStore

    with pytest.raises(ValueError, match="allocation must be one of .*got 'all'"):
        ParentPromotionPostprocessor(docstore=SimpleDocumentStore(), allocation="all")
    with pytest.raises(ValueError, match="parent_evidence must be one of .*got 'doc'"):
        ParentPromotionPostprocessor(docstore=SimpleDocumentStore(), parent_evidence="doc")


def test_the_fusion_retriever_refuses_bad_feedback():
    nodes = [TextNode(id_="a", text="kinase cell"), TextNode(id_="b", text="cell growth")]
    with pytest.raises(ValueError, match="feedback_depth must .*got 0"):
        EntropyFusionRetriever({"sparse": {2: SparseExpert(nodes)}}, feedback=Feedback(depth=0))


# ---- pure functions -------------------------------------------------------------------
def test_rocchio_moves_the_query_towards_the_mean_of_the_feedback_rows():
    q = np.array([3.0, 0.0])
    top = np.array([[0.0, 2.0], [1.0, 0.0]])  # unit rows (0, 1) and (1, 0): mean (0.5, 0.5)
    np.testing.assert_allclose(rocchio(q, top, 0.5), [1.25, 0.25], rtol=1e-6)
    np.testing.assert_allclose(rocchio(q, top, 0.0), [1.0, 0.0])  # beta 0: the normalised query
    np.testing.assert_allclose(rocchio(q, np.zeros((0, 2)), 1.0), [1.0, 0.0])


def test_rm3_expansion_terms_weigh_term_frequency_by_the_units_scores():
    docs = [["kinase", "drought", "drought", "leaf"], ["kinase", "root"]]
    # w(t) = sum_d s_d / sum(s) * tf / |d|, s = (3, 1): drought 0.75 * 2/4, leaf 0.75 / 4, root 0.25 / 2
    w = expansion_terms(docs, np.array([3.0, 1.0]), ["kinase"], 2)
    raw = {"drought": 0.375, "leaf": 0.1875}
    total = sum(raw.values())
    assert w == pytest.approx({t: v / total for t, v in raw.items()})
    assert expansion_terms(docs, np.zeros(2), ["kinase"], 2) == {}
    assert expansion_terms(docs, np.ones(2), ["kinase"], 0) == {}


def _p(e, ev, tok, doc="d"):
    return Passage(e, np.asarray(ev, float), np.asarray(tok, float), [(doc, i) for i in range(len(ev))])


def test_covered_is_the_smoothed_share_of_evidence_kept():
    p = _p(1.0, [3.0, 1.0, 0.0], [10, 10, 20])
    assert covered(p, 40, set()) == (1.0, 40.0, [("d", 0), ("d", 1), ("d", 2)])  # fits whole
    share, spent, kept = covered(p, 12, set(), smoothing=0.5)  # only the first sentence (10 + 1 join)
    assert (share, spent, kept) == (pytest.approx(0.5 * 3 / 4 + 0.5 * 10 / 40), 11.0, [("d", 0)])
    share, _, kept = covered(p, 12, {("d", 0)}, smoothing=0.0)  # taken before: the next one
    assert kept == [("d", 1)] and share == pytest.approx(0.25)


def test_passages_for_budget_splits_only_when_the_shares_cover_more():
    flat = [_p(0.3, [1, 1, 1, 1], [25, 25, 25, 25], d) for d in "abc"]
    # uniform evidence, smoothing 0, 150 tokens: the first passage whole (100), one sentence of the
    # next (25 + 1 join); k = 2 or 3 cover the same (2 + 3 or 1 + 2 + 2 sentences) ...
    for k in (1, 2, 3):
        assert plan_evidence(flat, 150, k, smoothing=0.0) == pytest.approx(0.3 + 0.3 * 0.25)
    assert passages_for_budget(flat, 150, smoothing=0.0) == 1  # ... and a tie goes to the greedy
    peaked = [_p(0.3, [9, 1, 0, 0], [25, 25, 25, 25], d) for d in "abc"]
    # the evidence in each passage's first sentence: one each (k=3) covers 3 * 0.3 * 0.9
    assert plan_evidence(peaked, 80, 3, smoothing=0.0) == pytest.approx(3 * 0.3 * 0.9)
    assert passages_for_budget(peaked, 80, smoothing=0.0) > 1
    assert passages_for_budget(peaked[:1], 80) == 1


# ---- the lists: pseudo-relevance feedback ----------------------------------------------
TEXTS = [
    "drought stress raises chlorophyll quenching in leaves",
    "drought lowers leaf water potential",
    "chlorophyll quenching protects leaf tissue from light",
    "market prices fell in autumn",
    "retail revenue recovered later in spring",
    "leaf water potential and stomata under drought",
]


@pytest.fixture(scope="module")
def nodes() -> List[TextNode]:
    return [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(TEXTS)]


def test_dense_feedback_searches_again_with_the_rocchio_query(nodes):
    model = HashEmbedding()
    dense = DenseExpert(nodes, embed_model=model)
    qb = QueryBundle("drought leaf")
    q = np.asarray(model.get_query_embedding("drought leaf"), dtype=np.float32)
    qb.embedding = q.tolist()
    plain = ExpertSource({"dense": {2: dense}}).lists(qb, 6)[("dense", 2)]
    fb = ExpertSource({"dense": {2: dense}}, Feedback(dense=0.7, depth=2)).lists(qb, 6)[("dense", 2)]
    top2 = [int(i[1:]) for i in plain.ids[:2]]
    expected = dense.score_all(rocchio(q, dense.embeddings[top2], 0.7))
    np.testing.assert_allclose(fb.scores, np.sort(expected)[::-1], rtol=1e-6)
    assert not np.allclose(fb.scores, plain.scores)


def test_lexical_feedback_adds_the_rm3_terms_of_the_top_units(nodes):
    sparse = SparseExpert(nodes, stemmer=None)
    qb = QueryBundle("drought")
    plain = ExpertSource({"sparse": {2: sparse}}).lists(qb, 6)[("sparse", 2)]
    fb = ExpertSource({"sparse": {2: sparse}}, Feedback(terms=3, weight=0.5, depth=2)).lists(qb, 6)[("sparse", 2)]
    assert set(plain.ids) == {"n0", "n1", "n5"}  # only the units with "drought"
    assert len(fb.ids) > len(plain.ids)  # the expansion terms reach units without the query's term
    s = sparse.score_all("drought")
    top = [int(i[1:]) for i in plain.ids[:2]]
    terms = expansion_terms([sparse.tokens[i] for i in top], s[top], ["drought"], 3)
    extra = sum(w * np.asarray(sparse._bm25.get_scores([t])) for t, w in terms.items())
    expected = 0.5 * s + 0.5 * extra
    by_id = dict(zip(fb.ids, fb.scores))
    for i, v in enumerate(expected):
        if v > 0:
            assert by_id[f"n{i}"] == pytest.approx(v, rel=1e-5)


# ---- pooling and allocation on an index ------------------------------------------------
FILL = [
    "{} methods were routine and described at considerable length in the supplementary material.",
    "{} samples were stored in freezers at the central facility for several months.",
    "{} funding came from a regional research programme with several partners.",
    "{} authors declare that they have no competing interests of any kind.",
]
NAMES = (("a", "Alpha"), ("b", "Beta"), ("c", "Gamma"))


@pytest.fixture(scope="module")
def index() -> MultiGranularityIndex:
    docs = [
        Document(
            id_=d,
            text=" ".join([f"{n} finding one is key.", f"{n} finding two matters."] + [f.format(n) for f in FILL]),
        )
        for d, n in NAMES
    ]
    return MultiGranularityIndex.from_documents(docs, granularities=(2, 8), embed_model=HashEmbedding())


def _unit(index, doc, g, start=0):
    return next(
        u
        for u in index.units
        if u.ref_doc_id == doc and int(u.metadata[GRANULARITY_KEY]) == g and u.metadata[SENTENCE_SPAN_KEY][0] == start
    )


def test_pooled_document_evidence_is_the_summed_p_of_its_fused_units(index):
    fusion = index.as_fusion_retriever(similarity_top_k=1000, pool_documents=True)
    out = fusion.retrieve("Alpha finding samples")
    pooled = {}
    for n in out:
        pooled[n.node.ref_doc_id] = pooled.get(n.node.ref_doc_id, 0.0) + get_provenance(n)["P"]
    for n in out:
        assert get_provenance(n)["doc_P"] == pytest.approx(pooled[n.node.ref_doc_id], abs=1e-8)
    plain = index.as_fusion_retriever(similarity_top_k=1000).retrieve("Alpha finding samples")
    assert "doc_P" not in get_provenance(plain[0])


def test_document_evidence_ranks_the_parents_by_their_pool(index):
    # a: one strong unit; b: a weaker unit but more evidence over the whole document
    nws = [
        annotate(NodeWithScore(node=_unit(index, "a", 2), score=0.5), P=0.5, doc_P=0.5),
        annotate(NodeWithScore(node=_unit(index, "b", 2), score=0.3), P=0.3, doc_P=0.9),
    ]
    children = index.as_postprocessor().postprocess_nodes(nws)
    document = index.as_postprocessor(parent_evidence="document").postprocess_nodes(nws)
    assert [n.node.ref_doc_id for n in children] == ["a", "b"]
    assert [n.node.ref_doc_id for n in document] == ["b", "a"]
    assert get_provenance(document[0])["evidence"] == pytest.approx(0.9)


def test_document_evidence_through_as_retriever_takes_the_same_documents(index):
    plain = index.as_retriever(budget_tokens=None).retrieve("Alpha finding")
    pooled = index.as_retriever(budget_tokens=None, parent_evidence="document").retrieve("Alpha finding")
    assert {n.node.ref_doc_id for n in pooled} == {n.node.ref_doc_id for n in plain}


def _allocation_input(index):
    nws = [
        annotate(NodeWithScore(node=_unit(index, d, 2), score=p), P=p)
        for d, p in (("a", 0.2), ("b", 0.19), ("c", 0.19))
    ]
    return nws + [annotate(NodeWithScore(node=_unit(index, d, 8), score=0.14), P=0.14) for d in "abc"]


def _tokens(nodes):
    return [(n.node.ref_doc_id, count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE))) for n in nodes]


def test_evidence_allocation_spreads_the_budget_when_the_shares_cover_more(index):
    nws = _allocation_input(index)
    greedy = index.as_postprocessor(budget_tokens=80).postprocess_nodes(nws)
    spread = index.as_postprocessor(budget_tokens=80, allocation="evidence").postprocess_nodes(nws)
    assert [d for d, _ in _tokens(greedy)] == ["a", "b"]  # the first abstract whole, the rest of the next
    assert {d for d, _ in _tokens(spread)} == {"a", "b", "c"}  # the best sentences of all three
    assert sum(t for _, t in _tokens(spread)) <= 80
    assert all("fitted_from" in get_provenance(n) for n in spread)


def test_evidence_allocation_is_the_greedy_where_no_split_covers_more(index):
    nws = _allocation_input(index)
    for budget in (100, 130):
        greedy = index.as_postprocessor(budget_tokens=budget).postprocess_nodes(nws)
        spread = index.as_postprocessor(budget_tokens=budget, allocation="evidence").postprocess_nodes(nws)
        assert _tokens(spread) == _tokens(greedy)
    unbudgeted = index.as_postprocessor(allocation="evidence").postprocess_nodes(nws)
    assert _tokens(unbudgeted) == _tokens(index.as_postprocessor().postprocess_nodes(nws))


def test_evidence_allocation_through_as_retriever_keeps_the_budget(index):
    r = index.as_retriever(budget_tokens=60, allocation="evidence")
    out = r.retrieve("finding one key")
    assert out and sum(t for _, t in _tokens(out)) <= 60
    assert _tokens(r.retrieve_for_budget("finding one key", 60)) == _tokens(out)
