"""What a :class:`MultiGranularityIndex` indexes: units of documents, their embeddings and BM25 tokens.

``embedding_mode`` chooses what is actually embedded:

* ``"full"``: every unit at every granularity (about 8x the text of a flat index, and
  windows of 16/32 sentences are truncated by a 256 word-piece model anyway);
* ``"pooled"``: only the finest windows are embedded; a coarser unit is the normalised mean
  of the finest windows inside it (``entropy.pool_rows``); the default of ``from_nodes``;
* ``"sentences"`` (the default of ``from_documents``): every sentence once; every unit is
  the normalised mean of its sentences weighted by their word counts (a sentence-transformer
  mean-pools over tokens, so a long sentence weighs more in the embedding of a window). It
  needs the documents, so only ``from_documents``; on HolisQA biology it embeds 1.4x the
  text of flat chunks against 1.95x for ``"pooled"``, at the same context recall.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.embeddings.batching import batch_invariant
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.multigranularity.entropy import pool_rows
from llama_index_ext_causalrag.multigranularity.presets import UMGConfig, get_preset, parser_settings
from llama_index_ext_causalrag.multigranularity.sentence_tokens import sentence_tokens
from llama_index_ext_causalrag.multigranularity.windows import (
    GRANULARITY_KEY,
    SENTENCE_SPAN_KEY,
    MultiGranularityNodeParser,
)
from llama_index_ext_causalrag.storage.update_plan import embed_by_document
from llama_index_ext_causalrag.validation import check_documents, public_call

EMBEDDING_MODES = ("pooled", "full", "sentences")


def parent_of_units(units: Sequence[BaseNode]) -> Optional[int]:
    """The granularity the units' PARENT relationships point to (None: no parents)."""
    by_id = {u.node_id: u for u in units}
    for u in units:
        rel = u.parent_node
        if rel is not None and rel.node_id in by_id:
            return int(by_id[rel.node_id].metadata[GRANULARITY_KEY])
    return None


def _doc_key(u: BaseNode) -> str:
    return u.ref_doc_id or ""


def embed_texts(
    embed_model: BaseEmbedding, texts: Sequence[str], keys: Sequence[str], show_progress: bool = False
) -> np.ndarray:
    """Embeddings of ``texts``, ``(len(texts), dim)`` float32, equal to ``embed_by_document``'s:
    one call over every document's texts when the model is batch invariant (the default ONNX
    embedder orders them by length: on HolisQA biology's 10,327 sentences 162 runs holding
    470k padded word pieces against 1,111 runs and 849k one document at a time), else one
    document (``keys``) at a time."""
    if not batch_invariant(embed_model) or not texts:
        return embed_by_document(embed_model, texts, keys, show_progress)
    vecs = embed_model.get_text_embedding_batch(list(texts), show_progress=show_progress)
    return np.stack([np.asarray(v, dtype=np.float32) for v in vecs])


def pooled_unit_embeddings(
    units: Sequence[BaseNode], embed_model: BaseEmbedding, show_progress: bool = False
) -> np.ndarray:
    """Embed the finest units; pool each coarser unit from the finest units inside its span."""
    finest = min(int(u.metadata[GRANULARITY_KEY]) for u in units)
    base = [i for i, u in enumerate(units) if int(u.metadata[GRANULARITY_KEY]) == finest]
    X = embed_texts(
        embed_model,
        [units[i].get_content(metadata_mode=MetadataMode.EMBED) for i in base],
        [_doc_key(units[i]) for i in base],
        show_progress,
    )
    row = {i: r for r, i in enumerate(base)}
    by_doc: Dict[str, List[Tuple[int, int, int]]] = {}
    for i in base:
        s0, s1 = units[i].metadata[SENTENCE_SPAN_KEY]
        by_doc.setdefault(_doc_key(units[i]), []).append((int(s0), int(s1), row[i]))
    groups: List[List[int]] = []
    for i, u in enumerate(units):
        if i in row:
            groups.append([row[i]])
            continue
        s0, s1 = u.metadata[SENTENCE_SPAN_KEY]
        inside = [r for a, b, r in by_doc.get(_doc_key(u), []) if s0 <= a and b <= s1]
        if not inside:
            raise ValueError(
                f"unit {u.node_id!r} contains no finest window; build units with "
                "MultiGranularityNodeParser or use embedding_mode='full'."
            )
        groups.append(inside)
    return pool_rows(X, groups)


def unit_embeddings(
    units: Sequence[BaseNode], model: BaseEmbedding, embedding_mode: str, show_progress: bool
) -> np.ndarray:
    if embedding_mode == "full":
        texts = [u.get_content(metadata_mode=MetadataMode.EMBED) for u in units]
        X = embed_texts(model, texts, [_doc_key(u) for u in units], show_progress)
        return pool_rows(X, [[i] for i in range(len(texts))])
    return pooled_unit_embeddings(units, model, show_progress)


def sentence_unit_embeddings(
    units: Sequence[BaseNode],
    documents: Sequence[Document],
    parser: MultiGranularityNodeParser,
    embed_model: BaseEmbedding,
    show_progress: bool = False,
) -> np.ndarray:
    """Embed each sentence once; a unit is the normalised mean of its sentences, weighted by
    their word counts. A document the parser keeps whole (``parser.is_whole``) is embedded
    whole instead: its one unit is its own vector, as a flat index would have it; so is the
    whole-document unit of a document ``parser.embeds_document`` (its windows stay sentence means)."""
    texts: List[str] = []
    keys: List[str] = []
    first: Dict[str, int] = {}
    whole: Dict[str, int] = {}
    own: Dict[str, Tuple[int, int]] = {}  # document -> (row of its own vector, its sentences)
    for d in documents:
        text = d.get_content(metadata_mode=MetadataMode.NONE)
        spans = parser._sentences.get(d.node_id)  # the parse that made the units split them
        if spans is None:
            spans = parser.split_sentences(text)
        if parser.is_whole(text, len(spans)):
            whole[d.node_id] = len(texts)
            texts.append(text)
            keys.append(d.node_id)
            continue
        if parser.embeds_document(text, len(spans)):
            own[d.node_id] = (len(texts), len(spans))
            texts.append(text)
            keys.append(d.node_id)
        first[d.node_id] = len(texts)
        texts.extend(text[a:b] for a, b in spans)
        keys.extend([d.node_id] * len(spans))
    X = embed_texts(embed_model, texts, keys, show_progress)
    groups = []
    for u in units:
        d = _doc_key(u)
        s0, s1 = (int(x) for x in u.metadata[SENTENCE_SPAN_KEY]) if d not in whole else (0, 0)
        if d in whole:
            groups.append([whole[d]])
        elif d in own and (s0, s1) == (0, own[d][1]):
            groups.append([own[d][0]])
        else:
            groups.append(list(range(first[d] + s0, first[d] + s1)))
    weights = np.array([max(1, len(t.split())) for t in texts], dtype=np.float64)
    return pool_rows(X, groups, weights)


def parse_and_embed(
    documents: Sequence[Document],
    granularities: Sequence[int],
    parent_granularity: Optional[int],
    embed_model: Optional[BaseEmbedding],
    embedding_mode: str,
    parser: Optional[MultiGranularityNodeParser],
    show_progress: bool,
    preset: "str | UMGConfig",
    bm25_params: Dict[str, Any],
    with_tokens: bool = True,
) -> Tuple[List[BaseNode], np.ndarray, BaseEmbedding, MultiGranularityNodeParser, Optional[List[List[str]]]]:
    """What :meth:`MultiGranularityIndex.from_documents` indexes: units, their embeddings, the
    embed model, the parser and (``with_tokens``) each unit's BM25 tokens."""
    with public_call("MultiGranularityIndex.from_documents"):
        documents = check_documents(documents, invisible="skip")
    if parent_granularity is None:
        parent_granularity = get_preset(preset).parent_for(granularities)
    parser = parser or MultiGranularityNodeParser(
        granularities=tuple(granularities), parent_granularity=parent_granularity, **parser_settings(preset)
    )
    units = parser.get_nodes_from_documents(documents, show_progress=show_progress)
    check_choice(embedding_mode, "embedding_mode", EMBEDDING_MODES)
    if not units:
        raise ValueError("no units: every document is empty; pass documents with text.")
    model = resolve_embed_model(embed_model)
    if embedding_mode == "sentences":
        emb = sentence_unit_embeddings(units, documents, parser, model, show_progress)
    else:
        emb = unit_embeddings(units, model, embedding_mode, show_progress)
    tokens = sentence_tokens(units, documents, parser._sentences, bm25_params) if with_tokens else None
    return units, emb, model, parser, tokens


def document_units(
    documents: List[Document],
    parser: MultiGranularityNodeParser,
    embed_model: BaseEmbedding,
    embedding_mode: str,
    bm25_params: Dict[str, Any],
) -> Tuple[List[BaseNode], Optional[np.ndarray], List[List[str]]]:
    """Units, embeddings and BM25 tokens of new documents, as ``from_documents`` makes them
    (``([], None, [])`` if they have no text)."""
    units = parser.get_nodes_from_documents(documents)
    if not units:
        return [], None, []
    if embedding_mode == "sentences":
        emb = sentence_unit_embeddings(units, documents, parser, embed_model)
    else:
        emb = unit_embeddings(units, embed_model, embedding_mode, False)
    return units, emb, sentence_tokens(units, documents, parser._sentences, bm25_params)
