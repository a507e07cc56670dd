"""Character spans: how much two half-open spans overlap (standard library only)."""

from __future__ import annotations

from typing import Tuple


def span_overlap(a: Tuple[int, int], b: Tuple[int, int]) -> float:
    """Shared length of half-open spans ``a`` and ``b`` over the length of the shorter one
    (0 if disjoint or empty)."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    shorter = min(a[1] - a[0], b[1] - b[0])
    if inter <= 0 or shorter <= 0:
        return 0.0
    return inter / shorter
