"""Shared test helpers for the causal_graph tests: a scripted LLM, a hashing embedder, a corpus."""

from __future__ import annotations

import hashlib
from typing import List

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import Document

from fakes import ScriptedLLM  # noqa: F401  (re-exported for the causal-graph tests)


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
