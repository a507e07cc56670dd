"""VectorStoreTextExpert: the lexical expert served by a vector store's own full-text search,
in place of :class:`SparseExpert`'s in-memory BM25 (bm25s).

Same contract as :class:`VectorStoreExpert`: the store's score (``PGVectorStore``: ``ts_rank``),
ranked by (score desc, node id desc), annotated with the expert's name, restricted by
``filters``. :func:`check_text_search` refuses, before any work, a store that has none.
"""

from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.experts.store import ranked_nodes, require_docstore
from llama_index_ext_causalrag.storage.drivers import driver_for, drivers
from llama_index_ext_causalrag.storage.row_ids import BY_NODE_ID, RowIds
from llama_index_ext_causalrag.storage.stores import (
    describe_store,
    first_line,
    is_connection_error,
)
from llama_index_ext_causalrag.validation import caller, check_query, check_top_k


def text_search_hint() -> str:
    """How to make a store whose query(mode=TEXT_SEARCH) is a lexical search, as the registered
    store drivers say (``PGVectorStore(..., hybrid_search=True, ...)``)."""
    hints = [h for h in (d.text_search_hint() for d in drivers()) if h]
    return " or ".join(hints) or "a vector store with full-text search"


def has_text_search(vector_store: Any) -> bool:
    """True if ``vector_store`` answers ``VectorStoreQueryMode.TEXT_SEARCH`` with a lexical
    search over its node text, as its driver says (``PGVectorStore`` made with ``hybrid_search=True``)."""
    return driver_for(vector_store).text_search(vector_store) is True


def check_text_search(vector_store: BasePydanticVectorStore) -> None:
    """Fail before any work if ``vector_store`` cannot serve the lexical expert: no full-text
    search, or a table without its text-search column. Errors name the public call (:func:`caller`)."""
    owner = caller("VectorStoreTextExpert")
    desc = describe_store(vector_store)
    if not has_text_search(vector_store):
        raise ValueError(
            f"{owner}: lexical='store' needs a vector store with full-text search, got {desc} (supported: "
            f"{text_search_hint()}); create the store that way or use lexical='bm25' (bm25s, the default)."
        )
    try:
        vector_store.query(
            VectorStoreQuery(query_str="probe", mode=VectorStoreQueryMode.TEXT_SEARCH, similarity_top_k=1)
        )
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(f"{owner}: cannot reach the vector store ({desc}): {first_line(e)}") from e
        raise ValueError(
            f"{owner}: the vector store ({desc}) rejects a full-text query ({first_line(e)}); its table was "
            "probably created without hybrid_search=True: use a new table, or lexical='bm25'."
        ) from e


class VectorStoreTextExpert(BaseRetriever):
    """Lexical top-k served by the vector store's full-text search
    (``VectorStoreQuery(query_str=..., mode=TEXT_SEARCH)``), optionally restricted by
    ``filters``, as :class:`VectorStoreExpert` is.

    ``PGVectorStore(hybrid_search=True)``: the query's words, OR-ed, as ``to_tsquery`` of the
    store's ``text_search_config``, over a generated ``tsvector`` column of the node text; the
    score is ``ts_rank`` (term frequency and proximity, no document frequency, no length
    normalisation). Only matching nodes come back, all with positive scores. Scores are on
    another scale than BM25's; :class:`EntropyFusionRetriever` min-max normalises every list,
    so only their order and spread count. Refuses a store without full-text search.
    """

    def __init__(
        self,
        vector_store: BasePydanticVectorStore,
        similarity_top_k: int = 10,
        filters: Optional[MetadataFilters] = None,
        docstore: Optional[BaseDocumentStore] = None,
        name: str = "sparse",
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        row_ids: Optional[RowIds] = None,
    ) -> None:
        check_top_k(similarity_top_k)
        if not has_text_search(vector_store):
            raise ValueError(
                f"VectorStoreTextExpert needs a vector store with full-text search, got "
                f"{describe_store(vector_store)}; use {text_search_hint()}, or SparseExpert (bm25s) instead."
            )
        require_docstore(vector_store, docstore)
        self._vector_store = vector_store
        self._docstore = docstore
        self._row_ids = row_ids or BY_NODE_ID
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self.name = name
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def vector_store(self) -> BasePydanticVectorStore:
        return self._vector_store

    def with_top_k(self, similarity_top_k: int) -> "VectorStoreTextExpert":
        """The same expert with another ``similarity_top_k``."""
        return VectorStoreTextExpert(
            self._vector_store,
            similarity_top_k,
            self.filters,
            self._docstore,
            self.name,
            callback_manager=self.callback_manager,
            row_ids=self._row_ids,
        )

    def _query(self, query_str: str) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_str=query_str,
            mode=VectorStoreQueryMode.TEXT_SEARCH,
            similarity_top_k=self.similarity_top_k + TIE_MARGIN,
            filters=self.filters,
        )

    def _to_nodes(self, result: VectorStoreQueryResult) -> List[NodeWithScore]:
        return ranked_nodes(
            result, self._docstore, self.similarity_top_k, self.name, positive=True, row_ids=self._row_ids
        )

    @staticmethod
    def _has_words(query_bundle: QueryBundle) -> bool:
        return any(ch.isalnum() for ch in query_bundle.query_str)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "VectorStoreTextExpert")
        if not self._has_words(query_bundle):
            return []
        return self._to_nodes(self._vector_store.query(self._query(query_bundle.query_str)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "VectorStoreTextExpert")
        if not self._has_words(query_bundle):
            return []
        return self._to_nodes(await self._vector_store.aquery(self._query(query_bundle.query_str)))
