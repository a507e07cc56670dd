"""StandardsIndex on LlamaIndex's storage interfaces: a vector store, a docstore and a kvstore.

* docstore: every parsed node (document roots, sections, chunks), with its metadata
  (``doc_id``, ``node_kind``, ``section_path``, ...) and parent/child links;
* vector store: every retrievable unit with its embedding (the same node, so the same metadata),
  under the row id :mod:`llama_index_ext_causalrag.storage.row_ids` gives it;
* kvstore (:mod:`llama_index_ext_causalrag.storage.kvstate`) or a folder (``persist(dir)``): the section
  tree and citation graph (``graph.json``), the node order and the parameters.

Retrieval is the in-memory :class:`StructureAwareRetriever` on the nodes and vectors read back
from the stores. Reopening reads every unit's stored vector once (``get_nodes`` / ``get``), so
results are identical to the in-memory index; scoring a different subset of rows per query would
move float32 cosines in their last bits (BLAS sums in another order) and could swap near ties.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Type

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.storage.stores import (
    check_vector_store,
    describe_store,
    fetch_embeddings,
)
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.persistence import (
    PersistedIndex,
    array_dim,
    check_embedder,
    persist_to,
    stable_model_name,
)
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.standards.graph import graph_from_dict
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.standards.index import StandardsIndex

STORE_CLASS = "StandardsIndex@store"
NODE_IDS_FILE = "node_ids.json"
REOPEN = "StandardsIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on a StandardsIndex built with storage_context="
HINT_KV = "StandardsIndex.from_documents(docs, storage_context=..., kvstore=...)"


def build_in_store(
    cls: Type["StandardsIndex"],
    documents: Sequence[Document],
    storage_context: Any,
    embed_model: Optional[BaseEmbedding],
    kvstore: Optional[Any],
    namespace: Optional[str],
    **kwargs: Any,
) -> "StandardsIndex":
    """``StandardsIndex.from_documents(docs, storage_context=..., kvstore=...)``: check the
    stores, build in memory, then write nodes, unit vectors and the graph (undone on failure)."""
    owner = "StandardsIndex.from_documents"
    vector_store, docstore, model, _, kv = open_for_build(storage_context, embed_model, kvstore, namespace,
                                                         owner, REOPEN)
    index = cls.from_documents(documents, embed_model=model, **kwargs)
    row_ids = RowIds.for_new_index()
    index._store = {"vector_store": vector_store, "docstore": docstore, "kv": kv, "row_ids": row_ids}
    write_new_index(vector_store, docstore, list(index._nodes.values()), index.units, index.embeddings, owner,
                    lambda: save_state(index), row_ids)
    return index


def write_folder(index: "StandardsIndex", persist_dir: str | Path) -> None:
    """``graph.json``, ``node_ids.json`` and ``params.json`` (nodes and vectors are in the stores)."""
    from llama_index_ext_causalrag.standards.presets import StructureAwareConfig

    with persist_to(persist_dir, STORE_CLASS) as w:
        w.write_json("graph.json", index.to_dict(), ensure_ascii=False)
        w.write_json(NODE_IDS_FILE, list(index._nodes))
        w.rows.update(nodes=len(index._nodes), units=len(index.unit_ids))
        p = index.preset
        w.params.update(
            unit_ids=index.unit_ids,
            embed_model=stable_model_name(index.embed_model_name),
            embed_dim=array_dim(index.embeddings),
            warnings=index.warnings,
            preset=p.model_dump(mode="json") if isinstance(p, StructureAwareConfig) else p,
            vector_store=describe_store(index._store["vector_store"]),  # type: ignore[index]
            **index._store["row_ids"].params(),  # type: ignore[index]
        )


def save_state(index: "StandardsIndex") -> None:
    """Write the index's graph and parameters to its kvstore, if it has one."""
    kv = index._store["kv"] if index._store else None
    if kv is not None:
        with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
            write_folder(index, Path(tmp) / "ix")
            kv.save(Path(tmp) / "ix", STORE_CLASS, index._store["vector_store"])  # type: ignore[index]


def open_from_store(
    cls: Type["StandardsIndex"],
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    persist_dir: Optional[str | Path] = None,
    embed_model: Optional[BaseEmbedding] = None,
    kvstore: Optional[Any] = None,
    namespace: Optional[str] = None,
    preset: Any = None,
) -> "StandardsIndex":
    """Reopen a store-backed StandardsIndex from its stores and its kvstore (or ``persist_dir``)."""
    return open_index_state(
        REOPEN, persist_dir, kvstore, namespace, vector_store, STORE_CLASS, HINT_DIR, HINT_KV,
        lambda ix, where, kv: _open(cls, ix, where, vector_store, docstore, embed_model, preset, kv),
    )


def _open(
    cls: Type["StandardsIndex"], ix: PersistedIndex, where: str, vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore, embed_model: Optional[BaseEmbedding], preset: Any, kv: Optional[KVState],
) -> "StandardsIndex":
    from llama_index_ext_causalrag.standards.presets import DEFAULT_PRESET, StructureAwareConfig

    p = ix.params
    model = resolve_embed_model(embed_model)
    check_embedder(p, model, where, "StandardsIndex")  # type: ignore[arg-type]
    check_vector_store(vector_store, int(p["embed_dim"]), REOPEN)
    graph = graph_from_dict(ix.json("graph.json"))
    node_ids = ix.json(NODE_IDS_FILE)
    ix.check_rows("nodes", len(node_ids))
    try:
        nodes = docstore.get_nodes(node_ids)
    except ValueError as e:
        raise ValueError(f"{REOPEN}: the docstore lacks nodes of the index in {where} ({e}); pass its docstore.") from e
    row_ids = RowIds.from_params(p)
    emb = fetch_embeddings(vector_store, p["unit_ids"], REOPEN, row_ids=row_ids)
    index = cls(nodes, graph, emb, p.get("embed_model"))
    if index.unit_ids != p["unit_ids"]:
        raise ValueError(f"{REOPEN}: the docstore's nodes and {where} disagree on the retrievable units; rebuild the index.")
    index.warnings = list(p.get("warnings", []))
    if preset is None:
        stored = p.get("preset")
        preset = StructureAwareConfig(**stored) if isinstance(stored, dict) else (stored or DEFAULT_PRESET)
    index.preset = preset
    index._embed_model = model
    index._store = {"vector_store": vector_store, "docstore": docstore, "kv": kv, "row_ids": row_ids}
    return index


def _unchanged(old: "StandardsIndex", new: "StandardsIndex", node_id: str) -> bool:
    a, b = old._nodes.get(node_id), new._nodes.get(node_id)
    return a is not None and b is not None and (a is b or a.model_dump() == b.model_dump())


def sync_update(old: "StandardsIndex", new: "StandardsIndex", persist_dir: Optional[str | Path] = None) -> None:
    """Write an update (``old`` -> ``new``, both complete) to the stores, the kvstore and
    ``persist_dir``; on a failure the stores are put back and the error raised."""
    store: Dict[str, Any] = old._store  # type: ignore[assignment]
    new._store = store
    old_row = {u: i for i, u in enumerate(old.unit_ids)}
    kept_units = {
        u for i, u in enumerate(new.unit_ids)
        if u in old_row and _unchanged(old, new, u)
        and np.array_equal(old.embeddings[old_row[u]], new.embeddings[i])  # type: ignore[index]
    }
    add_rows = [i for i, u in enumerate(new.unit_ids) if u not in kept_units]
    old_units: List[BaseNode] = [old.node(u) for u in old.unit_ids if u not in kept_units]
    new_units: List[BaseNode] = [new.node(new.unit_ids[i]) for i in add_rows]
    old_nodes = [n for i, n in old._nodes.items() if not _unchanged(old, new, i)]
    new_nodes = [n for i, n in new._nodes.items() if not _unchanged(old, new, i)]
    new_emb = new.embeddings[add_rows] if add_rows else None  # type: ignore[index]
    replace_in_stores(store["vector_store"], store["docstore"], "StandardsIndex update", old_units, new_units,
                      new_emb, old_nodes, new_nodes, then=lambda: _save(new, persist_dir), row_ids=store["row_ids"])


def _save(index: "StandardsIndex", persist_dir: Optional[str | Path]) -> None:
    if persist_dir is not None:
        write_folder(index, persist_dir)
    save_state(index)  # last: one put of the head makes the new state visible
