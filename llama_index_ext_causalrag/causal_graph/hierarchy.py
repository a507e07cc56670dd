"""Leiden hierarchy H0..HL over the entity graph (pure: igraph + leidenalg, no llama_index).

The whole graph is partitioned first (the coarsest partition); every module larger than
``max_cluster_size`` is partitioned again on its induced subgraph, at most ``max_levels``
partitions deep. A module's level is its height in that tree: leaves (modules that are
small enough, or that Leiden cannot split) are level 0, so H0 is a complete partition of
the entities (the finest), and a parent is one level above its highest child (H_L, the
coarsest, holds the modules whose subtree is deepest). Siblings may sit at different levels.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence, Tuple

from llama_index_ext_causalrag.causal_graph.graph import Module

logger = logging.getLogger(__name__)


def validate_hierarchy_params(max_cluster_size: int, max_levels: int, resolution: float) -> None:
    if not isinstance(max_cluster_size, int) or max_cluster_size < 2:
        raise ValueError(f"max_cluster_size must be an int >= 2, got {max_cluster_size!r}; the paper uses 10.")
    if not isinstance(max_levels, int) or max_levels < 1:
        raise ValueError(f"max_levels must be an int >= 1, got {max_levels!r}; the paper uses 4.")
    if not resolution > 0:
        raise ValueError(f"resolution must be > 0, got {resolution!r}; 1.0 is modularity.")


def _partition(graph: "object", resolution: float, seed: int) -> List[List[int]]:
    import leidenalg

    part = leidenalg.find_partition(
        graph,
        leidenalg.RBConfigurationVertexPartition,
        weights="weight" if graph.ecount() else None,  # type: ignore[attr-defined]
        resolution_parameter=resolution,
        seed=seed,
    )
    return [list(c) for c in part if len(c)]


def leiden_hierarchy(
    nodes: Sequence[str],
    edges: Sequence[Tuple[str, str, float]],
    max_cluster_size: int = 10,
    max_levels: int = 4,
    resolution: float = 1.0,
    seed: int = 42,
) -> Tuple[List[Module], List[str]]:
    """Modules of all levels (members are node names) and the messages worth telling the user.

    ``edges``: undirected ``(a, b, weight)``. Deterministic for a fixed ``seed``.
    """
    import igraph as ig

    validate_hierarchy_params(max_cluster_size, max_levels, resolution)
    names = sorted(set(nodes))
    if not names:
        return [], ["the entity graph is empty: no modules were built."]
    index = {n: i for i, n in enumerate(names)}
    g = ig.Graph(n=len(names))
    g.vs["name"] = names
    es = [(index[a], index[b]) for a, b, _ in edges]
    g.add_edges(es)
    g.es["weight"] = [float(w) for _, _, w in edges]
    if g.ecount():
        g.simplify(combine_edges="sum")

    raw: List[Dict] = []  # {depth, members, parent(raw idx), children}
    messages: List[str] = []
    unsplittable: List[int] = []
    too_deep: List[int] = []

    def split(members: List[int], depth: int, parent: Optional[int]) -> None:
        me = len(raw)
        raw.append({"depth": depth, "members": members, "parent": parent, "children": []})
        if parent is not None:
            raw[parent]["children"].append(me)
        if len(members) <= max_cluster_size:
            return
        if depth + 1 >= max_levels:
            too_deep.append(len(members))
            return
        sub = g.induced_subgraph(members)
        parts = _partition(sub, resolution, seed)
        if len(parts) < 2:
            unsplittable.append(len(members))
            return
        parts.sort(key=lambda p: (-len(p), min(members[i] for i in p)))
        for p in parts:
            split(sorted(members[i] for i in p), depth + 1, me)

    top = _partition(g, resolution, seed)
    top.sort(key=lambda p: (-len(p), min(p)))
    for p in top:
        split(sorted(p), 0, None)

    height = [0] * len(raw)
    for i in range(len(raw) - 1, -1, -1):  # children always come after their parent
        if raw[i]["children"]:
            height[i] = 1 + max(height[c] for c in raw[i]["children"])
    counters: Dict[int, int] = {}
    ids: List[str] = []
    for i in range(len(raw)):
        k = counters.get(height[i], 0)
        counters[height[i]] = k + 1
        ids.append(f"L{height[i]}_{k:06d}")
    modules = [
        Module(
            id=ids[i],
            level=height[i],
            members=[names[m] for m in r["members"]],
            parent=None if r["parent"] is None else ids[r["parent"]],
            children=[ids[c] for c in r["children"]],
        )
        for i, r in enumerate(raw)
    ]
    if unsplittable:
        messages.append(
            f"Leiden cannot split {len(unsplittable)} module(s) larger than max_cluster_size={max_cluster_size} "
            f"(largest: {max(unsplittable)} entities): each is one dense community; kept whole. "
            "Raise resolution (e.g. 2.0) to split dense modules."
        )
    if too_deep:
        messages.append(
            f"{len(too_deep)} module(s) are still larger than max_cluster_size={max_cluster_size} at the "
            f"deepest allowed level (max_levels={max_levels}; largest: {max(too_deep)} entities); kept whole. "
            "Raise max_levels to split them."
        )
    return modules, messages
