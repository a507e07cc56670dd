"""What a :class:`CausalGraphIndex` serves, held apart from the index: :class:`StateHandle`.

The handle holds the index's committed state, its parameters and its backend; the index reads and
replaces them through it, and its retrievers get the handle, never the index. A retriever works
on one :class:`StateView` (one state, however the index is updated meanwhile) and, on stores
with a kvstore, asks the handle at each query whether another index object (any process) wrote
since: :meth:`StateHandle.follow` then reopens the state from the stores once, and the retriever
answers from the new view, never from a mix.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from llama_index.core.base.embeddings.base import BaseEmbedding

from llama_index_ext_causalrag.storage.index_backend import IndexBackend

if TYPE_CHECKING:  # the state's module imports the retriever, which imports this one
    from llama_index_ext_causalrag.causal_graph.state import CausalGraphState

logger = logging.getLogger(__name__)

# reads the stores' newest state: (state, params, backend)
Reopen = Callable[[IndexBackend], Tuple["CausalGraphState", Dict[str, Any], IndexBackend]]


def _from_state(name: str, doc: str) -> property:
    return property(lambda self: getattr(self._state, name), doc=doc)


class StateReads:
    """What an index's state offers by name (read, never changed): mixed into the index and its views."""

    _state: "CausalGraphState"
    graph = _from_state("graph", "The :class:`CausalGraph` (entities, relations, modules, gates).")
    units = _from_state("units", "The text units, in index order.")
    unit_by_id = _from_state("unit_by_id", "node id -> unit.")
    entity_ids = _from_state("entity_ids", "Sorted entity ids (rows of ``entity_embeddings``).")
    module_ids = _from_state("module_ids", "Sorted module ids (rows of ``module_embeddings``).")
    entity_embeddings = _from_state("entity_embeddings", "(n_entities, d) unit rows of the entity names.")
    module_embeddings = _from_state("module_embeddings", "(n_modules, d) unit rows of title + summary.")
    build_stats = _from_state("build_stats", "Sizes, per-stage cost and gate statistics of the last build or update.")


class StateView(StateReads):
    """One committed state of an index, as its retrievers read it (nothing here changes it)."""

    def __init__(self, handle: "StateHandle", state: "CausalGraphState", generation: Optional[str]) -> None:
        self.handle, self._state, self.generation = handle, state, generation

    @property
    def embed_model(self) -> BaseEmbedding:
        return self.handle.embed_model()

    @property
    def params(self) -> Dict[str, Any]:
        """The index's parameters (an update may set more of them, never take one back)."""
        return self.handle.params

    def store_generation(self) -> Optional[str]:
        """The kvstore generation of this state (None: nothing to follow)."""
        return self.generation


class StateHandle:
    """The state, parameters and backend of one index object, and the lock its updates take."""

    def __init__(
        self,
        state: "CausalGraphState",
        params: Dict[str, Any],
        backend: IndexBackend,
        embed_model: Callable[[], BaseEmbedding],
        reopen: Optional[Reopen] = None,
    ) -> None:
        self.state, self.params, self.backend = state, params, backend
        self.embed_model, self._reopen = embed_model, reopen
        self.lock = threading.Lock()  # one update at a time (queries never wait), and a reopen after it

    def generation(self) -> Optional[str]:
        """The kvstore generation the held state is (None: no kvstore to follow)."""
        kv = getattr(self.backend, "kv", None)
        return kv.generation if self.backend.in_stores and kv is not None else None

    def view(self) -> StateView:
        """The held state, for a retriever."""
        return StateView(self, self.state, self.generation())

    def follow(self, generation: Optional[str]) -> Optional[StateView]:
        """A view of the stores' latest state if it is not ``generation`` (a retriever's), else
        None: another index object wrote since, and the held state is reopened first (one kvstore
        read a query; the reopen once a write)."""
        kv = getattr(self.backend, "kv", None)
        if generation is None or kv is None or self._reopen is None:
            return None
        head = kv.head()
        latest = head.get("generation") if head else None
        if latest is None or latest == generation:
            return None
        with self.lock:  # an update of this object finishes first: its state and generation agree
            if kv.generation != latest:
                self.state, self.params, self.backend = self._reopen(self.backend)
                logger.info(
                    "CausalGraphIndex: another index object wrote the stores (generation %s); reopened its state.",
                    self.generation(),
                )
            return self.view()


def handle_of(index: Any) -> Optional[StateHandle]:
    """The handle of a :class:`CausalGraphIndex` or of one of its views (None for another object)."""
    handle = index.handle if isinstance(index, StateView) else getattr(index, "state_handle", None)
    return handle if isinstance(handle, StateHandle) else None


__all__: List[str] = ["StateHandle", "StateReads", "StateView", "handle_of"]
