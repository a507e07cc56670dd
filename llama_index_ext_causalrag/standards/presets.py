"""Settings of :class:`StructureAwareRetriever`, one typed config per stage (:mod:`.stages`)
composed by :class:`StructureAwareConfig`, and its named presets.

``"standards"`` (the default) is the configuration the benchmark reports, chosen on the
development questions over the QUIC RFCs: BM25 weighs four times the dense ranking in RRF, one
seed, no hub penalty, query identifiers (``INVALID_TOKEN``) count twice, a seed shares its
citation weight among the sections it cites. ``"first"`` is the first tuned configuration
(without the last two changes); ``"paper"`` weighs both rankings equally with three seeds and a
small hub penalty, as the method is described.
"""

from __future__ import annotations

from typing import Any, Dict

from llama_index.core.bridge.pydantic import Field, ValidationInfo, field_validator, model_validator

from llama_index_ext_causalrag.presets import StagedConfig, resolve_preset
from llama_index_ext_causalrag.standards.stages import (
    DEFAULT_EDGE_WEIGHTS,
    NEIGHBOUR_PICKS,
    DenseConfig,
    ExpansionConfig,
    FittingConfig,
    FusionConfig,
    LexicalConfig,
    RerankConfig,
)
from llama_index_ext_causalrag.validation import check_top_k


class StructureAwareConfig(StagedConfig):
    """The settings of :class:`StructureAwareRetriever`, one typed config per stage (:mod:`.stages`;
    the retriever's docstring explains them). Settings may also be given by name, e.g.
    ``StructureAwareConfig(rrf_k=30)`` or ``as_retriever(num_seeds=3)``: each goes to its stage."""

    similarity_top_k: int = Field(default=10, description="Nodes returned.")
    lexical: LexicalConfig = Field(default_factory=LexicalConfig, description="The BM25 prefilter.")
    dense: DenseConfig = Field(default_factory=DenseConfig, description="The dense re-rank (and smoothing).")
    fusion: FusionConfig = Field(default_factory=FusionConfig, description="RRF of the two rankings.")
    expansion: ExpansionConfig = Field(default_factory=ExpansionConfig, description="Graph expansion from the seeds.")
    rerank: RerankConfig = Field(default_factory=RerankConfig, description="The final re-rank and order.")
    fitting: FittingConfig = Field(default_factory=FittingConfig, description="The cut to a token budget.")

    @field_validator("similarity_top_k", mode="before")
    @classmethod
    def _check_top_k(cls, v: Any, info: ValidationInfo) -> int:
        return check_top_k(v, info.field_name)

    @model_validator(mode="after")
    def _check_rankings(self) -> "StructureAwareConfig":
        if not (self.lexical.use_bm25 or self.dense.use_dense):
            raise ValueError("use_bm25 and use_dense are both False; switch at least one ranking on.")
        return self


SETTINGS = StructureAwareConfig.setting_names()  # every setting a preset takes by name
STANDARDS_PRESETS: Dict[str, StructureAwareConfig] = {
    "standards": StructureAwareConfig(),
    "first": StructureAwareConfig(
        lexical=LexicalConfig(identifier_weight=1.0), expansion=ExpansionConfig(citation_norm=0.0)
    ),
    "paper": StructureAwareConfig(
        lexical=LexicalConfig(identifier_weight=1.0),
        fusion=FusionConfig(rrf_weights=(1.0, 1.0)),
        expansion=ExpansionConfig(num_seeds=3, citation_norm=0.0),
        rerank=RerankConfig(beta=0.05),
    ),
}
DEFAULT_PRESET = "standards"


def get_preset(preset: "str | StructureAwareConfig") -> StructureAwareConfig:
    return resolve_preset(preset, STANDARDS_PRESETS, StructureAwareConfig)


def preset_to_json(preset: "str | StructureAwareConfig") -> Any:
    """What ``params.json`` records of ``preset``: its name, or the config's fields by stage."""
    return preset.model_dump(mode="json") if isinstance(preset, StructureAwareConfig) else preset


def preset_from_json(stored: Any) -> "str | StructureAwareConfig":
    """The preset ``params.json`` recorded (:func:`preset_to_json`; a custom configuration by stage, or
    by name as versions before the stages wrote it); :data:`DEFAULT_PRESET` if none."""
    return StructureAwareConfig(**stored) if isinstance(stored, dict) else (stored or DEFAULT_PRESET)


__all__ = [
    "DEFAULT_EDGE_WEIGHTS",
    "DEFAULT_PRESET",
    "NEIGHBOUR_PICKS",
    "SETTINGS",
    "STANDARDS_PRESETS",
    "StructureAwareConfig",
    "get_preset",
    "preset_from_json",
    "preset_to_json",
]
