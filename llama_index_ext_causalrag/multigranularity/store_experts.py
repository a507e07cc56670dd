"""The experts of a :class:`MultiGranularityIndex` over LlamaIndex's stores.

One vector store holds every unit of every granularity with its embedding; the granularity is
node metadata (``umg_granularity``) and each dense expert is a :class:`VectorStoreExpert`
filtered on it. The docstore holds the units, so parent promotion fetches parents from it.
The sparse experts are BM25 in memory (bm25s; ``lexical="bm25"``, the default) or, with
``lexical="store"``, :class:`VectorStoreTextExpert` s: the vector store's full-text search,
filtered the same way (no BM25 is built or stored). The index's storage on the stores (build,
reopen, update, persist) is :class:`~llama_index_ext_causalrag.multigranularity.backend.StoresBackend`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Literal, Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_causalrag.choices import check_choice, choices_of
from llama_index_ext_causalrag.experts.store import VectorStoreExpert
from llama_index_ext_causalrag.experts.store_text import VectorStoreTextExpert, check_text_search
from llama_index_ext_causalrag.multigranularity.lists import GranularityListExpert, TablesSource
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.source import ExpertSource
from llama_index_ext_causalrag.multigranularity.windows import (
    GRANULARITIES_KEY,
    GRANULARITY_KEY,
    GRANULARITY_MAX_KEY,
    units_by_granularity,
)
from llama_index_ext_causalrag.storage.row_ids import RowIds

logger = logging.getLogger(__name__)

Lexical = Literal["bm25", "store"]
LEXICAL = choices_of(Lexical)


def check_lexical(lexical: str, vector_store: BasePydanticVectorStore) -> None:
    """``lexical`` is one of :data:`LEXICAL` (``"bm25"``, bm25s beside the store, the default),
    and ``"store"`` only over a store with full-text search."""
    check_choice(lexical, "lexical", Lexical)
    if lexical == "store":
        check_text_search(vector_store)


def granularity_filter(g: int, ranged: bool = True) -> MetadataFilters:
    """The vector store's units of granularity ``g``: ``umg_granularity <= g <= umg_granularity_max``.

    A unit may belong to several granularities (the whole-document window of a document shorter
    than the coarser windows); they are the consecutive granularities from its finest to its
    coarsest. ``ranged=False``: ``umg_granularity == g``, for units written without
    ``umg_granularity_max``, which then miss their coarser lists."""
    if not ranged:
        return MetadataFilters(filters=[MetadataFilter(key=GRANULARITY_KEY, value=int(g))])
    return MetadataFilters(
        filters=[
            MetadataFilter(key=GRANULARITY_KEY, value=int(g), operator=FilterOperator.LTE),
            MetadataFilter(key=GRANULARITY_MAX_KEY, value=int(g), operator=FilterOperator.GTE),
        ]
    )


def dense_experts(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    embed_model: BaseEmbedding,
    units: Sequence[BaseNode],
    row_ids: RowIds,
) -> Dict[int, VectorStoreExpert]:
    """One :class:`VectorStoreExpert` per granularity of ``units``, each filtered on it (rows keyed by ``row_ids``)."""
    by_g = units_by_granularity(units)
    ranged = all(GRANULARITY_MAX_KEY in u.metadata for u in units)
    if ranged:
        for u in units:
            m = u.metadata
            run = [g for g in by_g if int(m[GRANULARITY_KEY]) <= g <= int(m[GRANULARITY_MAX_KEY])]
            if run != [int(g) for g in m.get(GRANULARITIES_KEY, [m[GRANULARITY_KEY]])]:
                raise ValueError(
                    f"unit {u.node_id!r} belongs to granularities {m.get(GRANULARITIES_KEY)!r}, not the consecutive "
                    f"granularities {run!r} from {GRANULARITY_KEY!r} to {GRANULARITY_MAX_KEY!r}: a vector store "
                    "cannot select its lists; use the units of MultiGranularityNodeParser."
                )
    elif any(len(u.metadata.get(GRANULARITIES_KEY, ())) > 1 for u in units):
        logger.warning(
            "MultiGranularityIndex: units without %r metadata (written by an earlier version) that belong to "
            "several granularities are found in their finest granularity's dense list only; rebuild the index "
            "into new stores to include them in the coarser lists.",
            GRANULARITY_MAX_KEY,
        )
    ids = row_ids.with_nodes([u.node_id for u in units])
    return {
        int(g): VectorStoreExpert(
            vector_store,
            embed_model,
            filters=granularity_filter(g, ranged),
            docstore=docstore,
            name=f"dense@{g}",
            row_ids=ids,
        )
        for g in by_g
    }


def text_experts(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    units: Sequence[BaseNode],
    row_ids: RowIds,
) -> Dict[int, VectorStoreTextExpert]:
    """One :class:`VectorStoreTextExpert` per granularity of ``units``, filtered as the dense ones."""
    ranged = all(GRANULARITY_MAX_KEY in u.metadata for u in units)
    ids = row_ids.with_nodes([u.node_id for u in units])
    return {
        int(g): VectorStoreTextExpert(
            vector_store, filters=granularity_filter(g, ranged), docstore=docstore, name=f"sparse@{g}", row_ids=ids
        )
        for g in units_by_granularity(units)
    }


def fusion_over_store(experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
    """The fusion retriever, with each store expert asked for ``candidates_per_list`` units (an
    in-memory dense expert is scored in full and cut to that many)."""
    k = EntropyFusionRetriever(experts, **kwargs).candidates_per_list
    store_experts = (VectorStoreExpert, VectorStoreTextExpert, GranularityListExpert)
    experts = {
        e: {g: (r.with_top_k(k) if isinstance(r, store_experts) else r) for g, r in by_g.items()}
        for e, by_g in experts.items()
    }
    tabled = any(isinstance(r, GranularityListExpert) for by_g in experts.values() for r in by_g.values())
    return EntropyFusionRetriever(TablesSource(experts) if tabled else ExpertSource(experts), **kwargs)
