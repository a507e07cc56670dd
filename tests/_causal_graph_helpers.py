"""Shared test helpers for the causal_graph tests: a scripted LLM, a hashing embedder, a corpus."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import Document


class ScriptedLLM(CustomLLM):
    """Returns ``script(prompt, call_index)``: a str or a ready CompletionResponse."""

    _script: Callable[[str, int], Any] = PrivateAttr()
    _prompts: List[str] = PrivateAttr(default_factory=list)

    def __init__(self, script: Callable[[str, int], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._script = script
        self._prompts = []

    @property
    def prompts(self) -> List[str]:
        return self._prompts

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-test-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        out = self._script(prompt, len(self._prompts) - 1)
        return out if isinstance(out, CompletionResponse) else CompletionResponse(text=out)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


class HashEmbedding(BaseEmbedding):
    """Deterministic bag-of-words hashing embedder (different texts, different vectors)."""

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(64)
        for w in text.lower().split():
            h = int(hashlib.md5(w.encode()).hexdigest(), 16)
            v[h % 64] += 1.0 if (h >> 7) % 2 else -1.0
        v[0] += 1e-3
        return (v / np.linalg.norm(v)).tolist()

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vec(text)


TOPICS = {
    "forest": ["drought stress", "tree mortality", "forest canopy", "soil moisture", "leaf litter"],
    "insulin": ["insulin resistance", "glucose uptake", "liver enzymes", "pancreatic cells", "blood sugar"],
    "coral": ["coral bleaching", "ocean warming", "reef fish", "symbiotic algae", "marine heatwaves"],
    "wheat": ["wheat yield", "nitrogen fertilizer", "grain protein", "root growth", "crop rotation"],
}


def corpus(n_docs_per_topic: int = 3) -> List[Document]:
    """Topic documents; the last sentence of each links its topic causally to the next topic."""
    names = list(TOPICS)
    docs = []
    for t, topic in enumerate(names):
        ents = TOPICS[topic]
        nxt = TOPICS[names[(t + 1) % len(names)]]
        for d in range(n_docs_per_topic):
            sents = []
            for i in range(len(ents)):
                a, b = ents[i], ents[(i + 1 + d) % len(ents)]
                sents.append(f"Studies of {a} and {b} were reported.")
            sents.append(f"Heavy {ents[0]} was measured.")
            sents.append(f"This leads to {nxt[1]}.")
            docs.append(Document(text=" ".join(sents), doc_id=f"{topic}-{d}"))
    return docs
