"""causal_graph/export.py: GraphML holds the whole graph; the page shows it whole or clustered."""

from __future__ import annotations

import copy

import networkx as nx
import pytest

from _causal_graph_helpers import HashEmbedding, corpus
from _explain_helpers import PWNED, parse
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.export import GraphExportMixin, graph_view, to_networkx


@pytest.fixture(scope="module")
def index():
    idx = CausalGraphIndex.from_documents(
        corpus(3),
        embed_model=HashEmbedding(),
        max_cluster_size=3,
        gate_candidates_per_module=3,
        gate_judge=OfflineGateJudge(min_lift=1.0),
    )
    assert idx.graph.entities and idx.graph.modules and idx.graph.gates
    return idx


def test_graphml_reads_back_with_every_entity_module_relation_and_gate(index, tmp_path):
    g = index.graph
    path = index.to_graphml(tmp_path / "sub" / "graph.graphml")
    back = nx.read_graphml(path)
    kinds = nx.get_node_attributes(back, "kind")
    assert {n for n, k in kinds.items() if k == "entity"} == set(g.entities)
    assert {n for n, k in kinds.items() if k == "module"} == set(g.modules)
    edges = {(s, t): d for s, t, d in back.edges(data=True)}
    for gt in g.gates:
        d = edges[(gt.source, gt.target)]
        assert d["kind"] == "gate" and d["weight"] == pytest.approx(gt.score) and d["level"] == gt.level
    assert sum(d["kind"] == "relation" for d in edges.values()) == len(g.relations)
    for m in g.modules.values():
        assert back.nodes[m.id]["title"] == m.title and back.nodes[m.id]["summary"] == m.summary
        if not m.children:
            assert all(edges[(m.id, e)]["kind"] == "member" for e in m.members)
        assert all(edges[(m.id, c)]["kind"] == "child" for c in m.children)
    e = next(iter(g.entities.values()))
    assert back.nodes[e.id]["label"] == e.name and back.nodes[e.id]["unit_ids"].split() == e.unit_ids
    assert back.graph["n_gates"] == len(g.gates)


def test_networkx_attributes_are_graphml_scalars(index):
    g = to_networkx(index.graph)
    ok = (str, int, float, bool)
    assert all(isinstance(v, ok) for _, d in g.nodes(data=True) for v in d.values())
    assert all(isinstance(v, ok) for _, _, d in g.edges(data=True) for v in d.values())


def test_page_shows_the_whole_small_graph(index, tmp_path):
    path = index.graph_page(tmp_path / "graph.html")
    page = path.read_text(encoding="utf-8")
    ids = {a["data-id"] for t, a in parse(page).tags if t == "g" and "data-id" in a}
    assert ids == set(index.graph.entities) | set(index.graph.modules)
    assert "The whole graph is shown" in page and "<script" not in page


def test_page_clusters_beyond_max_nodes_and_says_so(index, tmp_path):
    view, note = graph_view(index.graph, max_nodes=12)
    assert len(view["nodes"]) <= 12
    assert "more than max_nodes=12" in note and "largest top-level modules" in note
    ids = {n["id"] for n in view["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in view["edges"])
    page = index.graph_page(tmp_path / "small.html", max_nodes=12).read_text(encoding="utf-8")
    assert "more than max_nodes=12" in page
    with pytest.raises(ValueError, match="max_nodes must be an int >= 4"):
        graph_view(index.graph, max_nodes=2)


def test_page_escapes_entity_names_and_module_titles(index, tmp_path):
    graph = copy.deepcopy(index.graph)
    next(iter(graph.entities.values())).name = PWNED
    next(iter(graph.modules.values())).title = PWNED

    class Holder(GraphExportMixin):
        def __init__(self, graph):
            self.graph = graph

    page = Holder(graph).graph_page(tmp_path / "hostile.html").read_text(encoding="utf-8")
    assert "<script" not in page and PWNED in "".join(parse(page).text)
