"""What every store-backed index does with LlamaIndex's stores: describe and check a vector store
and a docstore, write and remove rows in batches, read vectors back, classify database errors."""

from __future__ import annotations

import contextvars
import re
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    VectorStoreQuery,
)

from llama_index_ext_causalrag.storage.drivers import driver_for, first_line, is_connection_error, retry_if_lost
from llama_index_ext_causalrag.storage.row_ids import BY_NODE_ID, NODE_ID_KEY, RowIds
from llama_index_ext_causalrag.validation import caller, check_finite_array, check_top_k

T = TypeVar("T")
DEFAULT_BATCH_SIZE = 256
DOCSTORE_BATCH_SIZE = 1_000  # nodes per docstore write; ref-doc entries are merged per batch, so keys are unique
# "Collection umg not found" (Qdrant local), "... Collection `umg` doesn't exist!" (Qdrant server)
_MISSING_COLLECTION = re.compile(
    r"\b(collection|index|table)\b.{0,80}\b(not found|does not exist|doesn't exist)", re.I | re.S
)


def describe_store(store: Any) -> str:
    """Where ``store`` (a vector store, kvstore or docstore) lives, as its driver says
    (``PGVectorStore at postgresql+psycopg2://user:***@host/db, table 'name'``), else its class name."""
    return driver_for(store).describe(store) or type(store).__name__


def drop_pooled_connections(*stores: Any) -> None:
    """Close the pooled connections of ``stores``: after a lost connection the pool may hand out
    dead ones, and each store would fail once more before reconnecting; the next use opens new ones."""
    for store in stores:
        for target in (store, getattr(store, "kvstore", None)):  # an index's KVState holds its kvstore
            if target is not None:
                driver_for(target).drop_connections(target)


def once_more_if_lost(fn: Callable[[], T], store: Any, what: str) -> T:
    """``fn()``; if the connection to ``store`` was lost (a server restarted), its pooled
    connections are dropped and ``fn()`` runs once more on new ones; if that fails too, a
    ``ConnectionError`` naming ``what`` and the store."""
    return retry_if_lost(fn, store, what, describe_store)


def is_missing_collection(e: BaseException) -> bool:
    """True for a store that answered that its collection (index, table) does not exist yet:
    stores such as ``QdrantVectorStore`` create it on the first ``add``."""
    return getattr(e, "status_code", None) == 404 or bool(_MISSING_COLLECTION.search(str(e)))


def stored_dim(vector_store: Any) -> Optional[int]:
    """The store's embedding dimension: declared (``embed_dim``) or of a vector already in it."""
    dim = getattr(vector_store, "embed_dim", None)
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return dim
    data = getattr(vector_store, "data", None)  # SimpleVectorStore
    for v in getattr(data, "embedding_dict", {}).values():
        return len(v)
    return None


def check_vector_store(
    vector_store: BasePydanticVectorStore, dim: int, missing_ok: bool = False, built_in: Optional[str] = None
) -> bool:
    """Fail before any work if the store is unreachable or holds another dimension than ``dim``:
    the embed_model's for a build, or (``built_in``: where the reopened index's state was read)
    the dimension the index was built with.

    Returns False if the store's collection does not exist yet (allowed with ``missing_ok``,
    for a build: the first ``add`` creates it), True otherwise. Errors name the public call
    (:func:`caller`)."""
    owner = caller("check_vector_store")
    desc = describe_store(vector_store)
    have = stored_dim(vector_store)
    if have is not None and have != dim and built_in is not None:
        raise ValueError(
            f"{owner}: the vector store ({desc}) holds {have}-dimensional embeddings, the index in {built_in} "
            f"was built with {dim}; pass the vector store the index was built into."
        )
    if have is not None and have != dim:
        raise ValueError(
            f"{owner}: the vector store ({desc}) holds {have}-dimensional embeddings, the embed_model gives "
            f"{dim}; create the store with embed_dim={dim} (a new table) or pass the embed_model it was built with."
        )
    try:  # where the driver reads the catalog (PostgreSQL): O(1), a probe query scans the table
        found = driver_for(vector_store).table_dim(vector_store)
    except ConnectionError:
        raise
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(f"{owner}: cannot reach the vector store ({desc}): {first_line(e)}") from e
        raise
    if found is not None:
        return _checked_table(found, dim, desc, missing_ok, built_in)
    probe = [1.0] + [0.0] * (dim - 1)
    try:
        vector_store.query(VectorStoreQuery(query_embedding=probe, similarity_top_k=1))
    except Exception as e:
        first = first_line(e)
        if is_connection_error(e):
            raise ConnectionError(f"{owner}: cannot reach the vector store ({desc}): {first}") from e
        if is_missing_collection(e):
            if missing_ok:
                return False
            raise ValueError(
                f"{owner}: the vector store ({desc}) has no collection yet ({first}); pass the vector store "
                "the index was built into."
            ) from e
        if "dimension" in str(e).lower():
            raise ValueError(
                f"{owner}: the vector store ({desc}) rejects {dim}-dimensional embeddings ({first}); use a "
                "table created for this embed_model's dimension."
            ) from e
        raise
    return True


def _checked_table(found: int, dim: int, desc: str, missing_ok: bool, built_in: Optional[str]) -> bool:
    """:func:`check_vector_store` of a table whose dimension the driver read (0: no table yet)."""
    owner = caller("check_vector_store")
    if found == 0:
        if missing_ok:
            return False
        raise ValueError(
            f"{owner}: the vector store ({desc}) has no table yet; pass the vector store the index was built into."
        )
    if found > 0 and found != dim:
        what = f"the index in {built_in} was built with {dim}" if built_in else f"the embed_model gives {dim}"
        raise ValueError(
            f"{owner}: the vector store ({desc}) holds {found}-dimensional embeddings, {what}; "
            "pass the vector store the index was built into, or create the store with "
            f"embed_dim={dim} (a new table)."
        )
    return True


def checked_embeddings(
    vector_store: BasePydanticVectorStore, nodes: Sequence[BaseNode], embeddings: Optional[np.ndarray]
) -> np.ndarray:
    """The float32 ``(len(nodes), dim)`` embeddings of ``nodes`` (``embeddings``, else each
    ``node.embedding``), checked finite and of the dimension ``vector_store`` holds."""
    if embeddings is None:
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise ValueError(
                f"{len(missing)} nodes have no embedding (first: {missing[0]!r}); pass embeddings= or set node.embedding."
            )
        embeddings = np.asarray([n.embedding for n in nodes], dtype=np.float32)
    emb = np.asarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(nodes):
        raise ValueError(f"embeddings must have shape (n_nodes={len(nodes)}, dim), got {emb.shape}.")
    if not nodes:
        return emb
    check_finite_array(emb, "embeddings")
    have = stored_dim(vector_store)
    if have is not None and have != emb.shape[1]:
        raise ValueError(
            f"the vector store ({describe_store(vector_store)}) holds {have}-dimensional embeddings, got "
            f"{emb.shape[1]}; create the store with embed_dim={emb.shape[1]}."
        )
    return emb


def add_nodes_to_vector_store(
    vector_store: BasePydanticVectorStore,
    nodes: Sequence[BaseNode],
    embeddings: Optional[np.ndarray] = None,
    batch_size: Optional[int] = None,
    row_ids: RowIds = BY_NODE_ID,
) -> List[str]:
    """Write ``nodes`` with their embeddings (``embeddings`` rows, else ``node.embedding``) into
    ``vector_store`` in batches of ``batch_size`` (default: the driver's bulk batch, e.g. 2,000 rows
    per binary ``COPY`` into a ``PGVectorStore``, :data:`DEFAULT_BATCH_SIZE` per ``add`` elsewhere), each under ``row_ids.row_id(node_id)`` (the
    node id itself by default); metadata and relationships are kept, the input nodes are not
    modified. On a failure the rows already written are deleted (best effort) and the error
    names the store. Returns the node ids written."""
    if batch_size is not None:
        check_top_k(batch_size, "batch_size")
    nodes = list(nodes)
    emb = checked_embeddings(vector_store, nodes, embeddings)
    if not nodes:
        return []
    written: List[str] = []
    driver = driver_for(vector_store)
    step = batch_size or driver.vector_batch_size() or DEFAULT_BATCH_SIZE
    try:
        batches = (
            ([row_ids.to_row(n, None) for n in nodes[start : start + step]], emb[start : start + step])
            for start in range(0, len(nodes), step)
        )  # bulk: the vectors go from the array
        if not driver.write_vectors(vector_store, batches, written):
            for start in range(0, len(nodes), step):
                batch = [
                    row_ids.to_row(n, row.tolist())
                    for n, row in zip(nodes[start : start + step], emb[start : start + step])
                ]
                written.extend(vector_store.add(batch))
    except Exception as e:
        if written:
            try:
                vector_store.delete_nodes(node_ids=written)
            except Exception:  # pragma: no cover - the store is gone; the error below says so
                pass
        if is_connection_error(e):
            raise ConnectionError(
                f"could not write to the vector store ({describe_store(vector_store)}): {str(e).splitlines()[0]}"
            ) from e
        raise
    return [n.node_id for n in nodes] if row_ids.maps else written


def check_empty(vector_store: BasePydanticVectorStore, dim: int, reopen: str) -> None:
    """Refuse a vector store that already holds nodes (``reopen``: how to open its index)."""
    owner = caller("check_empty")
    res = vector_store.query(VectorStoreQuery(query_embedding=[1.0] + [0.0] * (dim - 1), similarity_top_k=1))
    if res.ids or res.nodes:
        raise ValueError(
            f"{owner}: the vector store ({describe_store(vector_store)}) already holds nodes; build into an "
            f"empty store (e.g. a new table_name), or reopen the index with {reopen}."
        )


def check_holds(vector_store: BasePydanticVectorStore, dim: int, node_ids: Sequence[str], row_ids: RowIds) -> None:
    """Refuse a vector store that is empty or whose nearest row to a probe is not one of
    ``node_ids`` (another index's store), for indexes that do not read their vectors back."""
    owner = caller("check_holds")
    res = vector_store.query(VectorStoreQuery(query_embedding=[1.0] + [0.0] * (dim - 1), similarity_top_k=1))
    got = [n.node_id for n in res.nodes] if res.nodes else list(res.ids or [])
    if res.nodes and (not row_ids.maps or NODE_ID_KEY in res.nodes[0].metadata):  # the row names its node
        ours = row_ids.from_row(res.nodes[0]).node_id in set(node_ids)
    else:  # ids only: every row id of the index (uuid5 of each node id)
        ours = bool(got) and got[0] in set(row_ids.row_ids(node_ids))
    if not ours:
        found = f"holds {got[0]!r}, not a node of the index" if got else "is empty"
        raise ValueError(
            f"{owner}: the vector store ({describe_store(vector_store)}) {found}; pass the vector store the "
            "index was built into."
        )


def check_docstore(docstore: BaseDocumentStore) -> None:
    """Fail before any work if the docstore cannot be reached."""
    owner = caller("check_docstore")
    try:
        docstore.get_document("causalrag-reachability-probe", raise_error=False)
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(
                f"{owner}: cannot reach the docstore ({describe_store(docstore)}): {first_line(e)}"
            ) from e
        raise


def add_nodes_to_docstore(docstore: BaseDocumentStore, nodes: Sequence[BaseNode]) -> None:
    """The rows of ``docstore.add_documents(nodes, allow_update=True)``, an unreachable store
    named: in one bulk transaction where the docstore's driver offers it (``PostgresDocumentStore``:
    ``COPY`` and one upsert), else through
    ``add_documents`` in batches of :data:`DOCSTORE_BATCH_SIZE` (LlamaIndex's default is one
    statement per node)."""
    owner = caller("add_nodes_to_docstore")
    try:
        if driver_for(docstore).write_docs(docstore, list(nodes)):
            return
        try:
            docstore.add_documents(list(nodes), allow_update=True, batch_size=DOCSTORE_BATCH_SIZE)
        except NotImplementedError:  # a kvstore without batches (SimpleKVStore) refuses before writing
            docstore.add_documents(list(nodes), allow_update=True)
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(
                f"{owner}: cannot write to the docstore ({describe_store(docstore)}): {first_line(e)}"
            ) from e
        raise


def add_nodes_and_rows(
    docstore: BaseDocumentStore,
    nodes: Sequence[BaseNode],
    vector_store: BasePydanticVectorStore,
    units: Sequence[BaseNode],
    embeddings: Optional[np.ndarray],
    row_ids: RowIds = BY_NODE_ID,
) -> None:
    """:func:`add_nodes_to_docstore` of ``nodes`` and :func:`add_nodes_to_vector_store` of
    ``units``. Where both stores are PostgreSQL (each on its own pooled connections) the two go
    side by side, the docstore's ``COPY`` on one server process while the vector table's triggers
    run on another (HolisQA biology, a build's 16,139 units: the docstore's write took about 4 s
    beside 13 s of rows); elsewhere one after the other. Both are waited for before an error is
    raised (the vector store's first), so the caller's clean-up finds no write running."""

    def docs() -> None:
        add_nodes_to_docstore(docstore, nodes)

    def rows() -> None:
        add_nodes_to_vector_store(vector_store, units, embeddings, row_ids=row_ids)

    if not driver_for(docstore).name == driver_for(vector_store).name == "postgres":
        docs()
        rows()
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="causalrag-docs") as side:
        pending = side.submit(contextvars.copy_context().run, docs)
        try:
            rows()
        finally:
            error = pending.exception()  # waited for either way
    if error is not None:
        raise error


def get_nodes_at_once(docstore: BaseDocumentStore, node_ids: Sequence[str], missing_ok: bool = False) -> List[Any]:
    """``docstore.get_nodes(node_ids)`` in one read where the docstore is LlamaIndex's key-value
    docstore: its node collection in one ``get_all`` instead of one query per node (reopening a
    MultiGranularityIndex of 16,139 stored units from PostgreSQL spent 17.6 s of 18.4 s in those
    queries). The same nodes, in ``node_ids``' order; a missing id is the same ``ValueError``
    (``missing_ok``: ``None`` in its place)."""
    from llama_index.core.storage.docstore.utils import json_to_doc

    driver = driver_for(docstore)
    nodes = once_more_if_lost(lambda: driver.read_all_docs(docstore), docstore, "reading nodes")
    if nodes is None:
        return list(docstore.get_nodes(list(node_ids), raise_error=not missing_ok))
    missing = next((i for i in node_ids if i not in nodes), None)
    if missing is not None and not missing_ok:
        raise ValueError(f"doc_id {missing} not found.")
    found = (nodes.get(i) for i in node_ids)
    return [n if n is None or isinstance(n, BaseNode) else json_to_doc(n) for n in found]


_PREFETCHED: "ContextVar[Optional[Tuple[int, Dict[str, BaseNode]]]]" = ContextVar("causalrag_prefetched", default=None)


def keep_for_next_read(docstore: BaseDocumentStore, nodes: Dict[str, BaseNode]) -> None:
    """``nodes`` answer the next :func:`fetch_nodes` on ``docstore`` in this thread or task (as
    the parents a read ``with_parents`` keeps), if they hold every id it asks for."""
    _PREFETCHED.set((id(docstore), dict(nodes)))


def fetch_nodes(
    docstore: BaseDocumentStore,
    node_ids: Sequence[str],
    with_parents: bool = False,
    counter: Optional[str] = None,
    seen: Optional[List[int]] = None,
) -> Dict[str, BaseNode]:
    """The stored nodes of ``node_ids`` by id, in one query where the docstore's driver offers it (``node_ids`` absent
    from the docstore are left out): what a query reads of a store-backed index.

    ``with_parents``: their PARENT nodes are read in the same query and kept for the next call
    on ``docstore`` in this thread or task (parent promotion asks for them right after fusion),
    which they answer without a second read. ``counter``, ``seen``: on PostgreSQL, a write counter
    read in the same statement (where the driver reads in one statement: PostgreSQL);
    nothing is appended where no statement was sent."""
    ids = list(dict.fromkeys(node_ids))
    kept = _PREFETCHED.get()
    if kept is not None and kept[0] == id(docstore):
        _PREFETCHED.set(None)
        if all(i in kept[1] for i in ids):
            return {i: kept[1][i] for i in ids}
    if not ids:
        return {}
    driver, bulk = driver_for(docstore), [False]

    def read() -> Dict[str, BaseNode]:
        got: List[int] = []
        nodes = driver.read_docs(docstore, ids, with_parents=with_parents, counter=counter, seen=got)
        if nodes is not None:
            bulk[0] = True
            if seen is not None:
                seen.extend(got)  # of the read that answered (a lost connection's retry counts once)
            return nodes
        found = {i: docstore.get_node(i, raise_error=False) for i in ids}
        return {i: n for i, n in found.items() if n is not None}

    got = once_more_if_lost(read, docstore, "reading nodes")
    if with_parents and bulk[0]:
        parents = {n.parent_node.node_id for n in got.values() if n.parent_node is not None}
        keep_for_next_read(docstore, {i: got[i] for i in parents if i in got})
    return got


def all_nodes(docstore: BaseDocumentStore) -> Dict[str, BaseNode]:
    """Every node of ``docstore`` by id (one query on PostgreSQL)."""
    driver = driver_for(docstore)
    nodes = once_more_if_lost(lambda: driver.read_docs(docstore), docstore, "reading nodes")
    return nodes if nodes is not None else {i: n for i, n in docstore.docs.items()}


def nodes_of_documents(
    docstore: BaseDocumentStore, doc_ids: Sequence[str], first_only: bool = False
) -> Dict[str, List[BaseNode]]:
    """The stored nodes of each document of ``doc_ids`` that the docstore knows, in their stored
    order (``first_only``: its first node only)."""
    ids: Dict[str, List[str]] = {}
    for d in dict.fromkeys(doc_ids):
        info = docstore.get_ref_doc_info(d)
        if info is not None and info.node_ids:
            ids[d] = list(info.node_ids[:1] if first_only else info.node_ids)
    nodes = fetch_nodes(docstore, [i for group in ids.values() for i in group])
    return {d: [nodes[i] for i in group if i in nodes] for d, group in ids.items()}


def remove_nodes(
    vector_store: Optional[BasePydanticVectorStore],
    docstore: Optional[BaseDocumentStore],
    node_ids: Sequence[str],
    row_ids: RowIds,
) -> None:
    """Delete ``node_ids`` from the vector store (their rows) and the docstore (best effort: used to undo)."""
    ids = list(node_ids)
    if vector_store is not None and ids:
        try:
            vector_store.delete_nodes(node_ids=row_ids.row_ids(ids))
        except Exception:  # pragma: no cover - the store went away; the caller's error says so
            pass
    for nid in ids if docstore is not None else []:
        try:
            docstore.delete_document(nid, raise_error=False)  # type: ignore[union-attr]
        except Exception:  # pragma: no cover - the docstore went away too
            break


def fetch_embeddings(
    vector_store: BasePydanticVectorStore,
    node_ids: Sequence[str],
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    row_ids: RowIds,
) -> np.ndarray:
    """The stored vectors of ``node_ids``, shape ``(len(node_ids), dim)`` float32, in that order:
    ``get_nodes(node_ids=...)`` (e.g. ``PGVectorStore``) or ``get(id)`` (``SimpleVectorStore``)
    of their rows (``row_ids``). Errors name the public call (:func:`caller`)."""
    owner = caller("fetch_embeddings")
    ids = list(node_ids)
    found: dict = {}
    try:
        for start in range(0, len(ids), batch_size):
            batch = ids[start : start + batch_size]
            rows = dict(zip(row_ids.row_ids(batch), batch))
            try:
                got = once_more_if_lost(
                    lambda rows=rows: vector_store.get_nodes(node_ids=list(rows)), vector_store, owner
                )
                found.update({rows.get(n.node_id, n.node_id): n.embedding for n in got})
            except NotImplementedError:
                getter = getattr(vector_store, "get", None)
                if getter is None:
                    raise TypeError(
                        f"{owner}: {type(vector_store).__name__} cannot return stored vectors (no get_nodes); use a "
                        "vector store that implements get_nodes(node_ids=...)."
                    ) from None
                for r, i in rows.items():
                    try:
                        found[i] = getter(r)
                    except KeyError:
                        pass
    except Exception as e:
        if is_connection_error(e):
            raise ConnectionError(
                f"{owner}: cannot reach the vector store ({describe_store(vector_store)}): {first_line(e)}"
            ) from e
        raise
    missing = [i for i in ids if found.get(i) is None]
    if missing:
        raise ValueError(
            f"{owner}: the vector store ({describe_store(vector_store)}) lacks {len(missing)} of the index's "
            f"{len(ids)} vectors (first: {missing[0]!r}); pass the vector store the index was built into."
        )
    return np.asarray([np.asarray(found[i], dtype=np.float32) for i in ids], dtype=np.float32).reshape(len(ids), -1)
