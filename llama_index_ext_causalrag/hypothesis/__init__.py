"""HCQR: hypothesis-conditioned query rewriting (arXiv 2603.19008)."""

from llama_index_ext_causalrag.hypothesis.evaluator import DecisionUsefulnessEvaluator, DecisionUsefulnessResult
from llama_index_ext_causalrag.hypothesis.planner import OfflineHypothesisPlanner
from llama_index_ext_causalrag.hypothesis.presets import HYPOTHESIS_PRESETS, HypothesisConfig
from llama_index_ext_causalrag.hypothesis.retriever import HypothesisRetriever
from llama_index_ext_causalrag.hypothesis.state import (
    ALL_ROLES,
    ORIGINAL_ROLE,
    QUERY_ROLES,
    HypothesisQueryBundle,
    HypothesisState,
)
from llama_index_ext_causalrag.hypothesis.transform import HypothesisQueryTransform

__all__ = [
    "ALL_ROLES",
    "ORIGINAL_ROLE",
    "DecisionUsefulnessEvaluator",
    "DecisionUsefulnessResult",
    "HYPOTHESIS_PRESETS",
    "HypothesisConfig",
    "HypothesisQueryBundle",
    "HypothesisQueryTransform",
    "HypothesisRetriever",
    "HypothesisState",
    "OfflineHypothesisPlanner",
    "QUERY_ROLES",
]
