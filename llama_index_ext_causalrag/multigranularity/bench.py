"""``causalrag-bench`` registrations for UMG-RAG / UMGP-RAG and their ablations."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_ext_causalrag.eval.registry import BenchContext, register_retriever
from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

GROUP = "umg"
# fused units handed to parent promotion (it keeps ctx.top_k parents)
PROMOTION_CANDIDATES = 50
SUBSET_GRANULARITIES = (2, 4, 8)


class PromotedRetriever(BaseRetriever):
    """A retriever followed by node postprocessors (what RetrieverQueryEngine does)."""

    def __init__(self, retriever: BaseRetriever, postprocessors: Sequence[BaseNodePostprocessor]) -> None:
        self._retriever = retriever
        self._post = list(postprocessors)
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        nodes = self._retriever.retrieve(query_bundle)
        for p in self._post:
            nodes = p.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes


def _index(ctx: BenchContext, embedding_mode: str = "pooled") -> MultiGranularityIndex:
    return ctx.memo(
        f"umg_index_{embedding_mode}",
        lambda: MultiGranularityIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            embedding_mode=embedding_mode,
            show_progress=ctx.show_progress,
        ),
    )


def _umgp(ctx: BenchContext, embedding_mode: str = "pooled", **kwargs: Any) -> BaseRetriever:
    index = _index(ctx, embedding_mode)
    expert_names = kwargs.pop("expert_names", ("dense", "sparse"))
    granularities: Optional[Sequence[int]] = kwargs.pop("granularities", None)
    retriever = index.as_retriever(
        expert_names=expert_names,
        granularities=granularities,
        similarity_top_k=PROMOTION_CANDIDATES,
        **kwargs,
    )
    return PromotedRetriever(retriever, [index.as_postprocessor(top_n=ctx.top_k)])


@register_retriever("umg", "UMG-RAG: entropy fusion of dense+BM25 over 2/4/8/16/32-sentence windows", group=GROUP)
def build_umg(ctx: BenchContext) -> BaseRetriever:
    return _index(ctx).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever("umgp", "UMGP-RAG: UMG fusion + parent promotion (parents = 8-sentence windows)", group=GROUP)
def build_umgp(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx)


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
