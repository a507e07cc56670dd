"""A :class:`MultiGranularityIndex` on LlamaIndex's stores: :class:`StoreBackend`, one for every store.

Units and their embeddings go to a vector store, units to a docstore, the build parameters (and
what the layout keeps beside the store) to a ``BaseKVStore`` (:mod:`~llama_index_ext_causalrag.storage.kvstate`)
when the index is built with ``kvstore=``, or to the folder ``persist(dir)`` writes. What differs
between stores is asked of the store's driver (:mod:`~llama_index_ext_causalrag.storage.drivers`):
the layout a new index gets (:mod:`.layout`), the lists it serves, bulk writes and the one commit
point of an update. :meth:`StoreBackend.open` reopens an index from the stores without embedding
anything; the layout name it recorded finds the driver.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core import StorageContext
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.multigranularity.backend import MemoryBackend, MGBackend
from llama_index_ext_causalrag.multigranularity.layout import StoreLayout
from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.served import ServedLayout, ServedState
from llama_index_ext_causalrag.multigranularity.served_source import bm25_k1_b
from llama_index_ext_causalrag.multigranularity.state import MGChange
from llama_index_ext_causalrag.multigranularity.store_experts import Lexical, check_lexical
from llama_index_ext_causalrag.multigranularity.units_layout import UNIT_IDS_FILE, UnitsLayout, open_layout
from llama_index_ext_causalrag.storage.ann import ANN, HNSW
from llama_index_ext_causalrag.storage.drivers import FILTERED, BM25Scores, StoreDriver, driver_for, driver_for_layout
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.persistence import PersistedIndex, check_embedder, embedder_params, persist_to
from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
from llama_index_ext_causalrag.storage.stores import check_holds, check_vector_store, describe_store, get_nodes_at_once
from llama_index_ext_causalrag.storage.sync import check_generation, open_for_build, replace_in_stores, write_new_index

OWNER = "MultiGranularityIndex"
REOPEN = "MultiGranularityIndex.from_vector_store"
STORE_CLASS = "MultiGranularityIndex@store"
HINT_DIR = "index.persist(dir) on an index built with storage_context="
HINT_KV = "MultiGranularityIndex.from_documents(docs, storage_context=..., kvstore=...)"
Opened = Tuple[MGParams, "StoreBackend", Any]  # what opening gives the index: parameters, backend, state


class StoreBackend(MGBackend):
    """Units in a vector store and a docstore, served in the layout (``serving``) the store's driver chose."""

    kind: ClassVar[str] = "stores"

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        dim: int,
        row_ids: RowIds,
        serving: StoreLayout,
        kv: Optional[KVState] = None,
        ann: Optional[ANN] = None,
        driver: Optional[StoreDriver] = None,
    ) -> None:
        self.vector_store, self.docstore, self.dim, self.row_ids = vector_store, docstore, dim, row_ids
        self.serving, self.kv, self.ann = serving, kv, ann
        self.driver = driver if driver is not None else driver_for(vector_store)

    # ---- what tests, tools and messages read ------------------------------------------------
    @property
    def layout(self) -> str:
        """The layout's name, as ``params.json`` records it."""
        return self.serving.name

    @property
    def lexical(self) -> str:
        return self.serving.lexical

    @property
    def tables(self) -> Any:
        """The lists object of the store (None: lists by filtered queries)."""
        return self.serving.tables

    @property
    def bm25_lists(self) -> Optional[str]:
        """What serves the BM25 lists of a served index (None where the layout says nothing)."""
        return getattr(self.serving.tables, "bm25_lists", None)

    @property
    def cache(self) -> Any:
        return getattr(self.serving, "cache", None)

    def tables_for(self, granularities: Sequence[int]) -> Any:
        """The served lists of ``granularities`` (a served layout only)."""
        if not isinstance(self.serving, ServedLayout):
            raise ValueError(f"{OWNER}: the layout {self.layout!r} keeps its units in the process; it serves no lists.")
        return self.serving.tables_for(self, granularities)

    @property
    def needs_tokens(self) -> bool:
        return self.serving.needs_tokens

    # ---- state and retrieval ------------------------------------------------------------------
    def make_state(
        self,
        params: MGParams,
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> Any:
        return self.serving.make_state(self, params, units, tokens, bm25)

    def embed_dim(self, state: Any) -> int:
        return self.dim

    def fusion_retriever(
        self,
        params: MGParams,
        state: Any,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        return self.serving.fusion_retriever(self, params, state, expert_names, granularities, **kwargs)

    def known_docs(self, state: Any, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        return self.serving.known_docs(self, state, doc_ids)

    def next_state(self, params: MGParams, old: Any, change: MGChange) -> Any:
        return self.serving.next_state(self, params, old, change)

    # ---- writes -------------------------------------------------------------------------------
    def write(self, params: MGParams, state: Any, embeddings: Optional[np.ndarray] = None) -> None:
        """Units to the docstore, their rows (with ``embeddings``) to the vector store, the state
        to the kvstore (all undone if a write fails)."""
        nodes, rows = self.serving.to_write(self, params, state)

        def save() -> None:
            self.serving.finish_write(state)
            self.save_state(params, state)

        write_new_index(
            self.vector_store,
            self.docstore,
            nodes,
            rows,
            embeddings,  # type: ignore[arg-type]
            save,
            self.row_ids,
            kv=self.kv,
        )

    def commit(
        self,
        params: MGParams,
        old: Any,
        new: Any,
        change: Optional[MGChange] = None,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """The units of the documents ``change`` replaces or drops leave the vector store and
        docstore, its new units (with their embeddings) enter them, then the new state goes to
        ``persist_dir`` and the kvstore, whose head is the commit point (one transaction with the
        rows where the driver offers it); on a failure the stores are put back."""
        if change is None:
            raise ValueError(f"{type(self).__name__}.commit needs the change (units, embeddings, dropped documents).")
        gone, gone_rows, new_rows = self.serving.replaced(self, params, old, change)

        def write_state() -> None:
            if persist_dir is not None:
                self.write_folder(params, new, persist_dir)
            self.save_state(params, new)  # last: one put of the head makes the new state visible

        try:
            replace_in_stores(
                self.vector_store,
                self.docstore,
                gone_rows,
                new_rows,
                change.embeddings,
                gone,
                change.units,
                write_state,
                self.row_ids,
                kv=self.kv,
            )
        except Exception:
            self.serving.after_update(bool(new_rows), bool(gone), failed=True)
            raise
        self.serving.after_update(bool(new_rows), bool(gone), failed=False)

    def persist(self, params: MGParams, state: Any, persist_dir: "str | Path") -> None:
        """What the stores do not hold: the layout's files and the parameters."""
        self.write_folder(params, state, persist_dir)

    def write_folder(self, params: MGParams, state: Any, persist_dir: "str | Path") -> None:
        with persist_to(persist_dir, STORE_CLASS) as w:
            self.serving.write_folder(self, state, w)
            w.params.update(
                store_layout=self.layout,
                ann=self.ann.params() if self.ann is not None else None,
                **self.serving.params(),
                **params.saved(list(state.by_g)),
                vector_store=describe_store(self.vector_store),
                **embedder_params(params.embed_model, self.dim),
            )
            w.params.update(self.row_ids.params())
            if params.built_with is not None:  # reopened with another (same-dimension) query model
                w.params["embed_model"] = params.built_with

    def save_state(self, params: MGParams, state: Any) -> None:
        """Write ``state`` to the index's kvstore, if it has one (the folder, value by value)."""
        if self.kv is not None:
            self.kv.save_written(
                lambda folder: self.write_folder(params, state, folder), STORE_CLASS, self.vector_store
            )

    def upgrade(self, params: MGParams, state: Any, ann: Optional[ANN] = None) -> None:
        """Add the per-granularity tables (filled from the vector store's rows) to an index served
        by filtered queries, and serve its dense lists from them (one writer at a time, and only
        on the index as this object read it)."""
        if not isinstance(self.serving, UnitsLayout):
            raise ValueError(
                f"{OWNER}.upgrade_store: the index is served by {self.layout!r} lists; nothing to upgrade."
            )
        lock = self.kv.write_lock() if self.kv is not None else None
        if lock is not None:
            self.kv.acquire(lock)  # type: ignore[union-attr]
        try:
            if self.kv is not None:
                check_generation(self.kv, build=False)
            self.serving.upgrade(self, params, state, ann)
            self.save_state(params, state)
        finally:
            if lock is not None:
                lock.release()

    def describe_kv(self) -> str:
        return f", kvstore {self.kv.describe()}" if self.kv is not None else ""

    def describe(self) -> str:
        return self.serving.describe(self)

    # ---- build and reopen ---------------------------------------------------------------------
    @classmethod
    def for_build(
        cls,
        storage_context: StorageContext,
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
        lexical: str,
        ann: Optional[ANN],
        bm25_params: Dict[str, Any],
    ) -> Tuple["StoreBackend", BaseEmbedding]:
        """Check the stores are reachable, empty and of the embedder's dimension (and, for
        ``lexical="store"``, have full-text search) before anything is embedded: the backend of a
        new index, in the layout the store's driver chooses, and the embed model to build with."""
        HNSW.check_arg(ann)
        check_choice(lexical, "lexical", Lexical)  # before any store is touched; full-text search below
        driver = driver_for(storage_context.vector_store)
        stores = SimpleNamespace(
            vector_store=driver.units_store(storage_context.vector_store), docstore=storage_context.docstore
        )
        vector_store, docstore, model, dim, kv = open_for_build(stores, embed_model, kvstore, namespace, REOPEN)
        layout = driver.new_layout(vector_store, lexical, dim, ann)
        check_lexical(lexical, vector_store)
        serving: StoreLayout = (
            ServedLayout(driver, layout, bm25_k1_b(bm25_params))
            if layout in driver.served_layouts
            else UnitsLayout(driver, layout, lexical)
        )
        row_ids = RowIds(NODE_ID) if driver.node_id_rows else RowIds.for_new_index()
        return cls(vector_store, docstore, dim, row_ids, serving, kv=kv, ann=ann, driver=driver), model

    @classmethod
    def open(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: "Optional[str | Path]" = None,
        embed_model: Optional[BaseEmbedding] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        lexical: Optional[str] = None,
        ann: Optional[ANN] = None,
        bm25_scores: Optional[str] = None,
    ) -> Opened:
        """Reopen an index built with ``from_documents(docs, storage_context=...)``: its state from
        ``kvstore`` (the one it was built with) or ``persist_dir`` (written by ``index.persist``);
        ``embed_model`` only embeds queries; ``lexical`` (by default the build's) as in
        :meth:`for_build`; ``ann`` (by default the build's) may change ``ef_search`` only;
        ``bm25_scores``: how a served index's top-k pruned BM25 lists are scored (None: the driver's default)."""
        if lexical is not None:  # None: the build's; full-text search is checked where the layout needs it
            check_choice(lexical, "lexical", Lexical)
        if bm25_scores is not None:
            check_choice(bm25_scores, "bm25_scores", BM25Scores)
        HNSW.check_arg(ann)
        vector_store = driver_for(vector_store).units_store(vector_store)
        return open_index_state(
            persist_dir,
            kvstore,
            namespace,
            vector_store,
            STORE_CLASS,
            HINT_DIR,
            HINT_KV,
            lambda persisted, where, kv: cls._open(
                persisted, where, vector_store, docstore, embed_model, kv, lexical, ann, bm25_scores
            ),
            docstore=docstore,
        )

    @classmethod
    def _open(
        cls,
        persisted: PersistedIndex,
        where: str,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        embed_model: Optional[BaseEmbedding],
        kv: Optional[KVState],
        lexical: Optional[str] = None,
        ann: Optional[ANN] = None,
        bm25_scores: Optional[str] = None,
    ) -> Opened:
        p = persisted.params
        built = p.get("lexical", "bm25")  # an index written before the option: bm25s
        lexical = lexical or built
        if lexical == "bm25" and built != "bm25":
            raise ValueError(
                f"{REOPEN}: the index in {where} was built with lexical={built!r} and stores no BM25; reopen it with "
                "lexical='store' (or None), or rebuild with lexical='bm25'."
            )
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, where)  # type: ignore[arg-type]
        params, dim = MGParams.from_saved(p, model), int(p["embed_dim"])
        driver = driver_for_layout(p.get("store_layout") or FILTERED)
        if p.get("store_layout") in driver.served_layouts:  # every list in the store: nothing read per unit
            return cls._open_served(driver, p, params, where, vector_store, docstore, kv, ann, bm25_scores)
        check_vector_store(vector_store, dim, built_in=str(where))
        check_lexical(lexical, vector_store)
        ids = persisted.json(UNIT_IDS_FILE)
        persisted.check_rows("units", len(ids))
        row_ids = RowIds.from_params(p)
        check_holds(vector_store, dim, ids, row_ids)
        serving, ann = open_layout(driver_for(vector_store), vector_store, p, dim, ann, lexical, where)
        try:  # the layout is refused before the units are read
            units = get_nodes_at_once(docstore, ids)
        except ValueError as e:
            raise ValueError(
                f"{REOPEN}: the docstore lacks units of the index in {where} ({e}); pass its docstore."
            ) from e
        bm25 = _load_bm25(persisted, p["granularities"]) if lexical == "bm25" else None
        backend = cls(vector_store, docstore, dim, row_ids, serving, kv=kv, ann=ann)
        return params, backend, backend.make_state(params, list(units), None, None, bm25)

    @classmethod
    def _open_served(
        cls,
        driver: StoreDriver,
        p: Dict[str, Any],
        params: MGParams,
        where: str,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        kv: Optional[KVState],
        ann: Optional[ANN],
        bm25_scores: Optional[str] = None,
    ) -> Opened:
        """The index whose parameters are ``p``: its lists checked (one catalog query), nothing read per unit."""
        ann = HNSW.for_reopen(ann, p, where)
        serving = ServedLayout(driver, p["store_layout"], bm25_k1_b(params.bm25_params), saved=p, scores=bm25_scores)
        backend = cls(
            vector_store, docstore, int(p["embed_dim"]), RowIds.from_params(p), serving, kv=kv, ann=ann, driver=driver
        )
        backend.tables_for(p["granularities"]).check_open(where)
        return params, backend, ServedState(p["granularities"], docstore)


def _load_bm25(persisted: PersistedIndex, granularities: Sequence[int]) -> Dict[int, Any]:
    import bm25s

    return {
        g: bm25s.BM25.load(persisted.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
        for g in granularities
    }


def backend_for_build(
    storage_context: Optional[StorageContext],
    embed_model: Optional[BaseEmbedding],
    kvstore: Optional[BaseKVStore],
    namespace: Optional[str],
    lexical: str,
    ann: Optional[ANN] = None,
    bm25_params: Optional[Dict[str, Any]] = None,
) -> Tuple[MGBackend, Optional[BaseEmbedding]]:
    """The backend ``from_documents`` builds into (the stores of ``storage_context``, else
    memory) and the embed model to build with."""
    if storage_context is not None:
        return StoreBackend.for_build(storage_context, embed_model, kvstore, namespace, lexical, ann, bm25_params or {})
    if ann is not None:
        raise ValueError(
            f"ann={ann!r} builds approximate indexes in PostgreSQL or Milvus (an in-memory index searches exactly); "
            "drop ann=, or pass storage_context= with a PGVectorStore or MilvusVectorStore too."
        )
    if kvstore is not None or namespace is not None:
        raise ValueError(
            "kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too."
        )
    if lexical != "bm25":
        raise ValueError(
            f"lexical={lexical!r} needs an index built into stores; pass storage_context= with a vector store "
            "that has full-text search, or leave lexical='bm25' (the in-memory index always uses bm25s)."
        )
    return MemoryBackend(), embed_model


__all__ = ["StoreBackend", "backend_for_build"]
