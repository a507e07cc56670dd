"""The settings of each stage of UMGP retrieval, one default each.

A :class:`MultiGranularityIndex` retrieves in three stages, each with its own typed settings:

* :class:`FusionConfig`: the candidate lists and their entropy fusion (:class:`EntropyFusionRetriever`);
* :class:`PromotionConfig`: parent promotion of the fused units (:class:`ParentPromotionPostprocessor`);
* :class:`FittingConfig`: how a promoted node that does not fit the token budget is cut.

The presets (:mod:`.presets`) compose them, and the components take their defaults from
:data:`FUSION`, :data:`PROMOTION` and :data:`FITTING`, so a setting has its default in one place.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple, Type

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, model_validator

from llama_index_ext_causalrag.multigranularity.entropy import WEIGHTINGS

EXPERT_NAMES = ("dense", "sparse")
FIT_MODES = ("sentences", "window")
FIT_EVIDENCE = ("fused", "query")
DEFAULT_FIT_WEIGHTS = (0.0, 1.0)  # (dense, BM25); dense 0: measured no gain on HolisQA (docs/umgp.md)


class _Stage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FusionConfig(_Stage):
    """Which lists are fused and how."""

    candidates_per_list: int = Field(default=100, ge=1, description="Top units taken from each expert list.")
    weighting: str = Field(default="entropy", description="List weights: 'entropy' confidences or 'equal'.")
    length_exponent: float = Field(default=0.5, ge=0.0, description="Rank by P / len ** this (0.5 = sqrt).")
    expert_names: Tuple[str, ...] = Field(default=EXPERT_NAMES, description="Experts fused: dense, sparse.")
    granularities: Optional[Tuple[int, ...]] = Field(default=None, description="Granularities fused; None = all.")

    @model_validator(mode="after")
    def _check(self) -> "FusionConfig":
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}.")
        if not self.expert_names or any(e not in EXPERT_NAMES for e in self.expert_names):
            raise ValueError(f"expert_names must be a non-empty subset of {EXPERT_NAMES}, got {list(self.expert_names)!r}.")
        return self


class PromotionConfig(_Stage):
    """Whether and where fused units are promoted to their parents."""

    promote: bool = Field(default=True, description="Parent promotion after fusion (False: UMG fusion only).")
    parent_granularity: Optional[int] = Field(
        default=None,
        description="Window size (sentences) fine hits are promoted to; None = the coarsest granularity. "
        "Fixed when the index is built.",
    )
    candidates: int = Field(default=50, ge=1, description="Fused units handed to parent promotion.")
    evidence_key: Optional[str] = Field(
        default="P", description="Provenance key summed into parents ('P' mixture); None = the fused score."
    )
    max_overlap: float = Field(default=0.75, ge=0.0, le=1.0, description="Skip nodes overlapping a selected one by more.")
    promote_within_long_documents: bool = Field(
        default=False,
        description="Also promote hits inside documents longer than the parent window (the paper); False: "
        "only to parents that are a whole document, a hit in a longer document stays itself.")


class FittingConfig(_Stage):
    """How a node that does not fit the budget is cut to its best sentences."""

    fit_to_budget: bool = Field(default=True, description="Fit a parent that does not fit the budget to its best sentences.")
    fit_mode: str = Field(default="sentences", description="'sentences' or 'window' (one contiguous run).")
    fit_evidence: str = Field(
        default="fused",
        description="Sentences of a fitted parent scored by 'fused' evidence, or by 'query': that prior re-weighted "
        "by the query's BM25 (and, with a dense weight, cosine) scores of each sentence.")
    fit_weights: Tuple[float, float] = Field(
        default=DEFAULT_FIT_WEIGHTS, description="fit_evidence='query': weights (dense, BM25) of the sentence scores.")

    @model_validator(mode="after")
    def _check(self) -> "FittingConfig":
        if self.fit_mode not in FIT_MODES:
            raise ValueError(f"fit_mode must be one of {FIT_MODES}, got {self.fit_mode!r}.")
        if self.fit_evidence not in FIT_EVIDENCE:
            raise ValueError(f"fit_evidence must be one of {FIT_EVIDENCE}, got {self.fit_evidence!r}.")
        return self


STAGES: Dict[str, Type[_Stage]] = {"fusion": FusionConfig, "promotion": PromotionConfig, "fitting": FittingConfig}
STAGE_OF: Dict[str, str] = {name: stage for stage, cls in STAGES.items() for name in cls.model_fields}
FUSION, PROMOTION, FITTING = FusionConfig(), PromotionConfig(), FittingConfig()


def nest(data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` with its stage settings given by name (``weighting="equal"``) moved into their
    stage (``{"fusion": {"weighting": "equal"}}``); other keys are left for validation to name."""
    out: Dict[str, Any] = {}
    for stage in STAGES:
        given = data.get(stage)
        out[stage] = dict(given.model_dump() if isinstance(given, BaseModel) else given or {})
    for key, value in data.items():
        if key in STAGES:
            continue
        if key in STAGE_OF:
            out[STAGE_OF[key]][key] = value
        else:
            out[key] = value
    return out


__all__ = ["DEFAULT_FIT_WEIGHTS", "EXPERT_NAMES", "FIT_EVIDENCE", "FIT_MODES", "FITTING", "FUSION", "FittingConfig",
           "FusionConfig", "PROMOTION", "PromotionConfig", "STAGES", "STAGE_OF", "nest"]
