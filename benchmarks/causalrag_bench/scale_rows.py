"""LlamaIndex's own PostgreSQL rows and quality for the served scale bench
(``benchmarks/scripts/bench_served_scale_textsearch.py``): the same corpus as 256-token ``SentenceSplitter``
chunks in a ``PGVectorStore`` (exact search) and in a ``PGVectorStore(hybrid_search=True)``
(``english``, ``ts_rank``), copied with the units (same texts, embedding plus noise, documents
renamed ``#r{k}``), queried by fresh processes as ``pg_dense``, ``pg_hybrid`` (top 10 dense +
top 10 text, as PGVectorStore returns them) and ``pg_fusion`` (``QueryFusionRetriever``,
reciprocal rank fusion of the two, no generated query), and CR@B of every row at every size.

A copy's text is its original's, so CR counts a copy of a gold passage as gold (its document id
is read without the ``#r{k}`` suffix): every row then spends budget on duplicates alike.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

LI_TABLES = {"dense": "li_scale", "hybrid": "li_scale_h"}
LI_ROWS = ("pg_dense", "pg_hybrid", "pg_fusion")


def li_store(url: str, hybrid: bool, dim: int = 384) -> Any:
    from causalrag_bench import pgserver

    return pgserver.pg_stores(url, LI_TABLES["hybrid" if hybrid else "dense"], dim, hybrid_search=hybrid).vector_store


def li_chunks(docs: Sequence[Any], model: Any) -> Tuple[List[Any], np.ndarray]:
    """The 256-token chunks of ``docs`` and their embeddings (the bench's cache)."""
    from llama_index.core.node_parser import SentenceSplitter

    chunks = SentenceSplitter(chunk_size=256, chunk_overlap=0).get_nodes_from_documents(docs)
    emb = np.asarray(
        model.get_text_embedding_batch([c.get_content(metadata_mode="embed") for c in chunks]), dtype=np.float32
    )
    return chunks, emb


def li_write(url: str, chunks: Sequence[Any], emb: np.ndarray) -> float:
    """Rows of ``chunks`` into both tables (``PGVectorStore.add``); seconds taken."""
    t = time.perf_counter()
    for hybrid in (False, True):
        store = li_store(url, hybrid, emb.shape[1])
        nodes = [c.model_copy(update={"embedding": v.tolist()}) for c, v in zip(chunks, emb)]
        for i in range(0, len(nodes), 2000):
            store.add(nodes[i : i + 2000])
    return time.perf_counter() - t


def li_copies(chunks: Sequence[Any], emb: np.ndarray, k: int, seed: int) -> Tuple[List[Any], np.ndarray]:
    """Copy ``k`` of every chunk: id and source document renamed ``#r{k}``, embedding + seeded noise."""
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

    rng = np.random.default_rng(seed + 1000 + k)
    vecs = emb + rng.standard_normal(emb.shape).astype(np.float32) * (0.3 / np.sqrt(emb.shape[1]))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out = []
    for c in chunks:
        src = c.relationships.get(NodeRelationship.SOURCE)
        rels = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"{src.node_id}#r{k}")} if src is not None else {}
        out.append(c.model_copy(update={"id_": f"{c.node_id}#r{k}", "relationships": rels}))
    return out, vecs


def li_retriever(url: str, row: str, model: Any) -> Any:
    """Row ``row`` of :data:`LI_ROWS`, opened with ``VectorStoreIndex.from_vector_store``."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever

    if row == "pg_dense":
        return VectorStoreIndex.from_vector_store(li_store(url, False), embed_model=model).as_retriever(
            similarity_top_k=10
        )
    index = VectorStoreIndex.from_vector_store(li_store(url, True), embed_model=model)
    if row == "pg_hybrid":
        return index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=10, sparse_top_k=10)
    return QueryFusionRetriever(
        [
            index.as_retriever(similarity_top_k=10),
            index.as_retriever(vector_store_query_mode="sparse", sparse_top_k=10, similarity_top_k=10),
        ],
        llm=MockLLM(),
        mode="reciprocal_rerank",
        num_queries=1,
        use_async=False,
        similarity_top_k=10,
    )


def _as_original(nodes: Sequence[Any]) -> List[Any]:
    """``nodes`` with a copy's source document read as its original's."""
    from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo

    out = []
    for n in nodes:
        src = n.node.relationships.get(NodeRelationship.SOURCE)
        if src is not None and "#r" in src.node_id:
            rels = {
                **n.node.relationships,
                NodeRelationship.SOURCE: RelatedNodeInfo(node_id=src.node_id.split("#r")[0]),
            }
            n = NodeWithScore(node=n.node.model_copy(update={"relationships": rels}), score=n.score)
        out.append(n)
    return out


def domain_prefix(domain: str, domains: Sequence[str]) -> str:
    """The id prefix of HolisQA ``domain`` in a corpus of ``domains``: none for one domain (the
    ids of a one-domain run stay as they were), ``"{domain}/"`` for several (their ids collide)."""
    return f"{domain}/" if len(domains) > 1 else ""


def load_domains(holisqa: Path, domains: str) -> Any:
    """The HolisQA ``domains`` (comma-separated) as one dataset (ids prefixed ``{domain}/`` when
    there are several: :func:`domain_prefix`)."""
    from causalrag_bench.loaders import load_holisqa
    from causalrag_bench.types import EvalDataset

    names = domains.split(",")
    parts = [load_holisqa(holisqa / d, domain_prefix(d, names)) for d in names]
    return EvalDataset(
        "holisqa",
        str(holisqa),
        [d for p in parts for d in p.documents],
        [e for p in parts for e in p.examples],
        dict(parts[0].metadata),
    )


def quality(
    retriever: Any, questions: Sequence[Dict[str, Any]], dataset: Any, budgets: Sequence[int]
) -> Dict[str, float]:
    """Mean CR@B over ``questions`` (each once): a budget-aware retriever refitted to each budget,
    others cut by the bench, as ``causalrag-bench`` scores them."""
    from llama_index.core.schema import QueryBundle

    from causalrag_bench.runner import score_question

    by_qid = {e.qid: e for e in dataset.examples}
    by_budget = getattr(retriever, "retrieve_for_budget", None)
    sums: Dict[str, float] = {f"CR@{b}": 0.0 for b in budgets}
    for q in questions:
        bundle = QueryBundle(q["text"], embedding=q["embedding"])
        nodes = _as_original(retriever.retrieve(bundle))
        budgeted = {b: _as_original(by_budget(q["text"], b)) for b in budgets} if by_budget is not None else None
        metrics = score_question(nodes, by_qid[q["qid"]], dataset, budgets, budgeted)
        for b in budgets:
            sums[f"CR@{b}"] += metrics[f"CR@{b}"]
    return {k: v / len(questions) for k, v in sums.items()}


__all__ = ["LI_ROWS", "li_chunks", "li_copies", "li_retriever", "li_write", "load_domains", "quality"]
