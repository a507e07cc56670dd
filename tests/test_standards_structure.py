"""Section trees, citations, chunking and smoothing of the structure-aware standards retriever."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import Document, NodeRelationship

sys.path.insert(0, str(Path(__file__).parent))
from llama_index_ext_causalrag.standards import structure as st  # noqa: E402
from llama_index_ext_causalrag.standards.citations import (  # noqa: E402
    Citation,
    CitationResolver,
    DocIndex,
    extract_citations,
    normalize_doc_key,
)
from llama_index_ext_causalrag.standards.graph import StandardsGraph  # noqa: E402
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser  # noqa: E402
from llama_index_ext_causalrag.standards.smoothing import smooth_embeddings  # noqa: E402
from standards_fixtures import ETSI_TEXT, TOY_RECOVERY, TOY_TRANSPORT  # noqa: E402


def _tree(tree: st.SectionTree) -> list:
    return [(s.key, s.parent, s.title, s.anchor) for s in tree.sections]


def test_markdown_tree_kramdown_anchors_numbering_and_fences() -> None:
    tree = st.parse_markdown(TOY_TRANSPORT, "Toy Transport")
    assert _tree(tree) == [
        ("root", None, "Toy Transport", None),
        ("1", "root", "Overview", "overview"),
        ("1.1", "1", "Streams", "streams"),
        ("1.1.1", "1.1", "Stream States", "stream-states"),
        ("2", "root", "Frames", "frames"),
        ("2.1", "2", "ACK Frames", "frame-ack"),
        ("A", "root", "Extra Notes", "extra-notes"),  # after "--- back": appendix letters
    ]
    # the "# not a heading" line inside the ~~~ fence stays in 1.1's text
    s11 = tree.by_key["1.1"]
    assert "# not a heading" in TOY_TRANSPORT[s11.start : s11.end]
    assert TOY_TRANSPORT[s11.start : s11.body_start] == "## Streams {#streams}\n"
    # sections tile the text after the root: each ends where the next starts
    for a, b in zip(tree.sections, tree.sections[1:]):
        assert a.end == b.start


def test_markdown_explicit_numbers_win() -> None:
    text = "# 5 Requirements\n\nx\n\n## 5.2 Power\n\ny\n\n### 5.2.1 Limits\n\nz\n"
    tree = st.parse_markdown(text)
    assert [(s.key, s.parent, s.title) for s in tree.sections[1:]] == [
        ("5", "root", "Requirements"),
        ("5.2", "5", "Power"),
        ("5.2.1", "5.2", "Limits"),
    ]


def test_plaintext_tree_numbers_annex_and_lists_are_not_headings() -> None:
    tree = st.parse_plaintext(ETSI_TEXT)
    assert [(s.key, s.parent, s.title) for s in tree.sections] == [
        ("root", None, ""),
        ("1", "root", "Scope"),
        ("2", "root", "References"),
        ("3", "root", "Definitions"),
        ("3.1", "3", "Terms"),  # "1. Radio: ..." list items below are not headings
        ("4", "root", "Requirements"),
        ("4.1", "4", "Power"),
        ("4.1.1", "4.1", "Measurement"),
        ("A", "root", "Test methods"),
        ("A.1", "A", "Set-up"),
    ]
    assert ETSI_TEXT[tree.by_key["3.1"].start : tree.by_key["3.1"].end].count("Toy: a device") == 1


def test_plaintext_toc_lines_are_skipped() -> None:
    text = "Contents\n1 Scope ........ 3\n2 Terms ........ 4\n\n1 Scope\nScope text.\n\n2 Terms\nTerm text.\n"
    tree = st.parse_plaintext(text)
    assert [s.key for s in tree.sections] == ["root", "1", "2"]
    assert text[tree.by_key["1"].start :].startswith("1 Scope\nScope text.")


def test_duplicate_section_numbers_are_kept_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = "1 Scope\nA.\n\n2 Terms\nFirst.\n\n2 Terms\nSecond, see clause 2.\n"
    with caplog.at_level(logging.WARNING):
        tree = st.parse_plaintext(text)
    assert [s.key for s in tree.sections] == ["root", "1", "2", "2~2"]
    assert tree.by_number()["2"] == "2"
    assert any("duplicate section number '2'" in w for w in tree.warnings)
    assert "duplicate section number" in caplog.text
    g = StandardsGraph.from_documents([Document(text=text, id_="d")])
    assert g.edges("cites") == [("d::2~2", "d::2")]  # citations of a duplicate go to the first one


def test_no_headings_gives_root_plus_chunks_and_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = "\n\n".join(f"Paragraph {i} says the device shall do thing number {i} carefully." for i in range(40))
    parser = StructuredDocumentParser(chunk_size=64)
    with caplog.at_level(logging.WARNING):
        parsed = parser.parse_document(Document(text=text, id_="plain"))
    assert "no headings found in document 'plain'" in caplog.text
    root, *chunks = parsed.nodes
    assert root.node_id == "plain::root" and root.metadata["retrievable"] is False
    assert len(chunks) > 1 and all(c.metadata["node_kind"] == "chunk" for c in chunks)
    assert all(c.parent_node.node_id == "plain::root" for c in chunks)
    for c in chunks:
        assert text[c.start_char_idx : c.end_char_idx] == c.text
    # chunks cover the text in order
    assert chunks[0].start_char_idx == 0 and chunks[-1].end_char_idx == len(text.rstrip())


def test_tables_are_never_split_and_chunks_keep_ancestry() -> None:
    table = "\n".join(
        ["| code | name | meaning |", "|---|---|---|"]
        + [f"| 0x{i:02x} | ERR_{i} | error number {i} of the toy protocol |" for i in range(30)]
    )
    body = "\n\n".join(
        ["Intro paragraph about codes."] * 3 + [table] + ["After the table, more words follow here."] * 20
    )
    text = f"# Errors\n\n## Codes\n\n{body}\n"
    parser = StructuredDocumentParser(chunk_size=80)
    nodes = parser.get_nodes_from_documents([Document(text=text, id_="t")])
    chunks = [n for n in nodes if n.metadata["node_kind"] == "chunk"]
    assert len(chunks) >= 3
    holding = [c for c in chunks if "| 0x00 |" in c.text]
    assert len(holding) == 1 and table in holding[0].text  # the whole table in one chunk
    for c in chunks:
        assert c.parent_node.node_id == "t::1.1"
        assert c.metadata["section_path"] == "t > 1 Errors > 1.1 Codes"
        assert c.ref_doc_id == "t"
        assert text[c.start_char_idx : c.end_char_idx] == c.text
    section = next(n for n in nodes if n.node_id == "t::1.1")
    assert section.metadata["retrievable"] is False
    assert [r.node_id for r in section.relationships[NodeRelationship.CHILD]] == [c.node_id for c in chunks]


def test_parser_is_a_node_parser_with_exact_offsets() -> None:
    assert issubclass(StructuredDocumentParser, NodeParser)
    nodes = StructuredDocumentParser().get_nodes_from_documents([Document(text=TOY_TRANSPORT, id_="rfc9990")])
    for n in nodes:
        assert TOY_TRANSPORT[n.start_char_idx : n.end_char_idx] == n.text
        assert n.ref_doc_id == "rfc9990"
    with pytest.raises(ValueError, match="doc_format must be one of"):
        StructuredDocumentParser(doc_format="docx")


def test_extract_citations_all_forms() -> None:
    text = (
        "See {{frame-ack}}, {{Section 6 of QUIC-RECOVERY}}, {{!QUIC-TRANSPORT=RFC9000}}, "
        "{{Sections 12.2 and 12.3 of\nRFC9000}}, {{{Ian Swett}}}. As in Section 4.2 of [RFC9001], "
        "clause 5.2 of ETSI EN 301 489-1, RFC 9000, [QUIC-TLS], Section 3, clause 7 and Annex B."
    )
    got = [(c.doc, c.section, c.anchor, c.alias_of) for c in extract_citations(text)]
    assert got == [
        (None, None, "frame-ack", None),
        ("QUIC-RECOVERY", "6", None, None),
        ("QUIC-TRANSPORT", None, None, "RFC9000"),
        ("RFC9000", "12.2", None, None),
        ("RFC9000", "12.3", None, None),
        ("RFC9001", "4.2", None, None),
        ("ETSI EN 301 489-1", "5.2", None, None),
        ("RFC 9000", None, None, None),
        ("QUIC-TLS", "3", None, None),
        (None, "7", None, None),
        (None, "B", None, None),
    ]
    assert normalize_doc_key("ETSI EN 301 489-1 V2.2.3") == "EN301489-1"
    assert normalize_doc_key("draft-ietf-quic-http-latest") == "DRAFT-IETF-QUIC-HTTP"


def test_resolution_rules() -> None:
    a = DocIndex("a", {"RFC1"}, {"B-DOC": "RFC2"}, {"1": "1", "2": "2"}, {"intro": "1"})
    b = DocIndex("b", {"RFC2"}, {}, {"3": "3"}, {})
    r = CitationResolver([a, b], user_aliases={"THE-B": "b"})
    assert r.resolve(Citation(0, 1, "", section="2"), "a").section_key == "2"  # section only: here
    t = r.resolve(Citation(0, 1, "", doc="B-DOC"), "a")
    assert (t.doc_id, t.section_key) == ("b", "root")  # document only: its root
    t = r.resolve(Citation(0, 1, "", doc="THE-B", section="3"), "a")
    assert (t.doc_id, t.section_key) == ("b", "3")  # both: that section there (user alias)
    assert r.resolve(Citation(0, 1, "", doc="RFC9", section="1"), "a").external == "RFC9#1"
    assert r.resolve(Citation(0, 1, "", anchor="intro"), "a").section_key == "1"
    assert r.resolve(Citation(0, 1, "", anchor="nowhere"), "a").external == "A#nowhere"


def test_smoothing_hand_computed() -> None:
    x = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    a = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=float)
    x_before = x.copy()
    out = smooth_embeddings(x, a, alpha=0.8)
    e0 = np.array([0.8, 0.2]) / np.linalg.norm([0.8, 0.2])
    e1 = np.array([0.2, 0.8]) / np.linalg.norm([0.2, 0.8])
    np.testing.assert_allclose(out, [e0, e1, [0.6, 0.8]], rtol=1e-6)
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_allclose(smooth_embeddings(x, a, alpha=1.0)[0], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\], got 1.5"):
        smooth_embeddings(x, a, alpha=1.5)
    with pytest.raises(ValueError, match="adjacency must have shape"):
        smooth_embeddings(x, a[:2, :2])


def test_toy_corpus_graph_exact_edges() -> None:
    docs = [
        Document(text=TOY_TRANSPORT, id_="rfc9990"),
        Document(text=TOY_RECOVERY, id_="rfc9991"),
        Document(text=ETSI_TEXT, id_="en300999"),
    ]
    g = StandardsGraph.from_documents(docs)
    assert g.edges("cites") == [
        ("en300999::2", "ext::EN301489-1"),  # "[1] ETSI EN 301 489-1" in the reference list
        ("en300999::3.1", "en300999::4.1"),  # clause 4.1
        ("en300999::4.1", "ext::EN301489-1#5.2"),  # clause 5.2 of [1]: alias from the reference list
        ("en300999::4.1.1", "en300999::A"),  # Annex A
        ("rfc9990::1", "rfc9990::2"),  # {{frames}}
        ("rfc9990::1", "rfc9991::2"),  # {{Section 2 of TOY-RECOVERY}} via front matter seriesinfo
        ("rfc9990::1.1", "rfc9990::2.1"),  # {{frame-ack}}
        ("rfc9990::1.1.1", "ext::NOPE#3"),  # missing document: placeholder, no error
        ("rfc9990::1.1.1", "ext::RFC8446"),  # {{TLS13}} -> TLS13: RFC8446, not in the corpus
        ("rfc9990::2.1", "rfc9990::1.1"),  # {{streams}}: closes a citation cycle with 1.1 -> 2.1
        ("rfc9991::2", "rfc9990::root"),  # {{!TOY-TRANSPORT=RFC9990}} inline alias
    ]
    assert ("ext::NOPE#3", "ext::NOPE") in g.edges("part_of")
    assert g.graph.nodes["ext::NOPE"]["kind"] == "external"
    assert ("rfc9990::2.1", "rfc9990::2") in g.edges("part_of")
    # the heading-only "Frames" section is not retrievable; it stands for its child's unit
    assert "rfc9990::2" not in g.unit_ids and g.units_of("rfc9990::2") == ["rfc9990::2.1"]
    nb = g.unit_neighbours("rfc9990::1.1")
    assert nb["cites"] == [["rfc9990::2.1"]] and nb["cited_by"] == [["rfc9990::2.1"]]
    assert nb["parent"] == [["rfc9990::1"]] and nb["child"] == [["rfc9990::1.1.1"]]
    # "Overview" cites the heading-only "Frames" (stands for its child 2.1) and RFC 9991 section 2
    assert g.unit_neighbours("rfc9990::1")["cites"] == [["rfc9990::2.1"], ["rfc9991::2"]]


def test_merge_small_subtrees_keeps_a_small_subtree_whole() -> None:
    docs = [Document(text=TOY_TRANSPORT, id_="rfc9990")]
    g = StandardsGraph.from_documents(docs, parser=StructuredDocumentParser(merge_small_subtrees=True))
    assert g.unit_ids == ["rfc9990::root", "rfc9990::1", "rfc9990::2", "rfc9990::A"]
    assert "### Stream States" in g.node("rfc9990::1").text
    assert g.node("rfc9990::1.1.1").metadata["merged_into"] == "rfc9990::1"
    assert g.units_of("rfc9990::2.1") == ["rfc9990::2"]
    # citations written in merged subsections now start at the unit that holds them
    assert ("rfc9990::2", "rfc9990::1.1") in g.edges("cites")


def test_front_matter_is_not_retrievable_text() -> None:
    """The YAML front matter (title, authors, reference aliases) is metadata: the root unit
    starts after it, its aliases still resolve citations."""
    parsed = StructuredDocumentParser().parse_document(Document(text=TOY_TRANSPORT, id_="rfc9990"))
    root = parsed.nodes[0]
    assert root.node_id == "rfc9990::root" and root.metadata["retrievable"] is True
    fm_end = TOY_TRANSPORT.index("--- abstract")
    assert root.start_char_idx == fm_end
    assert root.text == TOY_TRANSPORT[fm_end : root.end_char_idx]
    assert root.text.startswith("--- abstract") and "Toy abstract about a transport." in root.text
    assert "normative:" not in root.text and "TLS13" not in root.text
    assert parsed.index.aliases  # TOY-RECOVERY and TLS13 from the front matter still known
    # a long front matter is not chunked into retrievable units either
    long_fm = (
        "---\ntitle: Big\nauthor:\n"
        + "".join(f"  - name: Author {i}\n" for i in range(300))
        + "---\n\n# One\n\nBody.\n"
    )
    nodes = StructuredDocumentParser(chunk_size=32).parse_document(Document(text=long_fm, id_="big")).nodes
    assert all("Author" not in n.text for n in nodes if n.metadata["retrievable"])
    assert [n.node_id for n in nodes if n.metadata["retrievable"]] == ["big::1"]
