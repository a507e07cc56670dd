"""The settings of each stage of HCQR, one default each.

:class:`HypothesisRetriever` retrieves in two stages, each with its own typed settings:

* :class:`PlanningConfig`: which lists are planned and run (the rewritten queries and the
  question with its options), and what the offline planner's key-features query holds;
* :class:`FusionConfig`: the lists' top nodes fused by weighted reciprocal rank, duplicates
  dropped;
* :class:`FittingConfig`: the fused list cut at the retriever's ``budget_tokens``, and how the
  last node that does not fit is cut.

The presets (:mod:`.presets`) compose them; the components take their defaults from
:data:`PLANNING`, :data:`FUSION` and :data:`FITTING`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Tuple

from llama_index.core.bridge.pydantic import Field, ValidationInfo, field_validator

from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES
from llama_index_ext_causalrag.presets import Stage
from llama_index_ext_causalrag.text.fitting import FIT_MODE_HELP, FittingStage

PAPER_PER_QUERY_K = 5  # the paper's nodes per list


class PlanningConfig(Stage):
    """The lists a question runs and how the offline planner writes its queries."""

    use_queries: Tuple[str, ...] = Field(
        default=ALL_ROLES, description="Lists to run and fuse: a subset of QUERY_ROLES and 'original'."
    )
    option_terms: bool = Field(
        default=True,
        description="Offline planner: the key-features query adds the options' key terms "
        "(content-bearing options only); False is the published query.",
    )

    @field_validator("use_queries", mode="before")
    @classmethod
    def _check_roles(cls, v: Any) -> Tuple[str, ...]:
        roles = (v,) if isinstance(v, str) else tuple(v or ())
        if not roles or any(r not in ALL_ROLES for r in roles):
            raise ValueError(f"use_queries must be a non-empty subset of {ALL_ROLES}, got {roles!r}.")
        return tuple(r for r in ALL_ROLES if r in roles)


class FusionConfig(Stage):
    """Weighted RRF of the lists' top nodes, keyed by node id, overlapping spans dropped."""

    per_query_k: int = Field(default=PAPER_PER_QUERY_K, description="Nodes taken from each list (the paper's 5).")
    rrf_k: float = Field(default=10.0, description="The RRF constant.")
    original_weight: float = Field(
        default=2.0,
        description="RRF weight of the 'original' list when the options carry content terms "
        "(otherwise it weighs 1, like every other list).",
    )
    distinguish_weight: float = Field(
        default=0.5,
        description="RRF weight of the 'distinguish' list when the options carry content terms (otherwise 1).",
    )
    overlap_threshold: float = Field(
        default=0.5,
        description="Span overlap share (of the shorter span) that makes two nodes of a document duplicates.",
    )

    @field_validator("per_query_k", mode="before")
    @classmethod
    def _check_k(cls, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"per_query_k must be an int >= 1, got {v!r}; the paper uses {PAPER_PER_QUERY_K}.")
        return int(v)

    @field_validator("rrf_k", "original_weight", "distinguish_weight", mode="before")
    @classmethod
    def _check_positive(cls, v: Any, info: ValidationInfo) -> float:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (0.0 < float(v) < math.inf):
            hint = (
                f"{DEFAULT_RRF_K:g} is the usual value" if info.field_name == "rrf_k" else "1 weighs it like the others"
            )
            raise ValueError(f"{info.field_name} must be a positive finite number, got {v!r}; {hint}.")
        return float(v)

    @field_validator("overlap_threshold", mode="before")
    @classmethod
    def _check_overlap(cls, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0.0 < float(v) <= 1.0:
            raise ValueError(
                f"overlap_threshold must be in (0, 1], got {v!r}; 1.0 removes only spans contained in another."
            )
        return float(v)


class FittingConfig(FittingStage):
    """The fused list cut at ``budget_tokens``: whole nodes while they fit, then the next one cut by
    ``fit_mode`` (:class:`~llama_index_ext_causalrag.text.fitting.FittingStage`)."""

    # "sentences": no worse than "prefix" at any budget on MedMCQA dev (CR@128..1024 equal, 89.5/93.6/95.9/97.5;
    # P@128/256 67.4/44.3 against 65.1/41.3; docs/hcqr.md)
    fit_mode: str = Field(
        default="sentences",
        description=FIT_MODE_HELP + " 'sentences' and 'window' score "
        "sentences by the terms they share with the question and its options.",
    )


PLANNING, FUSION, FITTING = PlanningConfig(), FusionConfig(), FittingConfig()

__all__ = ["FITTING", "FUSION", "FittingConfig", "FusionConfig", "PAPER_PER_QUERY_K", "PLANNING", "PlanningConfig"]
