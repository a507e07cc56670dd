"""``causalrag-bench`` registrations: ``standards`` (best configuration) and the ablation grid.

Grid (METHODS.md section 2, the paper's ablations): flat vs structured units; with and
without chunking of long sections; with and without graph expansion (+ hub-penalised
re-rank); with and without embedding smoothing. Names:
``standards_flat`` and ``standards_{chunk|nochunk}_{exp|noexp}_{smooth|nosmooth}``.
"""

from __future__ import annotations

from typing import Any, Dict

from causalrag_bench.registry import BenchContext, register_retriever
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever

SMOOTHING_ALPHA = 0.8  # METHODS.md: our choice, the paper is silent

# The configuration registered as ``standards`` (chosen on qa_dev.jsonl, see the README section on standards).
BEST: Dict[str, Any] = {"chunk": True, "expand": True, "smooth": False}
# Retriever settings shared by every configuration of the grid, tuned on qa_dev.jsonl (80 questions):
# BM25 weighs 4x dense in RRF (MiniLM alone is weak on RFC jargon), one seed, query cosine
# weight 1, hub penalty beta = 0 (0.02-0.1 lowered R@5 on the dev set). Two structural changes
# (second session, structural rather than tuned): query identifiers (INVALID_TOKEN,
# stateless_reset_token) weigh 2 ordinary BM25 terms (3 scored the same), and a seed shares its
# citation weight among the sections it cites (citation_norm 1, the random-walk normalisation;
# 0.5 scored one gold span higher, not taken). neighbour_pick="fused" made no difference on top
# of these two and stays at its default (cosine); see the ablations below.
TUNED: Dict[str, Any] = {
    "rrf_weights": (1.0, 0.25), "num_seeds": 1, "query_weight": 1.0, "beta": 0.0,
    "identifier_weight": 2.0, "citation_norm": 1.0,
}


def _graph(ctx: BenchContext, chunk: bool) -> StandardsGraph:
    def make() -> StandardsGraph:
        parser = StructuredDocumentParser(chunk_size=ctx.chunk_size, chunk_long_sections=chunk)
        g = StandardsGraph.from_documents(ctx.dataset.documents, parser=parser)
        return g.embed(ctx.embed_model, show_progress=ctx.show_progress)

    return ctx.memo(f"standards_graph_chunk={chunk}_{ctx.chunk_size}", make)


def _build(ctx: BenchContext, chunk: bool, expand: bool, smooth: bool) -> StructureAwareRetriever:
    return StructureAwareRetriever(
        _graph(ctx, chunk),
        embed_model=ctx.embed_model,
        similarity_top_k=ctx.top_k,
        expand=expand,
        graph_rerank=expand,
        smoothing_alpha=SMOOTHING_ALPHA if smooth else None,
        **TUNED,
    )


@register_retriever(
    "standards",
    "structure-aware standards retrieval, best configuration (= standards_chunk_exp_nosmooth)",
    group="standards",
)
def build_standards(ctx: BenchContext) -> StructureAwareRetriever:
    return _build(ctx, **BEST)


@register_retriever(
    "standards_flat",
    "ablation: flat 256-token chunks, same BM25 prefilter -> dense -> RRF pipeline, no graph",
    group="standards",
)
def build_standards_flat(ctx: BenchContext) -> StructureAwareRetriever:
    g = ctx.memo("standards_graph_flat", lambda: StandardsGraph.from_flat_nodes(ctx.flat_nodes()).embed(ctx.embed_model))
    return StructureAwareRetriever(
        g, embed_model=ctx.embed_model, similarity_top_k=ctx.top_k, expand=False, graph_rerank=False, **TUNED
    )


# Ablations of the second-session changes, one at a time and both undone (``standards_session1``,
# the first-session configuration), plus the unused fused neighbour pick; otherwise = ``standards``.
CHANGES: Dict[str, Dict[str, Any]] = {
    "standards_no_identifier_weight": {"identifier_weight": 1.0},
    "standards_no_citation_norm": {"citation_norm": 0.0},
    "standards_fused_pick": {"neighbour_pick": "fused"},
    "standards_session1": {"identifier_weight": 1.0, "citation_norm": 0.0},
}


def _register_changes() -> None:
    for name, change in CHANGES.items():

        def build(ctx: BenchContext, _change: Dict[str, Any] = change) -> StructureAwareRetriever:
            return StructureAwareRetriever(
                _graph(ctx, True), embed_model=ctx.embed_model, similarity_top_k=ctx.top_k, **{**TUNED, **_change}
            )

        register_retriever(name, f"ablation: standards with {change}", group="standards")(build)


def _register_grid() -> None:
    for chunk in (True, False):
        for expand in (True, False):
            for smooth in (True, False):
                name = "standards_{}_{}_{}".format(
                    "chunk" if chunk else "nochunk", "exp" if expand else "noexp", "smooth" if smooth else "nosmooth"
                )

                def build(ctx: BenchContext, _c: bool = chunk, _e: bool = expand, _s: bool = smooth) -> StructureAwareRetriever:
                    return _build(ctx, _c, _e, _s)

                register_retriever(
                    name,
                    f"ablation: structured, chunking={chunk}, expansion={expand}, smoothing={smooth}",
                    group="standards",
                )(build)


_register_grid()
_register_changes()
