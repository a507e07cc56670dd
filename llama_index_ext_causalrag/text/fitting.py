"""Fitting a node to the tokens left: its sentences with the most query evidence.

The selection is pure NumPy (:mod:`.selection`: :func:`best_sentences`, :func:`best_window`;
UMGP's parent promotion uses them too). :class:`QueryEvidence` scores a node's sentences by their lexical
overlap with the query (idf-weighted where the retriever has an idf) and :func:`fit_sentences`
keeps the best of them as pieces under the node's id (:func:`~.pieces.cut_piece`, the cut in
provenance), so ``RetrieverEvaluator`` and docstore lookups still join on ids.
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Mapping, Optional, Sequence

import numpy as np
from llama_index.core.schema import MetadataMode, NodeWithScore

from llama_index_ext_causalrag.text.pieces import cut_piece
from llama_index_ext_causalrag.text.selection import best_sentences, best_window, term_overlap
from llama_index_ext_causalrag.text.sentences import ENGLISH_STOPWORDS, sentence_spans, words
from llama_index_ext_causalrag.text.tokens import count_tokens, truncate_node

# How the last node that does not fit the budget is cut: "prefix", its head within the tokens
# left (truncate_node); "sentences", its sentences with the most query evidence (fit_sentences).
FIT_MODES = ("prefix", "sentences")
DEFAULT_FIT_MODE = "prefix"

Fitter = Callable[[NodeWithScore, int], List[NodeWithScore]]
Terms = Callable[[str], Iterable[str]]
Idf = Callable[[Sequence[str]], Mapping[str, float]]


def check_fit_mode(v: str) -> str:
    """``v`` if it is one of :data:`FIT_MODES`, else a ``ValueError`` naming it."""
    if v not in FIT_MODES:
        raise ValueError(f"fit_mode must be one of {FIT_MODES}, got {v!r}; 'prefix' keeps the head of the "
                         "last node that does not fit, 'sentences' its sentences with the most query evidence.")
    return v


def content_terms(text: str) -> List[str]:
    """Lower-cased words of ``text`` without English stopwords (the terms when a retriever has none)."""
    return [w for w in words(text) if w not in ENGLISH_STOPWORDS]


class QueryEvidence:
    """How a retriever scores a sentence against the query: its ``terms`` (a tokenizer, e.g.
    ``SparseExpert.tokenizer``; default :func:`content_terms`) and, where it has one, ``idf``
    (the query terms -> their idf, e.g. ``SparseExpert.idf``; None: plain term overlap)."""

    def __init__(self, terms: Optional[Terms] = None, idf: Optional[Idf] = None) -> None:
        self.terms: Terms = terms or content_terms
        self.idf = idf

    def scores(self, query: str, sentences: Sequence[str]) -> np.ndarray:
        """The query evidence of each of ``sentences``, shape ``(n,)`` (:func:`term_overlap`)."""
        q = list(self.terms(query))
        weights = self.idf(q) if self.idf is not None and q else None
        return term_overlap(q, [set(self.terms(s)) for s in sentences], weights)

    def fitter(self, query: str) -> Fitter:
        """``fit_sentences`` of a node to the tokens left, with this query's evidence."""
        return lambda nws, max_tokens: fit_sentences(nws, max_tokens, query, self)


def fit_sentences(nws: NodeWithScore, max_tokens: int, query: str,
                  evidence: Optional[QueryEvidence] = None) -> List[NodeWithScore]:
    """The sentences of ``nws`` within ``max_tokens`` that hold the most query evidence
    (:func:`best_sentences`: greedy by evidence per token), as pieces in text order under the
    node's id, each run of adjacent sentences one piece, the cut in its provenance.

    The node's head within ``max_tokens`` (:func:`~.tokens.truncate_node`, today's prefix) when it
    has one sentence, no sentence holds a query term, or none that does fits."""
    node = nws.node
    if not hasattr(node, "text"):
        return [nws]
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    sents = sentence_spans(text)
    if len(sents) <= 1:
        return [truncate_node(nws, max_tokens)]
    ev = (evidence or QueryEvidence()).scores(query, [text[a:b] for a, b in sents])
    tok = np.asarray([count_tokens(text[a:b]) for a, b in sents], dtype=np.float64)
    out: List[NodeWithScore] = []
    room = max_tokens
    for i, j in best_sentences(ev, tok, max_tokens):
        while j > i and count_tokens(text[sents[i][0]:sents[j - 1][1]]) > room:
            j -= 1  # joining sentences can add a token; drop the last one
        if j <= i:
            continue
        a, b = sents[i][0], sents[j - 1][1]
        out.append(NodeWithScore(node=cut_piece(node, a, b), score=nws.score))
        room -= count_tokens(text[a:b])
    return out or [truncate_node(nws, max_tokens)]


def make_fitter(fit_mode: str, query: str, evidence: Optional[QueryEvidence] = None) -> Optional[Fitter]:
    """The fitter ``fit_mode`` names for ``query`` (None for ``"prefix"``: the cut's own truncation)."""
    check_fit_mode(fit_mode)
    return None if fit_mode == "prefix" else (evidence or QueryEvidence()).fitter(query)


__all__ = ["DEFAULT_FIT_MODE", "FIT_MODES", "Fitter", "QueryEvidence", "best_sentences", "best_window",
           "check_fit_mode", "content_terms", "fit_sentences", "make_fitter", "term_overlap"]
