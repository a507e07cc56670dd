"""LlamaIndex's own retrievers, registered as bench baselines (same embedder for all)."""

from __future__ import annotations

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import HierarchicalNodeParser, SentenceWindowNodeParser, get_leaf_nodes
from llama_index.core.postprocessor import MetadataReplacementPostProcessor
from llama_index.core.retrievers import AutoMergingRetriever, QueryFusionRetriever

from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.umg import OneRanking
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever


def _vector_retriever(ctx: BenchContext) -> BaseRetriever:
    def make() -> BaseRetriever:
        index = VectorStoreIndex(ctx.flat_nodes(), embed_model=ctx.embed_model, show_progress=ctx.show_progress)
        return index.as_retriever(similarity_top_k=ctx.top_k)

    return ctx.memo("li_dense", make)


def _bm25_retriever(ctx: BenchContext) -> BaseRetriever:
    from llama_index.retrievers.bm25 import BM25Retriever

    return ctx.memo("li_bm25", lambda: BM25Retriever.from_defaults(nodes=ctx.flat_nodes(), similarity_top_k=ctx.top_k))


@register_retriever("dense", "LlamaIndex VectorStoreIndex over 256-token SentenceSplitter chunks")
def build_dense(ctx: BenchContext) -> BaseRetriever:
    return _vector_retriever(ctx)


@register_retriever("bm25", "LlamaIndex BM25Retriever over the same chunks")
def build_bm25(ctx: BenchContext) -> BaseRetriever:
    return _bm25_retriever(ctx)


@register_retriever(
    "rrf", "LlamaIndex QueryFusionRetriever: reciprocal rank fusion of dense and bm25, no query generation"
)
def build_rrf(ctx: BenchContext) -> BaseRetriever:
    # num_queries=1 generates nothing; MockLLM keeps QueryFusionRetriever from resolving OpenAI.
    return QueryFusionRetriever(
        [_vector_retriever(ctx), _bm25_retriever(ctx)],
        llm=MockLLM(),
        mode="reciprocal_rerank",
        num_queries=1,
        use_async=False,
        similarity_top_k=ctx.top_k,
    )


@register_retriever("automerging", "LlamaIndex HierarchicalNodeParser (2048/512/128) + AutoMergingRetriever")
def build_automerging(ctx: BenchContext) -> BaseRetriever:
    nodes = HierarchicalNodeParser.from_defaults(chunk_sizes=[2048, 512, 128]).get_nodes_from_documents(
        ctx.dataset.documents
    )
    storage = StorageContext.from_defaults()
    storage.docstore.add_documents(nodes)
    leaves = get_leaf_nodes(nodes)
    index = VectorStoreIndex(
        leaves, storage_context=storage, embed_model=ctx.embed_model, show_progress=ctx.show_progress
    )
    return AutoMergingRetriever(index.as_retriever(similarity_top_k=ctx.top_k), storage)


@register_retriever(
    "sentence_window", "LlamaIndex SentenceWindowNodeParser (window 3) + MetadataReplacementPostProcessor"
)
def build_sentence_window(ctx: BenchContext) -> BaseRetriever:
    nodes = SentenceWindowNodeParser.from_defaults(window_size=3).get_nodes_from_documents(ctx.dataset.documents)
    index = VectorStoreIndex(nodes, embed_model=ctx.embed_model, show_progress=ctx.show_progress)
    # OneRanking: scored like every baseline, one ranking cut by the bench (no budget refit)
    return OneRanking(
        PostprocessedRetriever(
            index.as_retriever(similarity_top_k=ctx.top_k),
            [MetadataReplacementPostProcessor(target_metadata_key="window")],
        )
    )


@register_retriever(
    "dense_expert", "our DenseExpert over the same chunks (same ranking as dense, NumPy top-k)", group="foundation"
)
def build_dense_expert(ctx: BenchContext) -> BaseRetriever:
    return DenseExpert(ctx.flat_nodes(), embed_model=ctx.embed_model, similarity_top_k=ctx.top_k)


@register_retriever(
    "sparse_expert", "our SparseExpert (bm25s, English stemmer and stopwords) over the same chunks", group="foundation"
)
def build_sparse_expert(ctx: BenchContext) -> BaseRetriever:
    return SparseExpert(ctx.flat_nodes(), similarity_top_k=ctx.top_k)


# ---- LlamaIndex's own rows on PostgreSQL (the server of the store-backed rows) -----------------------
def _pg_chunks_index(ctx: BenchContext, hybrid: bool) -> VectorStoreIndex:
    """The same 256-token chunks in a ``PGVectorStore`` (exact search; ``hybrid``: its
    ``hybrid_search=True`` table, a generated ``tsvector`` with a GIN index, ``english``), built,
    then opened with ``VectorStoreIndex.from_vector_store`` on new store objects."""
    from causalrag_bench.store_rows import built_and_reopened

    return built_and_reopened(
        ctx,
        "li_pg_hybrid" if hybrid else "li_pg_dense",
        lambda s: VectorStoreIndex(
            ctx.flat_nodes(),
            storage_context=s.storage_context(),
            embed_model=ctx.embed_model,
            show_progress=ctx.show_progress,
        ),
        lambda s: VectorStoreIndex.from_vector_store(s.vector_store, embed_model=ctx.embed_model),
        hybrid_search=hybrid,
    )


def _check_pg() -> None:
    from causalrag_bench.store_rows import check_postgres

    check_postgres()


@register_retriever(
    "pg_dense",
    "LlamaIndex PGVectorStore (exact search) over the same 256-token chunks, "
    "reopened with VectorStoreIndex.from_vector_store",
    check=_check_pg,
)
def build_pg_dense(ctx: BenchContext) -> BaseRetriever:
    return _pg_chunks_index(ctx, hybrid=False).as_retriever(similarity_top_k=ctx.top_k)


@register_retriever(
    "pg_hybrid",
    "LlamaIndex PGVectorStore(hybrid_search=True, 'english'): top-k dense + top-k ts_rank "
    "text hits, as PGVectorStore returns them (vector_store_query_mode='hybrid')",
    check=_check_pg,
)
def build_pg_hybrid(ctx: BenchContext) -> BaseRetriever:
    return _pg_chunks_index(ctx, hybrid=True).as_retriever(
        vector_store_query_mode="hybrid", similarity_top_k=ctx.top_k, sparse_top_k=ctx.top_k
    )


@register_retriever(
    "pg_fusion",
    "LlamaIndex QueryFusionRetriever (reciprocal rank fusion, no query generation) over "
    "PGVectorStore(hybrid_search=True)'s dense and text-search retrievers",
    check=_check_pg,
)
def build_pg_fusion(ctx: BenchContext) -> BaseRetriever:
    index = _pg_chunks_index(ctx, hybrid=True)
    return QueryFusionRetriever(
        [
            index.as_retriever(similarity_top_k=ctx.top_k),
            index.as_retriever(vector_store_query_mode="sparse", sparse_top_k=ctx.top_k, similarity_top_k=ctx.top_k),
        ],
        llm=MockLLM(),
        mode="reciprocal_rerank",
        num_queries=1,
        use_async=False,
        similarity_top_k=ctx.top_k,
    )
