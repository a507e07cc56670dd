"""Explicit LLM resolution, never triggering LlamaIndex's implicit OpenAI default.

* Build-time steps and answers (:func:`resolve_llm`): ``llm=``, else ``Settings.llm``, else
  ``None`` and a logged offline alternative.
* Retrieval-time steps (:func:`resolve_query_llm`: the causal filter, the HCQR planner): the
  ``llm=`` they were given, ``Settings.llm`` only when asked with ``llm="settings"``
  (:data:`SETTINGS_LLM`), else ``None`` and a logged offline alternative. Setting
  ``Settings.llm`` for answers adds no LLM call inside retrieval.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Union

from llama_index.core.llms import LLM
from llama_index.core.settings import Settings

logger = logging.getLogger(__name__)

# ``llm="settings"``: a retrieval-time step uses ``Settings.llm`` (see resolve_query_llm)
SETTINGS_LLM = "settings"


def _check_llm_arg(llm: object, step: str) -> None:
    if isinstance(llm, str) and llm != SETTINGS_LLM:
        raise ValueError(f"{step}: llm must be an LLM, None or {SETTINGS_LLM!r} (use Settings.llm), got {llm!r}.")


def resolve_llm(llm: Union[LLM, str, None], step: str, offline_alternative: str) -> Optional[LLM]:
    """``llm`` if given, else ``Settings.llm`` if the user set one, else ``None``.

    Never triggers LlamaIndex's default (OpenAI) resolution. When it returns ``None`` it
    logs, at WARNING level, which offline alternative ``step`` will use instead.
    ``llm="settings"`` means the same as ``None`` here.
    """
    _check_llm_arg(llm, step)
    if llm is not None and not isinstance(llm, str):
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


def resolve_query_llm(llm: Union[LLM, str, None], step: str, offline_alternative: str) -> Optional[LLM]:
    """The LLM of a retrieval-time step: ``llm`` when one is given, ``Settings.llm`` only for
    ``llm="settings"``, else ``None``, logging (WARNING) which offline alternative ``step`` uses
    and, when ``Settings.llm`` is set, that it is left to the answers."""
    _check_llm_arg(llm, step)
    if isinstance(llm, str):
        return resolve_llm(None, step, offline_alternative)
    if llm is not None:
        return llm
    if getattr(Settings, "_llm", None) is not None:
        logger.warning(
            "%s: no llm= given; using the offline %s (Settings.llm answers, it is not called inside "
            "retrieval unless llm=%r).",
            step,
            offline_alternative,
            SETTINGS_LLM,
        )
    else:
        logger.warning("%s: no LLM given (llm=None); using the offline %s.", step, offline_alternative)
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
