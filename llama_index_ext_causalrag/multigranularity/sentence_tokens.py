"""BM25 tokens of multi-granularity units, each sentence tokenized once."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.experts.sparse import DEFAULT_TOKEN_PATTERN, BM25Tokenizer
from llama_index_ext_causalrag.multigranularity.windows import SENTENCE_SPAN_KEY


def _doc_key(u: BaseNode) -> str:
    return u.ref_doc_id or ""


_WORD = re.compile(r"\w")
TOKENIZER_PARAMS = ("language", "stemmer", "stopwords", "token_pattern")


def unit_tokens(units: Sequence[BaseNode], bm25_params: Dict[str, Any]) -> List[List[str]]:
    """BM25 tokens of each unit's embed text, as :class:`SparseExpert` computes them."""
    tokenizer = BM25Tokenizer(**{k: bm25_params[k] for k in TOKENIZER_PARAMS if k in bm25_params})
    return tokenizer.tokenize([u.get_content(metadata_mode=MetadataMode.EMBED) for u in units])


def _sentence_token_lists(
    units: Sequence[BaseNode],
    documents: Sequence[Document],
    sentences: Dict[str, List[Tuple[int, int]]],
    tokenizer: BM25Tokenizer,
) -> List[List[str]]:
    """BM25 tokens of every unit's embed text, tokenizing each sentence once.

    A unit's text is ``text[start of sentence s0 : end of sentence s1 - 1]``; with the default
    token pattern (``\\b\\w\\w+\\b`` on lower-cased text) no token crosses a gap without
    word characters, so its tokens are the concatenation of its sentences' tokens, after
    the tokens of the metadata header that ``MetadataMode.EMBED`` puts before every unit of
    a document. Documents where that does not hold (a gap with word characters, a header
    glued to the text, a custom text template) are tokenized unit by unit, as
    :class:`SparseExpert` does.
    """
    texts = {d.node_id: d.get_content(metadata_mode=MetadataMode.NONE) for d in documents}
    per_doc: Dict[str, Optional[Tuple[List[str], List[List[str]]]]] = {}
    out: List[List[str]] = []
    for u in units:
        did = _doc_key(u)
        if did not in per_doc:
            per_doc[did] = None
            text, spans = texts.get(did), sentences.get(did)
            body = u.get_content(metadata_mode=MetadataMode.NONE)
            full = u.get_content(metadata_mode=MetadataMode.EMBED)
            if text is not None and spans and body and full.endswith(body):
                head = full[: len(full) - len(body)]
                glued = head and _WORD.match(head[-1]) and _WORD.match(body[0])
                gaps_ok = all(e < s2 and not _WORD.search(text[e:s2]) for (_, e), (s2, _) in zip(spans, spans[1:]))
                if not glued and gaps_ok:
                    toks = tokenizer.tokenize([head, *(text[a:b] for a, b in spans)])
                    per_doc[did] = (toks[0], toks[1:])
        cached = per_doc[did]
        if cached is None:
            out.append(tokenizer(u.get_content(metadata_mode=MetadataMode.EMBED)))
            continue
        head_toks, sent_toks = cached
        s0, s1 = u.metadata[SENTENCE_SPAN_KEY]
        toks = list(head_toks)
        for k in range(int(s0), int(s1)):
            toks.extend(sent_toks[k])
        out.append(toks)
    return out


def sentence_tokens(
    units: Sequence[BaseNode],
    documents: Sequence[Document],
    sentences: Dict[str, List[Tuple[int, int]]],
    bm25_params: Dict[str, Any],
) -> List[List[str]]:
    """The BM25 tokens of every unit, equal to what :class:`SparseExpert` computes from the
    units, but with each sentence tokenized once (unit by unit for a custom ``token_pattern``)."""
    if bm25_params.get("token_pattern", DEFAULT_TOKEN_PATTERN) != DEFAULT_TOKEN_PATTERN:
        return unit_tokens(units, bm25_params)
    tokenizer = BM25Tokenizer(**{k: bm25_params[k] for k in TOKENIZER_PARAMS if k in bm25_params})
    return _sentence_token_lists(units, documents, sentences, tokenizer)
