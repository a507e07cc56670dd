"""Write a store-backed index's rows: a build (:func:`write_new_index`) and an update
(:func:`replace_in_stores`: the rows of the nodes an update removes or changes are swapped for
those of the nodes it adds or changes, then the caller's ``then`` writes the new kvstore state).

An index kept in a kvstore (``kv``) writes crash-safe: under its write lock
(:mod:`.writelock`), after settling what an earlier writer left (:func:`journal.recover`) and
checking that the head is still the generation this index object read (else
:class:`ConcurrentWriteError`, nothing written), with a write-ahead record (:mod:`.journal`)
put before the first row and deleted after the head's put commits. A failure rolls the stores
back from that record; a crash leaves it for the next open, write or build.

The commit point of an update is the head's put. Where the stores' driver offers one commit
(:meth:`~.drivers.StoreDriver.one_commit`: PostgreSQL, when the vector store, docstore and
kvstore share one database), the update's rows, docstore entries and the head are written in
that one transaction, so no reader (this index object, another process, a replica) ever sees
rows of an update whose head did not move. Elsewhere the rows are written before the head, and
a reader that reads rows directly (Milvus's served lists) may see them before the commit, or
after a failed one until the journal is settled (docs/stores.md, "What a reader sees"). Without a kvstore a
failed step is undone from memory, best effort, and a crash can leave the stores between two
states.

Database errors leave as ``ConnectionError`` (unreachable) or :class:`StoreWriteError`, both
naming the stores and the operation (build, insert, refresh, delete), chained to the driver's.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_ext_causalrag.storage import journal
from llama_index_ext_causalrag.storage.drivers import OneCommit, driver_for, error_chain
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.storage.stores import (
    add_nodes_and_rows,
    add_nodes_to_docstore,
    add_nodes_to_vector_store,
    check_docstore,
    check_empty,
    check_vector_store,
    checked_embeddings,
    describe_store,
    drop_pooled_connections,
    fetch_embeddings,
    first_line,
    is_connection_error,
    remove_nodes,
)
from llama_index_ext_causalrag.storage.writelock import ConcurrentWriteError
from llama_index_ext_causalrag.validation import caller, public_call

logger = logging.getLogger(__name__)
_DRIVERS = ("sqlalchemy", "psycopg2", "psycopg", "asyncpg", "pymilvus")


class StoreWriteError(RuntimeError):
    """The database refused a write of an index (not a lost connection: that is a ``ConnectionError``)."""


def _is_database_error(e: BaseException) -> bool:
    return any(type(chain).__module__.split(".")[0] in _DRIVERS for chain in error_chain(e))


def _stores_text(vector_store: Any, docstore: Any, kv: Any) -> str:
    kv_text = f", kvstore {kv.describe()}" if kv is not None else ""
    return f"vector store {describe_store(vector_store)}, docstore {describe_store(docstore)}{kv_text}"


@contextmanager
def named_errors(op: str, vector_store: Any, docstore: Any, kv: Any) -> Iterator[None]:
    """Database errors escaping the block leave naming the call (:func:`caller`), ``op`` and the
    stores (chained); after a lost connection the stores' pooled connections are closed, so a
    retry reconnects at once."""
    owner = caller("the store write")
    try:
        yield
    except ConnectionError as e:
        drop_pooled_connections(vector_store, docstore, kv)
        if str(e).startswith(owner):
            raise
        raise ConnectionError(f"{owner}: {e}") from e
    except (ConcurrentWriteError, StoreWriteError):
        raise
    except Exception as e:
        if not _is_database_error(e):
            raise
        stores = _stores_text(vector_store, docstore, kv)
        after = (
            "the index keeps its previous state; what the write left is swept by the next open or write"
            if kv is not None
            else "the rows written so far were removed (best effort)"
        )
        if is_connection_error(e):
            drop_pooled_connections(vector_store, docstore, kv)
            raise ConnectionError(f"{owner}: the {op} lost the database ({stores}): {first_line(e)}; {after}.") from e
        raise StoreWriteError(f"{owner}: the database refused the {op} ({stores}): {first_line(e)}; {after}.") from e


def update_op(old_nodes: Sequence[BaseNode], new_nodes: Sequence[BaseNode]) -> str:
    """``"insert"``, ``"delete"`` or ``"refresh"`` (replaces documents, maybe adding others)."""
    return "delete" if not new_nodes else "insert" if not old_nodes else "refresh"


def _index_name() -> str:
    """The index class of the public call (``"StandardsIndex"`` of ``"StandardsIndex.insert"``)."""
    return caller("index").split()[0].split(".")[0]


def _reopen_hint() -> str:
    return f"{_index_name()}.from_vector_store(..., kvstore=...)"


def check_generation(kv: Any, build: bool) -> None:
    """Refuse (before anything is written) a write whose index another writer changed."""
    owner = caller("the store write")
    if build:
        kv.check_free()
        return
    head = kv.head()
    have = head.get("generation") if head is not None else None
    if have != kv.generation:
        raise ConcurrentWriteError(
            f"{owner}: another process changed the index in the kvstore ({kv.describe()}) after this index "
            f"object read it (generation {kv.generation!r}, now {have!r}); nothing was written: reopen it with "
            f"{_reopen_hint()} and retry."
        )


def _undo(kv: Any, p: journal.Pending, vector_store: Any, docstore: Any, lock: Any) -> None:
    """After a failed write: settle it now if the lock is still ours, else leave it to the next open."""
    try:
        lock.check_held()
        if journal.settle(kv, p, vector_store, docstore):
            kv.generation = p.old_generation  # committed, but this index object keeps the old state
    except Exception as e:
        logger.warning(
            "%s: the interrupted %s could not be undone now (%s); the next open or write of the index "
            "in the kvstore (%s) sweeps it.",
            caller("the store write"),
            p.op,
            first_line(e),
            kv.describe(),
        )


def _journaled(
    kv: Any,
    vector_store: Any,
    docstore: Any,
    make: Callable[[Optional[str]], journal.Pending],
    write_rows: Callable[[], None],
    then: Callable[[], None],
    commit_head: Optional[Callable[[dict], None]] = None,
) -> None:
    """Under the write lock: recover, check the generation, journal ``make(old generation)``,
    ``write_rows()``, ``then()`` (its kvstore save commits: the head's put, or ``commit_head(head)``,
    which then writes the rows too), finish; undone on any failure."""
    lock = kv.write_lock()
    kv.acquire(lock)
    owner = caller("the store write")
    try:
        journal.recover(kv, vector_store, docstore, f"{_reopen_hint()} or the write")
        p = make(kv.generation)
        check_generation(kv, build=p.op == "build")
        try:
            journal.begin(kv, p)
            with kv.staged(p.new_generation, lock.check_held, commit_head) as staged:
                write_rows()
                then()
            if commit_head is not None and not staged.committed:
                raise RuntimeError(
                    f"{owner}: the index state was not saved, so its rows were not written; nothing was committed."
                )
        except BaseException:
            _undo(kv, p, vector_store, docstore, lock)
            raise
        try:
            journal.finish(kv, p, vector_store, docstore)
        except Exception as e:  # committed: the next open or write finishes the clean-up
            logger.warning(
                "%s: the %s is committed, its clean-up was cut short (%s); the next open or write "
                "of the index in the kvstore (%s) finishes it.",
                owner,
                p.op,
                first_line(e),
                kv.describe(),
            )
    finally:
        lock.release()


def _delete_vectors(vector_store: BasePydanticVectorStore, node_ids: List[str], row_ids: RowIds) -> None:
    owner = caller("the store write")
    if not node_ids:
        return
    try:
        vector_store.delete_nodes(node_ids=row_ids.row_ids(node_ids))
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(
                f"{owner}: cannot write to the vector store ({describe_store(vector_store)}): {first_line(e)}"
            ) from e
        raise


def _restore_vectors(
    vector_store: BasePydanticVectorStore, units: Sequence[BaseNode], emb: Optional[np.ndarray], row_ids: RowIds
) -> None:
    if units and emb is not None:
        try:
            add_nodes_to_vector_store(vector_store, units, emb, row_ids=row_ids)
        except Exception:  # pragma: no cover - the store went away; the original error is raised
            pass


def _write_rows(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    old_units: Sequence[BaseNode],
    new_units: Sequence[BaseNode],
    new_emb: Optional[np.ndarray],
    new_nodes: Sequence[BaseNode],
    row_ids: RowIds,
    one: Optional[OneCommit] = None,
) -> None:
    """An update's rows: ``new_nodes`` into the docstore, ``old_units``' vector rows out,
    ``new_units``' in; in ``one`` transaction where the stores' driver offers it (a reader sees
    the old rows or the new), else store by store."""
    owner = caller("the store write")
    if one is not None:
        emb = checked_embeddings(vector_store, list(new_units), new_emb) if new_units else None
        try:
            one.commit(new_nodes, [u.node_id for u in old_units], new_units, emb, None)
        except Exception as e:
            if is_connection_error(e):
                raise ConnectionError(
                    f"{owner}: cannot write to the stores ({describe_store(vector_store)}): {first_line(e)}"
                ) from e
            raise
        return
    add_nodes_to_docstore(docstore, new_nodes)
    _delete_vectors(vector_store, [u.node_id for u in old_units], row_ids)
    if new_units:
        add_nodes_to_vector_store(vector_store, new_units, new_emb, row_ids=row_ids)


def _one_commit(vector_store: Any, docstore: Any, row_ids: RowIds, kv: Any = None) -> Optional[OneCommit]:
    """The driver's one transaction for these stores (and ``kv``'s head), if it offers one."""
    kvstore, collection = (kv.kvstore, kv.collection) if kv is not None else (None, None)
    return driver_for(vector_store).one_commit(vector_store, docstore, kvstore, collection, row_ids)


def replace_in_stores(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    old_units: Sequence[BaseNode],
    new_units: Sequence[BaseNode],
    new_emb: Optional[np.ndarray],
    old_nodes: Sequence[BaseNode],
    new_nodes: Sequence[BaseNode],
    then: Callable[[], None],
    row_ids: RowIds,
    kv: Any = None,
) -> None:
    """Vector rows of ``old_units`` -> ``new_units`` (embeddings ``new_emb``, one row each, keyed
    by ``row_ids``), docstore entries of ``old_nodes`` -> ``new_nodes``, then ``then()``; undone
    on failure. With ``kv`` (the index's :class:`~.kvstate.KVState`) journaled and locked. Errors
    name the index and ``op`` (``"StandardsIndex insert"``)."""
    op = update_op(old_nodes, new_nodes)
    with public_call(f"{_index_name()} {op}"), named_errors(op, vector_store, docstore, kv):
        if kv is None:
            _replace(vector_store, docstore, old_units, new_units, new_emb, old_nodes, new_nodes, then, row_ids)
            return
        one = _one_commit(vector_store, docstore, row_ids, kv)

        def make(gen: Optional[str]) -> journal.Pending:
            old_ids = [u.node_id for u in old_units]
            # the before-images' vectors put rows back on a roll-back; one commit has no rows to put back
            old_emb = fetch_embeddings(vector_store, old_ids, row_ids=row_ids) if old_ids and one is None else None
            return journal.Pending(
                op,
                gen,
                journal.new_generation(),
                row_ids.scheme,
                vector_add=[u.node_id for u in new_units],
                vector_before=list(old_units),
                before_embeddings=old_emb,
                doc_add=[n.node_id for n in new_nodes],
                doc_before=list(old_nodes),
                one_commit=one is not None,
            )

        if one is None:

            def write_rows() -> None:
                _write_rows(vector_store, docstore, old_units, new_units, new_emb, new_nodes, row_ids)

            _journaled(kv, vector_store, docstore, make, write_rows, then)
            return
        emb = checked_embeddings(vector_store, list(new_units), new_emb) if new_units else None
        old_ids = [u.node_id for u in old_units]

        def commit_head(head: dict) -> None:  # the rows, the docstore entries and the head: one transaction
            one.commit(new_nodes, old_ids, new_units, emb, head)  # errors are named with every store below

        _journaled(kv, vector_store, docstore, make, lambda: None, then, commit_head)


def _replace(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    old_units: Sequence[BaseNode],
    new_units: Sequence[BaseNode],
    new_emb: Optional[np.ndarray],
    old_nodes: Sequence[BaseNode],
    new_nodes: Sequence[BaseNode],
    then: Callable[[], None],
    row_ids: RowIds,
) -> None:
    """:func:`replace_in_stores` without a kvstore: undone from memory on failure (best effort)."""
    old_unit_ids = [u.node_id for u in old_units]
    new_unit_ids = [u.node_id for u in new_units]
    old_emb = fetch_embeddings(vector_store, old_unit_ids, row_ids=row_ids) if old_unit_ids else None
    old_doc_ids = {n.node_id for n in old_nodes}
    new_doc_ids = {n.node_id for n in new_nodes}
    one = _one_commit(vector_store, docstore, row_ids)
    if one is not None:  # all or nothing; then()'s failure is undone in one transaction too
        _write_rows(vector_store, docstore, old_units, new_units, new_emb, new_nodes, row_ids, one)
        try:
            then()
        except Exception:
            try:
                one.commit([n for n in old_nodes if n.node_id in new_doc_ids], new_unit_ids, old_units, old_emb, None)
                remove_nodes(None, docstore, sorted(new_doc_ids - old_doc_ids), row_ids=row_ids)
            except Exception:  # pragma: no cover - the database went away; the original error is raised
                pass
            raise
        remove_nodes(None, docstore, [n.node_id for n in old_nodes if n.node_id not in new_doc_ids], row_ids=row_ids)
        return
    add_nodes_to_docstore(docstore, new_nodes)
    try:
        _delete_vectors(vector_store, old_unit_ids, row_ids)
        try:
            if new_units:  # undoes its own partial writes
                add_nodes_to_vector_store(vector_store, new_units, new_emb, row_ids=row_ids)
            try:
                then()
            except Exception:
                remove_nodes(vector_store, None, new_unit_ids, row_ids)
                raise
        except Exception:
            _restore_vectors(vector_store, old_units, old_emb, row_ids)
            raise
    except Exception:
        remove_nodes(None, docstore, sorted(new_doc_ids - old_doc_ids), row_ids=row_ids)
        try:
            add_nodes_to_docstore(docstore, [n for n in old_nodes if n.node_id in new_doc_ids])
        except Exception:  # pragma: no cover - the docstore went away; the original error is raised
            pass
        raise
    remove_nodes(None, docstore, [n.node_id for n in old_nodes if n.node_id not in new_doc_ids], row_ids=row_ids)


def open_for_build(
    storage_context: Any, embed_model: Any, kvstore: Any, namespace: Optional[str], reopen_hint: str
) -> Tuple[BasePydanticVectorStore, BaseDocumentStore, Any, int, Any]:
    """Check, before anything is embedded, that the stores are reachable, empty and of the
    embedder's dimension, and that the kvstore namespace is free: ``(vector_store, docstore,
    model, dim, kv)``. Errors name the public call (:func:`caller`)."""
    from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
    from llama_index_ext_causalrag.storage.kvstate import kv_state
    from llama_index_ext_causalrag.storage.persistence import embed_dim

    vector_store, docstore = storage_context.vector_store, storage_context.docstore
    model = resolve_embed_model(embed_model)
    dim = embed_dim(model)
    kv = kv_state(kvstore, namespace, vector_store)
    exists = check_vector_store(vector_store, dim, missing_ok=True)  # else the first add creates it
    check_docstore(docstore)
    if kv is not None:  # an interrupted build (or write) of this namespace is settled first
        with named_errors("build", vector_store, docstore, kv):
            kv.recover(vector_store, docstore, caller("index"))
    if exists:
        check_empty(vector_store, dim, reopen_hint)
    if kv is not None:
        kv.check_free()
    return vector_store, docstore, model, dim, kv


def write_new_index(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    nodes: Sequence[BaseNode],
    units: Sequence[BaseNode],
    embeddings: np.ndarray,
    save: Callable[[], None],
    row_ids: RowIds,
    kv: Any = None,
) -> None:
    """``nodes`` into the docstore, ``units`` with ``embeddings`` into the vector store (rows
    keyed by ``row_ids``), then ``save()`` (the kvstore state); a failed step removes what the
    earlier ones wrote. With ``kv`` journaled and locked: a crash leaves a build the next open
    or build undoes, so a rerun finds the stores empty. Errors name the index's build
    (``"StandardsIndex build"``)."""
    with public_call(f"{_index_name()} build"), named_errors("build", vector_store, docstore, kv):
        if kv is None:
            _write_new(vector_store, docstore, nodes, units, embeddings, save, row_ids)
            return

        def make(gen: Optional[str]) -> journal.Pending:
            return journal.Pending(
                "build",
                None,
                journal.new_generation(),
                row_ids.scheme,
                vector_add=[u.node_id for u in units],
                doc_add=[n.node_id for n in nodes],
            )

        def write_rows() -> None:  # both journaled: an interrupted build is undone whichever ran
            add_nodes_and_rows(docstore, list(nodes), vector_store, list(units), embeddings, row_ids=row_ids)

        _journaled(kv, vector_store, docstore, make, write_rows, save)


def _write_new(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    nodes: Sequence[BaseNode],
    units: Sequence[BaseNode],
    embeddings: np.ndarray,
    save: Callable[[], None],
    row_ids: RowIds,
) -> None:
    ids = [n.node_id for n in nodes]
    add_nodes_to_docstore(docstore, list(nodes))
    try:
        add_nodes_to_vector_store(vector_store, list(units), embeddings, row_ids=row_ids)
    except Exception:
        remove_nodes(None, docstore, ids, row_ids=row_ids)
        raise
    try:
        save()
    except Exception:
        remove_nodes(vector_store, docstore, ids, row_ids)
        raise
