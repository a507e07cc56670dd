"""StructuredDocumentParser: one node per section (InfoUnit), chunk children for long ones.

Adapter over the pure ``structure.py`` and ``citations.py``: Documents in, TextNodes out,
each with exact ``start_char_idx``/``end_char_idx`` into the document text, ``ref_doc_id`` =
the document id, and PARENT/CHILD relationships. ``parse_document`` also returns the section
tree, the document's aliases and its citations (``StandardsGraph`` turns those into edges).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, get_args

from llama_index.core.bridge.pydantic import Field
from llama_index.core.node_parser.interface import NodeParser
from llama_index.core.schema import BaseNode, Document, NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_ext_causalrag.presets import Choices
from llama_index_ext_causalrag.standards import citations as cit
from llama_index_ext_causalrag.standards import structure as st
from llama_index_ext_causalrag.standards.chunking import chunk_spans
from llama_index_ext_causalrag.text.tokens import count_tokens

logger = logging.getLogger(__name__)

OUTLINE_KEY = "standards_outline"  # Document.metadata key set by the PDF reader
DESIGNATION_KEY = "designation"  # optional Document.metadata: "EN 301 489-1", "RFC 9000"
_PRIVATE_PREFIX = "standards_"
_META_KEYS = [
    "doc_id",
    "node_kind",
    "section_key",
    "section_number",
    "section_title",
    "section_path",
    "anchor",
    "level",
    "retrievable",
    "chunk_index",
]
DocFormat = Literal["auto", "markdown", "plaintext", "outline"]
FORMATS = get_args(DocFormat)


def node_id_for(doc_id: str, key: str, chunk: Optional[int] = None) -> str:
    """Stable node ids: ``rfc9000::4.2`` for a section, ``rfc9000::4.2::3`` for its 3rd chunk."""
    return f"{doc_id}::{key}" if chunk is None else f"{doc_id}::{key}::{chunk}"


@dataclass
class ParsedDocument:
    """A parsed standard: its tree, nodes (sections then chunks, document order) and citations."""

    doc_id: str
    title: str
    tree: st.SectionTree
    nodes: List[TextNode]
    index: cit.DocIndex
    citations: List[Tuple[str, cit.Citation]] = field(default_factory=list)  # (citing unit id, citation)
    warnings: List[str] = field(default_factory=list)


def _front_matter(text: str) -> Dict[str, Any]:
    span = st.front_matter_span(text)
    if span is None:
        return {}
    try:
        import yaml

        data = yaml.safe_load(text[span[0] : span[1]])
        return data if isinstance(data, dict) else {}
    except Exception as e:  # malformed YAML: structure still comes from the headings
        logger.warning("front matter is not valid YAML (%s); document aliases from it are skipped.", e)
        return {}


class StructuredDocumentParser(Choices, NodeParser):
    """Split standards into their sections, keeping numbers, titles and ancestry.

    Markdown (ATX headings, kramdown-RFC anchors and implicit numbering), numbered plain
    text (``5.2.1 Title``, ``Annex A (normative)``, ``A.1``) and PDF outlines (documents from
    :class:`PDFStandardReader`). A section whose own text is longer than ``chunk_size``
    tokens becomes a non-retrievable parent of chunk children (``chunk_long_sections``);
    tables and fenced blocks are never split.
    """

    chunk_size: int = Field(default=256, gt=0, description="Max tokens of a retrievable unit.")
    chunk_long_sections: bool = Field(default=True, description="Split long sections into chunk children.")
    doc_format: DocFormat = Field(default="auto", description="auto, markdown, plaintext or outline.")
    merge_small_subtrees: bool = Field(
        default=False,
        description="A section whose whole subtree fits in chunk_size tokens is one unit (its subsections are not retrievable on their own).",
    )
    path_in_text: bool = Field(default=True, description="Put the section path (ancestry) into embedding and LLM text.")

    @classmethod
    def class_name(cls) -> str:
        return "StructuredDocumentParser"

    # ---- tree --------------------------------------------------------------------------
    def _tree(self, doc: Document, title: str) -> st.SectionTree:
        text = doc.text
        outline = doc.metadata.get(OUTLINE_KEY)
        fmt = self.doc_format
        if fmt == "auto":
            fmt = "outline" if outline else st.detect_format(text)
        if fmt == "outline":
            if not outline:
                raise ValueError(
                    f"document {doc.doc_id!r} has no {OUTLINE_KEY!r} metadata; load PDFs with "
                    "PDFStandardReader, or use doc_format='auto'."
                )
            return st.parse_outline(text, [tuple(o) for o in outline], title)
        if fmt == "markdown":
            return st.parse_markdown(text, title)
        return st.parse_plaintext(text, title)

    def parse_document(self, doc: Document) -> ParsedDocument:
        """Tree, nodes, aliases and citations of one document."""
        text = doc.text
        doc_id = doc.doc_id
        front = _front_matter(text)
        title = str(front.get("title") or doc.metadata.get("title") or doc_id)
        tree = self._tree(doc, title)
        warnings = list(tree.warnings)
        if len(tree.sections) == 1:
            msg = (
                f"no headings found in document {doc_id!r}: indexed as one root section"
                + (" split into chunks" if self.chunk_long_sections else "")
                + "; give it Markdown '#' headings or numbered headings ('5.2 Title') for structure."
            )
            logger.warning(msg)
            warnings.append(msg)

        designations = {cit.normalize_doc_key(doc_id)}
        if front.get("number"):
            designations.add(f"RFC{front['number']}")
        doc_name = front.get("docName") or front.get("docname")
        if doc_name:
            designations.add(cit.normalize_doc_key(str(doc_name)))
        if doc.metadata.get(DESIGNATION_KEY):
            designations.add(cit.normalize_doc_key(str(doc.metadata[DESIGNATION_KEY])))
        if not front:
            designations |= cit.designations_in(text)
        aliases = cit.aliases_from_front_matter(front)
        if not front:
            aliases.update(cit.aliases_from_reference_list(text))
        anchors = tree.by_anchor()
        anchors.update({a: k for a, k in tree.block_anchors.items() if a not in anchors})
        index = cit.DocIndex(doc_id, designations, aliases, tree.by_number(), anchors)
        label = title
        if front.get("number"):
            label = f"RFC {front['number']}: {title}"

        nodes: List[TextNode] = []
        cites: List[Tuple[str, cit.Citation]] = []
        fences = st.fenced_ranges(text)
        fm_span = st.front_matter_span(text)
        if fm_span is not None:  # reference lists in YAML are aliases, not citations
            fences.append(fm_span)
        section_ids = {s.key: node_id_for(doc_id, s.key) for s in tree.sections}
        merged_into: Dict[str, str] = {}  # section key -> key of the section whose unit holds it
        subtree_end: Dict[str, int] = {}
        for s in reversed(tree.sections):
            subtree_end[s.key] = max([s.end] + [subtree_end[k] for k in s.children])
        for s in tree.sections:
            if s.key in merged_into:
                merged_into.update({k: merged_into[s.key] for k in s.children})
                continue
            if (
                self.merge_small_subtrees
                and s.children
                and s.key != st.ROOT_KEY
                and count_tokens(text[s.start : subtree_end[s.key]]) <= self.chunk_size
            ):
                merged_into.update({k: s.key for k in s.children})
        for s in tree.sections:
            path_titles = [label] + [
                f"{tree.by_key[k].number} {tree.by_key[k].title}".strip() for k in tree.path(s.key)[1:]
            ]
            holds_subtree = (
                self.merge_small_subtrees
                and s.children
                and s.key not in merged_into
                and any(merged_into.get(k) == s.key for k in s.children)
            )
            end = subtree_end[s.key] if holds_subtree else s.end
            start = s.start
            if s.key == st.ROOT_KEY and fm_span is not None:
                # front matter is metadata (title, authors, reference aliases), not text to retrieve
                start = min(_after_closing_line(text, fm_span[1]), end)
                while start < end and text[start].isspace():
                    start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            body = text[s.body_start : end] if s.key != st.ROOT_KEY else text[start:end]
            if s.key in merged_into or (not body.strip() and s.children):
                retrievable = False
            else:
                retrievable = end > start and bool(body.strip())
            spans: List[Tuple[int, int]] = []
            if retrievable and self.chunk_long_sections and not holds_subtree:
                spans = chunk_spans(text, start, end, self.chunk_size, count_tokens)
                if len(spans) <= 1:
                    spans = []
            path = " > ".join(path_titles)
            node = self._make_node(
                doc,
                section_ids[s.key],
                text,
                start,
                end,
                section=s,
                path=path,
                kind="root" if s.key == st.ROOT_KEY else "section",
                retrievable=retrievable and not spans,
            )
            if s.parent is not None:
                node.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=section_ids[s.parent])
            children = [RelatedNodeInfo(node_id=section_ids[k]) for k in s.children]
            chunk_nodes: List[TextNode] = []
            for i, (a, b) in enumerate(spans, start=1):
                cn = self._make_node(
                    doc,
                    node_id_for(doc_id, s.key, i),
                    text,
                    a,
                    b,
                    section=s,
                    path=path,
                    kind="chunk",
                    retrievable=True,
                    chunk=i,
                )
                cn.relationships[NodeRelationship.PARENT] = RelatedNodeInfo(node_id=node.node_id)
                chunk_nodes.append(cn)
            for j, cn in enumerate(chunk_nodes):
                if j > 0:
                    cn.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=chunk_nodes[j - 1].node_id)
                if j + 1 < len(chunk_nodes):
                    cn.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=chunk_nodes[j + 1].node_id)
            children = [RelatedNodeInfo(node_id=c.node_id) for c in chunk_nodes] + children
            if children:
                node.relationships[NodeRelationship.CHILD] = children
            if s.key in merged_into:
                node.metadata["merged_into"] = section_ids[merged_into[s.key]]
                node.excluded_embed_metadata_keys.append("merged_into")
                node.excluded_llm_metadata_keys.append("merged_into")
            nodes.append(node)
            nodes.extend(chunk_nodes)
            for unit in chunk_nodes or ([node] if node.metadata["retrievable"] else []):
                skip = [(a, b) for a, b in fences if a < unit.end_char_idx and b > unit.start_char_idx]
                for c in cit.extract_citations(text, unit.start_char_idx, unit.end_char_idx, skip):
                    cites.append((unit.node_id, c))
        # inline alias definitions ({{!QUIC-TRANSPORT=RFC9000}}) join the document's aliases
        for _, c in cites:
            if c.alias_of:
                index.aliases.setdefault(cit.normalize_doc_key(c.doc or ""), cit.normalize_doc_key(c.alias_of))
        return ParsedDocument(doc_id, title, tree, nodes, index, cites, warnings)

    def _make_node(
        self,
        doc: Document,
        node_id: str,
        text: str,
        a: int,
        b: int,
        *,
        section: st.Section,
        path: str,
        kind: str,
        retrievable: bool,
        chunk: Optional[int] = None,
    ) -> TextNode:
        meta = {
            "doc_id": doc.doc_id,
            "node_kind": kind,
            "section_key": section.key,
            "section_number": section.number,
            "section_title": section.title,
            "section_path": path,
            "anchor": section.anchor or "",
            "level": section.level,
            "retrievable": retrievable,
            "chunk_index": chunk or 0,
        }
        # our bookkeeping keys stay out of LLM and embedding text (section_path goes in with
        # path_in_text); the Document's own keys go in unless it excludes them, as in LlamaIndex
        ours = [k for k in meta if not (self.path_in_text and k == "section_path")]
        for k, v in doc.metadata.items():
            if not k.startswith(_PRIVATE_PREFIX) and k not in meta:
                meta[k] = v
        node = TextNode(
            id_=node_id,
            text=text[a:b],
            start_char_idx=a,
            end_char_idx=b,
            metadata=meta,
            excluded_embed_metadata_keys=_excluded(ours, doc.excluded_embed_metadata_keys),
            excluded_llm_metadata_keys=_excluded(ours, doc.excluded_llm_metadata_keys),
            metadata_separator=doc.metadata_separator,
            metadata_template=doc.metadata_template,
            text_template=doc.text_template,
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc.doc_id)
        return node

    # ---- NodeParser --------------------------------------------------------------------
    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> List[BaseNode]:
        out: List[BaseNode] = []
        for n in nodes:
            if not isinstance(n, Document):
                n = Document(
                    text=n.get_content(),
                    id_=n.node_id,
                    metadata=dict(n.metadata),
                    excluded_llm_metadata_keys=list(n.excluded_llm_metadata_keys),
                    excluded_embed_metadata_keys=list(n.excluded_embed_metadata_keys),
                )
            out.extend(self.parse_document(n).nodes)
        return out

    def _postprocess_parsed_nodes(self, nodes: List[BaseNode], parent_doc_map: Dict[str, Document]) -> List[BaseNode]:
        """Keep our exact offsets (the base class re-finds text, which breaks on nested spans)."""
        return nodes


def _excluded(ours: Sequence[str], documents: Sequence[str]) -> List[str]:
    """Our keys, then the Document's excluded keys not among them."""
    return [*ours, *(k for k in documents if k not in ours)]


def _after_closing_line(text: str, pos: int) -> int:
    """Skip a bare ``---`` line closing the front matter (``--- abstract`` is kept)."""
    nl = text.find("\n", pos)
    line_end = len(text) if nl < 0 else nl + 1
    return line_end if text[pos:line_end].strip() == "---" else pos


def retrievable_nodes(nodes: Sequence[BaseNode]) -> List[BaseNode]:
    """The retrieval units: short sections and chunks of long ones (not their parents)."""
    return [n for n in nodes if n.metadata.get("retrievable", True)]
