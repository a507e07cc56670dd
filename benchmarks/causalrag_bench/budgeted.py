"""A retriever scored unbudgeted and, per budget, by the method's own cut: one retriever per budget."""

from __future__ import annotations

from typing import Callable, Dict, List

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle


class PerBudget(BaseRetriever):
    """``plain`` unbudgeted (R@K, MRR, AP) and, for CR@B and P@B, ``make(B)`` (the same method with
    ``budget_tokens=B``: its own fitting stage), built once per budget."""

    def __init__(self, plain: BaseRetriever, make: Callable[[int], BaseRetriever]) -> None:
        self._plain, self._make = plain, make
        self._by_budget: Dict[int, BaseRetriever] = {}
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._plain.retrieve(query_bundle)

    def retrieve_for_budget(self, query: str, budget: int) -> List[NodeWithScore]:
        r = self._by_budget.get(budget)
        if r is None:
            r = self._by_budget[budget] = self._make(budget)
        return r.retrieve(query)
