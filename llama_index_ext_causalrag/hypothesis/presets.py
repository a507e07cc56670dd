"""Settings of :class:`HypothesisRetriever` as one typed object, and its named presets.

``"default"`` is the configuration the benchmark reports, chosen on the MedMCQA development
questions with the offline planner (``benchmarks/scripts/tune_hcqr.py``): the paper's three
queries plus our addition, the ``original`` list (the question with its answer options, one per
line); when the options carry content terms the ``original`` list weighs ``original_weight``
(2) and the distinguish list ``distinguish_weight`` (0.5) in an RRF with ``rrf_k`` 10; and the
offline planner's key-features query adds the options' key terms after the question's.
``"paper"`` is HCQR as published: the three queries, equal weights, RRF constant 60, the
key-features query from the question alone.
"""

from __future__ import annotations

from typing import Dict, Tuple

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, field_validator

from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES, QUERY_ROLES
from llama_index_ext_causalrag.presets import resolve_preset


class HypothesisConfig(BaseModel):
    """What a preset fixes; every field can also be given to ``HypothesisRetriever`` directly."""

    model_config = ConfigDict(frozen=True)

    use_queries: Tuple[str, ...] = Field(
        default=ALL_ROLES, description="Lists to run and fuse: a subset of QUERY_ROLES and 'original'.")
    original_weight: float = Field(
        default=2.0, gt=0.0, allow_inf_nan=False,
        description="RRF weight of the 'original' list when the options carry content terms "
                    "(otherwise it weighs 1, like every other list).")
    distinguish_weight: float = Field(
        default=0.5, gt=0.0, allow_inf_nan=False,
        description="RRF weight of the 'distinguish' list when the options carry content terms "
                    "(otherwise 1).")
    option_terms: bool = Field(
        default=True,
        description="Offline planner: the key-features query adds the options' key terms "
                    "(content-bearing options only); False is the published query.")
    per_query_k: int = Field(default=5, ge=1, description="Nodes taken from each list (the paper's 5).")
    rrf_k: float = Field(default=10.0, gt=0.0, allow_inf_nan=False, description="The RRF constant.")

    @field_validator("use_queries")
    @classmethod
    def _check_roles(cls, v: Tuple[str, ...]) -> Tuple[str, ...]:
        if not v or any(r not in ALL_ROLES for r in v):
            raise ValueError(f"use_queries must be a non-empty subset of {ALL_ROLES}, got {tuple(v)!r}.")
        return tuple(r for r in ALL_ROLES if r in v)


HYPOTHESIS_PRESETS: Dict[str, HypothesisConfig] = {
    "default": HypothesisConfig(),
    "paper": HypothesisConfig(use_queries=QUERY_ROLES, original_weight=1.0, distinguish_weight=1.0,
                              option_terms=False, rrf_k=DEFAULT_RRF_K),
}
DEFAULT_PRESET = "default"


def get_preset(preset: "str | HypothesisConfig") -> HypothesisConfig:
    return resolve_preset(preset, HYPOTHESIS_PRESETS, HypothesisConfig)
