"""Explicit LLM resolution: ``llm=``, else ``Settings.llm``, else ``None`` and a logged offline alternative.

Never triggers LlamaIndex's implicit OpenAI default.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from llama_index.core.llms import LLM
from llama_index.core.settings import Settings

logger = logging.getLogger(__name__)


def resolve_llm(llm: Optional[LLM], step: str, offline_alternative: str) -> Optional[LLM]:
    """``llm`` if given, else ``Settings.llm`` if the user set one, else ``None``.

    Never triggers LlamaIndex's default (OpenAI) resolution. When it returns ``None`` it
    logs, at WARNING level, which offline alternative ``step`` will use instead.
    """
    if llm is not None:
        return llm
    configured = getattr(Settings, "_llm", None)
    if configured is not None:
        return configured
    logger.warning(
        "%s: no LLM configured (llm=None and Settings.llm unset); using the offline %s.",
        step,
        offline_alternative,
    )
    return None


def model_name_of(obj: object) -> str:
    """A stable name for an LLM or embedding model, for cache keys.

    A model given as an absolute path whose last component has a suffix, i.e. a model file
    (``LlamaCPP(model_path=".../qwen.gguf")``), is named by the file name alone, so that answers
    cached on one machine are hits on another where the same file lives elsewhere. A path
    without a suffix is kept whole: a model directory's last component is often a generic
    ``model``.
    """
    for attr in ("model_name", "model", "model_path"):
        value = getattr(obj, attr, None)
        if isinstance(value, str) and value:
            path = Path(value)
            return path.name if path.is_absolute() and path.suffix else value
    return type(obj).__name__
