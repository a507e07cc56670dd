"""The Milvus driver (:class:`MilvusDriver`): which errors mean Milvus is unreachable, and where
a Milvus store lives. Milvus has no transactions across collections, so an update's rows are
committed before its state head (see docs/stores.md, "What a reader sees")."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from llama_index_ext_causalrag.storage.drivers import StoreDriver
from llama_index_ext_causalrag.storage.milvus.served import MILVUS, WRITE_BATCH, MilvusLists
from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits, milvus_units
from llama_index_ext_causalrag.validation import caller

_UNREACHABLE = re.compile(r"Fail connecting to server|server unavailable|StatusCode\.UNAVAILABLE", re.I)
_CLASSES = ("MilvusVectorStore", "MilvusUnits")


class MilvusDriver(StoreDriver):
    name = "milvus"

    def owns(self, store: Any) -> bool:
        return type(store).__name__ in _CLASSES

    def lost_connection(self, error: BaseException) -> bool:
        return type(error).__name__ == "MilvusException" and bool(_UNREACHABLE.search(str(error)))

    def describe(self, store: Any) -> Optional[str]:
        url = getattr(store, "connection_string", None)
        if not url:
            return None
        table = getattr(store, "table_name", None)
        return f"{type(store).__name__} at {url}" + (f", table {table!r}" if table else "")

    # ---- bulk rows ----------------------------------------------------------------------------------
    def write_vectors(self, vector_store: Any, batches: Any, written: List[str]) -> bool:
        """Each batch into the collections, the embeddings taken from the array (not as Python lists)."""
        if not isinstance(vector_store, MilvusUnits):
            return False
        lists = vector_store.lists()
        for nodes, embeddings in batches:
            lists.insert(nodes, embeddings)
            written.extend(n.node_id for n in nodes)
        return True

    def vector_batch_size(self) -> Optional[int]:
        return WRITE_BATCH

    # ---- list layouts -------------------------------------------------------------------------------
    layouts = served_layouts = (MILVUS,)
    node_id_rows = True

    def units_store(self, vector_store: Any) -> Any:
        return milvus_units(vector_store)

    def new_layout(self, vector_store: Any, lexical: str, dim: int, ann: Any) -> str:
        """``"milvus"``: every list answered by the server (one collection per granularity)."""
        owner = caller("MultiGranularityIndex")
        if lexical != "bm25":
            raise ValueError(
                f"{owner}: lexical={lexical!r}: an index served by Milvus computes BM25 on the server; "
                "leave lexical='bm25'."
            )
        return MILVUS

    def check_ann(self, ann: Any, vector_store: Any) -> None:
        """Milvus builds either (HNSW or IVF_FLAT) on each collection: any settings do (Milvus Lite
        refuses HNSW when the first collection is created, :meth:`MilvusLists.create`)."""

    def served_lists(
        self,
        vector_store: Any,
        granularities: Sequence[int],
        dim: int,
        ann: Any,
        bm25: Tuple[float, float],
        saved: Optional[Dict[str, Any]],
        scores: Optional[str] = None,  # Milvus scores its own BM25 lists: one way
    ) -> MilvusLists:
        owner = caller("MultiGranularityIndex")
        if not isinstance(vector_store, MilvusUnits):
            collection = (saved or {}).get("milvus_collection")
            raise ValueError(
                f"{owner}: the index is served by Milvus; pass a MilvusVectorStore (or MilvusUnits) of "
                f"collection {collection!r}, got {type(vector_store).__name__}."
            )
        lists = vector_store.lists(granularities, dim, ann)
        lists.bm25(*bm25)
        return lists


MILVUS_DRIVER = MilvusDriver()

__all__ = ["MILVUS_DRIVER", "MilvusDriver"]
