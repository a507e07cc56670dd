"""The settings of each stage of UMGP retrieval, one default each.

A :class:`MultiGranularityIndex` retrieves in three stages, each with its own typed settings:

* :class:`FusionConfig`: the candidate lists and their entropy fusion (:class:`EntropyFusionRetriever`);
* :class:`PromotionConfig`: parent promotion of the fused units (:class:`ParentPromotionPostprocessor`);
* :class:`FittingConfig`: the token budget and how a promoted node that does not fit it is cut
  (the shared :class:`~llama_index_ext_causalrag.text.fitting.FittingStage`).

:class:`~.presets.UMGConfig` composes them on the shared
:class:`~llama_index_ext_causalrag.presets.StagedConfig`, and the components take their defaults from
:data:`FUSION`, :data:`PROMOTION` and :data:`FITTING`, so a setting has its default in one place.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Tuple, get_args

import numpy as np
from llama_index.core.bridge.pydantic import Field, model_validator

from llama_index_ext_causalrag.multigranularity.entropy import Weighting
from llama_index_ext_causalrag.presets import Stage
from llama_index_ext_causalrag.text.fitting import FIT_MODE_HELP, FIT_MODES, FittingStage, fit_mode_of_fit_to_budget

EXPERT_NAMES = ("dense", "sparse")
FitEvidence = Literal["fused", "query"]
ParentEvidence = Literal["children", "document", "lists"]
Allocation = Literal["greedy", "evidence"]
FIT_EVIDENCE, PARENT_EVIDENCE, ALLOCATIONS = get_args(FitEvidence), get_args(ParentEvidence), get_args(Allocation)
DEFAULT_FIT_WEIGHTS = (0.0, 1.0)  # (dense, BM25); dense 0: measured no gain on HolisQA (docs/umgp.md)


class FusionConfig(Stage):
    """Which lists are fused and how."""

    candidates_per_list: int = Field(default=100, ge=1, description="Top units taken from each expert list.")
    weighting: Weighting = Field(default="entropy", description="List weights: 'entropy' confidences or 'equal'.")
    length_exponent: float = Field(default=0.5, ge=0.0, description="Rank by P / len ** this (0.5 = sqrt).")
    expert_names: Tuple[str, ...] = Field(default=EXPERT_NAMES, description="Experts fused: dense, sparse.")
    granularities: Optional[Tuple[int, ...]] = Field(default=None, description="Granularities fused; None = all.")
    dense_feedback: float = Field(
        default=0.0,
        description="Dense pseudo-relevance feedback (Rocchio): each dense list is searched again with "
        "q + this * the mean of its top feedback_depth units' vectors; 0 = off.",
    )
    lexical_feedback: int = Field(
        default=0,
        description="Lexical pseudo-relevance feedback (RM3-style): this many expansion terms of each "
        "BM25 list's top feedback_depth units are added to the query and the list is scored again; 0 = off.",
    )
    lexical_feedback_weight: float = Field(
        default=0.5, description="lexical_feedback: the expansion terms' share of the query's term mass (0 to 1)."
    )
    feedback_depth: int = Field(default=10, description="Top units of a list that pseudo-relevance feedback reads.")

    @model_validator(mode="after")
    def _check(self) -> "FusionConfig":
        check_feedback(self.dense_feedback, self.lexical_feedback, self.lexical_feedback_weight, self.feedback_depth)
        if not self.expert_names or any(e not in EXPERT_NAMES for e in self.expert_names):
            raise ValueError(
                f"expert_names must be a non-empty subset of {EXPERT_NAMES}, got {list(self.expert_names)!r}."
            )
        return self


class PromotionConfig(Stage):
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
    max_overlap: float = Field(
        default=0.75, ge=0.0, le=1.0, description="Skip nodes overlapping a selected one by more."
    )
    promote_within_long_documents: bool = Field(
        default=False,
        description="Also promote hits inside documents longer than the parent window (the paper); False: "
        "only to parents that are a whole document, a hit in a longer document stays itself.",
    )
    parent_evidence: ParentEvidence = Field(
        default="children",
        description="What ranks a parent that is a whole document: 'children' (the summed evidence of its fused "
        "units among the candidates), 'document' (the pooled P of all its units in every list) or 'lists' "
        "(each list's best unit of the document, weighted and summed over the lists: one vote per list).",
    )


class FittingConfig(FittingStage):
    """The budget and how a node that does not fit it is cut (:class:`FittingStage`): by default to
    its sentences with the most fused evidence per token."""

    fit_mode: str = Field(default="sentences", description=FIT_MODE_HELP + " 'prefix': parents handed on whole.")
    fit_evidence: FitEvidence = Field(
        default="fused",
        description="Sentences of a fitted parent scored by 'fused' evidence, or by 'query': that prior re-weighted "
        "by the query's BM25 (and, with a dense weight, cosine) scores of each sentence.",
    )
    fit_weights: Tuple[float, float] = Field(
        default=DEFAULT_FIT_WEIGHTS, description="fit_evidence='query': weights (dense, BM25) of the sentence scores."
    )
    allocation: Allocation = Field(
        default="greedy",
        description="How the budget is shared among passages: 'greedy' (whole passages in rank order, the first "
        "that does not fit cut to its best sentences) or 'evidence' (per query, the number k of passages whose "
        "best sentences within budget / k each cover the most evidence).",
    )

    @model_validator(mode="before")
    @classmethod
    def _fit_to_budget(cls, data: Any) -> Any:
        return fit_mode_of_fit_to_budget(data, "FittingConfig")

    @property
    def fit_to_budget(self) -> bool:
        """Deprecated (read-only): ``fit_mode != "prefix"``; ``fit_to_budget=False`` is ``fit_mode="prefix"``."""
        return self.fit_mode != "prefix"


def check_feedback(dense: float, terms: int, weight: float, depth: int) -> None:
    """Pseudo-relevance feedback settings, checked where they are given (a stage, the fusion retriever)."""
    if not np.isfinite(dense) or dense < 0:
        raise ValueError(f"dense_feedback must be a finite weight >= 0, got {dense!r}; 0 turns it off, e.g. 0.5.")
    if isinstance(terms, bool) or not isinstance(terms, int) or terms < 0:
        raise ValueError(f"lexical_feedback must be a number of terms >= 0, got {terms!r}; 0 turns it off, e.g. 10.")
    if not np.isfinite(weight) or not 0.0 <= weight <= 1.0:
        raise ValueError(f"lexical_feedback_weight must be in [0, 1], got {weight!r}; e.g. 0.5.")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"feedback_depth must be a number of units >= 1, got {depth!r}; e.g. 10.")


FUSION, PROMOTION, FITTING = FusionConfig(), PromotionConfig(), FittingConfig()


__all__ = [
    "ALLOCATIONS",
    "Allocation",
    "PARENT_EVIDENCE",
    "ParentEvidence",
    "check_feedback",
    "DEFAULT_FIT_WEIGHTS",
    "EXPERT_NAMES",
    "FIT_EVIDENCE",
    "FIT_MODES",
    "FITTING",
    "FUSION",
    "FitEvidence",
    "FittingConfig",
    "FusionConfig",
    "PROMOTION",
    "PromotionConfig",
]
