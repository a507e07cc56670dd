"""LlamaIndex's ``MetadataFilters`` as a Milvus filter expression over the ``metadata`` JSON
field, with the semantics of :mod:`..filters` (the in-memory test): :func:`milvus_filter`."""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.storage.filters import combined

Op = FilterOperator
_MILVUS_KEY = re.compile(r'^[^"\\]+$')


def milvus_literal(value: Any) -> str:
    """``value`` as a Milvus expression literal: a string quoted and escaped, a number, or a list of them."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(milvus_literal(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if not np.isfinite(value):
            raise ValueError(f"Milvus filters take finite numbers, got {value!r}.")
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    raise ValueError(f"Milvus filters take strings and numbers, got {type(value).__name__} {value!r}.")


def _milvus_field(key: str) -> str:
    if not _MILVUS_KEY.match(key):
        raise ValueError(f"metadata filter key {key!r}: Milvus filters cannot name a key holding '\"' or '\\'.")
    return f'metadata["{key}"]'


def _milvus_one(f: MetadataFilter) -> str:
    v, op = _milvus_field(f.key), f.operator
    compare = {Op.EQ: "==", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
    if op in compare:
        return f"({v} {compare[op]} {milvus_literal(f.value)})"
    if op == Op.NE:
        return f"(not ({v} == {milvus_literal(f.value)}))"
    if op in (Op.IN, Op.NIN):  # equalities: Milvus Lite takes `in` on fields only, not JSON paths
        any_of = "(" + " or ".join(f"{v} == {milvus_literal(x)}" for x in f.value) + ")"
        return any_of if op == Op.IN else f"(not {any_of})"
    if op == Op.CONTAINS:
        return f"json_contains({v}, {milvus_literal(f.value)})"
    if op in (Op.ANY, Op.ALL):
        return f"json_contains_{op.value}({v}, {milvus_literal(list(f.value))})"
    if op == Op.TEXT_MATCH:
        return f"({v} like {milvus_literal(f.value)})"
    if op == Op.IS_EMPTY:
        return f'((not (exists {v})) or {v} == "")'
    raise ValueError(
        f"metadata filter on key {f.key!r}: Milvus has no {op.value!r} operator; "
        "use text_match (case-sensitive LIKE) or filter in memory."
    )


def _milvus_expr(filters: MetadataFilters) -> str:
    return combined(
        [_milvus_expr(f) if isinstance(f, MetadataFilters) else _milvus_one(f) for f in filters.filters],
        filters.condition,
    )


def milvus_filter(filters: Optional[MetadataFilters]) -> str:
    """The Milvus expression of ``filters`` over the ``metadata`` JSON field ('' for none), values
    as literals (Milvus Lite has no ``filter_params`` templates)."""
    return "" if filters is None or not filters.filters else _milvus_expr(filters)


__all__ = ["milvus_filter", "milvus_literal"]
