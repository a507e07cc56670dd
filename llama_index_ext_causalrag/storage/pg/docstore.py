"""Bulk nodes into LlamaIndex's ``PostgresDocumentStore`` with ``COPY`` and one upsert.

Where ``add_documents(nodes, allow_update=True, batch_size=1000)`` spends its time (cProfile,
5,000 nodes, 50 a ref doc, 7.9 s under the profiler): 4.9 s in one ``SELECT`` per node for its
ref doc's stored entry (``get_ref_doc_info`` in ``_prepare_kv_pairs``), 1.8 s in ``put_all``
(0.9 s of it SQLAlchemy compiling each 1,000-row ``INSERT ... VALUES``), 0.8 s in
``RefDocInfo.to_dict`` (once a node); ``doc_to_json``, ``json.dumps`` and the hash take about
20 us a node.

:func:`write_nodes` writes the same rows (``tests/test_pg_copy.py`` compares them): node data
(``doc_to_json``), hash and ref doc per node, and each ref doc's entry merged with its stored one
as ``add_documents`` merges them. Stored entries are read in one ``SELECT``, the rows go by text
``COPY`` into a temporary table and from there into the kvstore's table with ``INSERT ... ON
CONFLICT (key, namespace) DO UPDATE``, all in one transaction. ``benchmarks/scripts/
bench_pg_copy.py --rows 20000``: 12,923 nodes/s against 1,154 for ``add_documents``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Dict, List, Optional

from llama_index.core.bridge.pydantic import BaseModel, Field, TypeAdapter, ValidationError
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.storage.docstore.keyval_docstore import KVDocumentStore
from llama_index.core.storage.docstore.types import RefDocInfo
from llama_index.core.storage.docstore.utils import doc_to_json

from llama_index_ext_causalrag.storage.pg.copy import copy_in, table_of

try:  # the postgres extra's JSON parser: a stored node parsed in 8.7 against 15.0 us (HolisQA biology, 2.8 KB a node)
    from orjson import JSONDecodeError as _FastDecodeError
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - installed with the postgres extra
    _fast_loads, _FastDecodeError = json.loads, ValueError

_STAGE = "causalrag_docstore_stage"


def supports_bulk_docstore(docstore: Any) -> bool:
    """LlamaIndex's key-value docstore (its own ``add_documents``) over a ``PostgresKVStore``
    whose sync driver is psycopg2."""
    if not isinstance(docstore, KVDocumentStore) or type(docstore).add_documents is not KVDocumentStore.add_documents:
        return False
    return supports_bulk_kvstore(docstore._kvstore)


def is_pg_kvstore(kvstore: Any) -> bool:
    """LlamaIndex's ``PostgresKVStore``."""
    return type(kvstore).__name__ == "PostgresKVStore" and type(kvstore).__module__.startswith(
        "llama_index.storage.kvstore.postgres"
    )


def supports_bulk_kvstore(kvstore: Any) -> bool:
    """A ``PostgresKVStore`` whose sync driver is psycopg2 (cursors with ``copy_expert``)."""
    if not is_pg_kvstore(kvstore):
        return False
    import sqlalchemy

    engine = getattr(kvstore, "_engine", None)
    if engine is not None:
        return engine.dialect.driver == "psycopg2"
    try:
        return sqlalchemy.engine.make_url(kvstore.connection_string or "").get_driver_name() == "psycopg2"
    except sqlalchemy.exc.ArgumentError:
        return False


def _copy_text(value: str) -> str:
    """``value`` as a field of ``COPY``'s text format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _merged_ref_docs(
    docstore: KVDocumentStore, nodes: Sequence[BaseNode], ref_doc_ids: Sequence[str | None], stored: dict[str, dict]
) -> list[tuple[str, dict]]:
    """Each ref doc's entry as ``add_documents`` writes it: its stored node ids then the new
    ones in order; its stored metadata if any, else the union of its nodes' metadata (later
    nodes win). ``ref_doc_ids``: each node's; ``stored``: the ref-doc collection's values by key."""
    merged: dict[str, tuple[list[str], set, dict, bool]] = {}
    for node, ref_doc_id in zip(nodes, ref_doc_ids):
        if not ref_doc_id:
            continue
        if ref_doc_id not in merged:
            value = stored.get(ref_doc_id)
            info = docstore._remove_legacy_info(value) if value else RefDocInfo()
            merged[ref_doc_id] = (info.node_ids, set(info.node_ids), dict(info.metadata or {}), bool(info.metadata))
        node_ids, seen, metadata, keep_metadata = merged[ref_doc_id]
        if node.node_id not in seen:
            node_ids.append(node.node_id)
            seen.add(node.node_id)
        if not keep_metadata:
            metadata.update(node.metadata or {})
    return [
        (key, RefDocInfo(node_ids=node_ids, metadata=metadata).to_dict())
        for key, (node_ids, _, metadata, _) in merged.items()
    ]


def _copy_rows(cursor: Any, table: str, rows: Sequence[tuple[str, str, dict]], dumps: Callable[[Any], str]) -> None:
    """``rows`` (key, collection, value) into ``table`` through the staging table: ``COPY``, then
    one upsert."""
    text = "".join(f"{_copy_text(k)}\t{_copy_text(c)}\t{_copy_text(dumps(v))}\n" for k, c, v in rows)
    copy_in(cursor, f"COPY {_STAGE} (key, namespace, value) FROM STDIN", text)
    cursor.execute(
        f"INSERT INTO {table} (key, namespace, value) SELECT key, namespace, value FROM {_STAGE} "
        f"ON CONFLICT (key, namespace) DO UPDATE SET value = EXCLUDED.value; TRUNCATE {_STAGE}"
    )


def write_nodes(docstore: KVDocumentStore, nodes: Sequence[BaseNode], batch_size: int = 10_000) -> None:
    """The rows ``docstore.add_documents(nodes, allow_update=True)`` writes, in one transaction
    (nothing is written if it fails), ``batch_size`` nodes a ``COPY``."""
    nodes = _checked(nodes)
    kvstore = docstore._kvstore
    kvstore._initialize()  # creates the table, as add_documents does
    if not nodes:
        return
    with kvstore._engine.begin() as conn, conn.connection.cursor() as cursor:
        write_nodes_on(cursor, docstore, nodes, batch_size)


def _checked(nodes: Sequence[BaseNode]) -> list[BaseNode]:
    nodes = list(nodes)
    seen: set = set()
    for node in nodes:
        if node.node_id in seen:
            raise ValueError(
                f"node id {node.node_id!r} occurs twice among the {len(nodes)} nodes; pass each node once."
            )
        seen.add(node.node_id)
    return nodes


def write_nodes_on(cursor: Any, docstore: KVDocumentStore, nodes: Sequence[BaseNode], batch_size: int = 10_000) -> None:
    """:func:`write_nodes` on ``cursor``, in the caller's transaction (a connection to the
    docstore's database: :func:`~.atomic.replace_rows` writes the vector rows in the same one)."""
    nodes = _checked(nodes)
    kvstore = docstore._kvstore
    kvstore._initialize()
    if not nodes:
        return
    ref_doc_ids = [n.ref_doc_id for n in nodes]  # the node id of each one's SOURCE relationship
    table = table_of(kvstore)
    dumps = kvstore._engine.dialect._json_serializer or json.dumps  # what SQLAlchemy binds a JSON value with
    data, meta, refs = docstore._node_collection, docstore._metadata_collection, docstore._ref_doc_collection
    cursor.execute(
        f"SELECT key, value FROM {table} WHERE namespace = %s AND key = ANY(%s)",
        (refs, sorted({r for r in ref_doc_ids if r})),
    )
    ref_docs = _merged_ref_docs(docstore, nodes, ref_doc_ids, dict(cursor.fetchall()))
    cursor.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {_STAGE} ON COMMIT DROP AS "
        f"SELECT key, namespace, value FROM {table} WITH NO DATA"
    )
    for start in range(0, len(nodes), batch_size):
        batch = nodes[start : start + batch_size]
        rows = [(n.node_id, data, doc_to_json(n)) for n in batch]
        rows += [(n.node_id, meta, _hash_entry(n, r)) for n, r in zip(batch, ref_doc_ids[start : start + batch_size])]
        _copy_rows(cursor, table, rows, dumps)
    _copy_rows(cursor, table, [(key, refs, value) for key, value in ref_docs], dumps)


def _hash_entry(node: BaseNode, ref_doc_id: str | None) -> dict:
    """The metadata collection's value of ``node``: its hash and, if it has one, its ref doc."""
    return {"doc_hash": node.hash, "ref_doc_id": ref_doc_id} if ref_doc_id else {"doc_hash": node.hash}


def read_nodes(
    docstore: Any,
    ids: "Sequence[str] | None" = None,
    with_parents: bool = False,
    counter: Optional[str] = None,
    seen: Optional[List[int]] = None,
) -> Dict[str, BaseNode]:
    """Every node of ``docstore`` (where :func:`supports_bulk_docstore`; ``ids``: those nodes,
    where stored; ``with_parents``: and their PARENT nodes, in the same query) in one query, by id, as
    LlamaIndex's ``json_to_doc`` makes them. Each stored value is read as text (the server parses
    no JSON: ``value->'__data__'`` made it parse every value twice, 0.42 s against 0.14 s for
    HolisQA biology's 16,139 units) and parsed once by the client: a plain ``TextNode`` built from
    it without validation (:func:`_plain_text_node`), another ``TextNode`` parsed and validated in
    one pass (pydantic, :class:`_StoredTextNode`), other node types and legacy entries by
    ``json_to_doc``. ``counter``: SQL of one integer (a write counter in
    the docstore's database), read in the same statement, so in the same snapshot as the nodes,
    and appended to ``seen``."""
    from llama_index.core.storage.docstore.utils import json_to_doc

    kvstore = docstore._kvstore
    kvstore._initialize()
    table = table_of(kvstore)
    text_type = TextNode.get_type()
    out: Dict[str, BaseNode] = {}
    params = {"c": docstore._node_collection, "ids": list(ids or ())}
    if ids is None:
        sql = f"SELECT key, value::text FROM {table} WHERE namespace = %(c)s"
    elif with_parents:  # PARENT is relationship "4" of a stored node's data
        # one scan of the ids and their parents' ids, each row once: a CTE of the units, read again for their parents,
        # took 4.8 against 1.4 ms (HolisQA biology, 50 units and 26 parents: each value decompressed twice, its JSON
        # path taken step by step, and a parent that is also a unit sent twice)
        sql = (
            f"SELECT key, value::text FROM {table} WHERE namespace = %(c)s AND key = ANY(%(ids)s::text[] || "
            f"ARRAY(SELECT value #>> '{{__data__,relationships,4,node_id}}' FROM {table} "
            "WHERE namespace = %(c)s AND key = ANY(%(ids)s)))"
        )
    else:
        sql = f"SELECT key, value::text FROM {table} WHERE namespace = %(c)s AND key = ANY(%(ids)s)"
    if counter is not None:  # a NULL key: no node's
        sql = f"({sql}) UNION ALL SELECT NULL, ({counter})::text"
    with kvstore._engine.connect() as conn, conn.connection.cursor() as cursor:
        cursor.execute(sql, params)
        for key, value in cursor:
            if key is None:
                if seen is not None:
                    seen.append(int(value))
                continue
            node = None
            if '"extra_info"' not in value and '"text_resource"' not in value:
                node = _plain_text_node(value, text_type)
                if node is None:
                    try:
                        stored = _StoredTextNode.model_validate_json(value)
                        node = stored.data if stored.kind == text_type else None
                    except ValidationError:
                        pass  # not a TextNode's data: json_to_doc below
            out[key] = node if node is not None else json_to_doc(json.loads(value))
    return out


_STR, _LIST, _INDEX = (str,), (list,), (int, type(None))
_PLAIN = {  # each field a plain node may have, with the JSON types validation would keep as they are
    **dict.fromkeys(("id_", "text", "mimetype", "metadata_template", "metadata_separator", "text_template"), _STR),
    **dict.fromkeys(("excluded_embed_metadata_keys", "excluded_llm_metadata_keys"), _LIST),
    **dict.fromkeys(("start_char_idx", "end_char_idx"), _INDEX),
    "metadata": (dict,),
    "relationships": (dict,),
    "embedding": (type(None),),
    "class_name": _STR,
}
# a node's relationships validated as TextNode validates them, in pydantic's core: the same objects as our own
# type checks and a model_construct an entry made, a little faster (3,000 HolisQA biology nodes: 55 against 59 us
# a node, most of it json.loads)
_RELATIONSHIPS = TypeAdapter(TextNode.model_fields["relationships"].annotation)


def _plain_text_node(value: str, text_type: str) -> Optional[TextNode]:
    """The ``TextNode`` stored as ``value``, built without validating its own fields where each
    already has the type validation would give it, its relationships validated as ``TextNode``
    validates them (the served lists' unit reads: 45 against 188 us a node of 2.8 KB, the same
    nodes); ``None`` for anything else (another node type, an embedding, a field of another type
    or name, relationships validation refuses), which the caller validates."""
    try:
        stored = _fast_loads(value)
    except _FastDecodeError:  # what only the json module reads (NaN, integers past 64 bits)
        stored = json.loads(value)
    data = stored.get("__data__") if isinstance(stored, dict) and stored.get("__type__") == text_type else None
    if not isinstance(data, dict) or not all(type(v) in _PLAIN.get(k, ()) for k, v in data.items()):
        return None
    if not all(
        type(v) is str
        for v in data.get("excluded_embed_metadata_keys", []) + data.get("excluded_llm_metadata_keys", [])
    ):
        return None
    fields = {k: v for k, v in data.items() if k != "class_name"}
    if "relationships" in fields:
        try:
            fields["relationships"] = _RELATIONSHIPS.validate_python(fields["relationships"])
        except ValidationError:
            return None
    return TextNode.model_construct(**fields)


class _StoredTextNode(BaseModel):
    """A docstore value ``{"__type__": ..., "__data__": {...}}`` read as a ``TextNode`` (the caller
    checks ``kind``; another node type's data is read again by ``json_to_doc``)."""

    kind: str = Field(alias="__type__")
    data: TextNode = Field(alias="__data__")


__all__ = [
    "is_pg_kvstore",
    "read_nodes",
    "supports_bulk_docstore",
    "supports_bulk_kvstore",
    "write_nodes",
    "write_nodes_on",
]
