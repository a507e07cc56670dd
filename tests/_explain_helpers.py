"""A sample explanation dict (the format ``explain()`` produces), optionally with hostile strings,
and a parser that separates an HTML page's elements from its text."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any, Dict, List, Tuple

PWNED = "<script>document.title='pwned'</script>"
HOSTILE_ID = "doc<script>alert(1)</script>::0"
QUOTE_ID = 'q" onmouseover="document.title=\'pwned\'" x="'


def sample_explanation(hostile: bool = True) -> Dict[str, Any]:
    """A causalrag2 explanation: three stages, three nodes, a small graph with one crossed gate.
    ``hostile`` puts ``<script>`` into a node text, an id, a metadata key and value and a graph label."""
    bad_id = HOSTILE_ID if hostile else "coral-0::1"
    quote_id = QUOTE_ID if hostile else "wheat-1::0"
    meta_key = "<script>k</script>" if hostile else "ref_doc_id"
    return {
        "method": "causalrag2",
        "query": "Why does ocean warming lead to coral bleaching?",
        "options": {"similarity_top_k": 3, "preset": "causalrag2", "use_filter": True},
        "nodes": [
            {
                "id": "coral-0::0",
                "score": 0.83,
                "metadata": {"ref_doc_id": "coral-0", "section": "results"},
                "text": "Ocean warming stresses symbiotic algae. This leads to coral bleaching on shallow reefs.",
            },
            {
                "id": bad_id,
                "score": 0.61,
                "metadata": {meta_key: PWNED if hostile else "coral-0"},
                "text": (PWNED + " Marine heatwaves were measured.") if hostile else "Marine heatwaves were measured.",
            },
            {"id": quote_id, "score": None, "metadata": {}, "text": "Heavy drought stress was measured. " * 40},
        ],
        "stages": [
            {
                "name": "seed",
                "why": "Entities whose names match the query best, plus dense seeds.",
                "took": {"query": "Why does ocean warming lead to coral bleaching?", "entities": 24},
                "decided": {
                    "seeds": [{"id": "E:ocean warming", "score": 0.91}, {"id": "E:coral bleaching", "score": 0.88}]
                },
            },
            {
                "name": "gated_expansion",
                "why": "Best-first over relations; a gate was crossed to the reef module.",
                "took": {"seeds": ["E:ocean warming", "E:coral bleaching"], "max_hops": 3},
                "decided": {
                    "visited": [f"E:entity {i}" for i in range(25)],
                    "gates_crossed": [["L0_000001", "L0_000002"]],
                },
            },
            {
                "name": "causal_filter",
                "why": "Dropped units whose best causal path is weaker than 0.3.",
                "took": {"candidates": 5, "min_strength": 0.3},
                "decided": {
                    "kept": ["coral-0::0", bad_id, quote_id],
                    "dropped": {"wheat-0::0": 0.12, "forest-1::0": 0.05},
                },
            },
        ],
        "graph": {
            "nodes": [
                {"id": "E:ocean warming", "label": "ocean warming", "kind": "entity"},
                {"id": "E:coral bleaching", "label": "coral bleaching", "kind": "entity"},
                {"id": "E:symbiotic algae", "label": "symbiotic algae", "kind": "entity"},
                {"id": "E:reef fish", "label": PWNED if hostile else "reef fish", "kind": "entity"},
                {"id": "L0_000001", "label": "ocean warming, marine heatwaves", "kind": "module"},
                {"id": "L0_000002", "label": "coral bleaching, reef fish", "kind": "module"},
            ],
            "edges": [
                {
                    "source": "E:ocean warming",
                    "target": "E:symbiotic algae",
                    "kind": "relation",
                    "weight": 2.0,
                    "crossed": False,
                },
                {
                    "source": "E:coral bleaching",
                    "target": "E:reef fish",
                    "kind": "relation",
                    "weight": 1.0,
                    "crossed": False,
                },
                {"source": "L0_000001", "target": "E:ocean warming", "kind": "member", "weight": 1.0, "crossed": False},
                {
                    "source": "L0_000002",
                    "target": "E:coral bleaching",
                    "kind": "member",
                    "weight": 1.0,
                    "crossed": False,
                },
                {"source": "L0_000001", "target": "L0_000002", "kind": "gate", "weight": 0.8, "crossed": True},
            ],
        },
    }


class PageParser(HTMLParser):
    """Start tags with their attributes, and the text (entities decoded) outside <style>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: List[Tuple[str, Dict[str, str]]] = []
        self.text: List[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Any]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.text.append(data)


def parse(page: str) -> PageParser:
    p = PageParser()
    p.feed(page)
    p.close()
    return p
