"""The PostgreSQL driver: what LlamaIndex's ``PGVectorStore``, ``PostgresDocumentStore`` and
``PostgresKVStore`` do better than the generic API, on psycopg2 (:class:`PgDriver`).

* rows by binary ``COPY`` (:mod:`.copy`), docstore entries by ``COPY`` and one upsert, read in
  one statement (:mod:`.docstore`);
* an update's rows, docstore entries and state head in one transaction when the three tables
  share a database (:mod:`.atomic`): the index's one commit point;
* the write lock as a session advisory lock (:mod:`.lock`), seen by every process;
* the table's dimension from the catalog, lost connections told apart from bad queries, full-text
  search where the store was made with ``hybrid_search=True``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.storage.drivers import StoreDriver
from llama_index_ext_causalrag.storage.pg import atomic, connection
from llama_index_ext_causalrag.storage.pg.copy import copy_batches, supports_copy, table_of
from llama_index_ext_causalrag.storage.pg.docstore import (
    is_pg_kvstore,
    read_nodes,
    supports_bulk_docstore,
    supports_bulk_kvstore,
    write_nodes,
)
from llama_index_ext_causalrag.storage.pg.lists import GRANULARITY_TABLES, GranularityTables, supports_lists
from llama_index_ext_causalrag.storage.pg.lock import AdvisoryLock
from llama_index_ext_causalrag.storage.pg.served import SERVED, ServedTables
from llama_index_ext_causalrag.storage.pg.textsearch import EXACT_SCORES, served_tables
from llama_index_ext_causalrag.storage.pg.units import UNITS_LIST, ServedUnits
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.validation import caller

COPY_BATCH_SIZE = 2_000  # rows per COPY (one transaction each, two at once; the next encoded meanwhile)
_CLASSES = ("PGVectorStore", "PostgresDocumentStore", "PostgresKVStore")


class _Commit:
    """:class:`~..drivers.OneCommit` on one PostgreSQL database (:func:`.atomic.replace_rows`)."""

    def __init__(self, vector_store: Any, docstore: Any, kvstore: Any, collection: Optional[str], row_ids: RowIds):
        self.vector_store, self.docstore, self.kvstore = vector_store, docstore, kvstore
        self.collection, self.row_ids = collection, row_ids

    def commit(
        self,
        new_nodes: Sequence[BaseNode],
        old_unit_ids: Sequence[str],
        new_units: Sequence[BaseNode],
        new_emb: Optional[np.ndarray],
        head: Optional[Dict[str, Any]],
    ) -> None:
        atomic.replace_rows(
            self.vector_store,
            self.docstore,
            new_nodes,
            old_unit_ids,
            new_units,
            new_emb,
            self.row_ids,
            head=head,
            kvstore=self.kvstore,
            collection=self.collection,
        )


class PgDriver(StoreDriver):
    name = "postgres"

    def owns(self, store: Any) -> bool:
        if type(store).__name__ in _CLASSES:
            return True
        return is_pg_kvstore(connection.kvstore_of(store))  # a KV docstore over PostgreSQL

    def lost_connection(self, error: BaseException) -> bool:
        return connection.lost_connection(error)

    def describe(self, store: Any) -> Optional[str]:
        return connection.describe(store)

    def drop_connections(self, store: Any) -> None:
        connection.drop_connections(store)

    def write_vectors(self, vector_store: Any, batches: Any, written: List[str]) -> bool:
        if not supports_copy(vector_store):
            return False
        copy_batches(vector_store, batches, written)
        return True

    def vector_batch_size(self) -> Optional[int]:
        return COPY_BATCH_SIZE

    def write_docs(self, docstore: Any, nodes: Sequence[BaseNode]) -> bool:
        if not supports_bulk_docstore(docstore):
            return False
        write_nodes(docstore, nodes)
        return True

    def read_docs(
        self,
        docstore: Any,
        ids: Optional[Sequence[str]] = None,
        with_parents: bool = False,
        counter: Optional[str] = None,
        seen: Optional[List[int]] = None,
    ) -> Optional[Dict[str, BaseNode]]:
        if not supports_bulk_docstore(docstore):
            return None
        return read_nodes(docstore, ids, with_parents=with_parents, counter=counter, seen=seen)

    def read_all_docs(self, docstore: Any) -> Optional[Dict[str, Any]]:
        if not supports_bulk_docstore(docstore):
            return super().read_all_docs(docstore)
        return read_nodes(docstore)  # parsed and validated in one step

    def table_dim(self, vector_store: Any) -> Optional[int]:
        if not supports_copy(vector_store):
            return None
        return table_dim(vector_store, f"{caller('check_vector_store')}: reading the vector store's table")

    def one_commit(
        self, vector_store: Any, docstore: Any, kvstore: Any, collection: Optional[str], row_ids: RowIds
    ) -> Optional[_Commit]:
        if not atomic.shares_database(vector_store, docstore, kvstore):
            return None
        return _Commit(vector_store, docstore, kvstore, collection, row_ids)

    def session_lock(self, kvstore: Any, key: int) -> Optional[AdvisoryLock]:
        if not is_pg_kvstore(kvstore):
            return None
        url = connection.url_of(kvstore)
        return AdvisoryLock(url, key) if url else None

    def text_search(self, vector_store: Any) -> Optional[bool]:
        if type(vector_store).__name__ != "PGVectorStore":
            return None
        return getattr(vector_store, "hybrid_search", False) is True

    def text_search_hint(self) -> Optional[str]:
        return "PGVectorStore(..., hybrid_search=True, text_search_config='english')"

    # ---- list layouts -------------------------------------------------------------------------------
    layouts = (SERVED, GRANULARITY_TABLES)
    served_layouts = (SERVED,)

    def new_layout(self, vector_store: Any, lexical: str, dim: int, ann: Any) -> str:
        """``"served"`` (every list in the database; BM25 from pg_textsearch where it is usable) for
        bm25s's BM25, ``"granularity_tables"`` (dense lists from the database, units in the
        process) for the store's full-text search; ``"filtered"`` on a store not on psycopg2."""
        if not supports_lists(vector_store):
            return super().new_layout(vector_store, lexical, dim, ann)
        tables = ServedTables if lexical == "bm25" else GranularityTables
        tables(vector_store, (), dim, ann)  # names PostgreSQL can hold, checked before any embedding
        return SERVED if lexical == "bm25" else GRANULARITY_TABLES

    def check_ann(self, ann: Any, vector_store: Any) -> None:
        if not supports_lists(vector_store):
            super().check_ann(ann, vector_store)

    def served_lists(
        self,
        vector_store: Any,
        granularities: Sequence[int],
        dim: int,
        ann: Any,
        bm25: Tuple[float, float],
        saved: Optional[Dict[str, Any]],
        scores: Optional[str] = None,
    ) -> ServedTables:
        """The served lists; ``scores``: how pg_textsearch's lists are scored (None: as the
        extension allows, see :mod:`.textsearch`)."""
        owner = caller("MultiGranularityIndex")
        if not supports_lists(vector_store):
            raise ValueError(
                f"{owner}: the index is served from PostgreSQL tables; pass the PGVectorStore (on "
                f"psycopg2) it was built into, got {type(vector_store).__name__}."
            )
        if saved is not None:  # a reopened index: the table holds the build's dimension
            have = table_dim(vector_store, owner)
            if have > 0 and have != dim:
                raise ValueError(
                    f"{owner}: the vector store ({self.describe(vector_store)}) holds {have}-dimensional "
                    f"embeddings, the index was built with {dim}; pass the vector store the index was "
                    "built into."
                )
        return served_tables(vector_store, granularities, dim, ann, bm25, saved, scores)

    def served_units(
        self, vector_store: Any, dim: int, bm25: Tuple[float, float], saved: Optional[Dict[str, Any]]
    ) -> Optional[ServedUnits]:
        if not supports_lists(vector_store):
            return None
        # scored exactly: StandardsIndex's BM25 prefilter keeps the in-memory index's candidates (R@5 equal)
        return ServedUnits(self.served_lists(vector_store, [UNITS_LIST], dim, None, bm25, saved, EXACT_SCORES))

    def served_terms(self, vector_store: Any, dim: int, saved: Optional[Dict[str, Any]]) -> Optional[ServedUnits]:
        # postings tables on every server: an overlap needs every unit holding a term, not a top-k
        if not supports_lists(vector_store):
            return None
        if saved is not None:  # a reopened index: the table holds the build's dimension
            have = table_dim(vector_store, caller("CausalGraphIndex"))
            if have > 0 and have != dim:
                raise ValueError(
                    f"{caller('CausalGraphIndex')}: the vector store ({self.describe(vector_store)}) holds "
                    f"{have}-dimensional embeddings, the index was built with {dim}; pass the vector store "
                    "the index was built into."
                )
        return ServedUnits(ServedTables(vector_store, [UNITS_LIST], dim, None))

    def granularity_lists(
        self, vector_store: Any, granularities: Sequence[int], dim: int, ann: Any
    ) -> Optional[GranularityTables]:
        return GranularityTables(vector_store, granularities, dim, ann) if supports_lists(vector_store) else None


def table_dim(vector_store: Any, what: str) -> int:
    """The dimension of a ``PGVectorStore``'s ``embedding`` column from the catalog (creating
    the table if missing, as its own query would): 0 if there is no table, -1 if the column's
    type names none."""
    import re

    def column_type() -> Optional[str]:
        with vector_store._engine.connect() as conn, conn.connection.cursor() as cursor:
            cursor.execute(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                "AND a.attname = 'embedding' AND NOT a.attisdropped",
                (vector_store.schema_name, vector_store._table_class.__tablename__),
            )
            row = cursor.fetchone()
            return None if row is None else str(row[0])

    vector_store._initialize()
    found = connection.once_more_if_lost(column_type, vector_store, what)
    if found is None:
        return 0
    m = re.fullmatch(r"vector\((\d+)\)", found)
    return int(m.group(1)) if m is not None else -1


PG = PgDriver()

__all__ = ["PG", "PgDriver", "supports_bulk_kvstore", "table_of"]
