"""Apply an incremental update of a store-backed index to its vector store and docstore.

:func:`replace_in_stores` swaps the rows of the nodes an update removes or changes for the
rows of the nodes it adds or changes, then runs the caller's ``then`` (which writes the
index's new kvstore state); if any step fails, the old rows and nodes are put back (best
effort: the old vectors are read from the store first) and the error is raised, so the
index in memory and in the stores stays the old one. Queries running meanwhile may see the
stores between the two states.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.storage.stores import (
    add_nodes_to_docstore,
    add_nodes_to_vector_store,
    check_docstore,
    check_empty,
    check_vector_store,
    describe_store,
    fetch_embeddings,
    first_line,
    is_connection_error,
    remove_nodes,
)
from llama_index_ext_causalrag.storage.row_ids import RowIds


def _delete_vectors(vector_store: BasePydanticVectorStore, node_ids: List[str], owner: str, row_ids: RowIds) -> None:
    if not node_ids:
        return
    try:
        vector_store.delete_nodes(node_ids=row_ids.row_ids(node_ids))
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(f"{owner}: cannot write to the vector store ({describe_store(vector_store)}): {first_line(e)}") from e
        raise


def _restore_vectors(vector_store: BasePydanticVectorStore, units: Sequence[BaseNode], emb: Optional[np.ndarray],
                     row_ids: RowIds) -> None:
    if units and emb is not None:
        try:
            add_nodes_to_vector_store(vector_store, units, emb, row_ids=row_ids)
        except Exception:  # pragma: no cover - the store went away; the original error is raised
            pass


def replace_in_stores(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    owner: str,
    old_units: Sequence[BaseNode],
    new_units: Sequence[BaseNode],
    new_emb: Optional[np.ndarray],
    old_nodes: Sequence[BaseNode],
    new_nodes: Sequence[BaseNode],
    then: Callable[[], None],
    row_ids: RowIds,
) -> None:
    """Vector rows of ``old_units`` -> ``new_units`` (embeddings ``new_emb``, one row each, keyed
    by ``row_ids``), docstore entries of ``old_nodes`` -> ``new_nodes``, then ``then()``; undone
    on failure."""
    old_unit_ids = [u.node_id for u in old_units]
    new_unit_ids = [u.node_id for u in new_units]
    old_emb = fetch_embeddings(vector_store, old_unit_ids, owner, row_ids=row_ids) if old_unit_ids else None
    old_doc_ids = {n.node_id for n in old_nodes}
    new_doc_ids = {n.node_id for n in new_nodes}
    add_nodes_to_docstore(docstore, new_nodes, owner)
    try:
        _delete_vectors(vector_store, old_unit_ids, owner, row_ids)
        try:
            if new_units:  # undoes its own partial writes
                add_nodes_to_vector_store(vector_store, new_units, new_emb, row_ids=row_ids)
            try:
                then()
            except Exception:
                remove_nodes(vector_store, None, new_unit_ids, row_ids)
                raise
        except Exception:
            _restore_vectors(vector_store, old_units, old_emb, row_ids)
            raise
    except Exception:
        remove_nodes(None, docstore, sorted(new_doc_ids - old_doc_ids), row_ids=row_ids)
        try:
            add_nodes_to_docstore(docstore, [n for n in old_nodes if n.node_id in new_doc_ids], owner)
        except Exception:  # pragma: no cover - the docstore went away; the original error is raised
            pass
        raise
    remove_nodes(None, docstore, [n.node_id for n in old_nodes if n.node_id not in new_doc_ids], row_ids=row_ids)


def open_for_build(storage_context: Any, embed_model: Any, kvstore: Any, namespace: Optional[str],
                   owner: str, reopen_hint: str) -> Tuple[BasePydanticVectorStore, BaseDocumentStore, Any, int, Any]:
    """Check, before anything is embedded, that the stores are reachable, empty and of the
    embedder's dimension, and that the kvstore namespace is free: ``(vector_store, docstore,
    model, dim, kv)``."""
    from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
    from llama_index_ext_causalrag.storage.kvstate import kv_state
    from llama_index_ext_causalrag.storage.persistence import embed_dim

    vector_store, docstore = storage_context.vector_store, storage_context.docstore
    model = resolve_embed_model(embed_model)
    dim = embed_dim(model)
    if check_vector_store(vector_store, dim, owner, missing_ok=True):  # else the first add creates it
        check_empty(vector_store, dim, owner, reopen_hint)
    check_docstore(docstore, owner)
    kv = kv_state(kvstore, namespace, vector_store, owner)
    if kv is not None:
        kv.check_free()
    return vector_store, docstore, model, dim, kv


def write_new_index(vector_store: BasePydanticVectorStore, docstore: BaseDocumentStore, nodes: Sequence[BaseNode],
                    units: Sequence[BaseNode], embeddings: np.ndarray, owner: str,
                    save: Callable[[], None], row_ids: RowIds) -> None:
    """``nodes`` into the docstore, ``units`` with ``embeddings`` into the vector store (rows
    keyed by ``row_ids``), then ``save()`` (the kvstore state); a failed step removes what the
    earlier ones wrote."""
    ids = [n.node_id for n in nodes]
    add_nodes_to_docstore(docstore, list(nodes), owner)
    try:
        add_nodes_to_vector_store(vector_store, list(units), embeddings, row_ids=row_ids)
    except Exception:
        remove_nodes(None, docstore, ids, row_ids=row_ids)
        raise
    try:
        save()
    except Exception:
        remove_nodes(vector_store, docstore, ids, row_ids)
        raise
