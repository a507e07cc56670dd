"""An update of a served index in one PostgreSQL transaction: readers see the old rows or the new.

An update of a store-backed index writes three things: the new nodes into the docstore, the
removal of the replaced units' vector rows, the new vector rows (whose triggers update every
list and BM25 statistic). Through the stores' own APIs each is a transaction of its own, so a
query landing between two of them would see a document's units gone, or new text behind an
old list. Where the docstore's table is in the vector store's database (the setup
``docs/stores.md`` shows: one PostgreSQL for both), :func:`replace_rows` writes all three on
one connection in one transaction; the docstore entries the update no longer needs leave
afterwards (no list names them any more). The journal around it (:mod:`.sync`) is unchanged:
its commit point is still the kvstore's head, written after this transaction.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.storage.pg.copy import copy_on, encode_rows, supports_copy, table_of
from llama_index_ext_causalrag.storage.pg.docstore import supports_bulk_docstore, write_nodes_on
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import checked_embeddings

COPY_ROWS = 5000  # rows a binary COPY of the transaction sends at once


def _where(url: Any) -> Tuple[Optional[str], Optional[int], Optional[str]]:
    import sqlalchemy

    u = sqlalchemy.engine.make_url(url) if isinstance(url, str) else url
    return u.host, u.port, u.database


def shares_database(vector_store: Any, docstore: Any) -> bool:
    """``vector_store`` is a ``PGVectorStore`` and ``docstore`` a ``PostgresDocumentStore``, both
    on psycopg2 and the same server and database: one transaction can write both."""
    if not (supports_copy(vector_store) and supports_bulk_docstore(docstore)):
        return False
    kvstore = docstore._kvstore
    kv_url = kvstore._engine.url if getattr(kvstore, "_engine", None) is not None else kvstore.connection_string
    try:
        return _where(vector_store.connection_string) == _where(kv_url)
    except Exception:  # an URL SQLAlchemy cannot parse: not provably the same database
        return False


def replace_rows(vector_store: Any, docstore: Any, new_nodes: Sequence[BaseNode], old_unit_ids: Sequence[str],
                 new_units: Sequence[BaseNode], new_emb: Optional[np.ndarray], row_ids: RowIds) -> None:
    """In one transaction on ``vector_store``'s database: ``new_nodes`` into ``docstore``, the
    vector rows of ``old_unit_ids`` out, ``new_units`` (embeddings ``new_emb``) in, keyed by
    ``row_ids``. Nothing is written if any part fails. The caller checked :func:`shares_database`."""
    emb = checked_embeddings(vector_store, list(new_units), new_emb) if new_units else None
    vector_store._initialize()
    docstore._kvstore._initialize()
    table = table_of(vector_store)
    with vector_store._session() as session, session.begin():
        cursor = session.connection().connection.cursor()
        write_nodes_on(cursor, docstore, new_nodes)
        if old_unit_ids:
            cursor.execute(f"DELETE FROM {table} WHERE node_id = ANY(%s)", (row_ids.row_ids(list(old_unit_ids)),))
        for start in range(0, len(new_units), COPY_ROWS):
            rows = [row_ids.to_row(n, None) for n in new_units[start:start + COPY_ROWS]]
            copy_on(cursor, table, encode_rows(vector_store, rows, emb[start:start + COPY_ROWS]))  # type: ignore[index]


__all__ = ["replace_rows", "shares_database"]
