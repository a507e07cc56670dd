"""Settings of :class:`HypothesisRetriever`, one typed config per stage (:mod:`.stages`) composed
by :class:`HypothesisConfig`, and its named presets.

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

from typing import Dict

from llama_index.core.bridge.pydantic import Field

from llama_index_ext_causalrag.fusion import DEFAULT_RRF_K
from llama_index_ext_causalrag.hypothesis.stages import FittingConfig, FusionConfig, PlanningConfig
from llama_index_ext_causalrag.hypothesis.state import QUERY_ROLES
from llama_index_ext_causalrag.presets import StagedConfig, resolve_preset


class HypothesisConfig(StagedConfig):
    """What a preset fixes, one typed config per stage (:mod:`.stages`): ``planning`` (the lists and
    the offline planner's queries), ``fusion`` (their weighted RRF) and ``fitting`` (the cut to the
    budget). Settings may also be given
    by name, ``HypothesisConfig(rrf_k=60)``, and each can be given to ``HypothesisRetriever`` directly."""

    planning: PlanningConfig = Field(default_factory=PlanningConfig, description="The lists and their queries.")
    fusion: FusionConfig = Field(default_factory=FusionConfig, description="Weighted RRF of the lists.")
    fitting: FittingConfig = Field(default_factory=FittingConfig, description="The cut to the token budget.")


SETTINGS = HypothesisConfig.setting_names()  # every setting a preset takes by name
HYPOTHESIS_PRESETS: Dict[str, HypothesisConfig] = {
    "default": HypothesisConfig(),
    "paper": HypothesisConfig(
        planning=PlanningConfig(use_queries=QUERY_ROLES, option_terms=False),
        fusion=FusionConfig(original_weight=1.0, distinguish_weight=1.0, rrf_k=DEFAULT_RRF_K),
    ),
}
DEFAULT_PRESET = "default"


def get_preset(preset: "str | HypothesisConfig") -> HypothesisConfig:
    return resolve_preset(preset, HYPOTHESIS_PRESETS, HypothesisConfig)
