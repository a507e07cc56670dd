"""An update of a store-backed index in one PostgreSQL transaction: its commit point.

An update writes the new nodes into the docstore, removes the replaced units' vector rows, adds
the new rows (whose triggers update every served list and BM25 statistic) and moves the index's
state head (the kvstore value ``"head"`` that names the new generation). Through the stores'
own APIs each is a transaction of its own, so a reader could see the new rows of an update
whose head never moved (the journal undoes them later, but a reader may answer from them
first). Where the docstore's table and the kvstore's table are in the vector store's database
(the setup ``docs/stores.md`` shows: one PostgreSQL for all three), :func:`replace_rows`
writes all of them on one connection in one transaction: a reader sees the old rows and head,
or the new ones. The docstore entries the update no longer needs leave afterwards (no list and
no head names them any more).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.storage.pg.connection import same_database, url_of
from llama_index_ext_causalrag.storage.pg.copy import copy_on, encode_rows, supports_copy, table_of
from llama_index_ext_causalrag.storage.pg.docstore import supports_bulk_docstore, supports_bulk_kvstore, write_nodes_on
from llama_index_ext_causalrag.storage.row_ids import RowIds

COPY_ROWS = 5000  # rows a binary COPY of the transaction sends at once


def shares_database(vector_store: Any, docstore: Any, kvstore: Any = None) -> bool:
    """``vector_store`` is a ``PGVectorStore``, ``docstore`` a ``PostgresDocumentStore`` and
    ``kvstore`` (unless None) a ``PostgresKVStore``, all on psycopg2 and the same server and
    database: one transaction can write all of them."""
    if not (supports_copy(vector_store) and supports_bulk_docstore(docstore)):
        return False
    if kvstore is not None and not supports_bulk_kvstore(kvstore):
        return False
    urls = [vector_store.connection_string, url_of(docstore._kvstore)] + (
        [url_of(kvstore)] if kvstore is not None else []
    )
    return None not in urls and same_database(*urls)


def write_rows_on(
    cursor: Any,
    vector_store: Any,
    docstore: Any,
    new_nodes: Sequence[BaseNode],
    old_unit_ids: Sequence[str],
    new_units: Sequence[BaseNode],
    emb: Optional[np.ndarray],
    row_ids: RowIds,
) -> None:
    """The docstore entries and vector rows of an update on ``cursor``, in the caller's transaction."""
    write_nodes_on(cursor, docstore, new_nodes)
    table = table_of(vector_store)
    if old_unit_ids:
        cursor.execute(f"DELETE FROM {table} WHERE node_id = ANY(%s)", (row_ids.row_ids(list(old_unit_ids)),))
    for start in range(0, len(new_units), COPY_ROWS):
        rows = [row_ids.to_row(n, None) for n in new_units[start : start + COPY_ROWS]]
        copy_on(cursor, table, encode_rows(vector_store, rows, emb[start : start + COPY_ROWS]))  # type: ignore[index]


def put_value_on(cursor: Any, kvstore: Any, collection: str, key: str, value: Dict[str, Any]) -> None:
    """``kvstore.put(key, value, collection=collection)`` on ``cursor``, in the caller's transaction."""
    kvstore._initialize()
    dumps = kvstore._engine.dialect._json_serializer or json.dumps  # what SQLAlchemy binds a JSON value with
    cursor.execute(
        f"INSERT INTO {table_of(kvstore)} (key, namespace, value) VALUES (%s, %s, %s) "
        "ON CONFLICT (key, namespace) DO UPDATE SET value = EXCLUDED.value",
        (key, collection, dumps(value)),
    )


def replace_rows(
    vector_store: Any,
    docstore: Any,
    new_nodes: Sequence[BaseNode],
    old_unit_ids: Sequence[str],
    new_units: Sequence[BaseNode],
    new_emb: Optional[np.ndarray],
    row_ids: RowIds,
    head: Optional[Dict[str, Any]] = None,
    kvstore: Any = None,
    collection: Optional[str] = None,
) -> None:
    """In one transaction on ``vector_store``'s database: ``new_nodes`` into ``docstore``, the
    vector rows of ``old_unit_ids`` out, ``new_units`` (embeddings ``new_emb``) in, keyed by
    ``row_ids``, and ``head`` (unless None) as value ``"head"`` of ``collection`` in ``kvstore``.
    Nothing is written if any part fails. The caller checked :func:`shares_database` and the
    embeddings (float32, one row a unit, the table's dimension)."""
    emb = np.asarray(new_emb, dtype=np.float32) if new_units else None
    vector_store._initialize()
    docstore._kvstore._initialize()
    with vector_store._session() as session, session.begin():
        cursor = session.connection().connection.cursor()
        write_rows_on(cursor, vector_store, docstore, new_nodes, old_unit_ids, new_units, emb, row_ids)
        if head is not None:
            put_value_on(cursor, kvstore, collection or "", "head", head)


__all__ = ["put_value_on", "replace_rows", "shares_database", "write_rows_on"]
