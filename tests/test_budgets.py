"""Budgets are validated wherever one is taken, and every budget-aware retriever keeps to it."""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode

from fakes import HashEmbedding
from llama_index_ext_causalrag import (
    CausalGraphIndex,
    DenseExpert,
    HypothesisRetriever,
    MultiGranularityIndex,
    StandardsIndex,
)
from llama_index_ext_causalrag.text.tokens import count_tokens
from standards_fixtures import TOY_RECOVERY, TOY_TRANSPORT

BAD = [0, -5, 2.5, float("nan"), float("inf"), "100", True]


def _docs() -> list[Document]:
    return [
        Document(
            id_=f"d{t}", text=" ".join(f"Sentence {i} says {t} causes effect e{i} in the long run." for i in range(30))
        )
        for t in ("drought", "insulin", "coral")
    ]


@pytest.fixture(scope="module")
def indexes():
    emb = HashEmbedding()
    return {
        "umgp": MultiGranularityIndex.from_documents(_docs(), embed_model=emb),
        "standards": StandardsIndex.from_documents(
            [Document(text=TOY_TRANSPORT, id_="rfc9990"), Document(text=TOY_RECOVERY, id_="rfc9991")], embed_model=emb
        ),
        "causalrag2": CausalGraphIndex.from_documents(_docs(), embed_model=emb, show_progress=False),
    }


def _tokens(nodes) -> int:
    return sum(count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes)


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_budget_that_is_not_a_positive_int_is_a_value_error_naming_it(indexes, bad):
    for name in ("umgp", "causalrag2"):
        with pytest.raises(ValueError, match="budget_tokens") as e:
            indexes[name].as_retriever(budget_tokens=bad)
        assert repr(bad) in str(e.value), name
    base = DenseExpert(indexes["umgp"].units[:20], embed_model=HashEmbedding())
    with pytest.raises(ValueError, match="budget_tokens"):
        HypothesisRetriever.from_defaults(base, budget_tokens=bad)


@pytest.mark.parametrize("budget", [1, 7, 40, 200])
def test_every_budget_aware_retriever_returns_at_most_the_budget(indexes, budget):
    query = "what does drought cause"
    for name in ("umgp", "causalrag2"):
        out = indexes[name].as_retriever(budget_tokens=budget).retrieve(query)
        assert out and _tokens(out) <= budget, (name, budget, _tokens(out))
    base = DenseExpert(indexes["umgp"].units, embed_model=HashEmbedding())
    out = HypothesisRetriever.from_defaults(base, budget_tokens=budget).retrieve(query)
    assert out and _tokens(out) <= budget
