"""The query side of :class:`CausalGraphIndex`: ``as_retriever``, ``as_postprocessor`` and the
contract's ``as_query_engine``, with the unit embeddings computed once per index."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Optional

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import LLM
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.causal_graph.bridge import CausalBridgeRetriever
from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
from llama_index_ext_causalrag.causal_graph.presets import (
    DEFAULT_PRESET,
    EXPANSION_PRESET,
    SETTINGS,
    GatedExpansionConfig,
    get_preset,
)
from llama_index_ext_causalrag.causal_graph.prompts import DEFAULT_CAUSAL_QA_PROMPT
from llama_index_ext_causalrag.causal_graph.propagation_retriever import PropagationRetriever
from llama_index_ext_causalrag.causal_graph.retriever import GatedExpansionRetriever
from llama_index_ext_causalrag.causal_graph.stages import FITTING, BridgeConfig
from llama_index_ext_causalrag.contract import IndexContract
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.validation import check_keywords, public_method

# what as_retriever takes besides the settings of GatedExpansionConfig
_AS_RETRIEVER = frozenset({"similarity_top_k", "preset", "use_filter", "llm", "filters"})
# the overrides a retriever takes: every setting by name, and whole stages (seeding=SeedingConfig(...))
OVERRIDES: FrozenSet[str] = SETTINGS | frozenset(GatedExpansionConfig.STAGES)


def _config(preset: "str | GatedExpansionConfig", overrides: Dict[str, Any]) -> GatedExpansionConfig:
    """The preset with ``overrides``; one that is no setting is a ``TypeError`` naming it."""
    check_keywords(overrides, OVERRIDES)
    return get_preset(preset).with_settings(**overrides)


class CausalGraphQueryMixin(IndexContract):
    """Mixed into :class:`CausalGraphIndex`; needs ``_state``, ``snapshot`` and ``embed_model``.

    Every retriever is made from one state (:meth:`snapshot`), so a query running while an
    update replaces the state answers from the old state or the new one, never a mix.
    ``as_query_engine`` is the contract's: its retriever is :meth:`as_retriever` with the
    engine's LLM in the causal filter, its answer prompt ``DEFAULT_CAUSAL_QA_PROMPT``."""

    RETRIEVER_OPTIONS: FrozenSet[str] = _AS_RETRIEVER | OVERRIDES

    @property
    def unit_embeddings(self) -> np.ndarray:
        """(n_units, d) unit-norm embeddings of the text units, computed on first use."""
        return self._state.unit_embeddings(self.embed_model)  # type: ignore[attr-defined]

    @property
    def _unit_embeddings(self) -> Optional[np.ndarray]:
        return self._state.stored_unit_embeddings  # type: ignore[attr-defined]

    def set_unit_embeddings(self, embeddings: np.ndarray) -> None:
        """Reuse embeddings computed elsewhere (one row per unit, in ``index.units`` order)."""
        self._state.set_unit_embeddings(embeddings)  # type: ignore[attr-defined]

    @public_method
    def as_graph_retriever(
        self,
        preset: "str | GatedExpansionConfig" = DEFAULT_PRESET,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> GatedExpansionRetriever:
        """The graph search alone (no causal filter): gated best-first expansion, or personalized
        PageRank (:class:`PropagationRetriever`) for ``search="propagation"`` (presets ``"ppr"``,
        ``"ppr_nogates"``, ``"passages"``); ``overrides`` are settings of :class:`GatedExpansionConfig`'s stages by
        name (or whole stages)."""
        config = _config(preset, overrides)
        cls = PropagationRetriever if config.expansion.search == "propagation" else GatedExpansionRetriever
        # the retriever works on a snapshot of the state (the units: in memory with their vectors, or
        # read from the stores per query) and, on stores, asks this index at each query for a newer one
        return cls(self, config=config, embed_model=self.embed_model, filters=filters)  # type: ignore[attr-defined]

    def as_bridge_retriever(
        self,
        first_stage: BaseRetriever,
        preset: "str | GatedExpansionConfig" = EXPANSION_PRESET,
        *,
        similarity_top_k: int = FITTING.similarity_top_k,
        budget_tokens: Optional[int] = None,
        **options: Any,
    ) -> CausalBridgeRetriever:
        """``first_stage`` (e.g. ``MultiGranularityIndex.as_retriever()`` over the same documents)
        with ``bridge_share`` of each budget given to graph-reached evidence from documents it did
        not cover (:class:`CausalBridgeRetriever`). ``options``: the bridge's settings
        (:class:`BridgeConfig`: ``bridge_share``, ``max_bridge_docs``, ``context_seeds``,
        ``min_relative_score``, ``use_graph``, ``protect_top_doc``), the others configure the gated
        expansion with ``preset`` (``"nogates"``: no gate edges)."""
        bridge = {k: options.pop(k) for k in list(options) if k in BridgeConfig.model_fields}
        return CausalBridgeRetriever(
            first_stage,
            self.as_graph_retriever(preset, **options),
            budget_tokens=budget_tokens,
            similarity_top_k=similarity_top_k,
            **bridge,
        )

    def as_postprocessor(self, llm: "Optional[LLM | str]" = None, **kwargs: Any) -> CausalFilterPostprocessor:
        """The causal filter: the LLM given (``llm=``, or ``llm="settings"`` for ``Settings.llm``), else the logged offline rule."""
        return CausalFilterPostprocessor(llm=llm, **kwargs)

    @public_method
    def as_retriever(
        self,
        *,
        similarity_top_k: int = FITTING.similarity_top_k,
        preset: "str | GatedExpansionConfig" = DEFAULT_PRESET,
        use_filter: Optional[bool] = None,
        llm: Optional[LLM] = None,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> BaseRetriever:
        """CausalRAG2 retrieval as one retriever. The default preset ``"ppr"``: personalized
        PageRank over the graph, the best ``similarity_top_k`` units. The expansion presets
        (``"causalrag2"``, the published method, ``"nogates"``, ``"flat"``): gated expansion over
        ``candidates_per_node * similarity_top_k`` candidates (2x), the causal filter (its settings
        in the preset's ``causal_filter`` stage), then the best ``similarity_top_k``, fitted to
        ``budget_tokens`` after the filter (the ``fitting`` stage; ``fit_mode`` cuts the node that
        does not fit).

        ``preset``: ``"ppr"`` (default), ``"ppr_nogates"``, ``"passages"`` (``"ppr"`` with title
        nodes, for passage corpora), ``"causalrag2"``, ``"nogates"``, ``"flat"`` or a
        :class:`GatedExpansionConfig`; ``overrides`` are its settings by name, each going to its stage
        (``alpha=0.5``), or whole stages (another name is a ``TypeError`` naming it). ``use_filter``
        (default: on for the expansion, off for propagation, whose units carry no expansion path for
        the filter to judge).
        ``filters`` (LlamaIndex's ``MetadataFilters``): only text units passing them are scored and returned.
        """
        config = _config(preset, overrides)
        if use_filter is None:
            use_filter = config.expansion.search == "expansion"
        if not use_filter:
            return self.as_graph_retriever(config, filters=filters, similarity_top_k=similarity_top_k)
        filter_stage, fitting = config.causal_filter, config.fitting
        # the graph ranks the candidates without a budget; the budget is spent after the causal filter
        graph = self.as_graph_retriever(
            config,
            filters=filters,
            budget_tokens=None,
            similarity_top_k=similarity_top_k * filter_stage.candidates_per_node,
        )
        causal_filter = self.as_postprocessor(
            llm=llm, top_seeds=filter_stage.top_seeds, max_text_chars=filter_stage.max_text_chars
        )
        return PostprocessedRetriever(
            graph,
            [causal_filter],
            top_n=similarity_top_k,
            budget_tokens=fitting.budget_tokens,
            fit_mode=fitting.fit_mode,
            fit_evidence=graph.query_evidence(),
        )

    def _query_engine_retriever(self, llm: Optional[LLM], **retriever_options: Any) -> BaseRetriever:
        return self.as_retriever(llm=llm, **retriever_options)  # the engine's LLM runs the causal filter too

    def _query_engine_defaults(self) -> Dict[str, Any]:
        return {"text_qa_template": DEFAULT_CAUSAL_QA_PROMPT}
