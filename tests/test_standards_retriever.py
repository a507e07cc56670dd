"""StandardsGraph persistence, PDF reading and StructureAwareRetriever stages and provenance."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import Document, MetadataMode, QueryBundle

sys.path.insert(0, str(Path(__file__).parent))
from llama_index_ext_causalrag.standards import (  # noqa: E402
    PDFStandardReader,
    StandardsFolderReader,
    StandardsGraph,
    StructureAwareRetriever,
    StructuredDocumentParser,
)
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, get_provenance  # noqa: E402
from standards_fixtures import ETSI_TEXT, TOY_RECOVERY, TOY_TRANSPORT  # noqa: E402


class BagOfWordsEmbedding(BaseEmbedding):
    """Deterministic offline embedding: hashed word counts, so cosine follows shared words."""

    dim: int = 64

    @classmethod
    def class_name(cls) -> str:
        return "BagOfWordsEmbedding"

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(self.dim)
        for w in re.findall(r"[a-z]{3,}", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        return (v + 1e-3).tolist()

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vec(text)


def _docs() -> List[Document]:
    return [
        Document(text=TOY_TRANSPORT, id_="rfc9990"),
        Document(text=TOY_RECOVERY, id_="rfc9991"),
        Document(text=ETSI_TEXT, id_="en300999"),
    ]


def _retriever(**kw: Any) -> StructureAwareRetriever:
    return StructureAwareRetriever.from_documents(_docs(), embed_model=BagOfWordsEmbedding(), **kw)


def test_is_a_base_retriever_and_validates() -> None:
    assert BaseRetriever in StructureAwareRetriever.__mro__
    g = StandardsGraph.from_documents(_docs()).embed(BagOfWordsEmbedding())
    with pytest.raises(ValueError, match="both False"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), use_bm25=False, use_dense=False)
    with pytest.raises(ValueError, match="unknown edge relation 'friend'"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), edge_weights={"friend": 1.0})
    with pytest.raises(ValueError, match=r"rrf_weights must be two non-negative numbers .* got \(1.0, -1.0\)"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), rrf_weights=(1.0, -1.0))
    with pytest.raises(ValueError, match="num_seeds must be >= 1, got 0"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), num_seeds=0)
    with pytest.raises(ValueError, match="rfc9990.*more than once"):
        StandardsGraph.from_documents(_docs() + [Document(text="x", id_="rfc9990")])


def test_expansion_follows_citation_with_provenance_path() -> None:
    r = _retriever(similarity_top_k=4, num_seeds=1)
    res = r.retrieve("How do streams carry ordered bytes?")
    ids = [n.node.node_id for n in res]
    assert ids[0] == "rfc9990::1.1"
    assert "rfc9990::2.1" in ids  # cited by the seed ({{frame-ack}})
    prov = {n.node.node_id: get_provenance(n) for n in res}
    assert prov["rfc9990::1.1"]["stage"] == "seed"
    assert set(prov["rfc9990::1.1"]["scores"]) >= {"bm25", "dense", "rrf", "graph"}
    exp = prov["rfc9990::2.1"]
    assert exp["stage"] == "graph_expansion"
    assert exp["path"] == ["rfc9990::1.1", "cites", "rfc9990::2.1"]
    assert exp["method"] == "standards"
    for n in res:
        assert PROVENANCE_KEY not in n.node.get_content(metadata_mode=MetadataMode.LLM)
        assert PROVENANCE_KEY not in n.node.get_content(metadata_mode=MetadataMode.EMBED)
    # the shared graph node was not mutated
    assert PROVENANCE_KEY not in r.graph.node("rfc9990::1.1").metadata


def test_stage_switches() -> None:
    q = "How do streams carry ordered bytes?"
    flat = _retriever(similarity_top_k=4, num_seeds=1, expand=False, graph_rerank=False)
    stages = {get_provenance(n)["stage"] for n in flat.retrieve(q)}
    assert "graph_expansion" not in stages
    dense_only = _retriever(similarity_top_k=3, use_bm25=False, expand=False)
    assert all("bm25" not in get_provenance(n)["scores"] for n in dense_only.retrieve(q))
    no_rerank = _retriever(similarity_top_k=4, num_seeds=1, graph_rerank=False)
    ids = [n.node.node_id for n in no_rerank.retrieve(q)]
    assert ids[:2] == ["rfc9990::1.1", "rfc9990::2.1"]  # seed, then what it brought in
    # max_per_section: with small chunks, repeats of a section go behind every first occurrence
    small = StructuredDocumentParser(chunk_size=8)

    def sections(**kw: Any) -> List[str]:
        r = StructureAwareRetriever.from_documents(
            _docs(), parser=small, embed_model=BagOfWordsEmbedding(), similarity_top_k=12, **kw
        )
        return [r.graph.section_of(n.node.node_id) for n in r.retrieve(q)]

    plain, capped = sections(), sections(max_per_section=1)

    def first_repeat(secs: List[str]) -> int:
        return next((i for i, s in enumerate(secs) if s in secs[:i]), len(secs))

    assert first_repeat(plain) < len(set(plain))  # uncapped: a repeat comes before some new section
    assert first_repeat(capped) == len(set(capped))  # capped: all distinct sections first
    # a strong hub penalty pushes the most linked unit down
    g = no_rerank.graph
    hub = max(g.unit_ids, key=g.degree)
    base = _retriever(similarity_top_k=10, beta=0.0).retrieve(q)
    pen = _retriever(similarity_top_k=10, beta=5.0).retrieve(q)
    rank = lambda res: [n.node.node_id for n in res].index(hub) if hub in [n.node.node_id for n in res] else 99  # noqa: E731
    assert rank(pen) >= rank(base)


IDENT_TEXT = """# Error Handling {#errors}

An endpoint closes the connection with an error code. Error codes are listed in {{codes}}.
Each error code names an error; a server picks the error code that fits.

# Error Codes {#codes}

PROTOCOL_VIOLATION is a generic error code for a server or client.

# Tokens {#tokens}

A server that receives a bad token closes the connection with INVALID_TOKEN.
"""


def test_query_identifiers() -> None:
    from llama_index_ext_causalrag.standards.identifiers import query_identifiers

    q = "Is INVALID_TOKEN or max_idle_timeout sent, and what is kInitialRtt? Not QUIC, TLS or RFC 9000."
    assert query_identifiers(q) == ["INVALID_TOKEN", "max_idle_timeout", "kInitialRtt"]
    assert query_identifiers("plain words only, HTTP/3 and ACK frames") == []
    assert query_identifiers("H3_NO_ERROR then H3_NO_ERROR") == ["H3_NO_ERROR", "H3_NO_ERROR"]


def test_identifier_weight_adds_the_identifiers_own_bm25_score() -> None:
    docs = [Document(text=IDENT_TEXT, id_="rfc9992")]
    q = "When should a server use the INVALID_TOKEN error code?"

    def bm25(w: float) -> dict:
        r = StructureAwareRetriever.from_documents(
            docs, embed_model=BagOfWordsEmbedding(), expand=False, graph_rerank=False, identifier_weight=w
        )
        _, scores, _ = r._first_stage(QueryBundle(q))
        return {u: s["bm25"] for u, s in scores.items() if "bm25" in s}

    plain, w2, w3 = bm25(1.0), bm25(2.0), bm25(3.0)
    # plain BM25: the section repeating "error code" beats the one naming the identifier
    assert max(plain, key=plain.get) != "rfc9992::3"
    assert max(w2, key=w2.get) == "rfc9992::3" and max(w3, key=w3.get) == "rfc9992::3"
    # linear in the weight: only the unit holding INVALID_TOKEN gains, by the same step each time
    step = w2["rfc9992::3"] - plain["rfc9992::3"]
    assert step > 0
    np.testing.assert_allclose(w3["rfc9992::3"] - w2["rfc9992::3"], step, rtol=1e-5)
    for u in ("rfc9992::1", "rfc9992::2"):
        assert w2[u] == pytest.approx(plain[u]) and w3[u] == pytest.approx(plain[u])
    g = StandardsGraph.from_documents(docs).embed(BagOfWordsEmbedding())
    with pytest.raises(ValueError, match="identifier_weight must be >= 1, got 0.5"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), identifier_weight=0.5)
    with pytest.raises(ValueError, match="neighbour_pick must be one of .* got 'best'"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), neighbour_pick="best")


PICK_TEXT = """# Abandoning Validation {#validation}

Endpoints abandoning validation use the constant in {{recovery}}.

# Recovery {#recovery}

What for the, what for the, what for the, what for the, what for the.

Congestion windows grow during slow start and shrink on loss.

The constant kInitialRtt is 333 milliseconds.
"""


def test_neighbour_pick_cosine_vs_fused() -> None:
    """A cited section split into chunks is represented by one chunk: the one nearest the
    query by cosine (stop words count there), or the best ranked by BM25 + dense fusion."""
    docs = [Document(text=PICK_TEXT, id_="rfc9993")]
    q = "What is the value for the constant kInitialRtt of endpoints abandoning validation?"
    parser = StructuredDocumentParser(chunk_size=16)

    def cited(pick: str) -> Tuple[str, List[str]]:
        r = StructureAwareRetriever.from_documents(
            docs,
            parser=parser,
            embed_model=BagOfWordsEmbedding(),
            similarity_top_k=4,
            num_seeds=1,
            rrf_weights=(1.0, 0.25),
            neighbour_pick=pick,
        )
        res = r.retrieve(q)
        (hit,) = [n for n in res if get_provenance(n)["path"][1:2] == ["cites"]]
        return hit.node.node_id, get_provenance(hit)["path"]

    by_cos, path_cos = cited("cosine")
    by_fused, path_fused = cited("fused")
    assert path_cos[0] == path_fused[0] == "rfc9993::1::2"  # the same seed cites {{recovery}}
    assert by_cos == "rfc9993::2::2"  # the stop-word chunk: closest by bag-of-words cosine
    assert by_fused == "rfc9993::2::5"  # the chunk naming kInitialRtt: best by BM25 + dense


def test_citation_norm_shares_the_seed_strength_among_its_citations() -> None:
    q = "Overview text about a transport"

    def run(norm: float) -> dict:
        r = _retriever(similarity_top_k=10, num_seeds=1, beta=0.0, citation_norm=norm)
        return {n.node.node_id: (n.score, get_provenance(n)["path"]) for n in r.retrieve(q)}

    full, shared = run(0.0), run(1.0)
    seed = "rfc9990::1"  # Overview cites {{frames}} (-> 2.1, its only unit) and Section 2 of TOY-RECOVERY
    assert full[seed][1] == [seed] and shared[seed][1] == [seed]
    cited = {u for u, (_, p) in full.items() if p[1:2] == ["cites"]}
    assert cited == {"rfc9990::2.1", "rfc9991::2"}
    for u in cited:  # seed strength 1, cites weight 1, two citations: each keeps 1/2
        assert full[u][0] - shared[u][0] == pytest.approx(0.5)
    for u in set(full) - cited:
        assert shared[u][0] == pytest.approx(full[u][0])
    g = StandardsGraph.from_documents(_docs()).embed(BagOfWordsEmbedding())
    with pytest.raises(ValueError, match="citation_norm must be >= 0, got -1"):
        StructureAwareRetriever(g, embed_model=BagOfWordsEmbedding(), citation_norm=-1)


def test_citation_cycle_terminates_and_smoothing_runs() -> None:
    r = _retriever(similarity_top_k=10, num_seeds=5, smoothing_alpha=0.8)
    g = r.graph
    assert ("rfc9990::1.1", "rfc9990::2.1") in g.edges("cites") and ("rfc9990::2.1", "rfc9990::1.1") in g.edges("cites")
    ids = [n.node.node_id for n in r.retrieve("ACK frames acknowledge packets in streams")]
    assert len(ids) == len(set(ids)) and {"rfc9990::1.1", "rfc9990::2.1"} <= set(ids)


def test_aretrieve_equals_retrieve() -> None:
    r = _retriever(similarity_top_k=5)
    q = "power limits measured in a shielded room"
    sync = [(n.node.node_id, round(n.score, 6)) for n in r.retrieve(q)]
    asyn = [(n.node.node_id, round(n.score, 6)) for n in asyncio.run(r.aretrieve(q))]
    assert sync == asyn and sync


def test_persist_round_trip(tmp_path: Path) -> None:
    r = _retriever(similarity_top_k=5, smoothing_alpha=0.8, beta=0.1)
    r.persist(tmp_path / "idx")
    for f in ("graph.json", "nodes.json", "embeddings.npy", "params.json", "retriever.json"):
        assert (tmp_path / "idx" / f).exists()
    r2 = StructureAwareRetriever.from_persist_dir(tmp_path / "idx", embed_model=BagOfWordsEmbedding())
    assert r2.graph.edges() == r.graph.edges()
    assert r2.beta == 0.1 and r2.smoothing_alpha == 0.8
    np.testing.assert_allclose(r2.graph.embeddings, r.graph.embeddings)
    q = "loss detected per packet number space"
    assert [n.node.node_id for n in r2.retrieve(q)] == [n.node.node_id for n in r.retrieve(q)]
    with pytest.raises(FileNotFoundError, match="params.json missing"):
        StandardsGraph.from_persist_dir(tmp_path / "nothing")


# ---------------------------------------------------------------------------------------
# PDF
# ---------------------------------------------------------------------------------------


def _make_pdf(
    path: Path,
    pages: Sequence[Sequence[str]],
    outline: Sequence[Tuple[str, int, Optional[int]]],
    password: Optional[str] = None,
) -> None:
    """A text PDF written with pypdf: Helvetica text lines, an outline, optional encryption."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    w = PdfWriter()
    font = w._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for lines in pages:
        page = w.add_blank_page(612, 792)
        ops = ["BT", "/F1 11 Tf", "14 TL", "72 720 Td"]
        ops += ["(" + ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*" for ln in lines]
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops + ["ET"]).encode("latin-1"))
        page[NameObject("/Contents")] = w._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    items: list = []
    for title, pg, parent in outline:
        items.append(
            w.add_outline_item(title=title, page_number=pg, parent=items[parent] if parent is not None else None)
        )
    if password:
        w.encrypt(password)
    with open(path, "wb") as f:
        w.write(f)


PDF_PAGES = [
    [
        "ETSI EN 300 998 V1.1.1",
        "1 Scope",
        "This standard covers toy radios.",
        "2 References",
        "See clause 4.1 of EN 301 489-1.",
    ],
    ["4 Requirements", "Radios shall comply.", "4.1 Power", "Output power shall not exceed 10 mW; see clause 1."],
]
PDF_OUTLINE = [("1 Scope", 0, None), ("2 References", 0, None), ("4 Requirements", 1, None), ("4.1 Power", 1, 2)]


def test_pdf_outline_tree_and_edges(tmp_path: Path) -> None:
    _make_pdf(tmp_path / "en300998.pdf", PDF_PAGES, PDF_OUTLINE)
    (doc,) = PDFStandardReader().load_data(tmp_path / "en300998.pdf")
    assert doc.doc_id == "en300998"
    parsed = StructuredDocumentParser().parse_document(doc)
    assert [(s.key, s.parent, s.title) for s in parsed.tree.sections] == [
        ("root", None, "en300998"),
        ("1", "root", "Scope"),
        ("2", "root", "References"),
        ("4", "root", "Requirements"),
        ("4.1", "4", "Power"),
    ]
    assert parsed.tree.source == "outline"
    texts = {n.node_id: n.text for n in parsed.nodes}
    assert texts["en300998::1"].startswith("1 Scope") and "toy radios" in texts["en300998::1"]
    assert texts["en300998::4.1"].startswith("4.1 Power") and "10 mW" in texts["en300998::4.1"]
    for n in parsed.nodes:
        assert doc.text[n.start_char_idx : n.end_char_idx] == n.text
    g = StandardsGraph.from_parsed([parsed])
    assert g.edges("cites") == [("en300998::2", "ext::EN301489-1#4.1"), ("en300998::4.1", "en300998::1")]


def test_encrypted_and_malformed_pdfs_fail_clearly_others_indexed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "standards"
    folder.mkdir()
    _make_pdf(folder / "good.pdf", PDF_PAGES, PDF_OUTLINE)
    _make_pdf(folder / "locked.pdf", PDF_PAGES, PDF_OUTLINE, password="secret")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nthis is not a pdf body\n")
    (folder / "rfc9991.md").write_text(TOY_RECOVERY, encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"locked\.pdf is an encrypted PDF .* pass PDFStandardReader\(password=\.\.\.\)"
    ):
        PDFStandardReader().load_data(folder / "locked.pdf")
    with pytest.raises(ValueError, match=r"broken\.pdf is not a readable PDF"):
        PDFStandardReader().load_data(folder / "broken.pdf")
    assert PDFStandardReader(password="secret").load_data(folder / "locked.pdf")[0].metadata["standards_outline"]
    reader = StandardsFolderReader()
    with caplog.at_level(logging.WARNING):
        docs = reader.load_data(folder)
    assert sorted(d.doc_id for d in docs) == ["good", "rfc9991"]
    assert sorted(Path(f).name for f in reader.failures) == ["broken.pdf", "locked.pdf"]
    assert "skipping" in caplog.text
    g = StandardsGraph.from_documents(docs)
    assert "good::4.1" in g.unit_ids and "rfc9991::2" in g.unit_ids
    with pytest.raises(ValueError, match="encrypted"):
        StandardsFolderReader(errors="raise").load_data(folder)


class SlowEmbedding(BagOfWordsEmbedding):
    """Takes 50 ms per query embedding, sync (blocking) or async (awaiting); ``max_in_flight``
    counts the async embeddings that were awaiting at the same moment."""

    in_flight: int = 0
    max_in_flight: int = 0

    def _get_query_embedding(self, query: str) -> List[float]:
        time.sleep(0.05)
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        return self._vec(query)


def test_concurrent_aretrieve_calls_overlap() -> None:
    graph = StandardsGraph.from_documents(_docs()).embed(BagOfWordsEmbedding())
    slow = SlowEmbedding()
    r = StructureAwareRetriever(graph, embed_model=slow, similarity_top_k=3)
    queries = [f"loss detection packet number space {i}" for i in range(20)]
    r.retrieve(queries[0])  # warm-up

    async def run_all():
        return await asyncio.gather(*[r.aretrieve(q) for q in queries])

    results = asyncio.run(run_all())
    assert slow.max_in_flight > 1, "the 20 aretrieve calls embedded their queries one at a time"
    assert [[n.node.node_id for n in res] for res in results] == [
        [n.node.node_id for n in r.retrieve(q)] for q in queries
    ]


def test_pdf_outline_title_not_in_text_does_not_split_the_previous_section(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pages = [
        ["1 Scope", "This standard covers toy radios.", "It also covers toy antennas."],
        ["Text of a section whose outline title is not printed.", "It goes on."],
    ]
    outline = [("1 Scope", 0, None), ("1.1 Ghost on the same page", 0, 0), ("2 Printed nowhere", 1, None)]
    _make_pdf(tmp_path / "ghost.pdf", pages, outline)
    with caplog.at_level(logging.WARNING):
        (doc,) = PDFStandardReader().load_data(tmp_path / "ghost.pdf")
    offsets = {title: off for _, title, off in doc.metadata["standards_outline"]}
    page2 = doc.text.index("Text of a section")
    assert offsets == {"1 Scope": 0, "2 Printed nowhere": page2}  # the page start, not inside section 1
    assert "'1.1 Ghost on the same page' is not in the text of page 1" in caplog.text
    assert "'2 Printed nowhere' is not in the text of page 2" in caplog.text
    texts = {n.node_id: n.text for n in StructuredDocumentParser().parse_document(doc).nodes}
    assert "toy radios" in texts["ghost::1"] and "toy antennas" in texts["ghost::1"]
    assert texts["ghost::2"].startswith("Text of a section")


def test_place_outline_keeps_offsets_increasing() -> None:
    from llama_index_ext_causalrag.standards.pdf import place_outline

    text = "A Intro\nintro text\n\nB Next\nnext text"
    starts = [0, text.index("B Next"), len(text)]
    # a dangling destination (page 0) after a later section is left out, not placed at offset 1
    got = place_outline(text, starts, [(1, "A Intro", 0), (1, "B Next", 1), (1, "Lost", 0)])
    assert got == [[1, "A Intro", 0], [1, "B Next", starts[1]]]
