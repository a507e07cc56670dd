"""The offline HCQR planner: a hypothesis from retrieval scores, no LLM.

With content-bearing options, the working answer ``y0`` is the option whose query
``question + option`` the retriever supports best (highest node score), ``q2`` contrasts
``y0`` with the runner-up option's terms, and ``q3`` is the question's own key terms followed
by the options' key terms not already among them (``option_terms=True``, the default; our
change: it scored higher on MedMCQA dev) or, as published, the question's key terms alone. With no
options (or only yes/no/maybe options, which carry no retrievable terms) the question is
treated as open: the best passage for the question is the draft answer, ``q1`` adds its key
terms, ``q2`` the terms that separate it from the second passage.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.embeddings.query import QueryEmbedder, find_embed_model
from llama_index_ext_causalrag.hypothesis.options import key_terms, options_are_polar
from llama_index_ext_causalrag.hypothesis.stages import PLANNING
from llama_index_ext_causalrag.hypothesis.state import HypothesisState

logger = logging.getLogger(__name__)

Queries = Dict[str, str]


def _best_score(nodes: Sequence[NodeWithScore]) -> float:
    return max((float(n.score or 0.0) for n in nodes), default=0.0)


def _text(nws: NodeWithScore) -> str:
    return nws.node.get_content(metadata_mode=MetadataMode.NONE)


class OfflineHypothesisPlanner:
    """Plans the hypothesis state and the three queries from retrieval alone.

    Args:
        max_key_terms: how many key terms of the question go into ``q3`` (and ``q2``).
        feedback_terms: for open questions, how many terms of the best passage go into ``q1``.
        option_terms: with content-bearing options, ``q3`` is the question's key terms
            followed by the options' key terms not already there (our change, the default);
            ``False`` gives the published ``q3``, the question's key terms alone. Open
            questions and yes/no/maybe options always get the published ``q3``.
    """

    def __init__(
        self, max_key_terms: int = 16, feedback_terms: int = 8, option_terms: bool = PLANNING.option_terms
    ) -> None:
        if max_key_terms < 1:
            raise ValueError(f"max_key_terms must be >= 1, got {max_key_terms!r}.")
        if feedback_terms < 0:
            raise ValueError(f"feedback_terms must be >= 0, got {feedback_terms!r}.")
        self.max_key_terms = max_key_terms
        self.feedback_terms = feedback_terms
        self.option_terms = option_terms

    # -- public -------------------------------------------------------------------------
    def plan(
        self,
        question: str,
        options: Mapping[str, str],
        retriever: BaseRetriever,
        embedder: Optional[QueryEmbedder] = None,
    ) -> Tuple[HypothesisState, Queries]:
        """``embedder`` embeds the planner's searches (and the key-features query, needed
        later) in one batch; default: one over ``retriever``'s embedding model."""
        keys, bundles, key_features = self._searches(question, options, retriever, embedder)
        results = [retriever.retrieve(qb) for qb in bundles]
        return self._finish(question, options, keys, results, key_features)

    async def aplan(
        self,
        question: str,
        options: Mapping[str, str],
        retriever: BaseRetriever,
        embedder: Optional[QueryEmbedder] = None,
    ) -> Tuple[HypothesisState, Queries]:
        keys, bundles, key_features = self._searches(question, options, retriever, embedder)
        results = await asyncio.gather(*[retriever.aretrieve(qb) for qb in bundles])
        return self._finish(question, options, keys, list(results), key_features)

    # -- internals ----------------------------------------------------------------------
    def _searches(
        self,
        question: str,
        options: Mapping[str, str],
        retriever: BaseRetriever,
        embedder: Optional[QueryEmbedder],
    ) -> Tuple[List[str], List[QueryBundle], str]:
        """The option keys, the embedded searches (one per option, or the question alone) and
        the key-features query, embedded in the same batch (it is searched later)."""
        if embedder is None:
            embedder = QueryEmbedder(find_embed_model(retriever))
        keys = list(options) if self._use_options(options) else []
        texts = [self._option_query(question, options[k]) for k in keys] if keys else [question]
        key_features = self._key_features(question, options if keys else {})
        return keys, embedder.bundles(texts, also=[key_features]), key_features

    def _finish(
        self,
        question: str,
        options: Mapping[str, str],
        keys: List[str],
        results: Sequence[Sequence[NodeWithScore]],
        key_features: str,
    ) -> Tuple[HypothesisState, Queries]:
        if keys:
            supports = {k: _best_score(r) for k, r in zip(keys, results)}
            return self._plan_with_options(question, options, supports, key_features)
        return self._plan_open(question, results[0])

    @staticmethod
    def _option_query(question: str, option: str) -> str:
        return f"{question} {option}"

    @staticmethod
    def _use_options(options: Mapping[str, str]) -> bool:
        if not options:
            return False
        if options_are_polar(options):
            logger.info(
                "HCQR offline planner: options %s carry no content terms; planning as an open question.",
                list(options.values()),
            )
            return False
        return True

    def _key_query(self, question: str) -> Tuple[List[str], str]:
        terms = key_terms(question, self.max_key_terms)
        return terms, (" ".join(terms) if terms else question)

    def _key_features(self, question: str, options: Mapping[str, str]) -> str:
        """``q3``: the question's key terms, then (``option_terms`` and ``options`` given) the
        options' key terms not already there, in option order."""
        terms, q3 = self._key_query(question)
        if not (self.option_terms and options):
            return q3
        for text in options.values():
            terms += [t for t in key_terms(text) if t not in terms]
        return " ".join(terms) if terms else question

    def _plan_with_options(
        self, question: str, options: Mapping[str, str], supports: Mapping[str, float], key_features: str
    ) -> Tuple[HypothesisState, Queries]:
        order = list(options)
        # Highest support first; ties keep the options' order.
        ranked = sorted(order, key=lambda k: (-supports[k], order.index(k)))
        best = ranked[0]
        y0 = options[best]
        q_terms, q3 = self._key_query(question)
        if len(ranked) > 1:
            runner = ranked[1]
            y_terms, r_terms = key_terms(y0), key_terms(options[runner])
            y_only = [t for t in y_terms if t not in r_terms] or y_terms
            r_only = [t for t in r_terms if t not in y_terms] or r_terms
            features = y_only + r_only
            q2 = f"{y0} or {options[runner]}: {q3}"
            rationale = (
                f"offline planner: option {best} has the highest retrieval support "
                f"({supports[best]:.4g}); runner-up {runner} ({supports[runner]:.4g})."
            )
        else:
            features, q2 = key_terms(y0), f"{y0}: {q3}"
            rationale = f"offline planner: {best} is the only option."
        if all(v == 0.0 for v in supports.values()):
            rationale += " No option retrieved any evidence; the first option is kept."
        state = HypothesisState(
            working_answer=y0,
            working_option=best,
            discriminating_features=features,
            confirming_evidence=[f"retrieval support {k}: {supports[k]:.4g}" for k in ranked],
            rationale=rationale,
            planner="offline",
        )
        queries = {"support": self._option_query(question, y0), "distinguish": q2, "key_features": key_features}
        return state, queries

    def _plan_open(self, question: str, nodes: Sequence[NodeWithScore]) -> Tuple[HypothesisState, Queries]:
        q_terms, q3 = self._key_query(question)
        if not nodes:
            state = HypothesisState(
                working_answer="",
                rationale="offline planner: open question and no passage retrieved; no draft answer.",
                planner="offline",
            )
            return state, {"support": question, "distinguish": question, "key_features": q3}
        qset = set(q_terms)
        top = [t for t in key_terms(_text(nodes[0])) if t not in qset]
        fb = top[: self.feedback_terms]
        if len(nodes) > 1:
            second = set(key_terms(_text(nodes[1])))
            contrast = [t for t in top if t not in second][: self.feedback_terms] or fb
        else:
            contrast = fb
        # Not text.sentences.split_sentence_spans (Punkt): the draft differs on 142 of 145 QUIC
        # and 60 of 60 HolisQA-like 256-token chunks (it keeps the final period, "M. Thomson").
        draft = _text(nodes[0]).strip().split(". ")[0][:300]
        state = HypothesisState(
            working_answer=draft,
            discriminating_features=contrast,
            confirming_evidence=fb,
            rationale="offline planner: open question; the best retrieved passage is the draft answer.",
            planner="offline",
        )
        queries = {
            "support": f"{question} {' '.join(fb)}".strip(),
            "distinguish": f"{question} {' '.join(contrast)}".strip(),
            "key_features": q3,
        }
        return state, queries
