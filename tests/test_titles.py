"""Title nodes of the ``passages`` preset: the pure title graph (hand-built cases) and a
retriever that reaches a second-hop passage through the title its first hop names."""

import numpy as np
import pytest
from llama_index.core import Document

from llama_index_ext_causalrag import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.presets import CAUSALRAG2_PRESETS, PASSAGES_TITLE_WEIGHT
from llama_index_ext_causalrag.causal_graph.stages import PropagationConfig
from llama_index_ext_causalrag.causal_graph.titles import MAX_TITLE_WORDS, title_key, title_links


def test_title_key_drops_qualifiers_and_long_titles():
    assert title_key("Mercury (planet)") == "mercury"
    assert title_key("Pál Gábor") == "pál gábor"
    assert title_key(" ".join(["word"] * (MAX_TITLE_WORDS + 1))) == ""
    assert title_key(None) == "" and title_key("") == ""


def test_title_links_own_and_named_edges():
    titles = ["Forbidden Ground", "Pál Gábor", None, "Free Guy"]
    texts = [
        "Forbidden Ground\nForbidden Ground is a film directed by Pál Gábor.",
        "Pál Gábor\nPál Gábor was a director.",
        "A list naming Free Guy and Pál Gábor.",
        "Free Guy\nFree Guy is a film.",
    ]
    t = title_links(titles, texts)
    assert t.keys == {"forbidden ground": 0, "pál gábor": 1, "free guy": 2}
    assert list(zip(t.own_title.tolist(), t.own_unit.tolist())) == [(0, 0), (1, 1), (2, 3)]
    # a unit naming its own title adds no edge; the untitled unit names two titles
    assert list(zip(t.named_title.tolist(), t.named_unit.tolist())) == [(1, 0), (1, 2), (2, 2)]
    assert t.named_in("Who directed Forbidden Ground, and Free Guy?") == [0, 2]
    with pytest.raises(ValueError, match="one length"):
        title_links(titles, texts[:2])


def test_title_weight_is_checked_and_only_the_passages_preset_sets_it():
    with pytest.raises(ValueError, match="title_weight"):
        PropagationConfig(title_weight=-1.0)
    assert CAUSALRAG2_PRESETS["passages"].propagation.title_weight == PASSAGES_TITLE_WEIGHT
    assert CAUSALRAG2_PRESETS["ppr"].propagation.title_weight == 0.0


FILMS = [
    ("Forbidden Ground", "Forbidden Ground is a Hungarian film directed by Pál Gábor. It was released in 1968."),
    ("Pál Gábor", "Pál Gábor was a Hungarian director and screenwriter, born on 2 November 1932 in Budapest."),
    ("Silent Harbour", "Silent Harbour is a Hungarian film about fishermen. It was released in 1971."),
    ("Red Meadow", "Red Meadow is a Hungarian film about a village. It was released in 1966."),
    ("Lajos Varga", "Lajos Varga was a Hungarian actor, born in 1940 in Szeged, known for Silent Harbour."),
    ("Anna Kovács", "Anna Kovács was a Hungarian film editor, born in 1935, who cut Red Meadow."),
]


def test_passages_preset_reaches_the_passage_a_first_hop_names():
    docs = [Document(id_=f"d{i}", text=f"{t}\n{x}", metadata={"title": t}) for i, (t, x) in enumerate(FILMS)]
    index = CausalGraphIndex.from_documents(docs)
    q = "When was the director of Forbidden Ground born?"
    by_preset = {}
    for preset in ("ppr", "passages"):
        nodes = index.as_retriever(preset=preset, similarity_top_k=6).retrieve(q)
        by_preset[preset] = [n.node.ref_doc_id for n in nodes]
    # the passage named as the film's director: reached through the title node "Pál Gábor"
    assert by_preset["passages"][:2] == ["d0", "d1"] or by_preset["passages"][:2] == ["d1", "d0"]
    assert by_preset["passages"].index("d1") <= by_preset["ppr"].index("d1")
    r = index.as_retriever(preset="passages")
    assert r._titles is not None and r._titles.n == len(FILMS)
    assert r._wgraph.n == len(r._ids) + len(r._unit_ids) + len(FILMS)
    assert np.isclose(r._wgraph.transition.sum(axis=0)[0, len(r._ids)], 1.0)  # a unit's arcs are a distribution
