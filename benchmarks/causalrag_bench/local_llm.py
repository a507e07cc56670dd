"""A local llama.cpp model as a LlamaIndex LLM, for the examples and the LLM benchmarks.

Needs `bash ../shared/tools/local-llm.sh` (llama-cpp-python, llama-index-llms-llama-cpp and the
Qwen2.5-Coder-1.5B GGUF, whose path it prints). Not a dependency of the package or its tests.

    from causalrag_bench.local_llm import chatml_llama_cpp
    llm = chatml_llama_cpp(gguf, n_threads=1)

Why not plain `LlamaCPP(..., generate_kwargs={"logprobs": 5}, model_kwargs={"logits_all": True})`,
the documented way to get log-probabilities: with `logits_all` every prompt token pays for
vocabulary logits (prefill about 25% slower here), and with `logprobs` llama-cpp-python log-softmaxes
the whole n_ctx x 152K score matrix and sorts the vocabulary in Python for every generated token
of every answer. Only the first answer token's distribution
is needed (P(yes) of the gate judge), so this LLM records that one, from the sampler, and attaches
its top-k to `CompletionResponse.logprobs` of every answer.
"""

from __future__ import annotations

from typing import Any, List

import numpy as np
from llama_index.core.base.llms.types import CompletionResponse, LogProb
from llama_index.core.llms.callbacks import llm_completion_callback

try:  # pragma: no cover - needs llama-cpp-python
    from llama_index.llms.llama_cpp import LlamaCPP
except ImportError as e:  # pragma: no cover
    raise ImportError(
        "examples/local_llm.py needs llama-cpp-python and llama-index-llms-llama-cpp: "
        "run `bash ../shared/tools/local-llm.sh`, which installs both and prints the model path."
    ) from e


def chatml(prompt: str) -> str:
    """Qwen2.5's chat format for one user turn."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


class FirstTokenLogprobsLlamaCPP(LlamaCPP):
    """`LlamaCPP` whose answers carry the top-k log-probabilities of their first token.

    `complete(prompt, max_tokens=n)` also honours a per-call answer length (`LlamaCPP` itself
    ignores call kwargs).
    """

    first_token_top_k: int = 20

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        from llama_cpp import LogitsProcessorList

        if not formatted:
            prompt = self.completion_to_prompt(prompt)
        first: List[np.ndarray] = []

        def record(input_ids: Any, scores: np.ndarray) -> np.ndarray:
            if not first:  # the first sampling step sees the whole vocabulary in id order
                first.append(np.array(scores, dtype=np.float64, copy=True))
            return scores

        gen = {**self.generate_kwargs, "stream": False}
        if "max_tokens" in kwargs:
            gen["max_tokens"] = int(kwargs["max_tokens"])
        response = self._model(prompt=prompt, logits_processor=LogitsProcessorList([record]), **gen)
        return CompletionResponse(text=response["choices"][0]["text"], raw=response, logprobs=self._top(first))

    def _top(self, first: List[np.ndarray]) -> List[List[LogProb]] | None:
        if not first or self.first_token_top_k <= 0:
            return None
        logits = first[0]
        logp = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum()))
        k = min(self.first_token_top_k, len(logp))
        top = np.argpartition(-logp, k - 1)[:k]
        top = top[np.argsort(-logp[top])]
        detok = self._model.detokenize
        return [
            [
                LogProb(token=detok([int(i)]).decode("utf-8", errors="ignore"), logprob=float(logp[i]), bytes=[])
                for i in top
            ]
        ]


def chatml_llama_cpp(
    gguf: str, n_threads: int = 1, max_new_tokens: int = 256, n_ctx: int = 4096, first_token_top_k: int = 20
) -> FirstTokenLogprobsLlamaCPP:
    """Greedy ChatML llama.cpp model; `n_threads` for both prefill and generation (llama-cpp-python
    otherwise prefills on every core)."""
    llm = FirstTokenLogprobsLlamaCPP(
        model_path=gguf,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        context_window=n_ctx,
        completion_to_prompt=chatml,
        generate_kwargs={"stop": ["<|im_end|>"]},
        model_kwargs={"n_threads": n_threads, "n_threads_batch": n_threads, "n_ctx": n_ctx, "verbose": False},
        verbose=False,
    )
    llm.first_token_top_k = first_token_top_k  # LlamaCPP.__init__ takes only its own fields
    return llm
