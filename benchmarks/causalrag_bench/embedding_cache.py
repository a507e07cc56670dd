"""A disk cache for document embeddings: a rerun of the bench embeds nothing.

SQLite file, one row per (model, text) with the vector as float32 bytes (no pickle).
Queries are not cached, so query latency stays honest.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path
from typing import Any, List, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_index_ext_causalrag.embeddings.batching import batch_invariant
from llama_index_ext_causalrag.embeddings.query import embed_queries
from llama_index_ext_causalrag.llm.resolve import model_name_of

# Texts embedded between two writes to the cache.
STORE_EVERY = 1024


class CachedEmbedding(BaseEmbedding):
    """Wraps any LlamaIndex embedding model; text embeddings are read from and written to disk."""

    _inner: BaseEmbedding = PrivateAttr()
    _db: sqlite3.Connection = PrivateAttr()
    _lock: Any = PrivateAttr()
    _prefix: str = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, cache_dir: str | Path, **kwargs: Any) -> None:
        super().__init__(
            model_name=f"cached:{model_name_of(inner)}",
            embed_batch_size=max(inner.embed_batch_size, 64),
            **kwargs,
        )
        self._inner = inner
        path = Path(cache_dir)
        path.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path / "embeddings.sqlite"), check_same_thread=False, timeout=60)
        self._db.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB)")
        self._db.commit()
        self._lock = threading.Lock()
        # The backend's class is part of the key: the torch and ONNX MiniLM report one model name,
        # and a bench run on one backend must not read vectors the other one stored.
        self._prefix = model_name_of(inner) + "\x00" + inner.class_name() + "\x00"

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    @property
    def inner(self) -> BaseEmbedding:
        return self._inner

    @property
    def batch_invariant(self) -> bool:
        """As the inner model: a stored vector is the inner one rounded to float32, in any batch."""
        return batch_invariant(self._inner)

    def _key(self, text: str) -> str:
        return hashlib.sha256((self._prefix + text).encode("utf-8")).hexdigest()

    def _lookup(self, keys: List[str]) -> dict[str, List[float]]:
        found: dict[str, List[float]] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                q = f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(chunk))})"
                for k, v in self._db.execute(q, chunk):
                    found[k] = np.frombuffer(v, dtype=np.float32).tolist()
        return found

    def _store(self, items: List[tuple[str, List[float]]]) -> None:
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO emb VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items],
            )
            self._db.commit()

    def _get_text_embeddings(self, texts: List[str]) -> List[Embedding]:
        keys = [self._key(t) for t in texts]
        found = self._lookup(keys)
        first_index: dict[str, int] = {}
        for i, k in enumerate(keys):
            if k not in found and k not in first_index:
                first_index[k] = i
        if first_index:
            # Longest first keeps padding low inside the inner model's batches.
            order = sorted(first_index.values(), key=lambda i: -len(texts[i]))
            # Stored chunk by chunk: an interrupted cold build keeps what it embedded.
            for start in range(0, len(order), STORE_EVERY):
                part = order[start : start + STORE_EVERY]
                new = self._inner.get_text_embedding_batch([texts[i] for i in part])
                self._store([(keys[i], v) for i, v in zip(part, new)])
                # Round through float32 like the stored copy, so a rerun sees identical vectors.
                found.update({keys[i]: np.asarray(v, dtype=np.float32).tolist() for i, v in zip(part, new)})
        return [found[k] for k in keys]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embedding(text)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await self._inner.aget_query_embedding(query)

    def get_query_embedding_batch(self, queries: List[str]) -> List[Embedding]:
        """Queries are never cached (their latency is measured): one batch of the inner model."""
        return embed_queries(self._inner, queries)

    def get_text_embedding_batch(self, texts: List[str], show_progress: bool = False, **kwargs: Any) -> List[Embedding]:
        # One lookup for the whole list instead of per-batch round trips.
        return self._get_text_embeddings(list(texts))

    async def aget_text_embedding_batch(
        self, texts: List[str], show_progress: bool = False, **kwargs: Any
    ) -> List[Embedding]:
        return self._get_text_embeddings(list(texts))


def cached_default_embed_model(cache_dir: Optional[str | Path] = None) -> CachedEmbedding:
    from llama_index_ext_causalrag.embeddings.defaults import default_embed_model

    return CachedEmbedding(default_embed_model(), cache_dir or default_cache_dir())


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "llama_index_ext_causalrag"
