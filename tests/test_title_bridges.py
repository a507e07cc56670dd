"""Title bridges of the ``passages`` preset: the pure ranking (hand-computed cases, bad input)
and a retriever that promotes a passage named only in another passage, and puts both passages a
comparison question names first."""

import numpy as np
import pytest
from llama_index.core import Document

from llama_index_ext_causalrag import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.presets import BRIDGE_WEIGHT, CAUSALRAG2_PRESETS
from llama_index_ext_causalrag.causal_graph.stages import PropagationConfig
from llama_index_ext_causalrag.causal_graph.titles import title_bridge_order, title_links
from llama_index_ext_causalrag.text.provenance import get_provenance

# units: 0 the film (names the director), 1 the director, 2 and 3 distractors, 4 a second film
TITLES = ["Forbidden Ground", "Pál Gábor", "Red Meadow", "Silent Harbour", "Free Guy"]
TEXTS = [
    "Forbidden Ground is a film directed by Pál Gábor.",
    "Pál Gábor was a director.",
    "Red Meadow is a film.",
    "Silent Harbour is a film.",
    "Free Guy is a film by Shawn Levy.",
]
LINKS = title_links(TITLES, TEXTS)


def test_a_unit_named_by_the_best_unit_is_promoted_by_its_score():
    dense = np.array([0.8, 0.3, 0.6, 0.5, 0.1])
    order, f = title_bridge_order(dense, LINKS, [], sources=1, bridge_weight=0.5, query_weight=0.0)
    # d = dense / 0.8; unit 1 gains 0.5 x d(0) = 0.5: 0.375 + 0.5 = 0.875 > d(2) = 0.75
    np.testing.assert_allclose(f, [1.0, 0.875, 0.75, 0.625, 0.125])
    assert order.tolist() == [0, 1, 2, 3, 4]
    order, _ = title_bridge_order(dense, LINKS, [], sources=1, bridge_weight=0.2, query_weight=0.0)
    assert order.tolist() == [0, 2, 3, 1, 4]  # 0.375 + 0.2 = 0.575 < d(3) = 0.625: below both


def test_query_titles_rank_both_named_units_and_what_they_name():
    dense = np.array([0.5, 0.2, 0.9, 0.4, 0.3])
    order, f = title_bridge_order(dense, LINKS, [0, 3], sources=0, bridge_weight=0.4, query_weight=0.6)
    assert order[0] == 2  # the best unit by dense score stays first (keep=1)
    assert set(order[1:3].tolist()) == {0, 3}  # both titles the query names
    assert order[3] == 1  # the director, named by the titled film
    np.testing.assert_allclose(f[1], 0.2 / 0.9 + 0.4 * 0.5 / 0.9)
    order, _ = title_bridge_order(dense, LINKS, [0, 3], sources=0, bridge_weight=0.4, query_weight=0.6, keep=0)
    assert set(order[:2].tolist()) == {0, 3}


def test_nothing_named_gives_none_and_filtered_units_are_not_returned():
    dense = np.array([0.1, 0.2, 0.9, 0.4, 0.3])  # the best two units name no title
    assert title_bridge_order(dense, LINKS, [], sources=2, bridge_weight=0.4, query_weight=0.6) is None
    dense = np.array([0.8, -np.inf, 0.6, 0.5, 0.1])
    order, _ = title_bridge_order(dense, LINKS, [], sources=1, bridge_weight=0.4, query_weight=0.6)
    assert 1 not in order.tolist() and len(order) == 4
    assert title_bridge_order(np.full(5, -np.inf), LINKS, [], 1, 0.4, 0.6) is None


def test_bad_input_is_refused_with_the_value():
    with pytest.raises(ValueError, match="1-D"):
        title_bridge_order(np.zeros((5, 1)), LINKS, [], 1, 0.4, 0.6)
    with pytest.raises(ValueError, match="sources must be >= 0, got -1"):
        title_bridge_order(np.zeros(5), LINKS, [], -1, 0.4, 0.6)
    for name in ("bridge_weight", "query_title_weight"):
        with pytest.raises(ValueError, match=f"{name} must be >= 0"):
            PropagationConfig(**{name: -0.1})
    with pytest.raises(ValueError, match="bridge_sources must be >= 0"):
        PropagationConfig(bridge_sources=-1)
    with pytest.raises(ValueError, match="finite"):
        PropagationConfig(bridge_weight=float("inf"))
    assert CAUSALRAG2_PRESETS["passages"].propagation.bridge_weight == BRIDGE_WEIGHT
    assert CAUSALRAG2_PRESETS["ppr"].propagation.bridge_weight == 0.0


FILMS = [
    ("Forbidden Ground", "Forbidden Ground is a Hungarian film directed by Pál Gábor. It was released in 1968."),
    ("Pál Gábor", "Pál Gábor was a Hungarian director and screenwriter, born on 2 November 1932 in Budapest."),
    ("Silent Harbour", "Silent Harbour is a Hungarian film about fishermen directed by Lajos Varga in 1971."),
    ("Red Meadow", "Red Meadow is a Hungarian film about a village. It was released in 1966."),
    ("Lajos Varga", "Lajos Varga was a Hungarian director, born in 1940 in Szeged."),
    ("Anna Kovács", "Anna Kovács was a Hungarian film editor and director, born in 1935, who cut Red Meadow."),
    ("Béla Tóth", "Béla Tóth was a Hungarian director of films, born in 1931 in Pécs."),
]


@pytest.fixture(scope="module")
def index():
    docs = [Document(id_=f"d{i}", text=f"{t}\n{x}", metadata={"title": t}) for i, (t, x) in enumerate(FILMS)]
    return CausalGraphIndex.from_documents(docs)


def _ranked(index, preset, q, k=3):
    return [n.node.ref_doc_id for n in index.as_retriever(preset=preset, similarity_top_k=k).retrieve(q)]


def test_the_director_named_only_by_the_film_is_promoted(index):
    q = "When was the director of Forbidden Ground born?"
    nodes = index.as_retriever(preset="passages", similarity_top_k=2).retrieve(q)
    assert sorted(n.node.ref_doc_id for n in nodes) == ["d0", "d1"]
    assert all(get_provenance(n)["stage"] == "title_bridge" for n in nodes)
    # without bridges (query_title_weight and bridge_weight 0) the ranking is the walk's
    off = index.as_retriever(preset="passages", similarity_top_k=2, bridge_weight=0.0, query_title_weight=0.0)
    assert all(get_provenance(n)["stage"] == "propagation" for n in off.retrieve(q))


def test_a_comparison_question_gets_both_named_films(index):
    q = "Which film came out first, Silent Harbour or Forbidden Ground?"
    top = _ranked(index, "passages", q, k=3)
    assert {"d0", "d2"} <= set(top[:3])
    # and each film's director follows them
    top5 = _ranked(index, "passages", q, k=5)
    assert {"d1", "d4"} <= set(top5)


def test_title_links_are_read_once_per_index(index):
    a = index.as_retriever(preset="passages")
    b = index.as_retriever(preset="passages", bridge_weight=1.0)
    assert a._titles is b._titles and a._titles.n == len(FILMS)
    assert index.as_retriever(preset="ppr")._titles is None


def test_an_index_without_titles_reads_no_unit_for_title_links(monkeypatch):
    from llama_index_ext_causalrag.causal_graph import propagation_retriever, state

    untitled = CausalGraphIndex.from_documents([Document(id_=f"d{i}", text=x) for i, (_, x) in enumerate(FILMS)])
    assert untitled.params["titled"] is False

    def no_read(nodes):
        raise AssertionError("title links read from an index built without titles")

    monkeypatch.setattr(state, "present_title_links", no_read)
    monkeypatch.setattr(propagation_retriever, "present_title_links", no_read)
    r = untitled.as_retriever(preset="passages")
    assert r._titles is None
    assert r.retrieve("When was the director of Forbidden Ground born?")  # the walk answers
    monkeypatch.undo()
    # a titled document inserted later turns title links on
    untitled.insert(Document(id_="t", text="Free Guy is a film by Shawn Levy.", metadata={"title": "Free Guy"}))
    assert untitled.params["titled"] is True
    assert untitled.as_retriever(preset="passages")._titles.n == 1


def test_a_titled_index_records_it(index):
    assert index.params["titled"] is True
