"""``PropagationRetriever``: personalized PageRank over the whole CausalGraphIndex graph instead of
a best-first expansion from a few seeds (HippoRAG 2's retrieval, arXiv 2502.14802).

Thin adapter: the index's graph -> one :class:`WeightedGraph` (once, in ``__init__``) -> the pure
:func:`personalized_pagerank` -> annotated ``NodeWithScore``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import NodeWithScore

from llama_index_ext_causalrag.causal_graph.expansion import GATE, HIERARCHY, MEMBERSHIP, RELATION
from llama_index_ext_causalrag.causal_graph.propagation import WeightedGraph, personalized_pagerank
from llama_index_ext_causalrag.causal_graph.retriever import METHOD, GatedExpansionRetriever, _stages
from llama_index_ext_causalrag.causal_graph.titles import TitleLinks, present_title_links, title_bridge_order
from llama_index_ext_causalrag.causal_graph.units import UnitScores
from llama_index_ext_causalrag.text.provenance import annotate

logger = logging.getLogger(__name__)

BRIDGE_KEEP = 1  # a title bridge never moves the best unit by dense score from the first place


class PropagationRetriever(GatedExpansionRetriever):
    """CausalRAG2's graph scored at once by personalized PageRank.

    Nodes: entities, modules of every level (unless ``use_hierarchy=False``) and text units.
    Edges (undirected, weighted): relations ``edge_weights["relation"] * log(1 + co-occurrences)``,
    module membership and hierarchy (``edge_weights``), causal gates between modules
    ``edge_weights["gate"] * gate score`` (unless ``use_gates=False``), and an entity's mentions,
    entity - unit, ``mention_weight``.

    Reset distribution, per query: ``(1 - text_share)`` on the graph seeds (the entities and modules
    :class:`GatedExpansionRetriever` seeds, by MMR over ``s = alpha cos + (1 - alpha) lex``; an
    entity's share divided by the number of units mentioning it, as HippoRAG 2 weighs phrases),
    ``text_share`` on the ``text_candidates`` best units by ``s``. ``damping`` is the chance a step
    follows an edge. Units are ranked by their PageRank mass, cut at ``similarity_top_k`` and
    ``budget_tokens``. When no entity or module shares a term with the query (or the graph has no
    entity), the units are ranked by ``s`` alone, logged at INFO.

    Title bridges (``bridge_weight`` or ``query_title_weight`` > 0, units with a metadata
    ``"title"``): when the query names a title, or one of its ``bridge_sources`` best units by
    cosine names one, the units are ranked by :func:`~.titles.title_bridge_order` (cosine plus
    one step over the title links, the best unit by cosine kept first) and the walk is not run;
    otherwise by the walk as above.
    """

    DEFAULT_CONFIG = "passages"

    def _prepare(self, unit_embeddings: Any) -> None:
        super()._prepare(unit_embeddings)
        graph, pos, nn = self._index.graph, self._pos, len(self._ids)
        a: List[int] = []
        b: List[int] = []
        w: List[float] = []

        def add(i: int, j: int, weight: float) -> None:
            a.append(i)
            b.append(j)
            w.append(weight)

        for r in graph.relations:
            i, j = pos.get(r.source), pos.get(r.target)
            if i is not None and j is not None:
                add(i, j, self.edge_weights[RELATION] * float(np.log1p(max(r.weight, 0.0))))
        if self.expansion.use_hierarchy:
            for mid in self._ids[self._ne :]:
                m, mi = graph.modules[mid], pos[mid]
                for e in [] if m.children else m.members:
                    if e in pos:
                        add(mi, pos[e], self.edge_weights[MEMBERSHIP])
                for c in m.children:
                    if c in pos:
                        add(mi, pos[c], self.edge_weights[HIERARCHY])
            if self.expansion.use_gates:
                for gt in graph.gates:
                    i, j = pos.get(gt.source), pos.get(gt.target)
                    if i is not None and j is not None:
                        add(i, j, self.edge_weights[GATE] * float(gt.score))
        mentions = [(e, u) for e in range(self._ne) for u in self._ent_units[e].tolist()]
        ea = np.asarray(a + [e for e, _ in mentions], dtype=np.int64)
        eb = np.asarray(b + [nn + u for _, u in mentions], dtype=np.int64)
        ew = np.asarray(w + [self.propagation.mention_weight] * len(mentions), dtype=np.float64)
        self._titles = self._title_links()
        self._title_names = {i: k for k, i in self._titles.keys.items()} if self._titles is not None else {}
        tb = nn + len(self._unit_ids)  # title nodes follow the units
        n_title_nodes = self._titles.n if self._titles is not None and self.propagation.title_weight > 0 else 0
        if n_title_nodes:
            t, pr = self._titles, self.propagation
            ea = np.concatenate([ea, tb + t.own_title, tb + t.named_title])
            eb = np.concatenate([eb, nn + t.own_unit, nn + t.named_unit])
            ew = np.concatenate(
                [ew, np.full(t.own_title.size, pr.title_weight), np.full(t.named_title.size, pr.mention_weight)]
            )
            self._title_count = 1.0 + np.bincount(t.named_title, minlength=t.n).astype(np.float64)
        self._wgraph = WeightedGraph.from_edges(tb + n_title_nodes, ea, eb, ew)
        self._mention_count = np.asarray([max(len(u), 1) for u in self._ent_units], dtype=np.float64)

    def _title_links(self) -> Optional[TitleLinks]:
        """The units' title links when title nodes or bridges are on, else ``None``; read once per
        index state (the first retriever reads every unit), not at each retriever."""
        pr = self.propagation
        if max(pr.title_weight, pr.bridge_weight, pr.query_title_weight) <= 0 or not self._unit_ids:
            return None
        if getattr(self._index, "params", {}).get("titled") is False:  # built without titles: nothing to read
            return None
        state = getattr(self._index, "_state", None)
        if state is not None and list(state.unit_ids) == list(self._unit_ids):
            return state.title_links()
        return present_title_links(self._src.present_nodes())

    def _bridged(self, units: UnitScores, title_seeds: Sequence[int]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """Title bridges (:func:`title_bridge_order`) over the units' cosines, or ``None`` (off, or
        nothing bridged). On stores the units a bridge reaches are scored first."""
        pr, t = self.propagation, self._titles
        if t is None or not t.n or max(pr.bridge_weight, pr.query_title_weight) <= 0:
            return None
        cos = units.cosines()
        reach = [u for ti in title_seeds for u in t.units_of(ti)]
        best = np.argsort(-cos, kind="stable")[: pr.bridge_sources].tolist()
        reach += [u for q in best + reach for ti in t.titles_named_by(q) for u in t.units_of(ti)]
        if reach and not units.scored[np.asarray(reach)].all():
            units.ensure(reach)
            cos = units.cosines()
        return title_bridge_order(
            cos, t, title_seeds, pr.bridge_sources, pr.bridge_weight, pr.query_title_weight, keep=BRIDGE_KEEP
        )

    def _reset(
        self, seeds: Dict[int, float], s_units: np.ndarray, title_seeds: Sequence[int] = ()
    ) -> Tuple[np.ndarray, np.ndarray]:
        """(reset over all graph nodes, the text candidates' unit positions). A title the query
        names weighs as the best graph seed (1 without one), divided by 1 + the units naming it."""
        nn = len(self._ids)
        r = np.zeros(self._wgraph.n)
        for i, s in seeds.items():
            r[i] = s / self._mention_count[i] if i < self._ne else s
        if len(title_seeds):
            tb, top = nn + len(self._unit_ids), max(seeds.values(), default=1.0)
            for t in title_seeds:
                r[tb + t] = top / self._title_count[t]
        if r.sum() > 0:
            r *= (1.0 - self.propagation.text_share) / r.sum()
        cand = np.argsort(-s_units, kind="stable")[: self.ranking.text_candidates]
        cand = cand[s_units[cand] > 0]
        if cand.size:
            r[nn + cand] = self.propagation.text_share * s_units[cand] / s_units[cand].sum()
        return r, cand

    def _search(self, query: str, q: np.ndarray) -> List[NodeWithScore]:
        if not self._unit_ids:
            return []
        s_nodes, units, matched = self._scores(query, q)
        s_units = units.s
        seeds = self._seeds(s_nodes) if matched else {}
        title_seeds = self._titles.named_in(query) if self._titles is not None and self._titles.n else []
        nn = len(self._ids)
        bridged = self._bridged(units, title_seeds)
        if bridged is not None:
            return self._bridge_nodes(query, bridged, s_units, [self._title_names[t] for t in title_seeds])
        if self.propagation.title_weight <= 0:
            title_seeds = []  # no title nodes in the walk
        if seeds or title_seeds:
            reset, cand = self._reset(seeds, s_units, title_seeds)
            p = personalized_pagerank(self._wgraph, reset, self.propagation.damping)
            unit_mass = p[nn : nn + len(self._unit_ids)]
            self._score_mass_top(units, unit_mass)
            order = np.lexsort((-s_units, -unit_mass))  # mass, then text score
        else:
            logger.info(
                "PropagationRetriever: no entity or module shares a term with %r; ranking units by "
                "their text score alone.",
                query,
            )
            cand, unit_mass = np.zeros(0, np.int64), np.zeros(len(self._unit_ids))
            order = np.argsort(-s_units, kind="stable")
        # graph mass reaches units outside the filter (-inf): they are not returned
        order = order[np.isfinite(s_units[order])]
        top = order[: self.fitting.similarity_top_k].tolist()
        _stages.stage(
            "propagation",
            {"seeds": len(seeds), "text_seeds": int(cand.size), "returned": len(top)},
            lambda: self._propagation_detail(seeds, cand, s_units, unit_mass, top),
        )
        seed_names = [self._names[i] for i, _ in sorted(seeds.items(), key=lambda x: -x[1])]
        walked = bool(seeds or title_seeds)
        out = self._annotated(
            top,
            "propagation",
            unit_mass if walked else s_units,
            lambda u: {
                "ppr_score": round(float(unit_mass[u]), 9),
                "text_score": round(float(s_units[u]), 6),
                "seeds": seed_names,
                "fallback": not walked,
            },
        )
        return self._cut(out, query)

    def _annotated(
        self, top: List[int], stage: str, scores: np.ndarray, extra: Callable[[int], Dict[str, Any]]
    ) -> List[NodeWithScore]:
        """Units ``top`` as nodes (one batched read on stores), scored by ``scores``, with their
        provenance: the stage, the rank and ``extra(unit)``."""
        nodes = self._src.nodes(top)
        out = []
        for rank, u in enumerate(top, start=1):
            score = float(scores[u])
            prov: Dict[str, Any] = {"method": METHOD, "stage": stage, "kind": "unit", "rank": rank, **extra(u)}
            out.append(annotate(NodeWithScore(node=nodes[u], score=score), score=score, **prov))
        return out

    def _bridge_nodes(
        self, query: str, bridged: Tuple[np.ndarray, np.ndarray], s_units: np.ndarray, named: List[str]
    ) -> List[NodeWithScore]:
        """The first ``similarity_top_k`` units of a title-bridge ranking, annotated."""
        order, f = bridged
        top = order[: self.fitting.similarity_top_k].tolist()
        _stages.stage(
            "title_bridge",
            {"titles_in_query": len(named), "returned": len(top)},
            lambda: {
                "took": {"bridge_weight": self.propagation.bridge_weight, "sources": self.propagation.bridge_sources},
                "decided": {"query_titles": named, "top": [self._unit_ids[u] for u in top]},
                "why": "Dense score plus one step over title links (the query's titles, the titles its "
                "best units name); the walk is not run.",
            },
        )
        out = self._annotated(
            top,
            "title_bridge",
            f,
            lambda u: {
                "bridge_score": round(float(f[u]), 6),
                "text_score": round(float(s_units[u]), 6),
                "query_titles": named,
            },
        )
        return self._cut(out, query)

    def _score_mass_top(self, units: UnitScores, unit_mass: np.ndarray) -> None:
        """Score every unit with graph mass down to the ``similarity_top_k``-th passing the filter
        (ties included: they are ordered by their text score); units without mass rank by their
        text score, exact for the query's best ``depth``. In memory every unit is scored already."""
        k, n = self.fitting.similarity_top_k, unit_mass.shape[0]
        by_mass = np.argsort(-unit_mass, kind="stable")
        neg = -unit_mass[by_mass]
        end = k
        while True:
            end = min(max(end, 1), n)
            last = -neg[end - 1]
            if last > 0:  # every unit tied with the last one taken
                end = int(np.searchsorted(neg, -last, side="right"))
            take = by_mass[:end][unit_mass[by_mass[:end]] > 0]
            units.ensure(take)
            if last <= 0 or end >= n or int(np.isfinite(units.s[take]).sum()) >= k:
                return
            end *= 2

    def _propagation_detail(
        self, seeds: Dict[int, float], cand: np.ndarray, s_units: np.ndarray, unit_mass: np.ndarray, top: List[int]
    ) -> Dict[str, Any]:
        pr = self.propagation
        return {
            "took": {
                "damping": pr.damping,
                "text_share": pr.text_share,
                "use_gates": self.expansion.use_gates,
                "nodes": self._wgraph.n,
                "arcs": self._wgraph.arcs,
            },
            "decided": {
                "seeds": [
                    {"id": self._ids[i], "name": self._names[i], "level": self._level[i], "score": s}
                    for i, s in sorted(seeds.items(), key=lambda x: -x[1])
                ],
                "text_seeds": [self._unit_ids[u] for u in cand.tolist()],
                "top": [{"id": self._unit_ids[u], "ppr": float(unit_mass[u]), "text": float(s_units[u])} for u in top],
            },
            "why": "Personalized PageRank from the seed entities and modules and the best text units over "
            "relation, membership, hierarchy, gate and mention edges; units ranked by their mass."
            + ("" if seeds else " No entity or module matched the query: units by text score."),
        }


__all__ = ["PropagationRetriever"]
