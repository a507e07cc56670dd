"""Named configurations of :class:`MultiGranularityIndex` retrieval.

``"umgp"`` (the default) is the configuration the benchmark reports: entropy fusion of dense
and BM25 experts over 2- to 32-sentence windows, then parent promotion to the coarsest windows,
fitted to the token budget sentence by sentence. ``"paper"`` is UMGP-RAG as published (8-sentence
parents, evidence = the fused score, parents handed on whole). ``"umg"`` is fusion alone.
``"documents"`` (opt-in, for collections of short passages) is ``"umgp"`` with a document-level
vote: each document of at most :data:`DOCUMENT_VECTOR_TOKENS` tokens gets its own vector on its
whole-document unit (:attr:`MultiGranularityNodeParser.document_vector_tokens`, set when
``from_documents`` builds with this preset), and a whole-document parent is ranked by each list's
best unit of it, summed over the lists (``parent_evidence="lists"``), not by its windows' summed evidence.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Sequence

from llama_index.core.bridge.pydantic import Field

from llama_index_ext_causalrag.multigranularity.feedback import Feedback
from llama_index_ext_causalrag.multigranularity.stages import FittingConfig, FusionConfig, PromotionConfig
from llama_index_ext_causalrag.presets import StagedConfig, resolve_preset


class UMGConfig(StagedConfig):
    """Retrieval settings of a :class:`MultiGranularityIndex` (``index.as_retriever(**overrides)``):
    one typed config per stage (:mod:`.stages`) on the shared :class:`StagedConfig`. Settings may
    also be given by name, e.g. ``UMGConfig(weighting="equal")`` or ``as_retriever(fit_mode="window")``:
    each goes to its stage."""

    fusion: FusionConfig = Field(default_factory=FusionConfig, description="The lists and their fusion.")
    promotion: PromotionConfig = Field(default_factory=PromotionConfig, description="Parent promotion.")
    fitting: FittingConfig = Field(default_factory=FittingConfig, description="Fitting to the token budget.")

    DEPRECATED_STAGE_OF: ClassVar[Dict[str, str]] = {"fit_to_budget": "fitting"}  # read as fit_mode

    def parent_for(self, granularities: Sequence[int]) -> int:
        """The parent granularity of an index with these window sizes."""
        parent_granularity = self.promotion.parent_granularity
        return parent_granularity if parent_granularity is not None else max(granularities)


SETTINGS = UMGConfig.setting_names()  # every setting a preset takes by name
UMG_PRESETS: Dict[str, UMGConfig] = {
    "umgp": UMGConfig(),
    "paper": UMGConfig(
        promotion=PromotionConfig(parent_granularity=8, evidence_key=None, promote_within_long_documents=True),
        fitting=FittingConfig(fit_mode="prefix"),
    ),
    "umg": UMGConfig(promotion=PromotionConfig(promote=False)),
    "documents": UMGConfig(promotion=PromotionConfig(parent_evidence="lists")),
}
DEFAULT_PRESET = "umgp"
DOCUMENT_VECTOR_TOKENS = 256  # all-MiniLM-L6-v2 reads 256 word pieces; chosen on the multi-hop dev sets
PRESET_PARSER_SETTINGS: Dict[str, Dict[str, Any]] = {"documents": {"document_vector_tokens": DOCUMENT_VECTOR_TOKENS}}


def parser_settings(preset: "str | UMGConfig") -> Dict[str, Any]:
    """The :class:`MultiGranularityNodeParser` settings a named preset builds with (none for the others)."""
    return dict(PRESET_PARSER_SETTINGS.get(preset, {})) if isinstance(preset, str) else {}


def feedback_of(fusion: FusionConfig) -> Feedback:
    """The pseudo-relevance feedback a fusion stage asks of its lists."""
    return Feedback(
        fusion.dense_feedback, fusion.lexical_feedback, fusion.lexical_feedback_weight, fusion.feedback_depth
    )


def get_preset(preset: "str | UMGConfig") -> UMGConfig:
    return resolve_preset(preset, UMG_PRESETS, UMGConfig)


def load_preset(value: Any) -> "str | UMGConfig":
    """The ``preset`` recorded in ``params.json``: a name, or a custom configuration's fields (by
    stage, or by name as versions before the stages wrote them)."""
    return UMGConfig(**value) if isinstance(value, dict) else str(value)
