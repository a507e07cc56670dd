"""A toy store kind and its driver: what a new store adds to the package (this folder plus one
``register(TOY)`` line). Its stores are LlamaIndex's in-memory ones under their own names; the
driver offers bulk rows, one commit of an update's rows with the state head, a lock, error
classification and descriptions, and counts what it was asked to do."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.kvstore import SimpleKVStore
from llama_index.core.vector_stores import SimpleVectorStore

from llama_index_ext_causalrag.storage.drivers import StoreDriver


class ToyVectorStore(SimpleVectorStore):
    pass


class ToyDocumentStore(SimpleDocumentStore):
    pass


class ToyKVStore(SimpleKVStore):
    pass


class ToyOutage(Exception):
    """What the toy store raises when it is 'unreachable'."""


class _Commit:
    def __init__(
        self,
        driver: "ToyDriver",
        vector_store: Any,
        docstore: Any,
        kvstore: Any,
        collection: Optional[str],
        row_ids: Any,
    ) -> None:
        self.driver, self.vs, self.ds, self.kv, self.collection, self.row_ids = (
            driver,
            vector_store,
            docstore,
            kvstore,
            collection,
            row_ids,
        )

    def commit(
        self,
        new_nodes: Sequence[BaseNode],
        old_unit_ids: Sequence[str],
        new_units: Sequence[BaseNode],
        new_emb: Optional[np.ndarray],
        head: Optional[Dict[str, Any]],
    ) -> None:
        if self.driver.fail_commit:
            raise RuntimeError("the toy store refused the commit")
        self.driver.calls.append(("commit", len(new_units), head is not None))
        self.ds.add_documents(list(new_nodes), allow_update=True)
        if old_unit_ids:
            self.vs.delete_nodes(node_ids=self.row_ids.row_ids(list(old_unit_ids)))
        if new_units:
            self.vs.add([self.row_ids.to_row(n, row.tolist()) for n, row in zip(new_units, new_emb)])
        if head is not None:
            self.kv.put("head", head, collection=self.collection)


class ToyDriver(StoreDriver):
    name = "toy"

    def __init__(self) -> None:
        self.calls: List[tuple] = []
        self.fail_commit = False

    def owns(self, store: Any) -> bool:
        return isinstance(store, (ToyVectorStore, ToyDocumentStore, ToyKVStore))

    def lost_connection(self, error: BaseException) -> bool:
        return isinstance(error, ToyOutage)

    def describe(self, store: Any) -> Optional[str]:
        return f"{type(store).__name__} (toy, in memory)"

    def write_vectors(self, vector_store: Any, batches: Any, written: List[str]) -> bool:
        for nodes, embeddings in batches:
            rows = [n.model_copy(update={"embedding": row.tolist()}) for n, row in zip(nodes, embeddings)]
            written.extend(vector_store.add(rows))
            self.calls.append(("write_vectors", len(rows)))
        return True

    def vector_batch_size(self) -> Optional[int]:
        return 7

    def one_commit(
        self, vector_store: Any, docstore: Any, kvstore: Any, collection: Optional[str], row_ids: Any
    ) -> Optional[_Commit]:
        if not (self.owns(vector_store) and self.owns(docstore) and (kvstore is None or self.owns(kvstore))):
            return None
        return _Commit(self, vector_store, docstore, kvstore, collection, row_ids)


TOY = ToyDriver()
