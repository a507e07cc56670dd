"""``causalrag-bench`` registrations for UMG-RAG / UMGP-RAG and their ablations."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from causalrag_bench.registry import BenchContext, register_retriever
from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

GROUP = "umg"
# fused units handed to parent promotion (it keeps ctx.top_k parents)
PROMOTION_CANDIDATES = 50
SUBSET_GRANULARITIES = (2, 4, 8)
# umgp promotes to the coarsest windows and fits them to the budget (see the README section)
UMGP_PARENT_GRANULARITY = 32
PAPER_PARENT_GRANULARITY = 8
# evidence summed into parents and spread over sentences: the mixture P (not R = P/sqrt(len))
EVIDENCE_KEY = "P"


class PromotedRetriever(BaseRetriever):
    """A retriever followed by node postprocessors (what RetrieverQueryEngine does).

    ``retrieve_for_budget(query, budget)`` reruns only the postprocessors with
    ``budget_tokens=budget`` on the fused ranking of the same query (kept for the last query),
    which is how ``causalrag-bench`` asks a budget-aware retriever for each budget.
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        postprocessors: Sequence[BaseNodePostprocessor],
        budget_aware: bool = True,
    ) -> None:
        self._retriever = retriever
        self._post = list(postprocessors)
        self._last: Optional[Tuple[str, List[NodeWithScore]]] = None
        if not budget_aware:
            self.retrieve_for_budget = None  # type: ignore[assignment]
        super().__init__()

    def _fused(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if self._last is None or self._last[0] != query_bundle.query_str:
            self._last = (query_bundle.query_str, self._retriever.retrieve(query_bundle))
        return self._last[1]

    def _run(self, query_bundle: QueryBundle, budget: Optional[int]) -> List[NodeWithScore]:
        nodes = self._fused(query_bundle)
        for p in self._post:
            if budget is not None and "budget_tokens" in type(p).model_fields:
                p = p.model_copy(update={"budget_tokens": budget})
            nodes = p.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        self._last = None
        return self._run(query_bundle, None)

    def retrieve_for_budget(self, query: str, budget: int) -> List[NodeWithScore]:
        return self._run(QueryBundle(query), budget)


def _index(
    ctx: BenchContext, embedding_mode: str = "pooled", parent_granularity: int = UMGP_PARENT_GRANULARITY
) -> MultiGranularityIndex:
    return ctx.memo(
        f"umg_index_{embedding_mode}_p{parent_granularity}",
        lambda: MultiGranularityIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            embedding_mode=embedding_mode,
            parent_granularity=parent_granularity,
            show_progress=ctx.show_progress,
        ),
    )


def _umgp(
    ctx: BenchContext,
    embedding_mode: str = "pooled",
    parent_granularity: int = UMGP_PARENT_GRANULARITY,
    budget_aware: bool = True,
    fit_mode: str = "sentences",
    **kwargs: Any,
) -> BaseRetriever:
    index = _index(ctx, embedding_mode, parent_granularity)
    expert_names = kwargs.pop("expert_names", ("dense", "sparse"))
    granularities: Optional[Sequence[int]] = kwargs.pop("granularities", None)
    retriever = index.as_retriever(
        expert_names=expert_names,
        granularities=granularities,
        similarity_top_k=PROMOTION_CANDIDATES,
        **kwargs,
    )
    post = index.as_postprocessor(top_n=ctx.top_k, fit_mode=fit_mode, evidence_key=EVIDENCE_KEY)
    return PromotedRetriever(retriever, [post], budget_aware=budget_aware)


@register_retriever("umg", "UMG-RAG: entropy fusion of dense+BM25 over 2/4/8/16/32-sentence windows", group=GROUP)
def build_umg(ctx: BenchContext) -> BaseRetriever:
    return _index(ctx).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever("umgp", "UMGP-RAG: UMG fusion + budget-aware promotion to 32-sentence windows", group=GROUP)
def build_umgp(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx)


@register_retriever("umgp_nobudget", "UMGP ablation: one ranking for every budget (the bench truncates it)", group=GROUP)
def build_umgp_nobudget(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, budget_aware=False)


@register_retriever("umgp_window", "UMGP ablation: fit to the budget with one contiguous window", group=GROUP)
def build_umgp_window(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, fit_mode="window")


@register_retriever("umgp_pg8", "UMGP ablation: the paper's 8-sentence parents (budget-aware)", group=GROUP)
def build_umgp_pg8(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, parent_granularity=PAPER_PARENT_GRANULARITY)


@register_retriever("umgp_equal", "UMGP ablation: equal list weights instead of entropy confidences", group=GROUP)
def build_umgp_equal(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, weighting="equal")


@register_retriever("umgp_nolen", "UMGP ablation: no length penalty (rank by P, not P/sqrt(len))", group=GROUP)
def build_umgp_nolen(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, length_exponent=0.0)


@register_retriever("umgp_dense", "UMGP ablation: dense experts only", group=GROUP)
def build_umgp_dense(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, expert_names=("dense",))


@register_retriever("umgp_sparse", "UMGP ablation: BM25 experts only", group=GROUP)
def build_umgp_sparse(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, expert_names=("sparse",))


@register_retriever("umgp_g248", "UMGP ablation: granularities 2/4/8 only (no 16/32)", group=GROUP)
def build_umgp_g248(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, granularities=SUBSET_GRANULARITIES)


@register_retriever("umgp_full", "UMGP with every unit embedded (build-cost reference for the pooled default)", group=GROUP)
def build_umgp_full(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, embedding_mode="full")


@register_retriever("umgp_sent", "UMGP with sentence embeddings pooled into every unit (cheapest build)", group=GROUP)
def build_umgp_sent(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, embedding_mode="sentences")
