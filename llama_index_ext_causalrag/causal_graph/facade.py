"""The query side of :class:`CausalGraphIndex`: ``as_retriever``, ``as_postprocessor``,
``as_query_engine``, with the unit embeddings computed once per index."""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM

from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.config import GatedExpansionConfig, get_preset
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_QA_PROMPT
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever, embed_units
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever

# candidates handed to the causal filter per node kept
FILTER_CANDIDATE_FACTOR = 2


class CausalGraphQueryMixin:
    """Mixed into :class:`CausalGraphIndex`; needs ``units`` and ``embed_model``."""

    _unit_embeddings: Optional[np.ndarray] = None
    _unit_lock = threading.Lock()

    @property
    def unit_embeddings(self) -> np.ndarray:
        """(n_units, d) unit-norm embeddings of the text units, computed on first use."""
        with self._unit_lock:
            if self._unit_embeddings is None or self._unit_embeddings.shape[0] != len(self.units):  # type: ignore[attr-defined]
                self._unit_embeddings = embed_units(self, self.embed_model)  # type: ignore[attr-defined]
            return self._unit_embeddings

    def set_unit_embeddings(self, embeddings: np.ndarray) -> None:
        """Reuse embeddings computed elsewhere (one row per unit, in ``index.units`` order)."""
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(self.units):  # type: ignore[attr-defined]
            raise ValueError(f"unit embeddings must have shape (n_units={len(self.units)}, dim), got {emb.shape}.")  # type: ignore[attr-defined]
        self._unit_embeddings = emb

    def as_graph_retriever(self, preset: "str | GatedExpansionConfig" = "causalrag2", **overrides: Any) -> GatedExpansionRetriever:
        """Gated best-first expansion alone (no causal filter)."""
        return GatedExpansionRetriever(self, config=get_preset(preset), embed_model=self.embed_model,  # type: ignore[attr-defined]
                                       unit_embeddings=self.unit_embeddings, **overrides)

    def as_postprocessor(self, llm: Optional[LLM] = None, **kwargs: Any) -> CausalFilterPostprocessor:
        """The causal filter (LLM if given or in ``Settings``, else the logged offline rule)."""
        return CausalFilterPostprocessor(llm=llm, **kwargs)

    def as_retriever(
        self,
        similarity_top_k: int = 10,
        preset: "str | GatedExpansionConfig" = "causalrag2",
        use_filter: bool = True,
        llm: Optional[LLM] = None,
        **overrides: Any,
    ) -> BaseRetriever:
        """CausalRAG2 retrieval as one retriever: gated expansion over ``2 * similarity_top_k``
        candidates, the causal filter, then the best ``similarity_top_k``.

        ``preset``: ``"causalrag2"`` (default), ``"nogates"``, ``"flat"`` or a
        :class:`GatedExpansionConfig`; ``overrides`` are any of its fields.
        """
        if not use_filter:
            return self.as_graph_retriever(preset, similarity_top_k=similarity_top_k, **overrides)
        graph = self.as_graph_retriever(preset, similarity_top_k=similarity_top_k * FILTER_CANDIDATE_FACTOR, **overrides)
        return PostprocessedRetriever(graph, [self.as_postprocessor(llm=llm)], top_n=similarity_top_k)

    def as_query_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> Any:
        """A ``RetrieverQueryEngine``: :meth:`as_retriever` (causal filter included, with the same
        ``llm``) and the spurious-aware answer prompt ``DEFAULT_CAUSAL_QA_PROMPT``."""
        from llama_index_ext_causalrag.query_engine import retriever_query_engine

        return retriever_query_engine(self.as_retriever(llm=llm, **kwargs), llm=llm, step="CausalGraphIndex",
                                      text_qa_template=DEFAULT_CAUSAL_QA_PROMPT)
