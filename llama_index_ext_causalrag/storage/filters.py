"""LlamaIndex's ``MetadataFilters``, evaluated the same way in memory and in PostgreSQL.

``as_retriever(filters=MetadataFilters(...))`` scopes a query (a tenant, a product, a date
range). The filter goes into each candidate list, before its top-k, so a filtered list is the
best ``k`` of the units that pass (a top-k filtered afterwards would come back short).

* :func:`check_filters`: refuse what cannot be evaluated (an operator we do not know, a value of
  the wrong type for its operator), naming the key, before any query runs;
* :func:`matches`: whether one node's metadata passes (the in-memory lists);
* :func:`filter_sql`: the same test as SQL over a JSON metadata column, with bound parameters;
* :func:`milvus_filter`: as a Milvus filter expression over a JSON field (values as literals).

Semantics, on both sides: a key the node does not carry fails every operator except ``!=``,
``nin`` and ``is_empty`` (so a filter on a key no unit carries returns nothing, not an error);
numbers compare as numbers and strings as strings (a string never equals a number);
``contains``/``any``/``all`` test a list-valued key; ``text_match`` is SQL ``LIKE`` with the
value as the pattern (``%`` and ``_`` wildcards), ``text_match_insensitive`` ``ILIKE``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

Op = FilterOperator
_COMPARE = {Op.EQ: "=", Op.NE: "<>", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_LIST_VALUED = (Op.IN, Op.NIN, Op.ANY, Op.ALL)
_SCALAR = (str, int, float)


def _bad(f: MetadataFilter, why: str) -> ValueError:
    return ValueError(f"metadata filter on key {f.key!r} ({f.operator.value} {f.value!r}): {why}")


def check_filters(filters: Optional[MetadataFilters], owner: str = "filters") -> Optional[MetadataFilters]:
    """``filters`` if every filter can be evaluated, else a ``ValueError`` naming its key and the fix."""
    if filters is None:
        return None
    if not isinstance(filters, MetadataFilters):
        raise TypeError(f"{owner}: filters must be llama_index MetadataFilters, got {type(filters).__name__}; "
                        "e.g. MetadataFilters(filters=[MetadataFilter(key='year', value=2024)]).")
    if filters.condition not in (FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT, None):
        raise ValueError(f"{owner}: unknown filter condition {filters.condition!r}; use AND, OR or NOT.")
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            check_filters(f, owner)
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
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_kind(a: Any, b: Any) -> bool:
    return (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))


def _like(value: str, pattern: str, insensitive: bool) -> bool:
    """SQL ``LIKE``: ``%`` any run, ``_`` one character, the rest literal."""
    rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, value, re.S | (re.I if insensitive else 0)) is not None


def _one(meta: Mapping[str, Any], f: MetadataFilter) -> bool:
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
    results = (matches(meta, f) if isinstance(f, MetadataFilters) else _one(meta, f) for f in filters.filters)
    if filters.condition == FilterCondition.OR:
        return any(results)
    if filters.condition == FilterCondition.NOT:
        return not any(results)
    return all(results)


def filter_mask(nodes: Sequence[Any], filters: MetadataFilters) -> np.ndarray:
    """Which of ``nodes`` pass ``filters``: a boolean array, one entry per node."""
    return np.fromiter((matches(n.metadata, filters) for n in nodes), dtype=bool, count=len(nodes))


# ---- in SQL ------------------------------------------------------------------------------
class _Params:
    def __init__(self) -> None:
        self.values: Dict[str, Any] = {}

    def add(self, value: Any) -> str:
        name = f"f{len(self.values)}"
        self.values[name] = value
        return f"%({name})s"


def _sql_one(m: str, f: MetadataFilter, p: _Params) -> str:
    key = p.add(f.key)
    v, vt = f"({m} -> {key})", f"({m} ->> {key})"
    op = f.operator
    if op == Op.IS_EMPTY:
        return f"({v} IS NULL OR {v} = 'null'::jsonb OR {v} = '[]'::jsonb OR {v} = '\"\"'::jsonb)"
    if op in (Op.EQ, Op.NE, Op.IN, Op.NIN):
        values = f.value if op in (Op.IN, Op.NIN) else [f.value]
        # jsonb equality: a number equals a number (1 = 1.0), a string a string, never each other
        test = f"{v} = ANY({p.add([json.dumps(x) for x in values])}::jsonb[])"
        return f"NOT coalesce({test}, false)" if op in (Op.NE, Op.NIN) else f"coalesce({test}, false)"
    if op in (Op.GT, Op.GTE, Op.LT, Op.LTE):
        sym = _COMPARE[op]
        if _is_number(f.value):
            return (f"(jsonb_typeof({v}) = 'number' AND "
                    f"(CASE WHEN jsonb_typeof({v}) = 'number' THEN {vt}::float8 END) {sym} {p.add(float(f.value))})")
        return f"(jsonb_typeof({v}) = 'string' AND {vt} COLLATE \"C\" {sym} {p.add(f.value)} COLLATE \"C\")"
    if op in (Op.CONTAINS, Op.ANY, Op.ALL):
        wanted = [f.value] if op == Op.CONTAINS else f.value
        tests = [f"({v} @> jsonb_build_array({p.add(json.dumps(w))}::jsonb))" for w in wanted]
        joined = " AND ".join(tests) if op == Op.ALL else " OR ".join(tests)
        return f"(jsonb_typeof({v}) = 'array' AND ({joined}))"
    if op in (Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE):
        like = "ILIKE" if op == Op.TEXT_MATCH_INSENSITIVE else "LIKE"
        return f"(jsonb_typeof({v}) = 'string' AND {vt} {like} {p.add(f.value)})"
    raise ValueError(f"operator {op!r} is not supported")


def _combined(parts: Sequence[str], condition: Optional[FilterCondition]) -> str:
    """``parts`` joined by ``condition`` (SQL and Milvus expressions alike; none: true)."""
    if not parts:
        return "true"
    if condition == FilterCondition.OR:
        return "(" + " or ".join(parts) + ")"
    if condition == FilterCondition.NOT:
        return "(not (" + " or ".join(parts) + "))"
    return "(" + " and ".join(parts) + ")"


def _sql(m: str, filters: MetadataFilters, p: _Params) -> str:
    return _combined([_sql(m, f, p) if isinstance(f, MetadataFilters) else _sql_one(m, f, p) for f in filters.filters],
                     filters.condition)


def filter_sql(filters: MetadataFilters, column: str) -> Tuple[str, Dict[str, Any]]:
    """``(SQL condition, parameters)`` of ``filters`` over the JSON(B) metadata ``column`` (a
    trusted SQL expression); parameters are named ``f0``, ``f1``, ... for psycopg2's ``%(name)s``."""
    p = _Params()
    return _sql(f"({column})::jsonb", filters, p), p.values


# ---- in Milvus ---------------------------------------------------------------------------
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
        return f"((not (exists {v})) or {v} == \"\")"
    raise ValueError(f"metadata filter on key {f.key!r}: Milvus has no {op.value!r} operator; "
                     "use text_match (case-sensitive LIKE) or filter in memory.")


def _milvus_expr(filters: MetadataFilters) -> str:
    return _combined([_milvus_expr(f) if isinstance(f, MetadataFilters) else _milvus_one(f) for f in filters.filters],
                     filters.condition)


def milvus_filter(filters: Optional[MetadataFilters]) -> str:
    """The Milvus expression of ``filters`` over the ``metadata`` JSON field ('' for none), values
    as literals (Milvus Lite has no ``filter_params`` templates)."""
    return "" if filters is None or not filters.filters else _milvus_expr(filters)


def filters_key(filters: Optional[MetadataFilters]) -> str:
    """A stable text for ``filters`` (a cache key)."""
    return "" if filters is None else filters.model_dump_json()


__all__ = ["check_filters", "filter_mask", "filter_sql", "filters_key", "matches", "milvus_filter", "milvus_literal"]
