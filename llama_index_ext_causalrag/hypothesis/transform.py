"""HypothesisQueryTransform: one structured LLM call -> hypothesis state + exactly three queries.

Hypothesis-Conditioned Query Rewriting (arXiv 2603.19008). The hypothesis
plans retrieval only: it travels in ``HypothesisQueryBundle.metadata`` and never reaches node
text or the generator (``query_str`` stays the user's question).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle, QueryType

from llama_index_ext_causalrag.embeddings.query import QueryEmbedder, find_embed_model
from llama_index_ext_causalrag.hypothesis.options import (
    format_options,
    key_terms,
    normalize_options,
    split_inline_options,
)
from llama_index_ext_causalrag.hypothesis.planner import OfflineHypothesisPlanner
from llama_index_ext_causalrag.hypothesis.prompts import (
    DEFAULT_HYPOTHESIS_PROMPT,
    HYPOTHESIS_RETRY_SUFFIX,
    NO_OPTIONS_STR,
)
from llama_index_ext_causalrag.hypothesis.state import (
    QUERY_ROLES,
    HypothesisQueryBundle,
    HypothesisState,
)
from llama_index_ext_causalrag.llm.io import LLMRequest, LLMRunner, Outcome, RetryPolicy, fence
from llama_index_ext_causalrag.llm.parse import find_or_salvage_json_object
from llama_index_ext_causalrag.llm.resolve import resolve_query_llm

logger = logging.getLogger(__name__)

_ROLE_ALIASES = {
    "support": "support",
    "q1": "support",
    "supporting": "support",
    "distinguish": "distinguish",
    "q2": "distinguish",
    "discriminate": "distinguish",
    "contrast": "distinguish",
    "key_features": "key_features",
    "q3": "key_features",
    "key": "key_features",
    "features": "key_features",
    "keyfeatures": "key_features",
}


def _as_list(value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [str(value)]


class HypothesisQueryTransform(BaseQueryTransform):
    """Turns a question (with or without answer options) into HCQR's three queries.

    Args:
        llm: the planning LLM; ``"settings"``: ``Settings.llm``. ``None``: the offline planner,
            logged (also when ``Settings.llm`` is set: it answers, it does not plan).
        hypothesis_prompt: prompt with ``{question}`` and ``{options_str}``; must ask for JSON.
        retriever: used by the offline planner (also when the LLM output stays malformed)
            to score ``question + option``; its node scores should be comparable across
            queries (e.g. cosine). If ``None``, ``metadata["retriever"]`` is used, which
            ``HypothesisRetriever`` sets to the retriever it wraps.
        planner: the offline planner; default ``OfflineHypothesisPlanner()``.
        max_retries: retries after malformed JSON before falling back to the offline planner.
        retry_policy: backoff and per-call timeout of LLM errors (an LLM that keeps failing
            also falls back to the offline planner); its ``malformed_retries`` is ``max_retries``.
        num_workers: concurrent LLM calls of :meth:`run_batch` (None: automatic).

    Options are read from ``metadata["options"]``, else from ``query_bundle.metadata`` of a
    ``HypothesisQueryBundle``, else from "A. ..."-lines inside the question. Without
    options the question is open and the working answer is a draft answer.
    """

    def __init__(
        self,
        llm: Union[LLM, str, None] = None,
        hypothesis_prompt: Optional[BasePromptTemplate] = None,
        retriever: Optional[BaseRetriever] = None,
        planner: Optional[OfflineHypothesisPlanner] = None,
        max_retries: int = 1,
        verbose: bool = False,
        retry_policy: Optional[RetryPolicy] = None,
        num_workers: Optional[int] = None,
    ) -> None:
        super().__init__()
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}.")
        self._llm = resolve_query_llm(llm, "HypothesisQueryTransform", "retrieval-based hypothesis planner")
        self._hypothesis_prompt = hypothesis_prompt or DEFAULT_HYPOTHESIS_PROMPT
        self._retriever = retriever
        self._planner = planner or OfflineHypothesisPlanner()
        self._max_retries = max_retries
        self._verbose = verbose
        policy = retry_policy or RetryPolicy()
        self._policy = dataclasses.replace(policy, malformed_retries=max_retries)
        self._num_workers = num_workers

    @property
    def llm(self) -> Optional[LLM]:
        return self._llm

    def _get_prompts(self) -> PromptDictType:
        return {"hypothesis_prompt": self._hypothesis_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "hypothesis_prompt" in prompts:
            self._hypothesis_prompt = prompts["hypothesis_prompt"]

    # -- input ---------------------------------------------------------------------------
    def _inputs(
        self, query_bundle: QueryBundle, metadata: Mapping[str, Any]
    ) -> Tuple[str, Dict[str, str], Optional[BaseRetriever]]:
        bundle_meta = getattr(query_bundle, "metadata", None) or {}
        raw_options = metadata.get("options", bundle_meta.get("options"))
        question = bundle_meta.get("question") or query_bundle.query_str
        options = normalize_options(raw_options)
        if not options:
            question, options = split_inline_options(question)
        if not question.strip():
            raise ValueError("HypothesisQueryTransform got an empty question; pass a non-empty query.")
        r = self._retriever if self._retriever is not None else metadata.get("retriever")
        return question, options, r

    def _bundle(
        self,
        query_bundle: QueryBundle,
        question: str,
        options: Dict[str, str],
        state: HypothesisState,
        queries: Dict[str, str],
    ) -> HypothesisQueryBundle:
        ordered = {r: queries[r] for r in QUERY_ROLES}
        if self._verbose:
            logger.info("HCQR %s queries: %s", state.planner, ordered)
        return HypothesisQueryBundle(
            query_str=query_bundle.query_str,
            custom_embedding_strs=list(ordered.values()),
            queries=ordered,
            metadata={
                "hypothesis": state.to_dict(),
                "options": dict(options),
                "question": question,
                "planner": state.planner,
            },
        )

    def _prompt_vars(self, question: str, options: Dict[str, str]) -> Dict[str, str]:
        return {
            "question": fence(question),
            "options_str": fence(format_options(options) if options else NO_OPTIONS_STR),
        }

    def _request(self, question: str, options: Dict[str, str]) -> LLMRequest:
        def parse(text: str, _meta: Any) -> Tuple[HypothesisState, Dict[str, str]]:
            parsed = self.parse(text, question, options)
            if parsed is None:
                raise ValueError(f"not hypothesis JSON: {text[:120]!r}")
            return parsed

        prompt = self._hypothesis_prompt.format(llm=self._llm, **self._prompt_vars(question, options))
        return LLMRequest(prompt, parse=parse, retry_suffix=HYPOTHESIS_RETRY_SUFFIX, label="question")

    def _runner(self, num_workers: Optional[int] = None) -> LLMRunner:
        return LLMRunner(
            self._llm,
            policy=self._policy,
            num_workers=num_workers or self._num_workers,
            desc="HypothesisQueryTransform",
            on_error="return",
        )

    @staticmethod
    def _embedder(retriever: Optional[BaseRetriever], metadata: Mapping[str, Any]) -> Optional[QueryEmbedder]:
        """The caller's query embedder (``metadata["query_embedder"]``) if it embeds with the
        planner's retriever's model; otherwise the planner makes its own."""
        embedder = metadata.get("query_embedder")
        if isinstance(embedder, QueryEmbedder) and embedder.embed_model is find_embed_model(retriever):
            return embedder
        return None

    def _offline(
        self,
        question: str,
        options: Dict[str, str],
        retriever: Optional[BaseRetriever],
        embedder: Optional[QueryEmbedder] = None,
    ) -> Tuple[HypothesisState, Dict[str, str]]:
        if retriever is None:
            raise ValueError(
                "HypothesisQueryTransform: the offline planner needs a retriever to rank options; "
                "pass retriever= to HypothesisQueryTransform, metadata={'retriever': r} to run(), "
                "or use HypothesisRetriever(retriever, transform)."
            )
        return self._planner.plan(question, options, retriever, embedder)

    # -- parsing -------------------------------------------------------------------------
    def parse(
        self, text: str, question: str, options: Dict[str, str]
    ) -> Optional[Tuple[HypothesisState, Dict[str, str]]]:
        """Hypothesis state and exactly three queries from LLM output, or None if malformed.

        Missing queries are filled from the hypothesis (support: question + working answer;
        distinguish: question + discriminating features; key_features: the question's key
        terms); extra queries beyond three are dropped. Both are logged.
        """
        obj, cut = find_or_salvage_json_object(text, {"working_answer", "queries"})
        if obj is None:
            return None
        if cut:
            logger.info("HCQR: the hypothesis JSON was cut off; kept its complete fields %s.", sorted(obj))
        raw_q = obj.get("queries")
        working = str(obj.get("working_answer") or "").strip()
        queries: Dict[str, str] = {}
        if isinstance(raw_q, dict):
            for k, v in raw_q.items():
                role = _ROLE_ALIASES.get(str(k).strip().lower().replace(" ", "_"))
                text = " ".join(_as_list(v))  # small models wrap a query in a list
                if role and role not in queries and text:
                    queries[role] = text
        else:
            listed = _as_list(raw_q)
            if len(listed) > len(QUERY_ROLES):
                logger.info("HCQR: the LLM gave %d queries; keeping the first three.", len(listed))
            queries = dict(zip(QUERY_ROLES, listed))
        if not working and not queries:
            return None
        working_option = None
        letter = working.strip("()[]. ").upper()
        if letter in options:
            working_option, working = letter, options[letter]
        else:
            for k, v in options.items():
                if working.lower() in (v.lower(), f"{k}. {v}".lower(), f"{k}) {v}".lower()):
                    working_option, working = k, v
        state = HypothesisState(
            working_answer=working,
            working_option=working_option,
            discriminating_features=_as_list(obj.get("discriminating_features")),
            confirming_evidence=_as_list(obj.get("confirming_evidence")),
            rationale=str(obj.get("rationale") or "").strip(),
            planner="llm",
        )
        missing = [r for r in QUERY_ROLES if r not in queries]
        if missing:
            logger.info("HCQR: the LLM gave no %s query; derived from the hypothesis.", missing)
            terms = key_terms(question)
            fill = {
                "support": f"{question} {working}".strip(),
                "distinguish": f"{question} {' '.join(state.discriminating_features) or working}".strip(),
                "key_features": " ".join(terms) if terms else question,
            }
            for r in missing:
                queries[r] = fill[r]
        return state, {r: queries[r] for r in QUERY_ROLES}

    def _fallback_warning(self, outcome: Outcome) -> None:
        if outcome.exception is not None:
            logger.warning(
                "HypothesisQueryTransform: the LLM call failed (%s); using the offline "
                "retrieval-based planner for this question.",
                outcome.error,
            )
            return
        logger.warning(
            "HypothesisQueryTransform: the LLM output was not valid hypothesis JSON after %d "
            "attempt(s); using the offline retrieval-based planner for this question.",
            self._max_retries + 1,
        )

    # -- run -----------------------------------------------------------------------------
    def _run(self, query_bundle: QueryBundle, metadata: Dict) -> QueryBundle:
        return self.run_batch([query_bundle], metadata)[0]

    def run_batch(
        self, queries: Sequence[QueryType], metadata: Optional[Dict] = None, num_workers: Optional[int] = None
    ) -> List[HypothesisQueryBundle]:
        """``run`` over many questions, the LLM calls running ``num_workers`` at once; results in
        input order, each as ``run`` would give it."""
        bundles = [QueryBundle(q) if isinstance(q, str) else q for q in queries]
        inputs = [self._inputs(qb, metadata or {}) for qb in bundles]
        outcomes: List[Optional[Outcome]] = [None] * len(bundles)
        if self._llm is not None:
            outcomes = list(self._runner(num_workers).run([self._request(q, o) for q, o, _ in inputs]))
        out = []
        for qb, (question, options, retriever), res in zip(bundles, inputs, outcomes):
            if res is not None and res.ok:
                out.append(self._bundle(qb, question, options, *res.value))
                continue
            if res is not None:
                self._fallback_warning(res)
            state, queries_ = self._offline(question, options, retriever, self._embedder(retriever, metadata or {}))
            out.append(self._bundle(qb, question, options, state, queries_))
        return out

    async def arun(self, query_bundle_or_str: QueryType, metadata: Optional[Dict] = None) -> HypothesisQueryBundle:
        """Async ``run``: awaits the LLM (``acomplete``) or the planner's retrievals."""
        qb = QueryBundle(query_bundle_or_str) if isinstance(query_bundle_or_str, str) else query_bundle_or_str
        question, options, retriever = self._inputs(qb, metadata or {})
        if self._llm is not None:
            res = (await self._runner().arun([self._request(question, options)]))[0]
            if res.ok:
                return self._bundle(qb, question, options, *res.value)
            self._fallback_warning(res)
        if retriever is None:
            self._offline(question, options, None)  # raises the explanatory error
        state, queries = await self._planner.aplan(
            question, options, retriever, self._embedder(retriever, metadata or {})
        )  # type: ignore[arg-type]
        return self._bundle(qb, question, options, state, queries)

    def run(self, query_bundle_or_str: QueryType, metadata: Optional[Dict] = None) -> HypothesisQueryBundle:  # type: ignore[override]
        return super().run(query_bundle_or_str, metadata)  # type: ignore[return-value]
