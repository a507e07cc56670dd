"""Backward-compatible names: the LLM cache and cost accounting now live in
:mod:`llama_index_ext_causalrag.llm_cache`, the LLM-call layer in :mod:`llama_index_ext_causalrag.llm_io`."""

from __future__ import annotations

from llama_index_ext_causalrag.llm_cache import (  # noqa: F401  (re-exported)
    DEFAULT_CACHE_DIR,
    CostTracker,
    LLMCache,
    StageCost,
    sha,
)
from llama_index_ext_causalrag.llm_parse import p_yes_from_response  # noqa: F401  (re-exported)
from llama_index_ext_causalrag.llm_parse import parse_json_object  # noqa: F401  (re-exported)
