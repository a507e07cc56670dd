"""One batched embedding call per query: HCQR embeds its searches together and reuses them."""

from __future__ import annotations

import asyncio
from typing import Any, List

import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from fakes import HashEmbedding
from llama_index_ext_causalrag import DenseExpert, HypothesisRetriever, SparseExpert
from llama_index_ext_causalrag.embeddings.query import QueryEmbedder, embed_queries, find_embed_model

TEXTS = [
    "Aspirin inhibits cyclooxygenase and lowers prostaglandin synthesis.",
    "Penicillin blocks bacterial cell wall synthesis by binding transpeptidase.",
    "Insulin lowers blood glucose by promoting uptake into muscle.",
    "Warfarin antagonises vitamin K and prolongs clotting time.",
    "Metformin reduces hepatic glucose production.",
    "Heparin activates antithrombin and stops clot growth.",
]
QUESTION = "Which drug acts on vitamin K dependent clotting factors?"
OPTIONS = {"A": "aspirin", "B": "warfarin", "C": "insulin", "D": "heparin"}


class CountingEmbedding(HashEmbedding):
    """HashEmbedding that counts single query calls and batched query calls."""

    _single: List[str] = PrivateAttr(default_factory=list)
    _batches: List[List[str]] = PrivateAttr(default_factory=list)

    def _get_query_embedding(self, query: str) -> List[float]:
        self._single.append(query)
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)

    def get_query_embedding_batch(self, queries: List[str]) -> List[List[float]]:
        self._batches.append(list(queries))
        return [self._vec(q) for q in queries]


class Hidden(BaseRetriever):
    """Hides the retriever inside from the embedding-model lookup: every search embeds itself."""

    def __init__(self, inner: BaseRetriever) -> None:
        self._hidden = inner
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._hidden.retrieve(query_bundle)


def _nodes() -> List[TextNode]:
    return [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)]


def _dense(embed: Any) -> DenseExpert:
    return DenseExpert(_nodes(), embed_model=embed, similarity_top_k=3)


def test_hcqr_embeds_its_searches_in_two_batches_and_returns_what_one_by_one_gives() -> None:
    embed = CountingEmbedding()
    batched = HypothesisRetriever.from_defaults(_dense(embed), per_query_k=3)
    nodes, plan = batched.retrieve_with_plan(QUESTION, OPTIONS)
    # two model calls: the four option searches plus the key-features query in one batch,
    # then the distinguish query (it depends on the ranking) with the original list's query
    assert [len(b) for b in embed._batches] == [5, 2] and embed._single == []
    assert embed._batches[1] == [plan.queries["distinguish"], HypothesisRetriever.original_query(plan)]
    assert plan.queries["key_features"] in embed._batches[0]
    assert plan.queries["support"] in embed._batches[0]

    plain_embed = CountingEmbedding()
    plain = HypothesisRetriever.from_defaults(Hidden(_dense(plain_embed)), per_query_k=3)
    plain_nodes, plain_plan = plain.retrieve_with_plan(QUESTION, OPTIONS)
    assert plain_embed._batches == [] and len(plain_embed._single) == 8  # 4 options + 4 lists
    assert plain_plan.queries == plan.queries
    assert [n.node.node_id for n in plain_nodes] == [n.node.node_id for n in nodes]
    assert [n.score for n in plain_nodes] == pytest.approx([n.score for n in nodes])


def test_aretrieve_batches_too() -> None:
    embed = CountingEmbedding()
    hr = HypothesisRetriever.from_defaults(_dense(embed), per_query_k=3, options=OPTIONS)
    sync_ids = [n.node.node_id for n in hr.retrieve(QUESTION)]
    embed._batches.clear()
    embed._single.clear()
    async_ids = [n.node.node_id for n in asyncio.run(hr.aretrieve(QUESTION))]
    assert async_ids == sync_ids
    assert [len(b) for b in embed._batches] == [5, 2] and embed._single == []


def test_open_question_embeds_question_and_key_query_together() -> None:
    embed = CountingEmbedding()
    hr = HypothesisRetriever.from_defaults(_dense(embed), per_query_k=3)
    hr.retrieve("What does warfarin antagonise?")
    assert len(embed._batches[0]) == 2  # the question and its key-features query
    assert len(embed._batches) + len(embed._single) == 2


def test_find_embed_model_walks_wrappers_and_refuses_ambiguity() -> None:
    embed = CountingEmbedding()
    dense = _dense(embed)
    assert find_embed_model(dense) is embed
    assert find_embed_model(Hidden(dense)) is None
    assert find_embed_model(SparseExpert(_nodes())) is None

    class Pair(BaseRetriever):
        def __init__(self, *rs: BaseRetriever) -> None:
            self._retrievers = list(rs)
            super().__init__()

        def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
            return []

    assert find_embed_model(Pair(dense, SparseExpert(_nodes()))) is embed
    assert find_embed_model(Pair(dense, _dense(CountingEmbedding()))) is None


def test_query_embedder_embeds_each_text_once() -> None:
    embed = CountingEmbedding()
    qe = QueryEmbedder(embed)
    first = qe.bundles(["a b", "c d", "a b"], also=["e f"])
    second = qe.bundles(["e f", "a b"])
    assert embed._batches == [["a b", "c d", "e f"]]
    assert qe.calls == 1
    assert first[0].embedding == first[2].embedding == second[1].embedding
    assert QueryEmbedder(None).bundles(["x"])[0].embedding is None


def test_huggingface_batch_equals_one_query_at_a_time() -> None:
    from llama_index_ext_causalrag import default_embed_model

    model = default_embed_model(backend="torch")
    texts = [QUESTION, "warfarin vitamin K", "a much longer query about heparin and antithrombin in clotting"]
    batched = np.asarray(embed_queries(model, texts))
    single = np.asarray([model.get_query_embedding(t) for t in texts])
    assert batched.shape == single.shape
    assert np.abs(batched - single).max() < 1e-5
