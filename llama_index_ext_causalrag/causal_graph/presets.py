"""The settings of CausalRAG2, one typed config per stage (:mod:`.stages`) composed by
:class:`CausalGraphBuildConfig` (what ``CausalGraphIndex.from_documents`` / ``from_nodes`` build)
and :class:`GatedExpansionConfig` (what :class:`GatedExpansionRetriever` retrieves), with the
retriever's named presets.

``"passages"`` (the default) is ``"ppr"`` with title nodes and title bridges (below); where the
documents carry no metadata ``"title"`` it is ``"ppr"`` exactly. ``"ppr"`` scores the graph by
personalized PageRank: it measured best of the graph searches on GraphRAG-Bench novels and
HolisQA biology and business (docs/causalrag2.md). ``"causalrag2"`` is
the published gated expansion with its causal filter; ``"nogates"`` drops the causal gate edges
and ``"flat"`` the module hierarchy (hence the gates too), the paper's ablations;
``"ppr_nogates"`` is ``"ppr"`` without the gate edges. ``"passages"`` is ``"ppr"`` with title
nodes (:mod:`.titles`): each document title a node linked to its units, to the units naming it and
to a query naming it, for passage corpora such as Wikipedia paragraphs (title_weight 1, the best mean
PR@5 of 1, 5, 20 on the HotpotQA, 2WikiMultiHopQA and MuSiQue development questions,
benchmarks/scripts/tune_passages.py), and title bridges (:func:`.titles.title_bridge_order`): when
the query or one of its 3 best units by cosine names a title, units rank by cosine plus 0.6 for a
title the query names plus 0.4 x the score of a best unit naming theirs, the best unit kept first,
instead of by the walk (weights chosen on the first half of those sets' questions,
benchmarks/scripts/tune_title_bridges.py). The title links are read once per index state (the first
retriever that needs them reads every unit's title; on a store, one read of the docstore).
"""

from __future__ import annotations

from typing import Any, Collection, Dict, Optional

from llama_index.core.bridge.pydantic import ConfigDict, Field

from llama_index_ext_causalrag.causal_graph.stages import (
    DEFAULT_MODULE_EMBEDDING,
    MODULE_EMBEDDINGS,
    SEARCHES,
    CausalFilterConfig,
    EntitiesConfig,
    ExpansionConfig,
    FittingConfig,
    HierarchyConfig,
    ModulesConfig,
    PropagationConfig,
    RankingConfig,
    RunConfig,
    SeedingConfig,
    UnitsConfig,
)
from llama_index_ext_causalrag.presets import StagedConfig, resolve_preset
from llama_index_ext_causalrag.validation import caller, check_keywords


class CausalGraphBuildConfig(StagedConfig):
    """Every setting of a :class:`CausalGraphIndex` build, one config per stage (:mod:`.stages`):
    ``units``, ``entities``, ``hierarchy``, ``modules`` and ``run`` (the collaborators, LLM, embedder,
    extractor, summarizer, gate judge and stores, are arguments of their own). Settings may also be
    given by name, ``CausalGraphBuildConfig(max_cluster_size=3)``: each goes to its stage.

    What the build makes is persisted in ``params.json`` (:meth:`persisted`, every setting by name);
    ``run`` (``num_workers``, ``max_llm_calls``, ``max_llm_tokens``) says how this build runs and is not.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    units: UnitsConfig = Field(default_factory=UnitsConfig, description="The text units of from_documents.")
    entities: EntitiesConfig = Field(default_factory=EntitiesConfig, description="Which entities are kept and merged.")
    hierarchy: HierarchyConfig = Field(default_factory=HierarchyConfig, description="The Leiden hierarchy.")
    modules: ModulesConfig = Field(default_factory=ModulesConfig, description="Module vectors and causal gates.")
    run: RunConfig = Field(default_factory=RunConfig, description="How the build runs (not persisted).")

    @classmethod
    def from_options(
        cls, build_config: "Optional[CausalGraphBuildConfig]", options: Dict[str, Any], also: Collection[str] = ()
    ) -> "CausalGraphBuildConfig":
        """``build_config`` (default: the defaults) with ``options``, settings by name (or whole
        stages); another name is a ``TypeError`` naming it (and, as what the public call takes, ``also``)."""
        check_keywords(options, set(cls.setting_names()) | set(cls.STAGES) | set(also))
        base = build_config if build_config is not None else cls()
        if not isinstance(base, cls):
            raise TypeError(f"{caller()}: build_config must be a {cls.__name__}, got {type(base).__name__}.")
        return base.with_settings(**options)

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "CausalGraphBuildConfig":
        """The settings recorded in an index's ``params`` (by name; an older index lacks some: defaults)."""
        return cls(**{k: params[k] for k in cls.setting_names() if k in params and k not in RUN_OPTIONS})

    def persisted(self) -> Dict[str, Any]:
        """What ``params.json`` keeps: every setting by name but how the build ran (:data:`RUN_OPTIONS`)."""
        return {k: v for k, v in self.settings().items() if k not in RUN_OPTIONS}

    def resolved_entities(self, default_min_entity_units: int) -> EntitiesConfig:
        """The entities stage with ``min_entity_units`` resolved (None: the extractor's default)."""
        e = self.entities
        return (
            e if e.min_entity_units is not None else e.model_copy(update={"min_entity_units": default_min_entity_units})
        )


# how a build runs, not what it builds: not persisted
RUN_OPTIONS = tuple(RunConfig.model_fields)


class GatedExpansionConfig(StagedConfig):
    """Every setting of :class:`GatedExpansionRetriever` (its docstring explains the steps), one
    config per stage (:mod:`.stages`): ``seeding``, ``expansion`` (or ``propagation``), ``ranking``,
    ``fitting`` and the ``causal_filter`` after them. Settings may also be given by name,
    ``GatedExpansionConfig(use_gates=False)`` or ``as_retriever(alpha=0.5)``: each goes to its stage."""

    seeding: SeedingConfig = Field(default_factory=SeedingConfig, description="Hybrid seeding, MMR seeds.")
    expansion: ExpansionConfig = Field(default_factory=ExpansionConfig, description="The graph and its search.")
    propagation: PropagationConfig = Field(
        default_factory=PropagationConfig, description="search='propagation': personalized PageRank."
    )
    ranking: RankingConfig = Field(default_factory=RankingConfig, description="Units scored from text and graph.")
    fitting: FittingConfig = Field(default_factory=FittingConfig, description="The cut to top-k and budget.")
    causal_filter: CausalFilterConfig = Field(
        default_factory=CausalFilterConfig, description="The causal filter after the expansion."
    )


PASSAGES_TITLE_WEIGHT = 1.0
# title bridges (titles.title_bridge_order), chosen on the first half of the questions of each
# multi-hop development set (benchmarks/scripts/tune_title_bridges.py)
BRIDGE_WEIGHT = 0.4
QUERY_TITLE_WEIGHT = 0.6
BRIDGE_SOURCES = 3
SETTINGS = GatedExpansionConfig.setting_names()  # every retrieval setting a preset takes by name

CAUSALRAG2_PRESETS: Dict[str, GatedExpansionConfig] = {
    "causalrag2": GatedExpansionConfig(),
    "nogates": GatedExpansionConfig(expansion=ExpansionConfig(use_gates=False)),
    "flat": GatedExpansionConfig(expansion=ExpansionConfig(use_hierarchy=False)),
    "ppr": GatedExpansionConfig(expansion=ExpansionConfig(search="propagation")),
    "ppr_nogates": GatedExpansionConfig(expansion=ExpansionConfig(search="propagation", use_gates=False)),
    # "ppr" with title nodes (titles.py): for passage corpora whose documents carry a metadata "title"
    "passages": GatedExpansionConfig(
        expansion=ExpansionConfig(search="propagation"),
        propagation=PropagationConfig(
            title_weight=PASSAGES_TITLE_WEIGHT,
            bridge_weight=BRIDGE_WEIGHT,
            query_title_weight=QUERY_TITLE_WEIGHT,
            bridge_sources=BRIDGE_SOURCES,
        ),
    ),
}
DEFAULT_PRESET = "passages"
# the published method: gated best-first expansion, then the causal filter
EXPANSION_PRESET = "causalrag2"


def get_preset(preset: "str | GatedExpansionConfig") -> GatedExpansionConfig:
    return resolve_preset(preset, CAUSALRAG2_PRESETS, GatedExpansionConfig)


__all__ = [
    "CAUSALRAG2_PRESETS",
    "CausalGraphBuildConfig",
    "DEFAULT_MODULE_EMBEDDING",
    "DEFAULT_PRESET",
    "EXPANSION_PRESET",
    "GatedExpansionConfig",
    "MODULE_EMBEDDINGS",
    "RUN_OPTIONS",
    "SEARCHES",
    "SETTINGS",
    "get_preset",
]
