"""Deterministic offline stand-ins for tests: a hashing bag-of-words embedder, a scripted LLM and a
retriever with a fixed ranking."""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any, Callable, Dict, List

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.schema import NodeWithScore, QueryBundle


class HashEmbedding(BaseEmbedding):
    """Bag of lower-cased words hashed into ``dim`` buckets, L2-normalised. Texts sharing
    words get a high cosine, which is enough to test ranking code without a model."""

    dim: int = 64

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(self.dim)
        for w in re.findall(r"\w+", text.lower()):
            h = int(hashlib.md5(w.encode()).hexdigest(), 16)
            v[h % self.dim] += 1.0 if (h >> 8) % 2 else -1.0
        n = np.linalg.norm(v)
        return (v / n if n else v).tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vec(text)

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)


class WordCountEmbedding(BaseEmbedding):
    """Bag of lower-cased words counted into ``dim`` hashed buckets (not normalised): texts sharing
    words get a high cosine; a text's vector is the sum of its words', which tests of sentence means use."""

    dim: int = 32

    @classmethod
    def class_name(cls) -> str:
        return "WordCountEmbedding"

    def _vec(self, text: str) -> List[float]:
        v = np.zeros(self.dim)
        for w in re.findall(r"\w+", text.lower()):
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        return v.tolist()

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._vec(text)

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._vec(query)


class ScriptedLLM(CustomLLM):
    """Returns ``script(prompt, call_index)``: a str or a ready CompletionResponse."""

    _script: Callable[[str, int], Any] = PrivateAttr()
    _prompts: List[str] = PrivateAttr(default_factory=list)
    _kwargs: List[Dict[str, Any]] = PrivateAttr(default_factory=list)

    def __init__(self, script: Callable[[str, int], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._script = script
        self._prompts = []
        self._kwargs = []

    @property
    def prompts(self) -> List[str]:
        return self._prompts

    @property
    def call_kwargs(self) -> List[Dict[str, Any]]:
        """The keyword arguments of each ``complete`` call, in order."""
        return self._kwargs

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-test-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self._prompts.append(prompt)
        self._kwargs.append(dict(kwargs))
        out = self._script(prompt, len(self._prompts) - 1)
        return out if isinstance(out, CompletionResponse) else CompletionResponse(text=out)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


class AsyncScriptedLLM(ScriptedLLM):
    """A ScriptedLLM with a real ``acomplete`` that waits ``delay`` seconds (``complete`` sleeps
    the same), like a remote API. The script may raise to simulate a failing call.

    :attr:`max_in_flight` is the largest number of calls (``complete`` or ``acomplete``) that
    were running at the same moment: concurrency observed without reading a clock."""

    _delay: float = PrivateAttr(default=0.0)
    _in_flight: int = PrivateAttr(default=0)
    _max_in_flight: int = PrivateAttr(default=0)
    _lock: Any = PrivateAttr(default=None)

    def __init__(self, script: Callable[[str, int], Any], delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(script, **kwargs)
        self._delay = delay
        self._lock = threading.Lock()

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        import time

        self._enter()
        try:
            time.sleep(self._delay)
            return super().complete(prompt, formatted=formatted, **kwargs)
        finally:
            self._leave()

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        import asyncio

        self._enter()
        try:
            await asyncio.sleep(self._delay)
            self._prompts.append(prompt)
            self._kwargs.append(dict(kwargs))
            out = self._script(prompt, len(self._prompts) - 1)
            return out if isinstance(out, CompletionResponse) else CompletionResponse(text=out)
        finally:
            self._leave()


class FixedRetriever(BaseRetriever):
    """Returns the same ranked nodes for every query."""

    def __init__(self, nodes: List[NodeWithScore]) -> None:
        self._nodes = list(nodes)
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return list(self._nodes)
