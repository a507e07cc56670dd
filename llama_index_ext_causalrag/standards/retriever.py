"""StructureAwareRetriever: BM25 prefilter -> dense re-rank -> RRF -> seeds -> graph expansion -> re-rank."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import Document, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K, min_max_normalize, reciprocal_rank_fusion, top_k_indices
from llama_index_ext_causalrag.persistence import check_embedder, open_persisted, persist_to
from llama_index_ext_causalrag.provenance import annotate
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.identifiers import query_identifiers
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.smoothing import smooth_embeddings
from llama_index_ext_causalrag.validation import check_finite, check_in_range, check_query, check_top_k

logger = logging.getLogger(__name__)

DEFAULT_EDGE_WEIGHTS: Dict[str, float] = {
    "cites": 1.0,
    "cited_by": 0.6,
    "parent": 0.5,
    "child": 0.5,
    "same_section": 0.7,
    "sibling": 0.0,
}
SMOOTHING_RELATIONS = ("parent", "child", "sibling", "same_section", "cites", "cited_by")
NEIGHBOUR_PICKS = ("cosine", "fused")


_FINITE_ARGS = ("beta", "query_weight", "rrf_k", "smoothing_alpha", "citation_norm", "identifier_weight")


def _check_arguments(args: Dict[str, Any]) -> None:
    """Types and finiteness of the constructor's numbers (ranges are checked where they are set)."""
    check_top_k(args["similarity_top_k"])
    check_top_k(args["num_seeds"], "num_seeds")
    if args["prefilter_k"] is not None:
        check_top_k(args["prefilter_k"], "prefilter_k")
    for name in _FINITE_ARGS:
        if args[name] is not None:
            check_finite(args[name], name, "pass a finite number or leave the default")
    check_in_range(args["bm25_k1"], "bm25_k1", 0.0, None, "BM25 uses k1 >= 0, typically 1.2 to 2.0 (1.5 by default)")
    check_in_range(args["bm25_b"], "bm25_b", 0.0, 1.0, "BM25 length normalisation b is in [0, 1] (0.75 by default)")
    for k, v in (args["edge_weights"] or {}).items():
        check_finite(v, f"edge_weights[{k!r}]", "use 0 to switch a relation off")
    if isinstance(args["rrf_weights"], (tuple, list)):
        for i, v in enumerate(args["rrf_weights"]):
            check_finite(v, f"rrf_weights[{i}]", "use 0 to switch a ranking off")


class StructureAwareRetriever(BaseRetriever):
    """Structure-aware retrieval over a :class:`StandardsGraph` (normative RAG, arXiv 2604.09868).

    1. BM25 over the units, top ``prefilter_k`` candidates (``use_bm25``); code identifiers
       of the query (``INVALID_TOKEN``, ``kInitialRtt``) weigh ``identifier_weight`` times an
       ordinary term;
    2. dense cosine re-rank of those candidates (``use_dense``);
    3. RRF of the two rankings, keyed by node id; the top ``num_seeds`` are seeds;
    4. ``expand``: neighbours of the seeds through parthood and citation edges, each scored
       ``strength(seed) * edge_weights[relation]``; a chunked target contributes one chunk:
       the one closest to the query (``neighbour_pick="cosine"``) or the one ranked highest
       by the fusion of step 3 (``"fused"``, cosine for chunks outside the fused list); a
       seed citing ``n`` sections passes each ``cites`` edge ``1 / n ** citation_norm`` of the
       weight (``citation_norm=1``: the seed's strength is shared among its citations, as in a
       random walk; 0: every citation gets the full weight);
    5. ``graph_rerank``: score = connection strength + ``query_weight`` * cosine(query, node)
       - ``beta * log(1 + degree)`` (hub penalty) over seeds, expanded nodes and the RRF pool.

    ``smoothing_alpha`` (None = off) smooths unit embeddings over the graph before step 2.
    Every returned node carries provenance: stage, stage scores and the edge path.
    """

    def __init__(
        self,
        graph: StandardsGraph,
        embed_model: Optional[BaseEmbedding] = None,
        similarity_top_k: int = 10,
        prefilter_k: Optional[int] = 100,
        num_seeds: int = 3,
        pool_k: int = 20,
        use_bm25: bool = True,
        use_dense: bool = True,
        expand: bool = True,
        graph_rerank: bool = True,
        smoothing_alpha: Optional[float] = None,
        beta: float = 0.05,
        query_weight: float = 1.0,
        edge_weights: Optional[Dict[str, float]] = None,
        rrf_k: float = DEFAULT_RRF_K,
        rrf_weights: Tuple[float, float] = (1.0, 1.0),
        max_per_section: Optional[int] = None,
        bm25_k1: float = 1.5,
        bm25_b: float = 0.75,
        identifier_weight: float = 1.0,
        neighbour_pick: str = "cosine",
        citation_norm: float = 0.0,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        _check_arguments(locals())
        if similarity_top_k <= 0:
            raise ValueError(f"similarity_top_k must be >= 1, got {similarity_top_k!r}.")
        if prefilter_k is not None and prefilter_k <= 0:
            raise ValueError(f"prefilter_k must be >= 1 or None (no prefilter), got {prefilter_k!r}.")
        if num_seeds <= 0:
            raise ValueError(f"num_seeds must be >= 1, got {num_seeds!r}.")
        if not (use_bm25 or use_dense):
            raise ValueError("use_bm25 and use_dense are both False; switch at least one ranking on.")
        if beta < 0:
            raise ValueError(f"beta must be >= 0, got {beta!r}; use 0 for no hub penalty.")
        weights = dict(DEFAULT_EDGE_WEIGHTS)
        for k, v in (edge_weights or {}).items():
            if k not in DEFAULT_EDGE_WEIGHTS:
                raise ValueError(f"unknown edge relation {k!r} in edge_weights; use {sorted(DEFAULT_EDGE_WEIGHTS)}.")
            weights[k] = float(v)
        self._graph = graph
        self.similarity_top_k = similarity_top_k
        self.prefilter_k = prefilter_k
        self.num_seeds = num_seeds
        self.pool_k = pool_k
        self.use_bm25, self.use_dense = use_bm25, use_dense
        self.expand, self.graph_rerank = expand, graph_rerank
        self.smoothing_alpha = smoothing_alpha
        self.beta, self.query_weight = beta, query_weight
        self.edge_weights = weights
        self.rrf_k = rrf_k
        if len(rrf_weights) != 2 or min(rrf_weights) < 0:
            raise ValueError(f"rrf_weights must be two non-negative numbers (bm25, dense), got {rrf_weights!r}.")
        self.rrf_weights = (float(rrf_weights[0]), float(rrf_weights[1]))
        self.bm25_k1, self.bm25_b = bm25_k1, bm25_b
        if max_per_section is not None and max_per_section <= 0:
            raise ValueError(f"max_per_section must be >= 1 or None (no cap), got {max_per_section!r}.")
        self.max_per_section = max_per_section
        if identifier_weight < 1:
            raise ValueError(f"identifier_weight must be >= 1, got {identifier_weight!r}; use 1 for plain BM25.")
        if neighbour_pick not in NEIGHBOUR_PICKS:
            raise ValueError(f"neighbour_pick must be one of {NEIGHBOUR_PICKS}, got {neighbour_pick!r}.")
        if citation_norm < 0:
            raise ValueError(f"citation_norm must be >= 0, got {citation_norm!r}; use 0 for no normalisation.")
        self.identifier_weight = float(identifier_weight)
        self.citation_norm = float(citation_norm)
        self.neighbour_pick = neighbour_pick
        units = graph.units
        self._sparse = SparseExpert(units, name="bm25", k1=bm25_k1, b=bm25_b) if use_bm25 else None
        if graph.embeddings is None:
            graph.embed(embed_model)
        emb = graph.embeddings
        if smoothing_alpha is not None:
            emb = smooth_embeddings(emb, graph.adjacency(SMOOTHING_RELATIONS), smoothing_alpha)
        self._dense = DenseExpert(units, embed_model=embed_model, embeddings=emb, name="dense")
        self._degree = np.array([graph.degree(u) for u in graph.unit_ids], dtype=np.float64)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        parser: Optional[StructuredDocumentParser] = None,
        doc_aliases: Optional[Dict[str, str]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        **kwargs: Any,
    ) -> "StructureAwareRetriever":
        graph = StandardsGraph.from_documents(documents, parser=parser, doc_aliases=doc_aliases)
        graph.embed(embed_model)
        return cls(graph, embed_model=embed_model, **kwargs)

    @property
    def graph(self) -> StandardsGraph:
        return self._graph

    def params(self) -> Dict[str, Any]:
        return {
            "similarity_top_k": self.similarity_top_k, "prefilter_k": self.prefilter_k,
            "num_seeds": self.num_seeds, "pool_k": self.pool_k, "use_bm25": self.use_bm25,
            "use_dense": self.use_dense, "expand": self.expand, "graph_rerank": self.graph_rerank,
            "smoothing_alpha": self.smoothing_alpha, "beta": self.beta,
            "query_weight": self.query_weight, "edge_weights": self.edge_weights, "rrf_k": self.rrf_k,
            "rrf_weights": list(self.rrf_weights), "max_per_section": self.max_per_section, "bm25_k1": self.bm25_k1, "bm25_b": self.bm25_b,
            "identifier_weight": self.identifier_weight, "neighbour_pick": self.neighbour_pick,
            "citation_norm": self.citation_norm,
        }

    def persist(self, persist_dir: str | Path) -> None:
        """The graph (nodes, edges, raw embeddings) plus ``retriever.json`` with the settings,
        one atomically swapped-in folder with one manifest."""
        with persist_to(persist_dir, "StructureAwareRetriever") as w:
            self._graph._persist_files(w)
            w.write_json("retriever.json", self.params(), indent=1)

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None, **overrides: Any
    ) -> "StructureAwareRetriever":
        """Load without re-embedding; ``embed_model`` is checked against the stored dimension."""
        ix = open_persisted(
            persist_dir, ("StructureAwareRetriever", "StandardsGraph"), "StructureAwareRetriever.persist(dir)"
        )
        graph = StandardsGraph._from_persisted(ix)
        if graph.embeddings is not None:
            embed_model = resolve_embed_model(embed_model)
            check_embedder(ix.params, embed_model, ix.dir, "StructureAwareRetriever")
        params = ix.json("retriever.json") if ix.has("retriever.json") else {}
        params.update(overrides)
        return cls(graph, embed_model=embed_model, **params)

    # ---- stages --------------------------------------------------------------------------
    def _first_stage(self, query_bundle: QueryBundle) -> Tuple[List[str], Dict[str, Dict[str, float]], np.ndarray]:
        """RRF ranking of unit ids, per-unit stage scores, and the query cosine of every unit."""
        ids = self._graph.unit_ids
        scores: Dict[str, Dict[str, float]] = {}
        rankings: List[List[str]] = []
        weights: List[float] = []
        qvec = self._dense.embed_query(query_bundle)
        cos = self._dense.score_all(qvec)
        cand: np.ndarray
        if self._sparse is not None:
            bm = self._sparse.score_all(query_bundle.query_str)
            idents = query_identifiers(query_bundle.query_str) if self.identifier_weight != 1 else []
            if idents:  # BM25 is a sum over query terms: extra weight = the identifiers' own score
                bm = bm + (self.identifier_weight - 1.0) * self._sparse.score_all(" ".join(idents))
            k = len(ids) if self.prefilter_k is None else self.prefilter_k
            cand = np.array([i for i in top_k_indices(bm, k) if bm[i] > 0], dtype=np.int64)
            rankings.append([ids[i] for i in cand])
            weights.append(self.rrf_weights[0])
            for i in cand:
                scores.setdefault(ids[i], {})["bm25"] = float(bm[i])
            if cand.size == 0:
                logger.info("StructureAwareRetriever: no BM25 match for %r; ranking all units densely.", query_bundle.query_str)
                cand = np.arange(len(ids))
        else:
            cand = np.arange(len(ids))
        if self.use_dense:
            order = cand[np.lexsort((cand, -cos[cand]))]
            rankings.append([ids[i] for i in order])
            weights.append(self.rrf_weights[1])
            for i in order:
                scores.setdefault(ids[i], {})["dense"] = float(cos[i])
        fused = reciprocal_rank_fusion(rankings, k=self.rrf_k, weights=weights)
        for key, v in fused.items():
            scores[key]["rrf"] = v
        return list(fused), scores, cos

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """Await the query embedding, then rank in a worker thread: the event loop never blocks."""
        check_query(query_bundle, "StructureAwareRetriever")
        if query_bundle.embedding is None:
            query_bundle.embedding = await self._dense.embed_model.aget_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "StructureAwareRetriever")
        g = self._graph
        ranking, scores, cos = self._first_stage(query_bundle)
        if not ranking:
            return []
        pool = ranking[: max(self.pool_k, self.num_seeds, self.similarity_top_k)]
        # seed strength: RRF min-max normalised over the pool (1 for the best, 0 for the last)
        strength = dict(zip(pool, min_max_normalize(np.array([scores[u]["rrf"] for u in pool])).tolist()))
        seeds = ranking[: self.num_seeds]
        fused_rank = {u: i for i, u in enumerate(ranking)}
        missing = len(ranking)

        def pick(grp: List[str]) -> str:
            """The unit standing for a chunked or heading-only neighbour."""
            if self.neighbour_pick == "fused":
                return min(grp, key=lambda x: (fused_rank.get(x, missing), -cos[g.unit_index(x)]))
            return max(grp, key=lambda x: cos[g.unit_index(x)])

        # (strength, path) of the best connection of each node
        conn: Dict[str, Tuple[float, List[str]]] = {u: (s, [u]) for u, s in strength.items()}
        stage = {u: "seed" if u in seeds else "fusion" for u in strength}
        if self.expand:
            for s in seeds:
                for rel, groups in g.unit_neighbours(s, siblings=self.edge_weights["sibling"] > 0).items():
                    w = self.edge_weights.get(rel, 0.0)
                    if w <= 0:
                        continue
                    if rel == "cites" and groups:
                        w /= len(groups) ** self.citation_norm
                    for grp in groups:
                        u = pick(grp)
                        val = strength[s] * w
                        if u not in conn or val > conn[u][0]:
                            conn[u] = (val, [s, rel, u])
                            if u not in seeds:
                                stage[u] = "graph_expansion"
        final: Dict[str, float] = {}
        for u, (c, _) in conn.items():
            i = g.unit_index(u)
            if self.graph_rerank:
                final[u] = c + self.query_weight * float(cos[i]) - self.beta * math.log1p(self._degree[i])
            else:
                final[u] = c
        if self.graph_rerank:
            order = sorted(final, key=lambda u: -final[u])
        elif self.expand:  # seeds in RRF order, each followed by what it brought in, then the pool
            order = []
            for s in seeds:
                order.append(s)
                order += sorted((u for u, (c, p) in conn.items() if len(p) > 1 and p[0] == s), key=lambda u: -conn[u][0])
            order += [u for u in ranking if u in conn]
            order = list(dict.fromkeys(order))
        else:
            order = ranking
        if self.max_per_section is not None:  # chunks of one section beyond the cap go to the back
            seen: Dict[str, int] = {}
            head, tail = [], []
            for u in order:
                sec = g.section_of(u)
                seen[sec] = seen.get(sec, 0) + 1
                (head if seen[sec] <= self.max_per_section else tail).append(u)
            order = head + tail
        out: List[NodeWithScore] = []
        for u in order[: self.similarity_top_k]:
            i = g.unit_index(u)
            st = dict(scores.get(u, {}))
            st.setdefault("dense", float(cos[i]))
            if u in final:
                st["graph"] = final[u]
            path = conn[u][1] if u in conn else [u]
            score = final.get(u, scores.get(u, {}).get("rrf", 0.0))
            out.append(
                annotate(
                    NodeWithScore(node=g.node(u), score=float(score)),
                    method="standards",
                    stage=stage.get(u, "fusion"),
                    scores=st,
                    path=path,
                    section=g.node(u).metadata.get("section_path", ""),
                )
            )
        return out
