"""MultiGranularityNodeParser: overlapping sentence windows of several sizes, with parents.

Sentences come from NLTK's Punkt model (the ``punkt_tab`` data shipped inside
``llama_index.core``, so nothing is downloaded) extended with scientific abbreviations
("et al.", "Fig.", "e.g.", "i.e.", "Eq.", "spp." ...), after splitting on blank lines so that
titles and headings without a full stop stay separate sentences.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator, model_validator
from llama_index.core.node_parser.interface import NodeParser
from llama_index.core.schema import (
    BaseNode,
    Document,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)

from llama_index_ext_causalrag.storage.terms import LIST_KEY
from llama_index_ext_causalrag.text.sentences import EXTRA_ABBREVIATIONS, split_sentence_spans  # noqa: F401  (re-exported)
from llama_index_ext_causalrag.text.tokens import count_tokens
from llama_index_ext_causalrag.validation import caller, check_nodes

logger = logging.getLogger(__name__)

DEFAULT_GRANULARITIES: Tuple[int, ...] = (2, 4, 8, 16, 32)
DEFAULT_PARENT_GRANULARITY = 8

# metadata keys every unit carries (excluded from embedding and LLM text)
GRANULARITY_KEY = LIST_KEY  # "umg_granularity": the finest granularity the unit belongs to
GRANULARITIES_KEY = "umg_granularities"
# the coarsest: a unit's granularities are the index's granularities from umg_granularity to
# this one (several only for a whole document shorter than the windows), so a vector store
# selects one granularity's units with two scalar comparisons
GRANULARITY_MAX_KEY = "umg_granularity_max"
SENTENCE_SPAN_KEY = "umg_sentence_span"
N_TOKENS_KEY = "umg_n_tokens"
PARENT_ID_KEY = "umg_parent_id"
UMG_KEYS = [GRANULARITY_KEY, GRANULARITIES_KEY, GRANULARITY_MAX_KEY, SENTENCE_SPAN_KEY, N_TOKENS_KEY, PARENT_ID_KEY]


def window_starts(n_sentences: int, g: int) -> List[int]:
    """Starts of windows of ``g`` sentences with stride ``max(1, g // 2)``.

    The last window is aligned to the end of the document, so every sentence is covered and
    every window has ``min(g, n_sentences)`` sentences.
    """
    if n_sentences <= 0:
        return []
    if n_sentences <= g:
        return [0]
    stride = max(1, g // 2)
    starts = list(range(0, n_sentences - g + 1, stride))
    if starts[-1] + g < n_sentences:
        starts.append(n_sentences - g)
    return starts


def _check_granularities(granularities: Sequence[int]) -> Tuple[int, ...]:
    gs = tuple(int(g) for g in granularities)
    if not gs:
        raise ValueError("granularities is empty; pass e.g. (2, 4, 8, 16, 32).")
    if any(g < 1 for g in gs):
        raise ValueError(f"granularities must be >= 1 sentence, got {gs!r}; e.g. (2, 4, 8, 16, 32).")
    if any(b <= a for a, b in zip(gs, gs[1:])):
        raise ValueError(f"granularities must be strictly increasing, got {gs!r}; sort them and drop duplicates.")
    return gs


class MultiGranularityNodeParser(NodeParser):
    """Sentence windows of every size in ``granularities`` (stride ``g // 2``), one node each.

    A window reached from several granularities (a short document is one window at 8, 16
    and 32) becomes a single unit listing all of them in ``metadata["umg_granularities"]``.
    Every unit has ``ref_doc_id``, ``start_char_idx``/``end_char_idx`` into the document text,
    ``metadata["umg_granularity"]`` (smallest), ``["umg_sentence_span"]`` (half-open sentence
    indices), ``["umg_n_tokens"]``, and, if finer than ``parent_granularity``, a PARENT
    relationship and ``["umg_parent_id"]`` pointing at the ``parent_granularity`` window that
    contains it (the one whose centre is nearest). Parents list their children as CHILD.
    """

    granularities: Tuple[int, ...] = Field(
        default=DEFAULT_GRANULARITIES, description="Window sizes in sentences, strictly increasing."
    )
    parent_granularity: Optional[int] = Field(
        default=DEFAULT_PARENT_GRANULARITY,
        description="Granularity of the parents of finer units; None for no parents.",
    )
    sentence_splitter: Optional[Callable[[str], List[Tuple[int, int]]]] = Field(
        default=None,
        exclude=True,
        description="text -> sentence char spans; default: Punkt with scientific abbreviations.",
    )
    whole_document_tokens: Optional[int] = Field(
        default=None,
        ge=1,
        description="A document of at most this many tokens (and two or more sentences) is one unit at every "
        "granularity, not windows of its sentences (a short passage is a document too; with "
        "embedding_mode='sentences' it is embedded whole); None: windows whatever the length. Not kept by "
        "persist(): updates of a reopened index window every document.",
    )
    document_vector_tokens: Optional[int] = Field(
        default=None,
        ge=1,
        description="With embedding_mode='sentences': the unit spanning a whole document of at most this many "
        "tokens is embedded as the document's own text (as a flat index embeds a passage), not as the mean of "
        "its sentences; its windows keep their sentence means. None: every unit a sentence mean.",
    )
    include_prev_next_rel: bool = Field(
        default=False, description="PREVIOUS/NEXT links between windows of the same size."
    )
    # document id -> its sentence spans, from the last parse (MultiGranularityIndex reuses them)
    _sentences: Dict[str, List[Tuple[int, int]]] = PrivateAttr(default_factory=dict)

    @field_validator("granularities", mode="before")
    @classmethod
    def _validate_granularities(cls, v: Any) -> Tuple[int, ...]:
        return _check_granularities(v)

    @model_validator(mode="after")
    def _validate_parent(self) -> "MultiGranularityNodeParser":
        pg = self.parent_granularity
        if pg is not None and pg not in self.granularities:
            raise ValueError(
                f"parent_granularity {pg!r} is not among granularities {self.granularities!r}; "
                "pick one of them or pass None to disable parents."
            )
        return self

    @classmethod
    def class_name(cls) -> str:
        return "MultiGranularityNodeParser"

    def split_sentences(self, text: str) -> List[Tuple[int, int]]:
        return (self.sentence_splitter or split_sentence_spans)(text)

    def is_whole(self, text: str, n_sentences: int) -> bool:
        """Whether a document of ``text`` (``n_sentences`` sentences) is one unit: two or more
        sentences (one sentence is one unit anyway) within ``whole_document_tokens``."""
        limit = self.whole_document_tokens
        return limit is not None and n_sentences > 1 and count_tokens(text) <= limit

    def embeds_document(self, text: str, n_sentences: int) -> bool:
        """Whether the whole-document unit of ``text`` gets the document's own vector: two or more
        sentences within ``document_vector_tokens`` (a document kept whole is embedded whole anyway)."""
        limit = self.document_vector_tokens
        return limit is not None and n_sentences > 1 and count_tokens(text) <= limit

    def _parse_nodes(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> List[BaseNode]:
        out: List[BaseNode] = []
        self._sentences = {}
        for doc in nodes:
            out.extend(self._units_of(doc))
        return out

    def _units_of(self, doc: BaseNode) -> List[TextNode]:
        text = doc.get_content(metadata_mode=MetadataMode.NONE)
        sents = self.split_sentences(text)
        self._sentences[doc.node_id] = sents
        if not sents:
            logger.warning(
                "MultiGranularityNodeParser: document %r has no text; it yields no units.",
                doc.node_id,
            )
            return []
        n = len(sents)
        spans: Dict[Tuple[int, int], List[int]] = {}
        if self.is_whole(text, n):  # a short passage is a document too: one unit
            spans[(0, n)] = list(self.granularities)
        else:
            for g in self.granularities:
                for s in window_starts(n, g):
                    spans.setdefault((s, min(n, s + g)), []).append(g)
        doc_id = doc.node_id
        source = doc.as_related_node_info()
        units: Dict[Tuple[int, int], TextNode] = {}
        for (s0, s1), gs in sorted(spans.items()):
            a, b = sents[s0][0], sents[s1 - 1][1]
            body = text[a:b]
            meta = dict(doc.metadata) if self.include_metadata else {}
            meta.update(
                {
                    GRANULARITY_KEY: gs[0],
                    GRANULARITIES_KEY: list(gs),
                    GRANULARITY_MAX_KEY: gs[-1],
                    SENTENCE_SPAN_KEY: [s0, s1],
                    N_TOKENS_KEY: count_tokens(body),
                }
            )
            units[(s0, s1)] = TextNode(
                id_=f"{doc_id}::s{s0}-{s1}",
                text=body,
                metadata=meta,
                start_char_idx=a,
                end_char_idx=b,
                excluded_embed_metadata_keys=[*doc.excluded_embed_metadata_keys, *UMG_KEYS],
                excluded_llm_metadata_keys=[*doc.excluded_llm_metadata_keys, *UMG_KEYS],
                metadata_separator=doc.metadata_separator,
                metadata_template=doc.metadata_template,
                text_template=doc.text_template,
                relationships={NodeRelationship.SOURCE: source.model_copy()},
            )
        self._link_parents(units)
        if self.include_prev_next_rel:
            self._link_siblings(units)
        return list(units.values())

    def _link_parents(self, units: Dict[Tuple[int, int], TextNode]) -> None:
        pg = self.parent_granularity
        if pg is None:
            return
        parents = [sp for sp, u in units.items() if pg in u.metadata[GRANULARITIES_KEY]]
        children: Dict[Tuple[int, int], List[RelatedNodeInfo]] = {p: [] for p in parents}
        for (s0, s1), u in units.items():
            if u.metadata[GRANULARITY_KEY] >= pg:
                continue
            mid = (s0 + s1) / 2
            holders = [p for p in parents if p[0] <= s0 and s1 <= p[1]]
            if not holders:  # cannot happen with stride g // 2; kept for custom splitters
                continue
            best = min(holders, key=lambda p: (abs((p[0] + p[1]) / 2 - mid), p[0]))
            parent = units[best]
            u.relationships[NodeRelationship.PARENT] = parent.as_related_node_info()
            u.metadata[PARENT_ID_KEY] = parent.node_id
            children[best].append(u.as_related_node_info())
        for p, kids in children.items():
            if kids:
                units[p].relationships[NodeRelationship.CHILD] = kids

    @staticmethod
    def _link_siblings(units: Dict[Tuple[int, int], TextNode]) -> None:
        by_g: Dict[int, List[TextNode]] = {}
        for u in units.values():
            for g in u.metadata[GRANULARITIES_KEY]:
                by_g.setdefault(g, []).append(u)
        for seq in by_g.values():
            for prev, nxt in zip(seq, seq[1:]):
                prev.relationships.setdefault(NodeRelationship.NEXT, nxt.as_related_node_info())
                nxt.relationships.setdefault(NodeRelationship.PREVIOUS, prev.as_related_node_info())

    def _postprocess_parsed_nodes(self, nodes: List[BaseNode], parent_doc_map: Dict[str, Document]) -> List[BaseNode]:
        # Char spans are exact already; the base class would re-find them by text search.
        return nodes


def document_of_unit(unit_id: str) -> Optional[str]:
    """The document id inside a :class:`MultiGranularityNodeParser` unit id (``"<doc>::s<a>-<b>"``),
    or None for another id: the document of a unit whose node a store has not handed over yet."""
    doc, sep, span = unit_id.rpartition("::s")
    a, dash, b = span.partition("-")
    return doc if sep and dash and a.isdigit() and b.isdigit() else None


def units_by_granularity(units: Sequence[BaseNode]) -> Dict[int, List[int]]:
    """granularity -> positions in ``units`` of the units that belong to it."""
    out: Dict[int, List[int]] = {}
    for i, u in enumerate(units):
        for g in u.metadata.get(GRANULARITIES_KEY, [u.metadata.get(GRANULARITY_KEY)]):
            out.setdefault(int(g), []).append(i)
    return dict(sorted(out.items()))


def require_units(units: Sequence[BaseNode]) -> List[BaseNode]:
    """``units`` if they come from :class:`MultiGranularityNodeParser` (granularity and sentence
    span set), else a ``ValueError`` pointing plain nodes to ``from_documents``. The error names
    the public call (:func:`~llama_index_ext_causalrag.validation.caller`)."""
    units = check_nodes(units, "units")
    plain = next((u for u in units if GRANULARITY_KEY not in u.metadata or SENTENCE_SPAN_KEY not in u.metadata), None)
    if plain is not None:
        raise ValueError(
            f"{caller()} got node {plain.node_id!r} without {GRANULARITY_KEY!r} / {SENTENCE_SPAN_KEY!r} "
            "metadata: units must come from MultiGranularityNodeParser; for plain documents use "
            "MultiGranularityIndex.from_documents(documents)."
        )
    return units
