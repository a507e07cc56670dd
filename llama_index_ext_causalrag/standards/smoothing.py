"""Pure: graph smoothing of node embeddings. NumPy only."""

from __future__ import annotations

import numpy as np

DEFAULT_ALPHA = 0.8


def smooth_embeddings(x: np.ndarray, adjacency: np.ndarray, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """``e'_j = alpha * e_j + (1 - alpha) * mean(e_n, n in N(j))``, rows re-normalised to unit length.

    ``x``: ``(n, d)`` embeddings; ``adjacency``: ``(n, n)``, non-zero where ``n`` is a
    neighbour of ``j`` (weights are used as given: a weighted mean). Rows without neighbours
    keep their own (normalised) embedding. ``alpha = 1`` disables smoothing. Returns a new
    ``(n, d)`` float32 array; the inputs are not modified.

    Normative-RAG paper (arXiv 2604.09868): N(j) = parent,
    children, siblings, cited and citing nodes; ``alpha = 0.8`` is our choice.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}; use 1 to disable smoothing.")
    x = np.asarray(x, dtype=np.float64)
    a = np.asarray(adjacency, dtype=np.float64)
    if x.ndim != 2 or a.shape != (x.shape[0], x.shape[0]):
        raise ValueError(
            f"adjacency must have shape (n, n) = ({x.shape[0]}, {x.shape[0]}) for x of shape {x.shape}, got {a.shape}."
        )
    deg = a.sum(axis=1, keepdims=True)
    neigh = np.divide(a @ x, deg, out=np.zeros_like(x), where=deg > 0)
    out = np.where(deg > 0, alpha * x + (1.0 - alpha) * neigh, x)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms == 0, 1.0, norms)).astype(np.float32)
