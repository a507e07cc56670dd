"""``causalrag-bench`` registrations for CausalRAG2 and its ablations.

The offline index (entity graph, hierarchy, summaries, gates) and the unit embeddings are
built once per dataset, persisted under ``ctx.artifact_dir(...)`` and reused by later runs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, List, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever, embed_units
from causalrag_bench.registry import BenchContext, register_retriever

logger = logging.getLogger(__name__)

GROUP = "causalrag2"
ARTIFACT_VERSION = 1
# candidates handed to the causal filter (it keeps ctx.top_k of what survives)
FILTER_CANDIDATE_FACTOR = 2


class FilteredRetriever(BaseRetriever):
    """A retriever followed by node postprocessors and a top-k cut (what RetrieverQueryEngine does)."""

    def __init__(self, retriever: BaseRetriever, postprocessors: Sequence[BaseNodePostprocessor], top_k: int) -> None:
        self._retriever = retriever
        self._post = list(postprocessors)
        self._top_k = top_k
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        nodes = self._retriever.retrieve(query_bundle)
        for p in self._post:
            nodes = p.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes[: self._top_k]


def _load_or_build(ctx: BenchContext) -> Tuple[CausalGraphIndex, np.ndarray]:
    d = ctx.artifact_dir(f"causalrag2_c{ctx.chunk_size}")
    stamp = {"artifact_version": ARTIFACT_VERSION, "chunk_size": ctx.chunk_size,
             "documents": len(ctx.dataset.documents)}
    stamp_file = d / "bench_stamp.json"
    index = None
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
        try:
            t0 = time.perf_counter()
            index = CausalGraphIndex.from_persist_dir(d / "index", embed_model=ctx.embed_model)
            logger.warning("causalrag2: loaded the index from %s in %.1f s", d, time.perf_counter() - t0)
        except (FileNotFoundError, ValueError, KeyError) as e:
            logger.warning("causalrag2: cannot reuse %s (%s); rebuilding.", d, e)
    if index is None:
        t0 = time.perf_counter()
        index = CausalGraphIndex.from_documents(ctx.dataset.documents, embed_model=ctx.embed_model,
                                                chunk_size=ctx.chunk_size, show_progress=ctx.show_progress)
        index.persist(d / "index")
        logger.warning("causalrag2: built the index in %.1f s (%s), persisted to %s",
                       time.perf_counter() - t0, index.graph.summary_stats(), d)
        (d / "unit_embeddings.npy").unlink(missing_ok=True)
    emb_file = d / "unit_embeddings.npy"
    emb = np.load(emb_file, allow_pickle=False) if emb_file.exists() else None
    if emb is None or emb.shape[0] != len(index.units):
        emb = embed_units(index, ctx.embed_model, show_progress=ctx.show_progress)
        np.save(emb_file, emb, allow_pickle=False)
    stamp_file.write_text(json.dumps(stamp))
    return index, emb


def _retriever(ctx: BenchContext, use_filter: bool = True, **kwargs: Any) -> BaseRetriever:
    index, emb = ctx.memo("causalrag2_index", lambda: _load_or_build(ctx))
    k = ctx.top_k * FILTER_CANDIDATE_FACTOR if use_filter else ctx.top_k
    retriever = GatedExpansionRetriever(index, similarity_top_k=k, embed_model=ctx.embed_model,
                                        unit_embeddings=emb, **kwargs)
    if not use_filter:
        return retriever
    return FilteredRetriever(retriever, [CausalFilterPostprocessor(llm=ctx.llm)], ctx.top_k)


@register_retriever("causalrag2", "CausalRAG2: hybrid seeding, gated best-first expansion, causal filter",
                    group=GROUP)
def build_causalrag2(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx)


@register_retriever("causalrag2_nogates", "CausalRAG2 ablation: no causal gate edges", group=GROUP)
def build_causalrag2_nogates(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, use_gates=False)


@register_retriever("causalrag2_flat", "CausalRAG2 ablation: flat entity graph (no hierarchy, hence no gates)",
                    group=GROUP)
def build_causalrag2_flat(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, use_hierarchy=False)


@register_retriever("causalrag2_nofilter", "CausalRAG2 ablation: no causal filter", group=GROUP)
def build_causalrag2_nofilter(ctx: BenchContext) -> BaseRetriever:
    return _retriever(ctx, use_filter=False)
