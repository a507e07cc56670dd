"""The settings of CausalRAG2 as typed objects: :class:`CausalGraphBuildConfig` (what
``CausalGraphIndex.from_documents`` / ``from_nodes`` build) and :class:`GatedExpansionConfig`
(what :class:`GatedExpansionRetriever` retrieves), with the retriever's named presets.

``"ppr"`` (the default) scores the graph by personalized PageRank: it measured best of these on
GraphRAG-Bench novels and HolisQA biology and business (docs/causalrag2.md). ``"causalrag2"`` is
the published gated expansion with its causal filter; ``"nogates"`` drops the causal gate edges
and ``"flat"`` the module hierarchy (hence the gates too), the paper's ablations;
``"ppr_nogates"`` is ``"ppr"`` without the gate edges.
"""

from __future__ import annotations

from typing import Any, Collection, Dict, Optional

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llama_index_ext_causalrag.causal_graph.expansion import DEFAULT_EDGE_WEIGHTS, EDGE_TYPES, validate_unit_interval
from llama_index_ext_causalrag.causal_graph.hierarchy import validate_hierarchy_params
from llama_index_ext_causalrag.contract import check_keywords
from llama_index_ext_causalrag.text.tokens import validate_budget
from llama_index_ext_causalrag.presets import resolve_preset
from llama_index_ext_causalrag.validation import check_finite_values, check_top_k

# How a module gets its vector: "members", the normalised mean of its entities' name vectors (no
# model call); "summary", the embedded "title. summary" text (one text per module).
MODULE_EMBEDDINGS = ("members", "summary")
DEFAULT_MODULE_EMBEDDING = "members"


class CausalGraphBuildConfig(BaseModel):
    """Every setting of a :class:`CausalGraphIndex` build (the collaborators, LLM, embedder,
    extractor, summarizer, gate judge and stores, are arguments of their own).

    What the build makes is persisted in ``params.json`` (:meth:`persisted`); ``num_workers``,
    ``max_llm_calls`` and ``max_llm_tokens`` say how this build runs and are not.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    chunk_size: int = Field(default=256, description="SentenceSplitter chunk size of from_documents' units.")
    chunk_overlap: int = Field(default=0, description="SentenceSplitter chunk overlap of from_documents' units.")
    max_cluster_size: int = Field(default=10, description="Leiden: split communities larger than this.")
    max_levels: int = Field(default=4, description="Levels H0..HL of the module hierarchy.")
    resolution: float = Field(default=1.0, description="Leiden resolution (1.0 is modularity).")
    seed: int = Field(default=42, description="Leiden's random seed.")
    gate_candidates_per_module: int = Field(default=5, description="Gate candidates judged per module (0: no gates).")
    min_entity_units: Optional[int] = Field(
        default=None, description="Keep entities found in at least this many units (None: the extractor's default).")
    max_entities: Optional[int] = Field(default=8000, description="Keep at most this many entities (None: all).")
    string_threshold: float = Field(default=0.92, description="Name similarity that merges two entity names.")
    embed_threshold: float = Field(default=0.95, description="Embedding cosine that merges two entity names.")
    module_embedding: str = Field(
        default=DEFAULT_MODULE_EMBEDDING,
        description="'members': the mean of the entities' vectors (no model call); 'summary': title + summary embedded.")
    num_workers: Optional[int] = Field(
        default=None, description="Concurrent LLM calls per stage (None: 8 for an LLM with real acomplete, else 1).")
    max_llm_calls: Optional[int] = Field(default=None, description="Stop before the build makes more LLM calls.")
    max_llm_tokens: Optional[int] = Field(default=None, description="Stop before the build spends more LLM tokens.")

    @model_validator(mode="after")
    def _check(self) -> "CausalGraphBuildConfig":
        validate_hierarchy_params(self.max_cluster_size, self.max_levels, self.resolution)
        if self.module_embedding not in MODULE_EMBEDDINGS:
            raise ValueError(f"module_embedding must be one of {MODULE_EMBEDDINGS}, got {self.module_embedding!r}.")
        if self.gate_candidates_per_module < 0:
            raise ValueError(f"gate_candidates_per_module must be an int >= 0, got "
                             f"{self.gate_candidates_per_module!r}; use 0 to build no gates.")
        return self

    @classmethod
    def from_options(cls, owner: str, build_config: "Optional[CausalGraphBuildConfig]", options: Dict[str, Any],
                     also: Collection[str] = ()) -> "CausalGraphBuildConfig":
        """``build_config`` (default: the defaults) with ``options``, fields of this class by name;
        another name is a ``TypeError`` naming it (and, as what ``owner`` takes, ``also``)."""
        check_keywords(owner, options, set(cls.model_fields) | set(also))
        base = build_config if build_config is not None else cls()
        if not isinstance(base, cls):
            raise TypeError(f"{owner}: build_config must be a {cls.__name__}, got {type(base).__name__}.")
        return cls(**{**base.model_dump(), **options}) if options else base

    @classmethod
    def from_params(cls, params: Dict[str, Any]) -> "CausalGraphBuildConfig":
        """The settings recorded in an index's ``params`` (an older index lacks some: defaults)."""
        return cls(**{k: params[k] for k in cls.model_fields if k in params and k not in RUN_OPTIONS})

    def persisted(self) -> Dict[str, Any]:
        """What ``params.json`` keeps: every field but how the build ran (:data:`RUN_OPTIONS`)."""
        return self.model_dump(exclude=set(RUN_OPTIONS))


# how a build runs, not what it builds: not persisted
RUN_OPTIONS = ("num_workers", "max_llm_calls", "max_llm_tokens")

SEARCHES = ("expansion", "propagation")

_COUNTS = ("seeds_per_level", "entity_seeds", "unit_seeds", "mmr_pool", "max_fanout", "max_nodes",
           "text_candidates", "max_units_per_item")


class GatedExpansionConfig(BaseModel):
    """Every setting of :class:`GatedExpansionRetriever` (its docstring explains the steps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    similarity_top_k: int = Field(default=10, description="Nodes returned.")
    budget_tokens: Optional[int] = Field(default=None, description="Cut the ranking at this many tokens.")
    alpha: float = Field(default=0.7, description="Seed score: alpha * cosine + (1 - alpha) * lexical.")
    mmr_lambda: float = Field(default=0.7, description="MMR trade-off of seed picking.")
    gamma: float = Field(default=0.7, description="Gain decay per hop.")
    edge_weights: Dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_EDGE_WEIGHTS))
    seeds_per_level: int = 3
    entity_seeds: int = 5
    unit_seeds: int = 5
    mmr_pool: int = 50
    max_fanout: int = 5
    max_nodes: int = 200
    min_gain: float = 0.05
    text_weight: float = Field(default=0.8, description="Unit score: text share against graph evidence.")
    text_candidates: int = 30
    max_units_per_item: int = 10
    use_gates: bool = True
    use_hierarchy: bool = True
    include_summaries: bool = False
    include_statements: bool = False
    graph_aggregate: str = Field(default="sum", description="'sum' or 'max' of entity gains per unit.")
    search: str = Field(default="expansion", description="'expansion': gated best-first search from the seeds; "
                        "'propagation': personalized PageRank over the whole graph (PropagationRetriever).")
    damping: float = Field(default=0.5, description="propagation: chance a step follows an edge (HippoRAG 2: 0.5).")
    text_share: float = Field(default=0.8, description="propagation: share of the reset on the best text units.")
    mention_weight: float = Field(default=1.0, description="propagation: weight of an entity - unit mention edge.")

    @field_validator("similarity_top_k", mode="before")
    @classmethod
    def _check_top_k(cls, v: Any) -> int:
        return check_top_k(v)  # before pydantic turns "5" into 5

    @field_validator("budget_tokens", mode="before")
    @classmethod
    def _check_budget(cls, v: Any) -> Optional[int]:
        return validate_budget(v)  # before pydantic turns "100" into 100

    @model_validator(mode="after")
    def _check(self) -> "GatedExpansionConfig":
        if not isinstance(self.similarity_top_k, int) or self.similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be an int >= 1, got {self.similarity_top_k!r}.")
        validate_budget(self.budget_tokens)
        for name in ("alpha", "mmr_lambda", "gamma", "text_weight"):
            validate_unit_interval(getattr(self, name), name,
                                   "the paper uses 0.7" if name != "text_weight" else "0 = graph only")
        for name in _COUNTS:
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}.")
        check_finite_values({"min_gain": self.min_gain,
                             **{f"edge_weights[{k!r}]": w for k, w in self.edge_weights.items()}})
        for k, w in self.edge_weights.items():
            if k not in EDGE_TYPES or w < 0:
                raise ValueError(f"edge_weights[{k!r}]={w!r} is invalid; keys are {EDGE_TYPES}, weights >= 0.")
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, got {self.search!r}.")
        if not 0.0 <= self.damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {self.damping!r}; HippoRAG 2 uses 0.5.")
        validate_unit_interval(self.text_share, "text_share", "1 = text units only")
        check_finite_values({"mention_weight": self.mention_weight})
        if self.mention_weight < 0:
            raise ValueError(f"mention_weight must be >= 0, got {self.mention_weight!r}.")
        if self.graph_aggregate not in ("sum", "max"):
            raise ValueError(f"graph_aggregate must be 'sum' or 'max', got {self.graph_aggregate!r}.")
        return self


CAUSALRAG2_PRESETS: Dict[str, GatedExpansionConfig] = {
    "causalrag2": GatedExpansionConfig(),
    "nogates": GatedExpansionConfig(use_gates=False),
    "flat": GatedExpansionConfig(use_hierarchy=False),
    "ppr": GatedExpansionConfig(search="propagation"),
    "ppr_nogates": GatedExpansionConfig(search="propagation", use_gates=False),
}
DEFAULT_PRESET = "ppr"
# the published method: gated best-first expansion, then the causal filter
EXPANSION_PRESET = "causalrag2"


def get_preset(preset: "str | GatedExpansionConfig") -> GatedExpansionConfig:
    return resolve_preset(preset, CAUSALRAG2_PRESETS, GatedExpansionConfig)
