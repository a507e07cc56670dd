"""LlamaIndex's ``MetadataFilters`` as SQL over a JSON(B) metadata column, with the semantics
of :mod:`..filters` (the in-memory test): :func:`filter_sql`."""

from __future__ import annotations

import json
from typing import Any, Dict, Tuple

from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.storage.filters import combined, is_number

Op = FilterOperator
_COMPARE = {Op.EQ: "=", Op.NE: "<>", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}


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
        if is_number(f.value):
            return (
                f"(jsonb_typeof({v}) = 'number' AND "
                f"(CASE WHEN jsonb_typeof({v}) = 'number' THEN {vt}::float8 END) {sym} {p.add(float(f.value))})"
            )
        return f'(jsonb_typeof({v}) = \'string\' AND {vt} COLLATE "C" {sym} {p.add(f.value)} COLLATE "C")'
    if op in (Op.CONTAINS, Op.ANY, Op.ALL):
        wanted = [f.value] if op == Op.CONTAINS else f.value
        tests = [f"({v} @> jsonb_build_array({p.add(json.dumps(w))}::jsonb))" for w in wanted]
        joined = " AND ".join(tests) if op == Op.ALL else " OR ".join(tests)
        return f"(jsonb_typeof({v}) = 'array' AND ({joined}))"
    if op in (Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE):
        like = "ILIKE" if op == Op.TEXT_MATCH_INSENSITIVE else "LIKE"
        return f"(jsonb_typeof({v}) = 'string' AND {vt} {like} {p.add(f.value)})"
    raise ValueError(f"operator {op!r} is not supported")


def _sql(m: str, filters: MetadataFilters, p: _Params) -> str:
    return combined(
        [_sql(m, f, p) if isinstance(f, MetadataFilters) else _sql_one(m, f, p) for f in filters.filters],
        filters.condition,
    )


def filter_sql(filters: MetadataFilters, column: str) -> Tuple[str, Dict[str, Any]]:
    """``(SQL condition, parameters)`` of ``filters`` over the JSON(B) metadata ``column`` (a
    trusted SQL expression); parameters are named ``f0``, ``f1``, ... for psycopg2's ``%(name)s``."""
    p = _Params()
    return _sql(f"({column})::jsonb", filters, p), p.values


__all__ = ["filter_sql"]
