"""Bulk rows into LlamaIndex's ``PGVectorStore`` with PostgreSQL's binary ``COPY``.

``PGVectorStore.add`` makes an ORM object per row and binds every vector as text (each float
formatted one by one), which bounds a build's write rate. :func:`copy_batches` writes the same
rows, byte for byte (``tests/test_pg_copy.py`` compares them), batch by batch, each in one ``COPY
... FROM STDIN WITH (FORMAT binary)`` through the store's own engine and a transaction of its
own: vectors go as pgvector's binary form straight from a float32 array, and the next batch is
encoded while the server reads the last. ``benchmarks/scripts/bench_pg_copy.py`` measures both
on the same rows. A store that is not a ``PGVectorStore`` on psycopg2 is not touched here.

Binary ``COPY``: a header, then per row a field count and each field as a length and its
bytes (PostgreSQL docs, "COPY", binary format); pgvector's binary ``vector`` is a dimension
and an unused word (int16 each) then big-endian float4s; ``jsonb`` is a version byte (1) then
the JSON text; ``json``, ``text`` and ``varchar`` are their UTF-8 bytes.
"""

from __future__ import annotations

import io
import json
import struct
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.utils import node_to_metadata_dict

_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_TRAILER = struct.pack(">h", -1)
_FIELDS = struct.pack(">h", 4)
SENDERS = 2  # batches a build sends at once, each on its own connection (copy_batches)
DEADLOCK_RETRIES = 2  # times a batch the server aborted to break a deadlock is sent again
# Bytes psycopg2 reads from a COPY's file at a time (its default: 8 KB). It takes the GIL back for every read, and
# a thread waiting for the GIL while another encodes waits up to the interpreter's switch interval (5 ms): a
# 2,000-row batch (about 14 MB) read 8 KB at a time kept the server waiting on the client for much of a build.
COPY_CHUNK = 1 << 20


def supports_copy(vector_store: Any) -> bool:
    """A ``PGVectorStore`` whose sync engine is psycopg2 (whose cursors have ``copy_expert``)."""
    if type(vector_store).__name__ != "PGVectorStore" or not hasattr(vector_store, "_table_class"):
        return False
    url = str(getattr(vector_store, "connection_string", "") or "")
    return url.startswith("postgresql+psycopg2://") or url.startswith("postgresql://")


def _field(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def encode_rows(vector_store: Any, nodes: Sequence[BaseNode], embeddings: np.ndarray) -> bytes:
    """The binary ``COPY`` payload of ``nodes`` (columns ``node_id, text, metadata_, embedding``),
    the values ``PGVectorStore.add`` would write."""
    emb = np.ascontiguousarray(embeddings, dtype=">f4")
    dim = emb.shape[1]
    vector_head = struct.pack(">ihh", 4 + 4 * dim, dim, 0)
    jsonb = bool(getattr(vector_store, "use_jsonb", False))
    parts: List[bytes] = [_HEADER]
    for node, row in zip(nodes, emb):
        metadata = json.dumps(node_to_metadata_dict(node, remove_text=True, flat_metadata=vector_store.flat_metadata))
        parts += [
            _FIELDS,
            _field(node.node_id.encode("utf-8")),
            _field(node.get_content(metadata_mode=MetadataMode.NONE).encode("utf-8")),
            _field((b"\x01" if jsonb else b"") + metadata.encode("utf-8")),
            vector_head,
            row.tobytes(),
        ]
    parts.append(_TRAILER)
    return b"".join(parts)


def copy_batches(
    vector_store: Any,
    batches: Iterable[Tuple[Sequence[BaseNode], np.ndarray]],
    written: List[str],
    senders: int = SENDERS,
) -> None:
    """Write each batch of ``(nodes, embeddings)`` into ``vector_store``'s table in a transaction of
    its own, ``senders`` batches at once on connections of their own, encoding the next batch
    meanwhile: the server's work on a batch (the table's triggers fill every served list) is what
    a build waits for, and one server process does one batch's on one core. Each batch's node ids
    go into ``written`` once it is committed; on an error the batches in flight are waited for (and
    counted if they committed), then the error is raised.

    Two batches' triggers raise the same statistics rows; the triggers take those rows in one
    order (no deadlock), and :func:`_send` sends a batch the server still aborts as one (a table
    whose triggers an older version wrote) again, up to :data:`DEADLOCK_RETRIES` times."""
    vector_store._initialize()
    table = table_of(vector_store)
    inflight: List[Tuple[Future, List[str]]] = []
    senders = max(1, senders)

    def settle(keep: int) -> None:
        while len(inflight) > keep:
            future, ids = inflight.pop(0)
            future.result()
            written.extend(ids)

    with ThreadPoolExecutor(max_workers=senders, thread_name_prefix="causalrag-copy") as pool:
        try:
            for nodes, embeddings in batches:
                payload = encode_rows(vector_store, nodes, embeddings)
                settle(senders - 1)
                inflight.append((pool.submit(_send, vector_store, table, payload), [n.node_id for n in nodes]))
            settle(0)
        finally:
            for future, ids in inflight:  # failed before these were waited for
                try:
                    future.result()
                    written.extend(ids)
                except Exception:
                    pass  # its own error: the transaction rolled back
            inflight.clear()


def table_of(vector_store: Any) -> str:
    """The quoted ``schema.table`` of a ``PGVectorStore``'s rows."""
    return f'"{vector_store.schema_name}"."{vector_store._table_class.__tablename__}"'


def copy_on(cursor: Any, table: str, payload: bytes) -> None:
    """One binary ``COPY`` of ``payload`` (:func:`encode_rows`) into ``table`` on ``cursor``, in
    the caller's transaction."""
    copy_in(cursor, f"COPY {table} (node_id, text, metadata_, embedding) FROM STDIN WITH (FORMAT binary)", payload)


def copy_in(cursor: Any, sql: str, data: Union[bytes, str]) -> None:
    """``sql`` (a ``COPY ... FROM STDIN``) on the psycopg2 ``cursor`` with ``data`` as its input,
    read :data:`COPY_CHUNK` at a time."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else io.StringIO(data)
    cursor.copy_expert(sql, stream, size=COPY_CHUNK)


def _send(vector_store: Any, table: str, payload: bytes) -> None:
    for attempt in range(DEADLOCK_RETRIES + 1):
        try:
            with vector_store._session() as session, session.begin():
                copy_on(session.connection().connection.cursor(), table, payload)
            return
        except Exception as e:
            if attempt == DEADLOCK_RETRIES or not _deadlocked(e):
                raise


def _deadlocked(error: BaseException) -> bool:
    """The server aborted the transaction to break a deadlock (SQLSTATE 40P01)."""
    seen: Optional[BaseException] = error
    while seen is not None:
        if getattr(seen, "pgcode", None) == "40P01":
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


__all__ = ["copy_batches", "copy_in", "copy_on", "encode_rows", "supports_copy", "table_of"]
