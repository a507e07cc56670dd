"""The LlamaIndex vector store of a :class:`MultiGranularityIndex` served by Milvus.

:class:`MilvusUnits` is what the index's writers (build, insert, refresh, delete, and the
journal that undoes an interrupted write) write unit rows to: each row goes to the collections
of its granularities (:class:`~.served.MilvusLists`). A user passes it, or LlamaIndex's
``MilvusVectorStore`` (taken by its client: :func:`milvus_units`), in
``StorageContext.from_defaults(vector_store=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Sequence

from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from llama_index_ext_causalrag.storage.ann import ANN
from llama_index_ext_causalrag.storage.drivers import error_chain
from llama_index_ext_causalrag.storage.milvus.filters import milvus_filter
from llama_index_ext_causalrag.storage.milvus.served import MilvusLists
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY


def connect(uri: str, token: str = "", db_name: str = "") -> Any:
    """A pymilvus ``MilvusClient`` for ``uri``; an unreachable server is a ``ConnectionError`` naming it."""
    try:
        from pymilvus import MilvusClient
    except ImportError as e:  # pragma: no cover - the extra is not installed
        raise ImportError('Milvus needs pymilvus: pip install "llama-index-ext-causalrag[milvus]"') from e
    kwargs = {"uri": uri, "token": token, **({"db_name": db_name} if db_name else {})}
    try:
        try:
            return MilvusClient(**kwargs)
        except Exception as e:
            if not any("too many pings" in str(c).lower() for c in error_chain(e)):
                raise
            # pymilvus checks a shared connection idle for 30 s before handing it out; a server that
            # took pymilvus's 10 s keepalive pings for too many (milvus-lite's C++ server) closes it
            # as that check goes out (GOAWAY too_many_pings): the second client gets a new one
            return MilvusClient(**kwargs)
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConnectionError(
            _local_file_problem(uri, first)
            or (
                f"cannot reach Milvus at {uri!r} ({first}); start the server (e.g. Milvus Standalone, or "
                "`milvus_lite/lib/milvus DB_FILE 127.0.0.1:19530 ERROR` of milvus-lite 2.5) or pass the URI of a running one."
            )
        ) from e


def _local_file_problem(uri: str, error: str) -> str:
    """Why a Milvus Lite file ``uri`` did not open, when its layout says: milvus-lite 3.x writes a
    folder, 2.x (the C++ engine) an SQLite file, and neither reads the other's."""
    import importlib.metadata

    if "://" in uri or not uri.endswith(".db"):
        return ""
    path = Path(uri)
    try:
        have = importlib.metadata.version("milvus-lite")
    except importlib.metadata.PackageNotFoundError:
        have = "none"
    if path.is_dir() and not have.startswith("3."):
        return (
            f"the Milvus Lite file {uri!r} is a folder, written by milvus-lite 3.x (a pure-Python server), which "
            f"milvus-lite {have} (Milvus's C++ engine) cannot read ({error}); rebuild the index into a new file "
            '(a new uri), or read this one with pip install "milvus-lite>=3.2,<4".'
        )
    if path.is_file() and have.startswith("3."):
        return (
            f"the Milvus Lite file {uri!r} was written by milvus-lite 2.x (Milvus's C++ engine), which milvus-lite "
            f'{have} cannot read ({error}); pip install "milvus-lite==2.5.1" (the milvus extra) to read it, '
            "or rebuild the index into a new file."
        )
    return ""


class MilvusUnits(BasePydanticVectorStore):
    """The vector store of a :class:`MultiGranularityIndex` served by Milvus: a unit row goes to
    the collections ``{collection_name}__g{g}`` of its granularities (:class:`MilvusLists`).

    Pass it (or LlamaIndex's ``MilvusVectorStore``, whose ``uri``, ``token`` and
    ``collection_name`` it takes) in ``StorageContext.from_defaults(vector_store=...)``."""

    stores_text: bool = False
    uri: str = ""  # "": the client given (a MilvusVectorStore's)
    token: str = ""
    collection_name: str = "causalrag"
    embed_dim: Optional[int] = None
    _lists: Optional[MilvusLists] = PrivateAttr(default=None)
    _client: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "MilvusUnits"

    @property
    def table_name(self) -> str:  # the kvstore namespace an index defaults to
        return self.collection_name

    @property
    def connection_string(self) -> str:  # what error messages name
        return self.uri or "the MilvusVectorStore client"

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.uri, self.token)
        return self._client

    def _reconnect(self) -> Any:
        """A new client (the given one of a MilvusVectorStore reconnects on its own)."""
        if self.uri:
            self._client = connect(self.uri, self.token)
        return self.client

    def lists(
        self, granularities: Optional[Sequence[int]] = None, dim: Optional[int] = None, ann: Optional[ANN] = None
    ) -> MilvusLists:
        """The collections of ``granularities`` (the index's, of dimension ``dim``, with ``ann``),
        the same object while they stay the same; None: the ones held, else those on the server."""
        if granularities is None:
            if self._lists is None:
                gs = MilvusLists(self.client, self.collection_name, (), 0).existing()
                self._lists = self._new_lists(gs, int(self.embed_dim or 0), None)
            return self._lists
        gs, d, have = sorted(int(g) for g in granularities), int(dim or self.embed_dim or 0), self._lists
        if have is None or (have.granularities, have.dim, have.ann) != (gs, d, ann):
            self._lists = self._new_lists(gs, d, ann)
        return self._lists

    def _new_lists(self, granularities: Sequence[int], dim: int, ann: Optional[ANN]) -> MilvusLists:
        return MilvusLists(
            self.client, self.collection_name, granularities, dim, ann, uri=self.uri, reconnect=self._reconnect
        )

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[str]:
        self.lists().insert(nodes)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self.lists().delete_document(ref_doc_id)

    def delete_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **kwargs: Any
    ) -> None:
        if filters is not None:
            raise ValueError("MilvusUnits.delete_nodes: pass node_ids; the index deletes its units by id.")
        self.lists().delete(list(node_ids or []))

    def get_nodes(
        self, node_ids: Optional[List[str]] = None, filters: Optional[MetadataFilters] = None, **kwargs: Any
    ) -> List[BaseNode]:
        rows = self.lists().get(list(node_ids or []))
        return [
            TextNode(id_=i, embedding=[float(x) for x in r["embedding"]], metadata={**r["metadata"], NODE_ID_KEY: i})
            for i, r in rows.items()
        ]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """Dense search over the finest granularity's collection (the index queries its lists itself)."""
        lists = self.lists()
        if not lists.granularities:
            return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])
        ids, scores, _ = lists._search(
            "dense",
            lists.granularities[0],
            lists.query_vector(query.query_embedding or []),
            query.similarity_top_k,
            milvus_filter(query.filters),
        )
        return VectorStoreQueryResult(
            nodes=[TextNode(id_=i, metadata={NODE_ID_KEY: i}) for i in ids], similarities=scores, ids=ids
        )


def is_milvus(vector_store: Any) -> bool:
    """LlamaIndex's ``MilvusVectorStore`` or our :class:`MilvusUnits`."""
    return isinstance(vector_store, MilvusUnits) or type(vector_store).__name__ == "MilvusVectorStore"


def milvus_units(vector_store: Any) -> Any:
    """``vector_store`` as :class:`MilvusUnits` if it is a Milvus store, else unchanged."""
    if isinstance(vector_store, MilvusUnits) or type(vector_store).__name__ != "MilvusVectorStore":
        return vector_store
    # its uri field keeps the class default, not the URI it was given: its client is the connection
    units = MilvusUnits(collection_name=str(vector_store.collection_name), embed_dim=getattr(vector_store, "dim", None))
    units._client = vector_store.client
    return units


__all__ = ["MilvusUnits", "connect", "is_milvus", "milvus_units"]
