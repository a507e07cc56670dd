"""Cutting a promoted node: its span, whether it is a whole document, its head within a budget."""

from __future__ import annotations

import logging
from typing import Optional, Tuple

from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_ext_causalrag.multigranularity.windows import GRANULARITY_MAX_KEY, SENTENCE_SPAN_KEY
from llama_index_ext_causalrag.text.fitting import leading_sentences
from llama_index_ext_causalrag.text.sentences import sentence_spans
from llama_index_ext_causalrag.text.tokens import count_tokens, truncate_to_tokens

logger = logging.getLogger(__name__)


def is_whole_document(node: BaseNode) -> bool:
    """Whether ``node`` is a whole document's window: a :class:`MultiGranularityNodeParser` unit
    starting at the first sentence and shorter than its coarsest granularity (the document ended
    first). A node without those metadata (e.g. ``HierarchicalNodeParser``'s) counts as whole."""
    span, g_max = node.metadata.get(SENTENCE_SPAN_KEY), node.metadata.get(GRANULARITY_MAX_KEY)
    if span is None or g_max is None:
        return True
    return int(span[0]) == 0 and int(span[1]) - int(span[0]) < int(g_max)


def node_span(node: BaseNode) -> Optional[Tuple[str, int, int]]:
    s, e = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
    if s is None or e is None:
        return None
    return (node.ref_doc_id or "", int(s), int(e))


def prefix_end(text: str, budget: int) -> int:
    """The end of the longest prefix of ``text`` within ``budget`` tokens (cut at a space when near)."""
    return len(truncate_to_tokens(text, budget)) if budget > 0 else 0


def cut_to_tokens(node: BaseNode, budget: int) -> Tuple[BaseNode, int]:
    """``node`` cut to ``budget`` tokens (:func:`~llama_index_ext_causalrag.text.fitting.leading_sentences`:
    its leading whole sentences if one fits, else a token-truncated prefix), said in the log. Used
    when the budget is smaller than every candidate."""
    piece, n_tok = leading_sentences(node, budget)
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    fits = any(count_tokens(text[a:b]) <= budget for a, b in sentence_spans(text))
    logger.warning(
        "ParentPromotionPostprocessor: budget_tokens=%d is smaller than every candidate; returning "
        "the best one (%r, %d tokens) cut to the budget (%s).",
        budget,
        node.node_id,
        count_tokens(text),
        "whole sentences" if fits else "token-truncated text",
    )
    return piece, n_tok


__all__ = ["cut_to_tokens", "is_whole_document", "node_span", "prefix_end"]
