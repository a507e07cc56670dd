"""Provenance: why a node came back, kept out of the text the LLM and the embedder see."""

from __future__ import annotations

from typing import Any, Dict, Optional

from llama_index.core.schema import BaseNode, NodeWithScore

PROVENANCE_KEY = "causalrag_provenance"


def annotate(nws: NodeWithScore, score: Optional[float] = None, **prov: Any) -> NodeWithScore:
    """Return a copy of ``nws`` whose node carries ``prov`` under ``PROVENANCE_KEY``.

    The node is copied, never mutated: ``NodeWithScore.metadata`` is the shared node's
    metadata. The key is excluded from LLM and embedding text. Existing provenance is
    merged (new keys win), so stages can add to what earlier stages wrote.
    """
    n = nws.node
    merged = {**n.metadata.get(PROVENANCE_KEY, {}), **prov}
    excluded_llm = list(n.excluded_llm_metadata_keys)
    excluded_embed = list(n.excluded_embed_metadata_keys)
    if PROVENANCE_KEY not in excluded_llm:
        excluded_llm.append(PROVENANCE_KEY)
    if PROVENANCE_KEY not in excluded_embed:
        excluded_embed.append(PROVENANCE_KEY)
    node = n.model_copy(
        update={
            "metadata": {**n.metadata, PROVENANCE_KEY: merged},
            "excluded_llm_metadata_keys": excluded_llm,
            "excluded_embed_metadata_keys": excluded_embed,
        }
    )
    return NodeWithScore(node=node, score=nws.score if score is None else float(score))


def get_provenance(node: BaseNode | NodeWithScore) -> Dict[str, Any]:
    """The provenance dict of a node (empty when it has none)."""
    n = node.node if isinstance(node, NodeWithScore) else node
    return dict(n.metadata.get(PROVENANCE_KEY, {}))
