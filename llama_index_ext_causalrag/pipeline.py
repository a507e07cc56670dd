"""``PostprocessedRetriever``: a retriever followed by node postprocessors, budget-aware.

This is what ``RetrieverQueryEngine`` does between retrieval and synthesis, packaged as one
``BaseRetriever`` so that a method's measured configuration (e.g. UMGP: entropy fusion, then
parent promotion fitted to a token budget) is a single object a user can retrieve from,
compose, or hand to a query engine.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.text.fitting import DEFAULT_FIT_MODE, QueryEvidence, check_fit_mode, make_fitter
from llama_index_ext_causalrag.text.pieces import PieceRetrieval
from llama_index_ext_causalrag.text.tokens import fit_to_budget, node_tokens, validate_budget

_stages = StageRecorder(__name__, "pipeline")


@runtime_checkable
class BudgetedPostprocessor(Protocol):
    """A postprocessor that fits its output to a budget it is given per call (e.g.
    :class:`ParentPromotionPostprocessor`, which fits whole sentences)."""

    def postprocess_within(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle], budget_tokens: Optional[int]
    ) -> List[NodeWithScore]: ...


def _run(
    post: BaseNodePostprocessor, nodes: List[NodeWithScore], query_bundle: QueryBundle, budget: Optional[int]
) -> List[NodeWithScore]:
    """``post`` on ``nodes``: within ``budget`` if it takes one (:class:`BudgetedPostprocessor`)."""
    if budget is not None and isinstance(post, BudgetedPostprocessor):
        return post.postprocess_within(nodes, query_bundle, budget)
    return post.postprocess_nodes(nodes, query_bundle=query_bundle)


class PostprocessedRetriever(PieceRetrieval, ExplainMixin, BaseRetriever):
    """``retriever``, then each of ``postprocessors`` in order, then the first ``top_n`` nodes.

    ``budget_tokens`` is handed to every postprocessor that takes one per call
    (:class:`BudgetedPostprocessor`, e.g. :class:`ParentPromotionPostprocessor`, which fits whole
    sentences), and the result is
    then cut to that many tokens (the best node never dropped), the last node that does not fit
    cut by ``fit_mode``: ``"prefix"`` its head, ``"sentences"`` its sentences with the most query
    evidence (``fit_evidence``, default plain term overlap; ``text.fitting``); None
    keeps each postprocessor's own setting and cuts nothing. :meth:`retrieve_for_budget` answers the same
    query at another budget by rerunning only the postprocessors on the first-stage ranking of
    the last query (one first-stage search for several budgets).
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        postprocessors: Sequence[BaseNodePostprocessor] = (),
        top_n: Optional[int] = None,
        budget_tokens: Optional[int] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        fit_mode: str = DEFAULT_FIT_MODE,
        fit_evidence: Optional[QueryEvidence] = None,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a BaseRetriever, got {type(retriever).__name__}.")
        bad = [type(p).__name__ for p in postprocessors if not isinstance(p, BaseNodePostprocessor)]
        if bad:
            raise TypeError(f"postprocessors must be BaseNodePostprocessor instances, got {bad}.")
        if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
            raise ValueError(f"top_n must be an int >= 1 or None (no cut), got {top_n!r}.")
        validate_budget(budget_tokens)
        self._retriever = retriever
        self._post = list(postprocessors)
        self.top_n = top_n
        self.budget_tokens = budget_tokens
        self.fit_mode = check_fit_mode(fit_mode)
        self._fit_evidence = fit_evidence
        self._last: Optional[Tuple[QueryBundle, List[NodeWithScore]]] = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def retriever(self) -> BaseRetriever:
        return self._retriever

    def _explain_method(self) -> str:
        return getattr(self._retriever, "EXPLAIN_METHOD", "") or "pipeline"

    def _explain_options(self) -> Dict[str, Any]:
        inner = getattr(self._retriever, "_explain_options", None)
        return {
            **(inner() if callable(inner) else {}),
            "top_n": self.top_n,
            "budget_tokens": self.budget_tokens,
            "fit_mode": self.fit_mode,
            "postprocessors": [{"class": type(p).__name__, **p.model_dump()} for p in self._post],
        }

    @property
    def postprocessors(self) -> List[BaseNodePostprocessor]:
        return list(self._post)

    def _postprocess(
        self, nodes: List[NodeWithScore], query_bundle: QueryBundle, budget: Optional[int]
    ) -> List[NodeWithScore]:
        for post in self._post:
            nodes = _run(post, nodes, query_bundle, budget)
        return self._cut(nodes, budget, query_bundle)

    def _cut(
        self, nodes: List[NodeWithScore], budget: Optional[int], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        """The first ``top_n`` of ``nodes``, fitted to ``budget`` tokens."""
        before = nodes
        nodes = nodes[: self.top_n] if self.top_n is not None else nodes
        fit = None
        if budget is not None and query_bundle is not None:
            fit = make_fitter(self.fit_mode, query_bundle.query_str, self._fit_evidence)
        out = fit_to_budget(nodes, budget, fit=fit) if budget is not None else nodes
        _stages.stage(
            "final_cut",
            {"in": len(before), "out": len(out)},
            lambda: self._cut_detail(before, out, budget),
            method=self._explain_method(),
        )
        return out

    def _cut_detail(
        self, before: List[NodeWithScore], out: List[NodeWithScore], budget: Optional[int]
    ) -> Dict[str, Any]:
        # out is a prefix of before, its last node possibly cut (a truncated copy, or several pieces
        # of it with fit_mode="sentences"): compare by position (pieces of one node share its id)
        whole = next((i for i, (b, o) in enumerate(zip(before, out)) if b is not o), min(len(before), len(out)))
        taken = whole + (1 if len(out) > whole else 0)
        return {
            "took": {"nodes": len(before), "top_n": self.top_n, "budget_tokens": budget, "fit_mode": self.fit_mode},
            "decided": {
                "kept": [n.node.node_id for n in out],
                "cut": [n.node.node_id for n in before[taken:]],
                "truncated": [
                    o.node.node_id
                    for b, o in zip(before, out)
                    if o.node.get_content(metadata_mode=MetadataMode.NONE)
                    != b.node.get_content(metadata_mode=MetadataMode.NONE)
                ],
                "tokens_used": sum(node_tokens(n) for n in out),
            },
            "why": "The first top_n nodes, whole while they fit the budget, the next one cut by fit_mode "
            "(the best node is never dropped)."
            if budget is not None
            else "The first top_n nodes; no token budget.",
        }

    async def _apostprocess(
        self, nodes: List[NodeWithScore], query_bundle: QueryBundle, budget: Optional[int]
    ) -> List[NodeWithScore]:
        """:meth:`_postprocess` awaiting each postprocessor (an LLM step never blocks the loop)."""
        for post in self._post:
            if type(post)._apostprocess_nodes is BaseNodePostprocessor._apostprocess_nodes:
                nodes = _run(post, nodes, query_bundle, budget)  # CPU-only: inline, as before
            else:
                nodes = await post.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return self._cut(nodes, budget, query_bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        first = self._retriever.retrieve(query_bundle)
        self._last = (query_bundle, first)
        return self._postprocess(list(first), query_bundle, self.budget_tokens)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        first = await self._retriever.aretrieve(query_bundle)
        self._last = (query_bundle, first)
        return await self._apostprocess(list(first), query_bundle, self.budget_tokens)

    def retrieve_for_budget(self, query: str, budget: int) -> List[NodeWithScore]:
        """The result for ``query`` fitted to ``budget`` tokens; reuses the last first stage."""
        validate_budget(budget)
        last = self._last
        if last is None or last[0].query_str != query:
            bundle = QueryBundle(query)
            last = (bundle, self._retriever.retrieve(bundle))
            self._last = last
        return self._postprocess(list(last[1]), last[0], budget)  # the bundle keeps the query's embedding
