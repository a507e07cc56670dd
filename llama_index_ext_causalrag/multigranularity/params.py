"""What a :class:`MultiGranularityIndex` was built with: one :class:`MGParams`, handed to its backend.

A backend (in memory, or on stores) gets the parameters and the state it works on, never the
index: it writes, commits and persists what they hold, and opening gives them back for the
index to be made from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.multigranularity.presets import DEFAULT_PRESET, UMGConfig, get_preset, load_preset
from llama_index_ext_causalrag.multigranularity.sentence_tokens import unit_tokens


@dataclass(frozen=True)
class MGParams:
    """The build parameters of an index, with the model that embeds its queries (and its updates).

    ``preset``: the preset's name, or ``"custom"`` for a :class:`UMGConfig` given whole
    (``config``); ``built_with``: the model the stored embeddings were made with, when the index
    was opened with another of the same dimension."""

    embed_model: BaseEmbedding
    parent_granularity: Optional[int]
    embedding_mode: str
    bm25_params: Dict[str, Any] = field(default_factory=dict)
    preset: str = DEFAULT_PRESET
    config: Optional[UMGConfig] = None
    built_with: Optional[str] = None

    def saved(self, granularities: List[int]) -> Dict[str, Any]:
        """The parameters every backend records in ``params.json``."""
        config = self.config if self.config is not None else get_preset(self.preset)
        return dict(
            granularities=list(granularities),
            parent_granularity=self.parent_granularity,
            embedding_mode=self.embedding_mode,
            bm25_params=self.bm25_params,
            preset=config.model_dump() if self.preset == "custom" else self.preset,
        )

    @classmethod
    def from_saved(cls, saved: Dict[str, Any], embed_model: BaseEmbedding) -> "MGParams":
        """The parameters :meth:`saved` wrote (``embed_model``: the one queries use now)."""
        preset = load_preset(saved.get("preset", DEFAULT_PRESET))
        return cls(
            embed_model,
            saved["parent_granularity"],
            saved["embedding_mode"],
            dict(saved.get("bm25_params") or {}),
            preset if isinstance(preset, str) else "custom",
            get_preset(preset),
            saved.get("embed_model"),
        )

    def tokens(self, units: List[BaseNode]) -> List[List[str]]:
        """The BM25 tokens of ``units`` under these parameters."""
        return unit_tokens(units, self.bm25_params)


__all__ = ["MGParams"]
