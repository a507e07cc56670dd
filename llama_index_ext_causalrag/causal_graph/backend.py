"""Where a :class:`CausalGraphIndex` keeps what it holds: :class:`MemoryBackend` (everything in the
process, persisted as one folder) or :class:`StoresBackend` (LlamaIndex's stores: a vector store, a
docstore and a kvstore). The index holds one and calls its verbs (``write``, ``commit``,
``persist``), never asking which it is.

On stores:

* docstore: the text units (text, metadata, source document);
* vector store: the same units with their embeddings (the unit-norm rows retrieval scores), under
  the row ids :mod:`llama_index_ext_causalrag.storage.row_ids` gives them;
* kvstore (:mod:`llama_index_ext_causalrag.storage.kvstate`) or a folder (``persist(dir)``): the graph
  (entities, relations, hierarchy modules with titles and summaries, causal gates:
  ``graph.json``), the entity and module vectors (``entity_embeddings.npy``,
  ``module_embeddings.npy``), what updates reuse (``update.json``, ``name_embeddings.npy`` and,
  for an LLM extractor, ``extractions.json``), ``stats.json``, the unit order and the parameters.

Entities and modules are not rows of the vector store: retrieval scores every entity and
module in memory (MMR seeding and the graph search need all of them). Units are not held: the
state keeps their ids, and a query reads the vectors and text it needs from the stores
(:class:`~llama_index_ext_causalrag.causal_graph.units.StoredUnits`), with the same scores as the
in-memory index built from the same documents. Where the vector store's driver serves terms
(``StoreDriver.served_terms``: PostgreSQL), each unit's row carries its distinct terms and the
database's postings answer the lexical scores (``store_layout`` in the parameters); elsewhere the
kvstore keeps the units' term postings (``unit_terms.json``, ``unit_postings.npy``), loaded at
open (:mod:`.unit_terms`). Opening reads the kvstore state and checks one unit in each store;
nothing is embedded.

This module never imports the index: the opening verbs take the class to construct.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.storage.storage_context import StorageContext
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.causal_graph.retriever import embed_units, terms_of
from llama_index_ext_causalrag.causal_graph.state import (
    CausalGraphState,
    read_state_files,
    stores_extractions,
    write_state_files,
)
from llama_index_ext_causalrag.causal_graph.unit_terms import TermPostings, open_served_terms, term_rows
from llama_index_ext_causalrag.causal_graph.units import StoredUnits, unit_texts
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.drivers import driver_for
from llama_index_ext_causalrag.storage.index_backend import IndexBackend
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.persistence import PersistedIndex, check_embedder, open_persisted, persist_to
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import (
    check_vector_store,
    describe_store,
    fetch_embeddings,
    first_line,
    get_nodes_at_once,
    is_connection_error,
)
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex

logger = logging.getLogger(__name__)

OWNER = "CausalGraphIndex"
MEMORY_CLASS = "CausalGraphIndex"
STORE_CLASS = "CausalGraphIndex@store"
REOPEN = "CausalGraphIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on a CausalGraphIndex built with storage_context="
HINT_KV = "CausalGraphIndex.from_documents(docs, storage_context=..., kvstore=...)"
# constructs the index from (graph, units, entity vectors, module vectors, params, stats, embed model, update data)
IndexFactory = Callable[..., "CausalGraphIndex"]


class MemoryBackend(IndexBackend):
    """Everything in the process; ``persist`` writes all of it (units and, once computed, their
    embeddings included) as one folder."""

    kind = "memory"

    def write(
        self,
        params: Dict[str, Any],
        state: CausalGraphState,
        embed_model: Optional[BaseEmbedding] = None,
        show_progress: bool = False,
    ) -> None:
        """Nothing to do: the state is the index's."""

    def commit(
        self,
        params: Dict[str, Any],
        old: CausalGraphState,
        new: CausalGraphState,
        new_units: Sequence[BaseNode] = (),
        replaced: Collection[str] = (),
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """With ``persist_dir``, write ``new`` there (a folder swap: the old folder stays on failure)."""
        if persist_dir is not None:
            self._write_folder(params, new, persist_dir)

    def persist(self, params: Dict[str, Any], state: CausalGraphState, persist_dir: "str | Path") -> None:
        self._write_folder(params, state, persist_dir)

    def describe(self) -> str:
        return "in memory"

    @staticmethod
    def _write_folder(params: Dict[str, Any], st: CausalGraphState, persist_dir: "str | Path") -> None:
        with persist_to(persist_dir, MEMORY_CLASS) as w:
            write_state_files(w, st, params, stores_extractions(params))
            ds = SimpleDocumentStore()
            ds.add_documents(st.units, allow_update=True)
            ds.persist(str(w.dir / "docstore.json"))
            if st.stored_unit_embeddings is not None:  # computed by as_retriever: saved, never recomputed
                w.save_array("unit_embeddings.npy", st.stored_unit_embeddings)

    @classmethod
    def open(
        cls, factory: IndexFactory, persist_dir: "str | Path", embed_model: Optional[BaseEmbedding]
    ) -> "CausalGraphIndex":
        """The index of a folder :meth:`persist` wrote, nothing embedded (an ``embed_model`` given
        is checked against the stored dimension)."""
        persisted = open_persisted(persist_dir, MEMORY_CLASS, "index.persist(persist_dir)")
        meta = persisted.params
        if embed_model is not None:
            check_embedder(meta, embed_model, persisted.dir)
        graph, ent_emb, mod_emb, data, stats = read_state_files(persisted)
        ds = SimpleDocumentStore.from_persist_path(str(persisted.path("docstore.json")))
        units = [ds.get_node(i) for i in meta["unit_ids"]]
        persisted.check_rows("units", len(units))
        index = factory(graph, units, ent_emb, mod_emb, meta["params"], stats, embed_model, data, backend=cls())
        if persisted.has("unit_embeddings.npy"):
            index.set_unit_embeddings(persisted.array("unit_embeddings.npy"))
        return index


class StoresBackend(IndexBackend):
    """The units in a docstore and, with their vectors, in a vector store (rows keyed by
    ``row_ids``); the rest of the state in the kvstore ``kv`` (if any) and in ``persist`` folders."""

    kind = "stores"

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        dim: int,
        kv: Optional[KVState],
        row_ids: RowIds,
        served: Any = None,
    ) -> None:
        self.vector_store = vector_store
        self.docstore = docstore
        self.dim = dim
        self.kv = kv
        self.row_ids = row_ids
        self.served = served  # the driver's served terms (the units' postings in the store), or None

    @classmethod
    def for_build(
        cls,
        storage_context: StorageContext,
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
    ) -> "Tuple[StoresBackend, BaseEmbedding]":
        """Check, before anything is embedded, that the stores are reachable, empty and of the
        embedder's dimension and that the kvstore namespace is free: ``(backend, embed model)``."""
        vector_store, docstore, model, dim, kv = open_for_build(
            storage_context, embed_model, kvstore, namespace, REOPEN
        )
        served = driver_for(vector_store).served_terms(vector_store, dim, None)
        return cls(vector_store, docstore, dim, kv, RowIds.for_new_index(), served), model

    def describe(self) -> str:
        kv = f", kvstore {self.kv.describe()}" if self.kv is not None else ""
        terms = f", unit terms from {self.served.describe()}" if self.served is not None else ""
        return f"vector store {describe_store(self.vector_store)}, docstore {describe_store(self.docstore)}{kv}{terms}"

    # ---- the verbs --------------------------------------------------------------------------
    def write(
        self,
        params: Dict[str, Any],
        state: CausalGraphState,
        embed_model: Optional[BaseEmbedding] = None,
        show_progress: bool = False,
    ) -> None:
        """Embed the units of a new index with ``embed_model`` (the rows :meth:`as_retriever` would
        compute), then write them to the docstore, them with their vectors to the vector store and
        the rest to the kvstore; a failed write removes what the earlier ones wrote."""
        emb = embed_units(state, embed_model, show_progress)
        if emb.size and emb.shape[1] != self.dim:
            raise ValueError(
                f"{OWNER}: the embed_model declares dimension {self.dim} but gives {emb.shape[1]}-dimensional "
                "embeddings; create the vector store for the dimension it gives."
            )
        state.set_unit_embeddings(emb)
        if self.served is not None:
            self.served.create()

        def save() -> None:  # the served tables' statistics fresh (rows in), then the state
            if self.served is not None:
                self.served.finish_build()
            self._save_state(params, state)

        write_new_index(
            self.vector_store, self.docstore, state.units, self._rows(state.units), emb, save, self.row_ids, kv=self.kv
        )
        state.keep_in_stores(self._stored_units(state))  # served from the stores, as a reopened index

    def commit(
        self,
        params: Dict[str, Any],
        old: CausalGraphState,
        new: CausalGraphState,
        new_units: Sequence[BaseNode] = (),
        replaced: Collection[str] = (),
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """Write an update (``old`` -> ``new``; ``new_units``: the units it adds; ``replaced``: the
        documents whose units it removes or replaces) to the stores, then ``persist_dir`` and the
        kvstore; on a failure the stores are put back and the error raised (the caller keeps the
        old state)."""
        old_units = [u for u in old.units if update_plan.doc_key(u) in replaced]
        row = {u.node_id: i for i, u in enumerate(new.units)}
        emb = new.stored_unit_embeddings
        new_emb = emb[[row[u.node_id] for u in new_units]] if new_units and emb is not None else None

        def write_state() -> None:
            if persist_dir is not None:
                self._write_folder(params, new, persist_dir)
            self._save_state(params, new)  # last: one put of the head makes the new state visible

        try:
            replace_in_stores(
                self.vector_store,
                self.docstore,
                self._rows(old_units),
                self._rows(new_units),
                new_emb,
                old_units,
                list(new_units),
                write_state,
                self.row_ids,
                kv=self.kv,
            )
        except Exception:
            if self.served is not None:
                self.served.after_update(bool(new_units), bool(old_units), True)
            raise
        if self.served is not None:
            self.served.after_update(bool(new_units), bool(old_units), False)
        new.keep_in_stores(self._stored_units(new))

    def _rows(self, units: Sequence[BaseNode]) -> List[BaseNode]:
        """The vector-store rows of ``units``: with their terms where the store serves them."""
        return term_rows(units, terms_of) if self.served is not None else list(units)

    def _stored_units(self, st: CausalGraphState) -> StoredUnits:
        terms = self.served if self.served is not None else st.unit_postings()
        return StoredUnits(self.vector_store, self.docstore, self.row_ids, st.unit_ids, terms, self.dim)

    def persist(self, params: Dict[str, Any], state: CausalGraphState, persist_dir: "str | Path") -> None:
        """All but the units and their vectors (the stores hold them)."""
        self._write_folder(params, state, persist_dir)

    # ---- the state besides the units ----------------------------------------------------------
    def _write_folder(self, params: Dict[str, Any], st: CausalGraphState, persist_dir: "str | Path") -> None:
        with persist_to(persist_dir, STORE_CLASS) as w:
            write_state_files(w, st, params, stores_extractions(params))
            if self.served is None:
                st.unit_postings().save(w)  # what a query scores the units' terms with, without their text
            else:  # the store's postings serve them
                w.params.update(store_layout=self.served.layout, served=self.served.params())
            w.params.update(embed_dim=self.dim, vector_store=describe_store(self.vector_store), **self.row_ids.params())

    def _save_state(self, params: Dict[str, Any], st: CausalGraphState) -> None:
        """Write state ``st`` to the kvstore, if there is one (the folder, value by value)."""
        if self.kv is not None:
            with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
                self._write_folder(params, st, Path(tmp) / "ix")
                self.kv.save(Path(tmp) / "ix", STORE_CLASS, self.vector_store)

    # ---- reopening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        factory: IndexFactory,
        *,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: "Optional[str | Path]",
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
    ) -> "CausalGraphIndex":
        """Reopen a store-backed index from its stores and its kvstore (or ``persist_dir``)."""
        return open_index_state(
            persist_dir,
            kvstore,
            namespace,
            vector_store,
            STORE_CLASS,
            HINT_DIR,
            HINT_KV,
            lambda persisted, where, kv: cls._open(
                factory, persisted, where, vector_store=vector_store, docstore=docstore, embed_model=embed_model, kv=kv
            ),
            docstore=docstore,
        )

    @classmethod
    def _open(
        cls,
        factory: IndexFactory,
        persisted: PersistedIndex,
        where: str,
        *,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        embed_model: Optional[BaseEmbedding],
        kv: Optional[KVState],
    ) -> "CausalGraphIndex":
        p = persisted.params
        if embed_model is not None:
            check_embedder(p, embed_model, where)  # type: ignore[arg-type]
        dim = int(p["embed_dim"])
        check_vector_store(vector_store, dim, built_in=str(where))
        unit_ids = list(p["unit_ids"])
        persisted.check_rows("units", len(unit_ids))
        row_ids = RowIds.from_params(p)
        _check_units(vector_store, docstore, unit_ids, row_ids, where)
        served = open_served_terms(vector_store, p, where, REOPEN) if "store_layout" in p else None
        postings = served if served is not None else TermPostings.load(persisted)
        if postings is None:  # written by a version without them: the units' terms, read once
            logger.warning(
                "%s: the state in %s has no unit postings (an older version wrote it); reading every "
                "unit once to compute them.",
                REOPEN,
                where,
            )
            postings = TermPostings.from_texts(unit_texts(_get_units(docstore, unit_ids, where)), terms_of)
        graph, ent_emb, mod_emb, data, stats = read_state_files(persisted)
        backend = cls(vector_store, docstore, dim, kv, row_ids, served)
        units = StoredUnits(vector_store, docstore, row_ids, unit_ids, postings, dim)
        return factory(graph, units, ent_emb, mod_emb, p["params"], stats, embed_model, data, backend=backend)


def backend_for_build(
    storage_context: Optional[StorageContext],
    embed_model: Optional[BaseEmbedding],
    kvstore: Optional[BaseKVStore],
    namespace: Optional[str],
) -> "Tuple[IndexBackend, Optional[BaseEmbedding]]":
    """The backend a build writes to, and the embed model to build with: on ``storage_context``'s
    stores (checked before anything is embedded; the model resolved for its dimension), else in
    memory (``kvstore`` and ``namespace`` need stores)."""
    if storage_context is not None:
        return StoresBackend.for_build(storage_context, embed_model, kvstore, namespace)
    if kvstore is not None or namespace is not None:
        raise ValueError(
            "kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too."
        )
    return MemoryBackend(), embed_model


def _check_units(
    vector_store: BasePydanticVectorStore, docstore: BaseDocumentStore, unit_ids: List[str], row_ids: RowIds, where: str
) -> None:
    """The stores hold the first and the last unit of the index (what an open reads of them)."""
    probe = list(dict.fromkeys(unit_ids[:1] + unit_ids[-1:]))
    _get_units(docstore, probe, where)
    try:
        fetch_embeddings(vector_store, probe, row_ids=row_ids)
    except ValueError as e:
        raise ValueError(
            f"{REOPEN}: the vector store ({describe_store(vector_store)}) lacks the index's vectors "
            f"({len(unit_ids)} units, built in {where}); pass the vector store the index was built "
            "into."
        ) from e


def _get_units(docstore: BaseDocumentStore, unit_ids: List[str], where: str) -> List[BaseNode]:
    try:
        return get_nodes_at_once(docstore, unit_ids)
    except ValueError as e:
        raise ValueError(f"{REOPEN}: the docstore lacks units of the index in {where} ({e}); pass its docstore.") from e
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(
                f"{REOPEN}: cannot reach the docstore ({describe_store(docstore)}): {first_line(e)}"
            ) from e
        raise


__all__ = ["MemoryBackend", "STORE_CLASS", "StoresBackend", "backend_for_build"]
