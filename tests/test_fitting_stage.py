"""The one budget fitter (text/fitting.py ``FittingStage``): every facade's ``fitting`` stage, its one
fit-mode vocabulary, the budget handed to postprocessors per call, CausalRAG2 fitted after its filter."""

from __future__ import annotations

import warnings

import pytest
from llama_index.core import Document
from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from fakes import FixedRetriever, HashEmbedding
from llama_index_ext_causalrag import CausalGraphIndex, HypothesisRetriever, MultiGranularityIndex
from llama_index_ext_causalrag.causal_graph.presets import GatedExpansionConfig
from llama_index_ext_causalrag.hypothesis.presets import HypothesisConfig
from llama_index_ext_causalrag.multigranularity.presets import UMGConfig
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.pipeline import BudgetedPostprocessor, PostprocessedRetriever
from llama_index_ext_causalrag.standards.presets import StructureAwareConfig
from llama_index_ext_causalrag.text.fitting import FIT_MODES, FittingStage
from llama_index_ext_causalrag.text.pieces import cut_of
from llama_index_ext_causalrag.text.tokens import count_tokens, truncate_node

QUERY = "Which enzyme does insulin activate in the liver?"
GOLD = "Insulin activates glucokinase in the liver."
TEXT = f"The weather was mild that spring. {GOLD} Barley also grew in the valley. Rain fell on most afternoons."
CONFIGS = [UMGConfig, GatedExpansionConfig, StructureAwareConfig, HypothesisConfig]


def _node(text: str = TEXT, id_: str = "N") -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=id_, text=text, start_char_idx=0, end_char_idx=len(text)), score=1.0)


def _text(n: NodeWithScore) -> str:
    return n.node.get_content(MetadataMode.NONE)


def _tokens(nodes) -> int:
    return sum(count_tokens(_text(n)) for n in nodes)


@pytest.mark.parametrize("config_cls", CONFIGS)
def test_every_facade_fitting_stage_is_the_one_stage_with_one_vocabulary(config_cls):
    c = config_cls(budget_tokens=300)
    assert isinstance(c.fitting, FittingStage) and c.fitting.budget_tokens == 300
    assert c.settings()["budget_tokens"] == 300 and c.with_settings(budget_tokens=None).fitting.budget_tokens is None
    for mode in FIT_MODES:
        assert config_cls(fit_mode=mode).fitting.fit_mode == mode
    with pytest.raises(ValueError, match="budget_tokens must be a positive whole number"):
        config_cls(budget_tokens=0)
    with pytest.raises(ValueError, match=r"fit_mode must be one of \('prefix', 'sentences', 'window'\)"):
        config_cls(fit_mode="head")


def test_fit_cuts_the_node_that_does_not_fit_by_its_mode():
    first = _node("Barley grows by the river.", id_="A")
    nodes = [first, _node()]
    budget = count_tokens(_text(first)) + count_tokens(GOLD) + 2
    assert FittingStage().fit(nodes, QUERY) == nodes  # no budget: all of them
    prefix = FittingStage(budget_tokens=budget).fit(nodes, QUERY)
    assert prefix[0] is first and _text(prefix[1]) == _text(
        truncate_node(nodes[1], budget - count_tokens(_text(first)))
    )
    sentences = FittingStage(budget_tokens=budget, fit_mode="sentences").fit(nodes, QUERY)
    assert _text(sentences[1]) == GOLD and _tokens(sentences) <= budget
    dropped = FittingStage(budget_tokens=budget).fit(nodes, QUERY, truncate_last=False)
    assert dropped == [first]  # "prefix" without truncate_last: the node that does not fit is left out ...
    best = FittingStage(budget_tokens=3).fit(nodes[::-1], QUERY, truncate_last=False)
    assert len(best) == 1 and count_tokens(_text(best[0])) <= 3  # ... unless it is the best
    assert FittingStage().fit(nodes, QUERY, budget_tokens=budget) == prefix  # a budget per call


def test_window_keeps_one_contiguous_run_and_sentences_may_keep_several():
    text = "Insulin acts on the liver. Barley grows here. Rain fell. The liver stores glucokinase. Insulin again."
    node = _node(text)
    budget = 16
    window = FittingStage(budget_tokens=budget, fit_mode="window").fit([node], "insulin liver glucokinase")
    assert len(window) == 1 and _tokens(window) <= budget and cut_of(window[0]) is not None
    assert _text(window[0]) in text and "liver" in _text(window[0])
    sentences = FittingStage(budget_tokens=budget, fit_mode="sentences").fit([node], "insulin liver glucokinase")
    assert _tokens(sentences) <= budget and all(_text(p) in text for p in sentences)


class _Recording(BaseNodePostprocessor):
    """A postprocessor that takes a budget per call and records it."""

    budget_tokens: int | None = Field(default=None)
    seen: list = Field(default_factory=list)

    def postprocess_within(self, nodes, query_bundle, budget_tokens):
        self.seen.append(budget_tokens)
        return nodes

    def _postprocess_nodes(self, nodes, query_bundle=None):
        return self.postprocess_within(nodes, query_bundle, self.budget_tokens)


class _FieldOnly(BaseNodePostprocessor):
    """A budget_tokens field but no postprocess_within: the pipeline leaves it as it is."""

    budget_tokens: int | None = Field(default=None)

    def _postprocess_nodes(self, nodes, query_bundle=None):
        assert self.budget_tokens is None
        return nodes


def test_the_pipeline_hands_its_budget_per_call_and_copies_no_postprocessor():
    rec, field_only = _Recording(), _FieldOnly()
    assert isinstance(rec, BudgetedPostprocessor) and not isinstance(field_only, BudgetedPostprocessor)
    r = PostprocessedRetriever(FixedRetriever([_node()]), [rec, field_only], budget_tokens=40)
    r.retrieve(QUERY)
    r.retrieve_for_budget(QUERY, 25)
    assert rec.seen == [40, 25] and rec.budget_tokens is None and r.postprocessors[0] is rec
    PostprocessedRetriever(FixedRetriever([_node()]), [rec]).retrieve(QUERY)
    assert rec.seen == [40, 25, None]  # no budget: its own setting


def test_fit_to_budget_is_still_taken_and_read_as_fit_mode():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c = UMGConfig(fit_to_budget=False)
        p = ParentPromotionPostprocessor(docstore=SimpleDocumentStore(), fit_to_budget=False, fit_mode="window")
        kept = UMGConfig(fit_to_budget=True, fit_mode="window")
    assert (c.fitting.fit_mode, c.fitting.fit_to_budget) == ("prefix", False)
    assert (p.fit_mode, p.fit_to_budget) == ("prefix", False) and kept.fitting.fit_mode == "window"
    assert sum("fit_to_budget is deprecated" in str(x.message) for x in w) == 3
    assert all(issubclass(x.category, DeprecationWarning) for x in w if "fit_to_budget" in str(x.message))
    assert "fit_to_budget" not in c.settings() and "fit_to_budget" not in p.model_dump()


def _docs(n_sent: int = 12) -> list[Document]:
    docs = []
    for t, topic in enumerate(["drought", "insulin", "coral", "wheat"]):
        sents = [
            f"Sentence {i} of the {topic} study reports result r{t}x{i} about {topic} because of cause c{i % 7}."
            for i in range(n_sent)
        ]
        docs.append(Document(text=" ".join(sents), id_=f"doc-{topic}"))
    return docs


def test_causalrag2_fits_after_its_causal_filter():
    index = CausalGraphIndex.from_documents(_docs(), embed_model=HashEmbedding(), show_progress=False)
    query = "Why does drought cause result r0x3?"
    plain = index.as_retriever(preset="causalrag2", similarity_top_k=6)
    budget = 60
    r = index.as_retriever(preset="causalrag2", similarity_top_k=6, budget_tokens=budget)
    assert isinstance(r, PostprocessedRetriever) and r.budget_tokens == budget
    assert r.retriever.fitting.budget_tokens is None  # the graph ranks unbudgeted; the filter sees every candidate
    out = r.retrieve(query)
    assert out and _tokens(out) <= budget
    assert [(n.node.node_id, _text(n)) for n in out] == [
        (n.node.node_id, _text(n)) for n in plain.retrieve_for_budget(query, budget)
    ]


def test_umg_and_hcqr_budget_is_their_fitting_stage_setting():
    umg = MultiGranularityIndex.from_documents(_docs(40), embed_model=HashEmbedding())
    r = umg.as_retriever(budget_tokens=60)
    assert r.budget_tokens == 60 and r.postprocessors[0].budget_tokens == 60
    assert umg.as_retriever(fit_to_budget=False).postprocessors[0].fit_mode == "prefix"  # the old spelling, by name
    hr = HypothesisRetriever(umg.as_retriever(), budget_tokens=200)
    assert hr.budget_tokens == hr.fitting.budget_tokens == hr.config.fitting.budget_tokens == 200
    assert hr.with_options(budget_tokens=100).fitting.budget_tokens == 100
    assert hr.with_options(budget_tokens=None).fitting.budget_tokens is None
    preset = HypothesisConfig(budget_tokens=150)
    assert HypothesisRetriever(umg.as_retriever(), preset=preset).budget_tokens == 150
