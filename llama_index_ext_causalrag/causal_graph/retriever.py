"""``GatedExpansionRetriever``: CausalRAG2 hybrid seeding + gated best-first expansion.

Thin adapter: index -> arrays (once, in ``__init__``) -> pure functions of ``gating.py`` ->
annotated ``NodeWithScore``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.causal_graph.expansion import (
    DEFAULT_EDGE_WEIGHTS,
    GATE,
    HIERARCHY,
    MEMBERSHIP,
    RELATION,
    VERBATIM_BONUS,
    Reached,
    UnifiedGraph,
    best_first_expand,
    cosine_to,
    lexical_overlap,
    mmr_select,
    seed_scores,
)
from llama_index_ext_causalrag.causal_graph.handle import StateView, handle_of
from llama_index_ext_causalrag.causal_graph.keyphrases import STOPWORDS, find_mentions, normalize_name, segments
from llama_index_ext_causalrag.causal_graph.presets import CAUSALRAG2_PRESETS, EXPANSION_PRESET, GatedExpansionConfig
from llama_index_ext_causalrag.causal_graph.units import (
    CALLER_LOOP,
    MemoryUnits,
    StoredUnits,
    TermPostings,
    UnitScores,
    unit_rows,
    unit_texts,
)
from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.storage.filters import check_filters
from llama_index_ext_causalrag.text.fitting import QueryEvidence
from llama_index_ext_causalrag.text.pieces import PieceRetrieval
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import caller, check_query, public_call

logger = logging.getLogger(__name__)

METHOD = "causalrag2"
_stages = StageRecorder(__name__, METHOD)


def terms_of(text: str) -> Set[str]:
    """Normalised content terms (lower case, singular, no stopwords, >= 2 chars)."""
    return {t for seg in segments(text) for t in seg if len(t) >= 2 and t not in STOPWORDS}


def _postings(texts: Sequence[str]) -> TermPostings:
    return TermPostings.from_texts(texts, terms_of)


_unit_rows = unit_rows


def embed_units(index: Any, embed_model: BaseEmbedding, show_progress: bool = False) -> np.ndarray:
    """(n_units, d) unit-norm embeddings of ``index.units`` (embedding text mode), one batch call."""
    texts = [u.get_content(metadata_mode=MetadataMode.EMBED) for u in index.units]
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return _unit_rows(np.asarray(embed_model.get_text_embedding_batch(texts, show_progress=show_progress)))


@dataclass
class _Hit:
    """Best graph evidence for one unit."""

    gain: float
    reached: Reached
    via: str  # "entity" or "relation"
    total: float  # aggregated graph evidence (max or sum of entity gains)


@dataclass
class GraphReach:
    """One query's graph search: ``s_nodes`` (n_nodes,) and ``s_units`` (n_units,) seed scores
    (``-inf``: outside the filter, or on stores a unit the query did not score), whether any node
    matched a query term, the seeds (node position -> gain), the reached nodes in pop order, per
    unit position its best graph evidence, and the :class:`UnitScores` behind ``s_units``."""

    s_nodes: np.ndarray
    s_units: np.ndarray
    matched: bool
    seeds: Dict[int, float]
    reached: List[Reached]
    hits: Dict[int, _Hit]
    unit_scores: Optional[UnitScores] = None


class GatedExpansionRetriever(PieceRetrieval, ExplainMixin, BaseRetriever):
    """CausalRAG2 retrieval (arXiv 2602.05143) over a :class:`CausalGraphIndex`.

    1. Hybrid multi-granular seeding: every entity, every module of every level and every
       text unit gets ``s(v) = alpha * cos(q, v) + (1 - alpha) * lex(q, v)`` (``lex`` = share of
       query terms in the name / title+summary / text, +0.5 when an entity name occurs verbatim
       in the query); MMR (``mmr_lambda``) picks seeds per level. When no entity or module
       shares a term with the query, only text seeds are used (logged at INFO).
    2. Best-first expansion from the graph seeds over relation, hierarchy, membership and gate
       edges: ``gain(v) = s(v) * gamma ** hop * w_type``, a priority queue, ``max_fanout``
       neighbours per pop, at most ``max_nodes`` pops, stop below ``min_gain``.
    3. Units: the source units of reached entities (and of the relation edge that reached them),
       at most ``max_units_per_item`` per entity by text score, plus the ``text_candidates`` best
       text units. Unit score = ``text_weight * s_unit / max s_unit + (1 - text_weight) * gain /
       max gain``. Ranked, cut at ``similarity_top_k`` and, if set, ``budget_tokens``.

    ``use_gates=False`` drops gate edges; ``use_hierarchy=False`` drops modules altogether
    (flat entity graph, hence no gates). ``include_summaries`` / ``include_statements`` add
    reached module summaries and traversed gate/relation statements as small ``TextNode``s.
    Provenance (``causalrag_provenance``): method, stage, kind, seed, seed_level, path,
    path_names, edge_types, edges (with ``causal`` flags), hop, gain, text_score,
    graph_score, rank.
    """

    def __init__(
        self,
        index: Any,
        config: Optional[GatedExpansionConfig] = None,
        embed_model: Optional[BaseEmbedding] = None,
        unit_embeddings: Optional[np.ndarray] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> None:
        """``config`` (default: the class's preset, ``DEFAULT_CONFIG``) with ``overrides``, any of its
        settings by name (or whole stages); ``filters`` (LlamaIndex's ``MetadataFilters``): only text
        units passing them are scored and returned (graph statements and module summaries, which
        belong to no one document, are left out)."""
        cfg = (config if config is not None else CAUSALRAG2_PRESETS[self.DEFAULT_CONFIG]).with_settings(**overrides)
        # the index's state handle: one view of its state now, and on stores with a kvstore, asked
        # at each query whether another index object wrote since
        self._handle = handle_of(index)
        self._successor: Optional["GatedExpansionRetriever"] = None
        self._follow_lock = threading.Lock()
        self._init_args = dict(
            config=config,
            embed_model=embed_model,
            callback_manager=callback_manager,
            verbose=verbose,
            filters=filters,
            **overrides,
        )
        if self._handle is not None and not isinstance(index, StateView):  # one state, however the index is updated
            index = self._handle.view()
        self._generation = index.store_generation() if self._handle is not None else None
        # looked up, not read: a store-backed index's units property reads every unit
        if any(inspect.getattr_static(index, name, None) is None for name in ("graph", "units")):
            raise TypeError(
                f"index must be a CausalGraphIndex, got {type(index).__name__}; "
                "build one with CausalGraphIndex.from_documents(...)."
            )
        self.config = cfg
        self._index = index
        self._embed_model = embed_model
        for name, value in cfg.settings().items():  # read-only copies, by name
            setattr(self, name, value)
        # each stage reads its own settings
        self.seeding, self.expansion, self.propagation = cfg.seeding, cfg.expansion, cfg.propagation
        self.ranking, self.fitting = cfg.ranking, cfg.fitting
        # every edge type weighted: the preset's, then the defaults
        self.edge_weights = {**DEFAULT_EDGE_WEIGHTS, **{k: float(w) for k, w in cfg.expansion.edge_weights.items()}}
        with public_call(caller(type(self).__name__)):
            self.filters = check_filters(filters)
        self._prepare(unit_embeddings)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    EXPLAIN_METHOD = METHOD
    DEFAULT_CONFIG = EXPANSION_PRESET

    def _explain_options(self) -> Dict[str, Any]:
        return self.config.settings()

    # ---------------------------------------------------------------- set-up
    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            self._embed_model = self._index.embed_model
        return self._embed_model

    def _prepare(self, unit_embeddings: Optional[np.ndarray]) -> None:
        idx, g = self._index, self._index.graph
        self._src = self._unit_source(unit_embeddings)
        self._unit_ids: List[str] = self._src.ids
        self._unit_pos = getattr(self._src, "pos", None) or {u: i for i, u in enumerate(self._unit_ids)}
        ents = [g.entities[e] for e in idx.entity_ids]
        mods = [g.modules[m] for m in idx.module_ids] if self.expansion.use_hierarchy else []
        self._ne = len(ents)
        self._ids = [e.id for e in ents] + [m.id for m in mods]
        self._names = [e.name for e in ents] + [m.title or m.id for m in mods]
        self._level = ["entity"] * len(ents) + [f"H{m.level}" for m in mods]
        by_level: Dict[str, List[int]] = {}
        for i, level in enumerate(self._level):
            by_level.setdefault(level, []).append(i)
        self._level_members = [(level, np.asarray(by_level[level], dtype=np.int64)) for level in sorted(by_level)]
        pos = {nid: i for i, nid in enumerate(self._ids)}
        self._pos = pos
        ent_emb = _unit_rows(idx.entity_embeddings) if len(ents) else np.zeros((0, 0), np.float32)
        mod_emb = _unit_rows(idx.module_embeddings) if mods else np.zeros((0, ent_emb.shape[1]), np.float32)
        self._node_emb = np.vstack([ent_emb, mod_emb]) if len(self._ids) else np.zeros((0, 0), np.float32)
        self._postings = _postings(
            [" ".join([e.name, *e.aliases]) for e in ents] + [f"{m.title} {m.summary}" for m in mods]
        )
        self._verbatim: Dict[str, str] = {}
        for e in ents:
            for nm in (e.name, *e.aliases):
                k = normalize_name(nm)
                if k:
                    self._verbatim.setdefault(k, e.id)
        self._max_words = max((len(k.split()) for k in self._verbatim), default=1)
        # unified edge set
        edges: List[Tuple[int, int, str]] = []
        causal: List[Tuple[int, int]] = []
        self._rel_units: Dict[Tuple[int, int], np.ndarray] = {}
        self._rel_desc: Dict[Tuple[int, int], str] = {}
        for r in g.relations:
            a, b = pos.get(r.source), pos.get(r.target)
            if a is None or b is None:
                continue
            edges.append((a, b, RELATION))
            key = (min(a, b), max(a, b))
            if r.cue_count > 0:
                causal.append(key)
            self._rel_units[key] = self._unit_idx(r.unit_ids)
            self._rel_desc[key] = r.description
        self._gate_reason: Dict[Tuple[int, int], str] = {}
        self._gate_score: Dict[Tuple[int, int], float] = {}
        for m in mods:
            mi = pos[m.id]
            if not m.children:
                edges += [(mi, pos[e], MEMBERSHIP) for e in m.members if e in pos]
            edges += [(mi, pos[c], HIERARCHY) for c in m.children if c in pos]
        if self.expansion.use_hierarchy and self.expansion.use_gates:
            for gt in g.gates:
                a, b = pos.get(gt.source), pos.get(gt.target)
                if a is not None and b is not None:
                    edges.append((a, b, GATE))
                    self._gate_reason[(min(a, b), max(a, b))] = gt.reason
                    self._gate_score[(min(a, b), max(a, b))] = float(gt.score)
        self._graph = UnifiedGraph.from_edges(len(self._ids), edges, causal)
        self._ent_units = [self._unit_idx(e.unit_ids) for e in ents]
        self._module_text = {pos[m.id]: f"{m.title}. {m.summary}" for m in mods}
        # units: scored through their source (in memory, or read from the stores per query)
        self._unit_postings = self._src.postings
        if self._node_emb.size and self._src.dim and self._node_emb.shape[1] != self._src.dim:
            raise ValueError(
                f"unit embeddings have dimension {self._src.dim} but the index's entity "
                f"embeddings {self._node_emb.shape[1]}; pass the embed_model the index was built with."
            )
        # the units a query scores exactly: every list and pool it ranks draws from its best `depth`
        self._depth = max(
            self.ranking.text_candidates, self.seeding.mmr_pool, self.seeding.unit_seeds, self.fitting.similarity_top_k
        )

    def _unit_source(self, unit_embeddings: Optional[np.ndarray]) -> "MemoryUnits | StoredUnits":
        """The index state's unit source (on stores: ids and postings, nothing read), or the units
        in memory with ``unit_embeddings``."""
        idx = self._index
        state = getattr(idx, "_state", None)
        if unit_embeddings is None and state is not None:
            return state.unit_source(self.embed_model)
        units = list(idx.units)
        if unit_embeddings is None:
            unit_embeddings = embed_units(idx, self.embed_model)
        postings = (
            state.unit_postings()
            if state is not None and not state.in_stores
            else TermPostings.from_texts(unit_texts(units), terms_of)
        )
        return MemoryUnits(units, unit_embeddings, postings)

    def _unit_idx(self, unit_ids: Sequence[str]) -> np.ndarray:
        return np.asarray([self._unit_pos[u] for u in unit_ids if u in self._unit_pos], dtype=np.int64)

    # --------------------------------------------------------------- retrieve
    def _current(self) -> "GatedExpansionRetriever":
        """This retriever, or one made (once) on the stores' newer state when another index object
        wrote them since this one's state: a query runs wholly on one of them, never a mix."""
        current = self._successor or self
        if self._handle is None or current._generation is None:
            return current
        newer = self._handle.follow(current._generation)
        if newer is None:
            return current
        with self._follow_lock:
            if (self._successor or self)._generation != newer.store_generation():
                self._successor = type(self)(newer, **self._init_args)
            return self._successor or self

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "GatedExpansionRetriever")
        qvec = query_bundle.embedding
        if qvec is None:
            qvec = self.embed_model.get_query_embedding(query_bundle.query_str)
        return self._current()._search(query_bundle.query_str, np.asarray(qvec, dtype=np.float32))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "GatedExpansionRetriever")
        qvec = query_bundle.embedding
        if qvec is None:
            qvec = await self.embed_model.aget_query_embedding(query_bundle.query_str)
        q = np.asarray(qvec, dtype=np.float32)
        if not self._src.stored:
            return self._search(query_bundle.query_str, q)
        # on stores: the search in a worker thread, its vector-store reads awaited on this loop
        return await asyncio.to_thread(self._search_on, asyncio.get_running_loop(), query_bundle.query_str, q)

    def _search_on(self, loop: asyncio.AbstractEventLoop, query: str, q: np.ndarray) -> List[NodeWithScore]:
        CALLER_LOOP.set(loop)
        return self._current()._search(query, q)

    def _scores(self, query: str, q: np.ndarray) -> Tuple[np.ndarray, UnitScores, bool]:
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        qterms = sorted(terms_of(query))
        n = len(self._ids)
        if n:
            lex = lexical_overlap(qterms, self._postings, n)
            for eid in find_mentions(query, self._verbatim, self._max_words):
                lex[self._pos[eid]] += VERBATIM_BONUS
            s_nodes = seed_scores(cosine_to(self._node_emb, q), lex, self.seeding.alpha)
            matched = bool((lex > 0).any())
        else:
            s_nodes, matched = np.zeros(0), False
        # units outside the filter (and, on stores, units the query did not score) are -inf:
        # no text seed and no candidate
        units = self._src.begin(q, qterms, self.seeding.alpha, self._depth, self.filters)
        return s_nodes, units, matched

    @staticmethod
    def _passes(s_units: np.ndarray, u: int) -> bool:
        return bool(np.isfinite(s_units[u]))

    def _seeds(self, s_nodes: np.ndarray) -> Dict[int, float]:
        seeds: Dict[int, float] = {}
        sd = self.seeding
        for level, members in self._level_members:
            k = sd.entity_seeds if level == "entity" else sd.seeds_per_level
            for j in mmr_select(s_nodes[members], self._node_emb, k, lam=sd.mmr_lambda, pool=sd.mmr_pool, rows=members):
                i = int(members[j])
                if s_nodes[i] > 0:
                    seeds[i] = float(s_nodes[i])
        return seeds

    def reach(
        self, query: str, qvec: np.ndarray, context_nodes: Sequence[int] = (), context_seeds: int = 0
    ) -> GraphReach:
        """Seed scores, seeds and the gated best-first expansion for one query, and the graph
        evidence per text unit: what :meth:`retrieve` ranks, for composed retrievers
        (:class:`~llama_index_ext_causalrag.causal_graph.bridge.CausalBridgeRetriever`).

        ``context_nodes`` (graph node positions, e.g. the entities a first-stage context
        mentions): the ``context_seeds`` of them with the highest seed score join the query's
        own seeds, each with its seed score as gain.
        """
        q = np.asarray(qvec, dtype=np.float32)
        s_nodes, units, matched = self._scores(query, q)
        seeds: Dict[int, float] = self._seeds(s_nodes) if matched else {}
        ctx = np.asarray(sorted(set(int(i) for i in context_nodes)), dtype=np.int64)
        if context_seeds > 0 and ctx.size:
            for i in ctx[np.argsort(-s_nodes[ctx], kind="stable")[:context_seeds]].tolist():
                if s_nodes[i] > 0:
                    seeds.setdefault(i, float(s_nodes[i]))
        reached: List[Reached] = []
        if seeds:
            ex = self.expansion
            reached = best_first_expand(
                self._graph,
                np.maximum(s_nodes, 0.0),
                seeds,
                gamma=ex.gamma,
                weights=self.edge_weights,
                max_fanout=ex.max_fanout,
                max_nodes=ex.max_nodes,
                min_gain=ex.min_gain,
            )
        else:
            logger.info("GatedExpansionRetriever: no entity or module shares a term with %r; text seeds only.", query)
        units.ensure(self._reached_units(reached))  # the graph evidence ranks them by their scores
        return GraphReach(s_nodes, units.s, matched, seeds, reached, self._unit_hits(reached, units.s), units)

    def _reached_units(self, reached: Sequence[Reached]) -> np.ndarray:
        """Positions of the source units of reached entities and of the relation edges that reached them."""
        parts = [np.zeros(0, np.int64)]
        for r in reached:
            if r.node >= self._ne:
                continue
            parts.append(self._ent_units[r.node])
            if r.edge_types and r.edge_types[-1] == RELATION:
                a, b = r.path[-2], r.path[-1]
                parts.append(self._rel_units.get((min(a, b), max(a, b)), np.zeros(0, np.int64)))
        return np.concatenate(parts)

    def mentioned_entities(self, text: str) -> List[int]:
        """Graph node positions of the entities whose name or alias occurs verbatim in ``text``."""
        return sorted({self._pos[e] for e in find_mentions(text, self._verbatim, self._max_words)})

    @property
    def units(self) -> List[TextNode]:
        """The text units, in the positions :class:`GraphReach` uses (on stores: every unit read
        from the docstore)."""
        return list(self._src.all_nodes())

    def _unit_hits(self, reached: Sequence[Reached], s_units: np.ndarray) -> Dict[int, _Hit]:
        """Unit position -> its best graph evidence (source units of reached entities and of the
        relation edge that reached them, ``max_units_per_item`` per item by text score)."""
        hits: Dict[int, _Hit] = {}
        for r in reached:
            if r.node >= self._ne:
                continue
            cands = [(self._ent_units[r.node], "entity")]
            if r.edge_types and r.edge_types[-1] == RELATION:
                a, b = r.path[-2], r.path[-1]
                cands.append((self._rel_units.get((min(a, b), max(a, b)), np.zeros(0, np.int64)), "relation"))
            for units, via in cands:
                if len(units) > self.ranking.max_units_per_item:
                    units = units[np.argsort(-s_units[units], kind="stable")[: self.ranking.max_units_per_item]]
                for u in units.tolist():
                    h = hits.get(u)
                    if h is None:
                        hits[u] = _Hit(r.gain, r, via, r.gain)
                        continue
                    if via == "entity" or self.ranking.graph_aggregate == "max":
                        h.total = max(h.total, r.gain) if self.ranking.graph_aggregate == "max" else h.total + r.gain
                    if r.gain > h.gain or (r.gain == h.gain and via == "relation"):
                        h.gain, h.reached, h.via = r.gain, r, via
        return hits

    def _search(self, query: str, q: np.ndarray) -> List[NodeWithScore]:
        if not self._unit_ids:
            return []
        gr = self.reach(query, q)
        s_units, matched, reached, hits = gr.s_units, gr.matched, gr.reached, gr.hits
        sd = self.seeding
        text_seed_ids = set(gr.unit_scores.mmr(sd.unit_seeds, sd.mmr_lambda, sd.mmr_pool))  # type: ignore[union-attr]
        order = np.argsort(-s_units, kind="stable")[: self.ranking.text_candidates]
        cand = [u for u in sorted(set(hits) | text_seed_ids | set(order.tolist())) if self._passes(s_units, u)]
        max_s = max(float(s_units[cand].max()), 1e-12) if cand else 1.0
        max_g = max((h.total for h in hits.values()), default=0.0) or 1.0
        tw = self.ranking.text_weight if hits else 1.0
        scored = []
        for u in cand:
            h = hits.get(u)
            g = h.total / max_g if h else 0.0
            scored.append((tw * float(s_units[u]) / max_s + (1.0 - tw) * g, u))
        scored.sort(key=lambda x: (-x[0], x[1]))
        items: List[Tuple[float, int, Any]] = [(sc, 0, u) for sc, u in scored[: self.fitting.similarity_top_k]]
        if self.filters is None:
            items += [(sc, 1, x) for sc, x in self._extra_items(reached, max_g, tw)]
        items.sort(key=lambda x: (-x[0], x[1]))
        items = items[: self.fitting.similarity_top_k]
        _stages.stage(
            "seeding",
            {"graph_seeds": len(gr.seeds), "text_seeds": len(text_seed_ids)},
            lambda: self._seeding_detail(gr, text_seed_ids),
        )
        _stages.stage(
            "gated_expansion", {"reached": len(reached), "units_hit": len(hits)}, lambda: self._expansion_detail(gr)
        )
        _stages.stage(
            "unit_ranking",
            {"candidates": len(cand), "returned": len(items)},
            lambda: {
                "took": {"candidates": len(cand), "text_weight": tw, "similarity_top_k": self.fitting.similarity_top_k},
                "decided": {
                    "top": [
                        {
                            "score": sc,
                            "kind": "unit" if k == 0 else x[1]["kind"],
                            "id": self._unit_ids[x] if k == 0 else x[0].node_id,
                        }
                        for sc, k, x in items
                    ]
                },
                "why": "unit score = text_weight x text score + (1 - text_weight) x graph evidence, "
                "both scaled by their maximum.",
            },
        )
        out: List[NodeWithScore] = []
        nodes = self._src.nodes([x for _, kind, x in items if kind == 0])  # one batched read on stores
        for rank, (sc, kind, x) in enumerate(items, start=1):
            if kind == 0:
                out.append(
                    self._unit_node(nodes[x], x, sc, float(s_units[x]), hits.get(x), x in text_seed_ids, matched, rank)
                )
            else:
                out.append(annotate(NodeWithScore(node=x[0], score=sc), rank=rank, **x[1]))
        return self._cut(out, query)

    # ---------------------------------------------------------------- explain
    def _seeding_detail(self, gr: GraphReach, text_seed_ids: Set[int]) -> Dict[str, Any]:
        seeds = [
            {"id": self._ids[i], "name": self._names[i], "level": self._level[i], "score": g}
            for i, g in sorted(gr.seeds.items(), key=lambda x: -x[1])
        ]
        units = [
            {"id": self._unit_ids[u], "score": float(gr.s_units[u])}
            for u in sorted(text_seed_ids, key=lambda u: -gr.s_units[u])
        ]
        sd = self.seeding
        return {
            "took": {
                "alpha": sd.alpha,
                "entity_seeds": sd.entity_seeds,
                "seeds_per_level": sd.seeds_per_level,
                "unit_seeds": sd.unit_seeds,
                "mmr_lambda": sd.mmr_lambda,
            },
            "decided": {"seeds": seeds, "text_seeds": units, "query_matched_graph": gr.matched},
            "why": "s = alpha x cosine + (1 - alpha) x term overlap for every entity, module and unit; MMR "
            "picks diverse seeds per level."
            + ("" if gr.matched else " No entity or module shares a term with the query: text seeds only."),
        }

    def _expansion_detail(self, gr: GraphReach) -> Dict[str, Any]:
        nodes: Dict[int, Dict[str, Any]] = {}
        edges: Dict[Tuple[int, int, str], Dict[str, Any]] = {}

        def node(i: int, kind: str) -> None:
            nodes.setdefault(i, {"id": self._ids[i], "label": self._names[i], "kind": kind})

        for i in gr.seeds:
            node(i, "seed_entity" if i < self._ne else "seed_module")
        gates = []
        for r in gr.reached:
            for (a, b), t in zip(zip(r.path, r.path[1:]), r.edge_types):
                for i in (a, b):
                    node(i, "entity" if i < self._ne else "module")
                key = (min(a, b), max(a, b))
                e = {
                    "source": self._ids[a],
                    "target": self._ids[b],
                    "kind": t,
                    "crossed": True,
                    "weight": self._gate_score.get(key) if t == GATE else self.edge_weights.get(t),
                }
                if (a, b, t) not in edges and t == GATE:
                    gates.append(
                        {
                            "from": self._ids[a],
                            "to": self._ids[b],
                            "score": self._gate_score.get(key),
                            "reason": self._gate_reason.get(key, ""),
                            "gain_after": r.gain,
                        }
                    )
                edges.setdefault((a, b, t), e)
        for (a, b), score in self._gate_score.items():  # gates at reached modules the search did not take
            if a in nodes and b in nodes and (a, b, GATE) not in edges and (b, a, GATE) not in edges:
                edges[(a, b, GATE)] = {
                    "source": self._ids[a],
                    "target": self._ids[b],
                    "kind": GATE,
                    "weight": score,
                    "crossed": False,
                }
        modules = [
            {
                "id": self._ids[r.node],
                "title": self._names[r.node],
                "level": self._level[r.node],
                "gain": r.gain,
                "hop": r.hop,
            }
            for r in gr.reached
            if r.node >= self._ne
        ]
        ex = self.expansion
        return {
            "took": {
                "seeds": len(gr.seeds),
                "gamma": ex.gamma,
                "max_nodes": ex.max_nodes,
                "max_fanout": ex.max_fanout,
                "min_gain": ex.min_gain,
                "use_gates": ex.use_gates,
            },
            "decided": {"reached": len(gr.reached), "modules_reached": modules, "gates_crossed": gates},
            "why": "Best-first search from the seeds over relation, hierarchy, membership and gate edges: "
            "gain = s x gamma^hop x edge weight, stopping below min_gain or after max_nodes.",
            "graph": {"nodes": list(nodes.values()), "edges": list(edges.values())},
        }

    # ----------------------------------------------------------------- output
    def _path_prov(self, r: Reached) -> Dict[str, Any]:
        edges = []
        for (a, b), t in zip(zip(r.path, r.path[1:]), r.edge_types):
            edges.append(
                {
                    "from": self._ids[a],
                    "to": self._ids[b],
                    "from_name": self._names[a],
                    "to_name": self._names[b],
                    "type": t,
                    "causal": t == GATE or bool(self._graph.causal.get((min(a, b), max(a, b)))),
                }
            )
        return {
            "seed": self._ids[r.seed],
            "seed_level": self._level[r.seed],
            "path": [self._ids[i] for i in r.path],
            "path_names": [self._names[i] for i in r.path],
            "edge_types": list(r.edge_types),
            "edges": edges,
            "hop": r.hop,
            "gain": round(r.gain, 6),
        }

    def _unit_node(
        self,
        node: Any,
        u: int,
        score: float,
        text_score: float,
        hit: Optional[_Hit],
        text_seed: bool,
        matched: bool,
        rank: int,
    ) -> NodeWithScore:
        prov: Dict[str, Any] = {
            "method": METHOD,
            "stage": "gated_expansion",
            "kind": "unit",
            "rank": rank,
            "text_score": round(text_score, 6),
            "text_seed": text_seed,
        }
        if hit is not None:
            prov.update(self._path_prov(hit.reached), via=hit.via, graph_score=round(hit.total, 6))
        else:
            prov.update(
                seed=self._unit_ids[u],
                seed_level="unit",
                path=[],
                path_names=[],
                edge_types=[],
                edges=[],
                hop=0,
                gain=0.0,
                via="text",
                graph_score=0.0,
                fallback=not matched,
            )
        return annotate(NodeWithScore(node=node, score=score), score=score, **prov)

    def _extra_items(
        self, reached: Sequence[Reached], max_g: float, tw: float
    ) -> List[Tuple[float, Tuple[TextNode, Dict[str, Any]]]]:
        """(score, (node, provenance)) of module summaries and gate/relation statements, if enabled."""
        out: List[Tuple[float, Tuple[TextNode, Dict[str, Any]]]] = []
        if not (self.ranking.include_summaries or self.ranking.include_statements):
            return out
        for r in reached:
            score = (1.0 - tw) * r.gain / max_g
            base = {"method": METHOD, "stage": "gated_expansion", **self._path_prov(r)}
            if self.ranking.include_summaries and r.node >= self._ne:
                node = TextNode(id_=f"{METHOD}-module-{self._ids[r.node]}", text=self._module_text[r.node])
                out.append((score, (node, {**base, "kind": "module_summary"})))
            if self.ranking.include_statements and r.edge_types and r.edge_types[-1] in (RELATION, GATE):
                a, b = r.path[-2], r.path[-1]
                key = (min(a, b), max(a, b))
                t = r.edge_types[-1]
                detail = self._gate_reason.get(key, "") if t == GATE else self._rel_desc.get(key, "")
                text = f"{self._names[a]} -- {t} -- {self._names[b]}" + (f": {detail}" if detail else "")
                node = TextNode(id_=f"{METHOD}-{t}-{self._ids[key[0]]}-{self._ids[key[1]]}", text=text)
                out.append((score, (node, {**base, "kind": f"{t}_statement"})))
        return out

    def unit_idf(self, terms: Sequence[str]) -> Dict[str, float]:
        """BM25's idf of each of ``terms`` over the text units (``terms_of`` terms):
        ``log(1 + (N - df + 0.5) / (df + 0.5))``."""
        n = len(self._unit_ids)
        dfs = self._unit_postings.doc_freq(terms) if len(terms) else {}  # on a served store: one statement
        out: Dict[str, float] = {}
        for t in terms:
            df = dfs.get(t, 0)
            out[t] = float(np.log1p((n - df + 0.5) / (df + 0.5)))
        return out

    def query_evidence(self) -> QueryEvidence:
        """What ``fit_mode="sentences"`` scores a sentence by: its ``terms_of`` terms shared with the
        query's, each weighing its :meth:`unit_idf`."""
        return QueryEvidence(terms=terms_of, idf=self.unit_idf)

    def _cut(self, nodes: List[NodeWithScore], query: str = "") -> List[NodeWithScore]:
        """``nodes`` within ``budget_tokens`` (the ``fitting`` stage, :class:`~llama_index_ext_causalrag.text.fitting.FittingStage`):
        whole while they fit, the next one cut by ``fit_mode`` with :meth:`query_evidence`."""
        return self.fitting.fit(nodes, query, self.query_evidence())


__all__ = ["GatedExpansionRetriever", "GraphReach", "embed_units", "terms_of"]
