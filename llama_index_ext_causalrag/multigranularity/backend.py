"""Where a :class:`MultiGranularityIndex` keeps its units: in memory, or on LlamaIndex's stores.

The index holds one backend and calls its verbs; it never asks which kind it is.

* :class:`MemoryBackend`: units, embeddings and BM25 in the process, persisted as one folder
  (``units.json``, ``embeddings.npy``, ``bm25/g{g}/``, ``tokens.json``, ``params.json``);
* :class:`StoresBackend`: units and embeddings in a vector store (granularity as metadata, one
  filtered expert per granularity, :mod:`.store`), units in a docstore; the BM25 indexes
  (``lexical="bm25"``), the unit order and the build parameters are one folder, kept in a
  ``BaseKVStore`` (:mod:`llama_index_ext_causalrag.storage.kvstate`) when the index is built
  with ``kvstore=``, or written by ``persist(dir)``. :meth:`StoresBackend.open` reopens the index
  from the stores (and the folder) without embedding anything.

Both make the index's :class:`MGState` (:meth:`MGBackend.make_state`), make the fusion retriever
over its experts, and :meth:`~MGBackend.commit` an update's new state before the index swaps it in.
"""

from __future__ import annotations

import tempfile
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
from llama_index_ext_causalrag.multigranularity.presets import DEFAULT_PRESET, load_preset
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.state import MGChange, MGState
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
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

OWNER = "MultiGranularityIndex"
STORE_CLASS = "MultiGranularityIndex@store"
UNIT_IDS_FILE = "unit_ids.json"
REOPEN = "MultiGranularityIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on an index built with storage_context="
HINT_KV = "MultiGranularityIndex.from_documents(docs, storage_context=..., kvstore=...)"


def _index_params(index: "MultiGranularityIndex", st: MGState) -> Dict[str, Any]:
    """The build parameters both backends record in ``params.json``."""
    return dict(
        granularities=list(st.by_g),
        parent_granularity=index.parent_granularity,
        embedding_mode=index.embedding_mode,
        bm25_params=index.bm25_params,
        preset=index.config.model_dump() if index.preset == "custom" else index.preset,
    )


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
                **_index_params(index, st), **embedder_params(index._embed_model, array_dim(st.embeddings))
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
    ) -> None:
        self.vector_store, self.docstore, self.dim = vector_store, docstore, dim
        self.row_ids, self.kv, self.lexical = row_ids, kv, lexical

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
        """Dense experts are filtered queries of the vector store (``embeddings`` stay there), the
        sparse ones bm25s or (``lexical="store"``) its full-text search."""
        model = index._embed_model
        dense = dense_experts(self.vector_store, self.docstore, model, units, self.row_ids)
        sparse = text_experts(self.vector_store, self.docstore, units, self.row_ids) if self.lexical == "store" else None
        return MGState(units, np.zeros((len(units), 0), dtype=np.float32), tokens, model, index.bm25_params, bm25,
                       dense=dense, sparse=sparse, docstore=self.docstore)

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
        write_new_index(self.vector_store, self.docstore, state.units, state.units, embeddings,  # type: ignore[arg-type]
                        f"{OWNER}.from_documents", lambda: self.save_state(index, state), self.row_ids, kv=self.kv)

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
                **_index_params(index, st),
                vector_store=describe_store(self.vector_store),
                **embedder_params(index._embed_model, self.dim),
            )
            w.params.update(self.row_ids.params())
            if index._built_with is not None:  # reopened with another (same-dimension) query model
                w.params["embed_model"] = index._built_with

    def save_state(self, index: "MultiGranularityIndex", st: MGState) -> None:
        """Write state ``st`` to the index's kvstore, if it has one (the folder, value by value)."""
        if self.kv is not None:
            with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
                self.write_folder(index, st, Path(tmp) / "ix")
                self.kv.save(Path(tmp) / "ix", STORE_CLASS, self.vector_store)

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
    ) -> Tuple["StoresBackend", BaseEmbedding]:
        """Check the stores are reachable, empty and of the embedder's dimension (and, for
        ``lexical="store"``, have full-text search) before anything is embedded: the backend of a
        new index and the embed model to build it with."""
        owner = f"{OWNER}.from_documents"
        vector_store, docstore, model, dim, kv = open_for_build(storage_context, embed_model, kvstore, namespace,
                                                               owner, REOPEN)
        check_lexical(lexical, vector_store, owner)
        return cls(vector_store, docstore, dim, RowIds.for_new_index(), kv=kv, lexical=lexical), model

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
    ) -> "MultiGranularityIndex":
        """Reopen an index built with ``from_documents(docs, storage_context=...)``: units from
        ``docstore``, embeddings stay in ``vector_store``, the rest from ``kvstore`` (the one it was
        built with) or from ``persist_dir`` (written by ``index.persist``); ``embed_model`` only
        embeds queries; ``lexical`` (by default the build's) as in :meth:`for_build`."""
        if lexical is not None and lexical not in LEXICAL:
            raise ValueError(f"{REOPEN}: lexical must be one of {LEXICAL} or None (the build's), got {lexical!r}.")
        return open_index_state(
            REOPEN, persist_dir, kvstore, namespace, vector_store, STORE_CLASS, HINT_DIR, HINT_KV,
            lambda ix, where, kv: cls._open(index_cls, ix, where, vector_store, docstore, embed_model, kv, lexical),
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
        check_vector_store(vector_store, dim, owner, built_in=str(where))
        check_lexical(lexical, vector_store, owner)
        ids = ix.json(UNIT_IDS_FILE)
        ix.check_rows("units", len(ids))
        row_ids = RowIds.from_params(p)
        check_holds(vector_store, dim, ids, owner, row_ids)
        try:
            units = get_nodes_at_once(docstore, ids)
        except ValueError as e:
            raise ValueError(f"{owner}: the docstore lacks units of the index in {where} ({e}); pass its docstore.") from e
        bm25 = {g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
                for g in p["granularities"]} if lexical == "bm25" else None
        index = index_cls(
            list(units), np.zeros((len(units), 0), dtype=np.float32), model, p["parent_granularity"],
            p["embedding_mode"], p["bm25_params"], _bm25=bm25, preset=load_preset(p.get("preset")),
            _backend=cls(vector_store, docstore, dim, row_ids, kv=kv, lexical=lexical),
        )
        index._built_with = p.get("embed_model")
        return index


def backend_for_build(
    storage_context: Optional[StorageContext],
    embed_model: Optional[BaseEmbedding],
    kvstore: Optional[BaseKVStore],
    namespace: Optional[str],
    lexical: str,
) -> Tuple[MGBackend, Optional[BaseEmbedding]]:
    """The backend ``from_documents`` builds into (the stores of ``storage_context``, else
    memory) and the embed model to build with."""
    if storage_context is not None:
        return StoresBackend.for_build(storage_context, embed_model, kvstore, namespace, lexical)
    if kvstore is not None or namespace is not None:
        raise ValueError("kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too.")
    if lexical != "bm25":
        raise ValueError(
            f"lexical={lexical!r} needs an index built into stores; pass storage_context= with a vector store "
            "that has full-text search, or leave lexical='bm25' (the in-memory index always uses bm25s)."
        )
    return MemoryBackend(), embed_model
