"""MultiGranularityIndex on LlamaIndex's storage interfaces (a vector store and a docstore).

One vector store holds every unit of every granularity with its embedding; the granularity is
node metadata (``umg_granularity``) and each dense expert is a :class:`VectorStoreExpert`
filtered on it. The docstore holds the units, so parent promotion fetches parents from it.
BM25 stays in memory (bm25s) and ``persist(dir)`` writes it beside the store, with the unit
order and the build parameters; :func:`open_from_store` reopens the index from the three
without embedding anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Type

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from llama_index_ext_causalrag.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts.store import (
    VectorStoreExpert,
    add_nodes_to_vector_store,
    check_vector_store,
    describe_store,
    is_connection_error,
    stored_dim,
)
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.windows import GRANULARITY_KEY, units_by_granularity
from llama_index_ext_causalrag.persistence import check_embedder, embed_dim, embedder_params, open_persisted, persist_to

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

STORE_CLASS = "MultiGranularityIndex@store"
UNIT_IDS_FILE = "unit_ids.json"


def _dense_experts(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    embed_model: BaseEmbedding,
    granularities: Sequence[int],
) -> Dict[int, VectorStoreExpert]:
    return {
        int(g): VectorStoreExpert(
            vector_store, embed_model,
            filters=MetadataFilters(filters=[MetadataFilter(key=GRANULARITY_KEY, value=int(g))]),
            docstore=docstore, name=f"dense@{g}",
        )
        for g in granularities
    }


def _check_empty(vector_store: BasePydanticVectorStore, dim: int, owner: str) -> None:
    res = vector_store.query(VectorStoreQuery(query_embedding=[1.0] + [0.0] * (dim - 1), similarity_top_k=1))
    if res.ids or res.nodes:
        raise ValueError(
            f"{owner}: the vector store ({describe_store(vector_store)}) already holds nodes; build into an "
            "empty store (e.g. a new table_name), or reopen the index with MultiGranularityIndex.from_vector_store."
        )


def _check_docstore(docstore: BaseDocumentStore, owner: str) -> None:
    try:
        docstore.get_document("umg-reachability-probe", raise_error=False)
    except Exception as e:
        if is_connection_error(e):
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConnectionError(f"{owner}: cannot reach the docstore ({describe_store(docstore)}): {first}") from e
        raise


def build_in_store(
    cls: Type["MultiGranularityIndex"],
    documents: Sequence[Document],
    storage_context: Any,
    embed_model: Optional[BaseEmbedding] = None,
    **kwargs: Any,
) -> "MultiGranularityIndex":
    """``MultiGranularityIndex.from_documents(docs, storage_context=...)``: check the store is
    reachable, empty and of the embedder's dimension, build, then write units to the docstore
    and units + embeddings to the vector store (undone if the writing fails)."""
    owner = "MultiGranularityIndex.from_documents"
    vector_store = storage_context.vector_store
    docstore = storage_context.docstore
    model = resolve_embed_model(embed_model)
    dim = embed_dim(model)
    check_vector_store(vector_store, dim, owner)
    _check_empty(vector_store, dim, owner)
    _check_docstore(docstore, owner)
    mem = cls.from_documents(documents, embed_model=model, **kwargs)
    units = mem.units
    try:
        docstore.add_documents(units, allow_update=True)
    except Exception as e:
        if is_connection_error(e):
            first = str(e).strip().splitlines()[0]
            raise ConnectionError(f"{owner}: cannot write to the docstore ({describe_store(docstore)}): {first}") from e
        raise
    try:
        add_nodes_to_vector_store(vector_store, units, mem.embeddings)
    except Exception:
        for u in units:
            try:
                docstore.delete_document(u.node_id, raise_error=False)
            except Exception:  # pragma: no cover - the docstore went away too
                break
        raise
    bm25 = {g: e._bm25 for g, e in mem.sparse.items()}
    return _make(cls, units, vector_store, docstore, model, mem.parent_granularity, mem.embedding_mode,
                 mem.bm25_params, bm25, mem.preset if mem.preset != "custom" else mem.config, dim)


def _make(
    cls: Type["MultiGranularityIndex"],
    units: List[BaseNode],
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    model: BaseEmbedding,
    parent_granularity: Optional[int],
    embedding_mode: str,
    bm25_params: Dict[str, Any],
    bm25: Dict[int, Any],
    preset: Any,
    dim: int,
) -> "MultiGranularityIndex":
    dense = _dense_experts(vector_store, docstore, model, units_by_granularity(units))
    index = cls(units, np.zeros((len(units), 0), dtype=np.float32), model, parent_granularity, embedding_mode,
                bm25_params, _bm25=bm25, preset=preset, _dense=dense)
    index._state.docstore = docstore
    index._store = {"vector_store": vector_store, "dim": dim}
    return index


def fusion_over_store(index: "MultiGranularityIndex", experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
    """The fusion retriever, with each store expert asked for ``candidates_per_list`` units (an
    in-memory dense expert is scored in full and cut to that many)."""
    k = EntropyFusionRetriever(experts, **kwargs).candidates_per_list
    experts = {e: {g: (r.with_top_k(k) if isinstance(r, VectorStoreExpert) else r) for g, r in by_g.items()}
               for e, by_g in experts.items()}
    return EntropyFusionRetriever(experts, **kwargs)


def persist_store_index(index: "MultiGranularityIndex", persist_dir: str | Path) -> None:
    """``bm25/g{g}/``, ``unit_ids.json`` and ``params.json`` beside the stores (the embeddings are
    in the vector store, the units in the docstore)."""
    with persist_to(persist_dir, STORE_CLASS) as w:
        w.write_json(UNIT_IDS_FILE, [u.node_id for u in index._state.units])
        for g, expert in index.sparse.items():
            expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
        w.rows["units"] = len(index._state.units)
        w.params.update(
            granularities=list(index.granularities),
            parent_granularity=index.parent_granularity,
            embedding_mode=index.embedding_mode,
            bm25_params=index.bm25_params,
            preset=index.config.model_dump() if index.preset == "custom" else index.preset,
            vector_store=describe_store(index._store["vector_store"]),
            **embedder_params(index._embed_model, index._store["dim"]),
        )


def open_from_store(
    cls: Type["MultiGranularityIndex"],
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    persist_dir: str | Path,
    embed_model: Optional[BaseEmbedding] = None,
) -> "MultiGranularityIndex":
    """Reopen an index built with ``from_documents(docs, storage_context=...)`` and persisted to
    ``persist_dir``: units from ``docstore``, BM25 from ``persist_dir``, embeddings stay in
    ``vector_store``; ``embed_model`` only embeds queries."""
    import bm25s

    from llama_index_ext_causalrag.multigranularity.index import _load_preset

    owner = "MultiGranularityIndex.from_vector_store"
    ix = open_persisted(persist_dir, STORE_CLASS, "index.persist(dir) on an index built with storage_context=")
    p = ix.params
    model = resolve_embed_model(embed_model)
    check_embedder(p, model, ix.dir, "MultiGranularityIndex")
    dim = int(p["embed_dim"])
    have = stored_dim(vector_store)
    if have is not None and have != dim:
        raise ValueError(
            f"{owner}: the vector store ({describe_store(vector_store)}) holds {have}-dimensional embeddings, "
            f"the index in {ix.dir} was built with {dim}; pass the vector store the index was built into."
        )
    check_vector_store(vector_store, dim, owner)
    ids = ix.json(UNIT_IDS_FILE)
    ix.check_rows("units", len(ids))
    try:
        units = docstore.get_nodes(ids)
    except ValueError as e:
        raise ValueError(f"{owner}: the docstore lacks units of the index in {ix.dir} ({e}); pass its docstore.") from e
    bm25 = {g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
            for g in p["granularities"]}
    return _make(cls, list(units), vector_store, docstore, model, p["parent_granularity"], p["embedding_mode"],
                 p["bm25_params"], bm25, _load_preset(p.get("preset")), dim)
