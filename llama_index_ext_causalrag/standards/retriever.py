"""StructureAwareRetriever: BM25 prefilter -> dense re-rank -> RRF -> seeds -> graph expansion -> re-rank."""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import Document, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.fusion import DescStr, min_max_normalize, reciprocal_rank_fusion, top_k_indices
from llama_index_ext_causalrag.standards.explain_detail import expansion_detail, rerank_detail
from llama_index_ext_causalrag.standards.facts import GraphFacts, QueryFacts
from llama_index_ext_causalrag.standards.graph import GRAPH_CLASSES, StandardsGraph
from llama_index_ext_causalrag.standards.identifiers import query_identifiers
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.presets import DEFAULT_PRESET, STANDARDS_PRESETS, StructureAwareConfig
from llama_index_ext_causalrag.standards.smoothing import smooth_embeddings
from llama_index_ext_causalrag.storage.filters import check_filters, filter_mask
from llama_index_ext_causalrag.storage.persistence import check_embedder, open_persisted, persist_to
from llama_index_ext_causalrag.text.fitting import QueryEvidence
from llama_index_ext_causalrag.text.pieces import PieceRetrieval
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import caller, check_query, public_call, public_method

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "standards")

SMOOTHING_RELATIONS = ("parent", "child", "sibling", "same_section", "cites", "cited_by")


class StructureAwareRetriever(PieceRetrieval, ExplainMixin, BaseRetriever):
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
    ``budget_tokens`` (None = no cut) cuts the returned nodes: whole while they fit, then the next
    one by ``fit_mode`` (``"prefix"``: its head; ``"sentences"``: its sentences sharing the most
    BM25-idf-weighted terms with the query, as pieces under its id).
    Every returned node carries provenance: stage, stage scores and the edge path.

    The settings are :class:`StructureAwareConfig`'s, one config per stage (``self.config.lexical``,
    ``.dense``, ``.fusion``, ``.expansion``, ``.rerank``, ``.fitting``); each is also readable by name
    (``retriever.num_seeds``).
    """

    def __init__(
        self,
        graph: StandardsGraph,
        config: Optional[StructureAwareConfig] = None,
        embed_model: Optional[BaseEmbedding] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> None:
        """``config`` (default: the tuned ``"standards"`` preset) with ``overrides``, any of its settings
        by name (or whole stages); ``filters`` (LlamaIndex's ``MetadataFilters``): only units passing
        them are candidates, seeds, expansion targets or results."""
        cfg = (config if config is not None else STANDARDS_PRESETS[DEFAULT_PRESET]).with_settings(**overrides)
        self.config = cfg
        self._graph = graph
        for name, value in cfg.settings().items():  # read-only copies, by name
            setattr(self, name, value)
        # each stage reads its own settings
        self.lexical, self.dense, self.fusion, self.expansion, self.rerank, self.fitting = (
            cfg.lexical,
            cfg.dense,
            cfg.fusion,
            cfg.expansion,
            cfg.rerank,
            cfg.fitting,
        )
        units, lx = graph.units, cfg.lexical
        self._sparse = SparseExpert(units, name="bm25", k1=lx.bm25_k1, b=lx.bm25_b) if lx.use_bm25 else None
        self._tokenizer = self._sparse.tokenizer if self._sparse is not None else None
        if graph.embeddings is None:
            graph.embed(embed_model)
        emb = graph.embeddings
        if cfg.dense.smoothing_alpha is not None:
            emb = smooth_embeddings(emb, graph.adjacency(SMOOTHING_RELATIONS), cfg.dense.smoothing_alpha)
        self._dense = DenseExpert(units, embed_model=embed_model, embeddings=emb, name="dense")
        self._degree = np.array([graph.degree(u) for u in graph.unit_ids], dtype=np.float64)
        self._id_rank = np.argsort(np.argsort(np.array(graph.unit_ids, dtype=object)))  # ties by id descending
        with public_call(caller("StructureAwareRetriever")):
            self.filters = check_filters(filters)
        self._mask = None if self.filters is None else filter_mask(units, self.filters)
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

    EXPLAIN_METHOD = "standards"

    def _explain_options(self) -> Dict[str, Any]:
        return self.params()

    def params(self) -> Dict[str, Any]:
        """Every setting by name, as JSON (what ``retriever.json`` keeps)."""
        out = self.config.settings()
        out["rrf_weights"] = list(out["rrf_weights"])
        return out

    def persist(self, persist_dir: str | Path) -> None:
        """The graph (nodes, edges, raw embeddings) plus ``retriever.json`` with the settings,
        one atomically swapped-in folder with one manifest."""
        with persist_to(persist_dir, "StructureAwareRetriever") as w:
            self._graph._persist_files(w)
            w.write_json("retriever.json", self.params(), indent=1)

    @classmethod
    @public_method
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None, **overrides: Any
    ) -> "StructureAwareRetriever":
        """Load without re-embedding; ``embed_model`` is checked against the stored dimension."""
        persisted = open_persisted(
            persist_dir, ("StructureAwareRetriever", *GRAPH_CLASSES), "StructureAwareRetriever.persist(dir)"
        )
        graph = StandardsGraph._from_persisted(persisted)
        if graph.embeddings is not None:
            embed_model = resolve_embed_model(embed_model)
            check_embedder(persisted.params, embed_model, persisted.dir)
        params = persisted.json("retriever.json") if persisted.has("retriever.json") else {}
        params.update(overrides)
        return cls(graph, embed_model=embed_model, **params)

    # ---- stages --------------------------------------------------------------------------
    def _facts(self, qvec: np.ndarray) -> QueryFacts:
        """What this query knows of the units: every unit's cosine, degree and graph, in memory."""
        return GraphFacts(self._graph, self._dense.score_all(qvec), self._degree, self._mask)

    def _unit_count(self) -> Optional[int]:
        return len(self._graph.unit_ids)

    def _prefilter(self, terms: "Counter[str]", k: Optional[int]) -> Tuple[List[str], Dict[str, float]]:
        """The best ``k`` units (None: all) by BM25 for the weighted query ``terms`` (term ->
        weight), each with a positive score, best first, ties by id descending."""
        ids = self._graph.unit_ids
        assert self._sparse is not None
        bm = self._sparse.score_terms(terms)
        if self._mask is not None:  # inside the prefilter's top-k: it never comes back short
            bm = np.where(self._mask, bm, 0.0)
        pos = np.flatnonzero(bm > 0)
        k = pos.size if k is None else min(int(k), pos.size)
        if k < pos.size:
            pos = pos[top_k_indices(bm[pos], k + TIE_MARGIN)]
        best = sorted(pos.tolist(), key=lambda i: (-bm[i], DescStr(ids[i])))[:k]
        return [ids[i] for i in best], {ids[i]: float(bm[i]) for i in best}

    def _dense_candidates(self, qvec: np.ndarray, facts: QueryFacts, k: int) -> List[str]:
        """Every unit passing the filters (in memory all are ranked; ``k``: the ranks used)."""
        ids = self._graph.unit_ids
        return ids if self._mask is None else [ids[i] for i in np.flatnonzero(self._mask)]

    def _by_cosine(self, cand: List[str], facts: QueryFacts) -> List[str]:
        """``cand`` by cosine to the query, ties by id descending."""
        if not isinstance(facts, GraphFacts):
            return sorted(cand, key=lambda u: (-facts.cos(u), DescStr(u)))
        pos = np.fromiter((self._graph.unit_index(u) for u in cand), dtype=np.int64, count=len(cand))
        cos = facts._cos[pos]
        return [cand[j] for j in np.lexsort((-self._id_rank[pos], -cos))]

    def query_terms(self, query: str) -> "Counter[str]":
        """The BM25 query: its tokens, those of its code identifiers weighing ``identifier_weight``."""
        terms: "Counter[str]" = Counter()
        for t in self._tokenizer(query):
            terms[t] += 1.0
        w = self.lexical.identifier_weight
        idents = query_identifiers(query) if w != 1 else []
        for t in self._tokenizer(" ".join(idents)) if idents else []:
            terms[t] += w - 1.0
        return terms

    def _first_stage(self, query_bundle: QueryBundle) -> Tuple[List[str], Dict[str, Dict[str, float]], QueryFacts]:
        """RRF ranking of unit ids, per-unit stage scores, and what the query knows of the units."""
        lexical, dense, fusion = self.lexical, self.dense, self.fusion
        scores: Dict[str, Dict[str, float]] = {}
        rankings: List[List[str]] = []
        weights: List[float] = []
        qvec = self._dense.embed_query(query_bundle)
        facts = self._facts(qvec)
        pool = max(fusion.pool_k, self.expansion.num_seeds, self.similarity_top_k)
        cand: List[str] = []
        if lexical.use_bm25:
            terms = self.query_terms(query_bundle.query_str)
            cand, bm = self._prefilter(terms, lexical.prefilter_k)
            rankings.append(list(cand))
            weights.append(fusion.rrf_weights[0])
            for u in cand:
                scores.setdefault(u, {})["bm25"] = bm[u]
            _stages.stage(
                "bm25_prefilter",
                {"units": self._unit_count(), "candidates": len(cand)},
                lambda: {
                    "took": {
                        "units": self._unit_count(),
                        "prefilter_k": lexical.prefilter_k,
                        "terms": dict(terms),
                        "identifier_weight": lexical.identifier_weight,
                    },
                    "decided": {"candidates": len(cand), "top": [{"id": u, "bm25": bm[u]} for u in cand[:20]]},
                    "why": "BM25 keeps the units sharing terms with the query (code identifiers "
                    "weigh identifier_weight times a word); none: every unit goes on.",
                },
            )
            if not cand:
                logger.info(
                    "StructureAwareRetriever: no BM25 match for %r; ranking all units densely.", query_bundle.query_str
                )
        if not cand:
            cand = self._dense_candidates(qvec, facts, pool)
        if dense.use_dense:
            order = self._by_cosine(cand, facts)
            rankings.append(order)
            weights.append(fusion.rrf_weights[1])
            for u in order:
                scores.setdefault(u, {})["dense"] = facts.cos(u)
            _stages.stage(
                "dense_rerank",
                {"candidates": len(order)},
                lambda: {
                    "took": {"candidates": len(order), "smoothing_alpha": dense.smoothing_alpha},
                    "decided": {"top": [{"id": u, "dense": facts.cos(u)} for u in order[:20]]},
                    "why": "The candidates re-ranked by cosine to the query"
                    + (
                        f", over embeddings smoothed along the section tree and citations "
                        f"(alpha {dense.smoothing_alpha})."
                        if dense.smoothing_alpha is not None
                        else " (no graph smoothing)."
                    ),
                },
            )
        fused = reciprocal_rank_fusion(rankings, k=fusion.rrf_k, weights=weights)
        for key, v in fused.items():
            scores[key]["rrf"] = v
        _stages.stage(
            "rrf_fusion",
            {"lists": len(rankings), "fused": len(fused)},
            lambda: {
                "took": {"lists": len(rankings), "rrf_k": fusion.rrf_k, "weights": weights},
                "decided": {"top": [{"id": u, "rrf": v} for u, v in list(fused.items())[:20]]},
                "why": "Reciprocal rank fusion of the BM25 and dense rankings, keyed by unit id.",
            },
        )
        return list(fused), scores, facts

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
        ranking, scores, facts = self._first_stage(query_bundle)
        if not ranking:
            return []
        pool = ranking[: max(self.fusion.pool_k, self.expansion.num_seeds, self.similarity_top_k)]
        # seed strength: RRF min-max normalised over the pool (1 for the best, 0 for the last)
        strength = dict(zip(pool, min_max_normalize(np.array([scores[u]["rrf"] for u in pool])).tolist()))
        seeds = ranking[: self.expansion.num_seeds]
        ex = self.expansion
        facts.prepare(pool, seeds if ex.expand else [], ex.edge_weights["sibling"] > 0)
        conn, stage = self._expand_seeds(ranking, strength, seeds, facts)
        final: Dict[str, float] = {}
        rr = self.rerank
        for u, (c, _) in conn.items():
            if rr.graph_rerank:
                final[u] = c + rr.query_weight * facts.cos(u) - rr.beta * math.log1p(facts.degree(u))
            else:
                final[u] = c
        order = self._order(ranking, seeds, conn, final, facts)[: self.similarity_top_k]
        facts.prepare_nodes(order)
        out = [self._annotated(u, scores, facts, final, conn, stage) for u in order]
        _stages.stage(
            "graph_expansion",
            {"seeds": len(seeds), "expanded": sum(v == "graph_expansion" for v in stage.values())},
            lambda: expansion_detail(self.expansion, seeds, conn, stage, facts),
        )
        _stages.stage(
            "graph_rerank",
            {"scored": len(conn), "returned": len(out)},
            lambda: rerank_detail(self.rerank, self.similarity_top_k, out, conn, final, facts),
        )
        return self._cut(out, query_bundle.query_str)

    def query_evidence(self) -> QueryEvidence:
        """What ``fit_mode="sentences"`` scores a sentence by: its BM25 terms shared with the query's,
        each weighing its BM25 idf over the units (plain term overlap without BM25)."""
        sp = self._sparse
        return QueryEvidence() if sp is None else QueryEvidence(terms=sp.tokenizer, idf=sp.idf)

    def _cut(self, nodes: List[NodeWithScore], query: str) -> List[NodeWithScore]:
        """``nodes`` within ``budget_tokens`` (the ``fitting`` stage,
        :class:`~llama_index_ext_causalrag.text.fitting.FittingStage`: the node that does not fit cut
        by ``fit_mode``); all of them without a budget."""
        if not nodes:
            return nodes
        return self.fitting.fit(nodes, query, self.query_evidence())

    def _expand_seeds(
        self, ranking: List[str], strength: Dict[str, float], seeds: List[str], facts: QueryFacts
    ) -> Tuple[Dict[str, Tuple[float, List[str]]], Dict[str, str]]:
        """(strength, path) of the best connection of each node, and each node's stage."""
        fused_rank = {u: i for i, u in enumerate(ranking)}
        missing = len(ranking)

        def representative(grp: List[str]) -> str:
            """The unit standing for a chunked or heading-only neighbour."""
            if self.expansion.neighbour_pick == "fused":
                return min(grp, key=lambda x: (fused_rank.get(x, missing), -facts.cos(x), DescStr(x)))
            return min(grp, key=lambda x: (-facts.cos(x), DescStr(x)))

        conn: Dict[str, Tuple[float, List[str]]] = {u: (s, [u]) for u, s in strength.items()}
        stage = {u: "seed" if u in seeds else "fusion" for u in strength}
        if not self.expansion.expand:
            return conn, stage
        siblings = self.expansion.edge_weights["sibling"] > 0
        for s in seeds:
            for rel, groups in facts.neighbours(s, siblings).items():
                w = self.expansion.edge_weights.get(rel, 0.0)
                if w <= 0:
                    continue
                if rel == "cites" and groups:
                    w /= len(groups) ** self.expansion.citation_norm
                for grp in groups:
                    grp = [x for x in grp if facts.passes(x)]
                    if not grp:
                        continue
                    u = representative(grp)
                    val = strength[s] * w
                    if u not in conn or val > conn[u][0]:
                        conn[u] = (val, [s, rel, u])
                        if u not in seeds:
                            stage[u] = "graph_expansion"
        return conn, stage

    def _order(
        self,
        ranking: List[str],
        seeds: List[str],
        conn: Dict[str, Tuple[float, List[str]]],
        final: Dict[str, float],
        facts: QueryFacts,
    ) -> List[str]:
        """Final order of the unit ids, before the top-k cut."""
        if self.rerank.graph_rerank:
            order = sorted(final, key=lambda u: -final[u])
        elif self.expansion.expand:  # seeds in RRF order, each followed by what it brought in, then the pool
            order = []
            for s in seeds:
                order.append(s)
                order += sorted(
                    (u for u, (c, p) in conn.items() if len(p) > 1 and p[0] == s), key=lambda u: -conn[u][0]
                )
            order += [u for u in ranking if u in conn]
            order = list(dict.fromkeys(order))
        else:
            order = ranking
        if self.rerank.max_per_section is not None:  # chunks of one section beyond the cap go to the back
            seen: Dict[str, int] = {}
            head, tail = [], []
            for u in order:
                sec = facts.section(u)
                seen[sec] = seen.get(sec, 0) + 1
                (head if seen[sec] <= self.rerank.max_per_section else tail).append(u)
            order = head + tail
        return order

    def _annotated(
        self,
        u: str,
        scores: Dict[str, Dict[str, float]],
        facts: QueryFacts,
        final: Dict[str, float],
        conn: Dict[str, Tuple[float, List[str]]],
        stage: Dict[str, str],
    ) -> NodeWithScore:
        node = facts.node(u)
        st = dict(scores.get(u, {}))
        st.setdefault("dense", facts.cos(u))
        if u in final:
            st["graph"] = final[u]
        path = conn[u][1] if u in conn else [u]
        score = final.get(u, scores.get(u, {}).get("rrf", 0.0))
        return annotate(
            NodeWithScore(node=node, score=float(score)),
            method="standards",
            stage=stage.get(u, "fusion"),
            scores=st,
            path=path,
            section=node.metadata.get("section_path", ""),
        )
