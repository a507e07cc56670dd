"""Token counting and budget cuts with the tokenizer of ``llama_index.core`` Settings."""

from __future__ import annotations

from typing import List, Sequence, Tuple

from llama_index.core.schema import MetadataMode, NodeWithScore
from llama_index.core.settings import Settings


def count_tokens(text: str) -> int:
    """Number of tokens of ``text`` under ``Settings.tokenizer``."""
    return len(Settings.tokenizer(text))


def validate_budget(budget_tokens: int | None, name: str = "budget_tokens") -> None:
    if budget_tokens is not None and budget_tokens <= 0:
        raise ValueError(
            f"{name} must be a positive number of tokens, got {budget_tokens!r}; "
            "use None for no budget."
        )


def cut_to_budget(
    nodes: Sequence[NodeWithScore], budget_tokens: int, truncate_last: bool = True
) -> List[Tuple[NodeWithScore, float]]:
    """Take nodes in rank order until ``budget_tokens`` is spent.

    Returns ``(node, fraction)`` pairs: ``fraction`` is the share of the node's text that
    fits (1.0 for whole nodes; below 1.0 only for the last one, when ``truncate_last``).
    The best node is never dropped: if it alone exceeds the budget it is truncated.
    """
    validate_budget(budget_tokens)
    out: List[Tuple[NodeWithScore, float]] = []
    left = budget_tokens
    for nws in nodes:
        n_tok = max(1, count_tokens(nws.node.get_content(metadata_mode=MetadataMode.NONE)))
        if n_tok <= left:
            out.append((nws, 1.0))
            left -= n_tok
        else:
            if truncate_last or not out:
                out.append((nws, left / n_tok))
            break
        if left <= 0:
            break
    return out
