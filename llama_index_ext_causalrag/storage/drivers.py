"""Store drivers: what a store can do for an index, asked of one object per kind of store.

The generic code of :mod:`llama_index_ext_causalrag.storage` (writing rows, reading nodes, the
write lock, the journal, the commit) works with any LlamaIndex vector store, docstore and
kvstore through their public API. Where a store can do better (bulk writes, one transaction
for a whole update, a lock shared across processes, errors that mean a lost connection), its
:class:`StoreDriver` says so; the generic code asks :func:`driver_for` and never names a store.

Each store kind keeps its driver in a folder of its own (``storage/pg/``, ``storage/milvus/``),
registered by one line in ``storage/__init__.py``; :data:`GENERIC` answers for every store no
registered driver owns. A new store joins by a folder with a :class:`StoreDriver` subclass and
one :func:`register` call. Every method has the generic answer as its default, so a driver
overrides only what its store does better.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Literal, Optional, Protocol, Sequence, Tuple, TypeVar

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.validation import caller

T = TypeVar("T")
FILTERED = "filtered"  # the generic layout: lists are queries of the vector store, filtered
# how a store's top-k pruned BM25 lists are scored (from_vector_store(bm25_scores=))
BM25Scores = Literal["index", "exact"]


class OneCommit(Protocol):
    """An update's rows and the index's new state head, committed together (see :meth:`StoreDriver.one_commit`)."""

    def commit(
        self,
        new_nodes: Sequence[BaseNode],
        old_unit_ids: Sequence[str],
        new_units: Sequence[BaseNode],
        new_emb: Optional[np.ndarray],
        head: Optional[Dict[str, Any]],
    ) -> None:
        """In one transaction: ``new_nodes`` into the docstore, the vector rows of ``old_unit_ids``
        out, ``new_units`` (embeddings ``new_emb``) in, and (unless None) ``head`` as the kvstore
        collection's ``"head"`` value. Nothing is written if any part fails."""


class SessionLock(Protocol):
    """A lock other processes see (a database session lock); released when its session ends."""

    def acquire(self, shared: bool, wait: float) -> bool:
        """Take the lock within ``wait`` seconds; False if another holder kept it."""

    def check(self) -> None:
        """Raise ``ConnectionError`` if the lock's session is gone."""

    def release(self) -> None:
        """Give the lock back (ending its session)."""


class StoreDriver:
    """The generic store: LlamaIndex's public API, nothing more. A store's driver subclasses it
    and overrides what its store does better; ``None`` / ``False`` answers mean "not offered"."""

    name = "generic"

    def owns(self, store: Any) -> bool:
        """True if ``store`` (a vector store, docstore or kvstore) is of this driver's kind."""
        return False

    # ---- errors and connections ----------------------------------------------------------------
    def lost_connection(self, error: BaseException) -> bool:
        """True if ``error`` (one link of a chain) means this store's connection was lost."""
        return False

    def describe(self, store: Any) -> Optional[str]:
        """Where ``store`` lives, for messages (passwords hidden); None: its class name says it."""
        return None

    def drop_connections(self, store: Any) -> None:
        """Close ``store``'s pooled connections, so the next use opens new ones."""

    # ---- bulk rows --------------------------------------------------------------------------------
    def write_vectors(self, vector_store: Any, batches: Any, written: List[str]) -> bool:
        """Write ``batches`` of ``(row nodes, float32 embeddings)`` faster than ``add``, each
        batch's ids into ``written`` once stored; False (nothing written) if not offered."""
        return False

    def vector_batch_size(self) -> Optional[int]:
        """Rows a :meth:`write_vectors` batch holds (None: the generic ``add`` batch)."""
        return None

    def write_docs(self, docstore: Any, nodes: Sequence[BaseNode]) -> bool:
        """``docstore.add_documents(nodes, allow_update=True)`` in one transaction; False if not offered."""
        return False

    def read_docs(
        self,
        docstore: Any,
        ids: Optional[Sequence[str]] = None,
        with_parents: bool = False,
        counter: Optional[str] = None,
        seen: Optional[List[int]] = None,
    ) -> Optional[Dict[str, BaseNode]]:
        """The stored nodes of ``ids`` (all with None; and their parents) in one read; None if
        not offered. ``counter``/``seen``: a write counter read in the same snapshot."""
        return None

    def read_all_docs(self, docstore: Any) -> Optional[Dict[str, Any]]:
        """Every stored node of ``docstore`` by id (nodes or their JSON) in one read; None if not
        offered. Generic: LlamaIndex's key-value docstore reads its node collection with one
        ``get_all`` instead of one query a node."""
        kvstore = getattr(docstore, "_kvstore", None)  # KVDocumentStore's own attributes
        collection = getattr(docstore, "_node_collection", None)
        if kvstore is None or not isinstance(collection, str):
            return None
        try:
            return kvstore.get_all(collection=collection)
        except NotImplementedError:
            return None

    def table_dim(self, vector_store: Any) -> Optional[int]:
        """The embedding dimension of ``vector_store``'s table from its catalog (0: no table yet,
        -1: a column of no stated dimension); None if not offered (the generic check sends a
        probe query); errors name the public call (:func:`caller`)."""
        return None

    # ---- commits and locks ------------------------------------------------------------------------
    def one_commit(
        self, vector_store: Any, docstore: Any, kvstore: Any, collection: Optional[str], row_ids: Any
    ) -> Optional[OneCommit]:
        """An update's rows (keyed by ``row_ids``), docstore entries and the state head
        (``collection`` of ``kvstore``; None: no kvstore) in one transaction, where all of them live in one database of this
        store; None if not offered (then each store commits on its own, and the head last)."""
        return None

    def session_lock(self, kvstore: Any, key: int) -> Optional[SessionLock]:
        """A lock on ``key`` that other processes sharing ``kvstore`` see; None: a lock of this
        process only (its stores are the process's own)."""
        return None

    def text_search(self, vector_store: Any) -> Optional[bool]:
        """Whether ``vector_store`` answers ``VectorStoreQueryMode.TEXT_SEARCH`` lexically; None:
        this driver does not know (no full-text search)."""
        return None

    def text_search_hint(self) -> Optional[str]:
        """How to make a store of this kind with full-text search, for messages."""
        return None

    # ---- list layouts: how a store serves an index's candidate lists --------------------------------
    #: the layouts (``store_layout`` in an index's parameters) this driver's stores serve
    layouts: Tuple[str, ...] = (FILTERED,)
    #: of :attr:`layouts`, those that compute every list in the store (the process holds no unit)
    served_layouts: Tuple[str, ...] = ()

    def units_store(self, vector_store: Any) -> Any:
        """The store an index writes its units to (a driver may wrap the user's store)."""
        return vector_store

    #: rows keyed by the node id itself (else by uuid5 of it, :mod:`.row_ids`)
    node_id_rows: bool = False

    def new_layout(self, vector_store: Any, lexical: str, dim: int, ann: Any) -> str:
        """The layout a new index gets in ``vector_store`` (``lexical``: ``"bm25"`` or
        ``"store"``; ``dim``: its embeddings'; ``ann``: HNSW or IVF settings, or None); a ``ValueError``
        naming the fix, before anything is embedded, if the store cannot hold one."""
        self.check_ann(ann, vector_store)
        return FILTERED

    def check_ann(self, ann: Any, vector_store: Any) -> None:
        """Refuse ``ann`` (HNSW or IVF settings) where this driver's store builds no approximate index."""
        if ann is not None:
            raise ValueError(
                f"{caller()}: ann= builds approximate indexes (HNSW on PostgreSQL tables, HNSW or IVF on Milvus "
                f"collections); the vector store is "
                f"{type(vector_store).__name__}. Drop ann= (its own search serves the lists), or use a PGVectorStore."
            )

    def served_lists(
        self,
        vector_store: Any,
        granularities: Sequence[int],
        dim: int,
        ann: Any,
        bm25: Tuple[float, float],
        saved: Optional[Dict[str, Any]],
        scores: Optional[str] = None,
    ) -> Any:
        """The object computing every dense and BM25 list of ``granularities`` in the store
        (:class:`ServedLists`), for a layout of :attr:`served_layouts`; ``saved``: the parameters
        the index recorded (None: a new index, the driver chooses); ``scores``: one of
        :data:`BM25Scores` where the store's BM25 lists are top-k pruned by an index whose own scores
        differ from bm25s's (None: the driver's default). None if not offered."""
        return None

    def served_units(
        self, vector_store: Any, dim: int, bm25: Tuple[float, float], saved: Optional[Dict[str, Any]]
    ) -> Any:
        """The object answering a structure-aware index's queries in the store (its units as one
        served list: BM25 and dense lists, cosines and metadata of units by id; PostgreSQL's
        ``ServedUnits``); ``saved``: what the index recorded (None: a new index). None if not
        offered (the index reads its units into the process). See :class:`ServedUnits`."""
        return None

    def served_terms(self, vector_store: Any, dim: int, saved: Optional[Dict[str, Any]]) -> Any:
        """The object answering which units hold a query's terms in the store (its units as one
        served list with postings: ``overlap`` and ``doc_freq``; PostgreSQL's ``ServedUnits``
        over postings tables, on every server); ``saved``: what the index recorded (None: a new
        index). None if not offered (the index keeps its units' term postings in the process)."""
        return None

    def granularity_lists(self, vector_store: Any, granularities: Sequence[int], dim: int, ann: Any) -> Any:
        """Dense lists from one table per granularity, for an index that keeps its units in the
        process; None: not offered (its lists are queries of the vector store, filtered)."""
        return None


class ServedLists(Protocol):
    """Every candidate list of an index computed by its store (:meth:`StoreDriver.served_lists`)."""

    layout: str
    granularities: List[int]
    ann: Any

    def describe(self) -> str: ...

    def params(self) -> Dict[str, Any]:
        """What the index records beside ``store_layout`` to reopen these lists."""

    def create(self) -> None: ...

    def drop_if_table_empty(self) -> None: ...

    def build_ann(self) -> None: ...

    def analyze(self) -> None: ...

    def check_open(self, where: str) -> None:
        """Raise a ``ValueError`` naming the fix if the lists of an index in ``where`` are not all there."""

    def after_update(self, removed: bool, failed: bool) -> None:
        """After an update's commit (``failed``: its roll-back); ``removed``: it took units out."""

    def start_lists(self, qvec: Any, terms: Any, wanted: Any, k: int, k1: float, b: float, filters: Any) -> Any: ...


class ServedUnits(Protocol):
    """A structure-aware index's units answered by its store (:meth:`StoreDriver.served_units`):
    one BM25 and dense list, and reads of units by id. Every query method also returns the write
    counters its statements saw (one value: one state of the index)."""

    layout: str

    def params(self) -> Dict[str, Any]: ...

    def describe(self) -> str: ...

    def create(self) -> None: ...

    def finish_build(self) -> None: ...

    def check_open(self, where: str) -> None: ...

    def after_update(self, added: bool, removed: bool, failed: bool) -> None: ...

    def generation(self) -> int: ...

    def counter_sql(self, docstore: Any) -> Optional[str]: ...

    def bm25(self, terms: Any, k: int, k1: float, b: float, filters: Any) -> Any: ...

    def dense(self, qvec: Any, k: int, filters: Any) -> Any: ...

    def cosines(self, qvec: Any, ids: Sequence[str], filters: Any = None) -> Any: ...

    def facts(self, qvec: Any, ids: Sequence[str], keys: Sequence[str], filters: Any = None) -> Any: ...

    def count(self) -> int: ...

    def idf(self, terms: Sequence[str]) -> Dict[str, float]: ...


GENERIC = StoreDriver()
_DRIVERS: List[StoreDriver] = []


def register(driver: StoreDriver) -> StoreDriver:
    """Add ``driver`` (asked before the ones registered earlier); returns it."""
    if not isinstance(driver, StoreDriver):
        raise TypeError(f"register() takes a StoreDriver, got {driver!r}.")
    _DRIVERS.insert(0, driver)
    return driver


def unregister(driver: StoreDriver) -> None:
    """Remove ``driver`` (a test's toy driver)."""
    if driver in _DRIVERS:
        _DRIVERS.remove(driver)


def drivers() -> List[StoreDriver]:
    """The registered drivers, most recent first."""
    return list(_DRIVERS)


def driver_for(store: Any) -> StoreDriver:
    """The driver owning ``store``, else :data:`GENERIC`."""
    for driver in _DRIVERS:
        if driver.owns(store):
            return driver
    return GENERIC


def driver_for_layout(layout: str) -> StoreDriver:
    """The driver serving ``layout`` (an index's recorded ``store_layout``); a ``ValueError`` if none is registered."""
    owner = caller()
    for driver in [*_DRIVERS, GENERIC]:
        if layout in driver.layouts:
            return driver
    known = sorted({name for d in [*_DRIVERS, GENERIC] for name in d.layouts})
    raise ValueError(
        f"{owner}: the index was written with store layout {layout!r}, which no registered store driver "
        f"serves (known: {known}); install the version of llama-index-ext-causalrag that wrote it."
    )


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def error_chain(e: BaseException) -> Any:
    """``e`` and the errors it was raised from, each once (pymilvus raises ``e from e``)."""
    seen = set()
    chain: Optional[BaseException] = e
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        yield chain
        chain = chain.__cause__ or chain.__context__


_CONNECTION_ERRORS = ("OperationalError", "InterfaceError", "ConnectionError", "ConnectionRefusedError")


def is_connection_error(e: BaseException) -> bool:
    """True for errors that mean a store could not be reached (not a bad query): an ``OSError``,
    a DB-API connection error, or what a registered driver says means a lost connection."""
    for chain in error_chain(e):
        if isinstance(chain, OSError) or type(chain).__name__ in _CONNECTION_ERRORS:
            return True
        if any(d.lost_connection(chain) for d in _DRIVERS):
            return True
    return False


def retry_if_lost(fn: Callable[[], T], store: Any, what: str, describe: Callable[[Any], str]) -> T:
    """``fn()``; if the connection to ``store`` was lost (a server restarted), its pooled
    connections are dropped and ``fn()`` runs once more on new ones; if that fails too, a
    ``ConnectionError`` naming ``what`` and the store (``describe(store)``)."""
    try:
        return fn()
    except Exception as e:
        if not is_connection_error(e):
            raise
        driver_for(store).drop_connections(store)
        try:
            return fn()
        except Exception as again:
            if is_connection_error(again):
                raise ConnectionError(
                    f"{what}: lost the connection to {describe(store)} and could not reconnect: {first_line(again)}"
                ) from again
            raise


__all__ = [
    "FILTERED",
    "GENERIC",
    "OneCommit",
    "ServedLists",
    "ServedUnits",
    "SessionLock",
    "StoreDriver",
    "driver_for",
    "driver_for_layout",
    "drivers",
    "error_chain",
    "first_line",
    "is_connection_error",
    "register",
    "retry_if_lost",
    "unregister",
]
