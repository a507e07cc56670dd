"""The budget fitter of every method: one fitting stage, one vocabulary of fit modes.

:class:`FittingStage` is the ``fitting`` stage of every facade (``MultiGranularityIndex``,
``CausalGraphIndex``, ``StandardsIndex``) and of ``HypothesisRetriever``: ``budget_tokens`` and
``fit_mode``, applied by :meth:`FittingStage.fit` through the one budget cut
(:func:`~.tokens.cut_to_budget`). The fit modes (:data:`FIT_MODES`) name how the node that does
not fit the tokens left is cut: ``"prefix"``, its head; ``"sentences"``, its sentences with the
most evidence per token (greedy, possibly several pieces); ``"window"``, its one contiguous run
of sentences with the most evidence. Each method supplies the evidence: the query's terms
(:class:`QueryEvidence`, idf-weighted where the retriever has an idf), or for UMGP's parent
promotion the fused units' evidence.

The selection is pure NumPy (:mod:`.selection`: :func:`best_sentences`, :func:`best_window`);
:func:`take_runs` turns the selected runs of sentences into pieces under the node's id
(:func:`~.pieces.cut_piece`, the cut in provenance), so ``RetrieverEvaluator`` and docstore
lookups still join on ids.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.bridge.pydantic import Field, field_validator
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from llama_index_ext_causalrag.choices import check_choice, choices_of
from llama_index_ext_causalrag.presets import Stage
from llama_index_ext_causalrag.text.pieces import cut_piece
from llama_index_ext_causalrag.text.selection import best_sentences, best_window, term_overlap
from llama_index_ext_causalrag.text.sentences import ENGLISH_STOPWORDS, sentence_spans, words
from llama_index_ext_causalrag.text.tokens import (
    count_tokens,
    fit_to_budget,
    truncate_node,
    truncate_to_tokens,
    validate_budget,
)

# How the node that does not fit the budget is cut: "prefix", its head within the tokens left
# (truncate_node); "sentences", its sentences with the most evidence per token; "window", its one
# contiguous run of sentences with the most evidence.
FitMode = Literal["prefix", "sentences", "window"]
FIT_MODES = choices_of(FitMode)
DEFAULT_FIT_MODE = "prefix"
FIT_MODE_HELP = (
    "How the node that does not fit the tokens left is cut: 'prefix' (its head), 'sentences' (its "
    "sentences with the most evidence per token, as pieces under its id) or 'window' (its one "
    "contiguous run of sentences with the most evidence)."
)

Fitter = Callable[[NodeWithScore, int], List[NodeWithScore]]
Terms = Callable[[str], Iterable[str]]
Idf = Callable[[Sequence[str]], Mapping[str, float]]


def check_fit_mode(v: str) -> str:
    """``v`` if it is one of :data:`FIT_MODES` (:data:`FIT_MODE_HELP` says what each does), else a
    ``ValueError`` naming it."""
    return check_choice(v, "fit_mode", FitMode, example="sentences")


def fit_mode_of_fit_to_budget(data: Any, owner: str) -> Any:
    """``data`` (a stage's or a postprocessor's keyword arguments) with the deprecated
    ``fit_to_budget`` (UMGP before one fit-mode vocabulary) read as ``fit_mode``: ``False`` is
    ``fit_mode="prefix"``, ``True`` leaves ``fit_mode`` as given (a ``DeprecationWarning`` says so)."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    old = data.pop("fit_to_budget", None)
    if old is not None:
        warnings.warn(
            f"{owner}: fit_to_budget is deprecated; use fit_mode='prefix' for fit_to_budget=False "
            "(and 'sentences' or 'window' for True).",
            DeprecationWarning,
            stacklevel=4,
        )
        if not old:
            data["fit_mode"] = "prefix"
    return data


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

    def fitter(self, query: str, fit_mode: str = "sentences") -> Fitter:
        """:func:`fit_sentences` of a node to the tokens left, with this query's evidence."""
        return lambda nws, max_tokens: fit_sentences(nws, max_tokens, query, self, fit_mode)


def select_runs(evidence: np.ndarray, tokens: np.ndarray, budget: float, fit_mode: str) -> List[Tuple[int, int]]:
    """The runs of sentences ``[i, j)`` ``fit_mode`` keeps within ``budget`` tokens: ``"sentences"``
    :func:`best_sentences` (greedy by evidence per token), ``"window"`` :func:`best_window`."""
    if fit_mode == "window":
        i, j = best_window(evidence, tokens, budget)
        return [(i, j)] if j > i else []
    return best_sentences(evidence, tokens, budget)


def take_runs(
    text: str, sents: Sequence[Tuple[int, int]], runs: Sequence[Tuple[int, int]], room: int, shrink: bool = True
) -> List[Tuple[int, int, int]]:
    """The character spans ``(a, b, tokens)`` of ``runs`` of ``sents`` (sentence spans of ``text``)
    that fit ``room`` tokens together, in the order given. Joining sentences can add a token: a run
    that no longer fits loses its last sentences (``shrink``) or is skipped."""
    out: List[Tuple[int, int, int]] = []
    for i, j in runs:
        while shrink and j > i and count_tokens(text[sents[i][0] : sents[j - 1][1]]) > room:
            j -= 1
        if j <= i:
            continue
        a, b = sents[i][0], sents[j - 1][1]
        n_tok = count_tokens(text[a:b])
        if n_tok > room:
            continue
        out.append((a, b, n_tok))
        room -= n_tok
    return out


def fit_sentences(
    nws: NodeWithScore,
    max_tokens: int,
    query: str,
    evidence: Optional[QueryEvidence] = None,
    fit_mode: str = "sentences",
) -> List[NodeWithScore]:
    """The sentences of ``nws`` within ``max_tokens`` that hold the most query evidence
    (:func:`select_runs`: ``"sentences"`` greedy by evidence per token, ``"window"`` one
    contiguous run), as pieces in text order under the node's id, each run of adjacent sentences
    one piece, the cut in its provenance.

    The node's head within ``max_tokens`` (:func:`~.tokens.truncate_node`, the prefix) when it
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
    runs = take_runs(text, sents, select_runs(ev, tok, max_tokens, fit_mode), max_tokens)
    out = [NodeWithScore(node=cut_piece(node, a, b), score=nws.score) for a, b, _ in runs]
    return out or [truncate_node(nws, max_tokens)]


def leading_sentences(node: BaseNode, budget: int) -> Tuple[BaseNode, int]:
    """``node`` cut to ``budget`` tokens without evidence: from the first sentence that fits, the
    whole sentences that still fit; a token-truncated head (:func:`~.tokens.truncate_to_tokens`)
    when no sentence fits. Returns the piece and its tokens.

    Whole sentences first gives another text than the head alone in 874 of 993 QUIC and 206 of
    351 HolisQA-like 128-token chunks cut at 10, 30 and 60 tokens."""
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    sents = sentence_spans(text)
    first = next((k for k, (s, e) in enumerate(sents) if count_tokens(text[s:e]) <= budget), None)
    a, b = 0, 0
    if first is not None:  # the first sentence that fits, and the ones after it that still fit
        a = sents[first][0]
        for _, e in sents[first:]:
            if count_tokens(text[a:e]) > budget:
                break
            b = e
    if b == 0:
        a, b = 0, len(truncate_to_tokens(text, budget)) if budget > 0 else 0
    return cut_piece(node, a, b), count_tokens(text[a:b])


def make_fitter(fit_mode: str, query: str, evidence: Optional[QueryEvidence] = None) -> Optional[Fitter]:
    """The fitter ``fit_mode`` names for ``query`` (None for ``"prefix"``: the cut's own truncation)."""
    check_fit_mode(fit_mode)
    return None if fit_mode == "prefix" else (evidence or QueryEvidence()).fitter(query, fit_mode)


class FittingStage(Stage):
    """The ``fitting`` stage every method shares: the returned nodes fitted to ``budget_tokens``,
    whole while they fit, the next one cut by ``fit_mode``. A method's ``FittingConfig`` is one of
    these (with its own default ``fit_mode`` and, where it has them, settings of its own)."""

    budget_tokens: Optional[int] = Field(
        default=None, description="Fit the returned nodes to this many tokens; None for no budget."
    )
    fit_mode: str = Field(default=DEFAULT_FIT_MODE, description=FIT_MODE_HELP)

    @field_validator("budget_tokens", mode="before")
    @classmethod
    def _check_budget(cls, v: Any) -> Optional[int]:
        return validate_budget(v)  # before pydantic turns "100" into 100 or 2.0 into 2

    @field_validator("fit_mode")
    @classmethod
    def _check_fit_mode(cls, v: str) -> str:
        return check_fit_mode(v)

    def fit(
        self,
        nodes: Sequence[NodeWithScore],
        query: str,
        evidence: Optional[QueryEvidence] = None,
        budget_tokens: Optional[int] = None,
        truncate_last: bool = True,
    ) -> List[NodeWithScore]:
        """``nodes`` (ranked) within ``budget_tokens`` (default: this stage's; None: all of them), the
        node that does not fit cut by ``fit_mode`` with ``evidence`` (default: the query's terms);
        ``truncate_last=False``: in ``"prefix"`` mode that node is dropped, unless it is the best."""
        budget = self.budget_tokens if budget_tokens is None else validate_budget(budget_tokens)
        if budget is None:
            return list(nodes)
        return fit_to_budget(
            nodes, budget, fit=make_fitter(self.fit_mode, query, evidence), truncate_last=truncate_last
        )


__all__ = [
    "DEFAULT_FIT_MODE",
    "FIT_MODES",
    "FIT_MODE_HELP",
    "Fitter",
    "FittingStage",
    "QueryEvidence",
    "best_sentences",
    "best_window",
    "check_fit_mode",
    "content_terms",
    "fit_mode_of_fit_to_budget",
    "fit_sentences",
    "leading_sentences",
    "make_fitter",
    "select_runs",
    "take_runs",
    "term_overlap",
]
