"""``causalrag-bench`` registrations for CausalRAG2 and its ablations.

The offline index (entity graph, hierarchy, summaries, gates, unit embeddings) is built once per
dataset, persisted under ``ctx.artifact_dir(...)`` and reused by later runs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Optional

from llama_index.core.base.base_retriever import BaseRetriever

from causalrag_bench.budgeted import PerBudget
from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.store_rows import built_and_reopened, check_postgres
from llama_index_ext_causalrag.causal_graph.index import DEFAULT_MODULE_EMBEDDING, CausalGraphIndex

logger = logging.getLogger(__name__)

GROUP = "causalrag2"
ARTIFACT_VERSION = 1


def _load_or_build(ctx: BenchContext, module_embedding: str = DEFAULT_MODULE_EMBEDDING) -> CausalGraphIndex:
    """The bench's CausalGraphIndex, with its unit embeddings, built once per dataset and persisted."""
    suffix = "" if module_embedding == DEFAULT_MODULE_EMBEDDING else f"_{module_embedding}"
    d = ctx.artifact_dir(f"causalrag2_c{ctx.chunk_size}{suffix}")
    stamp = {
        "artifact_version": ARTIFACT_VERSION,
        "chunk_size": ctx.chunk_size,
        "documents": len(ctx.dataset.documents),
        "module_embedding": module_embedding,
    }
    stamp_file = d / "bench_stamp.json"
    index = None
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        try:
            t0 = time.perf_counter()
            index = CausalGraphIndex.from_persist_dir(d / "index", embed_model=ctx.embed_model)
            logger.warning("causalrag2: loaded the index from %s in %.1f s", d, time.perf_counter() - t0)
        except (FileNotFoundError, ValueError, KeyError) as e:
            logger.warning("causalrag2: cannot reuse %s (%s); rebuilding.", d, e)
    if index is None or index._unit_embeddings is None:
        t0 = time.perf_counter()
        if index is None:
            index = CausalGraphIndex.from_documents(
                ctx.dataset.documents,
                embed_model=ctx.embed_model,
                chunk_size=ctx.chunk_size,
                show_progress=ctx.show_progress,
                module_embedding=module_embedding,
            )
            logger.warning("causalrag2: from_documents took %.1f s", time.perf_counter() - t0)
        _ = index.unit_embeddings  # embedded once; persisted with the index
        index.persist(d / "index")
        logger.warning(
            "causalrag2: built the index in %.1f s (%s), persisted to %s",
            time.perf_counter() - t0,
            index.graph.summary_stats(),
            d,
        )
    stamp_file.write_text(json.dumps(stamp))
    return index


def _retriever(
    ctx: BenchContext,
    preset: str = "causalrag2",
    use_filter: Optional[bool] = None,
    module_embedding: str = DEFAULT_MODULE_EMBEDDING,
    **overrides: object,
) -> BaseRetriever:
    """``index.as_retriever(...)`` on the persisted bench index."""
    index = ctx.memo(f"causalrag2_index_{module_embedding}", lambda: _load_or_build(ctx, module_embedding))
    return index.as_retriever(
        similarity_top_k=ctx.top_k, preset=preset, use_filter=use_filter, llm=ctx.llm, **overrides
    )


def store_index_for(ctx: BenchContext, module_embedding: str = DEFAULT_MODULE_EMBEDDING) -> CausalGraphIndex:
    """The index ``_load_or_build`` builds (same documents, embedder and parameters), built into
    PostgreSQL and reopened with ``from_vector_store``; built anew each run (the server is temporary)."""
    return built_and_reopened(
        ctx,
        "causalrag2_pg",
        lambda s: CausalGraphIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            chunk_size=ctx.chunk_size,
            show_progress=ctx.show_progress,
            module_embedding=module_embedding,
            storage_context=s.storage_context(),
            kvstore=s.kvstore,
        ),
        lambda s: CausalGraphIndex.from_vector_store(
            s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=ctx.embed_model
        ),
    )


@register_retriever("causalrag2", "CausalRAG2: hybrid seeding, gated best-first expansion, causal filter", group=GROUP)
def build_causalrag2(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx)


@register_retriever(
    "causalrag2_fit",
    "causalrag2 with fit_mode='sentences': the last node that does not fit a "
    "budget keeps its sentences sharing the most idf-weighted terms with the query",
    group=GROUP,
)
def build_causalrag2_fit(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, fit_mode="sentences")


@register_retriever(
    "causalrag2_budget",
    "causalrag2 as as_retriever(budget_tokens=B) at each budget (the fitting stage after the causal filter)",
    group=GROUP,
)
def build_causalrag2_budget(ctx: BenchContext) -> BaseRetriever:
    return PerBudget(_retriever(ctx), lambda b: _retriever(ctx, budget_tokens=b))


@register_retriever(
    "causalrag2_pg",
    "causalrag2 built into PostgreSQL (PGVectorStore exact search, "
    "PostgresDocumentStore, PostgresKVStore) and reopened with from_vector_store",
    group=GROUP,
    check=check_postgres,
)
def build_causalrag2_pg(ctx: BenchContext) -> BaseRetriever:
    return store_index_for(ctx).as_retriever(
        similarity_top_k=ctx.top_k, preset="causalrag2", use_filter=True, llm=ctx.llm
    )


@register_retriever("causalrag2_nogates", "CausalRAG2 ablation: no causal gate edges (preset 'nogates')", group=GROUP)
def build_causalrag2_nogates(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, preset="nogates")


@register_retriever(
    "causalrag2_flat",
    "CausalRAG2 ablation: flat entity graph, no hierarchy, hence no gates (preset 'flat')",
    group=GROUP,
)
def build_causalrag2_flat(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, preset="flat")


@register_retriever("causalrag2_nofilter", "CausalRAG2 ablation: no causal filter", group=GROUP)
def build_causalrag2_nofilter(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, use_filter=False)


@register_retriever(
    "causalrag2_ppr",
    "CausalRAG2's graph scored by personalized PageRank from the matched "
    "entities and the best text units (preset 'ppr'; no causal filter)",
    group=GROUP,
)
def build_causalrag2_ppr(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, preset="ppr")


@register_retriever(
    "causalrag2_ppr_nogates", "causalrag2_ppr ablation: no causal gate edges (preset 'ppr_nogates')", group=GROUP
)
def build_causalrag2_ppr_nogates(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, preset="ppr_nogates")


@register_retriever(
    "causalrag2_passages",
    "the default preset 'passages': causalrag2_ppr with title nodes (each document title linked "
    "to its units, to the units naming it and to a query naming it) and title bridges",
    group=GROUP,
)
def build_causalrag2_passages(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, preset="passages")


@register_retriever(
    "causalrag2_sumemb",
    "CausalRAG2 with embedded module summaries instead of member means (module_embedding='summary')",
    group=GROUP,
)
def build_causalrag2_sumemb(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, module_embedding="summary")


# ---- issue 19: a strong first stage (UMGP) bridged to other documents through the graph ----------
def _bridge(ctx: BenchContext, preset: str = "causalrag2", **kw: object) -> BaseRetriever:
    """``CausalGraphIndex.as_bridge_retriever`` over the ``umgp`` row's retriever (one shared
    MultiGranularityIndex per run)."""
    from causalrag_bench.umg import index_for

    first = index_for(ctx).as_retriever(similarity_top_k=ctx.top_k)
    index = ctx.memo(f"causalrag2_index_{DEFAULT_MODULE_EMBEDDING}", lambda: _load_or_build(ctx))
    return index.as_bridge_retriever(first, preset=preset, similarity_top_k=ctx.top_k, **kw)


@register_retriever(
    "causalrag2_seeded",
    "UMGP context, 25% of the budget bridged to uncovered documents by "
    "gated expansion seeded from the query and the context's entities",
    group=GROUP,
)
def build_causalrag2_seeded(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx)


@register_retriever(
    "causalrag2_seeded_nogates", "causalrag2_seeded ablation: no gate edges (preset 'nogates')", group=GROUP
)
def build_causalrag2_seeded_nogates(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, preset="nogates")


@register_retriever(
    "causalrag2_seeded_nograph",
    "causalrag2_seeded ablation: the bridge share filled by the best text units of uncovered documents, no graph",
    group=GROUP,
)
def build_causalrag2_seeded_nograph(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, use_graph=False)


@register_retriever("causalrag2_seeded_s15", "causalrag2_seeded with 15% of the budget bridged", group=GROUP)
def build_causalrag2_seeded_s15(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, bridge_share=0.15)


@register_retriever(
    "causalrag2_seeded_rel85",
    "causalrag2_seeded, bridging only units whose text score is at least 85% of the best unit's",
    group=GROUP,
)
def build_causalrag2_seeded_rel85(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, min_relative_score=0.85)


@register_retriever(
    "causalrag2_seeded_tail",
    "causalrag2_seeded, the bridge taking tokens only from the context outside its top document (protect_top_doc)",
    group=GROUP,
)
def build_causalrag2_seeded_tail(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, protect_top_doc=True)


@register_retriever("causalrag2_seeded_tail_nogates", "causalrag2_seeded_tail ablation: no gate edges", group=GROUP)
def build_causalrag2_seeded_tail_nogates(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, preset="nogates", protect_top_doc=True)


@register_retriever(
    "causalrag2_seeded_tail_nograph",
    "causalrag2_seeded_tail ablation: text units of uncovered documents, no graph",
    group=GROUP,
)
def build_causalrag2_seeded_tail_nograph(ctx: BenchContext) -> BaseRetriever:
    return _bridge(ctx, use_graph=False, protect_top_doc=True)
