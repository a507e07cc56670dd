"""Which sentences of a passage to keep within a token budget: pure NumPy (no ``llama_index``).

:func:`best_sentences` (greedy by evidence per token) and :func:`best_window` (the best
contiguous run) pick; :func:`term_overlap` is the query evidence the budget cuts of every method
score sentences by. :mod:`.fitting` applies them to nodes; UMGP's parent promotion uses them
with its own evidence.
"""

from __future__ import annotations

from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np


def _evidence_and_tokens(evidence: np.ndarray, tokens: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Both as float64 ``(n,)`` arrays, checked aligned and non-negative."""
    ev = np.asarray(evidence, dtype=np.float64)
    tok = np.asarray(tokens, dtype=np.float64)
    if ev.shape != tok.shape or ev.ndim != 1:
        raise ValueError(f"evidence {ev.shape} and tokens {tok.shape} must be one-dimensional and aligned.")
    if ev.size and (ev.min() < 0 or tok.min() < 0):
        raise ValueError("evidence and tokens must be >= 0.")
    return ev, tok


def best_window(evidence: np.ndarray, tokens: np.ndarray, budget: float) -> Tuple[int, int]:
    """Contiguous run ``[i, j)`` of items (sentences) with ``sum(tokens[i:j]) <= budget`` that holds
    the most ``evidence``; shapes ``(n,)``, evidence ``>= 0``.

    Budget-aware promotion: when a parent does not fit the tokens left, keep the part of it
    that holds the evidence of its fine hits. Ties (equal evidence) go to the run holding more
    tokens, then to the run whose centre is nearest the evidence centroid, then to the earliest.
    Returns ``(i, i)`` (empty) when not even one item fits.
    """
    ev, tok = _evidence_and_tokens(evidence, tokens)
    n = ev.size
    ce = np.concatenate([[0.0], np.cumsum(ev)])
    ct = np.concatenate([[0.0], np.cumsum(tok)])
    cw = np.concatenate([[0.0], np.cumsum(ev * np.arange(n))])
    total = ce[-1]
    centroid = cw[-1] / total if total > 0 else (n - 1) / 2.0
    best: Tuple[float, float, float] | None = None
    out = (0, 0)
    j = 0
    for i in range(n):
        j = max(j, i)
        while j < n and ct[j + 1] - ct[i] <= budget:
            j += 1
        if j == i:
            continue
        key = (round(ce[j] - ce[i], 12), ct[j] - ct[i], -abs((i + j - 1) / 2.0 - centroid))
        if best is None or key > best:
            best, out = key, (i, j)
    return out


def best_sentences(evidence: np.ndarray, tokens: np.ndarray, budget: float) -> List[Tuple[int, int]]:
    """Runs ``[(i, j), ...]`` (sorted, disjoint) of the sentences picked greedily by evidence per
    token (the knapsack greedy) while their ``tokens`` fit ``budget``; shapes ``(n,)``.

    Sentences without evidence are never picked, so the tokens left go to the next candidate.
    Each picked sentence is charged one extra token for the join. Ties go to the earlier one.
    """
    ev, tok = _evidence_and_tokens(evidence, tokens)
    room = float(budget)
    keep: List[int] = []
    for k in np.argsort(-(ev / np.maximum(tok, 1.0)), kind="stable"):
        if ev[k] <= 0:
            break
        if tok[k] + 1 <= room:
            keep.append(int(k))
            room -= tok[k] + 1
    runs: List[List[int]] = []
    for k in sorted(keep):
        if runs and runs[-1][1] == k:
            runs[-1][1] = k + 1
        else:
            runs.append([k, k + 1])
    return [(i, j) for i, j in runs]


def term_overlap(
    query_terms: Iterable[str],
    sentence_terms: Sequence[Iterable[str]],
    idf: Optional[Mapping[str, float]] = None,
) -> np.ndarray:
    """``sum(idf[t] for t in set(query_terms) & set(terms))`` for each sentence's terms, shape ``(n,)``;
    without ``idf`` every shared term counts 1 (plain term overlap).

    BM25 at the length of a sentence: a term rarely occurs twice, so BM25's term-frequency
    saturation and length normalisation (Robertson & Zaragoza 2009) change little and are left out.
    """
    q = set(query_terms)
    if idf is None:
        return np.asarray([len(q.intersection(t)) for t in sentence_terms], dtype=np.float64)
    return np.asarray(
        [sum(max(0.0, idf.get(t, 0.0)) for t in q.intersection(t)) for t in sentence_terms], dtype=np.float64
    )


__all__ = ["best_sentences", "best_window", "term_overlap"]
