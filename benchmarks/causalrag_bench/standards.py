"""``causalrag-bench`` registrations: ``standards`` (the default preset), the other presets and
the ablation grid, all built through ``StandardsIndex.from_documents(...).as_retriever(...)``.

Grid (the paper's ablations): flat vs structured units; with and without chunking of long
sections; with and without graph expansion (+ hub-penalised re-rank); with and without
embedding smoothing. Names: ``standards_flat`` and
``standards_{chunk|nochunk}_{exp|noexp}_{smooth|nosmooth}``.
"""

from __future__ import annotations

from typing import Any, Dict

from llama_index.core.base.base_retriever import BaseRetriever

from causalrag_bench.budgeted import PerBudget
from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.store_rows import built_and_reopened, check_postgres
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.index import StandardsIndex
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.presets import STANDARDS_PRESETS
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.smoothing import DEFAULT_ALPHA as SMOOTHING_ALPHA  # the paper is silent

GROUP = "standards"


def index_for(ctx: BenchContext, chunk: bool = True) -> StandardsIndex:
    """``StandardsIndex.from_documents(docs)`` (chunked long sections, the default parser)."""

    def make() -> StandardsIndex:
        parser = StructuredDocumentParser(chunk_size=ctx.chunk_size, chunk_long_sections=chunk)
        return StandardsIndex.from_documents(
            ctx.dataset.documents, parser=parser, embed_model=ctx.embed_model, show_progress=ctx.show_progress
        )

    return ctx.memo(f"standards_index_chunk={chunk}_{ctx.chunk_size}", make)


def store_index_for(ctx: BenchContext) -> StandardsIndex:
    """``index_for(ctx)``'s index built into PostgreSQL, reopened with ``from_vector_store``."""
    return built_and_reopened(
        ctx,
        "standards_pg",
        lambda s: StandardsIndex.from_documents(
            ctx.dataset.documents,
            parser=StructuredDocumentParser(chunk_size=ctx.chunk_size, chunk_long_sections=True),
            embed_model=ctx.embed_model,
            show_progress=ctx.show_progress,
            storage_context=s.storage_context(),
            kvstore=s.kvstore,
        ),
        lambda s: StandardsIndex.from_vector_store(
            s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=ctx.embed_model
        ),
    )


def _build(
    ctx: BenchContext, chunk: bool = True, preset: str = "standards", **overrides: Any
) -> StructureAwareRetriever:
    return index_for(ctx, chunk).as_retriever(preset=preset, similarity_top_k=ctx.top_k, **overrides)


@register_retriever(
    "standards", "structure-aware standards retrieval, the default preset (= standards_chunk_exp_nosmooth)", group=GROUP
)
def build_standards(ctx: BenchContext) -> StructureAwareRetriever:
    return _build(ctx)


@register_retriever(
    "standards_pg",
    "standards built into PostgreSQL (PGVectorStore exact search, PostgresDocumentStore, "
    "PostgresKVStore) and reopened with from_vector_store",
    group=GROUP,
    check=check_postgres,
)
def build_standards_pg(ctx: BenchContext) -> StructureAwareRetriever:
    return store_index_for(ctx).as_retriever(preset="standards", similarity_top_k=ctx.top_k)


@register_retriever("standards_paper", "preset 'paper': equal RRF weights, 3 seeds, hub penalty 0.05", group=GROUP)
def build_standards_paper(ctx: BenchContext) -> StructureAwareRetriever:
    return _build(ctx, preset="paper")


@register_retriever(
    "standards_first", "preset 'first': the first tuned settings (no identifier weight, no citation norm)", group=GROUP
)
def build_standards_first(ctx: BenchContext) -> StructureAwareRetriever:
    return _build(ctx, preset="first")


@register_retriever(
    "standards_flat",
    "ablation: flat 256-token chunks, same BM25 prefilter -> dense -> RRF pipeline, no graph",
    group=GROUP,
)
def build_standards_flat(ctx: BenchContext) -> StructureAwareRetriever:
    g = ctx.memo(
        "standards_graph_flat", lambda: StandardsGraph.from_flat_nodes(ctx.flat_nodes()).embed(ctx.embed_model)
    )
    return StructureAwareRetriever(
        g, embed_model=ctx.embed_model, similarity_top_k=ctx.top_k, expand=False, graph_rerank=False
    )


def budgeted_standards(ctx: BenchContext, fit_mode: str) -> PerBudget:
    """``standards`` unbudgeted (R@K, MRR, AP) and, for CR@B and P@B, the retriever's own cut to
    each budget (``budget_tokens=B`` with ``fit_mode``), one retriever per budget."""
    return PerBudget(_build(ctx, fit_mode=fit_mode), lambda b: _build(ctx, fit_mode=fit_mode, budget_tokens=b))


@register_retriever(
    "standards_prefix",
    "standards cut to each budget by the retriever (fit_mode='prefix': the last node's head)",
    group=GROUP,
)
def build_standards_prefix(ctx: BenchContext) -> BaseRetriever:
    return budgeted_standards(ctx, "prefix")


@register_retriever(
    "standards_fit",
    "standards cut to each budget by the retriever, its default fit_mode='sentences': the last "
    "node that does not fit keeps its sentences sharing the most BM25-idf-weighted terms with the query",
    group=GROUP,
)
def build_standards_fit(ctx: BenchContext) -> BaseRetriever:
    return budgeted_standards(ctx, "sentences")


# One change at a time against the default preset.
CHANGES: Dict[str, Dict[str, Any]] = {
    "standards_no_identifier_weight": {"identifier_weight": 1.0},
    "standards_no_citation_norm": {"citation_norm": 0.0},
    "standards_fused_pick": {"neighbour_pick": "fused"},
}


def _register_changes() -> None:
    for name, change in CHANGES.items():

        def build(ctx: BenchContext, _change: Dict[str, Any] = change) -> StructureAwareRetriever:
            return _build(ctx, **_change)

        register_retriever(name, f"ablation: standards with {change}", group=GROUP)(build)


def _register_grid() -> None:
    for chunk in (True, False):
        for expand in (True, False):
            for smooth in (True, False):
                name = "standards_{}_{}_{}".format(
                    "chunk" if chunk else "nochunk", "exp" if expand else "noexp", "smooth" if smooth else "nosmooth"
                )

                def build(
                    ctx: BenchContext, _c: bool = chunk, _e: bool = expand, _s: bool = smooth
                ) -> StructureAwareRetriever:
                    return _build(ctx, _c, expand=_e, graph_rerank=_e, smoothing_alpha=SMOOTHING_ALPHA if _s else None)

                register_retriever(
                    name,
                    f"ablation: structured, chunking={chunk}, expansion={expand}, smoothing={smooth}",
                    group=GROUP,
                )(build)


_register_grid()
_register_changes()
assert set(STANDARDS_PRESETS) == {"standards", "first", "paper"}, "register a bench entry for every preset"
