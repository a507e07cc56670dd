"""DecisionUsefulnessEvaluator: an LLM judge of whether a context helps decide (METHODS 4.4)."""

from __future__ import annotations

import logging
import math
import re
from typing import Any, Dict, Mapping, Optional, Sequence

from llama_index.core.evaluation.base import BaseEvaluator, EvaluationResult
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType

from llama_index_ext_causalrag.defaults import resolve_llm
from llama_index_ext_causalrag.hypothesis.prompts import DEFAULT_DUR_JUDGE_PROMPT, NO_OPTIONS_STR
from llama_index_ext_causalrag.hypothesis.text import format_options, key_terms, normalize_options

logger = logging.getLogger(__name__)

LABELS = ("entailed", "useful", "not_useful")
_LABEL_SCORES = {"entailed": 1.0, "useful": 1.0, "not_useful": 0.0}
_LABEL_RE = re.compile(r"\b(not[\s_\-]*useful|entailed|useful)\b", re.IGNORECASE)


def label_probabilities(response: Any) -> Optional[Dict[str, float]]:
    """P(entailed), P(useful), P(not_useful) at the judge's first answer token, from the logprobs
    an LLM returned (``CompletionResponse.logprobs``), normalised over the three labels; None
    without logprobs or when no top token starts a label.

    A token counts for a label when one is a prefix of the other ("NOT" -> NOT_USEFUL, "ENTA" ->
    ENTAILED, "USE" -> USEFUL); the labels' first letters differ, so no token counts twice.
    """
    positions = getattr(response, "logprobs", None)
    if not positions:
        return None
    mass = dict.fromkeys(LABELS, 0.0)
    for lp in positions[0]:
        tok = lp.token.strip().upper().lstrip("*#`\"' ")
        if not tok:
            continue
        for label in LABELS:
            name = label.upper()
            if name.startswith(tok) or tok.startswith(name):
                mass[label] += math.exp(lp.logprob)
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()} if total > 0 else None


def parse_label(text: str) -> Optional[str]:
    """The first label in the judge's reply (``entailed``/``useful``/``not_useful``), else None."""
    m = _LABEL_RE.search(text or "")
    if m is None:
        return None
    word = re.sub(r"[\s_\-]+", "_", m.group(1).lower())
    return "not_useful" if word.startswith("not") else word


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
    entailed or useful; the label is the first word of ``feedback``. :meth:`decision_useful_rate` aggregates a run (DUR, METHODS 4.4).
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
    ) -> None:
        self._llm = resolve_llm(
            llm, "DecisionUsefulnessEvaluator", "lexical answer-term judge (never 'entailed')"
        )
        self._judge_prompt = judge_prompt or DEFAULT_DUR_JUDGE_PROMPT
        if max_context_chars < 1:
            raise ValueError(f"max_context_chars must be >= 1, got {max_context_chars!r}.")
        self.max_context_chars = max_context_chars

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

    async def aevaluate(
        self,
        query: Optional[str] = None,
        response: Optional[str] = None,
        contexts: Optional[Sequence[str]] = None,
        reference: Optional[str] = None,
        options: Optional[Mapping[str, str] | Sequence[str]] = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        if query is None or reference is None:
            raise ValueError(
                "DecisionUsefulnessEvaluator needs query= (the question) and reference= "
                "(the gold answer text)."
            )
        opts = normalize_options(options)
        letter = reference.strip().strip("().").upper()
        answer = f"{letter}. {opts[letter]}" if letter in opts else reference
        context = "\n\n".join(contexts or [])[: self.max_context_chars]
        if not context.strip():
            return DecisionUsefulnessResult(
                query=query, contexts=list(contexts or []), passing=False, score=0.0,
                feedback="not_useful: empty context",
            )
        probs = None
        if self._llm is None:
            label = self._lexical_label(context, opts.get(letter, reference))
            reply = f"{label}: offline lexical judge"
        else:
            prompt = self._judge_prompt.format(
                llm=self._llm,
                question=query,
                options_str=format_options(opts) if opts else NO_OPTIONS_STR,
                answer=answer,
                context=context,
            )
            response = await self._llm.acomplete(prompt)  # complete, not predict: keeps logprobs
            reply, probs = response.text or "", label_probabilities(response)
            parsed = parse_label(reply)
            if parsed is None:
                return DecisionUsefulnessResult(
                    query=query, contexts=list(contexts or []), invalid_result=True,
                    invalid_reason=f"judge reply has no label: {reply[:200]!r}", label_probs=probs,
                )
            label = parsed
        return DecisionUsefulnessResult(
            query=query,
            contexts=list(contexts or []),
            passing=label in ("entailed", "useful"),
            score=_LABEL_SCORES[label],
            feedback=f"{label}: {reply.strip()[:500]}",
            label_probs=probs,
        )

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
