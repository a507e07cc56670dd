"""How a store-backed index names its rows in a vector store.

Node ids are readable strings (``doc0::s0-2``, ``rfc9000::4.2``); some vector stores accept only
UUIDs or unsigned integers as row ids (Qdrant; Weaviate and others restrict them too). So an
index names its rows by a scheme, recorded in its persisted parameters (``params.json``, also
the kvstore's copy) under :data:`PARAM_KEY`:

* ``"uuid5"`` (every index built by this version): node ``n`` is stored under
  ``uuid5(ROW_NAMESPACE, n.node_id)``, a UUID string every store accepts, with its own id in
  metadata :data:`NODE_ID_KEY` (excluded from embed and LLM text). Nodes and ids the store
  answers are mapped back, so the docstore, the retrievers' ``NodeWithScore`` and everything a
  user sees keep the readable ids;
* ``"node_id"``: rows under the node ids themselves, as LlamaIndex's own ``VectorStoreIndex``
  writes them (:data:`BY_NODE_ID`: what ``VectorStoreExpert`` reads from a store it did not
  write); parameters that name no scheme mean this one.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional

from llama_index.core.schema import BaseNode

NODE_ID_KEY = "causalrag_node_id"
PARAM_KEY = "vector_store_ids"
UUID5 = "uuid5"
NODE_ID = "node_id"
SCHEMES = (UUID5, NODE_ID)
NEW_INDEX_SCHEME = UUID5
# Fixed for good: another namespace would give other row ids and orphan every stored row.
ROW_NAMESPACE = uuid.UUID("6f1c1d6e-6a1e-4c59-9d55-2b1f0b8a4c11")


def row_id(node_id: str, scheme: str = UUID5) -> str:
    """The vector-store id of node ``node_id`` under ``scheme``."""
    return str(uuid.uuid5(ROW_NAMESPACE, node_id)) if scheme == UUID5 else node_id


def _without(keys: List[str], key: str) -> List[str]:
    return [k for k in keys if k != key]


class RowIds:
    """Node ids <-> vector-store row ids of one index (scheme ``"uuid5"`` or ``"node_id"``).

    ``node_ids``: the index's nodes, to name the rows of a store that answers ids without
    nodes (``SimpleVectorStore``); the reverse map is built on the first such answer.
    """

    def __init__(self, scheme: str, node_ids: Optional[Iterable[str]] = None) -> None:
        if scheme not in SCHEMES:
            raise ValueError(
                f"{PARAM_KEY} must be one of {SCHEMES}, got {scheme!r}; the index's params.json names how its "
                "vector-store rows are keyed: rebuild the index if it was edited."
            )
        self.scheme = scheme
        self._known = node_ids
        self._back: Optional[Dict[str, str]] = None

    @classmethod
    def for_new_index(cls) -> "RowIds":
        """The scheme of an index this version builds (:data:`NEW_INDEX_SCHEME`)."""
        return cls(NEW_INDEX_SCHEME)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], node_ids: Optional[Iterable[str]] = None) -> "RowIds":
        """The scheme a persisted index names; none named is ``"node_id"`` (:meth:`params` records nothing for it)."""
        return cls(params.get(PARAM_KEY, NODE_ID), node_ids)

    def params(self) -> Dict[str, str]:
        """What ``params.json`` records: ``{PARAM_KEY: "uuid5"}``; nothing for ``"node_id"``, so the
        files of an index keyed by node ids stay as the versions that wrote it wrote them."""
        return {PARAM_KEY: self.scheme} if self.maps else {}

    def with_nodes(self, node_ids: Iterable[str]) -> "RowIds":
        """The same scheme, for an index holding ``node_ids``."""
        return RowIds(self.scheme, node_ids)

    @property
    def maps(self) -> bool:
        """True if row ids differ from node ids."""
        return self.scheme == UUID5

    def row_id(self, node_id: str) -> str:
        return row_id(node_id, self.scheme)

    def row_ids(self, node_ids: Iterable[str]) -> List[str]:
        return [row_id(i, self.scheme) for i in node_ids]

    def node_id(self, rid: str) -> str:
        """The node id of row ``rid`` (``rid`` itself if it is not a row of the known nodes)."""
        if not self.maps:
            return rid
        if self._back is None:
            self._back = {row_id(i): i for i in self._known or ()}
        return self._back.get(rid, rid)

    def to_row(self, node: BaseNode, embedding: Optional[List[float]]) -> BaseNode:
        """A copy of ``node`` with ``embedding``, as the store keeps it (``node`` is not modified)."""
        if not self.maps:
            return node.model_copy(update={"embedding": embedding})
        return node.model_copy(
            update={
                "id_": self.row_id(node.node_id),
                "embedding": embedding,
                "metadata": {**node.metadata, NODE_ID_KEY: node.node_id},
                "excluded_embed_metadata_keys": [
                    *_without(node.excluded_embed_metadata_keys, NODE_ID_KEY),
                    NODE_ID_KEY,
                ],
                "excluded_llm_metadata_keys": [*_without(node.excluded_llm_metadata_keys, NODE_ID_KEY), NODE_ID_KEY],
            }
        )

    def from_row(self, node: BaseNode) -> BaseNode:
        """The node the store answers, under its own id and without :data:`NODE_ID_KEY`."""
        if not self.maps:
            return node
        if NODE_ID_KEY not in node.metadata:
            nid = self.node_id(node.node_id)
            return node if nid == node.node_id else node.model_copy(update={"id_": nid})
        metadata = dict(node.metadata)
        nid = str(metadata.pop(NODE_ID_KEY))
        return node.model_copy(
            update={
                "id_": nid,
                "metadata": metadata,
                "excluded_embed_metadata_keys": _without(node.excluded_embed_metadata_keys, NODE_ID_KEY),
                "excluded_llm_metadata_keys": _without(node.excluded_llm_metadata_keys, NODE_ID_KEY),
            }
        )


# rows keyed by node id, as LlamaIndex's VectorStoreIndex writes them
BY_NODE_ID = RowIds(NODE_ID)

__all__ = ["BY_NODE_ID", "NEW_INDEX_SCHEME", "NODE_ID_KEY", "PARAM_KEY", "RowIds", "SCHEMES", "row_id"]
