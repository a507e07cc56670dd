"""CausalGraphIndex on LlamaIndex's storage interfaces: a vector store, a docstore and a kvstore.

* docstore: the text units (text, metadata, source document);
* vector store: the same units with their embeddings (the unit-norm rows retrieval scores), under
  the row ids :mod:`llama_index_ext_causalrag.storage.row_ids` gives them;
* kvstore (:mod:`llama_index_ext_causalrag.storage.kvstate`) or a folder (``persist(dir)``): the graph
  (entities, relations, hierarchy modules with titles and summaries, causal gates:
  ``graph.json``), the entity and module vectors (``entity_embeddings.npy``,
  ``module_embeddings.npy``), what updates reuse (``update.json``, ``name_embeddings.npy`` and,
  for an LLM extractor, ``extractions.json``), ``stats.json``, the unit order and the parameters.

Entities and modules are not rows of the vector store: retrieval scores every entity, module
and unit of the index in memory (MMR seeding and the expansion need all of them), as the
in-memory index does. So reopening reads every unit's stored vector back once and nothing is
embedded; results are identical to the in-memory index built from the same documents.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Type

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.storage import updates as up
from llama_index_ext_causalrag.causal_graph.state import CausalGraphState, read_state_files, write_state_files
from llama_index_ext_causalrag.causal_graph.update import stores_extractions
from llama_index_ext_causalrag.storage.stores import (
    check_vector_store,
    describe_store,
    fetch_embeddings,
    first_line,
    is_connection_error,
)
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.storage.persistence import PersistedIndex, check_embedder, persist_to
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.sync import open_for_build, replace_in_stores, write_new_index

if TYPE_CHECKING:
    from llama_index_ext_causalrag.causal_graph.index import CausalGraphIndex

STORE_CLASS = "CausalGraphIndex@store"
OWNER = "CausalGraphIndex"
REOPEN = "CausalGraphIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on a CausalGraphIndex built with storage_context="
HINT_KV = "CausalGraphIndex.from_documents(docs, storage_context=..., kvstore=...)"


@dataclass
class Stores:
    """The checked stores of a build, and the embed model (of dimension ``dim``)."""

    vector_store: BasePydanticVectorStore
    docstore: BaseDocumentStore
    model: BaseEmbedding
    dim: int
    kv: Optional[KVState]
    row_ids: RowIds = field(default_factory=RowIds.for_new_index)

    def as_dict(self) -> Dict[str, Any]:
        return {"vector_store": self.vector_store, "docstore": self.docstore, "dim": self.dim, "kv": self.kv,
                "row_ids": self.row_ids}


def open_stores(storage_context: Any, embed_model: Optional[BaseEmbedding], kvstore: Optional[Any],
                namespace: Optional[str]) -> Stores:
    """Check, before anything is embedded, that the stores are reachable, empty and of the
    embedder's dimension and that the kvstore namespace is free."""
    return Stores(*open_for_build(storage_context, embed_model, kvstore, namespace, OWNER, REOPEN))


def write_build(index: "CausalGraphIndex", stores: Stores, show_progress: bool = False) -> None:
    """Embed the units of a new index (the rows :meth:`as_retriever` would compute), then write
    them to the docstore, them with their vectors to the vector store and the rest to the
    kvstore; a failed write removes what the earlier ones wrote."""
    from llama_index_ext_causalrag.causal_graph.retriever import embed_units

    st = index._state
    emb = embed_units(st, stores.model, show_progress)
    if emb.size and emb.shape[1] != stores.dim:
        raise ValueError(
            f"{OWNER}: the embed_model declares dimension {stores.dim} but gives {emb.shape[1]}-dimensional "
            "embeddings; create the vector store for the dimension it gives."
        )
    st.set_unit_embeddings(emb)
    index._store = stores.as_dict()
    write_new_index(stores.vector_store, stores.docstore, st.units, st.units, emb, OWNER, lambda: save_state(index, st),
                    stores.row_ids)


def write_folder(index: "CausalGraphIndex", st: CausalGraphState, persist_dir: "str | Path") -> None:
    """The files of state ``st`` but its units and their vectors (the stores hold them)."""
    store: Dict[str, Any] = index._store  # type: ignore[assignment]
    with persist_to(persist_dir, STORE_CLASS) as w:
        write_state_files(w, st, index.params, stores_extractions(index.params))
        w.params.update(embed_dim=store["dim"], vector_store=describe_store(store["vector_store"]),
                        **store["row_ids"].params())


def save_state(index: "CausalGraphIndex", st: CausalGraphState) -> None:
    """Write state ``st`` to the index's kvstore, if it has one (the folder, value by value)."""
    kv = index._store["kv"] if index._store else None
    if kv is not None:
        with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
            write_folder(index, st, Path(tmp) / "ix")
            kv.save(Path(tmp) / "ix", STORE_CLASS, index._store["vector_store"])  # type: ignore[index]


def open_from_store(cls: Type["CausalGraphIndex"], vector_store: BasePydanticVectorStore, docstore: BaseDocumentStore,
                    persist_dir: "Optional[str | Path]", embed_model: Optional[BaseEmbedding], kvstore: Optional[Any],
                    namespace: Optional[str], components: Dict[str, Any]) -> "CausalGraphIndex":
    """Reopen a store-backed CausalGraphIndex from its stores and its kvstore (or ``persist_dir``)."""
    index = open_index_state(
        REOPEN, persist_dir, kvstore, namespace, vector_store, STORE_CLASS, HINT_DIR, HINT_KV,
        lambda ix, where, kv: _open(cls, ix, where, vector_store, docstore, embed_model, kv),
    )
    index._components = components
    return index


def _open(cls: Type["CausalGraphIndex"], ix: PersistedIndex, where: str, vector_store: BasePydanticVectorStore,
          docstore: BaseDocumentStore, embed_model: Optional[BaseEmbedding], kv: Optional[KVState]) -> "CausalGraphIndex":
    p = ix.params
    if embed_model is not None:
        check_embedder(p, embed_model, where, OWNER)  # type: ignore[arg-type]
    dim = int(p["embed_dim"])
    check_vector_store(vector_store, dim, REOPEN, built_in=str(where))
    unit_ids = list(p["unit_ids"])
    ix.check_rows("units", len(unit_ids))
    units = _get_units(docstore, unit_ids, where)
    row_ids = RowIds.from_params(p)
    emb = fetch_embeddings(vector_store, unit_ids, REOPEN, row_ids=row_ids)
    graph, ent_emb, mod_emb, data, stats = read_state_files(ix)
    index = cls(graph, units, ent_emb, mod_emb, p["params"], stats, embed_model, data)
    index.set_unit_embeddings(emb)
    index._store = {"vector_store": vector_store, "docstore": docstore, "dim": dim, "kv": kv, "row_ids": row_ids}
    return index


def _get_units(docstore: BaseDocumentStore, unit_ids: List[str], where: str) -> List[BaseNode]:
    try:
        return list(docstore.get_nodes(unit_ids))
    except ValueError as e:
        raise ValueError(f"{REOPEN}: the docstore lacks units of the index in {where} ({e}); pass its docstore.") from e
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(f"{REOPEN}: cannot reach the docstore ({describe_store(docstore)}): {first_line(e)}") from e
        raise


def sync_update(index: "CausalGraphIndex", old: CausalGraphState, new: CausalGraphState, new_units: List[BaseNode],
                replaced: Set[str], persist_dir: "Optional[str | Path]" = None) -> None:
    """Write an update (``old`` -> ``new``; ``replaced``: the documents whose units it removes or
    replaces) to the stores, then the kvstore and ``persist_dir``; on a failure the stores are put
    back and the error raised (the caller keeps the old state)."""
    store: Dict[str, Any] = index._store  # type: ignore[assignment]
    old_units = [u for u in old.units if up.doc_key(u) in replaced]
    row = {u.node_id: i for i, u in enumerate(new.units)}
    emb = new.stored_unit_embeddings
    new_emb = emb[[row[u.node_id] for u in new_units]] if new_units and emb is not None else None

    def write_state() -> None:
        if persist_dir is not None:
            write_folder(index, new, persist_dir)
        save_state(index, new)  # last: one put of the head makes the new state visible

    replace_in_stores(store["vector_store"], store["docstore"], f"{OWNER} update", old_units, new_units, new_emb,
                      old_units, new_units, write_state, store["row_ids"])


__all__ = ["STORE_CLASS", "open_from_store", "open_stores", "sync_update", "write_build", "write_folder"]
