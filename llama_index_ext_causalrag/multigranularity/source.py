"""Where :class:`EntropyFusionRetriever` gets its candidate lists: one :class:`CandidateSource`.

The fusion retriever asks a source for the lists it fuses, ``(expert, granularity) -> ids,
scores, token lengths`` (:class:`Ranked`), and for the nodes of the units it keeps; it never
names a store. :class:`ExpertSource` scores retrievers held in memory (:class:`DenseExpert` and
:class:`SparseExpert` over NumPy and bm25s, any other ``BaseRetriever`` through ``retrieve``);
a store-backed index brings its own source (PostgreSQL: every list computed by the database,
:mod:`llama_index_ext_causalrag.multigranularity.served`).

Metadata filters (LlamaIndex's ``MetadataFilters``) go into each list before its top-k, so a
filtered list is the best ``k`` units that pass.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.feedback import Feedback, expansion_terms, rocchio
from llama_index_ext_causalrag.multigranularity.windows import N_TOKENS_KEY
from llama_index_ext_causalrag.storage.filters import filter_mask, filters_key, matches
from llama_index_ext_causalrag.text.tokens import count_tokens

ListKey = Tuple[str, int]  # (expert name, granularity)
T = TypeVar("T")


def n_tokens(node: BaseNode) -> int:
    """A unit's token length: its ``umg_n_tokens`` metadata, else counted."""
    n = node.metadata.get(N_TOKENS_KEY)
    if n is None:
        n = count_tokens(node.get_content(metadata_mode=MetadataMode.NONE))
    return int(n)


@dataclass(frozen=True)
class Ranked:
    """One candidate list, best first: unit ids, raw scores, token lengths; ``nodes`` when the
    source already holds them (in memory), else the fusion asks :meth:`CandidateSource.nodes`."""

    ids: List[str]
    scores: np.ndarray
    n_tokens: np.ndarray
    nodes: Optional[List[BaseNode]] = field(default=None, compare=False)

    @classmethod
    def of_nodes(cls, nodes: Sequence[BaseNode], scores: np.ndarray) -> "Ranked":
        return cls(
            [n.id_ for n in nodes],
            np.asarray(scores, dtype=np.float64),
            np.asarray([n_tokens(n) for n in nodes], dtype=np.float64),
            list(nodes),
        )


class CandidateSource(ABC):
    """The candidate lists of one index (or of a set of retrievers), and the nodes behind them."""

    @property
    @abstractmethod
    def keys(self) -> List[ListKey]:
        """The lists this source answers, in fusion order."""

    @abstractmethod
    def lists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        """Each list's best ``k`` units for the query (passing ``filters``)."""

    @property
    def embed_model(self) -> Optional[BaseEmbedding]:
        """The model that embeds the query, if a list needs the embedding."""
        return None

    def embed(self, query_bundle: QueryBundle) -> Optional[np.ndarray]:
        """The query embedding the dense lists share (computed once, kept on the bundle)."""
        if self.embed_model is None:
            return None
        if query_bundle.embedding is None:
            query_bundle.embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)

    async def _aembed(self, query_bundle: QueryBundle) -> Optional[np.ndarray]:
        """:meth:`embed`, awaiting the model."""
        if self.embed_model is not None and query_bundle.embedding is None:
            query_bundle.embedding = await self.embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)
        return None if query_bundle.embedding is None else np.asarray(query_bundle.embedding, dtype=np.float32)

    async def alists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        """:meth:`lists` in a worker thread, once the query is embedded (awaited)."""
        await self._aembed(query_bundle)
        return await asyncio.to_thread(self.lists, query_bundle, k, filters)

    def nodes(self, ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The nodes of ``ids`` (one batched read); a source whose lists carry nodes needs none."""
        return {}

    def consistent(self, read: Callable[[], T]) -> T:
        """``read()`` (a query's :meth:`lists` and :meth:`nodes`), from one state of the index: a
        source whose reads can straddle another process's write checks and reads again."""
        return read()

    async def aconsistent(self, read: Callable[[], Awaitable[T]]) -> T:
        """:meth:`consistent` of an awaitable ``read``."""
        return await read()

    def describe(self) -> List[str]:
        return [f"{e}@{g}" for e, g in self.keys]


class _Masks:
    """Which nodes of an expert pass a filter, cached for the last few filters (a boolean array each)."""

    def __init__(self, size: int = 8) -> None:
        self._cache: "OrderedDict[Tuple[int, str], np.ndarray]" = OrderedDict()
        self._size = size

    def get(self, nodes: Sequence[BaseNode], filters: MetadataFilters) -> np.ndarray:
        key = (id(nodes), filters_key(filters))
        mask = self._cache.get(key)
        if mask is None:
            mask = self._cache[key] = filter_mask(nodes, filters)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return mask


class ExpertSource(CandidateSource):
    """Lists from retrievers in the process: ``experts`` maps an expert name to ``{granularity:
    retriever}``. :class:`DenseExpert` and :class:`SparseExpert` are scored over NumPy arrays (one
    query embedding shared by the dense ones); any other ``BaseRetriever`` through ``retrieve``
    (asked for ``k`` units; filters are handed to it when it takes ``filters``)."""

    def __init__(self, experts: Mapping[str, Mapping[int, BaseRetriever]], feedback: Optional[Feedback] = None) -> None:
        self._experts: List[Tuple[str, int, BaseRetriever]] = [
            (e, int(g), r) for e, by_g in experts.items() for g, r in sorted(by_g.items())
        ]
        if not self._experts:
            raise ValueError(
                "experts is empty; pass e.g. {'dense': {2: DenseExpert(...)}, 'sparse': {2: SparseExpert(...)}} "
                "or use MultiGranularityIndex.as_retriever()."
            )
        self._masks = _Masks()
        self.feedback = feedback if feedback is not None else Feedback()

    @property
    def keys(self) -> List[ListKey]:
        return [(e, g) for e, g, _ in self._experts]

    @property
    def experts(self) -> List[Tuple[str, int, BaseRetriever]]:
        return list(self._experts)

    @property
    def embed_model(self) -> Optional[BaseEmbedding]:
        """The embed model of the first expert that embeds queries (``embed_query``): every dense
        expert scores that one embedding."""
        for _, _, r in self._experts:
            if hasattr(r, "embed_query"):
                return r.embed_model  # type: ignore[attr-defined]
        return None

    def _top(self, nodes: List[BaseNode], s: np.ndarray, k: int, mask: Optional[np.ndarray], positive: bool) -> Ranked:
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        idx = [
            i
            for i in top_k_by_score_then_id(s, lambda i: nodes[i].id_, k)
            if np.isfinite(s[i]) and (s[i] > 0 or not positive)
        ]
        return Ranked.of_nodes([nodes[i] for i in idx], s[idx].astype(np.float64) if idx else np.zeros(0))

    def _mask(self, nodes: List[BaseNode], filters: Optional[MetadataFilters]) -> Optional[np.ndarray]:
        return None if filters is None else self._masks.get(nodes, filters)

    def _one(
        self,
        r: BaseRetriever,
        query_bundle: QueryBundle,
        qvec: Optional[np.ndarray],
        k: int,
        filters: Optional[MetadataFilters],
    ) -> Ranked:
        fb = self.feedback
        if isinstance(r, DenseExpert):
            mask = self._mask(r.nodes, filters)
            s = r.score_all(qvec)
            if fb.dense > 0:
                top = self._feedback_rows(r.nodes, s, fb.depth, mask, positive=False)
                s = r.score_all(rocchio(qvec, r.embeddings[top], fb.dense))
            return self._top(r.nodes, s, k, mask, positive=False)
        if isinstance(r, SparseExpert):
            mask = self._mask(r.nodes, filters)
            s = r.score_all(query_bundle.query_str)
            if fb.terms > 0:
                s = self._expanded(r, query_bundle.query_str, s, self._feedback_rows(r.nodes, s, fb.depth, mask, True))
            return self._top(r.nodes, s, k, mask, True)
        return self._generic(r.retrieve(query_bundle), filters)

    @staticmethod
    def _feedback_rows(
        nodes: List[BaseNode], s: np.ndarray, m: int, mask: Optional[np.ndarray], positive: bool
    ) -> List[int]:
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        return [
            i
            for i in top_k_by_score_then_id(s, lambda i: nodes[i].id_, m)
            if np.isfinite(s[i]) and (s[i] > 0 or not positive)
        ]

    def _expanded(self, r: SparseExpert, query: str, s: np.ndarray, top: List[int]) -> np.ndarray:
        """RM3: ``(1 - w) * s / n_query_terms + w * sum_t w_t * bm25(t)`` over the expansion terms."""
        fb = self.feedback
        q_terms = r.tokenizer(query)
        tokens = r.tokens
        terms = expansion_terms([tokens[i] for i in top], s[top], q_terms, fb.terms)
        if not terms:
            return s
        bm25 = r._bm25
        extra = np.zeros(s.shape[0], dtype=np.float64)
        for t, w in terms.items():
            extra += w * np.asarray(bm25.get_scores([t]), dtype=np.float64)
        return (1.0 - fb.weight) * s / max(1, len(set(q_terms))) + fb.weight * extra

    @staticmethod
    def _generic(nws: Sequence[NodeWithScore], filters: Optional[MetadataFilters]) -> Ranked:
        kept = [n for n in nws if filters is None or matches(n.node.metadata, filters)]
        return Ranked.of_nodes(
            [n.node for n in kept],
            np.asarray([n.score if n.score is not None else 0.0 for n in kept], dtype=np.float64),
        )

    def lists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        qvec = self.embed(query_bundle)
        return {(e, g): self._one(r, query_bundle, qvec, k, filters) for e, g, r in self._experts}

    async def alists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        qvec = await self._aembed(query_bundle)

        async def run(r: BaseRetriever) -> Ranked:
            if isinstance(r, (DenseExpert, SparseExpert)):
                return await asyncio.to_thread(self._one, r, query_bundle, qvec, k, filters)
            return self._generic(await r.aretrieve(query_bundle), filters)

        results = await asyncio.gather(*[run(r) for _, _, r in self._experts])
        return {(e, g): res for (e, g, _), res in zip(self._experts, results)}


__all__ = ["CandidateSource", "ExpertSource", "ListKey", "Ranked", "n_tokens"]
