"""ParentPromotionPostprocessor: fine hits give way to their parent, overlaps are skipped.

Works on any nodes whose PARENT relationship points into ``docstore``: the units of
:class:`MultiGranularityNodeParser` and the leaves of LlamaIndex's ``HierarchicalNodeParser``
alike, so it is a drop-in alternative to ``AutoMergingRetriever``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.bridge.pydantic import Field, field_validator, model_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.explain import StageRecorder
from llama_index_ext_causalrag.multigranularity.allocation import Passage, passages_for_budget
from llama_index_ext_causalrag.multigranularity.cuts import cut_to_tokens as _cut_to_tokens
from llama_index_ext_causalrag.multigranularity.cuts import is_whole_document
from llama_index_ext_causalrag.multigranularity.cuts import node_span as _span
from llama_index_ext_causalrag.multigranularity.stages import (
    FITTING,
    PROMOTION,
    Allocation,
    FitEvidence,
    ParentEvidence,
)
from llama_index_ext_causalrag.presets import Choices
from llama_index_ext_causalrag.storage.filters import matches
from llama_index_ext_causalrag.storage.stores import fetch_nodes
from llama_index_ext_causalrag.text.fitting import check_fit_mode, fit_mode_of_fit_to_budget, select_runs, take_runs
from llama_index_ext_causalrag.text.pieces import cut_piece, piece_key
from llama_index_ext_causalrag.text.provenance import annotate, get_provenance
from llama_index_ext_causalrag.text.sentences import sentence_spans
from llama_index_ext_causalrag.text.spans import span_overlap
from llama_index_ext_causalrag.text.tokens import count_tokens, validate_budget

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "umgp")

__all__ = ["ParentPromotionPostprocessor", "is_whole_document"]


class ParentPromotionPostprocessor(Choices, BaseNodePostprocessor):
    """UMGP parent promotion (Jung & Wang 2026, section 3.5).

    Walk the ranked nodes; a node with a parent in ``docstore`` is replaced by that parent;
    siblings sharing a parent add their evidence (their scores) into it, clipped to [0, 1].
    Candidates are then taken best-first (by summed evidence if ``sort_by_evidence``, else in
    the order their first child appeared); one whose character span overlaps an already
    selected node by more than ``max_overlap`` of the shorter span is skipped. Stops after
    ``top_n`` nodes or once ``budget_tokens`` are spent.

    Budget-aware promotion (``fit_mode`` other than ``"prefix"``, our addition to the paper): with
    ``budget_tokens`` set, a node that does not fit the tokens left is not handed on for the
    caller to truncate (which keeps its head, wherever the evidence is) but replaced by the whole
    sentences of it that fit and hold the most evidence. Each input node spreads its evidence
    over the sentences it overlaps (``w * overlap / length``); sentences already selected count
    nothing. ``fit_mode="sentences"`` takes sentences greedily by evidence per token (possibly
    several pieces, in text order); ``"window"`` one contiguous run; ``"prefix"`` hands the node on
    whole (the caller cuts its head; ``fit_to_budget=False`` before, still accepted). With coarse
    parents (e.g. 32-sentence windows, a whole abstract) this turns promotion into "find the right
    passage, then keep what the budget allows of it". :meth:`postprocess_within` promotes to another
    budget than ``budget_tokens`` (``PostprocessedRetriever`` hands it each budget).
    """

    docstore: BaseDocumentStore = Field(exclude=True, description="Holds the parent nodes.")
    top_n: Optional[int] = Field(
        default=10,
        description="Maximum promoted nodes taken (a node fitted in 'sentences' mode may give several "
        "pieces); None for no cap.",
    )
    budget_tokens: Optional[int] = Field(
        default=None, description="Stop once this many tokens are selected; None for no budget."
    )
    max_overlap: float = Field(
        default=PROMOTION.max_overlap,
        ge=0.0,
        le=1.0,
        description="Skip a node sharing more than this share of the shorter span with a selected one.",
    )
    sort_by_evidence: bool = Field(
        default=True, description="Order candidates by summed evidence instead of first appearance."
    )
    fit_mode: str = Field(
        default=FITTING.fit_mode,
        description="How a node that does not fit the budget is fitted: 'sentences' (its best sentences by "
        "evidence per token, in text order, possibly several pieces), 'window' (one contiguous run) or "
        "'prefix' (handed on whole: the caller cuts its head).",
    )
    fit_evidence: FitEvidence = Field(
        default=FITTING.fit_evidence,
        description="What a fitted node's sentences are scored by: 'fused' (the input nodes' evidence spread "
        "over the text they cover) or 'query' (that prior re-weighted by the query's dense and BM25 scores "
        "of each sentence, from sentence_scores; the prior alone where it has none).",
    )
    fit_weights: Tuple[float, float] = Field(
        default=FITTING.fit_weights,
        description="With fit_evidence='query': weights (dense, BM25) of the sentence scores that re-weight the prior.",
    )
    sentence_scores: Optional[Any] = Field(
        default=None,
        exclude=True,
        description="A FinestUnitScores (MultiGranularityIndex.as_postprocessor passes the index's) giving the "
        "query's scores of the finest units inside a node; used with fit_evidence='query'.",
    )
    parent_evidence: ParentEvidence = Field(
        default=PROMOTION.parent_evidence,
        description="What ranks a parent that is a whole document: 'children' (its input nodes' summed evidence) or "
        "'document' (the largest 'doc_P' of its input nodes: EntropyFusionRetriever(pool_documents=True)'s pooled P "
        "of all the document's units; the summed evidence where none has one).",
    )
    allocation: Allocation = Field(
        default=FITTING.allocation,
        description="With a budget, how it is shared: 'greedy' (whole nodes in rank order, the first that does not "
        "fit fitted to the tokens left) or 'evidence' (per query, the k whose equal shares of the budget among the "
        "first k nodes cover the most evidence, allocation.passages_for_budget; k = 1 is the greedy).",
    )
    evidence_key: Optional[str] = Field(
        default=None,
        description="Provenance key holding a node's evidence (e.g. 'P' after EntropyFusionRetriever); "
        "None uses the node score.",
    )
    filters: Optional[MetadataFilters] = Field(
        default=None,
        description="The query's metadata filters: a parent that does not pass them is not promoted to "
        "(its hit stays itself).",
    )
    promote_within_long_documents: bool = Field(
        default=True,
        description="Promote hits whose parent window is a part of a longer document. False promotes "
        "only to parents that are a whole document (MultiGranularityNodeParser units: a document shorter "
        "than the parent window); a hit in a longer document stays itself.",
    )

    @field_validator("top_n")
    @classmethod
    def _check_top_n(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v <= 0:
            raise ValueError(f"top_n must be >= 1 or None, got {v!r}; use None for no cap.")
        return v

    @field_validator("budget_tokens", mode="before")
    @classmethod
    def _check_budget(cls, v: Any) -> Optional[int]:
        return validate_budget(v)  # before pydantic turns "100" into 100 or 2.0 into 2

    @model_validator(mode="before")
    @classmethod
    def _fit_to_budget(cls, data: Any) -> Any:
        return fit_mode_of_fit_to_budget(data, "ParentPromotionPostprocessor")

    @field_validator("fit_mode")
    @classmethod
    def _check_fit_mode(cls, v: str) -> str:
        return check_fit_mode(v)

    @property
    def fit_to_budget(self) -> bool:
        """Deprecated (read-only): ``fit_mode != "prefix"``; ``fit_to_budget=False`` is ``fit_mode="prefix"``."""
        return self.fit_mode != "prefix"

    @field_validator("fit_weights")
    @classmethod
    def _check_fit_weights(cls, v: Tuple[float, float]) -> Tuple[float, float]:
        if any(not np.isfinite(w) or w < 0 for w in v):
            raise ValueError(
                f"fit_weights must be two finite weights (dense, BM25) >= 0, got {v!r}; e.g. {FITTING.fit_weights}."
            )
        return v

    @classmethod
    def class_name(cls) -> str:
        return "ParentPromotionPostprocessor"

    def _evidence(self, nws: NodeWithScore) -> float:
        if self.evidence_key is not None:
            value = get_provenance(nws).get(self.evidence_key)
            if value is not None:
                return float(value)
        return float(nws.score or 0.0)

    def _parents(self, nodes: List[NodeWithScore]) -> Dict[str, Optional[BaseNode]]:
        """The parents of ``nodes`` by id, read in one batch (None, said once, where the docstore lacks one)."""
        children = {n.node.parent_node.node_id: n.node.node_id for n in nodes if n.node.parent_node is not None}
        found = fetch_nodes(self.docstore, list(children))
        for pid, child in children.items():
            if pid not in found:
                logger.warning(
                    "ParentPromotionPostprocessor: parent %r of %r is not in the docstore; keeping the child.",
                    pid,
                    child,
                )
        return {pid: found.get(pid) for pid in children}

    def _parent_of(self, node: BaseNode, parents: Dict[str, Optional[BaseNode]]) -> Optional[BaseNode]:
        rel = node.parent_node
        parent = None if rel is None else parents.get(rel.node_id)
        if parent is not None and not self.promote_within_long_documents and not is_whole_document(parent):
            return None
        if parent is not None and self.filters is not None and not matches(parent.metadata, self.filters):
            return None
        return parent

    def _fit(
        self,
        node: BaseNode,
        left: int,
        hits: List[Tuple[str, int, int, float]],
        spans: List[Tuple[str, int, int]],
        query_bundle: Optional[QueryBundle] = None,
    ) -> List[Tuple[BaseNode, int]]:
        """Pieces of ``node`` (whole sentences) that fit ``left`` tokens and hold its evidence.

        A sentence's evidence is the input nodes' evidence spread over the text they cover
        (``w * overlap / length``); sentences already in the context count nothing.
        ``fit_mode="sentences"`` picks sentences greedily by evidence per token (several
        pieces, in text order); ``"window"`` the contiguous run with the most evidence.
        """
        text, sents, ev, tok = self._sentences(node, hits, spans, query_bundle)
        if not sents:
            return []
        runs = take_runs(text, sents, select_runs(ev, tok, left, self.fit_mode), left)
        return [(cut_piece(node, a, b), n_tok) for a, b, n_tok in runs]

    def _sentences(
        self,
        node: BaseNode,
        hits: List[Tuple[str, int, int, float]],
        spans: List[Tuple[str, int, int]],
        query_bundle: Optional[QueryBundle] = None,
    ) -> Tuple[str, List[Tuple[int, int]], np.ndarray, np.ndarray]:
        """``node``'s text, its sentences, their evidence and their tokens (see :meth:`_fit`)."""
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        sents = sentence_spans(text)
        if not sents:
            return text, [], np.zeros(0), np.zeros(0)
        sp = _span(node)
        ev = np.zeros(len(sents))
        free = np.ones(len(sents), dtype=bool)  # not already in the context
        if sp is not None:
            doc, off = sp[0], sp[1]
            mine = [(s, e, w) for d, s, e, w in hits if d == doc and e > s]
            taken = [(s, e) for d, s, e in spans if d == doc]
            for k, (a, b) in enumerate(sents):
                a, b = a + off, b + off
                if any(span_overlap((s, e), (a, b)) > 0.5 for s, e in taken):
                    free[k] = False
                    continue
                ev[k] = sum(w * max(0, min(b, e) - max(a, s)) / (e - s) for s, e, w in mine)
        ev = self._query_evidence(node, sents, ev, free, query_bundle)
        tok = np.asarray([count_tokens(text[a:b]) for a, b in sents], dtype=np.float64)
        return text, sents, ev, tok

    def _query_evidence(
        self,
        node: BaseNode,
        sents: Sequence[Tuple[int, int]],
        prior: np.ndarray,
        free: np.ndarray,
        query_bundle: Optional[QueryBundle],
    ) -> np.ndarray:
        """With ``fit_evidence="query"``: ``prior`` re-weighted by the query's dense and BM25 scores
        of ``node``'s sentences (:meth:`FinestUnitScores.evidence`); else ``prior``."""
        if self.fit_evidence != "query" or self.sentence_scores is None or query_bundle is None:
            return prior
        return self.sentence_scores.evidence(query_bundle, node, sents, prior, free, self.fit_weights)

    def _targets(self, nodes: List[NodeWithScore], evidence: List[float]) -> List[Dict[str, Any]]:
        """Each node's parent (or the node itself) with the evidence summed into it, ranked."""
        cache: Dict[str, Optional[BaseNode]] = self._parents(nodes)
        targets: Dict[str, Dict[str, Any]] = {}
        for rank, (nws, ev) in enumerate(zip(nodes, evidence)):
            parent = self._parent_of(nws.node, cache)
            tgt = parent if parent is not None else nws.node
            t = targets.get(tgt.node_id)
            if t is None:
                t = targets[tgt.node_id] = {
                    "node": tgt,
                    "evidence": 0.0,
                    "first": rank,
                    "children": [],
                    "self_hit": False,
                }
            t["evidence"] += ev
            pooled = get_provenance(nws).get("doc_P") if self.parent_evidence != "children" else None
            if pooled is not None and is_whole_document(tgt):
                t["doc_P"] = max(t.get("doc_P", 0.0), float(pooled))
            if parent is None:
                t["self_hit"] = True
                if tgt is nws.node:
                    t["source"] = nws.node
            else:
                t["children"].append(nws.node.node_id)
        ranked = list(targets.values())
        for t in ranked:
            if "doc_P" in t:
                t["evidence"] = t["doc_P"]
        if self.sort_by_evidence:
            ranked.sort(key=lambda t: (-min(1.0, max(0.0, t["evidence"])), t["first"]))
        return ranked

    def _budgeted(
        self,
        node: BaseNode,
        left: int,
        hits: List[Tuple[str, int, int, float]],
        spans: List[Tuple[str, int, int]],
        first: bool,
        prov: Dict[str, Any],
        query_bundle: Optional[QueryBundle] = None,
    ) -> Optional[List[Tuple[BaseNode, Optional[int]]]]:
        """What of ``node`` goes in with ``left`` tokens left (``prov`` notes a fit); None: stop."""
        n_tok = count_tokens(node.get_content(metadata_mode=MetadataMode.NONE))
        if n_tok <= left or self.fit_mode == "prefix":
            return [(node, n_tok)]
        pieces: List[Tuple[BaseNode, Optional[int]]] = list(self._fit(node, left, hits, spans, query_bundle))
        mode = self.fit_mode
        if not pieces and first:  # never return nothing: cut the best candidate
            pieces, mode = [_cut_to_tokens(node, left)], "truncated"
        if not pieces:
            return None
        prov.update(fitted_from=node.node_id, fit_mode=mode)
        return pieces

    def _passages(
        self,
        ranked: List[Dict[str, Any]],
        hits: List[Tuple[str, int, int, float]],
        query_bundle: Optional[QueryBundle],
        budget: Optional[int],
    ) -> int:
        """How many nodes share the budget equally (``allocation="evidence"``); 1 is the greedy."""
        if self.allocation != "evidence" or budget is None or self.fit_mode == "prefix":
            return 1
        cap = self.top_n if self.top_n is not None else len(ranked)
        picked: List[Passage] = []
        seen: List[Tuple[str, int, int]] = []
        for t in ranked:
            if len(picked) >= cap:
                break
            node: BaseNode = t.get("source", t["node"])
            sp = _span(node)
            if self._overlaps(sp, seen):
                continue
            if not is_whole_document(node):  # shares among whole documents only; from here on, the greedy
                break
            _, sents, ev, tok = self._sentences(node, hits, [], query_bundle)
            if sents:
                doc, off = (sp[0], sp[1]) if sp is not None else (node.node_id, 0)
                picked.append(Passage(min(1.0, max(0.0, t["evidence"])), ev, tok, [(doc, off + a) for a, _ in sents]))
            if sp is not None:
                seen.append(sp)
        return passages_for_budget(picked, budget)

    def _overlaps(self, sp: Optional[Tuple[str, int, int]], spans: Sequence[Tuple[str, int, int]]) -> bool:
        """Whether the span ``sp`` shares more than ``max_overlap`` of the shorter span with one of ``spans``."""
        return sp is not None and any(
            d == sp[0] and span_overlap((s, e), (sp[1], sp[2])) > self.max_overlap for d, s, e in spans
        )

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        return self.postprocess_within(nodes, query_bundle, self.budget_tokens)

    def postprocess_within(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle], budget_tokens: Optional[int]
    ) -> List[NodeWithScore]:
        """The promotion of ``nodes`` fitted to ``budget_tokens`` (None: no budget) instead of this
        postprocessor's own ``budget_tokens``."""
        budget = validate_budget(budget_tokens)
        if not nodes:
            return []
        evidence = [self._evidence(nws) for nws in nodes]
        ranked = self._targets(nodes, evidence)
        hits = [
            (*hs, max(0.0, ev))
            for hs, ev in ((_span(nws.node), ev) for nws, ev in zip(nodes, evidence))
            if hs is not None
        ]
        selected: List[NodeWithScore] = []
        spans: List[Tuple[str, int, int]] = []
        ids = set()
        used = 0
        taken = 0
        log: Optional[List[Dict[str, Any]]] = [] if _stages.active() else None  # explain only
        k = self._passages(ranked, hits, query_bundle, budget)
        for t in ranked:
            node: BaseNode = t.get("source", t["node"])
            sp = _span(node)
            if node.node_id in ids:
                continue
            if self._overlaps(sp, spans):
                if log is not None:
                    log.append(
                        {"id": node.node_id, "from": t["children"], "outcome": "skipped: overlaps a selected node"}
                    )
                continue
            evidence = min(1.0, max(0.0, t["evidence"]))
            prov: Dict[str, Any] = {"stage": "parent_promotion", "evidence": evidence, "promoted_from": t["children"]}
            if t["children"]:
                prov["method"] = get_provenance(nodes[t["first"]]).get("method", "umgp")
            pieces: Optional[List[Tuple[BaseNode, Optional[int]]]] = [(node, None)]
            if budget is not None:
                left = budget - used
                room = left // (k - taken) if taken < k else left
                pieces = self._budgeted(node, room, hits, spans, not selected, prov, query_bundle)
                if pieces is None:
                    if log is not None:
                        log.append(
                            {
                                "id": node.node_id,
                                "from": t["children"],
                                "outcome": f"cut: no sentence with evidence fits the {room} tokens left",
                            }
                        )
                    if room < left:  # its share was too small: the next node may use it
                        continue
                    break
            ids.add(node.node_id)
            for piece, n_tok in pieces:
                selected.append(annotate(NodeWithScore(node=piece, score=evidence), **prov))
                psp = _span(piece)
                if psp is not None:
                    spans.append(psp)
                used += n_tok or 0
            if log is not None:
                log.append(
                    {
                        "id": node.node_id,
                        "from": t["children"],
                        "evidence": evidence,
                        "outcome": f"fitted ({prov['fit_mode']})" if "fit_mode" in prov else "taken whole",
                        "pieces": [piece_key(p) for p, _ in pieces],
                    }
                )
            taken += 1
            if self.top_n is not None and taken >= self.top_n:
                break
            if budget is not None and used >= budget:
                break
        _stages.stage(
            "parent_promotion",
            {"candidates": len(ranked), "selected": len(selected), "tokens": used},
            lambda: self._promotion_detail(ranked, log or [], used, budget),
        )
        return selected

    def _promotion_detail(
        self, ranked: List[Dict[str, Any]], log: List[Dict[str, Any]], used: int, budget: Optional[int]
    ) -> Dict[str, Any]:
        seen = {d["id"] for d in log}
        cut = [t["node"].node_id for t in ranked if t["node"].node_id not in seen]
        return {
            "took": {
                "candidates": len(ranked),
                "budget_tokens": budget,
                "top_n": self.top_n,
                "max_overlap": self.max_overlap,
            },
            "decided": {
                "promotions": [{"child": c, "parent": t["node"].node_id} for t in ranked for c in t["children"]],
                "steps": log,
                "tokens_used": used,
                "not_reached": cut,
            },
            "why": "Fine hits give way to their parent (siblings add their evidence); parents are taken "
            "best evidence first, skipping overlaps, and fitted to the tokens left.",
        }
