"""The candidate lists of a served :class:`MultiGranularityIndex`, computed by its store.

:class:`ServedSource` asks the store's lists object (:meth:`StoreDriver.served_lists`: PostgreSQL
tables, Milvus collections) for every list of a query at once, then reads the kept units and
their parents from the docstore in one read; :class:`NodeCache` keeps the nodes of recent
queries for as long as the store's write counter says they are current.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Awaitable, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, TypeVar

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.experts.sparse import DEFAULT_B, DEFAULT_K1, BM25Tokenizer
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.sentence_tokens import TOKENIZER_PARAMS
from llama_index_ext_causalrag.multigranularity.source import CandidateSource, ListKey, Ranked
from llama_index_ext_causalrag.storage.drivers import ServedLists
from llama_index_ext_causalrag.storage.stores import fetch_nodes, keep_for_next_read

logger = logging.getLogger(__name__)
T = TypeVar("T")

OWNER = "MultiGranularityIndex"


def bm25_k1_b(bm25_params: Dict[str, Any]) -> Tuple[float, float]:
    """The index's BM25 ``(k1, b)``, as its in-memory experts take them."""
    return float(bm25_params.get("k1", DEFAULT_K1)), float(bm25_params.get("b", DEFAULT_B))


def _best_first(scores: np.ndarray, ids: Sequence[str]) -> bool:
    """The list is ordered as :func:`top_k_by_score_then_id` orders (score descending, ties by id
    descending), as the database sent it: then it is cut, not sorted again."""
    step = scores[:-1] - scores[1:]
    if (step < 0).any():
        return False
    return all(ids[i] > ids[i + 1] for i in np.flatnonzero(step == 0))


def _parent_ids(nodes: Iterable[BaseNode]) -> Set[str]:
    return {n.parent_node.node_id for n in nodes if n.parent_node is not None}


class NodeCache:
    """The nodes queries read lately (at most ``size``, least recently read leave first), valid for
    one value of the tables' write counter: a query whose lists saw another value empties it, so a
    node another process rewrote is read again. Shared by the retrievers of one index."""

    def __init__(self, size: int = 8192) -> None:
        self.size, self._state, self._nodes = int(size), None, OrderedDict()  # type: ignore[var-annotated]
        self._lock = threading.Lock()

    def get(self, state: int, ids: Iterable[str]) -> Dict[str, BaseNode]:
        """The nodes of ``ids`` held for write counter ``state`` (emptied first if it held another)."""
        with self._lock:
            if state != self._state:
                self._state, self._nodes = state, OrderedDict()
            out = {i: self._nodes[i] for i in ids if i in self._nodes}
            for i in out:
                self._nodes.move_to_end(i)
            return out

    def put(self, state: int, nodes: Dict[str, BaseNode]) -> None:
        with self._lock:
            if state != self._state:
                return
            self._nodes.update(nodes)
            for i in nodes:
                self._nodes.move_to_end(i)
            while len(self._nodes) > self.size:
                self._nodes.popitem(last=False)

    def __len__(self) -> int:
        return len(self._nodes)


READS = 5  # reads of one query at most, while other processes' writes land between its statements
_SEEN: ContextVar[Optional[List[int]]] = ContextVar("causalrag_served_generations", default=None)


class ServedSource(CandidateSource):
    """Every list of ``keys`` computed by the store (``tables``, a :class:`ServedLists`), nodes from ``docstore``.

    One state a query: each statement of a query also reads the tables' write counter (the
    lists' statements in the same snapshot as their rows, the docstore's read followed by one
    more), and a query that saw two values (a write committed between its statements) is read
    again, up to :data:`READS` times. Writes of an update are one transaction where the docstore
    is in the vector store's database (:mod:`~llama_index_ext_causalrag.storage.pg.atomic`), so
    the answer is from the old state or the new. Milvus keeps no counter: its reads are not checked."""

    def __init__(
        self,
        tables: ServedLists,
        docstore: BaseDocumentStore,
        embed_model: BaseEmbedding,
        bm25_params: Dict[str, Any],
        keys: Sequence[ListKey],
        cache: Optional["NodeCache"] = None,
    ) -> None:
        self.tables, self.docstore, self._embed_model = tables, docstore, embed_model
        self.tokenizer = BM25Tokenizer(**{k: bm25_params[k] for k in TOKENIZER_PARAMS if k in bm25_params})
        self.k1, self.b = bm25_k1_b(bm25_params)
        self._keys = list(keys)
        self._counted = hasattr(tables, "generation")
        covers = getattr(tables, "covers", None)  # the write counter covers the docstore's reads too
        self._docstore_counted = self._counted and covers is not None and covers(docstore)
        self._cache = cache if self._docstore_counted else None  # valid only where the counter covers the docstore

    @property
    def keys(self) -> List[ListKey]:
        return list(self._keys)

    def describe(self) -> List[str]:
        """The lists, then what serves the BM25 lists (and how to get the faster one)."""
        how = self.tables.describe_bm25()
        if how is None or not any(e == "sparse" for e, _ in self._keys):
            return super().describe()
        served = f"bm25: {how}"
        return [*super().describe(), served]

    @property
    def embed_model(self) -> Optional[BaseEmbedding]:
        """The query's embedder, if a dense list is asked for."""
        return self._embed_model if any(e == "dense" for e, _ in self._keys) else None

    def lists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        terms = Counter(self.tokenizer(query_bundle.query_str))
        # both statements after the embedding: BM25 sent first, to run beside it, measured slower on two
        # cores (HolisQA biology p50 33.8 against 29.8 ms: the server and the embedder share them)
        pending = self.tables.start_lists(
            self.embed(query_bundle), terms, self._keys, k + TIE_MARGIN, self.k1, self.b, filters
        )
        found, generations = pending()
        self._saw(generations)
        out: Dict[ListKey, Ranked] = {}
        for key, (ids, scores, lengths) in found.items():
            s, n = np.asarray(scores, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
            if _best_first(s, ids):  # cut as sent
                out[key] = Ranked(list(ids[:k]), s[:k], n[:k])
                continue
            order = top_k_by_score_then_id(s, lambda i, ids=ids: ids[i], k, margin=TIE_MARGIN)
            out[key] = Ranked([ids[i] for i in order], s[order], n[order])
        return out

    def nodes(self, ids: Sequence[str]) -> Dict[str, BaseNode]:
        """The kept units, and their parents for the promotion that follows, in one read; those
        the index's :class:`NodeCache` holds for the state the lists came from are not read."""
        seen = _SEEN.get()
        state = seen[0] if self._cache is not None and seen and len(set(seen)) == 1 else None
        hit = (lambda wanted: self._cache.get(state, wanted)) if state is not None else (lambda wanted: {})
        units = hit(ids)
        cached_parents = _parent_ids(units.values())
        parents = hit(cached_parents)
        wanted = [i for i in ids if i not in units] + sorted(cached_parents - parents.keys())
        read: List[int] = []
        found = (
            fetch_nodes(
                self.docstore,
                wanted,
                with_parents=True,
                seen=read,
                counter=self.tables.generation_sql() if self._docstore_counted else None,
            )
            if wanted
            else {}
        )
        if (
            wanted and self._docstore_counted
        ):  # in the nodes' snapshot: unchanged since the lists, no write came between
            after = read[0] if read else self.tables.generation()
            self._saw([after])
            if after == state:
                self._cache.put(state, found)
        units.update((i, found[i]) for i in ids if i in found)
        parents.update((p, found[p]) for p in _parent_ids(units.values()) if p in found)
        keep_for_next_read(self.docstore, parents)  # the promotion's read of the parents, answered
        return units

    # ---- one state a query ----------------------------------------------------------------
    @staticmethod
    def _saw(generations: Sequence[int]) -> None:
        seen = _SEEN.get()
        if seen is not None:
            seen.extend(generations)

    def _settled(self, seen: Sequence[int], read: int) -> bool:
        """True if the query's statements saw one write counter, or this was the last read."""
        if len(set(seen)) <= 1:
            return True
        if read == READS:
            logger.warning(
                "%s: writes kept landing during a query (%d reads, write counters %s); answered from "
                "the last read, which may mix two states.",
                OWNER,
                READS,
                sorted(set(seen)),
            )
            return True
        logger.info(
            "%s: a write landed during a query (write counters %s); reading it again.", OWNER, sorted(set(seen))
        )
        return False

    @staticmethod
    @contextmanager
    def _one_read() -> Iterator[List[int]]:
        """The write counters the statements of one read of a query see, collected while inside
        (alists' worker threads run in copies of this context: they hold the same list)."""
        seen: List[int] = []
        token = _SEEN.set(seen)
        try:
            yield seen
        finally:
            _SEEN.reset(token)

    def consistent(self, read: Callable[[], T]) -> T:
        if not self._counted:
            return read()
        attempt = 0
        while True:
            attempt += 1
            with self._one_read() as seen:
                out = read()
            if self._settled(seen, attempt):
                return out

    async def aconsistent(self, read: Callable[[], Awaitable[T]]) -> T:
        if not self._counted:
            return await read()
        attempt = 0
        while True:
            attempt += 1
            with self._one_read() as seen:
                out = await read()
            if self._settled(seen, attempt):
                return out


__all__ = ["NodeCache", "ServedSource", "bm25_k1_b"]
