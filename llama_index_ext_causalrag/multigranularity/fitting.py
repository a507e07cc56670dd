"""Fitting a passage to a token budget: which sentences (or which one window of sentences)
hold the most evidence within ``budget`` tokens. Pure NumPy, used by parent promotion."""

from __future__ import annotations

from typing import List, Mapping, Sequence, Tuple

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


def spread_to_sentences(sentences: np.ndarray, units: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each sentence's overlap-weighted mean of the ``scores`` of the ``units`` covering it.

    ``sentences`` ``(n, 2)`` and ``units`` ``(m, 2)`` are half-open character spans in one text,
    ``scores`` ``(m,)``; a sentence no unit overlaps scores 0. With the 2-sentence windows of
    :class:`MultiGranularityNodeParser` (stride 1) a sentence is the mean of the two windows
    holding it, so it outscores a neighbour that shares only one of them. Returns ``(n,)``.
    """
    s = np.asarray(sentences, dtype=np.float64).reshape(-1, 2)
    u = np.asarray(units, dtype=np.float64).reshape(-1, 2)
    sc = np.asarray(scores, dtype=np.float64)
    if u.shape[0] != sc.shape[0]:
        raise ValueError(f"units {u.shape} and scores {sc.shape} must be aligned.")
    if not s.size or not u.size:
        return np.zeros(s.shape[0])
    ov = np.clip(np.minimum(s[:, None, 1], u[None, :, 1]) - np.maximum(s[:, None, 0], u[None, :, 0]), 0.0, None)
    w = ov.sum(axis=1)
    return np.divide(ov @ sc, w, out=np.zeros(s.shape[0]), where=w > 0)


def _scaled(x: np.ndarray, floor: bool) -> np.ndarray:
    """``x`` scaled to [0, 1] by its maximum; ``floor``: after subtracting its minimum (min-max)."""
    x = np.asarray(x, dtype=np.float64)
    lo = x.min() if floor and x.size else 0.0
    top = (x.max() - lo) if x.size else 0.0
    return (x - lo) / top if top > 0 else np.zeros_like(x)


def idf_overlap(query_terms: Sequence[str], sentence_terms: Sequence[Sequence[str]], idf: Mapping[str, float]) -> np.ndarray:
    """``sum(idf[t] for t in set(query_terms) & set(terms))`` for each sentence's terms, shape ``(n,)``.

    BM25 at the length of a sentence: a term rarely occurs twice, so the term-frequency saturation
    and length normalisation of BM25 (Robertson & Zaragoza 2009) change little and are left out.
    """
    q = set(query_terms)
    return np.asarray([sum(idf.get(t, 0.0) for t in q.intersection(terms)) for terms in sentence_terms], dtype=np.float64)


def sentence_evidence(
    prior: np.ndarray,
    dense: np.ndarray | None = None,
    lexical: np.ndarray | None = None,
    weights: Tuple[float, float] = (0.0, 1.0),
    free: np.ndarray | None = None,
) -> np.ndarray:
    """Query evidence of the ``(n,)`` sentences of one passage, as :func:`best_sentences` takes it.

    ``E = prior * (1 + w_d * minmax(dense) + w_l * lexical / max(lexical))``: the window prior
    (the fused units' evidence spread over the sentences they cover, >= 0) re-weighted by the
    query's sentence-level scores, each scaled within the passage so that only the contrast
    between its sentences counts: ``dense`` the cosine of the query with the sentences,
    ``lexical`` e.g. :func:`idf_overlap`; ``weights = (w_d, w_l)``, a signal not given counts 0.
    A sentence the prior gives nothing keeps 0 (its tokens go to the next passage), and so does
    one outside ``free`` (a boolean ``(n,)`` mask; already in the context).
    """
    p = np.asarray(prior, dtype=np.float64)
    boost = np.ones_like(p)
    if dense is not None and weights[0] > 0:
        boost = boost + weights[0] * _scaled(dense, floor=True)
    if lexical is not None and weights[1] > 0:
        boost = boost + weights[1] * _scaled(np.clip(lexical, 0.0, None), floor=False)
    ev = p * boost
    return ev if free is None else np.where(np.asarray(free, dtype=bool), ev, 0.0)
