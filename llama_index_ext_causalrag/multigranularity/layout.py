"""How an index on stores serves its lists: the layout its store's driver chose.

:class:`~.store_backend.StoreBackend` is the one backend of a :class:`MultiGranularityIndex` on
stores; what differs between stores is its :class:`StoreLayout`, one of two:

* :class:`~.units_layout.UnitsLayout`: the units in the process; dense lists from one table per
  granularity (``"granularity_tables"``, where the driver offers them) or from queries of the
  vector store filtered on the granularity (``"filtered"``, any store); BM25 by bm25s beside the
  store, or the store's full-text search;
* :class:`~.served.ServedLayout`: nothing of the corpus in the process; every list computed by
  the store (``"served"`` on PostgreSQL, ``"milvus"`` on Milvus: the driver's
  :meth:`~llama_index_ext_causalrag.storage.drivers.StoreDriver.served_lists`).

The driver names the layout of a new index (:meth:`StoreDriver.new_layout`), and the layout's
name in ``params.json`` finds the driver that reopens it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.state import MGChange
from llama_index_ext_causalrag.storage.persistence import IndexWriter

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.store_backend import StoreBackend

# an update's rows to replace: (nodes leaving the docstore, rows leaving the vector store, rows entering it)
Replaced = Tuple[List[BaseNode], List[BaseNode], List[BaseNode]]


class StoreLayout(ABC):
    """The layout of one index on stores (its lists, and what its state holds)."""

    name: str
    lexical: str = "bm25"
    tables: Any = None  # the lists object the store's driver gave, if any

    @property
    def needs_tokens(self) -> bool:
        return self.lexical == "bm25"

    @abstractmethod
    def make_state(
        self,
        backend: "StoreBackend",
        params: MGParams,
        units: List[BaseNode],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]],
    ) -> Any:
        """The state of ``units`` (a build's, or a reopened index's)."""

    @abstractmethod
    def fusion_retriever(
        self,
        backend: "StoreBackend",
        params: MGParams,
        state: Any,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        """Fusion of ``expert_names`` x ``granularities`` (None: all) of ``state``."""

    @abstractmethod
    def known_docs(self, backend: "StoreBackend", state: Any, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        """The indexed documents among ``doc_ids`` -> the source hash their units recorded."""

    @abstractmethod
    def next_state(self, backend: "StoreBackend", params: MGParams, old: Any, change: MGChange) -> Any:
        """The state after ``change``."""

    @abstractmethod
    def to_write(self, backend: "StoreBackend", params: MGParams, state: Any) -> Tuple[List[BaseNode], List[BaseNode]]:
        """A build's ``(docstore nodes, vector store rows)``, the lists made ready for them first."""

    def finish_write(self, state: Any) -> None:
        """After a build's rows are written, before its state is saved: the lists' indexes built."""
        if self.tables is not None:
            self.tables.build_ann()

    @abstractmethod
    def replaced(self, backend: "StoreBackend", params: MGParams, old: Any, change: MGChange) -> Replaced:
        """What an update takes out of the stores and puts in."""

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:  # noqa: B027 (optional hook)
        """After an update's commit (``failed``: after its roll-back); nothing by default."""

    def write_folder(self, backend: "StoreBackend", state: Any, w: IndexWriter) -> None:  # noqa: B027 (optional hook)
        """The layout's files of ``state`` beside ``params.json`` (none by default)."""

    def params(self) -> Dict[str, Any]:
        """What ``params.json`` records of the layout, beside its name."""
        return {"lexical": self.lexical}

    @abstractmethod
    def describe(self, backend: "StoreBackend") -> str:
        """One line naming where the index lives, for messages."""


__all__ = ["Replaced", "StoreLayout"]
