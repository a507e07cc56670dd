"""What the expansion and the final re-rank of :class:`StructureAwareRetriever` decided, for
``explain()`` (the stage records' details: pure data, built only when a recorder asks)."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

from llama_index.core.schema import NodeWithScore

from llama_index_ext_causalrag.standards.facts import QueryFacts
from llama_index_ext_causalrag.standards.stages import ExpansionConfig, RerankConfig


def expansion_detail(
    ex: ExpansionConfig,
    seeds: List[str],
    conn: Dict[str, Tuple[float, List[str]]],
    stage: Dict[str, str],
    facts: QueryFacts,
) -> Dict[str, Any]:
    followed = [
        {"from": p[0], "relation": p[1], "to": p[2], "strength": c}
        for u, (c, p) in conn.items()
        if len(p) == 3 and stage.get(u) == "graph_expansion"
    ]
    return {
        "took": {
            "seeds": seeds,
            "edge_weights": ex.edge_weights,
            "citation_norm": ex.citation_norm,
            "neighbour_pick": ex.neighbour_pick,
        },
        "decided": {
            "followed": followed,
            "citations": [f for f in followed if f["relation"] in ("cites", "cited_by")],
        },
        "graph": expansion_graph(seeds, followed, facts),
        "why": "Neighbours of the seeds through the section tree and citations, each scored "
        "seed strength x edge weight; the best connection of each node is kept."
        if ex.expand
        else "Graph expansion is off in this configuration.",
    }


def expansion_graph(seeds: List[str], followed: List[Dict[str, Any]], facts: QueryFacts) -> Dict[str, Any]:
    """The seeds and the nodes the expansion reached, labelled with their section paths, and the
    tree and citation edges it followed (``crossed``: citations)."""
    ids = list(dict.fromkeys([*seeds, *(x for f in followed for x in (f["from"], f["to"]))]))
    nodes = [{"id": u, "label": facts.label(u), "kind": "seed" if u in seeds else "section"} for u in ids]
    edges = [
        {
            "source": f["from"],
            "target": f["to"],
            "kind": f["relation"],
            "weight": f["strength"],
            "crossed": f["relation"] in ("cites", "cited_by"),
        }
        for f in followed
    ]
    return {"nodes": nodes, "edges": edges}


def rerank_detail(
    rr: RerankConfig,
    similarity_top_k: int,
    out: List[NodeWithScore],
    conn: Dict[str, Tuple[float, List[str]]],
    final: Dict[str, float],
    facts: QueryFacts,
) -> Dict[str, Any]:
    rows = []
    for n in out:
        u = n.node.node_id
        rows.append(
            {
                "id": u,
                "section_path": n.node.metadata.get("section_path", ""),
                "connection": conn[u][0] if u in conn else None,
                "cosine": facts.cos(u),
                "hub_penalty": rr.beta * math.log1p(facts.degree(u)),
                "degree": facts.degree(u),
                "score": final.get(u),
            }
        )
    return {
        "took": {
            "query_weight": rr.query_weight,
            "beta": rr.beta,
            "graph_rerank": rr.graph_rerank,
            "max_per_section": rr.max_per_section,
            "similarity_top_k": similarity_top_k,
        },
        "decided": {"returned": rows},
        "why": "score = connection + query_weight x cosine - beta x log(1 + degree) (hub penalty); "
        "at most max_per_section chunks of one section before the others."
        if rr.graph_rerank
        else "Seeds in RRF order, each followed by what it brought in.",
    }


__all__ = ["expansion_detail", "expansion_graph", "rerank_detail"]
