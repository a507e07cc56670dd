"""Token counting and budget cuts with the tokenizer of ``llama_index.core`` Settings."""

from __future__ import annotations

import numbers
from functools import lru_cache
from typing import Any, Callable, List, Optional, Sequence, Tuple

from llama_index.core.schema import MetadataMode, NodeWithScore
from llama_index.core.settings import Settings

from llama_index_ext_causalrag.text.pieces import cut_piece

# Retrieval counts the same texts again and again (a parent's sentences at each budget, the
# same units for query after query): counts are cached per (tokenizer, text).
TOKEN_COUNT_CACHE_SIZE = 16384


@lru_cache(maxsize=TOKEN_COUNT_CACHE_SIZE)
def _cached_count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text))


def count_tokens(text: str) -> int:
    """Number of tokens of ``text`` under ``Settings.tokenizer`` (cached per tokenizer and text)."""
    tokenizer = Settings.tokenizer
    try:
        return _cached_count(tokenizer, text)
    except TypeError:  # an unhashable tokenizer: count without the cache
        return len(tokenizer(text))


def validate_budget(budget_tokens: int | None, name: str = "budget_tokens") -> Optional[int]:
    """``budget_tokens`` as an int: a whole number of tokens >= 1, or None for no budget; anything
    else (``0``, ``2.5``, ``nan``, ``"100"``, ``True``) is a ``ValueError`` naming the value."""
    if budget_tokens is None:
        return None
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, numbers.Integral) or budget_tokens <= 0:
        raise ValueError(
            f"{name} must be a positive whole number of tokens (an int >= 1), got "
            f"{type(budget_tokens).__name__} {budget_tokens!r}; use None for no budget."
        )
    return int(budget_tokens)


def node_tokens(nws: NodeWithScore) -> int:
    """Tokens of a node's text (no metadata), at least 1."""
    return max(1, count_tokens(nws.node.get_content(metadata_mode=MetadataMode.NONE)))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` with at most ``max_tokens`` tokens, cut at a space when one
    lies in its second half; at least one character. Binary search: O(log n) token counts."""
    if count_tokens(text) <= max_tokens:
        return text
    lo, hi = 1, len(text)
    while lo < hi:  # largest k with count_tokens(text[:k]) <= max_tokens
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = text.rfind(" ", 0, lo)
    return text[: cut if cut > lo // 2 else lo]


def truncate_node(nws: NodeWithScore, max_tokens: int) -> NodeWithScore:
    """A copy of ``nws`` whose text is its head within ``max_tokens`` (:func:`truncate_to_tokens`),
    under the same node id, the cut in its provenance and ``end_char_idx`` moved to match
    (:func:`~llama_index_ext_causalrag.text.pieces.cut_piece`); a node without text is returned whole."""
    node = nws.node
    if not hasattr(node, "text"):
        return nws
    cut = truncate_to_tokens(node.get_content(metadata_mode=MetadataMode.NONE), max(1, max_tokens))
    return NodeWithScore(node=cut_piece(node, 0, len(cut)), score=nws.score)


def cut_to_budget(
    nodes: Sequence[NodeWithScore],
    budget_tokens: int,
    truncate_last: bool = True,
    token_counts: Optional[Sequence[int]] = None,
    truncate_text: bool = False,
    fit: Optional[Callable[[NodeWithScore, int], List[NodeWithScore]]] = None,
) -> List[Tuple[NodeWithScore, float]]:
    """Take nodes in rank order until ``budget_tokens`` is spent: the one budget cut of the package
    (every method's fitting stage, :class:`~llama_index_ext_causalrag.text.fitting.FittingStage`,
    and the benchmark's scoring run through it).

    Returns ``(node, fraction)`` pairs: ``fraction`` is the share of the node's tokens that
    fits (1.0 for whole nodes; below 1.0 only for the last one). The node that does not fit is
    cut when ``truncate_last`` (else dropped); the best node is never dropped: if it alone exceeds
    the budget it is cut. With ``truncate_text`` the cut node is a copy holding only the text that
    fits (:func:`truncate_node`); otherwise it is returned as it is and only ``fraction`` says how
    much of it fits (the benchmark scores that share of its span). Whole nodes are the input
    objects. ``token_counts`` (one per node, from :func:`node_tokens`) saves recounting when the
    same ranking is cut at several budgets. ``fit`` (with ``truncate_text``; e.g. a
    :class:`~llama_index_ext_causalrag.text.fitting.QueryEvidence` fitter) replaces the truncation,
    whatever ``truncate_last`` says: ``fit(node, tokens_left)`` gives the pieces of the cut node,
    each with its share of the node's tokens.
    """
    validate_budget(budget_tokens)
    out: List[Tuple[NodeWithScore, float]] = []
    left = budget_tokens
    for i, nws in enumerate(nodes):
        n_tok = token_counts[i] if token_counts is not None else node_tokens(nws)
        if n_tok <= left:
            out.append((nws, 1.0))
            left -= n_tok
            if left <= 0:
                break
            continue
        if truncate_text and fit is not None:
            out.extend((p, node_tokens(p) / n_tok) for p in fit(nws, left))
        elif truncate_last or not out:
            out.append((truncate_node(nws, left) if truncate_text else nws, left / n_tok))
        break
    return out


def fit_to_budget(
    nodes: Sequence[NodeWithScore],
    budget_tokens: int,
    fit: Optional[Callable[[NodeWithScore, int], List[NodeWithScore]]] = None,
    truncate_last: bool = True,
) -> List[NodeWithScore]:
    """``nodes`` in rank order within ``budget_tokens``: whole nodes while they fit, then the next
    one truncated if at least one token is left (:func:`cut_to_budget` with ``truncate_text``; with
    ``truncate_last=False`` only the best node, when it alone exceeds the budget), or given to
    ``fit`` (its best sentences: ``text.fitting``). The best node is never dropped. Nodes already
    within the budget are returned as they are."""
    return [n for n, _ in cut_to_budget(nodes, budget_tokens, truncate_last=truncate_last, truncate_text=True, fit=fit)]
