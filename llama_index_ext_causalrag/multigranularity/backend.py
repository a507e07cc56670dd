"""Where a :class:`MultiGranularityIndex` keeps its units: in memory, or on LlamaIndex's stores.

The index holds one backend and calls its verbs; it never asks which kind it is.

* :class:`MemoryBackend`: units, embeddings and BM25 in the process, persisted as one folder
  (``units.json``, ``embeddings.npy``, ``bm25/g{g}/``, ``tokens.json``, ``params.json``);
* :class:`StoresBackend`: units and embeddings in a vector store (granularity as metadata), units
  in a docstore; the dense lists from one table per granularity beside a ``PGVectorStore``'s
  table (:mod:`~llama_index_ext_causalrag.storage.pg.lists`, layout ``"granularity_tables"``), or
  from queries of the vector store filtered on the granularity (layout ``"filtered"``: any other
  store, and tables written by earlier versions until ``index.upgrade_store()``); the BM25 indexes
  (``lexical="bm25"``), the unit order and the build parameters are one folder, kept in a
  ``BaseKVStore`` (:mod:`llama_index_ext_causalrag.storage.kvstate`) when the index is built
  with ``kvstore=``, or written by ``persist(dir)``. :meth:`StoresBackend.open` reopens the index
  from the stores (and the folder) without embedding anything.

Both make the index's :class:`MGState` (:meth:`MGBackend.make_state`), make the fusion retriever
over its experts, and :meth:`~MGBackend.commit` an update's new state before the index swaps it in.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np
from llama_index.core import StorageContext
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts._nodes_io import load_nodes, save_nodes
from llama_index_ext_causalrag.multigranularity.lists import GranularityListExpert
from llama_index_ext_causalrag.multigranularity.presets import DEFAULT_PRESET, load_preset
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.milvus import MilvusBackend
from llama_index_ext_causalrag.multigranularity.served import REOPEN, ServedBackend
from llama_index_ext_causalrag.multigranularity.state import MGChange, MGState, index_params
from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity
from llama_index_ext_causalrag.multigranularity.store import (
    LEXICAL,
    check_lexical,
    dense_experts,
    fusion_over_store,
    text_experts,
)
from llama_index_ext_causalrag.storage import updates as up
from llama_index_ext_causalrag.storage.backend import IndexBackend
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.ann import HNSW
from llama_index_ext_causalrag.storage.pg.lists import GranularityTables, supports_lists
from llama_index_ext_causalrag.storage.milvus.served import MILVUS
from llama_index_ext_causalrag.storage.milvus.store import is_milvus, milvus_units
from llama_index_ext_causalrag.storage.pg.served import SERVED
from llama_index_ext_causalrag.storage.persistence import (
    PersistedIndex,
    array_dim,
    check_embedder,
    embedder_params,
    open_persisted,
    persist_to,
)
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import check_holds, check_vector_store, describe_store, get_nodes_at_once
from llama_index_ext_causalrag.storage.sync import check_generation, open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

logger = logging.getLogger(__name__)

OWNER = "MultiGranularityIndex"
TABLES, FILTERED = "granularity_tables", "filtered"  # how a store-backed index's dense lists are served
STORE_CLASS = "MultiGranularityIndex@store"
UNIT_IDS_FILE = "unit_ids.json"
HINT_DIR = "index.persist(dir) on an index built with storage_context="
HINT_KV = "MultiGranularityIndex.from_documents(docs, storage_context=..., kvstore=...)"


class MGBackend(IndexBackend):
    """The storage verbs of a :class:`MultiGranularityIndex`, beyond :class:`IndexBackend`'s."""

    @property
    def needs_tokens(self) -> bool:
        """Whether the index keeps per-unit BM25 tokens (its sparse experts are bm25s)."""
        return True

    @abstractmethod
    def make_state(
        self,
        index: "MultiGranularityIndex",
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> MGState:
        """The state of ``units`` with their experts (``bm25``: loaded BM25 indexes by granularity)."""

    @abstractmethod
    def embed_dim(self, state: MGState) -> int:
        """The dimension of the embeddings the index holds."""

    @abstractmethod
    def next_embeddings(self, old: MGState, plan: Sequence[up.Source], new_emb: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """The embeddings of an update's merged units (``plan``), as :meth:`make_state` takes them."""

    @abstractmethod
    def fusion(self, experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
        """The fusion retriever over ``experts`` (``kwargs`` as :class:`EntropyFusionRetriever`'s)."""

    def fusion_retriever(self, index: "MultiGranularityIndex", state: MGState, expert_names: Sequence[str],
                         granularities: Optional[Sequence[int]], **kwargs: Any) -> EntropyFusionRetriever:
        """Fusion of ``expert_names`` x ``granularities`` (None: all) of ``state``."""
        return self.fusion(index.experts(expert_names, granularities, _state=state), **kwargs)

    def known_docs(self, state: MGState, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        """The indexed documents among ``doc_ids`` -> the source hash their units recorded."""
        known = up.known_docs(state.units)
        return {d: known[d] for d in doc_ids if d in known}

    def next_state(self, index: "MultiGranularityIndex", old: MGState, change: MGChange) -> MGState:
        """The state after ``change``: old units in order (replaced or dropped by document), new ones appended."""
        plan = up.merge_plan(old.units, change.units, change.drop)
        if not plan:
            raise up.cannot_empty(type(index).__name__, ", ".join(change.drop))
        dim = self.embed_dim(old)
        if change.units and change.embeddings is not None and change.embeddings.shape[1] != dim:
            raise ValueError(
                f"{type(index).__name__} holds {dim}-dimensional embeddings, the new "
                f"units have {change.embeddings.shape[1]}; embed them with the index's model."
            )
        tokens = up.pick(plan, index._tokens_of_state(), change.tokens) if self.needs_tokens else None
        return self.make_state(index, up.pick(plan, old.units, change.units),
                               self.next_embeddings(old, plan, change.embeddings), tokens)

    def write(self, index: "MultiGranularityIndex", state: MGState, embeddings: Optional[np.ndarray] = None) -> None:
        """Store what a build produced; ``embeddings``: the units' vectors, when the state does not hold them."""


class MemoryBackend(MGBackend):
    """Everything in the process; ``persist`` writes the whole index as one folder."""

    kind: ClassVar[str] = "memory"

    def make_state(
        self,
        index: "MultiGranularityIndex",
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> MGState:
        return MGState(units, embeddings, tokens, index._embed_model, index.bm25_params, bm25)  # type: ignore[arg-type]

    def embed_dim(self, state: MGState) -> int:
        return int(state.embeddings.shape[1])

    def next_embeddings(self, old: MGState, plan: Sequence[up.Source], new_emb: Optional[np.ndarray]) -> np.ndarray:
        rows = [old.embeddings[i] if side == "old" else new_emb[i] for side, i in plan]  # type: ignore[index]
        return np.stack(rows).astype(np.float32)

    def fusion(self, experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
        return EntropyFusionRetriever(experts, **kwargs)

    def commit(self, index: "MultiGranularityIndex", old: MGState, new: MGState, change: Optional[MGChange] = None,
               persist_dir: "Optional[str | Path]" = None) -> None:
        """With ``persist_dir`` the new state is written there (a folder swap: the old folder stays on failure)."""
        if persist_dir is not None:
            self.persist_state(index, new, persist_dir)

    def persist(self, index: "MultiGranularityIndex", persist_dir: "str | Path") -> None:
        self.persist_state(index, index._state, persist_dir)

    def persist_state(self, index: "MultiGranularityIndex", st: MGState, persist_dir: "str | Path") -> None:
        """``units.json``, ``embeddings.npy``, ``bm25/g{g}/``, ``tokens.json``, ``params.json`` of ``st``."""
        with persist_to(persist_dir, OWNER) as w:
            save_nodes(st.units, w.dir / "units.json")
            w.save_array("embeddings.npy", st.embeddings)
            for g, expert in st.sparse.items():
                expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
            if st.tokens is not None:
                w.write_json("tokens.json", st.tokens, ensure_ascii=False)
            w.rows["units"] = len(st.units)
            w.params.update(
                **index_params(index, list(st.by_g)), **embedder_params(index._embed_model, array_dim(st.embeddings))
            )

    def describe(self) -> str:
        return "in memory"

    @classmethod
    def open(
        cls, index_cls: Type["MultiGranularityIndex"], persist_dir: "str | Path", embed_model: Optional[BaseEmbedding]
    ) -> "MultiGranularityIndex":
        """The index ``persist`` wrote to ``persist_dir``, without re-embedding or re-indexing."""
        import bm25s

        ix = open_persisted(persist_dir, OWNER, "index.persist(dir)")
        p = ix.params
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, ix.dir, OWNER)
        bm25 = {
            g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
            for g in p["granularities"]
        }
        units = load_nodes(ix.path("units.json"))
        ix.check_rows("units", len(units))
        tokens = ix.json("tokens.json") if ix.has("tokens.json") else None
        index = index_cls(
            units,
            ix.array("embeddings.npy"),
            embed_model=model,
            parent_granularity=p["parent_granularity"],
            embedding_mode=p["embedding_mode"],
            bm25_params=p["bm25_params"],
            _bm25=bm25,
            preset=load_preset(p.get("preset", DEFAULT_PRESET)),
            _tokens=tokens,
            _backend=cls(),
        )
        index._built_with = p.get("embed_model")
        return index


class StoresBackend(MGBackend):
    """Units and embeddings in a vector store, units in a docstore, the rest in a kvstore or folder."""

    kind: ClassVar[str] = "stores"

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        dim: int,
        row_ids: RowIds,
        kv: Optional[KVState] = None,
        lexical: str = "bm25",
        layout: str = FILTERED,
        ann: Optional[HNSW] = None,
        tables: Optional[GranularityTables] = None,
    ) -> None:
        self.vector_store, self.docstore, self.dim = vector_store, docstore, dim
        self.row_ids, self.kv, self.lexical = row_ids, kv, lexical
        self.layout, self.ann, self.tables = layout, ann, tables

    @property
    def needs_tokens(self) -> bool:
        return self.lexical == "bm25"

    # ---- state and retrieval --------------------------------------------------------------
    def make_state(
        self,
        index: "MultiGranularityIndex",
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> MGState:
        """Dense experts are queries of the per-granularity tables, or of the vector store filtered
        on the granularity (``embeddings`` stay there); the sparse ones bm25s or (``lexical="store"``)
        its full-text search. Parents come from ``units`` (in memory), not from the docstore."""
        model = index._embed_model
        sparse = text_experts(self.vector_store, self.docstore, units, self.row_ids) if self.lexical == "store" else None
        return MGState(units, np.zeros((len(units), 0), dtype=np.float32), tokens, model, index.bm25_params, bm25,
                       dense=self.dense_experts(model, units), sparse=sparse)

    def dense_experts(self, model: BaseEmbedding, units: List[BaseNode]) -> Dict[int, Any]:
        if self.layout != TABLES:
            return dense_experts(self.vector_store, self.docstore, model, units, self.row_ids)
        granularities = units_by_granularity(units)
        if self.tables is None:
            self.tables = GranularityTables(self.vector_store, granularities, self.dim, self.ann)
        by_id = {u.node_id: u for u in units}
        row_ids = self.row_ids.with_nodes(by_id)
        return {g: GranularityListExpert(self.tables, g, model, by_id, row_ids) for g in granularities}

    def upgrade(self, index: "MultiGranularityIndex", ann: Optional[HNSW] = None) -> None:
        """Add the per-granularity tables (filled from the vector store's rows) to an index served
        by filtered queries, and serve its dense lists from them."""
        if not supports_lists(self.vector_store):
            raise ValueError(
                f"{OWNER}.upgrade_store: per-granularity tables need a PGVectorStore on psycopg2, got "
                f"{describe_store(self.vector_store)}."
            )
        lock = self.kv.write_lock() if self.kv is not None else None
        if lock is not None:  # one writer at a time, and only on the index as this object read it
            self.kv.acquire(lock)  # type: ignore[union-attr]
        try:
            if self.kv is not None:
                check_generation(self.kv, f"{OWNER}.upgrade_store", build=False)
            st = index._state
            tables = GranularityTables(self.vector_store, st.by_g, self.dim, ann if ann is not None else self.ann)
            tables.create(backfill=True)  # one transaction: all of the layout or none
            tables.build_ann()
            self.tables, self.layout, self.ann = tables, TABLES, tables.ann
            st.dense = self.dense_experts(index._embed_model, st.units)
            self.save_state(index, st)
        finally:
            if lock is not None:
                lock.release()

    def embed_dim(self, state: MGState) -> int:
        return self.dim

    def next_embeddings(self, old: MGState, plan: Sequence[up.Source], new_emb: Optional[np.ndarray]) -> None:
        return None  # in the vector store

    def fusion(self, experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
        return fusion_over_store(experts, **kwargs)

    # ---- writes ---------------------------------------------------------------------------
    def write(self, index: "MultiGranularityIndex", state: MGState, embeddings: Optional[np.ndarray] = None) -> None:
        """Units to the docstore, units + ``embeddings`` to the vector store, the rest to the
        kvstore (all undone if a write fails)."""
        if self.tables is not None:  # before the rows, so that the triggers fill the lists as they arrive
            self.tables.drop_if_table_empty()
            self.tables.create()

        def save() -> None:
            if self.tables is not None:
                self.tables.build_ann()
            self.save_state(index, state)

        write_new_index(self.vector_store, self.docstore, state.units, state.units, embeddings,  # type: ignore[arg-type]
                        f"{OWNER}.from_documents", save, self.row_ids, kv=self.kv)

    def commit(self, index: "MultiGranularityIndex", old: MGState, new: MGState, change: Optional[MGChange] = None,
               persist_dir: "Optional[str | Path]" = None) -> None:
        """The units of the documents ``change`` replaces or drops leave the vector store and
        docstore, its new units (with their embeddings) enter them, then the new state goes to
        ``persist_dir`` and the kvstore; on a failure the stores are put back."""
        if change is None:
            raise ValueError(f"{type(self).__name__}.commit needs the change (units, embeddings, dropped documents).")
        name = type(index).__name__
        affected = {up.doc_key(u) for u in change.units} | set(change.drop)
        gone = [u for u in old.units if up.doc_key(u) in affected]

        def write_state() -> None:
            if persist_dir is not None:
                self.write_folder(index, new, persist_dir)
            self.save_state(index, new)  # last: one put of the head makes the new state visible

        replace_in_stores(self.vector_store, self.docstore, f"{name} update", gone, change.units, change.embeddings,
                          gone, change.units, write_state, self.row_ids, kv=self.kv)

    def persist(self, index: "MultiGranularityIndex", persist_dir: "str | Path") -> None:
        """BM25, unit order and parameters only (the stores hold the rest)."""
        self.write_folder(index, index._state, persist_dir)

    def write_folder(self, index: "MultiGranularityIndex", st: MGState, persist_dir: "str | Path") -> None:
        """``bm25/g{g}/`` (``lexical="bm25"`` only), ``unit_ids.json`` and ``params.json`` of state
        ``st`` (the embeddings are in the vector store, the units in the docstore)."""
        with persist_to(persist_dir, STORE_CLASS) as w:
            w.write_json(UNIT_IDS_FILE, [u.node_id for u in st.units])
            for g, expert in st.sparse.items() if self.lexical == "bm25" else ():
                expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
            w.rows["units"] = len(st.units)
            w.params.update(
                lexical=self.lexical,
                store_layout=self.layout,
                ann=self.ann.params() if self.ann is not None else None,
                **index_params(index, list(st.by_g)),
                vector_store=describe_store(self.vector_store),
                **embedder_params(index._embed_model, self.dim),
            )
            w.params.update(self.row_ids.params())
            if index._built_with is not None:  # reopened with another (same-dimension) query model
                w.params["embed_model"] = index._built_with

    def save_state(self, index: "MultiGranularityIndex", st: MGState) -> None:
        """Write state ``st`` to the index's kvstore, if it has one (the folder, value by value)."""
        if self.kv is not None:
            self.kv.save_written(lambda folder: self.write_folder(index, st, folder), STORE_CLASS, self.vector_store)

    def describe(self) -> str:
        kv = f", kvstore {self.kv.describe()}" if self.kv is not None else ""
        return f"vector store {describe_store(self.vector_store)}, docstore {describe_store(self.docstore)}{kv}"

    # ---- build and reopen -----------------------------------------------------------------
    @classmethod
    def for_build(
        cls,
        storage_context: StorageContext,
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
        lexical: str,
        ann: Optional[HNSW] = None,
    ) -> Tuple["StoresBackend", BaseEmbedding]:
        """Check the stores are reachable, empty and of the embedder's dimension (and, for
        ``lexical="store"``, have full-text search) before anything is embedded: the backend of a
        new index and the embed model to build it with. A ``PGVectorStore`` gets per-granularity
        tables (with ``ann``: an HNSW index each); any other store, filtered queries."""
        owner = f"{OWNER}.from_documents"
        HNSW.check_arg(ann, owner)
        vector_store, docstore, model, dim, kv = open_for_build(storage_context, embed_model, kvstore, namespace,
                                                               owner, REOPEN)
        check_lexical(lexical, vector_store, owner)
        layout = TABLES if supports_lists(vector_store) else FILTERED
        if layout == TABLES:
            GranularityTables(vector_store, (), dim, ann)  # names PostgreSQL can hold, checked before any embedding
        if ann is not None and layout != TABLES:
            raise ValueError(
                f"{owner}: ann= builds HNSW indexes on PostgreSQL tables; the vector store is "
                f"{describe_store(vector_store)}. Drop ann= (its own search serves the lists), or use a PGVectorStore."
            )
        return cls(vector_store, docstore, dim, RowIds.for_new_index(), kv=kv, lexical=lexical, layout=layout,
                   ann=ann), model

    @classmethod
    def open(
        cls,
        index_cls: Type["MultiGranularityIndex"],
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: "Optional[str | Path]" = None,
        embed_model: Optional[BaseEmbedding] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        lexical: Optional[str] = None,
        ann: Optional[HNSW] = None,
    ) -> "MultiGranularityIndex":
        """Reopen an index built with ``from_documents(docs, storage_context=...)``: units from
        ``docstore``, embeddings stay in ``vector_store``, the rest from ``kvstore`` (the one it was
        built with) or from ``persist_dir`` (written by ``index.persist``); ``embed_model`` only
        embeds queries; ``lexical`` (by default the build's) as in :meth:`for_build`; ``ann`` (by
        default the build's) may change ``ef_search`` only."""
        if lexical is not None and lexical not in LEXICAL:
            raise ValueError(f"{REOPEN}: lexical must be one of {LEXICAL} or None (the build's), got {lexical!r}.")
        HNSW.check_arg(ann, REOPEN)
        vector_store = milvus_units(vector_store)
        return open_index_state(
            REOPEN, persist_dir, kvstore, namespace, vector_store, STORE_CLASS, HINT_DIR, HINT_KV,
            lambda ix, where, kv: cls._open(index_cls, ix, where, vector_store, docstore, embed_model, kv, lexical, ann),
            docstore=docstore,
        )

    @classmethod
    def _open(
        cls,
        index_cls: Type["MultiGranularityIndex"],
        ix: PersistedIndex,
        where: str,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        embed_model: Optional[BaseEmbedding],
        kv: Optional[KVState],
        lexical: Optional[str] = None,
        ann: Optional[HNSW] = None,
    ) -> "MultiGranularityIndex":
        import bm25s

        owner = REOPEN
        p = ix.params
        built = p.get("lexical", "bm25")  # an index written before the option: bm25s
        lexical = lexical or built
        if lexical == "bm25" and built != "bm25":
            raise ValueError(
                f"{owner}: the index in {where} was built with lexical={built!r} and stores no BM25; reopen it with "
                "lexical='store' (or None), or rebuild with lexical='bm25'."
            )
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, where, OWNER)  # type: ignore[arg-type]
        dim = int(p["embed_dim"])
        if p.get("store_layout") == MILVUS:  # every list answered by Milvus: nothing read per unit
            return MilvusBackend.open(index_cls, p, where, vector_store, docstore, model, kv, ann)
        if p.get("store_layout") == SERVED:  # everything in the store: nothing read per unit
            check_vector_store(vector_store, dim, owner, built_in=str(where))
            return ServedBackend.open(index_cls, p, where, vector_store, docstore, model, kv, ann)
        check_vector_store(vector_store, dim, owner, built_in=str(where))
        check_lexical(lexical, vector_store, owner)
        ids = ix.json(UNIT_IDS_FILE)
        ix.check_rows("units", len(ids))
        row_ids = RowIds.from_params(p)
        check_holds(vector_store, dim, ids, owner, row_ids)
        layout = open_layout(vector_store, p, dim, ann, where)  # refused before the units are read
        try:
            units = get_nodes_at_once(docstore, ids)
        except ValueError as e:
            raise ValueError(f"{owner}: the docstore lacks units of the index in {where} ({e}); pass its docstore.") from e
        bm25 = {g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
                for g in p["granularities"]} if lexical == "bm25" else None
        backend = cls(vector_store, docstore, dim, row_ids, kv=kv, lexical=lexical, **layout)
        index = index_cls(
            list(units), np.zeros((len(units), 0), dtype=np.float32), model, p["parent_granularity"],
            p["embedding_mode"], p["bm25_params"], _bm25=bm25, preset=load_preset(p.get("preset")),
            _backend=backend,
        )
        index._built_with = p.get("embed_model")
        return index


def open_layout(vector_store: Any, params: Dict[str, Any], dim: int, ann: Optional[HNSW], where: str) -> Dict[str, Any]:
    """How a reopened index serves its dense lists: its per-granularity tables if they are all
    there (checked against the build's HNSW parameters; ``ann`` may change ``ef_search`` only),
    else filtered queries, with a warning naming ``index.upgrade_store()``."""
    ann = HNSW.for_reopen(ann, params, REOPEN, where)
    if not supports_lists(vector_store):
        return {"layout": FILTERED}
    tables = GranularityTables(vector_store, params["granularities"], dim, ann)
    missing = tables.missing() if params.get("store_layout") == TABLES else ["(an index written before them)"]
    if missing:
        logger.warning(
            "%s: %s are missing (%s): each dense list scans and filters the whole table (about 100x slower on "
            "HolisQA biology); call index.upgrade_store() once to add them.", REOPEN, tables.describe(), ", ".join(missing),
        )
        return {"layout": FILTERED, "ann": ann}
    tables.check_ann()
    return {"layout": TABLES, "ann": ann, "tables": tables}


def backend_for_build(
    storage_context: Optional[StorageContext],
    embed_model: Optional[BaseEmbedding],
    kvstore: Optional[BaseKVStore],
    namespace: Optional[str],
    lexical: str,
    ann: Optional[HNSW] = None,
) -> Tuple[MGBackend, Optional[BaseEmbedding]]:
    """The backend ``from_documents`` builds into (the stores of ``storage_context``, else
    memory) and the embed model to build with."""
    if storage_context is not None:
        if is_milvus(storage_context.vector_store):
            if lexical != "bm25":
                raise ValueError(f"lexical={lexical!r}: an index served by Milvus computes BM25 on the server; "
                                 "leave lexical='bm25'.")
            return MilvusBackend.for_build(storage_context, embed_model, kvstore, namespace, ann)
        if lexical == "bm25" and supports_lists(storage_context.vector_store):
            return ServedBackend.for_build(storage_context, embed_model, kvstore, namespace, ann)
        return StoresBackend.for_build(storage_context, embed_model, kvstore, namespace, lexical, ann)
    if ann is not None:
        raise ValueError("ann= builds HNSW indexes in PostgreSQL; pass storage_context= with a PGVectorStore too.")
    if kvstore is not None or namespace is not None:
        raise ValueError("kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too.")
    if lexical != "bm25":
        raise ValueError(
            f"lexical={lexical!r} needs an index built into stores; pass storage_context= with a vector store "
            "that has full-text search, or leave lexical='bm25' (the in-memory index always uses bm25s)."
        )
    return MemoryBackend(), embed_model
