"""LlamaIndex's ``MetadataFilters``, evaluated the same way in memory and in every store.

``as_retriever(filters=MetadataFilters(...))`` scopes a query (a tenant, a product, a date
range). The filter goes into each candidate list, before its top-k, so a filtered list is the
best ``k`` of the units that pass (a top-k filtered afterwards would come back short).

* :func:`check_filters`: refuse what cannot be evaluated (an operator we do not know, a value of
  the wrong type for its operator), naming the key, before any query runs;
* :func:`matches`: whether one node's metadata passes (the in-memory lists);
* each store's driver folder translates them: ``pg/filters.py`` as SQL over a JSON metadata
  column with bound parameters, ``milvus/filters.py`` as a Milvus expression over a JSON field.

Semantics, on both sides: a key the node does not carry fails every operator except ``!=``,
``nin`` and ``is_empty`` (so a filter on a key no unit carries returns nothing, not an error);
numbers compare as numbers and strings as strings (a string never equals a number);
``contains``/``any``/``all`` test a list-valued key; ``text_match`` is SQL ``LIKE`` with the
value as the pattern (``%`` and ``_`` wildcards), ``text_match_insensitive`` ``ILIKE``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.validation import caller

Op = FilterOperator
_COMPARE = {Op.EQ: "=", Op.NE: "<>", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_LIST_VALUED = (Op.IN, Op.NIN, Op.ANY, Op.ALL)
_SCALAR = (str, int, float)


def _bad(f: MetadataFilter, why: str) -> ValueError:
    return ValueError(f"metadata filter on key {f.key!r} ({f.operator.value} {f.value!r}): {why}")


def check_filters(filters: Optional[MetadataFilters]) -> Optional[MetadataFilters]:
    """``filters`` if every filter can be evaluated, else a ``ValueError`` naming its key and the fix
    (and the public call, :func:`caller`)."""
    owner = caller("filters")
    if filters is None:
        return None
    if not isinstance(filters, MetadataFilters):
        raise TypeError(
            f"{owner}: filters must be llama_index MetadataFilters, got {type(filters).__name__}; "
            "e.g. MetadataFilters(filters=[MetadataFilter(key='year', value=2024)])."
        )
    if filters.condition not in (FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT, None):
        raise ValueError(f"{owner}: unknown filter condition {filters.condition!r}; use AND, OR or NOT.")
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            check_filters(f)
            continue
        if f.operator in _LIST_VALUED:
            if not isinstance(f.value, list) or not f.value:
                raise _bad(f, f"'{f.operator.value}' takes a non-empty list of values, e.g. value=['a', 'b'].")
        elif f.operator == Op.IS_EMPTY:
            continue
        elif f.operator in (Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE):
            if not isinstance(f.value, str):
                raise _bad(f, f"'{f.operator.value}' takes a string pattern.")
        elif f.operator in _COMPARE or f.operator == Op.CONTAINS:
            if isinstance(f.value, list) or f.value is None or isinstance(f.value, bool):
                raise _bad(f, f"'{f.operator.value}' takes one string or number; use 'in' for a list of values.")
            if f.operator in (Op.GT, Op.GTE, Op.LT, Op.LTE) and not isinstance(f.value, _SCALAR):
                raise _bad(f, "a range takes a number or a string.")
        else:
            raise _bad(f, f"operator {f.operator!r} is not supported; use one of {[o.value for o in Op]}.")
    return filters


# ---- in memory ---------------------------------------------------------------------------
def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_kind(a: Any, b: Any) -> bool:
    return (is_number(a) and is_number(b)) or (isinstance(a, str) and isinstance(b, str))


def _like(value: str, pattern: str, insensitive: bool) -> bool:
    """SQL ``LIKE``: ``%`` any run, ``_`` one character, the rest literal."""
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.S | (re.I if insensitive else 0)) is not None


def _matches_filter(meta: Mapping[str, Any], f: MetadataFilter) -> bool:
    have = f.key in meta and meta[f.key] is not None
    v = meta.get(f.key)
    op = f.operator
    if op == Op.IS_EMPTY:
        return not have or v == [] or v == ""
    if op in (Op.NE, Op.NIN) and not have:
        return True
    if not have:
        return False
    if op == Op.EQ:
        return _same_kind(v, f.value) and v == f.value
    if op == Op.NE:
        return not (_same_kind(v, f.value) and v == f.value)
    if op in (Op.GT, Op.GTE, Op.LT, Op.LTE):
        if not _same_kind(v, f.value):
            return False
        return {Op.GT: v > f.value, Op.GTE: v >= f.value, Op.LT: v < f.value, Op.LTE: v <= f.value}[op]
    if op == Op.IN:
        return any(_same_kind(v, x) and v == x for x in f.value)
    if op == Op.NIN:
        return not any(_same_kind(v, x) and v == x for x in f.value)
    if op in (Op.CONTAINS, Op.ANY, Op.ALL):
        items = v if isinstance(v, list) else []
        wanted = [f.value] if op == Op.CONTAINS else f.value
        hits = [any(_same_kind(i, w) and i == w for i in items) for w in wanted]
        return all(hits) if op == Op.ALL else any(hits)
    if op in (Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE):
        return isinstance(v, str) and _like(v, f.value, op == Op.TEXT_MATCH_INSENSITIVE)
    raise ValueError(f"operator {op!r} is not supported")


def matches(meta: Mapping[str, Any], filters: Optional[MetadataFilters]) -> bool:
    """Whether metadata ``meta`` passes ``filters`` (None passes everything)."""
    if filters is None:
        return True
    results = (
        matches(meta, f) if isinstance(f, MetadataFilters) else _matches_filter(meta, f) for f in filters.filters
    )
    if filters.condition == FilterCondition.OR:
        return any(results)
    if filters.condition == FilterCondition.NOT:
        return not any(results)
    return all(results)


def filter_mask(nodes: Sequence[Any], filters: MetadataFilters) -> np.ndarray:
    """Which of ``nodes`` pass ``filters``: a boolean array, one entry per node."""
    return np.fromiter((matches(n.metadata, filters) for n in nodes), dtype=bool, count=len(nodes))


# ---- in SQL ------------------------------------------------------------------------------
def combined(parts: Sequence[str], condition: Optional[FilterCondition]) -> str:
    """``parts`` joined by ``condition`` (SQL and Milvus expressions alike; none: true)."""
    if not parts:
        return "true"
    if condition == FilterCondition.OR:
        return "(" + " or ".join(parts) + ")"
    if condition == FilterCondition.NOT:
        return "(not (" + " or ".join(parts) + "))"
    return "(" + " and ".join(parts) + ")"


def filters_key(filters: Optional[MetadataFilters]) -> str:
    """A stable text for ``filters`` (a cache key)."""
    return "" if filters is None else filters.model_dump_json()


__all__ = ["check_filters", "combined", "filter_mask", "filters_key", "is_number", "matches"]
