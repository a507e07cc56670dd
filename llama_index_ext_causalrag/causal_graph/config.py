"""Settings of :class:`GatedExpansionRetriever` as one typed object, and its named presets.

``"causalrag2"`` (the default) is the configuration the benchmark reports; ``"nogates"`` drops
the causal gate edges and ``"flat"`` the module hierarchy (hence the gates too), the paper's
ablations.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llama_index_ext_causalrag.causal_graph.expansion import DEFAULT_EDGE_WEIGHTS, EDGE_TYPES, validate_unit_interval
from llama_index_ext_causalrag.text.tokens import validate_budget
from llama_index_ext_causalrag.presets import resolve_preset
from llama_index_ext_causalrag.validation import check_finite_values, check_top_k

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

    @field_validator("similarity_top_k", mode="before")
    @classmethod
    def _check_top_k(cls, v: Any) -> int:
        return check_top_k(v)  # before pydantic turns "5" into 5

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
        if self.graph_aggregate not in ("sum", "max"):
            raise ValueError(f"graph_aggregate must be 'sum' or 'max', got {self.graph_aggregate!r}.")
        return self


CAUSALRAG2_PRESETS: Dict[str, GatedExpansionConfig] = {
    "causalrag2": GatedExpansionConfig(),
    "nogates": GatedExpansionConfig(use_gates=False),
    "flat": GatedExpansionConfig(use_hierarchy=False),
}
DEFAULT_PRESET = "causalrag2"


def get_preset(preset: "str | GatedExpansionConfig") -> GatedExpansionConfig:
    return resolve_preset(preset, CAUSALRAG2_PRESETS, GatedExpansionConfig)
