"""Evidence-aware fitting: the sentences of a passage scored against the query (fitting.py,
sentence_scores.py, ParentPromotionPostprocessor(fit_evidence="query"))."""

import math
from typing import List

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

from fakes import WordCountEmbedding as HashEmbedding
from llama_index_ext_causalrag.experts import SparseExpert
from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex, ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.fitting import idf_overlap, sentence_evidence, spread_to_sentences
from llama_index_ext_causalrag.multigranularity.windows import GRANULARITY_KEY
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance
from llama_index_ext_causalrag.text.tokens import count_tokens


# ---- pure functions -------------------------------------------------------------------
def test_spread_to_sentences_is_the_overlap_weighted_mean_of_the_units():
    sents = np.array([[0, 10], [10, 20], [20, 30]])
    units = np.array([[0, 20], [10, 30]])  # two 2-sentence windows, stride 1
    out = spread_to_sentences(sents, units, np.array([0.2, 0.8]))
    np.testing.assert_allclose(out, [0.2, 0.5, 0.8])  # the middle sentence: mean of both windows
    np.testing.assert_allclose(spread_to_sentences(sents, np.zeros((0, 2)), np.zeros(0)), [0, 0, 0])
    with pytest.raises(ValueError, match="aligned"):
        spread_to_sentences(sents, units, np.ones(3))


def test_idf_overlap_sums_the_idf_of_distinct_shared_terms():
    idf = {"kinase": 2.0, "cell": 0.5}
    out = idf_overlap(["kinase", "cell", "kinase", "rare"], [["kinase", "kinase"], ["cell", "kinase"], ["other"]], idf)
    np.testing.assert_allclose(out, [2.0, 2.5, 0.0])


def test_sentence_evidence_reweights_the_prior_by_the_query_scores():
    prior = np.array([1.0, 1.0, 1.0, 0.0])
    lexical = np.array([0.0, 2.0, 4.0, 4.0])
    dense = np.array([0.1, 0.3, 0.2, 0.9])
    # w_l * lexical / max: 0, 0.5, 1 (and the 4th sentence has no prior: stays 0)
    np.testing.assert_allclose(sentence_evidence(prior, None, lexical, (0.0, 1.0)), [1.0, 1.5, 2.0, 0.0])
    # dense min-max over the passage: 0, 0.25, 0.125, 1
    np.testing.assert_allclose(sentence_evidence(prior, dense, None, (2.0, 0.0)), [1.0, 1.5, 1.25, 0.0])
    np.testing.assert_allclose(sentence_evidence(prior, dense, lexical, (0.0, 0.0)), prior)  # weights 0: the prior
    free = np.array([True, False, True, True])
    np.testing.assert_allclose(sentence_evidence(prior, None, lexical, (0.0, 1.0), free), [1.0, 0.0, 2.0, 0.0])
    flat = sentence_evidence(prior, np.full(4, 0.5), np.zeros(4), (1.0, 1.0))  # no contrast: the prior
    np.testing.assert_allclose(flat, prior)


def test_sparse_expert_idf_is_lucene_idf_over_its_nodes():
    nodes = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(["kinase cell", "cell growth", "cell kinase assay"])]
    sp = SparseExpert(nodes, stemmer=None, stopwords=None)
    idf = sp.idf(["kinase", "cell", "absent"])
    assert set(idf) == {"kinase", "cell"}
    assert idf["kinase"] == pytest.approx(math.log(1 + (3 - 2 + 0.5) / (2 + 0.5)))
    assert idf["cell"] == pytest.approx(math.log(1 + (3 - 3 + 0.5) / (3 + 0.5)))


# ---- the postprocessor and the index ---------------------------------------------------
FILLER = [
    "The team collected the samples in early spring.",
    "Each sample was stored at four degrees.",
    "The laboratory repeated every assay three times.",
    "Two technicians recorded the measurements.",
    "The statistics used a mixed model throughout.",
    "Funding came from a regional programme.",
]
EVIDENCE = "Chlorophyll fluorescence quenching rose sharply under drought stress."
QUERY = "Why did chlorophyll fluorescence quenching rise?"


def _docs(position: int = 4) -> List[Document]:
    sents = list(FILLER)
    sents.insert(position, EVIDENCE)
    other = ["Market prices fell in the autumn.", "Retail revenue recovered later.", "Analysts expected growth."]
    return [
        Document(id_="plant", text=" ".join(sents), metadata={"field": "biology"}),
        Document(id_="market", text=" ".join(other), metadata={"field": "business"}),
    ]


@pytest.fixture(scope="module")
def index() -> MultiGranularityIndex:
    return MultiGranularityIndex.from_documents(_docs(), granularities=(2, 4, 8), embed_model=HashEmbedding())


def _whole(index: MultiGranularityIndex, doc: str) -> TextNode:
    """The unit holding the whole document (the parent of its finer units)."""
    return next(u for u in index.units if u.ref_doc_id == doc and int(u.metadata[GRANULARITY_KEY]) == 8)


def _text(nodes: List[NodeWithScore]) -> str:
    return " ".join(n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes)


def test_query_fitting_keeps_the_sentence_carrying_the_query_evidence(index):
    parent = _whole(index, "plant")
    budget = count_tokens(EVIDENCE) + count_tokens(FILLER[0]) + 2
    assert count_tokens(parent.get_content(metadata_mode=MetadataMode.NONE)) > budget
    nws = [NodeWithScore(node=parent, score=1.0)]  # one hit over the whole passage: a flat prior
    fused = index.as_postprocessor(budget_tokens=budget, fit_evidence="fused").postprocess_nodes(
        nws, query_bundle=QueryBundle(QUERY)
    )
    query = index.as_postprocessor(budget_tokens=budget, fit_evidence="query").postprocess_nodes(
        nws, query_bundle=QueryBundle(QUERY)
    )
    assert EVIDENCE not in _text(fused)  # a flat prior keeps the shortest sentences, wherever the evidence is
    assert EVIDENCE in _text(query)
    assert sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in query) <= budget
    text = parent.get_content(metadata_mode=MetadataMode.NONE)
    for n in query:  # whole sentences of the parent, at their spans, with the parent's id and provenance
        piece = n.node.get_content(metadata_mode=MetadataMode.NONE)
        a, b = get_provenance(n)["cut"]
        assert text[a:b] == piece and n.node.node_id == parent.node_id
        assert get_provenance(n)["fitted_from"] == parent.node_id
        assert PROVENANCE_KEY not in n.node.get_content(metadata_mode=MetadataMode.LLM)


@pytest.mark.parametrize("position", [0, 3, 6])
def test_query_fitting_finds_the_evidence_wherever_it_sits(position):
    idx = MultiGranularityIndex.from_documents(_docs(position), granularities=(2, 4, 8), embed_model=HashEmbedding())
    budget = count_tokens(EVIDENCE) + 12
    out = idx.as_retriever(budget_tokens=budget, fit_evidence="query").retrieve(QUERY)
    assert EVIDENCE in _text(out)
    assert sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in out) <= budget


def test_query_fitting_is_deterministic_and_refits_like_a_fresh_query(index):
    r = index.as_retriever(budget_tokens=40, fit_evidence="query")
    first = [(n.node.node_id, _text([n]), n.score) for n in r.retrieve(QUERY)]
    again = [(n.node.node_id, _text([n]), n.score) for n in r.retrieve(QUERY)]
    refit = [(n.node.node_id, _text([n]), n.score) for n in r.retrieve_for_budget(QUERY, 40)]
    assert first == again == refit
    wide = index.as_retriever(budget_tokens=None, fit_evidence="query").retrieve(QUERY)
    assert [n.node.node_id for n in wide] == [n.node.node_id for n in index.as_retriever().retrieve(QUERY)]


def test_query_fitting_keeps_the_query_filters(index):
    only_business = MetadataFilters(filters=[MetadataFilter(key="field", value="business")])
    out = index.as_retriever(budget_tokens=40, fit_evidence="query", filters=only_business).retrieve(QUERY)
    assert out and {n.node.ref_doc_id for n in out} == {"market"}


def test_query_fitting_without_sentence_scores_is_the_fused_fitting(index):
    parent = _whole(index, "plant")
    nws = [NodeWithScore(node=parent, score=1.0)]
    bare = ParentPromotionPostprocessor(docstore=index.docstore, budget_tokens=30, fit_evidence="query")
    fused = ParentPromotionPostprocessor(docstore=index.docstore, budget_tokens=30)
    assert _text(bare.postprocess_nodes(nws, query_bundle=QueryBundle(QUERY))) == _text(
        fused.postprocess_nodes(nws, query_bundle=QueryBundle(QUERY))
    )


@pytest.mark.parametrize(
    "kw", [{"fit_evidence": "bm25"}, {"fit_weights": (-1.0, 1.0)}, {"fit_weights": (0.0, float("nan"))}]
)
def test_bad_fit_evidence_settings_are_refused(index, kw):
    with pytest.raises(ValueError, match="fit_"):
        index.as_postprocessor(**kw)
    with pytest.raises(ValueError, match="fit_"):
        index.as_retriever(**kw)


def test_finest_unit_scores_without_an_in_memory_dense_list_still_give_bm25(index):
    from llama_index_ext_causalrag.multigranularity.sentence_scores import FinestUnitScores

    finest = min(index.granularities)
    lexical_only = FinestUnitScores(None, index.sparse[finest])  # e.g. an index whose dense lists are a store's
    assert lexical_only.passage(QueryBundle(QUERY), _whole(index, "plant")) is None
    terms, idf = lexical_only.idf(QUERY)
    assert terms == index.sparse[finest].tokenizer(QUERY)
    assert set(idf) == set(terms) & set(index.sparse[finest].tokenizer(EVIDENCE))  # the indexed ones only
    assert all(v > 0 for v in idf.values())
    both = index._state.finest_scores
    spans, cos = both.passage(QueryBundle(QUERY), _whole(index, "plant"))
    assert spans.shape == (cos.shape[0], 2) and spans.min() >= 0 and np.all(np.abs(cos) <= 1 + 1e-6)
