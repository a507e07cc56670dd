"""Budget-fitted pieces keep their source node's id (text/pieces.py), so LlamaIndex's tools join them."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import Document
from llama_index.core.evaluation import RetrieverEvaluator
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from fakes import HashEmbedding
from llama_index_ext_causalrag import HypothesisRetriever, MultiGranularityIndex
from llama_index_ext_causalrag.text.pieces import cut_of, cut_piece, piece_key, unique_pieces
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance
from llama_index_ext_causalrag.text.tokens import fit_to_budget

TOPICS = ["drought", "insulin", "coral", "wheat"]
QUERY = "insulin causes effect e3"


def _docs() -> list[Document]:
    return [
        Document(
            id_=f"doc-{t}",
            text=" ".join(f"Sentence {i} of the {t} study reports that {t} causes effect e{i % 5}." for i in range(40)),
        )
        for t in TOPICS
    ]


@pytest.fixture(scope="module")
def index() -> MultiGranularityIndex:
    return MultiGranularityIndex.from_documents(_docs(), embed_model=HashEmbedding())


def test_a_piece_keeps_the_id_and_records_the_cut_outside_llm_and_embed_text():
    node = TextNode(id_="P", text="One two three. Four five six. Seven.", start_char_idx=100, end_char_idx=136)
    piece = cut_piece(node, 15, 29)
    assert piece.node_id == "P" and piece.text == "Four five six."
    assert (piece.start_char_idx, piece.end_char_idx) == (115, 129)
    assert get_provenance(piece)["cut"] == [15, 29] and cut_of(piece) == (15, 29)
    assert PROVENANCE_KEY not in piece.get_content(MetadataMode.LLM)
    assert PROVENANCE_KEY not in piece.get_content(MetadataMode.EMBED)
    again = cut_piece(piece, 0, 4)  # a piece of a piece: offsets stay relative to the source node
    assert again.text == "Four" and cut_of(again) == (15, 19) and again.node_id == "P"
    assert cut_piece(node, 0, len(node.text)) is node  # the whole text is no cut
    assert node.metadata == {}  # the source node is never mutated


def test_piece_keys_tell_pieces_of_one_node_apart():
    node = TextNode(id_="P", text="a" * 50)
    a, b = (NodeWithScore(node=cut_piece(node, s, e)) for s, e in ((0, 10), (20, 30)))
    assert a.node.node_id == b.node.node_id == "P"
    assert piece_key(a) == "P#0-10" and piece_key(b) == "P#20-30" and piece_key(node) == "P"
    assert unique_pieces([a, b, a]) == [a, b]


def test_truncation_keeps_the_id_and_records_the_cut():
    node = NodeWithScore(node=TextNode(id_="T", text="word " * 200), score=1.0)
    (cut,) = fit_to_budget([node], 10)
    assert cut.node.node_id == "T" and cut_of(cut) == (0, len(cut.node.text))


def test_retrieve_keeps_every_piece_of_a_fitted_parent(index):
    out = index.as_retriever(similarity_top_k=3, budget_tokens=60).retrieve(QUERY)
    assert len(out) > 1 and len({n.node.node_id for n in out}) < len(out)  # pieces sharing their parent's id
    assert all(get_provenance(n).get("fitted_from") == n.node.node_id for n in out)
    assert len({piece_key(n) for n in out}) == len(out)
    assert [
        piece_key(n) for n in asyncio.run(index.as_retriever(similarity_top_k=3, budget_tokens=60).aretrieve(QUERY))
    ] == [piece_key(n) for n in out]
    parent = index.docstore.get_node(out[0].node.node_id)  # joinable to the index node it came from
    a, b = cut_of(out[0])
    assert parent.get_content(MetadataMode.NONE)[a:b] == out[0].node.get_content(MetadataMode.NONE)


def _scores(retriever, queries, expected) -> list[dict]:
    evaluator = RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=retriever)
    return [evaluator.evaluate(query=q, expected_ids=ids).metric_vals_dict for q, ids in zip(queries, expected)]


def test_retriever_evaluator_scores_a_budget_fitted_retriever_as_the_unbudgeted_one(index):
    queries = [f"{t} causes effect e{k}" for t in TOPICS for k in (1, 3)]
    whole = index.as_retriever(similarity_top_k=3)
    gold = [[whole.retrieve(q)[0].node.node_id] for q in queries]  # the parent that holds the evidence
    fitted = index.as_retriever(similarity_top_k=3, budget_tokens=40)
    for q in queries:  # the budget does cut: every returned node is a fitted piece
        assert all("cut" in get_provenance(n) for n in fitted.retrieve(q)), q
    unbudgeted, budgeted = _scores(whole, queries, gold), _scores(fitted, queries, gold)
    assert budgeted == unbudgeted
    assert all(s == {"hit_rate": 1.0, "mrr": 1.0} for s in budgeted)


def test_hcqr_over_a_fitted_retriever_keeps_distinct_pieces_of_one_parent(index):
    base = index.as_retriever(similarity_top_k=3, budget_tokens=60)
    # both lists search the question itself: fusion must keep each piece once, none merged into another
    hcqr = HypothesisRetriever.from_defaults(base, per_query_k=5, use_queries=("key_features", "original"))
    want = [piece_key(n) for n in base.retrieve(QUERY)]
    out = hcqr.retrieve(QUERY)
    assert len(want) > 1 and [piece_key(n) for n in out] == want
    assert len({n.node.node_id for n in out}) == 1
