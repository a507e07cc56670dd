"""``causalrag-bench`` registrations for UMG-RAG / UMGP-RAG and their ablations.

Every entry is built through the public facade: ``MultiGranularityIndex.from_documents`` with a
preset, then ``index.as_retriever(...)``, so a row of the results table is a call a user makes.
"""

from __future__ import annotations

from typing import Any, List

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.store_rows import built_and_reopened, check_milvus, check_postgres
from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex
from llama_index_ext_causalrag.multigranularity.presets import UMG_PRESETS

GROUP = "umg"
SUBSET_GRANULARITIES = (2, 4, 8)
PASSAGE_TOKENS = 256  # umgp_passages: documents up to this many tokens stay whole (chosen on the multi-hop dev sets)


class OneRanking(BaseRetriever):
    """Hides ``retrieve_for_budget``: the bench scores one ranking, truncated at each budget."""

    def __init__(self, retriever: BaseRetriever) -> None:
        self._retriever = retriever
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._retriever.retrieve(query_bundle)


def index_for(
    ctx: BenchContext, preset: str = "umgp", embedding_mode: str = "sentences", **build: Any
) -> MultiGranularityIndex:
    """The index a user gets from ``from_documents(docs, preset=preset, ...)``, built once per run."""
    key = f"umg_index_{preset}_{embedding_mode}_{sorted(build.items())}"
    return ctx.memo(
        key,
        lambda: MultiGranularityIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            embedding_mode=embedding_mode,
            preset=preset,
            show_progress=ctx.show_progress,
            **build,
        ),
    )


def store_index_for(
    ctx: BenchContext, lexical: str = "bm25", ann: Any = None, milvus: bool = False
) -> MultiGranularityIndex:
    """``index_for(ctx)``'s index built into PostgreSQL, reopened with ``from_vector_store``;
    ``lexical="store"``: a ``hybrid_search=True`` table whose full-text search serves the sparse lists;
    ``ann``: HNSW indexes on the per-granularity tables; ``milvus``: every list served by Milvus."""
    fts = lexical == "store"
    return built_and_reopened(
        ctx,
        "umgp_milvus" if milvus else "umgp_pg_fts" if fts else "umgp_pg_hnsw" if ann is not None else "umgp_pg",
        lambda s: MultiGranularityIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            embedding_mode="sentences",
            preset="umgp",
            show_progress=ctx.show_progress,
            storage_context=s.storage_context(),
            kvstore=s.kvstore,
            lexical=lexical,
            ann=ann,
        ),
        lambda s: MultiGranularityIndex.from_vector_store(
            s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=ctx.embed_model
        ),
        hybrid_search=fts,
        milvus=milvus,
    )


def _umgp(
    ctx: BenchContext, preset: str = "umgp", embedding_mode: str = "sentences", build: Any = None, **overrides: Any
) -> BaseRetriever:
    index = index_for(ctx, preset, embedding_mode, **(build or {}))
    return index.as_retriever(similarity_top_k=ctx.top_k, **overrides)


@register_retriever(
    "umgp", "UMGP-RAG, the default preset: fusion + budget-aware promotion to the coarsest windows", group=GROUP
)
def build_umgp(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx)


@register_retriever(
    "umgp_passages",
    "umgp with short documents kept whole: a document of at most 256 tokens is one "
    "unit at every granularity, embedded whole (MultiGranularityNodeParser(whole_document_tokens=256))",
    group=GROUP,
)
def build_umgp_passages(ctx: BenchContext) -> BaseRetriever:
    from llama_index_ext_causalrag.multigranularity.windows import DEFAULT_GRANULARITIES, MultiGranularityNodeParser

    parser = MultiGranularityNodeParser(
        granularities=DEFAULT_GRANULARITIES,
        parent_granularity=max(DEFAULT_GRANULARITIES),
        whole_document_tokens=PASSAGE_TOKENS,
    )
    index = ctx.memo(
        "umg_index_passages",
        lambda: MultiGranularityIndex.from_documents(
            ctx.dataset.documents,
            embed_model=ctx.embed_model,
            embedding_mode="sentences",
            parser=parser,
            show_progress=ctx.show_progress,
        ),
    )
    return index.as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "umgp_doclists",
    "umgp with parent_evidence='lists': a whole-document parent ranked by each list's best unit of "
    "the document, weighted and summed over the lists (one vote per list, not one per window)",
    group=GROUP,
)
def build_umgp_doclists(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, parent_evidence="lists")


@register_retriever(
    "umgp_documents",
    "the opt-in preset 'documents': umgp with each document of at most 256 tokens given its own vector on "
    "its whole-document unit and whole-document parents ranked by one vote per list (parent_evidence='lists')",
    group=GROUP,
)
def build_umgp_documents(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, preset="documents")


@register_retriever(
    "umgp_pg",
    "umgp built into PostgreSQL (PGVectorStore exact search, PostgresDocumentStore, "
    "PostgresKVStore) and reopened with from_vector_store",
    group=GROUP,
    check=check_postgres,
)
def build_umgp_pg(ctx: BenchContext) -> BaseRetriever:
    return store_index_for(ctx).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "umgp_pg_hnsw",
    "umgp_pg with approximate search: an HNSW index on each per-granularity "
    "table (HNSW() defaults: m 16, ef_construction 64, ef_search 400)",
    group=GROUP,
    check=check_postgres,
)
def build_umgp_pg_hnsw(ctx: BenchContext) -> BaseRetriever:
    from llama_index_ext_causalrag.multigranularity import HNSW

    return store_index_for(ctx, ann=HNSW()).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "umgp_milvus",
    "umgp served by Milvus (a milvus-lite gRPC server: every dense and BM25 list a "
    "collection per granularity, exact search), nodes and state in PostgreSQL, reopened with "
    "from_vector_store",
    group=GROUP,
    check=check_milvus,
)
def build_umgp_milvus(ctx: BenchContext) -> BaseRetriever:
    return store_index_for(ctx, milvus=True).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "umgp_pg_fts",
    "umgp_pg with lexical='store': the sparse lists from PostgreSQL full text "
    "(PGVectorStore hybrid_search=True, 'english', ts_rank) instead of bm25s",
    group=GROUP,
    check=check_postgres,
)
def build_umgp_pg_fts(ctx: BenchContext) -> BaseRetriever:
    return store_index_for(ctx, lexical="store").as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "umg", "UMG-RAG: entropy fusion of dense+BM25 over 2/4/8/16/32-sentence windows (preset 'umg')", group=GROUP
)
def build_umg(ctx: BenchContext) -> BaseRetriever:
    # the same index as umgp (promotion needs no other build); fusion only
    return index_for(ctx).as_retriever(similarity_top_k=ctx.top_k, preset="umg")


@register_retriever(
    "umgp_paper", "UMGP-RAG as published (preset 'paper'): 8-sentence parents, no budget fitting", group=GROUP
)
def build_umgp_paper(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, preset="paper")


@register_retriever(
    "umgp_nobudget", "UMGP ablation: one ranking for every budget (the bench truncates it)", group=GROUP
)
def build_umgp_nobudget(ctx: BenchContext) -> BaseRetriever:
    return OneRanking(_umgp(ctx))


@register_retriever(
    "umgp_longpromote",
    "UMGP ablation: also promote hits inside documents longer than the parent window (what umgp did before)",
    group=GROUP,
)
def build_umgp_longpromote(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, promote_within_long_documents=True)


@register_retriever("umgp_window", "UMGP ablation: fit to the budget with one contiguous window", group=GROUP)
def build_umgp_window(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, fit_mode="window")


@register_retriever(
    "umgp_queryfit",
    "UMGP ablation: evidence-aware fitting (fit_evidence='query'): a fitted parent's "
    "sentences scored by the window prior re-weighted by their BM25 match with the query",
    group=GROUP,
)
def build_umgp_queryfit(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, fit_evidence="query")


@register_retriever(
    "umgp_queryfit_dense",
    "umgp_queryfit with the dense sentence match too (fit_weights=(1, 1): "
    "the cosine of the query with the 2-sentence windows holding each sentence)",
    group=GROUP,
)
def build_umgp_queryfit_dense(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, fit_evidence="query", fit_weights=(1.0, 1.0))


@register_retriever(
    "umgp_dprf",
    "UMGP ablation: dense pseudo-relevance feedback (dense_feedback=0.2, feedback_depth=3: "
    "each dense list searched again with q + 0.2 * the mean of its top 3 units' vectors)",
    group=GROUP,
)
def build_umgp_dprf(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, dense_feedback=0.2, feedback_depth=3)


@register_retriever(
    "umgp_lprf",
    "UMGP ablation: lexical pseudo-relevance feedback (lexical_feedback=5, "
    "lexical_feedback_weight=0.2: the 5 best RM3 terms of each BM25 list's top 10 units at 0.2 of the "
    "query's weight, the list scored again)",
    group=GROUP,
)
def build_umgp_lprf(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, lexical_feedback=5, lexical_feedback_weight=0.2)


@register_retriever(
    "umgp_docpool",
    "UMGP ablation: document evidence pooling (parent_evidence='document': a whole-"
    "document parent ranked by the pooled P of all its units in every list)",
    group=GROUP,
)
def build_umgp_docpool(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, parent_evidence="document")


@register_retriever("umgp_deep200", "UMGP ablation: deeper lists (candidates_per_list=200)", group=GROUP)
def build_umgp_deep200(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, candidates_per_list=200)


@register_retriever("umgp_deep300", "UMGP ablation: deeper lists (candidates_per_list=300)", group=GROUP)
def build_umgp_deep300(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, candidates_per_list=300)


@register_retriever("umgp_cand100", "UMGP ablation: 100 fused units handed to promotion (candidates=100)", group=GROUP)
def build_umgp_cand100(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, candidates=100)


@register_retriever(
    "umgp_alloc",
    "UMGP ablation: evidence-aware budget allocation (allocation='evidence': per "
    "query, the k whole documents whose equal shares of the budget cover the most fused evidence)",
    group=GROUP,
)
def build_umgp_alloc(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, allocation="evidence")


@register_retriever(
    "umgp_alloc_queryfit",
    "umgp_alloc with evidence-aware fitting (allocation='evidence', "
    "fit_evidence='query': the plans and the fits read the query's BM25 match of each sentence)",
    group=GROUP,
)
def build_umgp_alloc_queryfit(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, allocation="evidence", fit_evidence="query")


@register_retriever("umgp_pg8", "UMGP ablation: the paper's 8-sentence parents (budget-aware)", group=GROUP)
def build_umgp_pg8(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, build={"parent_granularity": 8}, parent_granularity=8)


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


@register_retriever(
    "umgp_full", "UMGP with every unit embedded (embedding_mode='full', build-cost reference)", group=GROUP
)
def build_umgp_full(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, embedding_mode="full")


@register_retriever(
    "umgp_pooled",
    "UMGP with the 2-sentence windows embedded and pooled into coarser units (embedding_mode='pooled')",
    group=GROUP,
)
def build_umgp_pooled(ctx: BenchContext) -> BaseRetriever:
    return _umgp(ctx, embedding_mode="pooled")


assert set(UMG_PRESETS) == {"umgp", "paper", "umg", "documents"}, "register a bench entry for every preset"
