"""Pure scoring for UMG-RAG: expert distributions, entropy confidences, mixture, length penalty.

NumPy in, NumPy out; no ``llama_index`` import. Notation follows Jung & Wang, "Uncertainty-Aware
Hybrid Retrieval for Long-Document RAG" (arXiv 2606.13550), section 3:

* one candidate list per (expert e, granularity g): unit indices and raw scores ``s``;
* ``p_{e,g}`` = min-max normalised scores divided by their sum;
* ``c_{e,g} = 1 - H(p_{e,g}) / log n`` (normalised Shannon entropy over the n candidates);
* ``P(u) = sum_{e,g} c_{e,g} p_{e,g}(u) / sum_{e,g} c_{e,g}``;
* ``R(u) = P(u) / len_tokens(u) ** alpha`` with ``alpha = 0.5`` (the paper's square root).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Literal, Mapping, Optional, Sequence, Tuple, get_args

import numpy as np

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.text.spans import span_overlap  # noqa: F401  (re-exported)

Weighting = Literal["entropy", "equal"]
WEIGHTINGS = get_args(Weighting)
DocumentPool = Literal["units", "lists"]
DOCUMENT_POOLS = get_args(DocumentPool)


def expert_distribution(scores: np.ndarray) -> np.ndarray:
    """``p_i = m_i / sum_j m_j`` with ``m`` the min-max normalised ``scores``; shape ``(n,)``.

    All-equal (or single) scores carry no preference and map to the uniform distribution.
    An empty input returns an empty array.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {s.shape}.")
    if s.size == 0:
        return s.copy()
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or infinity; pass finite retrieval scores.")
    lo, hi = float(s.min()), float(s.max())
    if hi - lo <= 1e-12:
        return np.full(s.shape, 1.0 / s.size)
    m = (s - lo) / (hi - lo)
    return m / m.sum()


def normalized_entropy(p: np.ndarray) -> float:
    """``H(p) / log n`` in [0, 1], with ``0 log 0 = 0``; defined as 0 for ``n <= 1``."""
    q = np.asarray(p, dtype=np.float64)
    n = q.size
    if n <= 1:
        return 0.0
    nz = q[q > 0]
    h = float(-(nz * np.log(nz)).sum())
    return float(np.clip(h / np.log(n), 0.0, 1.0))


def confidence(p: np.ndarray) -> float:
    """Expert confidence ``c = 1 - H(p) / log n``: 1 when one candidate holds all the mass."""
    return 1.0 - normalized_entropy(p)


@dataclass
class FusionResult:
    """``P`` (n_units,), per-list ``confidences`` (L,), ``weights`` (L,) summing to 1, and
    per-list distributions ``dists`` (each aligned with that list's candidate indices)."""

    P: np.ndarray
    confidences: np.ndarray
    weights: np.ndarray
    dists: List[np.ndarray]


def fuse(
    candidates: Sequence[Tuple[np.ndarray, np.ndarray]],
    n_units: int,
    weighting: Weighting = "entropy",
) -> FusionResult:
    """Confidence-weighted mixture ``P(u)`` over all units.

    ``candidates[l] = (idx, scores)``: integer unit indices ``(n_l,)`` into ``range(n_units)``
    and their raw scores ``(n_l,)`` for list ``l`` (one per expert and granularity). Empty lists
    get confidence 0 and no weight. ``weighting="equal"`` gives every non-empty list the
    same weight (the ablation). If every confidence is 0 (all lists flat), equal weights are
    used, so ``P`` still sums to 1 whenever any list is non-empty.
    """
    check_choice(weighting, "weighting", Weighting)
    if n_units < 0:
        raise ValueError(f"n_units must be >= 0, got {n_units!r}.")
    dists: List[np.ndarray] = []
    conf = np.zeros(len(candidates), dtype=np.float64)
    nonempty = np.zeros(len(candidates), dtype=bool)
    for j, (idx, scores) in enumerate(candidates):
        idx = np.asarray(idx)
        if idx.shape != np.asarray(scores).shape:
            raise ValueError(
                f"list {j}: {idx.shape[0]} indices but {np.asarray(scores).shape[0]} scores; "
                "pass one score per candidate."
            )
        if idx.size and (idx.min() < 0 or idx.max() >= n_units):
            raise ValueError(f"list {j}: unit index out of range [0, {n_units}).")
        p = expert_distribution(scores)
        dists.append(p)
        nonempty[j] = idx.size > 0
        conf[j] = confidence(p) if idx.size else 0.0
    if weighting == "equal" or conf.sum() <= 1e-12:
        w = nonempty.astype(np.float64)
    else:
        w = conf.copy()
    total = w.sum()
    if total > 0:
        w = w / total
    P = np.zeros(n_units, dtype=np.float64)
    for (idx, _), p, wl in zip(candidates, dists, w):
        if wl > 0 and len(p):
            np.add.at(P, np.asarray(idx, dtype=np.int64), wl * p)
    return FusionResult(P=P, confidences=conf, weights=w, dists=dists)


def pool_by_document(
    doc_of: Mapping[int, str],
    res: FusionResult,
    candidates: Sequence[Tuple[np.ndarray, np.ndarray]],
    how: DocumentPool = "units",
) -> Dict[str, float]:
    """A document's evidence from its units' (``doc_of``: unit index -> document; units not in it
    count for none). ``"units"``: the summed ``P`` of its units; ``"lists"``: for each list, the
    weight times the best ``p`` of the document's units in that list, summed over lists (a document
    with many windows gets no more votes than a one-unit document)."""
    check_choice(how, "how", DocumentPool)
    pool: Dict[str, float] = {}
    if how == "units":
        for i, d in doc_of.items():
            pool[d] = pool.get(d, 0.0) + float(res.P[i])
        return pool
    for (idx, _), p, w in zip(candidates, res.dists, res.weights):
        best: Dict[str, float] = {}
        for i, v in zip(np.asarray(idx).tolist(), np.asarray(p).tolist()):
            d = doc_of.get(i)
            if d is not None and v > best.get(d, -1.0):
                best[d] = v
        for d, v in best.items():
            pool[d] = pool.get(d, 0.0) + float(w) * v
    for d in set(doc_of.values()):
        pool.setdefault(d, 0.0)
    return pool


def evidence_utility(P: np.ndarray, lengths: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """``R(u) = P(u) / len(u) ** alpha``; lengths in tokens, clipped below at 1.

    ``alpha = 0.5`` is the paper's ``1 / sqrt(len)``; ``alpha = 0`` disables the penalty.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha!r}; use 0 for no length penalty.")
    P = np.asarray(P, dtype=np.float64)
    L = np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)
    if P.shape != L.shape:
        raise ValueError(f"P has shape {P.shape} but lengths {L.shape}; pass one length per unit.")
    return P / L**alpha


def pool_rows(X: np.ndarray, groups: Sequence[Sequence[int]], weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Unit-normalised (weighted) mean of the unit-normalised rows ``X[g]`` for each group;
    ``(len(groups), d)``. ``weights`` (one per row of ``X``) default to 1."""
    X = np.asarray(X, dtype=np.float64)
    w = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    Xn = X / np.where(norms == 0, 1.0, norms)
    out = np.zeros((len(groups), X.shape[1]), dtype=np.float64)
    for i, g in enumerate(groups):
        if len(g) == 0:
            raise ValueError(f"group {i} is empty; every pooled unit needs at least one row.")
        rows = list(g)
        v = (Xn[rows] * w[rows, None]).sum(axis=0)
        n = np.linalg.norm(v)
        out[i] = v / (n if n > 0 else 1.0)
    return out.astype(np.float32)
