"""Pieces of a node: a budget cut keeps the node's id and records where it cut in provenance.

A fitted or truncated piece of node ``n`` *is* ``n`` as far as LlamaIndex's tools know:
``piece.node_id == n.node_id``, so ``RetrieverEvaluator`` (hit rate, MRR), a docstore lookup or
a ``node_postprocessors`` filter join it to the index node it came from. Which characters of
``n``'s text it holds is provenance (``get_provenance(piece)["cut"] == [a, b]``, offsets into
``n.get_content(MetadataMode.NONE)``), kept out of LLM and embedding text like the rest of it.
Code that dedups or fuses a list in which several pieces of one node may sit together keys by
:func:`piece_key`, never by ``node_id`` alone.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Set

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance

CUT_KEY = "cut"


def cut_of(node: BaseNode | NodeWithScore) -> "tuple[int, int] | None":
    """``(a, b)``: the characters of its source node's text a piece holds; ``None`` for a whole node."""
    cut = get_provenance(node).get(CUT_KEY)
    return (int(cut[0]), int(cut[1])) if cut else None


def piece_key(node: BaseNode | NodeWithScore) -> str:
    """A key telling apart pieces of one node: ``node_id`` for a whole node, ``node_id#a-b`` for
    the piece holding characters ``a:b`` of it. Key lists by it where pieces may meet."""
    n = node.node if isinstance(node, NodeWithScore) else node
    cut = cut_of(n)
    return n.node_id if cut is None else f"{n.node_id}#{cut[0]}-{cut[1]}"


def cut_piece(node: BaseNode, a: int, b: int) -> BaseNode:
    """A copy of ``node`` holding characters ``a:b`` of its text, under the same id.

    The cut is recorded as provenance ``cut`` relative to the *source* node's text, so cutting
    a piece again composes (a piece of ``[100, 400]`` cut to ``0:50`` records ``[100, 150]``);
    ``start_char_idx`` / ``end_char_idx`` move to match. ``a:b`` covering the whole text returns
    ``node`` itself."""
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    if a <= 0 and b >= len(text):
        return node
    prior = cut_of(node)
    off = prior[0] if prior is not None else 0
    meta = node.metadata
    prov = {**meta.get(PROVENANCE_KEY, {}), CUT_KEY: [off + a, off + b]}
    update: Dict[str, Any] = {
        "text": text[a:b],
        "metadata": {**meta, PROVENANCE_KEY: prov},
        "excluded_llm_metadata_keys": _with(node.excluded_llm_metadata_keys, PROVENANCE_KEY),
        "excluded_embed_metadata_keys": _with(node.excluded_embed_metadata_keys, PROVENANCE_KEY),
    }
    start = getattr(node, "start_char_idx", None)
    if start is not None:
        update.update(start_char_idx=start + a, end_char_idx=start + b)
    return node.model_copy(update=update)


def _with(keys: "list[str]", key: str) -> "list[str]":
    return list(keys) if key in keys else [*keys, key]


def unique_pieces(nodes: Sequence[NodeWithScore]) -> List[NodeWithScore]:
    """``nodes`` without repeats, in order, a repeat being the same :func:`piece_key`."""
    seen: Set[str] = set()
    out: List[NodeWithScore] = []
    for n in nodes:
        key = piece_key(n)
        if key not in seen:
            seen.add(key)
            out.append(n)
    return out


class PieceRetrieval:
    """Mixed into a ``BaseRetriever`` (before it) whose results may hold several pieces of one node.

    ``BaseRetriever.retrieve`` / ``aretrieve`` end by dropping every node whose ``node_id`` came
    earlier in the list (``_handle_recursive_retrieval``), which would keep only the first piece of
    a budget-fitted parent; this drops repeats by :func:`piece_key` instead. Our retrievers return
    no ``IndexNode``, so there is nothing to recurse into."""

    def _handle_recursive_retrieval(self, query_bundle: QueryBundle, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        return unique_pieces(nodes)

    async def _ahandle_recursive_retrieval(
        self, query_bundle: QueryBundle, nodes: List[NodeWithScore]
    ) -> List[NodeWithScore]:
        return unique_pieces(nodes)
