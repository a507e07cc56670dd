"""Pseudo-relevance feedback on one candidate list, without an LLM. Pure NumPy.

* Dense (Rocchio 1971): ``q' = q / |q| + beta * mean(e_1 .. e_m)``, the query vector moved
  towards the unit-normalised vectors of the list's top ``m`` units, then searched again.
* Lexical (RM3, Abdul-Jaleel et al., TREC 2004, without the LLM-free model's smoothing): a
  term's weight is ``sum_d s_d / sum(s) * tf(t, d) / |d|`` over the top ``m`` units ``d``
  (``s_d`` their BM25 scores); the best ``n`` terms not in the query are added with
  ``weight`` of the query's term mass and the list is scored again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, Sequence

import numpy as np


@dataclass(frozen=True)
class Feedback:
    """What :class:`ExpertSource` does to each list: ``dense`` (beta, 0 off), ``terms`` (lexical
    expansion terms, 0 off) at ``weight`` of the query's term mass, from the top ``depth`` units."""

    dense: float = 0.0
    terms: int = 0
    weight: float = 0.5
    depth: int = 10

    @property
    def active(self) -> bool:
        return self.dense > 0 or self.terms > 0


def rocchio(query: np.ndarray, top: np.ndarray, beta: float) -> np.ndarray:
    """``q / |q| + beta * mean of the unit-normalised rows of top`` ``(m, d)``; shape ``(d,)``.

    Rocchio, "Relevance feedback in information retrieval" (1971), positive feedback only."""
    q = np.asarray(query, dtype=np.float64)
    qn = float(np.linalg.norm(q))
    q = q / qn if qn > 0 else q
    rows = np.asarray(top, dtype=np.float64).reshape(-1, q.size)
    if not rows.size or beta <= 0:
        return q.astype(np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    centroid = (rows / np.where(norms == 0, 1.0, norms)).mean(axis=0)
    return (q + beta * centroid).astype(np.float32)


def expansion_terms(
    docs: Sequence[Sequence[str]],
    scores: np.ndarray,
    query_terms: Sequence[str],
    n_terms: int,
) -> Dict[str, float]:
    """The ``n_terms`` best RM3 expansion terms of the feedback units ``docs`` (their BM25 terms)
    with their weights, summing to 1; ``scores`` ``(m,)`` the units' BM25 scores (>= 0).

    ``w(t) = sum_d s_d / sum(s) * tf(t, d) / |d|``, terms of the query left out; ties by term."""
    s = np.clip(np.asarray(scores, dtype=np.float64), 0.0, None)
    if n_terms <= 0 or not len(docs) or s.sum() <= 0:
        return {}
    s = s / s.sum()
    skip = set(query_terms)
    w: Dict[str, float] = {}
    for d, sd in zip(docs, s):
        if not d or sd <= 0:
            continue
        for t, tf in Counter(d).items():
            if t not in skip:
                w[t] = w.get(t, 0.0) + sd * tf / len(d)
    best = sorted(w.items(), key=lambda kv: (-kv[1], kv[0]))[:n_terms]
    total = sum(v for _, v in best)
    return {t: v / total for t, v in best} if total > 0 else {}


__all__ = ["Feedback", "expansion_terms", "rocchio"]
