"""Pure rank-fusion helpers: NumPy and the standard library only, no llama_index."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

DEFAULT_RRF_K = 60.0


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]],
    k: float = DEFAULT_RRF_K,
    weights: Optional[Sequence[float]] = None,
) -> Dict[str, float]:
    """Weighted RRF: score(d) = sum_i w_i / (k + rank_i(d)), ranks from 1.

    Cormack, Clarke and Buettcher, SIGIR 2009. Keys are node ids, never node text.
    Returns ids sorted by descending score (ties keep first-seen order).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k!r}; the usual value is 60.")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} weights for {len(rankings)} rankings; pass one weight per ranking.")
    scores: Dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + w / (k + rank)
    return dict(sorted(scores.items(), key=lambda kv: -kv[1]))


def min_max_normalize(scores: np.ndarray) -> np.ndarray:
    """(s - min) / (max - min), shape preserved; all-equal input maps to ones."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s.copy()
    lo, hi = float(s.min()), float(s.max())
    if hi - lo <= 1e-12:
        return np.ones_like(s)
    return (s - lo) / (hi - lo)


class DescStr(str):
    """A string that sorts in descending order."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)


def top_k_by_score_then_id(scores: np.ndarray, id_of: Callable[[int], str], k: int, margin: int = 16) -> List[int]:
    """Indices of the k best, ordered by (score desc, id desc): the order ``VectorStoreExpert``
    gives a store's answer, so exact ties (duplicate texts, whose vectors are equal) come out in
    the same order whichever backend scored them. The best ``k + margin`` by score are ordered,
    so a tie at the cut is decided by id too. ``id_of(i)``: the id of row ``i`` (called for
    those candidates only)."""
    s = np.asarray(scores)
    cand = top_k_indices(s, k + margin).tolist()
    return sorted(cand, key=lambda j: (-s[j], DescStr(id_of(j))))[: max(int(k), 0)]


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first (argpartition, then sort of k)."""
    s = np.asarray(scores)
    k = min(int(k), s.shape[0])
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if k < s.shape[0]:
        part = np.argpartition(-s, k - 1)[:k]
    else:
        part = np.arange(s.shape[0])
    return part[np.lexsort((part, -s[part]))]
