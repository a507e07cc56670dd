"""``CausalBridgeRetriever``: a strong first stage, then graph-reached evidence from the documents
it did not cover, packed into a reserved share of the token budget.

Thin adapter over :meth:`GatedExpansionRetriever.reach` (seeding + gated best-first expansion)
and the pure helpers of ``bridging.py``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.causal_graph.bridge_evidence import pick_bridge_units, sentence_evidence
from llama_index_ext_causalrag.causal_graph.expansion import GATE
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever, GraphReach, terms_of
from llama_index_ext_causalrag.causal_graph.stages import BRIDGE, FITTING, BridgeConfig
from llama_index_ext_causalrag.text.fitting import take_runs
from llama_index_ext_causalrag.text.pieces import PieceRetrieval, cut_piece
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.text.selection import best_sentences
from llama_index_ext_causalrag.text.sentences import sentence_spans
from llama_index_ext_causalrag.text.tokens import count_tokens, validate_budget
from llama_index_ext_causalrag.validation import check_query, check_top_k

logger = logging.getLogger(__name__)

METHOD = "causalrag2"
STAGE = "bridge"
# fewer tokens left in the reserved share than this: stop packing
MIN_PIECE_TOKENS = 8


def _tokens(n: NodeWithScore) -> int:
    return count_tokens(n.node.get_content(metadata_mode=MetadataMode.NONE))


def _drop_tail(context: List[NodeWithScore], budget: int) -> List[NodeWithScore]:
    """``context`` without its lowest-ranked nodes outside the top node's document, until it
    fits ``budget`` tokens (the top document's nodes are never dropped).

    A drop, not the budget cut of ``text.fitting.FittingStage`` (rank order, the last node cut): the two differ on
    187 of 189 QUIC and 177 of 180 HolisQA-like BM25 top-10 lists cut at 100, 300 and 600 tokens."""
    top = context[0].node.ref_doc_id
    keep = list(context)
    total = sum(_tokens(n) for n in keep)
    for i in range(len(keep) - 1, 0, -1):
        if total <= budget:
            break
        if keep[i].node.ref_doc_id != top:
            total -= _tokens(keep[i])
            del keep[i]
    return keep


class CausalBridgeRetriever(PieceRetrieval, BaseRetriever):
    """``first_stage`` fills the budget; a reserved ``bridge_share`` of it goes to evidence from
    documents the first stage did not cover, reached through the causal graph.

    For a budget ``B``:

    1. The first stage's context at ``B`` (its ``retrieve_for_budget`` if it has one, e.g.
       UMGP's :class:`PostprocessedRetriever`; else its ranking cut to ``B``, the last node cut by
       ``graph``'s ``fit_mode``) names the covered
       documents and seeds the graph: the ``context_seeds`` entities it mentions with the
       highest query seed score join the query's own seeds.
    2. Gated best-first expansion (``graph``, a :class:`GatedExpansionRetriever`: its preset
       decides whether gate edges exist) reaches entities and their text units. Units of
       uncovered documents are scored like ``graph``'s ranking,
       ``text_weight * s_unit / max s_unit + (1 - text_weight) * gain / max gain``
       (``use_graph=False``: by ``s_unit`` alone, the no-graph ablation), and kept if
       ``s_unit / max s_unit >= min_relative_score``, from at most ``max_bridge_docs`` documents.
       ``protect_top_doc``: the bridge takes at most the tokens the context spends outside the
       document of its best node, so that document's evidence is never cut.
    3. Packing: each kept unit, best first, gives the sentences that fit the ``bridge_share * B``
       tokens left and hold evidence (share of query terms, plus the gain of reached entities
       they name), greedily by evidence per token.
    4. The first stage is refitted to ``B`` minus the tokens the bridge used (``protect_top_doc``:
       its lowest-ranked nodes of other documents are dropped instead); its context comes
       first, the bridge pieces after it. Nothing bridged: the first stage's context unchanged.

    Without a budget (``budget_tokens=None``), ``retrieve`` returns the first stage's ranking
    with its last ``ceil(bridge_share * similarity_top_k)`` places given to whole bridge units.
    Bridge nodes carry provenance (``stage="bridge"``, the graph path, ``via_gate``).
    """

    def __init__(
        self,
        first_stage: BaseRetriever,
        graph: GatedExpansionRetriever,
        *,
        bridge_share: float = BRIDGE.bridge_share,
        budget_tokens: Optional[int] = None,
        similarity_top_k: int = FITTING.similarity_top_k,
        max_bridge_docs: int = BRIDGE.max_bridge_docs,
        context_seeds: int = BRIDGE.context_seeds,
        min_relative_score: float = BRIDGE.min_relative_score,
        use_graph: bool = BRIDGE.use_graph,
        protect_top_doc: bool = BRIDGE.protect_top_doc,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(first_stage, BaseRetriever):
            raise TypeError(f"first_stage must be a BaseRetriever, got {type(first_stage).__name__}.")
        if not isinstance(graph, GatedExpansionRetriever):
            raise TypeError(
                f"graph must be a GatedExpansionRetriever, got {type(graph).__name__}; "
                "use CausalGraphIndex.as_graph_retriever()."
            )
        self.config = BridgeConfig(
            bridge_share=bridge_share,
            max_bridge_docs=max_bridge_docs,
            context_seeds=context_seeds,
            min_relative_score=min_relative_score,
            use_graph=use_graph,
            protect_top_doc=protect_top_doc,
        )
        validate_budget(budget_tokens)
        self.similarity_top_k = check_top_k(similarity_top_k)
        self._first = first_stage
        self._graph = graph
        self.budget_tokens = budget_tokens
        for name, value in self.config.model_dump().items():  # the bridge's settings, by name
            setattr(self, name, value)
        self._units = graph.units
        self._docs = [u.ref_doc_id or "" for u in self._units]
        self._last: Optional[Tuple[str, np.ndarray]] = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def first_stage(self) -> BaseRetriever:
        return self._first

    @property
    def graph(self) -> GatedExpansionRetriever:
        return self._graph

    # ------------------------------------------------------------------ stages
    def _qvec(self, query: str, embedding: Optional[Sequence[float]] = None) -> np.ndarray:
        if embedding is None:
            last = self._last
            if last is not None and last[0] == query:
                return last[1]
            embedding = self._graph.embed_model.get_query_embedding(query)
        q = np.asarray(embedding, dtype=np.float32)
        self._last = (query, q)
        return q

    def _context(self, query: str, budget: int) -> List[NodeWithScore]:
        by_budget = getattr(self._first, "retrieve_for_budget", None)
        if by_budget is not None:
            return list(by_budget(query, budget))
        return self._graph.fitting.fit(
            self._first.retrieve(query), query, self._graph.query_evidence(), budget_tokens=budget
        )

    def _reach(self, query: str, q: np.ndarray, context: Sequence[NodeWithScore]) -> GraphReach:
        mentioned: List[int] = []
        if self.use_graph and self.context_seeds:
            text = " ".join(n.node.get_content(metadata_mode=MetadataMode.NONE) for n in context)
            mentioned = self._graph.mentioned_entities(text)
        return self._graph.reach(query, q, mentioned, self.context_seeds if self.use_graph else 0)

    def _candidates(self, gr: GraphReach, covered: Set[str]) -> List[Tuple[float, int]]:
        """(score, unit position) of the units allowed into the bridge, best first."""
        s = gr.s_units
        if not len(s):
            return []
        max_s = max(float(s.max()), 1e-12)
        if self.use_graph:
            max_g = max((h.total for h in gr.hits.values()), default=0.0) or 1.0
            tw = self._graph.text_weight
            cand = {u: tw * float(s[u]) / max_s + (1.0 - tw) * h.total / max_g for u, h in gr.hits.items()}
        else:
            order = np.argsort(-s, kind="stable")[: self._graph.text_candidates + 10 * len(covered)]
            cand = {int(u): float(s[u]) / max_s for u in order}
        rel = {u: float(s[u]) / max_s for u in cand}
        return pick_bridge_units(
            cand,
            rel,
            self._docs,
            covered,
            max_docs=self.config.max_bridge_docs,
            min_relative=self.config.min_relative_score,
        )

    def _pieces(self, query: str, gr: GraphReach, cand: List[Tuple[float, int]], room: int) -> List[NodeWithScore]:
        qterms = terms_of(query)
        names = self._reached_names(gr)
        out: List[NodeWithScore] = []
        for score, u in cand:
            if room < MIN_PIECE_TOKENS:
                break
            unit = self._units[u]
            text = unit.get_content(metadata_mode=MetadataMode.NONE)
            sents = sentence_spans(text)
            if not sents:
                continue
            ev = sentence_evidence(
                [terms_of(text[a:b]) for a, b in sents], qterms, [text[a:b].lower() for a, b in sents], names
            )
            tok = np.asarray([count_tokens(text[a:b]) for a, b in sents], dtype=np.float64)
            for a, b, n_tok in take_runs(text, sents, best_sentences(ev, tok, room), room, shrink=False):
                out.append(self._piece(unit, a, b, score, gr, u))
                room -= n_tok
        return out

    def _reached_names(self, gr: GraphReach) -> Dict[str, float]:
        """Lower-cased names of reached entities -> their gain over the best gain."""
        if not self.use_graph or not gr.reached:
            return {}
        best = max(r.gain for r in gr.reached) or 1.0
        g = self._graph
        return {g._names[r.node].lower(): r.gain / best for r in gr.reached if r.node < g._ne}

    def _piece(self, unit: Any, a: int, b: int, score: float, gr: GraphReach, u: int) -> NodeWithScore:
        hit = gr.hits.get(u)
        prov: Dict[str, Any] = {
            "method": METHOD,
            "stage": STAGE,
            "unit": unit.node_id,
            "text_score": round(float(gr.s_units[u]), 6),
            "use_graph": self.use_graph,
        }
        if hit is not None and self.use_graph:
            prov.update(
                self._graph._path_prov(hit.reached),
                graph_score=round(hit.total, 6),
                via_gate=GATE in hit.reached.edge_types,
            )
        return annotate(NodeWithScore(node=cut_piece(unit, a, b), score=score), score=score, **prov)

    # ---------------------------------------------------------------- retrieve
    def _fit(self, query: str, q: np.ndarray, budget: int) -> List[NodeWithScore]:
        context = self._context(query, budget)
        room = int(self.bridge_share * budget)
        if self.protect_top_doc and context:
            top = context[0].node.ref_doc_id
            room = min(room, sum(_tokens(n) for n in context if n.node.ref_doc_id != top))
        if room < MIN_PIECE_TOKENS or not self._units:
            return context
        gr = self._reach(query, q, context)
        covered = {n.node.ref_doc_id or "" for n in context}
        bridge = self._pieces(query, gr, self._candidates(gr, covered), room)
        if not bridge:
            return context
        used = sum(_tokens(n) for n in bridge)
        if self.protect_top_doc:
            return _drop_tail(context, budget - used) + bridge
        return self._context(query, budget - used) + bridge  # used <= bridge_share * budget < budget

    def _unbudgeted(self, query: str, q: np.ndarray, first: List[NodeWithScore]) -> List[NodeWithScore]:
        first = first[: self.similarity_top_k]
        n_bridge = int(np.ceil(self.bridge_share * self.similarity_top_k))
        if n_bridge == 0 or not self._units:
            return first
        gr = self._reach(query, q, first)
        covered = {n.node.ref_doc_id or "" for n in first}
        cand = self._candidates(gr, covered)[:n_bridge]
        bridge = [
            self._piece(self._units[u], 0, len(self._units[u].get_content(metadata_mode=MetadataMode.NONE)), sc, gr, u)
            for sc, u in cand
        ]
        return first[: self.similarity_top_k - len(bridge)] + bridge

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "CausalBridgeRetriever")
        query = query_bundle.query_str
        q = self._qvec(query, query_bundle.embedding)
        if self.budget_tokens is not None:
            return self._fit(query, q, self.budget_tokens)
        return self._unbudgeted(query, q, self._first.retrieve(query))

    def retrieve_for_budget(self, query: str, budget: int) -> List[NodeWithScore]:
        """The result for ``query`` fitted to ``budget`` tokens (the first stage refitted, the
        bridge repacked); reuses the last query embedding."""
        validate_budget(budget)
        return self._fit(query, self._qvec(query), budget)


__all__ = ["CausalBridgeRetriever"]
