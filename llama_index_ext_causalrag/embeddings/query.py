"""Several query texts, one embedding call: batched query embeddings shared by a retriever's searches.

A retriever that searches with several texts (HCQR's option queries and its three queries)
embeds them in one batch and hands each search a ``QueryBundle`` that already carries its
embedding; every LlamaIndex embedding retriever (and every retriever here) uses
``query_bundle.embedding`` when it is set instead of embedding the text again.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.schema import QueryBundle

# Attributes through which retrievers hold their parts (ours, LlamaIndex's fusion and
# transform retrievers, and plain wrappers).
_CHILD_ATTRS = (
    "_retriever",
    "_retrievers",
    "retriever",
    "retrievers",
    "_dense",
    "dense",
    "_base",
    "_index",
    "_vector_store_index",
    "_experts",
    "experts",
)
_MODEL_ATTRS = ("_embed_model", "embed_model")
_MAX_DEPTH = 4


def _children(obj: Any) -> Iterable[Any]:
    for name in _CHILD_ATTRS:
        value = getattr(obj, name, None) if not isinstance(obj, dict) else None
        if value is None:
            continue
        if isinstance(value, dict):
            for v in value.values():
                yield from (v.values() if isinstance(v, dict) else [v])
        elif isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def _models(obj: Any, depth: int, seen: set) -> List[BaseEmbedding]:
    if obj is None or id(obj) in seen or depth > _MAX_DEPTH:
        return []
    seen.add(id(obj))
    found: List[BaseEmbedding] = []
    for name in _MODEL_ATTRS:
        try:
            value = getattr(obj, name, None)
        except Exception:  # a lazy property that cannot resolve (no model installed)
            value = None
        if isinstance(value, BaseEmbedding):
            found.append(value)
            break
    for child in _children(obj):
        found.extend(_models(child, depth + 1, seen))
    return found


def find_embed_model(retriever: Any) -> Optional[BaseEmbedding]:
    """The one embedding model ``retriever`` (or the retrievers inside it) embeds queries with.

    ``None`` when it has none (BM25) or several different ones: then each search embeds its
    own query, as without batching.
    """
    models = _models(retriever, 0, set())
    distinct = {id(m): m for m in models}
    return next(iter(distinct.values())) if len(distinct) == 1 else None


def embed_queries(embed_model: BaseEmbedding, texts: Sequence[str]) -> List[Embedding]:
    """Query embeddings of ``texts`` in one model call where the model allows it.

    The model's own batch method for queries when it has one (``get_query_embedding_batch``);
    ``HuggingFaceEmbedding`` through its query prompt, as ``get_query_embedding`` does one by one;
    other models one query at a time (their query and text embeddings may differ).
    """
    texts = list(texts)
    if len(texts) <= 1:
        return [embed_model.get_query_embedding(t) for t in texts]
    batch = getattr(embed_model, "get_query_embedding_batch", None)
    if callable(batch):
        return list(batch(texts))
    try:
        from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    except ImportError:  # pragma: no cover - a core dependency
        HuggingFaceEmbedding = None  # type: ignore[assignment]
    if HuggingFaceEmbedding is not None and isinstance(embed_model, HuggingFaceEmbedding):
        return list(embed_model._embed(texts, prompt_name="query"))
    return [embed_model.get_query_embedding(t) for t in texts]


class QueryEmbedder:
    """Query embeddings of one retrieval, each text embedded once, missing texts in one batch.

    ``bundles(texts, also=...)`` returns one ``QueryBundle`` per text carrying its embedding;
    ``also`` are texts known to be needed later (embedded in the same batch). With no
    ``embed_model`` the bundles carry no embedding and each search embeds its own query.
    """

    def __init__(self, embed_model: Optional[BaseEmbedding]) -> None:
        self.embed_model = embed_model
        self._vectors: Dict[str, Embedding] = {}
        self.calls = 0

    def bundles(self, texts: Sequence[str], also: Sequence[str] = ()) -> List[QueryBundle]:
        if self.embed_model is None:
            return [QueryBundle(t) for t in texts]
        missing = [t for t in dict.fromkeys([*texts, *also]) if t not in self._vectors]
        if missing:
            self._vectors.update(zip(missing, embed_queries(self.embed_model, missing)))
            self.calls += 1
        return [QueryBundle(t, embedding=list(self._vectors[t])) for t in texts]
