"""Where a :class:`StandardsIndex` keeps what it holds: in memory, or on LlamaIndex's stores.

The index holds one backend (:class:`MemoryBackend` or :class:`StoresBackend`) and calls its
verbs (``write``, ``commit``, ``persist``, ``describe``) without asking which kind it is.

On the stores:

* docstore: every parsed node (document roots, sections, chunks), with its metadata
  (``doc_id``, ``node_kind``, ``section_path``, ...) and parent/child links;
* vector store: every retrievable unit with its embedding (the same node, so the same metadata),
  under the row id :mod:`llama_index_ext_causalrag.storage.row_ids` gives it;
* kvstore (:mod:`llama_index_ext_causalrag.storage.kvstate`) or a folder (``persist(dir)``): the section
  tree and citation graph (``graph.json``), the node order and the parameters.

Where the vector store's driver serves lists (:meth:`StoreDriver.served_units`: PostgreSQL), the
index is **served** (``store_layout`` in its parameters): each unit's row also carries its BM25
terms and its section, degree and neighbour groups (:mod:`.served`), the kvstore holds the
parameters only, and a reopened index reads no unit: each query asks the store for the few units it
reaches (:class:`~.served.ServedStructureAwareRetriever`). Elsewhere (``SimpleVectorStore``, ...)
reopening reads every unit's node and stored vector once (``get_nodes`` / ``get``) and the graph,
and retrieval is the in-memory :class:`StructureAwareRetriever`.

This module sits below the index: it never imports it; :meth:`StoresBackend.open` is handed the
class to construct.
"""

from __future__ import annotations

import tempfile
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.storage.storage_context import StorageContext
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.standards.graph import StandardsGraph, graph_from_dict
from llama_index_ext_causalrag.standards.presets import get_preset, preset_from_json, preset_to_json
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.served import (
    ServedStructureAwareRetriever,
    empty_index,
    open_served_units,
    served_rows,
    unit_records,
)
from llama_index_ext_causalrag.storage.drivers import driver_for
from llama_index_ext_causalrag.storage.index_backend import IndexBackend
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.persistence import (
    PersistedIndex,
    array_dim,
    check_embedder,
    persist_to,
    stable_model_name,
)
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import (
    check_vector_store,
    describe_store,
    fetch_embeddings,
    get_nodes_at_once,
)
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.standards.index import StandardsIndex

STORE_CLASS = "StandardsIndex@store"
NODE_IDS_FILE = "node_ids.json"
REOPEN = "StandardsIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on a StandardsIndex built with storage_context="
HINT_KV = "StandardsIndex.from_documents(docs, storage_context=..., kvstore=...)"


@dataclass(frozen=True)
class StandardsParams:
    """What a backend records beside the state: the retrieval preset, and the class it persists as."""

    preset: Any
    class_name: str = "StandardsIndex"


class StandardsBackend(IndexBackend):
    """The verbs a :class:`StandardsIndex` calls, each given its parameters (:class:`StandardsParams`)
    and its state (:meth:`StandardsGraph.state`: graph, nodes, unit embeddings), never the index."""

    @abstractmethod
    def commit(
        self,
        params: StandardsParams,
        old: StandardsGraph,
        new: StandardsGraph,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """Make the backend (and ``persist_dir``, if given) hold ``new`` instead of ``old``; on
        failure both still hold ``old``."""

    @abstractmethod
    def retriever(self, state: StandardsGraph, config: Any, **kwargs: Any) -> StructureAwareRetriever:
        """The retriever of ``config`` (a :class:`StructureAwareConfig`) over ``state``; ``kwargs``:
        its embed model, callback manager, verbosity, filters and overrides."""


class MemoryBackend(StandardsBackend):
    """Everything in the process; persisted as one folder."""

    kind = "memory"

    def write(self, params: StandardsParams, state: StandardsGraph) -> None:
        """Nothing to write: the index holds it."""

    def commit(
        self,
        params: StandardsParams,
        old: StandardsGraph,
        new: StandardsGraph,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        if persist_dir is not None:
            self.persist(params, new, persist_dir)  # folder swap: the old folder stays on failure

    def persist(self, params: StandardsParams, state: StandardsGraph, persist_dir: "str | Path") -> None:
        """``graph.json``, ``nodes.json``, ``embeddings.npy``, ``params.json`` (``StandardsGraph.persist``)."""
        with persist_to(persist_dir, params.class_name) as w:
            state._persist_files(w)
            w.params["preset"] = preset_to_json(params.preset)

    def describe(self) -> str:
        return "in memory"

    def retriever(self, state: StandardsGraph, config: Any, **kwargs: Any) -> StructureAwareRetriever:
        """The retriever of ``config`` over ``state``."""
        return StructureAwareRetriever(state, config=config, **kwargs)


class StoresBackend(StandardsBackend):
    """A vector store (units and their embeddings), a docstore (every parsed node) and optionally
    a kvstore (graph and parameters), the rows keyed by ``row_ids``."""

    kind = "stores"

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        kv: Optional[KVState],
        row_ids: RowIds,
        served: Any = None,
        holds_units: bool = True,
    ) -> None:
        self.vector_store, self.docstore, self.kv, self.row_ids = vector_store, docstore, kv, row_ids
        self.served, self.holds_units = served, holds_units  # served: the driver's ServedUnits, or None
        self._records: Optional[Dict[str, Dict[str, Any]]] = None  # served: the unit records the rows hold

    def retriever(self, state: StandardsGraph, config: Any, **kwargs: Any) -> StructureAwareRetriever:
        """In memory while the index holds its units (it was built here); else served by the store."""
        if self.holds_units:
            return StructureAwareRetriever(state, config=config, **kwargs)
        return ServedStructureAwareRetriever(self.served, self.docstore, config, **kwargs)

    @classmethod
    def for_build(
        cls,
        storage_context: StorageContext,
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
    ) -> Tuple["StoresBackend", BaseEmbedding]:
        """Check, before anything is embedded, that the stores are reachable and empty and the
        kvstore namespace free: ``(backend, the resolved embed model)``."""
        vector_store, docstore, model, _, kv = open_for_build(storage_context, embed_model, kvstore, namespace, REOPEN)
        return cls(vector_store, docstore, kv, RowIds.for_new_index()), model

    def write(self, params: StandardsParams, state: StandardsGraph) -> None:
        """Nodes to the docstore, unit vectors to the vector store, graph and parameters to the
        kvstore (a failed step removes what the earlier ones wrote). Where the store's driver serves
        lists, each unit's row carries its BM25 terms and graph record, and the kvstore the parameters only."""
        lx = get_preset(params.preset).lexical
        dim = array_dim(state.embeddings)
        self.served = driver_for(self.vector_store).served_units(self.vector_store, dim, (lx.bm25_k1, lx.bm25_b), None)
        units = state.units
        if self.served is not None:
            self.served.create()
            self._records = unit_records(state)
            units = served_rows(units, self._records)
        write_new_index(
            self.vector_store,
            self.docstore,
            list(state._nodes.values()),
            units,
            state.embeddings,
            lambda: self._finish_build(params, state),
            self.row_ids,
            kv=self.kv,
        )

    def _finish_build(self, params: StandardsParams, state: StandardsGraph) -> None:
        """The served lists' indexes built (rows in, state not saved yet), then the state saved."""
        if self.served is not None:
            self.served.finish_build()
        self._save_state(params, state)

    def persist(self, params: StandardsParams, state: StandardsGraph, persist_dir: "str | Path") -> None:
        """``graph.json``, ``node_ids.json`` and ``params.json`` (nodes and vectors are in the stores);
        reopen with ``StandardsIndex.from_vector_store(..., persist_dir=...)``; served, ``params.json`` only."""
        if self.served is not None:
            with persist_to(persist_dir, STORE_CLASS) as w:
                w.params.update(
                    store_layout=self.served.layout,
                    served=self.served.params(),
                    embed_model=stable_model_name(state.embed_model_name),
                    embed_dim=array_dim(state.embeddings) if self.holds_units else self.dim,
                    warnings=state.warnings,
                    preset=preset_to_json(params.preset),
                    vector_store=describe_store(self.vector_store),
                    **self.row_ids.params(),
                )
            return
        with persist_to(persist_dir, STORE_CLASS) as w:
            w.write_json("graph.json", state.to_dict(), ensure_ascii=False)
            w.write_json(NODE_IDS_FILE, list(state._nodes))
            w.rows.update(nodes=len(state._nodes), units=len(state.unit_ids))
            w.params.update(
                unit_ids=state.unit_ids,
                embed_model=stable_model_name(state.embed_model_name),
                embed_dim=array_dim(state.embeddings),
                warnings=state.warnings,
                preset=preset_to_json(params.preset),
                vector_store=describe_store(self.vector_store),
                **self.row_ids.params(),
            )

    dim = 0  # a reopened served index: its embeddings' dimension (it holds none)

    def describe(self) -> str:
        if self.served is not None:
            return f"{describe_store(self.vector_store)}, served by {self.served.describe()}"
        return describe_store(self.vector_store)

    def _save_state(self, params: StandardsParams, state: StandardsGraph) -> None:
        """Write the graph and parameters to the kvstore, if there is one."""
        if self.kv is not None:
            with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
                self.persist(params, state, Path(tmp) / "ix")
                self.kv.save(Path(tmp) / "ix", STORE_CLASS, self.vector_store)

    def commit(
        self,
        params: StandardsParams,
        old: StandardsGraph,
        new: StandardsGraph,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """Replace the rows of changed units and nodes (``old`` -> ``new``, both complete), then
        write ``persist_dir`` and the kvstore; on a failure the stores are put back and the error raised."""
        old_row = {u: i for i, u in enumerate(old.unit_ids)}
        old_rec, new_rec = ({}, {}) if self.served is None else (self._records or unit_records(old), unit_records(new))
        kept_units = {
            u
            for i, u in enumerate(new.unit_ids)
            if u in old_row
            and _unchanged(old, new, u)
            and np.array_equal(old.embeddings[old_row[u]], new.embeddings[i])
            and old_rec.get(u) == new_rec.get(u)  # served: a unit whose neighbours changed gets its row again
        }
        add_rows = [i for i, u in enumerate(new.unit_ids) if u not in kept_units]
        old_units: List[BaseNode] = [old.node(u) for u in old.unit_ids if u not in kept_units]
        new_units: List[BaseNode] = [new.node(new.unit_ids[i]) for i in add_rows]
        old_nodes = [n for i, n in old._nodes.items() if not _unchanged(old, new, i)]
        new_nodes = [n for i, n in new._nodes.items() if not _unchanged(old, new, i)]
        new_emb = new.embeddings[add_rows] if add_rows else None
        if self.served is not None:
            new_units = served_rows(new_units, new_rec)
        try:
            replace_in_stores(
                self.vector_store,
                self.docstore,
                old_units,
                new_units,
                new_emb,
                old_nodes,
                new_nodes,
                then=lambda: self._save(params, new, persist_dir),
                row_ids=self.row_ids,
                kv=self.kv,
            )
        except BaseException:
            if self.served is not None:
                self.served.after_update(bool(new_units), bool(old_units), True)
            raise
        if self.served is not None:
            self.served.after_update(bool(new_units), bool(old_units), False)
            self._records = new_rec

    def _save(self, params: StandardsParams, state: StandardsGraph, persist_dir: "Optional[str | Path]") -> None:
        if persist_dir is not None:
            self.persist(params, state, persist_dir)
        self._save_state(params, state)  # last: one put of the head makes the new state visible

    @classmethod
    def open(
        cls,
        make_index: Callable[..., "StandardsIndex"],
        *,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: "Optional[str | Path]",
        embed_model: Optional[BaseEmbedding],
        kvstore: Optional[BaseKVStore],
        namespace: Optional[str],
        preset: Any,
    ) -> "StandardsIndex":
        """Reopen a store-backed index from its stores and its kvstore (or ``persist_dir``);
        ``make_index(nodes, graph, embeddings, embed_model_name, backend=...)`` constructs it."""
        return open_index_state(
            persist_dir,
            kvstore,
            namespace,
            vector_store,
            STORE_CLASS,
            HINT_DIR,
            HINT_KV,
            lambda persisted, where, kv: cls._open(
                make_index,
                persisted,
                where,
                vector_store=vector_store,
                docstore=docstore,
                embed_model=embed_model,
                preset=preset,
                kv=kv,
            ),
            docstore=docstore,
        )

    @classmethod
    def _open(
        cls,
        make_index: Callable[..., "StandardsIndex"],
        persisted: PersistedIndex,
        where: str,
        *,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        embed_model: Optional[BaseEmbedding],
        preset: Any,
        kv: Optional[KVState],
    ) -> "StandardsIndex":
        p = persisted.params
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, where)  # type: ignore[arg-type]
        check_vector_store(vector_store, int(p["embed_dim"]))
        if p.get("store_layout") is not None:
            return cls._open_served(make_index, p, where, vector_store, docstore, model, preset, kv)
        graph = graph_from_dict(persisted.json("graph.json"))
        node_ids = persisted.json(NODE_IDS_FILE)
        persisted.check_rows("nodes", len(node_ids))
        try:
            nodes = get_nodes_at_once(docstore, node_ids)
        except ValueError as e:
            raise ValueError(
                f"{REOPEN}: the docstore lacks nodes of the index in {where} ({e}); pass its docstore."
            ) from e
        row_ids = RowIds.from_params(p)
        emb = fetch_embeddings(vector_store, p["unit_ids"], row_ids=row_ids)
        index = make_index(nodes, graph, emb, p.get("embed_model"), backend=cls(vector_store, docstore, kv, row_ids))
        if index.unit_ids != p["unit_ids"]:
            raise ValueError(
                f"{REOPEN}: the docstore's nodes and {where} disagree on the retrievable units; rebuild the index."
            )
        index.warnings = list(p.get("warnings", []))
        index.preset = preset if preset is not None else preset_from_json(p.get("preset"))
        index._embed_model = model
        return index

    @classmethod
    def _open_served(
        cls,
        make_index: Callable[..., "StandardsIndex"],
        p: Dict[str, Any],
        where: str,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        model: BaseEmbedding,
        preset: Any,
        kv: Optional[KVState],
    ) -> "StandardsIndex":
        """An index served by its store: its parameters and a check of the store's lists, no unit read."""
        chosen = preset if preset is not None else preset_from_json(p.get("preset"))
        served = open_served_units(vector_store, p, where, get_preset(chosen), REOPEN)
        backend = cls(vector_store, docstore, kv, RowIds.from_params(p), served=served, holds_units=False)
        backend.dim = int(p["embed_dim"])
        return empty_index(make_index, p, backend, chosen, model)


def _unchanged(old: StandardsGraph, new: StandardsGraph, node_id: str) -> bool:
    a, b = old._nodes.get(node_id), new._nodes.get(node_id)
    return a is not None and b is not None and (a is b or a.model_dump() == b.model_dump())
