"""How many passages a token budget holds: evidence-aware allocation. Pure NumPy.

Parent promotion's greedy takes whole passages in rank order and cuts the first one that does not
fit to its best sentences. :func:`passages_for_budget` decides per query instead: for each ``k``
it simulates giving each of the first ``k`` passages an equal share of the tokens left (a passage
that fits its share goes in whole, else its best sentences within it, :func:`best_sentences`),
the passages after the ``k``-th the tokens still left, and scores the plan by the evidence it
covers, ``sum_c e_c * covered_c``: ``e_c`` a passage's evidence (its fused ``P``), ``covered_c``
the share of it the plan keeps, a sentence an earlier passage already took counting nothing.
``k = 1`` is the greedy.
"""

from __future__ import annotations

from typing import Hashable, List, NamedTuple, Sequence, Set, Tuple

import numpy as np

from llama_index_ext_causalrag.multigranularity.fitting import best_sentences

DEFAULT_SMOOTHING = 0.8  # share of a passage's evidence taken as spread evenly (HolisQA dev, docs/umgp.md)


class Passage(NamedTuple):
    """One candidate passage: its evidence ``e``, its sentences' evidence ``ev`` and tokens ``tok``
    (``(n,)`` each) and a key per sentence (equal keys: the same sentence in two passages)."""

    e: float
    ev: np.ndarray
    tok: np.ndarray
    keys: Sequence[Hashable]


def covered(
    p: Passage,
    room: float,
    taken: Set[Hashable],
    smoothing: float = DEFAULT_SMOOTHING,
) -> Tuple[float, float, List[Hashable]]:
    """``(share of p's evidence kept, tokens spent, sentence keys newly taken)`` given ``room``
    tokens: the whole passage if it fits, else its best sentences not in ``taken`` within ``room``
    (:func:`best_sentences`, each charged one token for the join). The share is ``(1 - smoothing)
    * ev kept / ev + smoothing * tokens kept / tokens``: ``smoothing`` of the evidence is taken as
    spread evenly over the text (the sentence evidence is a prior, not where the gold is)."""
    ev, tok = np.asarray(p.ev, dtype=np.float64), np.asarray(p.tok, dtype=np.float64)
    free = np.asarray([k not in taken for k in p.keys], dtype=bool)
    total, whole = float(ev.sum()), float(tok.sum())
    if whole <= room:
        kept = [i for i in range(len(ev)) if free[i]]
        spent = whole
    else:
        runs = best_sentences(np.where(free, ev, 0.0), tok, room)
        kept = [i for a, b in runs for i in range(a, b)]
        spent = float(tok[kept].sum() + len(kept))
    if not kept:
        return 0.0, spent if whole <= room else 0.0, []
    share = smoothing * float(tok[kept].sum()) / max(whole, 1.0)
    if total > 0:
        share += (1.0 - smoothing) * float(ev[kept].sum()) / total
    return share, spent, [p.keys[i] for i in kept]


def plan_evidence(passages: Sequence[Passage], budget: float, k: int, smoothing: float = DEFAULT_SMOOTHING) -> float:
    """The evidence the plan "equal shares among the first ``k`` passages" covers within ``budget``."""
    left, score = float(budget), 0.0
    taken: Set[Hashable] = set()
    for c, p in enumerate(passages):
        if left <= 0:
            break
        room = left // (k - c) if c < k else left
        share, spent, new = covered(p, room, taken, smoothing)
        score += max(0.0, float(p.e)) * share
        left -= spent
        taken.update(new)
    return score


def passages_for_budget(
    passages: Sequence[Passage], budget: float, max_k: int | None = None, smoothing: float = DEFAULT_SMOOTHING
) -> int:
    """The ``k`` in ``1..max_k`` (default: all passages) whose plan covers the most evidence; ties
    to the smaller ``k`` (1: the greedy). ``passages`` in rank order."""
    n = len(passages) if max_k is None else min(max_k, len(passages))
    if n <= 1:
        return 1
    scores: List[float] = [plan_evidence(passages, budget, k, smoothing) for k in range(1, n + 1)]
    best = max(scores)
    return 1 + next(i for i, s in enumerate(scores) if s >= best - 1e-12)


__all__ = ["DEFAULT_SMOOTHING", "Passage", "covered", "passages_for_budget", "plan_evidence"]
