"""Deterministic offline stand-ins for tests: a hashing bag-of-words embedder."""

from __future__ import annotations

import hashlib
import re
from typing import List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding


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
