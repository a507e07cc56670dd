"""explain/html.py: the page holds every part of the explanation dict, escaped, and loads nothing."""

from __future__ import annotations

import re

from _explain_helpers import HOSTILE_ID, PWNED, QUOTE_ID, parse, sample_explanation
from llama_index_ext_causalrag.explain import render_page
from llama_index_ext_causalrag.explain.html import LIST_OPEN_MAX, layout, render_graph_svg, render_value


def test_hostile_strings_are_text_never_markup():
    page = render_page(sample_explanation(hostile=True))
    p = parse(page)
    tags = [t for t, _ in p.tags]
    assert "script" not in tags
    assert not [(t, a) for t, attrs in p.tags for a in attrs if a.startswith("on")], "an event handler attribute"
    text = "".join(p.text)
    assert text.count(PWNED) >= 3  # node text, metadata value, graph label (a <title> tooltip)
    assert HOSTILE_ID in text and "<script>k</script>" in text  # an id and a metadata key
    assert QUOTE_ID in text
    assert "&lt;script&gt;" in page and "<script" not in page


def test_every_node_id_score_and_text_and_every_stage_is_on_the_page():
    ex = sample_explanation(hostile=True)
    p = parse(render_page(ex))
    text = "".join(p.text)
    for n in ex["nodes"]:
        assert n["id"] in text
        assert n["text"][:60] in text
    assert "0.83" in text and "0.61" in text
    assert ex["query"] in text
    for st in ex["stages"]:
        assert st["name"] in text and st["why"] in text
    assert "coral bleaching, reef fish" in text  # a module label in the SVG


def test_page_loads_nothing_and_forbids_scripts():
    page = render_page(sample_explanation())
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_graph_svg_is_present_only_when_a_graph_is_given():
    ex = sample_explanation(hostile=False)
    p = parse(render_page(ex))
    assert [t for t, _ in p.tags].count("svg") == 1
    ids = {a["data-id"] for t, a in p.tags if t == "g" and "data-id" in a}
    assert ids == {n["id"] for n in ex["graph"]["nodes"]}
    red = [a for t, a in p.tags if t == "line" and a.get("stroke") == "#d62728"]
    assert len(red) == 1  # the one crossed gate is highlighted
    p = parse(render_page({**ex, "graph": None}))
    assert "svg" not in [t for t, _ in p.tags]


def test_long_lists_are_collapsed_short_ones_inline():
    assert "<details>" in render_value(list(range(LIST_OPEN_MAX + 1)))
    assert "<details>" not in render_value(list(range(LIST_OPEN_MAX)))
    assert render_value([]) and render_value({}) and render_value(None)
    rows = render_value([{"id": "a", "score": 1.0}, {"id": "b", "extra": 2}])
    assert rows.count("<tr>") == 3 and "<th>extra</th>" in rows


def test_minimal_dict_renders():
    page = render_page({"method": "umgp", "query": "q", "options": {}, "nodes": [], "stages": [], "graph": None})
    assert "No stage was recorded" in page and "No node was returned" in page


def test_layout_is_seeded_and_inside_the_unit_square():
    g = sample_explanation()["graph"]
    a, b = layout(g, seed=3), layout(g, seed=3)
    assert a == b and set(a) == {n["id"] for n in g["nodes"]}
    assert all(0.0 <= x <= 1.0 and 0.0 <= y <= 1.0 for x, y in a.values())
    assert render_graph_svg(g) == render_graph_svg(g)
    assert layout({"nodes": [], "edges": []}) == {}
