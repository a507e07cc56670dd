"""Prompts of HCQR (hypothesis-conditioned query rewriting) and of the DUR judge."""

from __future__ import annotations

from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.prompt_type import PromptType

from llama_index_ext_causalrag.llm.io import DATA_RULE

# Hypothesis state and exactly three retrieval queries, as one JSON object. The queries come
# right after the working answer, so output cut off by a token limit still carries them.
# Required variables: question, options_str (both fenced)
HYPOTHESIS_TMPL = (
    "You plan evidence retrieval for a question. Do not answer for the user; plan what to "
    "look up. " + DATA_RULE + "\n"
    "Question: {question}\n"
    "Options:\n{options_str}\n\n"
    "Form a working hypothesis and exactly three search queries:\n"
    "- support: evidence that would confirm the working answer;\n"
    "- distinguish: the criteria that separate the working answer from the strongest "
    "alternative;\n"
    "- key_features: the salient clues of the question itself, so that a wrong working "
    "answer is still caught.\n"
    "Be brief: at most two features and two evidence items, each under 12 words; each query "
    "one plain string under 20 words.\n"
    "Return only one JSON object, no prose, with these keys:\n"
    '{"working_answer": "...", '
    '"queries": {"support": "...", "distinguish": "...", "key_features": "..."}, '
    '"discriminating_features": ["..."], "confirming_evidence": ["..."], '
    '"rationale": "one sentence"}\n'
    "JSON:"
)

DEFAULT_HYPOTHESIS_PROMPT = PromptTemplate(HYPOTHESIS_TMPL, prompt_type=PromptType.CUSTOM)

# Appended to the prompt for the single retry after malformed output.
# Required variables: none
HYPOTHESIS_RETRY_SUFFIX = (
    "\nYour previous output was not valid JSON with the keys above. Output only the JSON "
    "object, starting with { and ending with }.\nJSON:"
)

NO_OPTIONS_STR = "(none: an open question; the working answer is your draft answer)"

# Decision-usefulness judge: one label for a context.
# Context, question and options come first and in this exact form ("Context:\n...\n\nQuestion:
# ...\nOptions:\n...\n"), so that a judge call made right after an answer call on the same
# context reuses the model's cached prefix (llama.cpp KV cache, provider prompt caching).
# Required variables: question, options_str, answer, context (all fenced)
DUR_JUDGE_TMPL = (
    "Context:\n{context}\n\n"
    "Question: {question}\n"
    "Options:\n{options_str}\n"
    "Correct answer: {answer}\n\n" + DATA_RULE + "\n"
    "Judge whether the context above helps decide the question. Label it with exactly one of:\n"
    "ENTAILED - the context alone proves the correct answer;\n"
    "USEFUL - strong support, the answer follows after a small reasoning step;\n"
    "NOT_USEFUL - background or unrelated; it does not help choose the answer.\n"
    "Reply with the label on the first line, then one sentence of reason.\n"
    "Label:"
)

DEFAULT_DUR_JUDGE_PROMPT = PromptTemplate(DUR_JUDGE_TMPL, prompt_type=PromptType.CUSTOM)
