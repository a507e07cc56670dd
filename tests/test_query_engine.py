"""Every facade's ``as_query_engine`` works with LlamaIndex's ``MockLLM()`` as it comes, over real-size nodes.

``MockLLM`` echoes its prompt, so a refine step (a second chunk) overflows its 3,900-token window;
the engines fit the retrieved nodes into one answer prompt instead (``ContextWindowFit``).
"""

from __future__ import annotations

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode, QueryBundle

from _update_helpers import holisqa_biology, quic_rfcs
from fakes import HashEmbedding
from llama_index_ext_causalrag import (
    CausalGraphIndex,
    DenseExpert,
    HypothesisRetriever,
    MultiGranularityIndex,
    StandardsIndex,
)
from llama_index_ext_causalrag.query_engine import ContextWindowFit
from llama_index_ext_causalrag.text.tokens import count_tokens

QUESTION = "How does an endpoint detect packet loss and when does it retransmit?"


@pytest.fixture(scope="module")
def rfcs():
    return quic_rfcs()[0]


def _engines(rfcs):
    emb = HashEmbedding()
    umg = MultiGranularityIndex.from_documents(rfcs[:2], embed_model=emb)
    yield "MultiGranularityIndex", umg.as_query_engine(llm=MockLLM())
    yield "StandardsIndex", StandardsIndex.from_documents(rfcs, embed_model=emb).as_query_engine(llm=MockLLM())
    docs, _ = holisqa_biology(30, 1)
    yield (
        "CausalGraphIndex",
        CausalGraphIndex.from_documents(docs, embed_model=emb, show_progress=False).as_query_engine(llm=MockLLM()),
    )
    hcqr = HypothesisRetriever.from_defaults(umg.as_retriever(budget_tokens=None))
    yield "HypothesisRetriever", hcqr.as_query_engine(llm=MockLLM())


def test_every_query_engine_answers_with_a_default_mock_llm(rfcs):
    for name, engine in _engines(rfcs):
        response = engine.query(QUESTION)
        assert response.source_nodes, name
        text = sum(count_tokens(n.node.get_content(MetadataMode.LLM)) for n in response.source_nodes)
        assert text < MockLLM().metadata.context_window, (name, text)
        assert QUESTION in str(response), name  # MockLLM echoes the one answer prompt


def test_the_fit_keeps_rank_order_and_cuts_only_the_last_node(rfcs):
    nodes = DenseExpert(
        [n for d in rfcs[:2] for n in _chunks(d)], embed_model=HashEmbedding(), similarity_top_k=40
    ).retrieve(QUESTION)
    total = sum(count_tokens(n.node.get_content()) for n in nodes)
    assert total > 4000  # more than a MockLLM prompt holds
    fitted = ContextWindowFit(llm=MockLLM()).postprocess_nodes(nodes, QueryBundle(QUESTION))
    assert 0 < len(fitted) < len(nodes)
    assert [n.node.node_id for n in fitted] == [n.node.node_id for n in nodes[: len(fitted)]]
    assert all(a is b for a, b in zip(fitted[:-1], nodes))
    assert sum(count_tokens(n.node.get_content()) for n in fitted) < 3900


def test_a_window_with_no_room_is_a_clear_error():
    nodes = DenseExpert(_chunks(quic_rfcs()[0][0]), embed_model=HashEmbedding()).retrieve(QUESTION)
    with pytest.raises(ValueError, match="context window .*larger context_window"):
        ContextWindowFit(llm=MockLLM(max_tokens=3900)).postprocess_nodes(nodes, QueryBundle(QUESTION))


def _chunks(doc):
    from llama_index.core.node_parser import SentenceSplitter

    return SentenceSplitter(chunk_size=256, chunk_overlap=0).get_nodes_from_documents([doc])
