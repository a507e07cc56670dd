"""``causalrag-bench`` entries of HCQR: hcqr (the library's default preset), its ablations
(``hcqr_no_q1``/``q2``/``q3``/``orig``: one list left out each), ``hcqr_paper`` (the published
preset), the query baselines, LLM modes.

All entries share one underlying retriever, ``DenseSparseRRF``: reciprocal rank fusion of our
``DenseExpert`` (the bench's embedder) and ``SparseExpert`` (bm25s) over the bench's shared
256-token chunks, top ``ctx.top_k`` of each, like the bench's ``rrf`` but with NumPy top-k
(the bench runs ~9 searches per question). The offline planner scores ``question + option``
with the ``DenseExpert`` alone (cosine scores, comparable across queries; RRF scores are
rank-based and would tie).
Answer options come from ``example.metadata["options"]`` via ``retrieve_example``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.types import EvalExample
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.fusion import reciprocal_rank_fusion
from llama_index_ext_causalrag.hypothesis.options import format_options, normalize_options
from llama_index_ext_causalrag.hypothesis.retriever import HypothesisRetriever
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES, ORIGINAL_ROLE

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
        self.last_plan: Optional[Any] = None  # HCQR entries: the plan of the last example
        super().__init__()

    def retrieve_example(self, example: EvalExample) -> List[NodeWithScore]:
        return self._fn(example)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._plain.retrieve(query_bundle)


class CachedRetriever(BaseRetriever):
    """Memoises a deterministic retriever per query text, so hcqr and its ablations (which
    share the planner's and the queries' searches) pay for each search once per run.
    Returned lists are shared: callers must not mutate them (HCQR copies before annotating)."""

    def __init__(self, retriever: BaseRetriever) -> None:
        self._retriever = retriever
        self._cache: Dict[Tuple[str, Tuple[str, ...]], List[NodeWithScore]] = {}
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        key = (query_bundle.query_str, tuple(query_bundle.embedding_strs))
        if key not in self._cache:
            self._cache[key] = self._retriever.retrieve(query_bundle)
        return list(self._cache[key])


class DenseSparseRRF(BaseRetriever):
    """RRF (k=60) of a DenseExpert and a SparseExpert, top ``similarity_top_k``."""

    def __init__(self, dense: DenseExpert, sparse: SparseExpert, similarity_top_k: int = 10) -> None:
        self._dense, self._sparse = dense, sparse
        self.similarity_top_k = similarity_top_k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        lists = [self._dense.retrieve(query_bundle), self._sparse.retrieve(query_bundle)]
        by_id = {n.node.node_id: n for lst in lists for n in lst}
        fused = reciprocal_rank_fusion([[n.node.node_id for n in lst] for lst in lists])
        return [NodeWithScore(node=by_id[i].node, score=s) for i, s in list(fused.items())[: self.similarity_top_k]]


def _dense(ctx: BenchContext) -> DenseExpert:
    return ctx.memo(
        "hcqr_dense_expert",
        lambda: DenseExpert(ctx.flat_nodes(), embed_model=ctx.embed_model, similarity_top_k=ctx.top_k),
    )


def _sparse(ctx: BenchContext) -> SparseExpert:
    return ctx.memo("hcqr_sparse_expert", lambda: SparseExpert(ctx.flat_nodes(), similarity_top_k=ctx.top_k))


def _base(ctx: BenchContext) -> BaseRetriever:
    return ctx.memo("hcqr_base_rrf", lambda: CachedRetriever(DenseSparseRRF(_dense(ctx), _sparse(ctx), ctx.top_k)))


def _planner_retriever(ctx: BenchContext) -> BaseRetriever:
    return ctx.memo("hcqr_planner_dense", lambda: CachedRetriever(_dense(ctx)))


class _PlanStats:
    """Working-answer accuracy of the planner, written to the bench artifacts as it runs."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.n = self.correct = self.with_answer = 0

    def add(self, plan: Any, ex: EvalExample) -> None:
        self.n += 1
        answer = ex.metadata.get("answer")
        working = plan.metadata.get("hypothesis", {}).get("working_option")
        if answer and working is not None:
            self.with_answer += 1
            self.correct += int(working == answer)
        self.path.write_text(
            json.dumps(
                {"questions": self.n, "with_working_option": self.with_answer, "working_option_correct": self.correct}
            ),
            encoding="utf-8",
        )


def _hcqr(
    ctx: BenchContext,
    use: Optional[Tuple[str, ...]] = None,
    llm: Optional[Any] = None,
    name: str = "hcqr",
    preset: str = "default",
) -> ExampleRetriever:
    """The library's ``HypothesisRetriever.from_defaults`` with ``preset`` (``use``: an ablation)."""
    hr = HypothesisRetriever.from_defaults(
        _base(ctx), llm=llm, scoring_retriever=_planner_retriever(ctx), preset=preset, use_queries=use
    )
    stats = _PlanStats(ctx.artifact_dir("hcqr") / f"{name}_planner_stats.json")

    def run(ex: EvalExample) -> List[NodeWithScore]:
        nodes, plan = hr.retrieve_with_plan(ex.question, _options(ex))
        stats.add(plan, ex)
        er.last_plan = plan
        return nodes

    er = ExampleRetriever(run, hr)
    return er


class BudgetedHCQR(ExampleRetriever):
    """``hr`` answering each question once without a budget (R@K, MRR, AP) and, for CR@B and P@B,
    the same plan refitted by ``hr.with_options(budget_tokens=B)`` (HCQR's own cut, its
    ``fit_mode``), the searches read from the shared cache."""

    def __init__(self, hr: HypothesisRetriever, stats: "_PlanStats") -> None:
        self._hr, self._stats = hr, stats
        self._by_budget: Dict[int, HypothesisRetriever] = {}
        self._plan: Optional[Tuple[str, Any]] = None
        super().__init__(self._run, hr)

    def _run(self, ex: EvalExample) -> List[NodeWithScore]:
        nodes, plan = self._hr.retrieve_with_plan(ex.question, _options(ex))
        self._stats.add(plan, ex)
        self.last_plan = plan
        self._plan = (ex.question, plan)
        return nodes

    def retrieve_for_budget(self, query: str, budget: int) -> List[NodeWithScore]:
        if self._plan is None or self._plan[0] != query:
            raise ValueError(f"BudgetedHCQR.retrieve_for_budget({query!r}) before retrieve_example of that question.")
        hr = self._by_budget.get(budget)
        if hr is None:
            hr = self._by_budget[budget] = self._hr.with_options(budget_tokens=budget)
        return hr.retrieve_with_plan(self._plan[1])[0]


def _hcqr_budgeted(ctx: BenchContext, name: str, fit_mode: str) -> BudgetedHCQR:
    """``hcqr`` with HCQR's own cut to each budget (``fit_mode``) instead of the bench's prefix."""
    hr = HypothesisRetriever.from_defaults(_base(ctx), scoring_retriever=_planner_retriever(ctx), fit_mode=fit_mode)
    return BudgetedHCQR(hr, _PlanStats(ctx.artifact_dir("hcqr") / f"{name}_planner_stats.json"))


@register_retriever(
    "hcqr_prefix", "hcqr cut to each budget by HCQR itself (fit_mode='prefix': the last node's head)", group=GROUP
)
def build_hcqr_prefix(ctx: BenchContext) -> BaseRetriever:
    return _hcqr_budgeted(ctx, "hcqr_prefix", "prefix")


@register_retriever(
    "hcqr_fit",
    "hcqr cut to each budget by HCQR, its default fit_mode='sentences': the last node that does "
    "not fit keeps its sentences sharing the most terms with the question and its options",
    group=GROUP,
)
def build_hcqr_fit(ctx: BenchContext) -> BaseRetriever:
    return _hcqr_budgeted(ctx, "hcqr_fit", "sentences")


@register_retriever("q_raw", "HCQR baseline: the raw question to RRF of DenseExpert+SparseExpert", group=GROUP)
def build_q_raw(ctx: BenchContext) -> BaseRetriever:
    base = _base(ctx)
    return ExampleRetriever(lambda ex: base.retrieve(ex.question), base)


@register_retriever("q_options", "HCQR baseline: question plus all answer options to the same RRF", group=GROUP)
def build_q_options(ctx: BenchContext) -> BaseRetriever:
    base = _base(ctx)
    return ExampleRetriever(lambda ex: base.retrieve(question_with_options(ex)), base)


@register_retriever(
    "hcqr",
    "HCQR default preset, offline planner: 3 hypothesis queries + the question with its "
    "options (our addition, weight 2; distinguish 0.5), top 5 each, RRF k=10",
    group=GROUP,
)
def build_hcqr(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx)


@register_retriever(
    "hcqr_paper",
    "HCQR as published (preset 'paper'), offline planner: the 3 hypothesis queries, equal weights",
    group=GROUP,
)
def build_hcqr_paper(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, name="hcqr_paper", preset="paper")


ABLATIONS = {"q1": "support", "q2": "distinguish", "q3": "key_features", "orig": ORIGINAL_ROLE}

for _label, _role in ABLATIONS.items():

    def _ablation(ctx: BenchContext, _role: str = _role, _label: str = _label) -> BaseRetriever:
        return _hcqr(ctx, tuple(r for r in ALL_ROLES if r != _role), name=f"hcqr_no_{_label}")

    register_retriever(f"hcqr_no_{_label}", f"hcqr ablation: without the {_role} list", group=GROUP)(_ablation)


def _need_llm(ctx: BenchContext, name: str) -> Any:
    if ctx.llm is None:
        raise ValueError(f"{name} needs an LLM (ctx.llm is None); run it through a bench with an LLM.")
    return ctx.llm


@register_retriever("hcqr_llm", "HCQR with the LLM planner (one JSON call per question)", group=GROUP, needs_llm=True)
def build_hcqr_llm(ctx: BenchContext) -> BaseRetriever:
    return _hcqr(ctx, llm=_need_llm(ctx, "hcqr_llm"), name="hcqr_llm")


@register_retriever(
    "hyde",
    "LlamaIndex HyDEQueryTransform over the same dense+BM25 RRF (question plus options)",
    group=GROUP,
    needs_llm=True,
)
def build_hyde(ctx: BenchContext) -> BaseRetriever:
    from llama_index.core.indices.query.query_transform.base import HyDEQueryTransform
    from llama_index.core.retrievers import TransformRetriever

    tr = TransformRetriever(_base(ctx), HyDEQueryTransform(llm=_need_llm(ctx, "hyde"), include_original=True))
    return ExampleRetriever(lambda ex: tr.retrieve(question_with_options(ex)), tr)


@register_retriever(
    "fusion_llm", "LlamaIndex QueryFusionRetriever, 3 generated queries + original, RRF", group=GROUP, needs_llm=True
)
def build_fusion_llm(ctx: BenchContext) -> BaseRetriever:
    from llama_index.core.retrievers import QueryFusionRetriever

    qf = QueryFusionRetriever(
        [_dense(ctx), _sparse(ctx)],
        llm=_need_llm(ctx, "fusion_llm"),
        mode="reciprocal_rerank",
        num_queries=4,
        use_async=False,
        similarity_top_k=ctx.top_k,
    )
    return ExampleRetriever(lambda ex: qf.retrieve(question_with_options(ex)), qf)
