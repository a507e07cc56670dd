"""A served unit's BM25 terms, carried in its vector-store row's metadata.

A store that computes BM25 lists itself (PostgreSQL's triggers, Milvus's import of the terms)
reads each row's terms from its metadata: ``umg_terms`` (term -> count, the tokens of the
in-memory expert) and ``umg_terms_len`` (their number). :func:`with_terms` puts them there.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from llama_index.core.schema import BaseNode

TERMS_KEY, TERMS_LEN_KEY = "umg_terms", "umg_terms_len"  # a vector-store row's BM25 terms and their count


def with_terms(unit: BaseNode, tokens: Sequence[str]) -> BaseNode:
    """A copy of ``unit`` whose metadata carries its BM25 ``tokens`` as term counts (for the
    vector-store row only: the triggers read them; excluded from embed and LLM text)."""
    keys = (TERMS_KEY, TERMS_LEN_KEY)
    return unit.model_copy(
        update={
            "metadata": {**unit.metadata, TERMS_KEY: dict(Counter(tokens)), TERMS_LEN_KEY: len(tokens)},
            "excluded_embed_metadata_keys": [*(k for k in unit.excluded_embed_metadata_keys if k not in keys), *keys],
            "excluded_llm_metadata_keys": [*(k for k in unit.excluded_llm_metadata_keys if k not in keys), *keys],
        }
    )


__all__ = ["TERMS_KEY", "TERMS_LEN_KEY", "with_terms"]
