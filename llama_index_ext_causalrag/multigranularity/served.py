"""A :class:`MultiGranularityIndex` served by its store: the process holds no corpus.

:class:`ServedLayout` keeps every unit in the stores (rows of the vector store with their BM25
terms, nodes in the docstore) and asks the store's driver for the lists
(:meth:`~llama_index_ext_causalrag.storage.drivers.StoreDriver.served_lists`: PostgreSQL's
``"served"`` tables, Milvus's collections); the kvstore or the persist folder holds the build
parameters only. So opening reads parameters and checks the lists, a query asks the store for
every list (:class:`~.served_source.ServedSource`: dense and BM25 of each granularity, filters
inside), fuses, then reads the nodes of the units it keeps and their parents in one batched read
each, and any number of processes serve one store: a write committed by one is in the next query
of every other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_ext_causalrag.multigranularity.layout import Replaced, StoreLayout
from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.served_source import OWNER, NodeCache, ServedSource
from llama_index_ext_causalrag.multigranularity.state import MGChange, check_lists
from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.drivers import ServedLists, StoreDriver
from llama_index_ext_causalrag.storage.stores import all_nodes, describe_store, nodes_of_documents
from llama_index_ext_causalrag.storage.terms import with_terms

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.store_backend import StoreBackend


class ServedState:
    """What a served index holds: its granularities; ``staged``: a build's units and tokens,
    until the backend has written them."""

    def __init__(
        self,
        granularities: Sequence[int],
        docstore: BaseDocumentStore,
        staged: Optional[Tuple[List[BaseNode], List[List[str]]]] = None,
    ) -> None:
        self.by_g: Dict[int, List[int]] = {int(g): [] for g in sorted(granularities)}
        self.docstore, self.staged = docstore, staged
        self.embeddings = np.zeros((0, 0), dtype=np.float32)  # index.embeddings: none in the process
        self.finest_scores = None  # no expert in the process: fit_evidence="query" fits by the fused prior

    def _refuse(self, what: str) -> ValueError:
        return ValueError(
            f"{OWNER} served from the store holds no {what} in the process (its lists are computed by the "
            "database); use as_retriever() / as_fusion_retriever(), or index.docstore for the units."
        )

    @property
    def units(self) -> List[BaseNode]:
        """Every unit, read from the docstore now (the whole corpus: for inspection, not for queries)."""
        return list(all_nodes(self.docstore).values())

    @property
    def dense(self) -> Dict[int, Any]:
        raise self._refuse("dense experts")

    @property
    def sparse(self) -> Dict[int, Any]:
        raise self._refuse("BM25 experts")


class ServedLayout(StoreLayout):
    """Every list computed by the store (``name``: the driver's layout); units in the stores only.

    ``saved``: what the index recorded of its lists (None for a new index, until the driver has
    chosen them at its first write); ``scores``: how top-k pruned BM25 lists are scored (see
    ``MultiGranularityIndex.from_vector_store``; None: the driver's default)."""

    lexical = "bm25"

    def __init__(
        self,
        driver: StoreDriver,
        name: str,
        bm25: Tuple[float, float],
        saved: Optional[Dict[str, Any]] = None,
        scores: Optional[str] = None,
    ) -> None:
        self.driver, self.name, self.k1_b, self.saved, self.scores = driver, name, bm25, saved, scores
        self.tables: Optional[ServedLists] = None
        self.cache = NodeCache()  # the nodes of the latest queries, for every retriever of the index

    def tables_for(self, backend: "StoreBackend", granularities: Sequence[int]) -> ServedLists:
        """The store's lists of ``granularities`` (made once; the driver chooses at a build's first call)."""
        gs = sorted(int(g) for g in granularities)
        if self.tables is None or list(self.tables.granularities) != gs:
            self.tables = self.driver.served_lists(
                backend.vector_store, gs, backend.dim, backend.ann, self.k1_b, self.saved, self.scores
            )
            self.saved = self.tables.params()
        return self.tables

    # ---- state and retrieval ----------------------------------------------------------
    def make_state(
        self,
        backend: "StoreBackend",
        params: MGParams,
        units: List[BaseNode],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]],
    ) -> ServedState:
        return ServedState(
            list(units_by_granularity(units)), backend.docstore, staged=(units, tokens or params.tokens(units))
        )

    def fusion_retriever(
        self,
        backend: "StoreBackend",
        params: MGParams,
        state: ServedState,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        """Fusion of ``expert_names`` x ``granularities`` (None: all), every list from the store."""
        names, gs = check_lists(expert_names, granularities, list(state.by_g))
        keys = [(e, g) for e in names for g in gs]
        source = ServedSource(
            self.tables_for(backend, list(state.by_g)),
            backend.docstore,
            params.embed_model,
            params.bm25_params,
            keys,
            cache=self.cache,
        )
        return EntropyFusionRetriever(source, **kwargs)

    def known_docs(
        self, backend: "StoreBackend", state: ServedState, doc_ids: Sequence[str]
    ) -> Dict[str, Optional[str]]:
        found = nodes_of_documents(backend.docstore, doc_ids, first_only=True)
        return {d: update_plan.source_hash(nodes[0]) for d, nodes in found.items() if nodes}

    def next_state(self, backend: "StoreBackend", params: MGParams, old: ServedState, change: MGChange) -> ServedState:
        return ServedState(list(old.by_g), backend.docstore)

    # ---- writes -------------------------------------------------------------------------
    @staticmethod
    def _rows(units: Sequence[BaseNode], tokens: Sequence[List[str]]) -> List[BaseNode]:
        return [with_terms(u, t) for u, t in zip(units, tokens)]

    def to_write(
        self, backend: "StoreBackend", params: MGParams, state: ServedState
    ) -> Tuple[List[BaseNode], List[BaseNode]]:
        """The lists first (so that the store fills them as rows arrive), then the units and
        their rows (with their terms); the process keeps nothing of them once written."""
        units, tokens = state.staged  # type: ignore[misc]
        tables = self.tables_for(backend, list(state.by_g))
        tables.drop_if_table_empty()
        tables.create()
        state.staged = None
        return units, self._rows(units, tokens)

    def finish_write(self, state: ServedState) -> None:
        super().finish_write(state)
        self.tables.analyze()  # type: ignore[union-attr]

    def replaced(self, backend: "StoreBackend", params: MGParams, old: ServedState, change: MGChange) -> Replaced:
        """Every unit of the documents ``change`` replaces or drops, read from the docstore."""
        affected = sorted({update_plan.doc_key(u) for u in change.units} | set(change.drop))
        gone = [n for nodes in nodes_of_documents(backend.docstore, affected).values() for n in nodes]
        return gone, self._rows(gone, params.tokens(gone)), self._rows(change.units, change.tokens)

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:
        if self.tables is not None:
            self.tables.after_update(added, removed, failed)

    def params(self) -> Dict[str, Any]:
        return {"lexical": "bm25", **(self.saved or {})}

    def describe(self, backend: "StoreBackend") -> str:
        where = self.tables.describe() if self.tables is not None else describe_store(backend.vector_store)
        bm25 = self.tables.describe_bm25() if self.tables is not None else None
        return (
            f"served by {where}: vector store {describe_store(backend.vector_store)}, docstore "
            f"{describe_store(backend.docstore)}{backend.describe_kv()}" + (f", BM25 lists from {bm25}" if bm25 else "")
        )


__all__ = ["ServedLayout", "ServedState"]
