"""A :class:`MultiGranularityIndex` served by Milvus: every list answered by the server.

:class:`MilvusBackend` is :class:`~.served.ServedBackend` with the lists in Milvus collections
(:class:`~llama_index_ext_causalrag.storage.milvus.served.MilvusLists`, one per granularity,
dense and BM25 each) instead of PostgreSQL tables: the same writes (journaled in the kvstore,
undone after a crash), the same stateless open (parameters, then one check that the collections
exist), the same query (:class:`~.served.ServedSource`: one search per list, sent at once, then
the kept units and their parents from the docstore, any LlamaIndex docstore).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple, Type

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_ext_causalrag.multigranularity.served import (OWNER, REOPEN, STORE_CLASS, ServedBackend, ServedState,
                                                                  bm25_k1_b)
from llama_index_ext_causalrag.multigranularity.state import index_params
from llama_index_ext_causalrag.storage.kvstate import KVState
from llama_index_ext_causalrag.storage.milvus.served import MILVUS, MilvusLists
from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits, milvus_units
from llama_index_ext_causalrag.storage.persistence import embedder_params, persist_to
from llama_index_ext_causalrag.storage.ann import HNSW
from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
from llama_index_ext_causalrag.storage.stores import describe_store
from llama_index_ext_causalrag.storage.sync import open_for_build

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex


class MilvusBackend(ServedBackend):
    """Units as rows of Milvus collections (one per granularity) and in a docstore; lists on the server."""

    def __init__(self, vector_store: MilvusUnits, docstore: BaseDocumentStore, dim: int,
                 kv: Optional[KVState] = None, ann: Optional[HNSW] = None, row_ids: Optional[RowIds] = None) -> None:
        super().__init__(vector_store, docstore, dim, kv=kv, ann=ann, row_ids=row_ids or RowIds(NODE_ID))
        self.layout = MILVUS

    def tables_for(self, granularities: Sequence[int]) -> MilvusLists:  # type: ignore[override]
        self.tables = self.vector_store.lists(granularities, self.dim, self.ann)  # type: ignore[attr-defined]
        return self.tables  # type: ignore[return-value]

    def write(self, index: "MultiGranularityIndex", state: ServedState, embeddings: Any = None) -> None:
        self.tables_for(list(state.by_g)).bm25(*bm25_k1_b(index.bm25_params))
        super().write(index, state, embeddings)

    def write_folder(self, index: "MultiGranularityIndex", st: ServedState, persist_dir: "str | Path") -> None:
        """``params.json`` only: Milvus holds the units' vectors and every list, the docstore the nodes."""
        vs = self.vector_store
        with persist_to(persist_dir, STORE_CLASS) as w:
            w.params.update(
                lexical="bm25", store_layout=MILVUS, ann=self.ann.params() if self.ann is not None else None,
                **index_params(index, list(st.by_g)), vector_store=describe_store(vs),
                milvus_collection=getattr(vs, "collection_name", None), **embedder_params(index._embed_model, self.dim),
            )
            w.params.update(self.row_ids.params())
            if index._built_with is not None:
                w.params["embed_model"] = index._built_with

    def describe(self) -> str:
        kv = f", kvstore {self.kv.describe()}" if self.kv is not None else ""
        return (f"served by Milvus: {self.tables.describe() if self.tables is not None else describe_store(self.vector_store)}, "
                f"docstore {describe_store(self.docstore)}{kv}")

    @classmethod
    def for_build(cls, storage_context: Any, embed_model: Optional[BaseEmbedding], kvstore: Any,  # type: ignore[override]
                  namespace: Optional[str], ann: Optional[HNSW] = None) -> Tuple["MilvusBackend", BaseEmbedding]:
        """Check the server is reachable, the collections empty and the docstore reachable, before
        anything is embedded: the backend of a new index served by ``storage_context``'s Milvus store."""
        owner = f"{OWNER}.from_documents"
        HNSW.check_arg(ann, owner)
        units = milvus_units(storage_context.vector_store)
        stores = SimpleNamespace(vector_store=units, docstore=storage_context.docstore)
        vector_store, docstore, model, dim, kv = open_for_build(stores, embed_model, kvstore, namespace, owner, REOPEN)
        return cls(vector_store, docstore, dim, kv=kv, ann=ann), model  # type: ignore[arg-type]

    @classmethod
    def open(cls, index_cls: Type["MultiGranularityIndex"], params: Dict[str, Any], where: str,  # type: ignore[override]
             vector_store: Any, docstore: BaseDocumentStore, model: BaseEmbedding,
             kv: Optional[KVState], ann: Optional[HNSW]) -> "MultiGranularityIndex":
        """The index whose parameters are ``params``: its collections checked, nothing read per unit."""
        if not isinstance(vector_store, MilvusUnits):  # StoresBackend.open converted a MilvusVectorStore
            raise ValueError(f"{REOPEN}: the index in {where} is served by Milvus; pass a MilvusVectorStore "
                             f"(or MilvusUnits) of collection {params.get('milvus_collection')!r}, got "
                             f"{describe_store(vector_store)}.")
        backend = cls(vector_store, docstore, int(params["embed_dim"]), kv=kv,
                      ann=HNSW.for_reopen(ann, params, REOPEN, where), row_ids=RowIds.from_params(params))
        tables = backend.tables_for(params["granularities"])
        missing = tables.missing()
        if missing:
            raise ValueError(
                f"{REOPEN}: {tables.describe()} lack {', '.join(missing)}; the index in {where} was served from them. "
                "Pass the MilvusVectorStore (URI and collection_name) it was built into, or rebuild it."
            )
        tables.check_ann()
        return index_cls._served(backend, ServedState(params["granularities"], docstore), model, params)


__all__ = ["MilvusBackend"]
