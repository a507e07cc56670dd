"""Fitting a passage to a token budget: which sentences (or which one window of sentences)
hold the most evidence within ``budget`` tokens. Pure NumPy, used by parent promotion.

The selection (:func:`best_sentences`, :func:`best_window`) lives in the text layer
(:mod:`llama_index_ext_causalrag.text.selection`), shared with the other methods' budget cuts, and is
re-exported here unchanged."""

from __future__ import annotations

from typing import Mapping, Sequence, Tuple

import numpy as np

from llama_index_ext_causalrag.text.selection import best_sentences, best_window  # noqa: F401  (re-export)


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


def idf_overlap(
    query_terms: Sequence[str], sentence_terms: Sequence[Sequence[str]], idf: Mapping[str, float]
) -> np.ndarray:
    """``sum(idf[t] for t in set(query_terms) & set(terms))`` for each sentence's terms, shape ``(n,)``.

    BM25 at the length of a sentence: a term rarely occurs twice, so the term-frequency saturation
    and length normalisation of BM25 (Robertson & Zaragoza 2009) change little and are left out.
    """
    q = set(query_terms)
    return np.asarray(
        [sum(idf.get(t, 0.0) for t in q.intersection(terms)) for terms in sentence_terms], dtype=np.float64
    )


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
