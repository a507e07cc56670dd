"""A :class:`MultiGranularityIndex` served by PostgreSQL: the process holds no corpus.

:class:`ServedBackend` keeps every unit in the stores (rows of a ``PGVectorStore`` with their BM25
terms, nodes in the docstore) and the lists in the ``"served"`` layout
(:class:`~llama_index_ext_causalrag.storage.pg.served.ServedTables`); the kvstore or the persist
folder holds the build parameters only. So opening reads parameters and checks the layout, a
query asks the database for every list (:class:`ServedSource`: dense and BM25 of each
granularity, filters inside), fuses, then reads the nodes of the units it keeps and their
parents in one batched read each, and any number of processes serve one store: a write
committed by one is in the next query of every other.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, ClassVar, Dict, Iterable, Iterator, List, Optional, Sequence,
                    Set, Tuple, Type, TypeVar)

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.experts.sparse import DEFAULT_B, DEFAULT_K1, BM25Tokenizer
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.sentence_tokens import TOKENIZER_PARAMS, unit_tokens
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.source import CandidateSource, ListKey, Ranked
from llama_index_ext_causalrag.multigranularity.state import MGChange, check_lists, index_params
from llama_index_ext_causalrag.storage import updates as up
from llama_index_ext_causalrag.storage.backend import IndexBackend
from llama_index_ext_causalrag.storage.kvstate import KVState
from llama_index_ext_causalrag.storage.ann import HNSW
from llama_index_ext_causalrag.storage.pg.served import SERVED, ServedTables
from llama_index_ext_causalrag.storage.pg.textsearch import ENABLE_HINT, POSTINGS, TEXTSEARCH, TextSearchTables, textsearch_status
from llama_index_ext_causalrag.storage.terms import with_terms
from llama_index_ext_causalrag.storage.persistence import embedder_params, persist_to
from llama_index_ext_causalrag.storage.pg.atomic import shares_database
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import all_nodes, describe_store, fetch_nodes, keep_for_next_read, nodes_of_documents
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

logger = logging.getLogger(__name__)
T = TypeVar("T")

OWNER = "MultiGranularityIndex"
STORE_CLASS = "MultiGranularityIndex@store"
REOPEN = "MultiGranularityIndex.from_vector_store"


def bm25_k1_b(bm25_params: Dict[str, Any]) -> Tuple[float, float]:
    """The index's BM25 ``(k1, b)``, as its in-memory experts take them."""
    return float(bm25_params.get("k1", DEFAULT_K1)), float(bm25_params.get("b", DEFAULT_B))


class ServedState:
    """What a served index holds: its granularities; ``staged``: a build's units and tokens,
    until :meth:`ServedBackend.write` has written them."""

    def __init__(self, granularities: Sequence[int], docstore: BaseDocumentStore,
                 staged: Optional[Tuple[List[BaseNode], List[List[str]]]] = None) -> None:
        self.by_g: Dict[int, List[int]] = {int(g): [] for g in sorted(granularities)}
        self.docstore, self.staged = docstore, staged
        self.embeddings = np.zeros((0, 0), dtype=np.float32)  # index.embeddings: none in the process
        self.finest_scores = None  # no expert in the process: fit_evidence="query" fits by the fused prior

    def _refuse(self, what: str) -> ValueError:
        return ValueError(
            f"{OWNER} served from the store holds no {what} in the process (its lists are computed by the "
            "database); use as_retriever() / as_fusion_retriever(), or index.docstore for the units."
        )

    @property
    def units(self) -> List[BaseNode]:
        """Every unit, read from the docstore now (the whole corpus: for inspection, not for queries)."""
        return list(all_nodes(self.docstore).values())

    @property
    def dense(self) -> Dict[int, Any]:
        raise self._refuse("dense experts")

    @property
    def sparse(self) -> Dict[int, Any]:
        raise self._refuse("BM25 experts")


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
    """Every list of ``keys`` computed by the database (:class:`ServedTables`), nodes from ``docstore``.

    One state a query: each statement of a query also reads the tables' write counter (the
    lists' statements in the same snapshot as their rows, the docstore's read followed by one
    more), and a query that saw two values (a write committed between its statements) is read
    again, up to :data:`READS` times. Writes of an update are one transaction where the docstore
    is in the vector store's database (:mod:`~llama_index_ext_causalrag.storage.pg.atomic`), so
    the answer is from the old state or the new. Milvus keeps no counter: its reads are not checked."""

    def __init__(self, tables: ServedTables, docstore: BaseDocumentStore, embed_model: BaseEmbedding,
                 bm25_params: Dict[str, Any], keys: Sequence[ListKey], cache: Optional["NodeCache"] = None) -> None:
        self.tables, self.docstore, self._embed_model = tables, docstore, embed_model
        self.tokenizer = BM25Tokenizer(**{k: bm25_params[k] for k in TOKENIZER_PARAMS if k in bm25_params})
        self.k1, self.b = bm25_k1_b(bm25_params)
        self._keys = list(keys)
        self._counted = hasattr(tables, "generation")
        self._docstore_counted = self._counted and shares_database(tables.vector_store, docstore)
        self._cache = cache if self._docstore_counted else None  # valid only where the counter covers the docstore

    @property
    def keys(self) -> List[ListKey]:
        return list(self._keys)

    def describe(self) -> List[str]:
        """The lists, then what serves the BM25 lists (and how to get the faster one)."""
        how = getattr(self.tables, "bm25_lists", None)
        if how is None or not any(e == "sparse" for e, _ in self._keys):
            return super().describe()
        served = ("bm25: pg_textsearch bm25 indexes (top-k pruned)" if how == TEXTSEARCH else
                  f"bm25: postings tables (every posting of the query's terms scored); {ENABLE_HINT}")
        return [*super().describe(), served]

    @property
    def embed_model(self) -> Optional[BaseEmbedding]:
        """The query's embedder, if a dense list is asked for."""
        return self._embed_model if any(e == "dense" for e, _ in self._keys) else None

    def lists(self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None) -> Dict[ListKey, Ranked]:
        terms = Counter(self.tokenizer(query_bundle.query_str))
        # both statements after the embedding: BM25 sent first, to run beside it, measured slower on two
        # cores (HolisQA biology p50 33.8 against 29.8 ms: the server and the embedder share them)
        pending = self.tables.start_lists(self.embed(query_bundle), terms, self._keys, k + TIE_MARGIN, self.k1, self.b,
                                          filters)
        found, generations = pending()
        self._saw(generations)
        out: Dict[ListKey, Ranked] = {}
        for key, (ids, scores, lengths) in found.items():
            s = np.asarray(scores, dtype=np.float64)
            order = (range(min(k, len(ids))) if _best_first(s, ids) else
                     top_k_by_score_then_id(s, lambda i, ids=ids: ids[i], k, margin=TIE_MARGIN))
            out[key] = Ranked([ids[i] for i in order], s[order], np.asarray(lengths, dtype=np.float64)[order])
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
        found = fetch_nodes(self.docstore, wanted, with_parents=True, seen=read,
                            counter=self.tables.generation_sql() if self._docstore_counted else None) if wanted else {}
        if wanted and self._docstore_counted:  # in the nodes' snapshot: unchanged since the lists, no write came between
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
            logger.warning("%s: writes kept landing during a query (%d reads, write counters %s); answered from "
                           "the last read, which may mix two states.", OWNER, READS, sorted(set(seen)))
            return True
        logger.info("%s: a write landed during a query (write counters %s); reading it again.", OWNER, sorted(set(seen)))
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


class ServedBackend(IndexBackend):
    """Units in a ``PGVectorStore`` (rows with BM25 terms) and a docstore; lists in the database."""

    kind: ClassVar[str] = "stores"
    needs_tokens: ClassVar[bool] = True

    def __init__(self, vector_store: BasePydanticVectorStore, docstore: BaseDocumentStore, dim: int,
                 kv: Optional[KVState] = None, ann: Optional[HNSW] = None, row_ids: Optional[RowIds] = None) -> None:
        self.vector_store, self.docstore, self.dim, self.kv, self.ann = vector_store, docstore, dim, kv, ann
        self.row_ids = row_ids or RowIds.for_new_index()
        self.layout, self.lexical = SERVED, "bm25"
        self.tables: Optional[ServedTables] = None
        self.cache = NodeCache()  # the nodes of the latest queries, for every retriever of the index
        self.bm25_lists, self.k1_b = POSTINGS, (DEFAULT_K1, DEFAULT_B)  # what serves BM25, decided at build

    def tables_for(self, granularities: Sequence[int]) -> ServedTables:
        gs = sorted(int(g) for g in granularities)
        if self.tables is None or self.tables.granularities != gs or self.tables.bm25_lists != self.bm25_lists:
            self.tables = (TextSearchTables(self.vector_store, gs, self.dim, self.ann, *self.k1_b)
                           if self.bm25_lists == TEXTSEARCH else ServedTables(self.vector_store, gs, self.dim, self.ann))
        return self.tables

    def choose_bm25_lists(self, index: "MultiGranularityIndex", granularities: Sequence[int]) -> None:
        """A new index's BM25 lists: from pg_textsearch's index where the database has it, else
        from postings tables; one log line says which, and why."""
        self.k1_b = bm25_k1_b(index.bm25_params or {})
        usable, why = textsearch_status(ServedTables(self.vector_store, granularities, self.dim, self.ann), create=True)
        self.bm25_lists = TEXTSEARCH if usable else POSTINGS
        if usable:
            logger.info("%s: BM25 lists from pg_textsearch bm25 indexes (%s).", OWNER, why)
        else:
            logger.info("%s: BM25 lists from postings tables (%s); %s.", OWNER, why, ENABLE_HINT)

    # ---- state and retrieval ----------------------------------------------------------
    def make_state(self, index: "MultiGranularityIndex", units: List[BaseNode], embeddings: Optional[np.ndarray],
                   tokens: Optional[List[List[str]]], bm25: Optional[Dict[int, Any]] = None) -> ServedState:
        from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity

        return ServedState(list(units_by_granularity(units)), self.docstore,
                           staged=(units, tokens or unit_tokens(units, index.bm25_params)))

    def fusion_retriever(self, index: "MultiGranularityIndex", state: ServedState, expert_names: Sequence[str],
                         granularities: Optional[Sequence[int]], **kwargs: Any) -> EntropyFusionRetriever:
        """Fusion of ``expert_names`` x ``granularities`` (None: all), every list from the database."""
        names, gs = check_lists(expert_names, granularities, list(state.by_g))
        keys = [(e, g) for e in names for g in gs]
        source = ServedSource(self.tables_for(list(state.by_g)), self.docstore, index._embed_model, index.bm25_params,
                              keys, cache=self.cache)
        return EntropyFusionRetriever(source, **kwargs)

    def embed_dim(self, state: Any) -> int:
        return self.dim

    # ---- writes -------------------------------------------------------------------------
    def _rows(self, units: Sequence[BaseNode], tokens: Sequence[List[str]]) -> List[BaseNode]:
        return [with_terms(u, t) for u, t in zip(units, tokens)]

    def write(self, index: "MultiGranularityIndex", state: ServedState, embeddings: Optional[np.ndarray] = None) -> None:
        """A build: the layout first (so the triggers fill the lists as rows arrive), then units to
        the docstore and rows (with their terms) to the vector store, then the parameters."""
        units, tokens = state.staged  # type: ignore[misc]
        if isinstance(self.tables_for(list(state.by_g)), ServedTables):
            self.choose_bm25_lists(index, list(state.by_g))
        tables = self.tables_for(list(state.by_g))
        tables.drop_if_table_empty()
        tables.create()

        def save() -> None:
            tables.build_ann()
            tables.analyze()
            self.save_state(index, state)

        write_new_index(self.vector_store, self.docstore, units, self._rows(units, tokens), embeddings,  # type: ignore[arg-type]
                        f"{OWNER}.from_documents", save, self.row_ids, kv=self.kv)
        state.staged = None  # the process keeps nothing of the corpus

    def known_docs(self, state: ServedState, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        """Each indexed document of ``doc_ids`` -> the source hash its units recorded."""
        found = nodes_of_documents(self.docstore, doc_ids, first_only=True)
        return {d: up.source_hash(nodes[0]) for d, nodes in found.items() if nodes}

    def next_state(self, index: "MultiGranularityIndex", old: ServedState, change: MGChange) -> ServedState:
        return ServedState(list(old.by_g), self.docstore)

    def commit(self, index: "MultiGranularityIndex", old: ServedState, new: ServedState,
               change: Optional[MGChange] = None, persist_dir: "Optional[str | Path]" = None) -> None:
        """The units of the documents ``change`` replaces or drops leave the stores, its new units
        enter them (the triggers update every list and BM25 statistic in the same transactions),
        then the parameters go to ``persist_dir`` and the kvstore; on a failure the stores are put back."""
        if change is None:
            raise ValueError(f"{type(self).__name__}.commit needs the change (units, embeddings, dropped documents).")
        affected = sorted({up.doc_key(u) for u in change.units} | set(change.drop))
        gone = [n for nodes in nodes_of_documents(self.docstore, affected).values() for n in nodes]
        gone_rows = self._rows(gone, unit_tokens(gone, index.bm25_params))
        new_rows = self._rows(change.units, change.tokens)

        def write_state() -> None:
            if persist_dir is not None:
                self.write_folder(index, new, persist_dir)
            self.save_state(index, new)

        textsearch = self.tables if isinstance(self.tables, TextSearchTables) else None
        try:
            replace_in_stores(self.vector_store, self.docstore, f"{OWNER} update", gone_rows, new_rows,
                              change.embeddings, gone, change.units, write_state, self.row_ids, kv=self.kv)
        except Exception:
            if textsearch is not None and new_rows:  # rolled-back rows count in pg_textsearch's statistics
                self._reindex_quietly(textsearch)
            raise
        if textsearch is not None and gone:
            textsearch.reindex()  # the deleted rows leave the bm25 statistics (IDF, average length)

    @staticmethod
    def _reindex_quietly(tables: TextSearchTables) -> None:
        try:
            tables.reindex()
        except Exception as e:  # the server may be what failed: say so, keep the update's own error
            logger.warning("%s: could not rebuild the bm25 indexes after a failed update (%s); rows it rolled back "
                           "count in BM25's statistics until REINDEX of %s.", OWNER, e, tables.describe())

    def persist(self, index: "MultiGranularityIndex", persist_dir: "str | Path") -> None:
        self.write_folder(index, index._state, persist_dir)

    def write_folder(self, index: "MultiGranularityIndex", st: ServedState, persist_dir: "str | Path") -> None:
        """``params.json`` only: the stores hold the units, their vectors and every list."""
        with persist_to(persist_dir, STORE_CLASS) as w:
            w.params.update(
                lexical="bm25", store_layout=SERVED, bm25_lists=self.bm25_lists,
                ann=self.ann.params() if self.ann is not None else None,
                **index_params(index, list(st.by_g)), vector_store=describe_store(self.vector_store),
                **embedder_params(index._embed_model, self.dim),
            )
            w.params.update(self.row_ids.params())
            if index._built_with is not None:
                w.params["embed_model"] = index._built_with

    def save_state(self, index: "MultiGranularityIndex", st: ServedState) -> None:
        if self.kv is not None:
            self.kv.save_written(lambda folder: self.write_folder(index, st, folder), STORE_CLASS, self.vector_store)

    def describe(self) -> str:
        kv = f", kvstore {self.kv.describe()}" if self.kv is not None else ""
        bm25 = ("pg_textsearch bm25 indexes" if self.bm25_lists == TEXTSEARCH else
                f"postings tables ({ENABLE_HINT})")
        return (f"served from the store: vector store {describe_store(self.vector_store)}, "
                f"docstore {describe_store(self.docstore)}{kv}, BM25 lists from {bm25}")

    # ---- build and reopen ---------------------------------------------------------------
    @classmethod
    def for_build(cls, storage_context: Any, embed_model: Optional[BaseEmbedding], kvstore: Any,
                  namespace: Optional[str], ann: Optional[HNSW] = None) -> Tuple["ServedBackend", BaseEmbedding]:
        """Check the stores are reachable, empty and of the embedder's dimension before anything is
        embedded: the backend of a new index served from ``storage_context``'s ``PGVectorStore``."""
        owner = f"{OWNER}.from_documents"
        HNSW.check_arg(ann, owner)
        vector_store, docstore, model, dim, kv = open_for_build(storage_context, embed_model, kvstore, namespace,
                                                               owner, REOPEN)
        ServedTables(vector_store, (), dim, ann)  # names PostgreSQL can hold, checked before any embedding
        return cls(vector_store, docstore, dim, kv=kv, ann=ann), model

    # ---- reopen -------------------------------------------------------------------------
    @classmethod
    def open(cls, index_cls: Type["MultiGranularityIndex"], params: Dict[str, Any], where: str,
             vector_store: BasePydanticVectorStore, docstore: BaseDocumentStore, model: BaseEmbedding,
             kv: Optional[KVState], ann: Optional[HNSW]) -> "MultiGranularityIndex":
        """The index whose parameters are ``params``: the layout checked (one catalog query), nothing read per unit."""
        backend = cls(vector_store, docstore, int(params["embed_dim"]), kv=kv,
                      ann=HNSW.for_reopen(ann, params, REOPEN, where), row_ids=RowIds.from_params(params))
        backend.bm25_lists = params.get("bm25_lists", POSTINGS)
        backend.k1_b = bm25_k1_b(params.get("bm25_params") or {})
        tables = backend.tables_for(params["granularities"])
        backend.check_bm25_lists(tables, where)
        missing = tables.missing()
        if missing == [tables.gen]:  # served before queries checked the write counter: add it, once
            logger.info("%s: adding the write counter %s to the served lists (once).", REOPEN, tables.gen)
            tables.create()
            missing = tables.missing()
        if missing:
            raise ValueError(
                f"{REOPEN}: {tables.describe()} lack {', '.join(missing)}; the index in {where} was served from them. "
                "Pass the vector store it was built into, or rebuild it."
            )
        tables.check_ann()
        if isinstance(tables, TextSearchTables):
            tables.check_bm25()
        return index_cls._served(backend, ServedState(params["granularities"], docstore), model, params)

    def check_bm25_lists(self, tables: ServedTables, where: str) -> None:
        """At open, one log line: what serves the BM25 lists, and how to get the faster one; an
        index built on pg_textsearch whose server lost it is refused here (never at a query)."""
        usable, why = textsearch_status(tables)
        if self.bm25_lists == TEXTSEARCH and not usable:
            raise ValueError(f"{REOPEN}: the index in {where} was built with pg_textsearch bm25 indexes, but {why}; "
                             "add pg_textsearch to shared_preload_libraries and restart the server, or rebuild the "
                             "index (without the extension it is served from postings tables).")
        if self.bm25_lists == TEXTSEARCH:
            logger.info("%s: BM25 lists from pg_textsearch bm25 indexes (%s).", REOPEN, why)
        elif usable:
            logger.info("%s: BM25 lists from postings tables: the index was built without pg_textsearch (%s is "
                        "here now); rebuild it for top-k pruned BM25 lists.", REOPEN, why)
        else:
            logger.info("%s: BM25 lists from postings tables (%s); %s.", REOPEN, why, ENABLE_HINT)


__all__ = ["ServedBackend", "ServedSource", "ServedState"]
