"""A served unit's BM25 terms, carried in its vector-store row's metadata.

A store that computes BM25 lists itself (PostgreSQL's triggers, Milvus's import of the terms)
reads each row's terms from its metadata: ``umg_terms`` (term -> count, the tokens of the
in-memory expert) and ``umg_terms_len`` (their number), and the lists a row belongs to from
``umg_granularity`` (:data:`LIST_KEY`; the names are those the first served index, the
multi-granularity one, wrote, kept so that stored indexes still open). :func:`with_terms` puts
them there.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, Optional, Sequence

from llama_index.core.schema import BaseNode

TERMS_KEY, TERMS_LEN_KEY = "umg_terms", "umg_terms_len"  # a vector-store row's BM25 terms and their count
LIST_KEY = "umg_granularity"  # the (first) served list a row belongs to


def with_terms(unit: BaseNode, tokens: Sequence[str], extra: Optional[Dict[str, Any]] = None) -> BaseNode:
    """A copy of ``unit`` whose metadata carries its BM25 ``tokens`` as term counts, and ``extra``
    metadata (for the vector-store row only: the store reads them; excluded from embed and LLM text)."""
    added = {TERMS_KEY: dict(Counter(tokens)), TERMS_LEN_KEY: len(tokens), **(extra or {})}
    keys = tuple(added)
    return unit.model_copy(
        update={
            "metadata": {**unit.metadata, **added},
            "excluded_embed_metadata_keys": [*(k for k in unit.excluded_embed_metadata_keys if k not in keys), *keys],
            "excluded_llm_metadata_keys": [*(k for k in unit.excluded_llm_metadata_keys if k not in keys), *keys],
        }
    )


__all__ = ["LIST_KEY", "TERMS_KEY", "TERMS_LEN_KEY", "with_terms"]
