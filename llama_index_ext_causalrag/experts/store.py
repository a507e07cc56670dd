"""VectorStoreExpert: the dense expert over any LlamaIndex vector store (the writer that fills one,
``add_nodes_to_vector_store``, is in :mod:`llama_index_ext_causalrag.storage.stores`).

Same contract as :class:`DenseExpert`: cosine scores (the store's similarity, which for
``SimpleVectorStore`` and ``PGVectorStore`` is the cosine of the raw vectors, so of their unit
normalisations), ranked by (score desc, node id desc), annotated with the expert's name.
:class:`~llama_index_ext_causalrag.experts.store_text.VectorStoreTextExpert` is its lexical twin.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts.dense import TIE_MARGIN, _Desc
from llama_index_ext_causalrag.storage.row_ids import BY_NODE_ID, RowIds
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import check_query, check_top_k


def ranked_nodes(
    result: VectorStoreQueryResult,
    docstore: Optional[BaseDocumentStore],
    top_k: int,
    name: str,
    positive: bool = False,
    row_ids: RowIds = BY_NODE_ID,
) -> List[NodeWithScore]:
    """The top ``top_k`` of a query result by (score desc, node id desc), annotated with ``name``;
    nodes from the result (their row ids mapped back to node ids by ``row_ids``), else from
    ``docstore`` by id; ``positive``: scores <= 0 dropped."""
    if result.nodes is not None:
        nodes = [row_ids.from_row(n) for n in result.nodes]
        ids = [n.node_id for n in nodes]
    else:
        ids = [row_ids.node_id(i) for i in result.ids or []]
        nodes = docstore.get_nodes(ids) if ids else []  # type: ignore[union-attr]
    sims = [float(s) for s in (result.similarities or [0.0] * len(nodes))]
    keep = [j for j in range(len(nodes)) if sims[j] > 0 or not positive]
    order = sorted(keep, key=lambda j: (-sims[j], _Desc(ids[j])))[:top_k]
    return [
        annotate(NodeWithScore(node=nodes[j], score=sims[j]), expert=name, scores={name: sims[j]}, rank=r)
        for r, j in enumerate(order, start=1)
    ]


def require_docstore(vector_store: BasePydanticVectorStore, docstore: Optional[BaseDocumentStore]) -> None:
    if not getattr(vector_store, "stores_text", False) and docstore is None:
        raise ValueError(
            f"{type(vector_store).__name__} keeps no node text; pass docstore= holding the nodes "
            "(e.g. StorageContext.docstore)."
        )


class VectorStoreExpert(BaseRetriever):
    """Dense top-k from any LlamaIndex vector store, optionally restricted by ``filters``
    (e.g. ``MetadataFilters(filters=[MetadataFilter(key="umg_granularity", value=4)])``).

    The query is embedded by ``embed_model`` (or taken from ``query_bundle.embedding``). A
    store that keeps no text (``SimpleVectorStore``) needs ``docstore`` to turn ids into
    nodes, as LlamaIndex's ``VectorIndexRetriever`` does. ``row_ids`` (:class:`RowIds`) maps the
    store's row ids back to node ids, for an index whose rows are not keyed by node id.
    """

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        embed_model: Optional[BaseEmbedding] = None,
        similarity_top_k: int = 10,
        filters: Optional[MetadataFilters] = None,
        docstore: Optional[BaseDocumentStore] = None,
        name: str = "dense",
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        row_ids: Optional[RowIds] = None,
    ) -> None:
        check_top_k(similarity_top_k)
        require_docstore(vector_store, docstore)
        self._vector_store = vector_store
        self._embed_model = resolve_embed_model(embed_model)
        self._docstore = docstore
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.name = name
        self._row_ids = row_ids or BY_NODE_ID
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def vector_store(self) -> BasePydanticVectorStore:
        return self._vector_store

    @property
    def embed_model(self) -> BaseEmbedding:
        return self._embed_model

    def with_top_k(self, similarity_top_k: int) -> "VectorStoreExpert":
        """The same expert with another ``similarity_top_k``."""
        return VectorStoreExpert(
            self._vector_store,
            self._embed_model,
            similarity_top_k,
            self.filters,
            self._docstore,
            self.name,
            callback_manager=self.callback_manager,
            row_ids=self._row_ids,
        )

    def embed_query(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is None:
            query_bundle.embedding = self._embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)

    def _query(self, qvec: np.ndarray) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_embedding=[float(x) for x in qvec],
            similarity_top_k=self.similarity_top_k + TIE_MARGIN,
            filters=self.filters,
        )

    def _to_nodes(self, result: VectorStoreQueryResult) -> List[NodeWithScore]:
        return ranked_nodes(result, self._docstore, self.similarity_top_k, self.name, row_ids=self._row_ids)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "VectorStoreExpert")
        return self._to_nodes(self._vector_store.query(self._query(self.embed_query(query_bundle))))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "VectorStoreExpert")
        if query_bundle.embedding is None:
            query_bundle.embedding = await self._embed_model.aget_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        qvec = np.asarray(query_bundle.embedding, dtype=np.float32)
        return self._to_nodes(await self._vector_store.aquery(self._query(qvec)))
