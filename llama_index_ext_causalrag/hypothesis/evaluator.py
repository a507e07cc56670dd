"""DecisionUsefulnessEvaluator: an LLM judge of whether a context helps decide."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence

from llama_index.core.evaluation.base import BaseEvaluator, EvaluationResult
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType

from llama_index_ext_causalrag.hypothesis.options import format_options, key_terms, normalize_options
from llama_index_ext_causalrag.hypothesis.prompts import DEFAULT_DUR_JUDGE_PROMPT, NO_OPTIONS_STR
from llama_index_ext_causalrag.llm.io import LLMRequest, LLMRunner, Outcome, RetryPolicy, fence
from llama_index_ext_causalrag.llm.parse import LABELS, label_probabilities, parse_label  # noqa: F401
from llama_index_ext_causalrag.llm.resolve import resolve_llm

logger = logging.getLogger(__name__)

_LABEL_SCORES = {"entailed": 1.0, "useful": 1.0, "not_useful": 0.0}


def _judge_parse(text: str, probs: Any) -> Any:
    label = parse_label(text)
    if label is None:
        raise ValueError(f"judge reply has no label: {text[:200]!r}")
    return label, text, probs


class DecisionUsefulnessResult(EvaluationResult):
    """An :class:`EvaluationResult` with the judge's label probabilities when its LLM returned
    logprobs (see :func:`label_probabilities`); ``p_decision_useful`` = P(entailed) + P(useful)."""

    label_probs: Optional[Dict[str, float]] = None

    @property
    def p_decision_useful(self) -> Optional[float]:
        if self.label_probs is None:
            return None
        return self.label_probs["entailed"] + self.label_probs["useful"]


class DecisionUsefulnessEvaluator(BaseEvaluator):
    """Labels a retrieved context *entailed* / *useful* / *not useful* for the gold answer.

    ``evaluate(query=question, contexts=[...], reference=gold_answer, options=...)``;
    ``response`` is not used (the judged object is the context). ``passing`` is True for
    entailed or useful; the label is the first word of ``feedback``. :meth:`decision_useful_rate` aggregates a run (the decision-useful rate, DUR).
    The result is a :class:`DecisionUsefulnessResult`: when the LLM returns log-probabilities
    it also carries the label probabilities of the first answer token (small models lean to one
    label whatever the context; the probabilities still rank contexts).

    Without an LLM the offline alternative is a lexical check: *useful* when every key term
    of the gold answer occurs in the context, else *not useful*; it never says *entailed*.
    """

    def __init__(
        self,
        llm: Optional[LLM] = None,
        judge_prompt: Optional[BasePromptTemplate] = None,
        max_context_chars: int = 6000,
        retry_policy: Optional[RetryPolicy] = None,
        num_workers: Optional[int] = None,
    ) -> None:
        self._llm = resolve_llm(llm, "DecisionUsefulnessEvaluator", "lexical answer-term judge (never 'entailed')")
        self._judge_prompt = judge_prompt or DEFAULT_DUR_JUDGE_PROMPT
        if max_context_chars < 1:
            raise ValueError(f"max_context_chars must be >= 1, got {max_context_chars!r}.")
        self.max_context_chars = max_context_chars
        self._policy = retry_policy or RetryPolicy()
        self._num_workers = num_workers

    def _get_prompts(self) -> PromptDictType:
        return {"judge_prompt": self._judge_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "judge_prompt" in prompts:
            self._judge_prompt = prompts["judge_prompt"]

    @staticmethod
    def _lexical_label(context: str, answer: str) -> str:
        terms = key_terms(answer)
        low = context.lower()
        return "useful" if terms and all(t in low for t in terms) else "not_useful"

    def _prepare(self, query: Optional[str], contexts: Any, reference: Optional[str], options: Any) -> Any:
        """``(result, None)`` when no LLM call is needed, else ``(None, (request, contexts))``."""
        if query is None or reference is None:
            raise ValueError(
                "DecisionUsefulnessEvaluator needs query= (the question) and reference= (the gold answer text)."
            )
        if isinstance(contexts, str):  # one context, not a list of characters
            contexts = [contexts]
        ctx_list = list(contexts or [])
        opts = normalize_options(options)
        letter = reference.strip().strip("().").upper()
        answer = f"{letter}. {opts[letter]}" if letter in opts else reference
        context = "\n\n".join(ctx_list)[: self.max_context_chars]
        if not context.strip():
            return DecisionUsefulnessResult(
                query=query, contexts=ctx_list, passing=False, score=0.0, feedback="not_useful: empty context"
            ), None
        if self._llm is None:
            label = self._lexical_label(context, opts.get(letter, reference))
            return self._result(query, ctx_list, label, f"{label}: offline lexical judge", None), None
        prompt = self._judge_prompt.format(
            llm=self._llm,
            question=fence(query),
            options_str=fence(format_options(opts) if opts else NO_OPTIONS_STR),
            answer=fence(answer),
            context=fence(context),
        )
        # complete, not predict: keeps the logprobs
        return None, (
            LLMRequest(
                prompt,
                parse=_judge_parse,
                extract_meta=label_probabilities,
                retry_suffix="\nReply with the label first: ENTAILED, USEFUL or NOT_USEFUL.",
            ),
            (query, ctx_list),
        )

    @staticmethod
    def _result(query: str, contexts: List[str], label: str, reply: str, probs: Any) -> "DecisionUsefulnessResult":
        return DecisionUsefulnessResult(
            query=query,
            contexts=contexts,
            passing=label in ("entailed", "useful"),
            score=_LABEL_SCORES[label],
            feedback=f"{label}: {reply.strip()[:500]}",
            label_probs=probs,
        )

    @classmethod
    def _from_outcome(cls, res: Outcome, query: str, contexts: List[str]) -> "DecisionUsefulnessResult":
        if res.ok:
            label, reply, probs = res.value
            return cls._result(query, contexts, label, reply, probs)
        return DecisionUsefulnessResult(query=query, contexts=contexts, invalid_result=True, invalid_reason=res.error)

    def _runner(self, num_workers: Optional[int] = None) -> LLMRunner:
        return LLMRunner(
            self._llm,
            policy=self._policy,
            num_workers=num_workers or self._num_workers,
            desc="DecisionUsefulnessEvaluator",
            on_error="return",
        )

    async def aevaluate(
        self,
        query: Optional[str] = None,
        response: Optional[str] = None,
        contexts: Optional[Sequence[str]] = None,
        reference: Optional[str] = None,
        options: Optional[Mapping[str, str] | Sequence[str]] = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        done, todo = self._prepare(query, contexts, reference, options)
        if done is not None:
            return done
        # a synchronous LLM runs in a worker thread: LlamaIndex's BatchEvalRunner stays concurrent
        res = (await self._runner(1).arun([todo[0]]))[0]
        return self._from_outcome(res, *todo[1])

    def evaluate(
        self,
        query: Optional[str] = None,
        response: Optional[str] = None,
        contexts: Optional[Sequence[str]] = None,
        reference: Optional[str] = None,
        options: Optional[Mapping[str, str] | Sequence[str]] = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        """Synchronous ``aevaluate`` that also works inside a running event loop."""
        return self.evaluate_many([{"query": query, "contexts": contexts, "reference": reference, "options": options}])[
            0
        ]

    def evaluate_many(
        self, items: Sequence[Mapping[str, Any]], num_workers: Optional[int] = None
    ) -> List[EvaluationResult]:
        """Judge many ``{"query", "contexts", "reference", "options"}`` items, the LLM calls running
        ``num_workers`` at once; results in input order. A call that keeps failing gives an
        ``invalid_result`` with the reason."""
        prepared = [
            self._prepare(it.get("query"), it.get("contexts"), it.get("reference"), it.get("options")) for it in items
        ]
        todo = [k for k, (done, _) in enumerate(prepared) if done is None]
        out: List[Any] = [done for done, _ in prepared]
        if todo:
            outcomes = self._runner(num_workers).run([prepared[k][1][0] for k in todo])
            for k, res in zip(todo, outcomes):
                out[k] = self._from_outcome(res, *prepared[k][1][1])
        return out

    @staticmethod
    def label_of(result: EvaluationResult) -> Optional[str]:
        if result.invalid_result or not result.feedback:
            return None
        head = result.feedback.split(":", 1)[0].strip()
        return head if head in LABELS else None

    @classmethod
    def decision_useful_rate(cls, results: Sequence[EvaluationResult]) -> Dict[str, float]:
        """DUR = share of entailed + useful among valid judgements, with the label shares."""
        labels = [cls.label_of(r) for r in results]
        valid = [lab for lab in labels if lab is not None]
        n = len(valid)
        out = {lab: (valid.count(lab) / n if n else 0.0) for lab in LABELS}
        out["dur"] = out["entailed"] + out["useful"]
        out["n"] = float(n)
        out["invalid"] = float(len(labels) - n)
        return out
