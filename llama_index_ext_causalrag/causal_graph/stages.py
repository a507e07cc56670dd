"""The settings of each stage of CausalRAG2, one default each (``build_stages.py`` holds the build's code).

Retrieval (:class:`~.presets.GatedExpansionConfig` composes them):

* :class:`SeedingConfig`: hybrid multi-granular seeding, the seeds picked by MMR;
* :class:`ExpansionConfig`: the graph searched from the seeds (which edges, and the gated
  best-first expansion), or PageRank over it (``search="propagation"``, :class:`PropagationConfig`);
* :class:`RankingConfig`: the text units (and optional graph statements) scored from text and graph;
* :class:`FittingConfig`: the ranking cut at ``similarity_top_k`` and ``budget_tokens``;
* :class:`CausalFilterConfig`: the causal filter after the expansion.

:class:`BridgeConfig` is :class:`~.bridge.CausalBridgeRetriever`'s own. The build
(:class:`~.config.CausalGraphBuildConfig` composes them): :class:`UnitsConfig`,
:class:`EntitiesConfig`, :class:`HierarchyConfig`, :class:`ModulesConfig` and :class:`RunConfig`
(how a build runs, not what it builds). The components take their defaults from the instances
below (:data:`SEEDING`, ...), so a setting has its default in one place.
"""

from __future__ import annotations

from typing import Any, Dict, Literal, Optional, get_args

from llama_index.core.bridge.pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from llama_index_ext_causalrag.causal_graph.expansion import (
    DEFAULT_ALPHA,
    DEFAULT_EDGE_WEIGHTS,
    DEFAULT_GAMMA,
    DEFAULT_MAX_FANOUT,
    DEFAULT_MAX_NODES,
    DEFAULT_MMR_LAMBDA,
    EDGE_TYPES,
    validate_unit_interval,
)
from llama_index_ext_causalrag.causal_graph.gates import DEFAULT_GATE_CANDIDATES
from llama_index_ext_causalrag.causal_graph.hierarchy import (
    DEFAULT_MAX_CLUSTER_SIZE,
    DEFAULT_MAX_LEVELS,
    DEFAULT_RESOLUTION,
    DEFAULT_SEED,
    validate_hierarchy_params,
)
from llama_index_ext_causalrag.causal_graph.propagation import DEFAULT_DAMPING
from llama_index_ext_causalrag.presets import Stage
from llama_index_ext_causalrag.text.fitting import DEFAULT_FIT_MODE, FIT_MODE_HELP, FittingStage
from llama_index_ext_causalrag.validation import check_finite_values, check_top_k

Search = Literal["expansion", "propagation"]
GraphAggregate = Literal["sum", "max"]
ModuleEmbedding = Literal["members", "summary"]
SEARCHES, GRAPH_AGGREGATES = get_args(Search), get_args(GraphAggregate)
# How a module gets its vector: "members", the normalised mean of its entities' name vectors (no
# model call); "summary", the embedded "title. summary" text (one text per module).
MODULE_EMBEDDINGS = get_args(ModuleEmbedding)
DEFAULT_MODULE_EMBEDDING = "members"


def _counts(stage: Stage, names: tuple) -> None:
    for name in names:
        v = getattr(stage, name)
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an int >= 0, got {v!r}.")


# ---- retrieval ----------------------------------------------------------------------------
class SeedingConfig(Stage):
    """Step 1: ``s(v) = alpha * cos(q, v) + (1 - alpha) * lex(q, v)``; MMR picks the seeds per level."""

    alpha: float = Field(default=DEFAULT_ALPHA, description="Seed score: alpha * cosine + (1 - alpha) * lexical.")
    mmr_lambda: float = Field(default=DEFAULT_MMR_LAMBDA, description="MMR trade-off of seed picking.")
    seeds_per_level: int = Field(default=3, description="Module seeds per hierarchy level.")
    entity_seeds: int = Field(default=5, description="Entity seeds.")
    unit_seeds: int = Field(default=5, description="Text-unit seeds.")
    mmr_pool: int = Field(default=50, description="Best-scored candidates MMR picks from.")

    @model_validator(mode="after")
    def _check(self) -> "SeedingConfig":
        for name in ("alpha", "mmr_lambda"):
            validate_unit_interval(getattr(self, name), name, "the paper uses 0.7")
        _counts(self, ("seeds_per_level", "entity_seeds", "unit_seeds", "mmr_pool"))
        return self


class ExpansionConfig(Stage):
    """Step 2: the graph searched from the seeds: which edges, and the gated best-first expansion
    (``gain(v) = s(v) * gamma ** hop * w_type``), or PageRank (``search="propagation"``)."""

    search: Search = Field(
        default="expansion",
        description="'expansion': gated best-first search from the seeds; "
        "'propagation': personalized PageRank over the whole graph (PropagationRetriever).",
    )
    use_gates: bool = Field(default=True, description="Causal gate edges between modules (False: none).")
    use_hierarchy: bool = Field(
        default=True, description="The module hierarchy (False: a flat entity graph, no gates)."
    )
    edge_weights: Dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_EDGE_WEIGHTS),
        description="Weight per edge type; a type left out keeps its default.",
    )
    gamma: float = Field(default=DEFAULT_GAMMA, description="Gain decay per hop.")
    max_fanout: int = Field(default=DEFAULT_MAX_FANOUT, description="Neighbours pushed per pop.")
    max_nodes: int = Field(default=DEFAULT_MAX_NODES, description="Pops of one search.")
    min_gain: float = Field(default=0.05, description="Stop below this gain.")

    @model_validator(mode="after")
    def _check(self) -> "ExpansionConfig":
        validate_unit_interval(self.gamma, "gamma", "the paper uses 0.7")
        _counts(self, ("max_fanout", "max_nodes"))
        check_finite_values(
            {"min_gain": self.min_gain, **{f"edge_weights[{k!r}]": w for k, w in self.edge_weights.items()}}
        )
        for k, w in self.edge_weights.items():
            if k not in EDGE_TYPES or w < 0:
                raise ValueError(f"edge_weights[{k!r}]={w!r} is invalid; keys are {EDGE_TYPES}, weights >= 0.")
        return self


class PropagationConfig(Stage):
    """``search="propagation"``: personalized PageRank over entities, modules and units (HippoRAG 2)."""

    damping: float = Field(default=DEFAULT_DAMPING, description="Chance a step follows an edge (HippoRAG 2: 0.5).")
    text_share: float = Field(default=0.8, description="Share of the reset on the best text units.")
    mention_weight: float = Field(default=1.0, description="Weight of an entity - unit mention edge.")
    title_weight: float = Field(
        default=0.0,
        description="Title nodes (documents' metadata 'title'): weight of the "
        "edge from a unit to its document's title; a unit naming a title links to it by "
        "mention_weight and a query naming one seeds it. 0: no title nodes.",
    )
    bridge_weight: float = Field(
        default=0.0,
        description="Title bridges (titles.title_bridge_order): a unit whose title one of the "
        "query's bridge_sources best units names gains bridge_weight x that unit's dense score; "
        "0: off. With a bridge, units rank by dense score plus bridges instead of by the walk.",
    )
    query_title_weight: float = Field(
        default=0.0, description="Title bridges: what a unit gains when the query names its title."
    )
    bridge_sources: int = Field(default=2, description="Title bridges: the best units whose named titles count.")

    @model_validator(mode="after")
    def _check(self) -> "PropagationConfig":
        if not 0.0 <= self.damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {self.damping!r}; HippoRAG 2 uses {DEFAULT_DAMPING}.")
        validate_unit_interval(self.text_share, "text_share", "1 = text units only")
        check_finite_values(
            {
                "mention_weight": self.mention_weight,
                "title_weight": self.title_weight,
                "bridge_weight": self.bridge_weight,
                "query_title_weight": self.query_title_weight,
            }
        )
        for name in ("title_weight", "bridge_weight", "query_title_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}; 0 turns it off.")
        if self.bridge_sources < 0:
            raise ValueError(f"bridge_sources must be >= 0, got {self.bridge_sources!r}; 0: only query-named titles.")
        if self.mention_weight < 0:
            raise ValueError(f"mention_weight must be >= 0, got {self.mention_weight!r}.")
        return self


class RankingConfig(Stage):
    """Step 3: unit score = ``text_weight * s_unit / max s_unit + (1 - text_weight) * gain / max gain``."""

    text_weight: float = Field(default=0.8, description="Unit score: text share against graph evidence.")
    text_candidates: int = Field(default=30, description="Best text units ranked beside the graph's.")
    max_units_per_item: int = Field(default=10, description="Source units taken per reached entity or relation.")
    graph_aggregate: GraphAggregate = Field(default="sum", description="'sum' or 'max' of entity gains per unit.")
    include_summaries: bool = Field(default=False, description="Also return reached module summaries.")
    include_statements: bool = Field(default=False, description="Also return traversed gate/relation statements.")

    @model_validator(mode="after")
    def _check(self) -> "RankingConfig":
        validate_unit_interval(self.text_weight, "text_weight", "0 = graph only")
        _counts(self, ("text_candidates", "max_units_per_item"))
        return self


class FittingConfig(FittingStage):
    """Step 4: the ranking cut at ``similarity_top_k`` nodes and, if set, ``budget_tokens``
    (:class:`~llama_index_ext_causalrag.text.fitting.FittingStage`; with the causal filter, after it):
    the node that does not fit is cut by ``fit_mode``."""

    similarity_top_k: int = Field(default=10, description="Nodes returned.")
    fit_mode: str = Field(
        default=DEFAULT_FIT_MODE,
        description=FIT_MODE_HELP + " 'sentences' and 'window' score "
        "sentences by the idf-weighted terms they share with the query.",
    )

    @field_validator("similarity_top_k", mode="before")
    @classmethod
    def _check_top_k(cls, v: Any) -> int:
        return check_top_k(v)  # before pydantic turns "5" into 5


class CausalFilterConfig(Stage):
    """The causal filter after the expansion (:class:`~.causal_filter.CausalFilterPostprocessor`)."""

    top_seeds: int = Field(default=5, ge=1, description="Seeds (and, as a floor, best nodes) always kept.")
    max_text_chars: int = Field(default=300, ge=20, description="Characters of node text shown to the LLM.")
    candidates_per_node: int = Field(default=2, ge=1, description="Candidates handed to the filter per node kept.")


class BridgeConfig(Stage):
    """:class:`~.bridge.CausalBridgeRetriever`: a share of each budget bridged to uncovered documents."""

    bridge_share: float = Field(default=0.25, description="Share of the budget given to bridged evidence.")
    max_bridge_docs: int = Field(default=2, description="Documents the bridge may draw from.")
    context_seeds: int = Field(default=10, description="Entities of the first-stage context joining the seeds.")
    min_relative_score: float = Field(default=0.0, description="Bridge units need s_unit / max s_unit >= this.")
    use_graph: bool = Field(default=True, description="False: the best text units of uncovered documents, no graph.")
    protect_top_doc: bool = Field(default=False, description="Take tokens only outside the top document.")

    @field_validator("bridge_share", mode="before")
    @classmethod
    def _check_share(cls, v: Any) -> float:
        if not isinstance(v, (int, float)) or not 0.0 <= float(v) < 1.0:
            raise ValueError(f"bridge_share must be in [0, 1), got {v!r}; 0 bridges nothing.")
        return float(v)

    @field_validator("min_relative_score", mode="before")
    @classmethod
    def _check_relative(cls, v: Any) -> float:
        if not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"min_relative_score must be in [0, 1], got {v!r}; 0 keeps every candidate.")
        return float(v)

    @field_validator("max_bridge_docs", "context_seeds", mode="before")
    @classmethod
    def _check_count(cls, v: Any, info: ValidationInfo) -> int:
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{info.field_name} must be an int >= 0, got {v!r}.")
        return v


# ---- build ------------------------------------------------------------------------------
class _BuildStage(Stage):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class UnitsConfig(_BuildStage):
    """``from_documents``: the text units, ``SentenceSplitter(chunk_size, chunk_overlap)``."""

    chunk_size: int = Field(default=256, description="SentenceSplitter chunk size of from_documents' units.")
    chunk_overlap: int = Field(default=0, description="SentenceSplitter chunk overlap of from_documents' units.")


class EntitiesConfig(_BuildStage):
    """Canonical entities: which extracted names are kept and which are merged."""

    min_entity_units: Optional[int] = Field(
        default=None, description="Keep entities found in at least this many units (None: the extractor's default)."
    )
    max_entities: Optional[int] = Field(default=8000, description="Keep at most this many entities (None: all).")
    string_threshold: float = Field(default=0.92, description="Name similarity that merges two entity names.")
    embed_threshold: float = Field(default=0.95, description="Embedding cosine that merges two entity names.")


class HierarchyConfig(_BuildStage):
    """The Leiden hierarchy H0..HL (``leiden_hierarchy``'s parameters)."""

    max_cluster_size: int = Field(
        default=DEFAULT_MAX_CLUSTER_SIZE, description="Leiden: split communities larger than this."
    )
    max_levels: int = Field(default=DEFAULT_MAX_LEVELS, description="Levels H0..HL of the module hierarchy.")
    resolution: float = Field(default=DEFAULT_RESOLUTION, description="Leiden resolution (1.0 is modularity).")
    seed: int = Field(default=DEFAULT_SEED, description="Leiden's random seed.")

    @model_validator(mode="after")
    def _check(self) -> "HierarchyConfig":
        validate_hierarchy_params(self.max_cluster_size, self.max_levels, self.resolution)
        return self


class ModulesConfig(_BuildStage):
    """The modules' vectors and the causal gates judged between them."""

    module_embedding: ModuleEmbedding = Field(
        default=DEFAULT_MODULE_EMBEDDING,
        description="'members': the mean of the entities' vectors (no model call); 'summary': title + summary embedded.",
    )
    gate_candidates_per_module: int = Field(
        default=DEFAULT_GATE_CANDIDATES, description="Gate candidates judged per module (0: no gates)."
    )

    @model_validator(mode="after")
    def _check(self) -> "ModulesConfig":
        if self.gate_candidates_per_module < 0:
            raise ValueError(
                f"gate_candidates_per_module must be an int >= 0, got "
                f"{self.gate_candidates_per_module!r}; use 0 to build no gates."
            )
        return self


class RunConfig(_BuildStage):
    """How a build runs, not what it builds (not persisted)."""

    num_workers: Optional[int] = Field(
        default=None, description="Concurrent LLM calls per stage (None: 8 for an LLM with real acomplete, else 1)."
    )
    max_llm_calls: Optional[int] = Field(default=None, description="Stop before the build makes more LLM calls.")
    max_llm_tokens: Optional[int] = Field(default=None, description="Stop before the build spends more LLM tokens.")


SEEDING, EXPANSION, PROPAGATION, RANKING, FITTING = (
    SeedingConfig(),
    ExpansionConfig(),
    PropagationConfig(),
    RankingConfig(),
    FittingConfig(),
)
CAUSAL_FILTER, BRIDGE = CausalFilterConfig(), BridgeConfig()
UNITS, ENTITIES, HIERARCHY, MODULES, RUN = (
    UnitsConfig(),
    EntitiesConfig(),
    HierarchyConfig(),
    ModulesConfig(),
    RunConfig(),
)

__all__ = [
    "BRIDGE",
    "BridgeConfig",
    "CAUSAL_FILTER",
    "CausalFilterConfig",
    "DEFAULT_MODULE_EMBEDDING",
    "ENTITIES",
    "EXPANSION",
    "EntitiesConfig",
    "ExpansionConfig",
    "FITTING",
    "FittingConfig",
    "GRAPH_AGGREGATES",
    "HIERARCHY",
    "HierarchyConfig",
    "MODULES",
    "MODULE_EMBEDDINGS",
    "ModulesConfig",
    "PROPAGATION",
    "PropagationConfig",
    "RANKING",
    "RUN",
    "RankingConfig",
    "RunConfig",
    "SEARCHES",
    "SEEDING",
    "SeedingConfig",
    "UNITS",
    "UnitsConfig",
]
