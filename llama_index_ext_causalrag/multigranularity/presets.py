"""Named configurations of :class:`MultiGranularityIndex` retrieval.

``"umgp"`` (the default) is the configuration the benchmark reports: entropy fusion of dense
and BM25 experts over 2- to 32-sentence windows, then parent promotion to the coarsest windows,
fitted to the token budget sentence by sentence. ``"paper"`` is UMGP-RAG as published (8-sentence
parents, evidence = the fused score, parents handed on whole). ``"umg"`` is fusion alone.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, model_validator

from llama_index_ext_causalrag.multigranularity.promotion import DEFAULT_FIT_WEIGHTS, FIT_EVIDENCE, FIT_MODES
from llama_index_ext_causalrag.multigranularity.retriever import WEIGHTINGS
from llama_index_ext_causalrag.multigranularity.state import EXPERT_NAMES
from llama_index_ext_causalrag.presets import resolve_preset


class UMGConfig(BaseModel):
    """Retrieval settings of a :class:`MultiGranularityIndex` (``index.as_retriever(**overrides)``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    parent_granularity: Optional[int] = Field(
        default=None,
        description="Window size (sentences) fine hits are promoted to; None = the coarsest granularity. "
        "Fixed when the index is built.",
    )
    promote: bool = Field(default=True, description="Parent promotion after fusion (False: UMG fusion only).")
    candidates: int = Field(default=50, ge=1, description="Fused units handed to parent promotion.")
    candidates_per_list: int = Field(default=100, ge=1, description="Top units taken from each expert list.")
    weighting: str = Field(default="entropy", description="List weights: 'entropy' confidences or 'equal'.")
    length_exponent: float = Field(default=0.5, ge=0.0, description="Rank by P / len ** this (0.5 = sqrt).")
    expert_names: Tuple[str, ...] = Field(default=EXPERT_NAMES, description="Experts fused: dense, sparse.")
    granularities: Optional[Tuple[int, ...]] = Field(default=None, description="Granularities fused; None = all.")
    evidence_key: Optional[str] = Field(
        default="P", description="Provenance key summed into parents ('P' mixture); None = the fused score."
    )
    fit_to_budget: bool = Field(default=True, description="Fit a parent that does not fit the budget to its best sentences.")
    fit_mode: str = Field(default="sentences", description="'sentences' or 'window' (one contiguous run).")
    fit_evidence: str = Field(
        default="fused",
        description="Sentences of a fitted parent scored by 'fused' evidence, or by 'query': that prior re-weighted "
        "by the query's BM25 (and, with a dense weight, cosine) scores of each sentence.")
    fit_weights: Tuple[float, float] = Field(
        default=DEFAULT_FIT_WEIGHTS, description="fit_evidence='query': weights (dense, BM25) of the sentence scores.")
    max_overlap: float = Field(default=0.75, ge=0.0, le=1.0, description="Skip nodes overlapping a selected one by more.")
    promote_within_long_documents: bool = Field(
        default=False,
        description="Also promote hits inside documents longer than the parent window (the paper); False: "
        "only to parents that are a whole document, a hit in a longer document stays itself.")

    @model_validator(mode="after")
    def _check(self) -> "UMGConfig":
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}.")
        if self.fit_mode not in FIT_MODES:
            raise ValueError(f"fit_mode must be one of {FIT_MODES}, got {self.fit_mode!r}.")
        if self.fit_evidence not in FIT_EVIDENCE:
            raise ValueError(f"fit_evidence must be one of {FIT_EVIDENCE}, got {self.fit_evidence!r}.")
        if not self.expert_names or any(e not in EXPERT_NAMES for e in self.expert_names):
            raise ValueError(f"expert_names must be a non-empty subset of {EXPERT_NAMES}, got {list(self.expert_names)!r}.")
        return self

    def parent_for(self, granularities: Sequence[int]) -> int:
        """The parent granularity of an index with these window sizes."""
        return self.parent_granularity if self.parent_granularity is not None else max(granularities)


UMG_PRESETS: Dict[str, UMGConfig] = {
    "umgp": UMGConfig(),
    "paper": UMGConfig(parent_granularity=8, evidence_key=None, fit_to_budget=False, promote_within_long_documents=True),
    "umg": UMGConfig(promote=False),
}
DEFAULT_PRESET = "umgp"


def get_preset(preset: "str | UMGConfig") -> UMGConfig:
    return resolve_preset(preset, UMG_PRESETS, UMGConfig)


def load_preset(value: Any) -> "str | UMGConfig":
    """The ``preset`` recorded in ``params.json``: a name, or a custom configuration's fields."""
    return UMGConfig(**value) if isinstance(value, dict) else str(value)
