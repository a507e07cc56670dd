"""ParentPromotionPostprocessor: fine hits give way to their parent, overlaps are skipped.

Works on any nodes whose PARENT relationship points into ``docstore``: the units of
:class:`MultiGranularityNodeParser` and the leaves of LlamaIndex's ``HierarchicalNodeParser``
alike, so it is a drop-in alternative to ``AutoMergingRetriever``.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from llama_index.core.bridge.pydantic import Field, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_ext_causalrag.multigranularity.entropy import span_overlap
from llama_index_ext_causalrag.provenance import annotate, get_provenance
from llama_index_ext_causalrag.tokens import count_tokens

logger = logging.getLogger(__name__)


def _span(node: BaseNode) -> Optional[Tuple[str, int, int]]:
    s, e = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
    if s is None or e is None:
        return None
    return (node.ref_doc_id or "", int(s), int(e))


class ParentPromotionPostprocessor(BaseNodePostprocessor):
    """UMGP parent promotion (Jung & Wang 2026, section 3.5).

    Walk the ranked nodes; a node with a parent in ``docstore`` is replaced by that parent;
    siblings sharing a parent add their evidence (their scores) into it, clipped to [0, 1].
    Candidates are then taken best-first (by summed evidence if ``sort_by_evidence``, else in
    the order their first child appeared); one whose character span overlaps an already
    selected node by more than ``max_overlap`` of the shorter span is skipped. Stops after
    ``top_n`` nodes or once ``budget_tokens`` are spent (the node crossing the budget is kept,
    the caller truncates it).
    """

    docstore: BaseDocumentStore = Field(exclude=True, description="Holds the parent nodes.")
    top_n: Optional[int] = Field(default=10, description="Maximum nodes returned; None for no cap.")
    budget_tokens: Optional[int] = Field(
        default=None, description="Stop once this many tokens are selected; None for no budget."
    )
    max_overlap: float = Field(
        default=0.75, ge=0.0, le=1.0,
        description="Skip a node sharing more than this share of the shorter span with a selected one.",
    )
    sort_by_evidence: bool = Field(
        default=True, description="Order candidates by summed evidence instead of first appearance."
    )
    evidence_key: Optional[str] = Field(
        default=None,
        description="Provenance key holding a node's evidence (e.g. 'P' after EntropyFusionRetriever); "
        "None uses the node score.",
    )

    @field_validator("top_n")
    @classmethod
    def _check_top_n(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v <= 0:
            raise ValueError(f"top_n must be >= 1 or None, got {v!r}; use None for no cap.")
        return v

    @field_validator("budget_tokens")
    @classmethod
    def _check_budget(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v <= 0:
            raise ValueError(
                f"budget_tokens must be a positive number of tokens, got {v!r}; use None for no budget."
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

    def _parent_of(self, node: BaseNode, cache: Dict[str, Optional[BaseNode]]) -> Optional[BaseNode]:
        rel = node.parent_node
        if rel is None:
            return None
        pid = rel.node_id
        if pid not in cache:
            cache[pid] = self.docstore.get_node(pid, raise_error=False)
            if cache[pid] is None:
                logger.warning(
                    "ParentPromotionPostprocessor: parent %r of %r is not in the docstore; "
                    "keeping the child.", pid, node.node_id,
                )
        return cache[pid]

    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        if not nodes:
            return []
        cache: Dict[str, Optional[BaseNode]] = {}
        targets: Dict[str, Dict[str, Any]] = {}
        for rank, nws in enumerate(nodes):
            parent = self._parent_of(nws.node, cache)
            tgt = parent if parent is not None else nws.node
            ev = self._evidence(nws)
            t = targets.get(tgt.node_id)
            if t is None:
                t = targets[tgt.node_id] = {
                    "node": tgt, "evidence": 0.0, "first": rank, "children": [], "self_hit": False,
                }
            t["evidence"] += ev
            if parent is None:
                t["self_hit"] = True
                if tgt is nws.node:
                    t["source"] = nws.node
            else:
                t["children"].append(nws.node.node_id)
        ranked = list(targets.values())
        if self.sort_by_evidence:
            ranked.sort(key=lambda t: (-min(1.0, max(0.0, t["evidence"])), t["first"]))
        selected: List[NodeWithScore] = []
        spans: List[Tuple[str, int, int]] = []
        ids = set()
        used = 0
        for t in ranked:
            node: BaseNode = t.get("source", t["node"])
            sp = _span(node)
            if node.node_id in ids:
                continue
            if sp is not None and any(
                d == sp[0] and span_overlap((s, e), (sp[1], sp[2])) > self.max_overlap for d, s, e in spans
            ):
                continue
            evidence = min(1.0, max(0.0, t["evidence"]))
            prov = {
                "stage": "parent_promotion",
                "evidence": evidence,
                "promoted_from": t["children"],
            }
            if not t["children"]:
                selected.append(annotate(NodeWithScore(node=node, score=evidence), **prov))
            else:
                prov["method"] = get_provenance(nodes[t["first"]]).get("method", "umgp")
                selected.append(annotate(NodeWithScore(node=node, score=evidence), **prov))
            ids.add(node.node_id)
            if sp is not None:
                spans.append(sp)
            if self.top_n is not None and len(selected) >= self.top_n:
                break
            if self.budget_tokens is not None:
                used += count_tokens(node.get_content(metadata_mode=MetadataMode.NONE))
                if used >= self.budget_tokens:
                    break
        return selected
