"""The write-ahead record of a store-backed index's write, and the recovery that reads it.

A write of an index kept in a kvstore (:mod:`.kvstate`) runs under the index's write lock
(:mod:`.writelock`) as:

1. :func:`begin`: the value ``"pending"`` of the index's kvstore collection records the write
   before any row is touched: the operation, the generation the state moves from and to, the
   writer (pid, host, start), the vector rows and docstore entries it will add, and the
   before-images of those it will overwrite or delete (node JSON; vectors as
   :func:`~.stores.fetch_embeddings` reads them). Large payloads are chunked like state files
   (``"journal/{txid}/{i}"``), written before the record that names them;
2. the row writes (docstore, vector store; unit ids are deterministic, so a refresh overwrites
   rows in place), then the new state's values and the kvstore head: its one ``put`` commits.
   Where the stores' driver offers one commit (``one_commit``), the rows, docstore entries and
   head are written in one transaction at that point instead, so nothing of the write is
   visible before it and a roll-back has no row to undo;
3. :func:`settle`: the rows of the old state the new one lacks leave the stores, the values of
   other generations leave the kvstore, then ``"pending"`` goes.

A write interrupted anywhere (process killed, connection dropped, server killed) leaves
``"pending"``. The next open, write or build of the index takes the lock (so the writer is gone:
its session released it) and :func:`recover` settles the record: the head names the write's new
generation -> roll forward (finish step 3); else -> roll back (delete the rows it added, put the
before-images back, delete its state values). Both are idempotent: a recovery interrupted in
turn is finished by the next one.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc

from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import (
    add_nodes_to_docstore,
    add_nodes_to_vector_store,
    describe_store,
    first_line,
    is_connection_error,
)
from llama_index_ext_causalrag.validation import caller

logger = logging.getLogger(__name__)

PENDING_KEY = "pending"
JOURNAL_PREFIX = "journal"
CHUNK_CHARS = 1 << 22
DELETE_BATCH = 1_000


def new_generation() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class Pending:
    """One write in progress: what it adds (ids) and what it overwrites or deletes (before-images)."""

    op: str
    old_generation: Optional[str]
    new_generation: str
    scheme: str
    vector_add: List[str] = field(default_factory=list)
    vector_before: List[BaseNode] = field(default_factory=list)
    before_embeddings: Optional[np.ndarray] = None
    doc_add: List[str] = field(default_factory=list)
    doc_before: List[BaseNode] = field(default_factory=list)
    txid: str = field(default_factory=lambda: uuid.uuid4().hex)
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: float = field(default_factory=time.time)
    chunks: int = 1  # payload values, set when written or read
    one_commit: bool = False  # rows, docstore entries and head commit in one transaction

    def who(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"{self.op} by pid {self.pid} on {self.host}, started {when}"

    def _payload(self) -> Dict[str, Any]:
        emb = self.before_embeddings
        return {
            "vector_add": self.vector_add,
            "vector_before": [doc_to_json(n) for n in self.vector_before],
            "before_embeddings": None
            if emb is None
            else {
                "shape": list(emb.shape),
                "float32": base64.b64encode(np.ascontiguousarray(emb, np.float32).tobytes()).decode(),
            },
            "doc_add": self.doc_add,
            "doc_before": [doc_to_json(n) for n in self.doc_before],
        }

    def _record(self, chunks: int) -> Dict[str, Any]:
        return {
            "op": self.op,
            "old_generation": self.old_generation,
            "new_generation": self.new_generation,
            "scheme": self.scheme,
            "txid": self.txid,
            "pid": self.pid,
            "host": self.host,
            "started": self.started,
            "chunks": chunks,
            "one_commit": self.one_commit,
        }

    @classmethod
    def _load(cls, record: Dict[str, Any], payload: Dict[str, Any]) -> "Pending":
        emb = payload.get("before_embeddings")
        arr = None if emb is None else np.frombuffer(base64.b64decode(emb["float32"]), np.float32).reshape(emb["shape"])
        return cls(
            record["op"],
            record.get("old_generation"),
            record["new_generation"],
            record["scheme"],
            list(payload["vector_add"]),
            [json_to_doc(d) for d in payload["vector_before"]],
            arr,
            list(payload["doc_add"]),
            [json_to_doc(d) for d in payload["doc_before"]],
            record["txid"],
            int(record["pid"]),
            str(record["host"]),
            float(record["started"]),
            int(record["chunks"]),
            bool(record.get("one_commit", False)),
        )


def _chunk_key(txid: str, i: int) -> str:
    return f"{JOURNAL_PREFIX}/{txid}/{i}"


def begin(kv: Any, p: Pending) -> None:
    """Write ``p`` (its payload chunks, then the ``"pending"`` record naming them)."""
    text = json.dumps(p._payload(), ensure_ascii=False)
    pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    for i, piece in enumerate(pieces):
        kv.put_value(_chunk_key(p.txid, i), {"text": piece})
    p.chunks = len(pieces)
    kv.put_value(PENDING_KEY, p._record(len(pieces)))


def read(kv: Any) -> Optional[Pending]:
    """The interrupted (or running) write recorded in ``kv``, if any."""
    from llama_index_ext_causalrag.storage.persistence import REBUILD, CorruptIndexError

    record = kv.get_value(PENDING_KEY)
    if record is None:
        return None
    try:
        parts = [kv.get_value(_chunk_key(record["txid"], i))["text"] for i in range(int(record["chunks"]))]
        return Pending._load(record, json.loads("".join(parts)))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptIndexError(
            f"the kvstore ({kv.describe()}) records an interrupted write whose journal is unreadable ({e!r}); "
            f"the stores may hold a part of it: {REBUILD}."
        ) from e


def _delete_rows(vector_store: Any, node_ids: Sequence[str], row_ids: RowIds) -> None:
    ids = row_ids.row_ids(node_ids)
    for start in range(0, len(ids), DELETE_BATCH):
        vector_store.delete_nodes(node_ids=ids[start : start + DELETE_BATCH])


def _delete_docs(docstore: Any, node_ids: Sequence[str]) -> None:
    for nid in node_ids:
        docstore.delete_document(nid, raise_error=False)


def roll_back(p: Pending, vector_store: Any, docstore: Any) -> None:
    """The stores as before ``p``: its rows and entries removed, the before-images put back."""
    row_ids = RowIds(p.scheme)
    before_ids = [n.node_id for n in p.vector_before]
    _delete_rows(vector_store, sorted(set(p.vector_add) | set(before_ids)), row_ids)
    if p.vector_before:
        add_nodes_to_vector_store(vector_store, p.vector_before, p.before_embeddings, row_ids=row_ids)
    kept = {n.node_id for n in p.doc_before}
    _delete_docs(docstore, [i for i in p.doc_add if i not in kept])
    if p.doc_before:
        add_nodes_to_docstore(docstore, p.doc_before)


def roll_forward(p: Pending, vector_store: Any, docstore: Any) -> None:
    """The stores as after ``p``: the rows and entries of the old state it does not keep removed."""
    added_rows, added_docs = set(p.vector_add), set(p.doc_add)
    _delete_rows(vector_store, [n.node_id for n in p.vector_before if n.node_id not in added_rows], RowIds(p.scheme))
    _delete_docs(docstore, [n.node_id for n in p.doc_before if n.node_id not in added_docs])


def sweep_values(kv: Any, p: Pending) -> None:
    """Delete the kvstore values no head names (other generations), except ``p``'s journal."""
    head = kv.get_value("head")
    gen = head.get("generation") if isinstance(head, dict) else None
    keep_prefix = (f"{gen}/" if gen else "\0", f"{JOURNAL_PREFIX}/{p.txid}/")
    kv.delete_values([k for k in kv.value_keys() if k not in ("head", PENDING_KEY) and not k.startswith(keep_prefix)])


def settle(kv: Any, p: Pending, vector_store: Any, docstore: Any) -> bool:
    """Finish (the head names ``p``'s new generation) or undo ``p``, then delete its record;
    True if it was finished."""
    head = kv.get_value("head")
    committed = isinstance(head, dict) and head.get("generation") == p.new_generation
    if committed:
        roll_forward(p, vector_store, docstore)
    elif not p.one_commit:  # one transaction with the head: no row of it was written
        roll_back(p, vector_store, docstore)
    sweep_values(kv, p)
    kv.delete_values([PENDING_KEY])
    kv.delete_values([_chunk_key(p.txid, i) for i in range(p.chunks)], best_effort=True)
    return committed


def finish(kv: Any, p: Pending, vector_store: Any, docstore: Any) -> None:
    """After ``p`` committed (its own save deleted the old generation): remove the old state's
    rows it does not keep, then its record (no sweep of the kvstore: nothing else is left)."""
    roll_forward(p, vector_store, docstore)
    kv.delete_values([PENDING_KEY])
    kv.delete_values([_chunk_key(p.txid, i) for i in range(p.chunks)], best_effort=True)


def recover(kv: Any, vector_store: Any, docstore: Any, hint: str) -> Optional[str]:
    """Settle the write an earlier writer left in ``kv`` (the caller holds the write lock, so that
    writer is gone), logging what was swept; returns that message, or None if there was none.
    Both name the public call (:func:`caller`)."""
    owner = caller("the index's kvstore")
    p = read(kv)
    if p is None:
        return None
    try:
        finished = settle(kv, p, vector_store, docstore)
    except Exception as e:
        if not is_connection_error(e):
            raise
        raise ConnectionError(
            f"{owner}: the index in the kvstore ({kv.describe()}) holds an interrupted {p.who()}, which could not "
            f"be swept: a store is unreachable (vector store {describe_store(vector_store)}, docstore "
            f"{describe_store(docstore)}): {first_line(e)}; when the database is back, run {hint} again: it "
            "finishes or undoes that write before anything else."
        ) from e
    what = (
        "finished: the head names its new state; the rows of the old state it replaced were removed"
        if finished
        else "undone: its rows were removed and the rows it overwrote or deleted put back"
    )
    msg = f"{owner}: swept an interrupted {p.who()} of the index in the kvstore ({kv.describe()}): {what}."
    logger.warning(msg)
    return msg


__all__ = ["PENDING_KEY", "Pending", "begin", "finish", "new_generation", "read", "recover", "settle"]
