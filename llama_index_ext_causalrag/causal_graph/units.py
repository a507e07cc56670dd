"""Where the text units of a :class:`CausalGraphIndex` state live, and how one query scores them.

A query scores units by ``s(u) = alpha * cos(q, u) + (1 - alpha) * lex(q, u)`` (``retriever.py``).
Two sources answer it, with one interface (:meth:`begin` -> :class:`UnitScores`, :meth:`nodes`):

* :class:`MemoryUnits`: the nodes and their vectors in the process; every unit scored at once.
* :class:`StoredUnits`: in the process only the unit ids and, where the store serves no terms,
  their term postings (:mod:`.unit_terms`: :class:`TermPostings`, int32 positions); the vectors
  and text stay in the vector store and docstore. A query asks the vector store for its
  ``depth`` nearest units (``VectorStoreQuery``, ``filters`` pushed into it), reads the stored
  vectors of those and of the units whose term overlap could still lift them into the top
  ``depth`` (``s <= alpha * (cos_depth + eps) + (1 - alpha) * lex``: a threshold bound, Fagin et
  al., PODS 2001), and of any other unit the graph step asks about (:meth:`UnitScores.ensure`),
  one batched ``get_nodes`` each; cosines are computed in the process from the stored float32
  rows, as in memory, so every score a query uses equals the in-memory index's. The text of the
  units a query keeps is one batched docstore read. Both reads go through bounded caches
  (:data:`VECTOR_CACHE_ROWS`, :data:`NODE_CACHE`), kept per state (an update makes a new state,
  hence new caches).

  On PostgreSQL (the driver's served terms: the ``"served"`` tables of one list) the same steps
  read the database's lists instead: ``lex`` is one statement over the postings
  (:class:`~.unit_terms.ServedTerms`), the nearest units the list table's exact top-k (ids and
  cosines, ``filters`` inside), and the vectors the list table's rows by id (no text, no JSON
  metadata; ``filters`` tested by one statement by id); the scores are the same.

Unscored units hold ``-inf`` in :attr:`UnitScores.s`, as units outside a filter do in memory.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters, VectorStoreQuery

from llama_index_ext_causalrag.causal_graph.expansion import cosine_to, mmr_select, seed_scores
from llama_index_ext_causalrag.causal_graph.unit_terms import ServedTerms, TermPostings
from llama_index_ext_causalrag.storage.filters import filter_mask, matches
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import fetch_nodes, get_nodes_at_once, once_more_if_lost
from llama_index_ext_causalrag.validation import caller, public_call

# stored rows (vector + metadata) and docstore nodes a StoredUnits keeps between queries
VECTOR_CACHE_ROWS = 8192
NODE_CACHE = 1024
# PostgreSQL computes the similarity in single precision: the bound allows for it
SIMILARITY_EPS = 1e-5
# units the store's list holds past the ones a query ranks: a tie or a rounding at the edge of the
# list then falls outside what is ranked
DEPTH_MARGIN = 16
# set by an async retrieve running the search in a worker thread: the vector store's async
# calls (aquery, aget_nodes) then run on the caller's event loop (PGVectorStore's async engine and
# a local Qdrant's async client are bound to it)
CALLER_LOOP: "ContextVar[Optional[asyncio.AbstractEventLoop]]" = ContextVar("causalrag_caller_loop", default=None)

logger = logging.getLogger(__name__)


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit norm (float32), as the retriever scores them."""
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12) if x.size else x


class UnitScores:
    """One query's unit scores: ``s`` (n_units,) float64, ``-inf`` for units not scored or outside
    the filter; :meth:`ensure` scores more; :meth:`mmr` picks text seeds among the scored units."""

    def __init__(
        self,
        n: int,
        lex: np.ndarray,
        alpha: float,
        q: np.ndarray,
        rows: Callable[[np.ndarray], "tuple[np.ndarray, np.ndarray]"],
    ) -> None:
        self.s = np.full(n, -np.inf)
        self.scored = np.zeros(n, dtype=bool)
        self._lex, self._alpha, self._q, self._rows = lex, alpha, q, rows
        self._emb: Dict[int, np.ndarray] = {}

    def ensure(self, positions: "Sequence[int] | np.ndarray") -> None:
        """Score ``positions`` (a no-op for those scored already)."""
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        todo = np.unique(pos[~self.scored[pos]]) if pos.size else pos
        if not todo.size:
            return
        emb, ok = self._rows(todo)
        self.scored[todo] = True
        if not emb.size:
            return
        s = seed_scores(cosine_to(emb, self._q), self._lex[todo], self._alpha)
        self.s[todo] = np.where(ok, s, -np.inf)
        for i, u in enumerate(todo.tolist()):
            if ok[i]:
                self._emb[u] = emb[i]

    def cosines(self) -> np.ndarray:
        """(n_units,) the query's cosine to each scored unit passing the filter, else ``-inf``."""
        out = np.full(self.s.shape[0], -np.inf)
        known = [u for u in np.flatnonzero(np.isfinite(self.s)).tolist() if u in self._emb]
        if known:
            out[known] = cosine_to(np.stack([self._emb[u] for u in known]), self._q)
        return out

    def mmr(self, k: int, lam: float, pool: int) -> List[int]:
        """MMR over the scored units passing the filter (positions in pick order; ties on the lower position)."""
        known = np.flatnonzero(np.isfinite(self.s))
        if not known.size:
            return []
        emb = np.stack([self._emb[u] for u in known.tolist()])
        return [int(known[j]) for j in mmr_select(self.s[known], emb, k, lam=lam, pool=pool)]


class _MemoryScores(UnitScores):
    """Every unit scored at once from the vectors in memory."""

    def __init__(
        self, emb: np.ndarray, lex: np.ndarray, alpha: float, q: np.ndarray, mask: Optional[np.ndarray]
    ) -> None:
        n = lex.shape[0]
        super().__init__(n, lex, alpha, q, lambda p: (emb[p], np.ones(len(p), bool)))
        cos = cosine_to(emb, q) if emb.size else np.zeros(n)
        s = seed_scores(cos, lex, alpha)
        self.s = s if mask is None else np.where(mask, s, -np.inf)
        self.scored[:] = True
        self._all, self._cos = emb, cos

    def mmr(self, k: int, lam: float, pool: int) -> List[int]:
        return mmr_select(self.s, self._all, k, lam=lam, pool=pool)

    def cosines(self) -> np.ndarray:
        return np.where(np.isfinite(self.s), self._cos, -np.inf)  # the cosines the scores were made from


class MemoryUnits:
    """The units and their (unit-norm) vectors in the process."""

    stored = False

    def __init__(self, units: Sequence[BaseNode], embeddings: np.ndarray, postings: TermPostings) -> None:
        self.units = list(units)
        self.ids = [u.node_id for u in self.units]
        self.postings = postings
        self.emb = unit_rows(embeddings)
        if self.emb.shape[0] != len(self.units):
            raise ValueError(
                f"unit_embeddings has {self.emb.shape[0]} rows but the index has "
                f"{len(self.units)} units; compute them with embed_units(index, embed_model)."
            )

    @property
    def dim(self) -> int:
        return int(self.emb.shape[1]) if self.emb.ndim == 2 and self.emb.size else 0

    def begin(
        self, q: np.ndarray, qterms: Sequence[str], alpha: float, depth: int, filters: Optional[MetadataFilters]
    ) -> UnitScores:
        lex = self.postings.lexical(qterms, len(self.ids))
        mask = None if filters is None else self._mask(filters)
        return _MemoryScores(self.emb, lex, alpha, q, mask)

    def _mask(self, filters: MetadataFilters) -> np.ndarray:
        if getattr(self, "_mask_filters", None) is not filters:  # one retriever, one filter: computed once
            self._mask_filters, self._mask_value = filters, filter_mask(self.units, filters)
        return self._mask_value

    def all_nodes(self) -> List[BaseNode]:
        return self.units

    def present_nodes(self) -> List[Optional[BaseNode]]:
        return list(self.all_nodes())

    def nodes(self, positions: Sequence[int]) -> Dict[int, BaseNode]:
        return {int(u): self.units[int(u)] for u in positions}


class _LRU:
    def __init__(self, size: int) -> None:
        self.size, self.data, self.lock = size, OrderedDict(), threading.Lock()

    def get_many(self, keys: Sequence[Any]) -> Dict[Any, Any]:
        with self.lock:
            out = {k: self.data[k] for k in keys if k in self.data}
            for k in out:
                self.data.move_to_end(k)
            return out

    def put_many(self, items: Mapping[Any, Any]) -> None:
        with self.lock:
            self.data.update(items)
            for k in items:
                self.data.move_to_end(k)
            while len(self.data) > self.size:
                self.data.popitem(last=False)


class StoredUnits:
    """Unit ids (and term postings, unless the store serves the terms) in the process; vectors and
    text read per query from ``vector_store`` (rows keyed by ``row_ids``) and ``docstore``. In
    memory per unit: its id (a Python string and a dict entry, about 150 bytes) and, with
    postings in the process, 4 bytes a distinct term of its text."""

    stored = True

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        docstore: Any,
        row_ids: RowIds,
        unit_ids: Sequence[str],
        postings: "TermPostings | Any",
        dim: int,
    ) -> None:
        self.vector_store, self.docstore = vector_store, docstore
        self.ids = list(unit_ids)
        self.pos = {u: i for i, u in enumerate(self.ids)}
        self.row_ids = row_ids.with_nodes(self.ids)
        # in the process, or the store's (its driver's served terms: a ServedTerms over this state's positions)
        self.postings = postings if isinstance(postings, TermPostings) else ServedTerms(postings, self.pos)
        # the store's served list (PostgreSQL): the dense list and the vectors from its own table
        self.served = None if isinstance(postings, TermPostings) else postings
        self.dim = dim
        self._rows = _LRU(VECTOR_CACHE_ROWS)
        self._nodes = _LRU(NODE_CACHE)

    # ---- what updates and exports read: everything, once, not kept ------------------------
    def all_nodes(self) -> List[BaseNode]:
        return get_nodes_at_once(self.docstore, self.ids)

    def present_nodes(self) -> List[Optional[BaseNode]]:
        """Every unit's node in one read, ``None`` for a unit another index object deleted since
        this one opened (the queries leave such units out with a warning)."""
        return get_nodes_at_once(self.docstore, self.ids, missing_ok=True)

    def all_embeddings(self) -> np.ndarray:
        from llama_index_ext_causalrag.storage.stores import fetch_embeddings

        with public_call(caller("CausalGraphIndex")):  # an update names its call; an export, the index
            return fetch_embeddings(self.vector_store, self.ids, row_ids=self.row_ids)

    # ---- one query ---------------------------------------------------------------------------
    def begin(
        self, q: np.ndarray, qterms: Sequence[str], alpha: float, depth: int, filters: Optional[MetadataFilters]
    ) -> UnitScores:
        """The query's scores, exact for its ``depth`` best units (and for any unit ensured later)."""
        n = len(self.ids)
        lex = self.postings.lexical(qterms, n, filters)
        scores = UnitScores(n, lex, alpha, q, lambda p: self._vectors(p, filters))
        if not n:
            return scores
        depth, asked = min(depth, n), min(depth + DEPTH_MARGIN, n)
        dense, sims, exhausted = self._dense_list(q, asked, filters)
        lifted = np.zeros(0, dtype=np.int64)
        if not exhausted and sims:
            # units past the list have cos <= its last similarity: those whose overlap could still
            # reach the depth-th best score are scored too
            bound = alpha * (min(sims) + SIMILARITY_EPS) + (1.0 - alpha) * lex
            scores.ensure(dense)
            known = np.sort(scores.s[np.isfinite(scores.s)])[::-1]
            tau = known[depth - 1] if known.size >= depth else -np.inf
            lifted = np.flatnonzero((bound >= tau) & ~scores.scored)
        scores.ensure(np.concatenate([np.asarray(dense, dtype=np.int64), lifted]))
        if exhausted:  # the store found fewer units than asked: no other unit passes the filter
            scores.scored[:] = True
        return scores

    def _dense_list(
        self, q: np.ndarray, asked: int, filters: Optional[MetadataFilters]
    ) -> "tuple[List[int], List[float], bool]":
        """The ``asked`` nearest units passing ``filters``: (positions, similarities, whether the
        store had fewer rows than asked), from the served list's table (ids and cosines, exact) or
        the vector store's query."""
        if self.served is not None:
            (ids, sims), _ = self.served.dense(q, asked, filters)
            return [self.pos[i] for i in ids if i in self.pos], [float(x) for x in sims], len(ids) < asked
        query = VectorStoreQuery(query_embedding=q.astype(float).tolist(), similarity_top_k=asked, filters=filters)
        res = once_more_if_lost(lambda: self._call("query", query), self.vector_store, "the unit list")
        sims = [float(x) for x in (res.similarities or [])]
        return self._positions(res), sims, len(res.nodes or res.ids or []) < asked  # rows of the store, ours or not

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``vector_store.<name>(...)``, or its ``a<name>`` on the caller's loop (:data:`CALLER_LOOP`)."""
        loop = CALLER_LOOP.get()
        if loop is not None and f"a{name}" in type(self.vector_store).__dict__:
            coro = getattr(self.vector_store, f"a{name}")(*args, **kwargs)
            return asyncio.run_coroutine_threadsafe(coro, loop).result()
        return getattr(self.vector_store, name)(*args, **kwargs)

    def _positions(self, res: Any) -> List[int]:
        if res.nodes:
            ids = [self.row_ids.from_row(n).node_id for n in res.nodes]
        else:
            ids = [self.row_ids.node_id(r) for r in (res.ids or [])]
        return [self.pos[i] for i in ids if i in self.pos]  # rows another index object added: not in this state

    def _vectors(self, positions: np.ndarray, filters: Optional[MetadataFilters]) -> "tuple[np.ndarray, np.ndarray]":
        """(unit-norm rows, passes the filter) of ``positions``: the cache, then one batched read."""
        keys = [self.ids[int(u)] for u in positions]
        got = self._rows.get_many(keys)
        missing = [k for k in keys if k not in got]
        if missing:
            read = once_more_if_lost(lambda: self._read_rows(missing), self.vector_store, "unit vectors")
            self._rows.put_many(read)
            got.update(read)
        if not keys:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, bool)
        lost = [k for k in keys if k not in got]
        if lost:  # deleted by another index object since this one opened: left out, as a filter leaves units out
            logger.warning(
                "CausalGraphIndex: %d unit(s) of this index are gone from the vector store (first: %r; "
                "another index object changed it): left out of this query; reopen the index to "
                "answer from its new state.",
                len(lost),
                lost[0],
            )
        zero = np.zeros(self.dim, np.float32)
        emb = np.stack([got[k][0] if k in got else zero for k in keys])
        if filters is not None and self.served is not None:  # the list table holds no metadata: the store tests it
            passing = self.served.passing(keys, filters)
            ok = np.fromiter((k in got and k in passing for k in keys), dtype=bool, count=len(keys))
        else:
            ok = np.fromiter(
                (k in got and (filters is None or matches(got[k][1], filters)) for k in keys),
                dtype=bool,
                count=len(keys),
            )
        return emb, ok

    def _read_rows(self, ids: List[str]) -> Dict[str, "tuple[np.ndarray, Optional[Dict[str, Any]]]"]:
        if self.served is not None:  # vectors only, from the served list's table (no text, no metadata)
            found = self.served.vectors(ids)
            keys = list(found)
            emb = unit_rows(np.stack([found[k] for k in keys])) if keys else np.zeros((0, self.dim), np.float32)
            return {k: (emb[i], None) for i, k in enumerate(keys)}
        rows = dict(zip(self.row_ids.row_ids(ids), ids))
        try:
            found = self._call("get_nodes", node_ids=list(rows))
        except NotImplementedError:  # SimpleVectorStore: vectors by id, metadata from the docstore
            get = self.vector_store.get
            nodes = fetch_nodes(self.docstore, ids)
            return {
                i: (unit_rows(np.asarray([get(r)], dtype=np.float32))[0], dict(nodes[i].metadata))
                for r, i in rows.items()
                if i in nodes
            }
        out = {}
        for n in found:
            node = self.row_ids.from_row(n)
            out[node.node_id] = (unit_rows(np.asarray([n.embedding], dtype=np.float32))[0], dict(node.metadata))
        return out

    def nodes(self, positions: Sequence[int]) -> Dict[int, BaseNode]:
        """The stored nodes of ``positions``: the cache, then one docstore read."""
        keys = [self.ids[int(u)] for u in positions]
        got = self._nodes.get_many(keys)
        missing = [k for k in keys if k not in got]
        if missing:
            read = fetch_nodes(self.docstore, missing)
            self._nodes.put_many(read)
            got.update(read)
        lost = [k for k in keys if k not in got]
        if lost:
            raise ValueError(
                f"CausalGraphIndex: the docstore lacks unit {lost[0]!r} of the index; reopen the "
                "index (another process may have changed it)."
            )
        return {int(u): got[k] for u, k in zip(positions, keys)}

    def memory_bytes(self) -> int:
        """What the process holds per unit besides the graph: postings and id arrays (cache excluded)."""
        return self.postings.nbytes + 150 * len(self.ids)


def unit_texts(units: Sequence[BaseNode]) -> List[str]:
    return [u.get_content(metadata_mode=MetadataMode.NONE) for u in units]


__all__ = [
    "CALLER_LOOP",
    "MemoryUnits",
    "NODE_CACHE",
    "StoredUnits",
    "TermPostings",  # re-exported from unit_terms
    "UnitScores",
    "VECTOR_CACHE_ROWS",
    "unit_rows",
    "unit_texts",
]
