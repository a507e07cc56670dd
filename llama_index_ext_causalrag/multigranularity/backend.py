"""Where a :class:`MultiGranularityIndex` keeps its units: in memory, or on LlamaIndex's stores.

The index holds one backend and calls its verbs with its parameters (:class:`~.params.MGParams`)
and its state; a backend never sees the index, and never asks which kind it is:

* :class:`MemoryBackend`: units, embeddings and BM25 in the process, persisted as one folder
  (``units.json``, ``embeddings.npy``, ``bm25/g{g}/``, ``tokens.json``, ``params.json``);
* :class:`~.store_backend.StoreBackend`: units in a vector store and a docstore, lists served in
  the layout the store's driver chooses (:mod:`.layout`), the state in a kvstore or a folder.

Both make the index's state (:meth:`MGBackend.make_state`), make the fusion retriever over its
lists, and :meth:`~MGBackend.commit` an update's new state before the index swaps it in.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts._nodes_io import load_nodes, save_nodes
from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.state import MGChange, MGState, merged, state_experts
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.index_backend import IndexBackend
from llama_index_ext_causalrag.storage.persistence import (
    array_dim,
    check_embedder,
    embedder_params,
    open_persisted,
    persist_to,
)

OWNER = "MultiGranularityIndex"


class MGBackend(IndexBackend):
    """The storage verbs of a :class:`MultiGranularityIndex`, each given its parameters and state."""

    @property
    def needs_tokens(self) -> bool:
        """Whether the index keeps per-unit BM25 tokens (its sparse experts are bm25s)."""
        return True

    @abstractmethod
    def make_state(
        self,
        params: MGParams,
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> Any:
        """The state of ``units`` with their lists (``bm25``: loaded BM25 indexes by granularity)."""

    @abstractmethod
    def embed_dim(self, state: Any) -> int:
        """The dimension of the embeddings the index holds."""

    @abstractmethod
    def fusion_retriever(
        self,
        params: MGParams,
        state: Any,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        """Fusion of ``expert_names`` x ``granularities`` (None: all) of ``state`` (``kwargs`` as
        :class:`EntropyFusionRetriever`'s)."""

    @abstractmethod
    def known_docs(self, state: Any, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        """The indexed documents among ``doc_ids`` -> the source hash their units recorded."""

    @abstractmethod
    def next_state(self, params: MGParams, old: Any, change: MGChange) -> Any:
        """The state after ``change`` (not yet committed)."""

    def write(self, params: MGParams, state: Any, embeddings: Optional[np.ndarray] = None) -> None:
        """Store what a build produced; ``embeddings``: the units' vectors, when the state does not hold them."""

    @abstractmethod
    def commit(
        self,
        params: MGParams,
        old: Any,
        new: Any,
        change: Optional[MGChange] = None,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """Make the backend hold ``new`` instead of ``old`` (``persist_dir``: written there too)."""

    @abstractmethod
    def persist(self, params: MGParams, state: Any, persist_dir: "str | Path") -> None:
        """The backend's part of the index (``state``) as one folder."""


class MemoryBackend(MGBackend):
    """Everything in the process; ``persist`` writes the whole index as one folder."""

    kind: ClassVar[str] = "memory"

    def make_state(
        self,
        params: MGParams,
        units: List[BaseNode],
        embeddings: Optional[np.ndarray],
        tokens: Optional[List[List[str]]],
        bm25: Optional[Dict[int, Any]] = None,
    ) -> MGState:
        return MGState(units, embeddings, tokens, params.embed_model, params.bm25_params, bm25)  # type: ignore[arg-type]

    def embed_dim(self, state: MGState) -> int:
        return int(state.embeddings.shape[1])

    def fusion_retriever(
        self,
        params: MGParams,
        state: MGState,
        expert_names: Sequence[str],
        granularities: Optional[Sequence[int]],
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        return EntropyFusionRetriever(state_experts(state, expert_names, granularities), **kwargs)

    def known_docs(self, state: MGState, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        return state.known_docs(doc_ids)

    def next_state(self, params: MGParams, old: MGState, change: MGChange) -> MGState:
        def embeddings_of(plan: Sequence[update_plan.Source]) -> np.ndarray:
            rows = [old.embeddings[i] if side == "old" else change.embeddings[i] for side, i in plan]  # type: ignore[index]
            return np.stack(rows).astype(np.float32)

        return merged(self, params, old, change, embeddings_of)

    def commit(
        self,
        params: MGParams,
        old: MGState,
        new: MGState,
        change: Optional[MGChange] = None,
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        """With ``persist_dir`` the new state is written there (a folder swap: the old folder stays on failure)."""
        if persist_dir is not None:
            self.persist_state(params, new, persist_dir)

    def persist(self, params: MGParams, state: MGState, persist_dir: "str | Path") -> None:
        self.persist_state(params, state, persist_dir)

    def persist_state(self, params: MGParams, st: MGState, persist_dir: "str | Path") -> None:
        """``units.json``, ``embeddings.npy``, ``bm25/g{g}/``, ``tokens.json``, ``params.json`` of ``st``."""
        with persist_to(persist_dir, OWNER) as w:
            save_nodes(st.units, w.dir / "units.json")
            w.save_array("embeddings.npy", st.embeddings)
            for g, expert in st.sparse.items():
                expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
            if st.tokens is not None:
                w.write_json("tokens.json", st.tokens, ensure_ascii=False)
            w.rows["units"] = len(st.units)
            w.params.update(
                **params.saved(list(st.by_g)), **embedder_params(params.embed_model, array_dim(st.embeddings))
            )

    def describe(self) -> str:
        return "in memory"

    @classmethod
    def open(
        cls, persist_dir: "str | Path", embed_model: Optional[BaseEmbedding]
    ) -> Tuple[MGParams, "MemoryBackend", MGState]:
        """The parameters, backend and state ``persist`` wrote to ``persist_dir``, without
        re-embedding or re-indexing."""
        import bm25s

        persisted = open_persisted(persist_dir, OWNER, "index.persist(dir)")
        p = persisted.params
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, persisted.dir)
        bm25 = {
            g: bm25s.BM25.load(persisted.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
            for g in p["granularities"]
        }
        units = load_nodes(persisted.path("units.json"))
        persisted.check_rows("units", len(units))
        tokens = persisted.json("tokens.json") if persisted.has("tokens.json") else None
        params = MGParams.from_saved(p, model)
        embeddings = persisted.array("embeddings.npy")
        if embeddings.ndim != 2 or embeddings.shape[0] != len(units):
            raise ValueError(f"embeddings must have shape (n_units={len(units)}, dim), got {embeddings.shape}.")
        if tokens is not None and len(tokens) != len(units):
            raise ValueError(f"got {len(tokens)} token lists for {len(units)} units; pass one per unit.")
        backend = cls()
        return (
            params,
            backend,
            backend.make_state(params, units, np.asarray(embeddings, dtype=np.float32), tokens, bm25),
        )


__all__ = ["MGBackend", "MemoryBackend"]
