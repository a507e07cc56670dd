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
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from llama_index_ext_causalrag.causal_graph.graph import Module

logger = logging.getLogger(__name__)

# the paper's hierarchy: modules of at most 10 entities, at most 4 levels; Leiden's modularity (1.0)
DEFAULT_MAX_CLUSTER_SIZE, DEFAULT_MAX_LEVELS, DEFAULT_RESOLUTION, DEFAULT_SEED = 10, 4, 1.0, 42


def validate_hierarchy_params(max_cluster_size: int, max_levels: int, resolution: float) -> None:
    if not isinstance(max_cluster_size, int) or max_cluster_size < 2:
        raise ValueError(
            f"max_cluster_size must be an int >= 2, got {max_cluster_size!r}; "
            f"the paper uses {DEFAULT_MAX_CLUSTER_SIZE}."
        )
    if not isinstance(max_levels, int) or max_levels < 1:
        raise ValueError(f"max_levels must be an int >= 1, got {max_levels!r}; the paper uses {DEFAULT_MAX_LEVELS}.")
    if not resolution > 0:
        raise ValueError(f"resolution must be > 0, got {resolution!r}; 1.0 is modularity.")


def _partition(
    graph: "object", resolution: float, seed: int, start: Optional[Tuple[List[int], List[bool]]] = None
) -> List[List[int]]:
    """Leiden communities (vertex indices); ``start`` = (initial membership, fixed flags)."""
    import leidenalg

    weights = "weight" if graph.ecount() else None  # type: ignore[attr-defined]
    if start is None:
        part = leidenalg.find_partition(
            graph, leidenalg.RBConfigurationVertexPartition, weights=weights, resolution_parameter=resolution, seed=seed
        )
    else:
        part = leidenalg.RBConfigurationVertexPartition(
            graph, initial_membership=start[0], weights=weights, resolution_parameter=resolution
        )
        opt = leidenalg.Optimiser()
        opt.set_rng_seed(seed)
        opt.optimise_partition(part, n_iterations=2, is_membership_fixed=start[1])
    return [list(c) for c in part if len(c)]


def _start(labels: Sequence[Optional[str]], movable: Sequence[bool]) -> Optional[Tuple[List[int], List[bool]]]:
    """Leiden's initial membership from previous module labels (None: a singleton, movable)."""
    if all(lab is None for lab in labels):
        return None
    code: Dict[str, int] = {}
    for lab in labels:
        if lab is not None:
            code.setdefault(lab, len(code))
    out, fixed, alone = [], [], len(code)
    for lab, mov in zip(labels, movable):
        if lab is None:
            out.append(alone)
            alone += 1
        else:
            out.append(code[lab])
        fixed.append(lab is not None and not mov)
    return out, fixed


def leiden_hierarchy(
    nodes: Sequence[str],
    edges: Sequence[Tuple[str, str, float]],
    max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE,
    max_levels: int = DEFAULT_MAX_LEVELS,
    resolution: float = DEFAULT_RESOLUTION,
    seed: int = DEFAULT_SEED,
    initial: Optional[Mapping[str, Sequence[str]]] = None,
    moved: Optional[Set[str]] = None,
) -> Tuple[List[Module], List[str]]:
    """Modules of all levels (members are node names) and the messages worth telling the user.

    ``edges``: undirected ``(a, b, weight)``. Deterministic for a fixed ``seed``.
    ``initial``: node -> the ids of its modules in a previous hierarchy, top partition first
    (:func:`module_paths`); each Leiden run starts from those communities instead of
    singletons (new nodes start alone). ``moved`` (with ``initial``): the nodes whose edges
    changed since; only they and new nodes may change community, the others keep theirs, so
    an update leaves the modules it does not touch as they were (None: every node may move).
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
        parts = _partition(sub, resolution, seed, start(members, depth + 1))
        if len(parts) < 2:
            unsplittable.append(len(members))
            return
        parts.sort(key=lambda p: (-len(p), min(members[i] for i in p)))
        for p in parts:
            split(sorted(members[i] for i in p), depth + 1, me)

    def start(members: List[int], depth: int) -> Optional[Tuple[List[int], List[bool]]]:
        if not initial:
            return None
        paths = [initial.get(names[m], ()) for m in members]
        movable = [moved is None or names[m] in moved for m in members]
        return _start([p[depth] if len(p) > depth else None for p in paths], movable)

    top = _partition(g, resolution, seed, start(list(range(len(names))), 0))
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


def module_paths(modules: Sequence[Module]) -> Dict[str, List[str]]:
    """Member -> ids of the modules holding it, from the top partition down to its leaf."""
    by_id = {m.id: m for m in modules}
    out: Dict[str, List[str]] = {}
    for m in modules:
        if m.children:
            continue
        path = [m.id]
        while by_id[path[-1]].parent is not None:
            path.append(by_id[path[-1]].parent)  # type: ignore[arg-type]
        for e in m.members:
            out[e] = path[::-1]
    return out
