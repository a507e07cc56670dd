"""UMGP's settings: one typed config per stage, composed by the presets, one default per setting."""

import inspect

import pytest

from llama_index_ext_causalrag.multigranularity.presets import SETTINGS, UMG_PRESETS, UMGConfig, load_preset
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.stages import (
    FITTING,
    FUSION,
    PROMOTION,
    FittingConfig,
    FusionConfig,
    PromotionConfig,
)


def test_a_setting_by_name_goes_to_its_stage_and_the_presets_compose_stages():
    c = UMGConfig(weighting="equal", fit_mode="window", candidates=20)
    assert c.fusion == FusionConfig(weighting="equal")
    assert c.fitting == FittingConfig(fit_mode="window") and c.promotion == PromotionConfig(candidates=20)
    assert (
        c.with_settings(weighting="entropy").fusion == FUSION
        and c.with_settings(weighting="entropy").fitting.fit_mode == "window"
    )
    assert UMG_PRESETS["umgp"] == UMGConfig(fusion=FUSION, promotion=PROMOTION, fitting=FITTING)
    assert UMG_PRESETS["umg"].promotion.promote is False and UMG_PRESETS["umg"].fusion == FUSION
    paper = UMG_PRESETS["paper"]
    assert (paper.promotion.parent_granularity, paper.promotion.evidence_key, paper.fitting.fit_to_budget) == (
        8,
        None,
        False,
    )
    stage_of = UMGConfig.STAGE_OF
    assert SETTINGS == set(stage_of)
    assert len(stage_of) == sum(len(c.model_fields) for c in (FusionConfig, PromotionConfig, FittingConfig))
    assert set(c.settings()) == SETTINGS


def test_custom_presets_load_by_stage_and_as_earlier_versions_wrote_them():
    c = UMGConfig(weighting="equal", evidence_key=None, fit_weights=(1.0, 1.0))
    assert load_preset(c.model_dump()) == c  # params.json now: nested by stage
    assert (
        load_preset({"weighting": "equal", "evidence_key": None, "fit_weights": [1.0, 1.0]}) == c
    )  # before the stages
    assert load_preset("paper") == "paper"


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="weighting must be one of"):
        UMGConfig(weighting="loud")
    with pytest.raises(ValueError, match="fit_evidence must be one of"):
        UMGConfig(fit_evidence="oracle")
    with pytest.raises(ValueError, match="weightin"):
        UMGConfig(weightin="equal")


def test_the_components_take_their_defaults_from_the_stages():
    init = inspect.signature(EntropyFusionRetriever.__init__).parameters
    for name in ("candidates_per_list", "weighting", "length_exponent"):
        assert init[name].default == getattr(FUSION, name), name
    fields = ParentPromotionPostprocessor.model_fields
    for name in FittingConfig.model_fields:
        assert fields[name].default == getattr(FITTING, name), name
    assert fields["max_overlap"].default == PROMOTION.max_overlap
