"""Pure scoring and search of CausalRAG2 retrieval: seed scores, MMR, gain, best-first expansion.

No ``llama_index`` import: NumPy in, NumPy / dataclasses out (bm25s ``scoring.py``; RAPTOR
``clustering.py`` vs ``base.py``). The adapter is ``retriever.py``.

CausalRAG2 (arXiv 2602.05143), online half:

- seed score ``s(v) = a * cos(q, v) + (1 - a) * lex(q, v)`` with ``a = 0.7``;
- seeds per level by MMR, ``argmax_i lambda * s(i) - (1 - lambda) * max_{j picked} cos(e_i, e_j)``;
- ``gain(v) = s(v) * gamma ** hop * w_type(edge)``, ``gamma = 0.7``;
- a true best-first search (a priority queue keyed by gain; the reference code expands hop by
  hop) over one edge set: relation, hierarchy, membership and gate edges.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

RELATION = "relation"
HIERARCHY = "hierarchy"
MEMBERSHIP = "membership"
GATE = "gate"
EDGE_TYPES = (RELATION, HIERARCHY, MEMBERSHIP, GATE)

# Reference-code defaults (Pwnb/CausalRAG2).
DEFAULT_EDGE_WEIGHTS: Dict[str, float] = {GATE: 1.2, HIERARCHY: 1.0, MEMBERSHIP: 1.0, RELATION: 0.8}
DEFAULT_ALPHA = 0.7
DEFAULT_MMR_LAMBDA = 0.7
DEFAULT_GAMMA = 0.7
DEFAULT_MAX_FANOUT = 5  # neighbours pushed per pop
DEFAULT_MAX_NODES = 200  # pops of one search
VERBATIM_BONUS = 0.5


def cosine_to(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``matrix @ q`` for unit rows (n, d) and a unit vector (d,), shape (n,).

    ``einsum`` instead of BLAS: on a busy machine a multi-threaded BLAS spends milliseconds
    waking threads for a product this small.
    """
    if matrix.size == 0:
        return np.zeros(matrix.shape[0], dtype=np.float64)
    return np.einsum("ij,j->i", matrix, q.astype(matrix.dtype, copy=False))


def validate_unit_interval(value: float, name: str, hint: str = "") -> None:
    if not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}{'; ' + hint if hint else ''}.")


def seed_scores(cos: np.ndarray, lex: np.ndarray, alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """``s(v) = alpha * cos(q, v) + (1 - alpha) * lex(q, v)``.

    ``cos``, ``lex``: (n,) arrays (``lex`` may include the verbatim-name bonus). Returns a new (n,) array.
    """
    cos = np.asarray(cos, dtype=np.float64)
    lex = np.asarray(lex, dtype=np.float64)
    if cos.shape != lex.shape:
        raise ValueError(f"cos and lex must have one shape, got {cos.shape} and {lex.shape}.")
    return alpha * cos + (1.0 - alpha) * lex


def lexical_overlap(query_terms: Sequence[str], postings: Mapping[str, np.ndarray], n: int) -> np.ndarray:
    """``lex(q, v)`` = share of distinct query terms found in node v's text, shape (n,).

    ``postings`` maps a term to the indices of the nodes whose name/title/summary contain it
    (an inverted index, so a query costs O(matches), not O(n)).
    """
    terms = sorted(set(query_terms))
    out = np.zeros(n, dtype=np.float64)
    if not terms or n == 0:
        return out
    for t in terms:
        idx = postings.get(t)
        if idx is not None and len(idx):
            out[idx] += 1.0
    return out / len(terms)


def mmr_select(
    scores: np.ndarray,
    embeddings: np.ndarray,
    k: int,
    lam: float = DEFAULT_MMR_LAMBDA,
    pool: Optional[int] = None,
    rows: Optional[np.ndarray] = None,
) -> List[int]:
    """Maximal marginal relevance (Carbonell & Goldstein, SIGIR 1998).

    Repeatedly picks ``argmax_i lam * s(i) - (1 - lam) * max_{j picked} cos(e_i, e_j)``.
    ``scores``: (n,); ``embeddings``: (n, d) unit rows, or with ``rows`` (n,) any matrix whose
    row ``rows[i]`` belongs to ``scores[i]`` (no copy of a subset's embeddings). Only the
    ``pool`` best-scored candidates are considered (all when ``None``). Returns up to ``k``
    indices into ``scores`` in pick order; ties break on the lower index.
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return []
    m = n if pool is None else min(pool, n)
    if m < n:  # partial sort: only the pool is ordered
        part = np.argpartition(-scores, m - 1)[:m]
        cand = part[np.lexsort((part, -scores[part]))]
    else:
        cand = np.lexsort((np.arange(n), -scores))
    picked: List[int] = []
    if embeddings.size == 0 or (embeddings.shape[0] if rows is None else len(rows)) != n:
        return [int(i) for i in cand[:k]]
    E = np.asarray(embeddings[cand if rows is None else rows[cand]], dtype=np.float64)
    max_sim = np.full(len(cand), -np.inf)
    available = np.ones(len(cand), dtype=bool)
    base = lam * scores[cand]
    for _ in range(min(k, len(cand))):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        mmr = np.where(available, base - (1.0 - lam) * penalty, -np.inf)
        best = int(np.argmax(mmr))
        if not available[best]:
            break
        picked.append(int(cand[best]))
        available[best] = False
        # one row of the similarity matrix per pick (not the whole matrix: k is small); einsum,
        # not BLAS: tiny products stall on a busy multi-threaded BLAS
        max_sim = np.maximum(max_sim, np.einsum("jd,d->j", E, E[best]))
    return picked


def gain(
    score: float,
    hop: int,
    edge_type: Optional[str],
    gamma: float = DEFAULT_GAMMA,
    weights: Mapping[str, float] = DEFAULT_EDGE_WEIGHTS,
) -> float:
    """``gain(v) = s(v) * gamma ** hop * w_type(edge)``; a seed (``edge_type=None``) has ``w = 1``."""
    w = 1.0 if edge_type is None else weights[edge_type]
    return float(score) * gamma**hop * w


@dataclass
class UnifiedGraph:
    """One undirected edge set E_uni over integer nodes (entities and modules).

    ``adj[i]`` = (neighbour indices (m,), edge-type codes (m,)); codes index ``EDGE_TYPES``.
    ``causal[(i, j)]`` (i < j) marks relation edges with causal cue evidence.
    """

    n: int
    adj: List[Tuple[np.ndarray, np.ndarray]]
    causal: Dict[Tuple[int, int], bool] = field(default_factory=dict)

    @classmethod
    def from_edges(
        cls, n: int, edges: Sequence[Tuple[int, int, str]], causal_edges: Sequence[Tuple[int, int]] = ()
    ) -> "UnifiedGraph":
        """``edges``: undirected ``(i, j, edge_type)``; duplicates keep the first type given."""
        code = {t: c for c, t in enumerate(EDGE_TYPES)}
        nbrs: List[Dict[int, int]] = [dict() for _ in range(n)]
        for i, j, t in edges:
            if t not in code:
                raise ValueError(f"edge type {t!r} is unknown; use one of {EDGE_TYPES}.")
            if i == j:
                continue
            nbrs[i].setdefault(j, code[t])
            nbrs[j].setdefault(i, code[t])
        adj = []
        for d in nbrs:
            keys = np.fromiter(d.keys(), dtype=np.int64, count=len(d))
            vals = np.fromiter(d.values(), dtype=np.int64, count=len(d))
            adj.append((keys, vals))
        return cls(n, adj, {(min(i, j), max(i, j)): True for i, j in causal_edges})

    def adj_lists(self) -> List[List[Tuple[int, int]]]:
        """``adj`` as Python ``(neighbour, edge-type code)`` lists, built once: the search visits a
        few hundred nodes, each with a few dozen neighbours, where NumPy's per-call cost dominates."""
        cached = self.__dict__.get("_adj_lists")
        if cached is None:
            cached = [list(zip(nb.tolist(), ty.tolist())) for nb, ty in self.adj]
            self.__dict__["_adj_lists"] = cached
        return cached

    def without(self, edge_type: str) -> "UnifiedGraph":
        """A copy with every edge of ``edge_type`` removed (for ablations)."""
        c = EDGE_TYPES.index(edge_type)
        adj = [(nb[ty != c], ty[ty != c]) for nb, ty in self.adj]
        return UnifiedGraph(self.n, adj, dict(self.causal))


@dataclass
class Reached:
    """How the search reached a node: best gain, hop count, seed, path and edge types."""

    node: int
    gain: float
    hop: int
    seed: int
    path: List[int]
    edge_types: List[str]


def best_first_expand(
    graph: UnifiedGraph,
    scores: np.ndarray,
    seeds: Mapping[int, float],
    gamma: float = DEFAULT_GAMMA,
    weights: Mapping[str, float] = DEFAULT_EDGE_WEIGHTS,
    max_fanout: int = DEFAULT_MAX_FANOUT,
    max_nodes: int = DEFAULT_MAX_NODES,
    min_gain: float = 0.0,
) -> List[Reached]:
    """Best-first search over ``graph`` from ``seeds`` with a priority queue on gain.

    ``scores``: (n,) ``s(v)`` of every node; ``seeds``: node -> its seed gain (usually ``s``).
    Pops the node of highest gain, finalises it, pushes its ``max_fanout`` best not yet
    finalised neighbours with ``gain(v) = s(v) * gamma ** hop * w_type(edge)``; stops after
    ``max_nodes`` pops or when the best gain in the queue is below ``min_gain``. A node
    pushed twice keeps its best entry (lazy deletion). Returns the finalised nodes in pop
    order (non-increasing gain is not guaranteed: a later path may carry a gate bonus).
    """
    if max_fanout < 0 or max_nodes < 0:
        raise ValueError(f"max_fanout and max_nodes must be >= 0, got {max_fanout!r} and {max_nodes!r}.")
    w = [float(weights[t]) for t in EDGE_TYPES]
    s = np.asarray(scores, dtype=np.float64).tolist()  # Python floats: the loop reads a few thousand
    # (-gain, tiebreak, node, hop, seed, parent, edge type code); parent -1 and code -1 for a seed
    heap: List[Tuple[float, int, int, int, int, int, int]] = []
    best: Dict[int, float] = {}
    counter = 0
    for seed_node, g in sorted(seeds.items()):
        if g >= min_gain and g > best.get(seed_node, -math.inf):
            best[seed_node] = float(g)
            heapq.heappush(heap, (-float(g), counter, seed_node, 0, seed_node, -1, -1))
            counter += 1
    done: Dict[int, Reached] = {}
    order: List[Reached] = []
    adj = graph.adj_lists()
    while heap and len(order) < max_nodes:
        neg, _, u, hop, seed, parent, etype = heapq.heappop(heap)
        g = -neg
        if u in done or g < best.get(u, -math.inf):
            continue
        if parent >= 0:
            via = done[parent]
            r = Reached(u, g, hop, via.seed, via.path + [u], via.edge_types + [EDGE_TYPES[etype]])
        else:
            r = Reached(u, g, 0, seed, [u], [])
        done[u] = r
        order.append(r)
        if max_fanout == 0:
            continue
        decay = gamma ** (hop + 1)
        cand = [(s[v] * decay * w[t], v, t) for v, t in adj[u] if v not in done]
        if len(cand) > max_fanout:
            cand.sort(key=lambda c: -c[0])  # stable: equal gains keep their adjacency order
            del cand[max_fanout:]
        for cg, v, t in cand:
            if cg >= min_gain and cg > best.get(v, -math.inf):
                best[v] = cg
                heapq.heappush(heap, (-cg, counter, v, hop + 1, seed, u, t))
                counter += 1
    return order


def path_is_causal(path: Sequence[int], edge_types: Sequence[str], causal: Mapping[Tuple[int, int], bool]) -> bool:
    """True when the path holds a gate or a cue-evidenced relation edge and no relation edge
    without cue evidence (mere co-occurrence); hierarchy/membership edges are neutral."""
    has_causal = False
    for (a, b), t in zip(zip(path, path[1:]), edge_types):
        if t == GATE:
            has_causal = True
        elif t == RELATION:
            if causal.get((min(a, b), max(a, b)), False):
                has_causal = True
            else:
                return False
    return has_causal


__all__ = [
    "DEFAULT_EDGE_WEIGHTS",
    "EDGE_TYPES",
    "GATE",
    "HIERARCHY",
    "MEMBERSHIP",
    "RELATION",
    "Reached",
    "UnifiedGraph",
    "best_first_expand",
    "cosine_to",
    "gain",
    "lexical_overlap",
    "mmr_select",
    "path_is_causal",
    "seed_scores",
]
