"""Export a :class:`CausalGraph`: to networkx / GraphML, and to one self-contained HTML page.

Pure: networkx, no ``llama_index``. The page is drawn by ``explain.html`` (imported when a
page is written, so that importing the graph code never imports the explain package).

GraphML holds the whole graph: entity nodes (``kind="entity"``), module nodes
(``kind="module"``), and edges of four kinds: ``relation`` (entity - entity), ``member``
(level-0 module -> its entity), ``child`` (module -> child module) and ``gate`` (module - module
of one level). Relations and gates are undirected; they are stored once, ``source < target``.
Every attribute is a GraphML scalar (str, int, float, bool); lists are joined.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import networkx as nx

from llama_index_ext_causalrag.causal_graph.graph import CausalGraph

DEFAULT_MAX_NODES = 300
SUMMARY_CHARS = 300


def to_networkx(graph: CausalGraph) -> nx.DiGraph:
    """The whole graph as a ``DiGraph`` whose attributes are GraphML-safe scalars."""
    g = nx.DiGraph(
        n_entities=len(graph.entities),
        n_relations=len(graph.relations),
        n_modules=len(graph.modules),
        n_gates=len(graph.gates),
        n_levels=graph.num_levels,
    )
    for e in graph.entities.values():
        g.add_node(
            e.id,
            kind="entity",
            label=e.name,
            type=e.type,
            description=e.description,
            aliases="; ".join(e.aliases),
            unit_ids=" ".join(e.unit_ids),
            n_units=len(e.unit_ids),
        )
    for m in graph.modules.values():
        g.add_node(
            m.id,
            kind="module",
            label=m.title or m.id,
            level=int(m.level),
            title=m.title,
            summary=m.summary,
            parent=m.parent or "",
            n_members=len(m.members),
        )
    for r in graph.relations:
        g.add_edge(
            r.source,
            r.target,
            kind="relation",
            weight=float(r.weight),
            description=r.description,
            cue_count=int(r.cue_count),
            unit_ids=" ".join(r.unit_ids),
        )
    for m in graph.modules.values():
        if not m.children:
            for e_id in m.members:
                g.add_edge(m.id, e_id, kind="member", weight=1.0)
        for c in m.children:
            g.add_edge(m.id, c, kind="child", weight=1.0)
    for gt in graph.gates:
        g.add_edge(
            gt.source,
            gt.target,
            kind="gate",
            weight=float(gt.score),
            level=int(gt.level),
            reason=gt.reason,
            judge=gt.judge,
        )
    return g


def write_graphml(graph: CausalGraph, path: str | Path) -> Path:
    """Write :func:`to_networkx` of ``graph`` to ``path`` with ``networkx.write_graphml``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(to_networkx(graph), str(path))
    return path


# ----------------------------------------------------------------------------- the page
def _strength(graph: CausalGraph) -> Dict[str, float]:
    """Entity id -> weighted degree (sum of its relations' weights)."""
    out: Dict[str, float] = defaultdict(float)
    for r in graph.relations:
        out[r.source] += r.weight
        out[r.target] += r.weight
    return out


def _root_of(graph: CausalGraph) -> Dict[str, str]:
    """Module id -> id of its top-level ancestor (a module with no parent)."""
    out: Dict[str, str] = {}
    for mid in graph.modules:
        cur = mid
        seen = set()
        while graph.modules[cur].parent and graph.modules[cur].parent in graph.modules and cur not in seen:
            seen.add(cur)
            cur = graph.modules[cur].parent  # type: ignore[assignment]
        out[mid] = cur
    return out


def _full_view(graph: CausalGraph) -> Dict[str, Any]:
    nodes = [{"id": e.id, "label": e.name, "kind": "entity"} for e in graph.entities.values()]
    nodes += [{"id": m.id, "label": m.title or m.id, "kind": "module"} for m in graph.modules.values()]
    g = to_networkx(graph)
    edges = [
        {"source": s, "target": t, "kind": d["kind"], "weight": d["weight"], "crossed": False}
        for s, t, d in g.edges(data=True)
    ]
    return {"nodes": nodes, "edges": edges}


def _cluster_view(graph: CausalGraph, max_nodes: int) -> Tuple[Dict[str, Any], str]:
    """Top-level modules as clusters, each with its entities of highest weighted degree and the
    relations inside the cluster; gates are lifted to the clusters (relations across clusters are
    left out: drawn, they pull every cluster into one tangle)."""
    roots = sorted(
        (m for m in graph.modules.values() if not m.parent or m.parent not in graph.modules),
        key=lambda m: (-len(m.members), m.id),
    )
    n_clusters = min(len(roots), max(1, max_nodes // 4))
    shown = roots[:n_clusters]
    per = max(1, (max_nodes - n_clusters) // max(1, n_clusters))
    strength = _strength(graph)
    nodes = [{"id": m.id, "label": m.title or m.id, "kind": "module"} for m in shown]
    edges: List[Dict[str, Any]] = []
    ents: Dict[str, str] = {}
    for m in shown:
        for e_id in sorted(m.members, key=lambda e: (-strength.get(e, 0.0), e))[:per]:
            if e_id in graph.entities and e_id not in ents:
                ents[e_id] = m.id
                nodes.append({"id": e_id, "label": graph.entities[e_id].name, "kind": "entity"})
                edges.append({"source": m.id, "target": e_id, "kind": "member", "weight": 1.0, "crossed": False})
    edges += [
        {"source": r.source, "target": r.target, "kind": "relation", "weight": float(r.weight), "crossed": False}
        for r in graph.relations
        if r.source in ents and ents.get(r.target) == ents[r.source]
    ]
    root_of, shown_ids = _root_of(graph), {m.id for m in shown}
    lifted: Dict[Tuple[str, str], int] = defaultdict(int)
    for gt in graph.gates:
        a, b = sorted((root_of.get(gt.source, gt.source), root_of.get(gt.target, gt.target)))
        if a != b and a in shown_ids and b in shown_ids:
            lifted[(a, b)] += 1
    edges += [
        {"source": a, "target": b, "kind": "gate", "weight": float(c), "crossed": False}
        for (a, b), c in sorted(lifted.items())
    ]
    note = (
        f"The graph has {len(graph.entities)} entities and {len(graph.modules)} modules, more than "
        f"max_nodes={max_nodes}: shown are its {n_clusters} largest top-level modules (of {len(roots)}) as "
        f"clusters, each with at most {per} of its entities (highest weighted degree) and the relations "
        f"among them; the gates between modules inside two shown clusters drawn once between the "
        f"clusters (weight = number of gates, {sum(lifted.values())} of {len(graph.gates)} gates). "
        f"The GraphML export (to_graphml) holds everything."
    )
    return {"nodes": nodes, "edges": edges}, note


def graph_view(graph: CausalGraph, max_nodes: int = DEFAULT_MAX_NODES) -> Tuple[Dict[str, Any], str]:
    """``(view, note)``: the graph in the explanation ``graph`` format, whole when it has at most
    ``max_nodes`` entities + modules, else clustered (:func:`_cluster_view`); ``note`` says which."""
    if not isinstance(max_nodes, int) or max_nodes < 4:
        raise ValueError(f"max_nodes must be an int >= 4, got {max_nodes!r}; the default is {DEFAULT_MAX_NODES}.")
    if len(graph.entities) + len(graph.modules) <= max_nodes:
        return _full_view(graph), (
            f"The whole graph is shown ({len(graph.entities)} entities, "
            f"{len(graph.modules)} modules, at most max_nodes={max_nodes})."
        )
    return _cluster_view(graph, max_nodes)


def _tables(graph: CausalGraph, view: Mapping[str, Any]) -> List[Tuple[str, List[Dict[str, Any]]]]:
    shown = {n["id"] for n in view["nodes"]}
    title = {m.id: m.title or m.id for m in graph.modules.values()}
    mods = [
        {
            "id": m.id,
            "level": m.level,
            "title": m.title,
            "entities": len(m.members),
            "summary": m.summary[:SUMMARY_CHARS] + ("\u2026" if len(m.summary) > SUMMARY_CHARS else ""),
        }
        for m in graph.modules.values()
        if m.id in shown
    ]
    gates = [
        {
            "level": g.level,
            "source": f"{title.get(g.source, g.source)} ({g.source})",
            "target": f"{title.get(g.target, g.target)} ({g.target})",
            "score": g.score,
            "judge": g.judge,
            "reason": g.reason,
        }
        for g in graph.gates
    ]
    return [(f"Modules shown ({len(mods)} of {len(graph.modules)})", mods), (f"All gates ({len(gates)})", gates)]


def render_graph_html(graph: CausalGraph, max_nodes: int = DEFAULT_MAX_NODES, title: str = "Causal graph") -> str:
    """The page :meth:`GraphExportMixin.graph_page` writes."""
    from llama_index_ext_causalrag.explain.html import render_graph_page

    view, note = graph_view(graph, max_nodes)
    facts = {**graph.summary_stats(), "shown": f"{len(view['nodes'])} nodes, {len(view['edges'])} edges"}
    return render_graph_page(view, title, facts, note, _tables(graph, view))


class GraphExportMixin:
    """``to_graphml`` and ``graph_page`` for an index that has a ``graph`` (:class:`CausalGraph`)."""

    graph: CausalGraph

    def to_graphml(self, path: str | Path) -> Path:
        """Write the whole graph (entities, relations, modules, membership, gates) as GraphML;
        read it back with ``networkx.read_graphml(path)``, or open it in Gephi / Cytoscape."""
        return write_graphml(self.graph, path)

    def graph_page(self, path: str | Path, max_nodes: int = DEFAULT_MAX_NODES, title: Optional[str] = None) -> Path:
        """Write one self-contained HTML page of the graph (inline SVG, no network, no script).
        Beyond ``max_nodes`` entities + modules the page shows the largest top-level modules as
        clusters with their best-connected entities, and says so."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_graph_html(self.graph, max_nodes, title or "Causal graph"), encoding="utf-8")
        return path
