"""``causalrag-bench`` entries of HCQR: hcqr, its ablations, the query baselines, LLM modes.

All entries share one underlying retriever: the bench's ``rrf`` (LlamaIndex
``QueryFusionRetriever``, reciprocal rank of dense and BM25 over the same 256-token chunks).
The offline planner scores ``question + option`` with the dense retriever of that fusion
(cosine scores, comparable across queries; RRF scores are rank-based and would tie).
Answer options come from ``example.metadata["options"]`` via ``retrieve_example``.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_ext_causalrag.eval.baselines import _vector_retriever, build_rrf
from llama_index_ext_causalrag.eval.registry import BenchContext, register_retriever
from llama_index_ext_causalrag.eval.types import EvalExample
from llama_index_ext_causalrag.hypothesis.retriever import HypothesisRetriever
from llama_index_ext_causalrag.hypothesis.state import QUERY_ROLES
from llama_index_ext_causalrag.hypothesis.text import format_options, normalize_options
from llama_index_ext_causalrag.hypothesis.transform import HypothesisQueryTransform

GROUP = "hcqr"


def _options(ex: EvalExample) -> Mapping[str, str]:
    return normalize_options(ex.metadata.get("options"))


def question_with_options(ex: EvalExample) -> str:
    opts = _options(ex)
    return f"{ex.question}\n{format_options(opts)}" if opts else ex.question


class ExampleRetriever(BaseRetriever):
    """Adapts a per-example function to the bench (``retrieve_example``) and to plain queries."""

    def __init__(self, fn: Callable[[EvalExample], List[NodeWithScore]], plain: BaseRetriever) -> None:
        self._fn = fn
        self._plain = plain
        super().__init__()

    def retrieve_example(self, example: EvalExample) -> List[NodeWithScore]:
        return self._fn(example)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._plain.retrieve(query_bundle)


def _base(ctx: BenchContext) -> BaseRetriever:
    return ctx.memo("hcqr_base_rrf", lambda: build_rrf(ctx))


def _hcqr(ctx: BenchContext, use: tuple = QUERY_ROLES, llm: Optional[Any] = None) -> ExampleRetriever:
    base = _base(ctx)
    if llm is None:
        transform = HypothesisQueryTransform(llm=None, retriever=_vector_retriever(ctx))
    else:
        transform = HypothesisQueryTransform(llm=llm, retriever=_vector_retriever(ctx))
    hr = HypothesisRetriever(base, transform, per_query_k=5, use_queries=use)
    return ExampleRetriever(lambda ex: hr.retrieve_with_plan(ex.question, _options(ex))[0], hr)


@register_retriever("q_raw", "HCQR baseline: the raw question to rrf (dense+BM25)", group=GROUP)
def build_q_raw(ctx: BenchContext) -> BaseRetriever:
    base = _base(ctx)
    return ExampleRetriever(lambda ex: base.retrieve(ex.question), base)


@register_retriever("q_options", "HCQR baseline: question plus all answer options to rrf", group=GROUP)
def build_q_options(ctx: BenchContext) -> BaseRetriever:
    base = _base(ctx)
    return ExampleRetriever(lambda ex: base.retrieve(question_with_options(ex)), base)


@register_retriever("hcqr", "HCQR, offline planner: 3 hypothesis queries to rrf, top 5 each, RRF-fused", group=GROUP)
def build_hcqr(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx)


@register_retriever("hcqr_no_q1", "HCQR ablation: without the support query", group=GROUP)
def build_hcqr_no_q1(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, ("distinguish", "key_features"))


@register_retriever("hcqr_no_q2", "HCQR ablation: without the distinguish query", group=GROUP)
def build_hcqr_no_q2(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, ("support", "key_features"))


@register_retriever("hcqr_no_q3", "HCQR ablation: without the key-features query", group=GROUP)
def build_hcqr_no_q3(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, ("support", "distinguish"))


def _need_llm(ctx: BenchContext, name: str) -> Any:
    if ctx.llm is None:
        raise ValueError(f"{name} needs an LLM (ctx.llm is None); run it through a bench with an LLM.")
    return ctx.llm


@register_retriever("hcqr_llm", "HCQR with the LLM planner (one JSON call per question)", group=GROUP, needs_llm=True)
def build_hcqr_llm(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, llm=_need_llm(ctx, "hcqr_llm"))


@register_retriever("hyde", "LlamaIndex HyDEQueryTransform over rrf (question plus options)", group=GROUP, needs_llm=True)
def build_hyde(ctx: BenchContext) -> BaseRetriever:
    from llama_index.core.indices.query.query_transform.base import HyDEQueryTransform
    from llama_index.core.retrievers import TransformRetriever

    tr = TransformRetriever(_base(ctx), HyDEQueryTransform(llm=_need_llm(ctx, "hyde"), include_original=True))
    return ExampleRetriever(lambda ex: tr.retrieve(question_with_options(ex)), tr)


@register_retriever("fusion_llm", "LlamaIndex QueryFusionRetriever, 3 generated queries + original, RRF", group=GROUP, needs_llm=True)
def build_fusion_llm(ctx: BenchContext) -> BaseRetriever:
    from llama_index.core.retrievers import QueryFusionRetriever

    from llama_index_ext_causalrag.eval.baselines import _bm25_retriever

    qf = QueryFusionRetriever(
        [_vector_retriever(ctx), _bm25_retriever(ctx)],
        llm=_need_llm(ctx, "fusion_llm"),
        mode="reciprocal_rerank",
        num_queries=4,
        use_async=False,
        similarity_top_k=ctx.top_k,
    )
    return ExampleRetriever(lambda ex: qf.retrieve(question_with_options(ex)), qf)
