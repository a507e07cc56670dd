"""HCQR's settings: one typed config per stage, composed by the presets, one default per setting."""

import inspect

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K
from llama_index_ext_causalrag.hypothesis.planner import OfflineHypothesisPlanner
from llama_index_ext_causalrag.hypothesis.presets import HYPOTHESIS_PRESETS, SETTINGS, HypothesisConfig
from llama_index_ext_causalrag.hypothesis.retriever import HypothesisRetriever
from llama_index_ext_causalrag.hypothesis.stages import (
    FITTING,
    FUSION,
    PLANNING,
    FittingConfig,
    FusionConfig,
    PlanningConfig,
)
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES, QUERY_ROLES

# the "paper" preset as HypothesisConfig.model_dump() gave it before the stages: every setting flat
OLD_FLAT_PAPER = {
    "distinguish_weight": 1.0,
    "option_terms": False,
    "original_weight": 1.0,
    "per_query_k": 5,
    "rrf_k": 60.0,
    "use_queries": ["support", "distinguish", "key_features"],
}


class _Nothing(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []


def test_the_presets_compose_stages_and_each_stage_has_its_defaults_once():
    assert HYPOTHESIS_PRESETS["default"] == HypothesisConfig(planning=PLANNING, fusion=FUSION, fitting=FITTING)
    paper = HYPOTHESIS_PRESETS["paper"]
    assert paper.planning == PlanningConfig(use_queries=QUERY_ROLES, option_terms=False)
    assert paper.fusion == FusionConfig(rrf_k=DEFAULT_RRF_K, original_weight=1.0, distinguish_weight=1.0)
    assert (
        SETTINGS
        == set(HypothesisConfig.STAGE_OF)
        == (set(PlanningConfig.model_fields) | set(FusionConfig.model_fields) | set(FittingConfig.model_fields))
    )
    # the components take their defaults from the stages
    hr = HypothesisRetriever(_Nothing())
    assert hr.config == HYPOTHESIS_PRESETS["default"] and (hr.planning, hr.fusion, hr.fitting) == (
        PLANNING,
        FUSION,
        FITTING,
    )
    assert (hr.per_query_k, hr.rrf_k, hr.overlap_threshold, hr.use_queries) == (
        FUSION.per_query_k,
        FUSION.rrf_k,
        FUSION.overlap_threshold,
        PLANNING.use_queries,
    )
    assert (
        inspect.signature(OfflineHypothesisPlanner.__init__).parameters["option_terms"].default == PLANNING.option_terms
    )
    assert OfflineHypothesisPlanner().option_terms == PLANNING.option_terms


def test_a_setting_by_name_goes_to_its_stage_and_explicit_arguments_override_the_preset():
    c = HypothesisConfig(rrf_k=60, use_queries=("original", "support"), overlap_threshold=0.8)
    assert c.fusion == FusionConfig(rrf_k=60, overlap_threshold=0.8)
    assert c.planning == PlanningConfig(use_queries=("support", "original"))  # in ALL_ROLES order
    assert c.with_settings(rrf_k=10).fusion.rrf_k == 10 and c.with_settings(rrf_k=10).planning == c.planning
    hr = HypothesisRetriever(_Nothing(), preset="paper", per_query_k=3, overlap_threshold=0.9)
    assert hr.fusion == FusionConfig(
        per_query_k=3, rrf_k=60, original_weight=1, distinguish_weight=1, overlap_threshold=0.9
    )
    assert hr.planning == HYPOTHESIS_PRESETS["paper"].planning
    again = hr.with_options(rrf_k=30)
    assert again.fusion.rrf_k == 30 and again.fusion.per_query_k == 3 and again.planning.option_terms is False


def test_an_old_flat_preset_loads():
    assert HypothesisConfig(**OLD_FLAT_PAPER) == HYPOTHESIS_PRESETS["paper"]
    old = HypothesisRetriever(_Nothing(), preset=HypothesisConfig(**OLD_FLAT_PAPER))
    assert old.config == HypothesisRetriever(_Nothing(), preset="paper").config
    settings = HYPOTHESIS_PRESETS["paper"].settings()
    assert {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in settings.items()
        if k != "overlap_threshold" and k not in FittingConfig.model_fields
    } == OLD_FLAT_PAPER  # fitting came later


def test_an_unknown_or_bad_setting_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"HypothesisConfig has no setting 'rrf_kk' \(did you mean 'rrf_k'\?\)"):
        HypothesisConfig(rrf_kk=60)
    with pytest.raises(ValueError, match=r"per_query_k must be an int >= 1, got 0; the paper uses 5"):
        HypothesisRetriever(_Nothing(), per_query_k=0)
    with pytest.raises(ValueError, match=r"rrf_k must be a positive finite number, got inf"):
        HypothesisConfig(rrf_k=float("inf"))
    with pytest.raises(ValueError, match="use_queries must be a non-empty subset"):
        HypothesisConfig(use_queries=())
    with pytest.raises(TypeError):
        HypothesisRetriever(_Nothing(), None, 5)  # past retriever and transform, keywords only
    assert ALL_ROLES == PLANNING.use_queries
