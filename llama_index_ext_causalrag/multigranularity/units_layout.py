"""An index on stores that keeps its units in the process: :class:`UnitsLayout`.

Units and embeddings are rows of the vector store (granularity as metadata) and nodes of the
docstore; the process holds the units (for parent promotion) and, with ``lexical="bm25"``, one
bm25s index per granularity (persisted in the kvstore or the folder). The dense lists come from
one table per granularity where the store's driver offers them
(:meth:`~llama_index_ext_causalrag.storage.drivers.StoreDriver.granularity_lists`, layout
``"granularity_tables"``), else from queries of the vector store filtered on the granularity
(``"filtered"``: any store, and tables written by earlier versions until
``index.upgrade_store()``); ``lexical="store"`` takes the sparse lists from the store's
full-text search.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.multigranularity.layout import Replaced, StoreLayout
from llama_index_ext_causalrag.multigranularity.lists import GranularityListExpert
from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.state import MGChange, MGState, merged, state_experts
from llama_index_ext_causalrag.multigranularity.store_experts import dense_experts, fusion_over_store, text_experts
from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.ann import ANN, HNSW
from llama_index_ext_causalrag.storage.drivers import FILTERED, StoreDriver
from llama_index_ext_causalrag.storage.persistence import IndexWriter
from llama_index_ext_causalrag.storage.stores import describe_store

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.store_backend import StoreBackend

logger = logging.getLogger(__name__)

OWNER = "MultiGranularityIndex"
REOPEN = "MultiGranularityIndex.from_vector_store"
UNIT_IDS_FILE = "unit_ids.json"


class UnitsLayout(StoreLayout):
    """Units in the process, lists from the store's tables (``tables``) or its filtered queries."""

    def __init__(self, driver: StoreDriver, name: str, lexical: str = "bm25", tables: Any = None) -> None:
        self.driver, self.name, self.lexical, self.tables = driver, name, lexical, tables

    # ---- state and retrieval ----------------------------------------------------------
    def make_state(
        self,
        backend: "StoreBackend",
        params: MGParams,
        units: List[BaseNode],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]],
    ) -> MGState:
        """Dense experts are queries of the store's lists; the sparse ones bm25s or (``lexical="store"``)
        its full-text search. Parents come from ``units`` (in memory), not from the docstore."""
        model = params.embed_model
        sparse = (
            text_experts(backend.vector_store, backend.docstore, units, backend.row_ids)
            if self.lexical == "store"
            else None
        )
        return MGState(
            units,
            np.zeros((len(units), 0), dtype=np.float32),
            tokens,
            model,
            params.bm25_params,
            bm25,
            dense=self.dense_experts(backend, model, units),
            sparse=sparse,
        )

    def dense_experts(self, backend: "StoreBackend", model: BaseEmbedding, units: List[BaseNode]) -> Dict[int, Any]:
        if self.name == FILTERED:
            return dense_experts(backend.vector_store, backend.docstore, model, units, backend.row_ids)
        granularities = units_by_granularity(units)
        if self.tables is None:
            self.tables = self.driver.granularity_lists(backend.vector_store, granularities, backend.dim, backend.ann)
        by_id = {u.node_id: u for u in units}
        row_ids = backend.row_ids.with_nodes(by_id)
        return {g: GranularityListExpert(self.tables, g, model, by_id, row_ids) for g in granularities}

    def fusion_retriever(
        self,
        backend: "StoreBackend",
        params: MGParams,
        state: MGState,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        return fusion_over_store(state_experts(state, expert_names, granularities), **kwargs)

    def known_docs(self, backend: "StoreBackend", state: MGState, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        return state.known_docs(doc_ids)

    def next_state(self, backend: "StoreBackend", params: MGParams, old: MGState, change: MGChange) -> MGState:
        return merged(backend, params, old, change, lambda plan: None)  # the embeddings are in the vector store

    def upgrade(self, backend: "StoreBackend", params: MGParams, state: MGState, ann: Optional[ANN]) -> None:
        """Serve the dense lists of ``state`` from the driver's per-granularity tables, created
        and filled from the vector store's rows in one transaction (then their HNSW indexes)."""
        tables = self.driver.granularity_lists(
            backend.vector_store, state.by_g, backend.dim, ann if ann is not None else backend.ann
        )
        if tables is None:
            raise ValueError(
                f"{OWNER}.upgrade_store: per-granularity tables need a PGVectorStore on psycopg2, got "
                f"{describe_store(backend.vector_store)}."
            )
        tables.create(backfill=True)  # one transaction: all of the layout or none
        tables.build_ann()
        self.tables, self.name, backend.ann = tables, tables.layout, tables.ann
        state.dense = self.dense_experts(backend, params.embed_model, state.units)

    # ---- writes -------------------------------------------------------------------------
    def to_write(
        self, backend: "StoreBackend", params: MGParams, state: MGState
    ) -> Tuple[List[BaseNode], List[BaseNode]]:
        if self.tables is not None:  # before the rows, so that the triggers fill the lists as they arrive
            self.tables.drop_if_table_empty()
            self.tables.create()
        return state.units, state.units

    def replaced(self, backend: "StoreBackend", params: MGParams, old: MGState, change: MGChange) -> Replaced:
        """The units of the documents ``change`` replaces or drops, from the state."""
        affected = {update_plan.doc_key(u) for u in change.units} | set(change.drop)
        gone = [u for u in old.units if update_plan.doc_key(u) in affected]
        return gone, gone, list(change.units)

    def write_folder(self, backend: "StoreBackend", state: MGState, w: IndexWriter) -> None:
        """``unit_ids.json`` and (``lexical="bm25"``) ``bm25/g{g}/``: the embeddings are in the
        vector store, the units in the docstore."""
        w.write_json(UNIT_IDS_FILE, [u.node_id for u in state.units])
        for g, expert in state.sparse.items() if self.lexical == "bm25" else ():
            expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
        w.rows["units"] = len(state.units)

    def describe(self, backend: "StoreBackend") -> str:
        return (
            f"vector store {describe_store(backend.vector_store)}, docstore "
            f"{describe_store(backend.docstore)}{backend.describe_kv()}"
        )


def open_layout(
    driver: StoreDriver,
    vector_store: Any,
    params: Dict[str, Any],
    dim: int,
    ann: Optional[ANN],
    lexical: str,
    where: str,
) -> Tuple[UnitsLayout, Optional[ANN]]:
    """How a reopened index serves its dense lists: the driver's per-granularity tables if they
    are all there (checked against the build's HNSW parameters; ``ann`` may change ``ef_search``
    only), else filtered queries, with a warning naming ``index.upgrade_store()``."""
    ann = HNSW.for_reopen(ann, params, where)
    tables = driver.granularity_lists(vector_store, params["granularities"], dim, ann)
    if tables is None:
        return UnitsLayout(driver, FILTERED, lexical), None
    missing = tables.missing() if params.get("store_layout") == tables.layout else ["(an index written before them)"]
    if missing:
        logger.warning(
            "%s: %s are missing (%s): each dense list scans and filters the whole table (about 100x slower on "
            "HolisQA biology); call index.upgrade_store() once to add them.",
            REOPEN,
            tables.describe(),
            ", ".join(missing),
        )
        return UnitsLayout(driver, FILTERED, lexical), ann
    tables.check_ann()
    return UnitsLayout(driver, tables.layout, lexical, tables), ann


__all__ = ["UNIT_IDS_FILE", "UnitsLayout", "open_layout"]
