"""An index's persisted folder kept in a LlamaIndex key-value store (``BaseKVStore``).

A store-backed index keeps its nodes in a docstore and its vectors in a vector store; the
rest (BM25 indexes, unit order, parameters, a section tree and citation graph) is the
folder :func:`persistence.persist_to` writes. :class:`KVState` keeps that folder as JSON
values in one collection, ``"{namespace}/causalrag_index"``, of any ``BaseKVStore``
(``PostgresKVStore``, ``SimpleKVStore``, ...):

* ``"head"``: ``{"class", "generation", "vector_store", "files": {path: {"encoding", "chunks"}}}``;
* ``"{generation}/{path}/{i}"``: chunk ``i`` of a file, ``{"text": ...}`` for a UTF-8 file
  (the JSON files, byte for byte) or ``{"base64": ...}`` for any other (the ``.npy`` arrays:
  base64 of the bytes ``np.save(..., allow_pickle=False)`` wrote; they are loaded with
  ``allow_pickle=False``). A chunk holds at most :data:`CHUNK_CHARS` characters.

Saving writes every chunk of a new generation, then the head (one ``put``: a reader sees the
old generation or the new one, never a mix), then deletes the old generation. A write of the
index's rows runs under the collection's write lock (:mod:`.writelock`) with a write-ahead
record, ``"pending"`` (:mod:`.journal`), that the next open settles if the write was cut short;
:attr:`KVState.generation` is the head's generation this index object last read or wrote, so a
writer whose index another process changed meanwhile is refused. Opening
downloads the head's generation into a temporary folder and checks it with
:func:`persistence.open_persisted` (class, format version, every file's size and sha256),
so a changed or truncated value is reported instead of loaded.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from llama_index_ext_causalrag.storage import journal
from llama_index_ext_causalrag.storage.persistence import (
    REBUILD,
    CorruptIndexError,
    PersistedIndex,
    open_persisted,
    safe_relative_path,
)
from llama_index_ext_causalrag.storage.stores import (
    describe_store,
    drop_pooled_connections,
    first_line,
    is_connection_error,
)
from llama_index_ext_causalrag.storage.writelock import ConcurrentWriteError, WriteLock
from llama_index_ext_causalrag.validation import caller

COLLECTION_SUFFIX = "causalrag_index"
HEAD_KEY = "head"
DEFAULT_NAMESPACE = "causalrag"
CHUNK_CHARS = 1 << 22  # 4 MiB of text per value
_OPEN_ATTEMPTS = 3


def default_namespace(vector_store: Any) -> str:
    """The vector store's table name (one table per index), else ``"causalrag"``."""
    return str(getattr(vector_store, "table_name", None) or DEFAULT_NAMESPACE)


def store_identity(vector_store: Any) -> Dict[str, Any]:
    """``{"class": "PGVectorStore", "table": "units"}``: what a reopened index must be given."""
    return {"class": type(vector_store).__name__, "table": getattr(vector_store, "table_name", None)}


class KVState:
    """One index's persisted folder in collection ``"{namespace}/causalrag_index"`` of ``kvstore``;
    its errors name the public call running (:func:`caller`)."""

    def __init__(self, kvstore: Any, namespace: str) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"namespace must be a non-empty string, got {namespace!r}.")
        self.kvstore, self.namespace = kvstore, namespace
        self.collection = f"{namespace}/{COLLECTION_SUFFIX}"
        self.generation: Optional[str] = None  # the head's generation this index last read or wrote
        self._staged: Optional[_Staged] = None

    def describe(self) -> str:
        return f"{describe_store(self.kvstore)}, namespace {self.namespace!r}"

    def _call(self, verb: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args, collection=...)``; a read (``verb`` "reach" or "read from") runs once more
        on new connections after a lost one (a server restarted since the last call); an
        unreachable kvstore is a ``ConnectionError`` naming it. Writes are never repeated here:
        the journal around them decides."""
        try:
            try:
                return fn(*args, collection=self.collection)
            except Exception as e:
                if verb not in ("reach", "read from") or not is_connection_error(e):
                    raise
                drop_pooled_connections(self.kvstore)
                return fn(*args, collection=self.collection)
        except Exception as e:
            if is_connection_error(e):
                raise ConnectionError(
                    f"{caller('KVState')}: cannot {verb} the kvstore ({self.describe()}): {first_line(e)}"
                ) from e
            raise

    def head(self) -> Optional[Dict[str, Any]]:
        head = self._call("reach", self.kvstore.get, HEAD_KEY)
        return dict(head) if head is not None else None

    # ---- raw values, for the journal -------------------------------------------------------
    def get_value(self, key: str) -> Any:
        return self._call("read from", self.kvstore.get, key)

    def put_value(self, key: str, value: Dict[str, Any]) -> None:
        self._call("write to", self.kvstore.put, key, value)

    def delete_values(self, keys: Sequence[str], best_effort: bool = False) -> None:
        for key in keys:
            try:
                self._call("write to", self.kvstore.delete, key)
            except Exception:
                if not best_effort:
                    raise
                return

    def value_keys(self) -> List[str]:
        return list(self._call("read from", self.kvstore.get_all) or {})

    # ---- writers ---------------------------------------------------------------------------
    def write_lock(self) -> WriteLock:
        return WriteLock(self.kvstore, self.collection, f"the kvstore ({self.describe()})")

    def acquire(self, lock: WriteLock, shared: bool = False) -> None:
        """``lock.acquire(shared)``, an unreachable kvstore named."""
        try:
            lock.acquire(shared=shared)
        except Exception as e:
            if is_connection_error(e) and not isinstance(e, ConnectionError):
                raise ConnectionError(
                    f"{caller('KVState')}: cannot reach the kvstore ({self.describe()}): {first_line(e)}"
                ) from e
            raise

    @contextmanager
    def staged(
        self,
        generation: str,
        before_commit: Callable[[], None],
        commit_head: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Iterator["_Staged"]:
        """:meth:`save` inside writes generation ``generation`` and calls ``before_commit`` just
        before the head's put (the write's journal names that generation); with ``commit_head``,
        the head is written by ``commit_head(head)`` instead (the driver's one transaction, with
        the write's rows). The value yielded says whether the head was committed."""
        self._staged = _Staged(generation, before_commit, commit_head)
        try:
            yield self._staged
        finally:
            self._staged = None

    @contextmanager
    def reading(self, vector_store: Any, docstore: Any, hint: str) -> Iterator[None]:
        """Hold the write lock shared while an open reads the stores (a running write is waited
        for); an interrupted write is settled first (:func:`journal.recover`)."""
        lock = self.write_lock()
        for _ in range(_OPEN_ATTEMPTS):
            if self.get_value(journal.PENDING_KEY) is not None:
                self.recover(vector_store, docstore, hint, lock)
            self.acquire(lock, shared=True)
            if self.get_value(journal.PENDING_KEY) is None:
                break
            lock.release()
        else:
            raise ConcurrentWriteError(
                f"{caller('KVState')}: writers kept interrupting each other in the kvstore "
                f"({self.describe()}); open the index again."
            )
        try:
            yield
        finally:
            lock.release()

    def recover(self, vector_store: Any, docstore: Any, hint: str, lock: Optional[WriteLock] = None) -> Optional[str]:
        """Take the write lock (waiting for a running writer) and settle what an interrupted write
        left; returns the warning logged, if any."""
        lock = lock or self.write_lock()
        self.acquire(lock)
        try:
            return journal.recover(self, vector_store, docstore, hint)
        finally:
            lock.release()

    def check_free(self) -> None:
        """Fail unless the namespace is reachable and holds no index."""
        head = self.head()
        if head is not None:
            raise ValueError(
                f"{caller('KVState')}: the kvstore ({self.describe()}) already holds a {head.get('class')} built into "
                f"{_identity_text(head.get('vector_store'))}; pass another namespace= (one per index), or reopen "
                "that index with from_vector_store."
            )

    def check_built_into(self, vector_store: Any, head: Dict[str, Any]) -> None:
        """Refuse a vector store other than the one the index in this namespace was built into."""
        want, got = head.get("vector_store") or {}, store_identity(vector_store)
        if want and want != got:
            raise ValueError(
                f"{caller('KVState')}: the index in the kvstore ({self.describe()}) was built into "
                f"{_identity_text(want)}, got {_identity_text(got)}; pass the vector store it was built into, "
                "or the namespace= of this store's own index."
            )

    # ---- writing --------------------------------------------------------------------------
    def save(self, folder: Path, class_name: str, vector_store: Any) -> None:
        """Put every file of ``folder`` under a new generation, then the head, then delete the
        old generation (best effort)."""
        old = self.head()
        staged = self._staged
        gen = staged.generation if staged is not None else uuid.uuid4().hex[:12]
        pairs, files = _chunks(folder, gen)
        written: List[str] = []
        try:
            for key, value in pairs:
                self._call("write to", self.kvstore.put, key, value)
                written.append(key)
            head = {
                "class": class_name,
                "generation": gen,
                "vector_store": store_identity(vector_store),
                "files": files,
            }
            if staged is None:
                self._call("write to", self.kvstore.put, HEAD_KEY, head)
            else:
                staged.before_commit()
                if staged.commit_head is None:
                    self._call("write to", self.kvstore.put, HEAD_KEY, head)
                else:
                    staged.commit_head(head)
                staged.committed = True
        except Exception:
            if staged is None:  # else the journal's roll-back deletes them
                self._delete(written)
            raise
        self.generation = gen
        if old is not None and old.get("generation") != gen:
            self._delete(_keys(old))

    def save_written(self, write: Callable[[Path], None], class_name: str, vector_store: Any) -> None:
        """:meth:`save` of the folder ``write(folder)`` writes (into a temporary folder)."""
        with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
            write(Path(tmp) / "ix")
            self.save(Path(tmp) / "ix", class_name, vector_store)

    def clear(self) -> None:
        """Delete the index of this namespace (the head first, so no reader sees a partial one)."""
        old = self.head()
        if old is not None:
            self._delete([HEAD_KEY, *_keys(old)])

    def _delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                self.kvstore.delete(key, collection=self.collection)
            except Exception:  # pragma: no cover - the store went away; leftovers are unreferenced
                return

    # ---- reading --------------------------------------------------------------------------
    @contextmanager
    def open(self, classes: Sequence[str], hint: str, vector_store: Any) -> Iterator[PersistedIndex]:
        """The checked folder of this namespace's index (a temporary copy, deleted on exit),
        after checking it was built into ``vector_store``. Errors naming the copy name the kvstore."""
        tmp = Path(tempfile.mkdtemp(prefix="causalrag-kv-"))
        folder = str(tmp / "ix")
        try:
            self._download(tmp / "ix", classes, hint, vector_store)
            yield open_persisted(tmp / "ix", classes, hint)
        except (CorruptIndexError, ValueError) as e:
            if folder not in str(e):
                raise
            raise type(e)(str(e).replace(folder, f"the kvstore ({self.describe()})")) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _download(self, target: Path, classes: Sequence[str], hint: str, vector_store: Any) -> None:
        for _ in range(_OPEN_ATTEMPTS):  # a writer may delete the generation between head and chunks
            head = self.head()
            if head is None:
                raise FileNotFoundError(
                    f"{caller('KVState')}: the kvstore ({self.describe()}) holds no index; build one with {hint} "
                    "first, or pass the namespace= it was built with."
                )
            if head.get("class") not in classes:
                raise ValueError(
                    f"{caller('KVState')}: the kvstore ({self.describe()}) holds a {head.get('class')}, not a "
                    f"{classes[0]}; open it with its own class's from_vector_store, or pass another namespace=."
                )
            self.check_built_into(vector_store, head)
            if self._write_files(target, head):
                self.generation = head["generation"]
                return
            shutil.rmtree(target, ignore_errors=True)
        raise CorruptIndexError(
            f"{caller('KVState')}: the kvstore ({self.describe()}) lacks values its head lists; {REBUILD}."
        )

    def _check_head(self, head: Dict[str, Any]) -> None:
        """The head is data: its generation and file entries are checked before any key or path
        is built from them."""
        where = f"{caller('KVState')}: the head of the kvstore ({self.describe()})"
        gen, files = head.get("generation"), head.get("files")
        if not isinstance(gen, str) or not gen.isalnum():
            raise CorruptIndexError(f"{where} names the generation {gen!r}, not a plain name; {REBUILD}.")
        if not isinstance(files, dict) or not all(
            isinstance(m, dict)
            and m.get("encoding") in ("text", "base64")
            and isinstance(m.get("chunks"), int)
            and 1 <= m["chunks"] <= 1 << 20
            for m in files.values()
        ):
            raise CorruptIndexError(f"{where} is corrupt: each file needs an encoding and a chunk count; {REBUILD}.")
        for rel in files:
            safe_relative_path(Path("ix"), rel, where)

    def _write_files(self, target: Path, head: Dict[str, Any]) -> bool:
        self._check_head(head)
        gen = head["generation"]
        for rel, meta in head["files"].items():
            parts = []
            for i in range(int(meta["chunks"])):
                value = self._call("read from", self.kvstore.get, f"{gen}/{rel}/{i}")
                if value is None:
                    return False
                piece = value.get(meta["encoding"]) if isinstance(value, dict) else None
                if not isinstance(piece, str):
                    raise CorruptIndexError(
                        f"{caller('KVState')}: value {gen}/{rel}/{i} of the kvstore ({self.describe()}) is not a "
                        f"{meta['encoding']} chunk; {REBUILD}."
                    )
                parts.append(piece)
            text = "".join(parts)
            data = text.encode("utf-8") if meta["encoding"] == "text" else base64.b64decode(text.encode("ascii"))
            path = target / rel  # checked by _check_head before any file is written
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return True


@dataclass
class _Staged:
    """The write a :meth:`KVState.save` commits: its generation, the check before its head, the
    driver's commit of rows and head (None: the head's own put), and whether it committed."""

    generation: str
    before_commit: Callable[[], None]
    commit_head: Optional[Callable[[Dict[str, Any]], None]] = None
    committed: bool = False


def kv_state(kvstore: Optional[Any], namespace: Optional[str], vector_store: Any) -> Optional[KVState]:
    """The index's place in ``kvstore`` (``namespace`` defaults to the vector store's table name)."""
    owner = caller("kv_state")
    if kvstore is None:
        if namespace is not None:
            raise ValueError(f"{owner}: namespace={namespace!r} names a collection of a kvstore; pass kvstore= too.")
        return None
    return KVState(kvstore, namespace if namespace is not None else default_namespace(vector_store))


def open_index_state(
    persist_dir: Optional["str | Path"],
    kvstore: Optional[Any],
    namespace: Optional[str],
    vector_store: Any,
    store_class: str,
    hint_dir: str,
    hint_kv: str,
    open_index: Callable[[PersistedIndex, str, Optional[KVState]], Any],
    docstore: Any = None,
) -> Any:
    """A store-backed index reopened from its kvstore or from ``persist_dir`` (exactly one):
    ``open_index(persisted, where it was read from, kv state or None)`` builds it. From a kvstore
    (given the ``docstore``), the open waits for a running write of the index and first settles
    one a crash interrupted. Errors name the public call (:func:`caller`)."""
    owner = caller("from_vector_store")
    if (persist_dir is None) == (kvstore is None):
        raise ValueError(
            f"{owner}: pass exactly one of persist_dir= (a folder written by index.persist) and kvstore= "
            f"(the kvstore the index was built with); got {'both' if kvstore is not None else 'neither'}."
        )
    kv = kv_state(kvstore, namespace, vector_store)
    if kv is None:
        persisted = open_persisted(persist_dir, store_class, hint_dir)  # type: ignore[arg-type]
        return open_index(persisted, str(persisted.dir), None)
    if docstore is None:
        with kv.open((store_class,), hint_kv, vector_store) as persisted:
            return open_index(persisted, f"the kvstore ({kv.describe()})", kv)
    with kv.reading(vector_store, docstore, f"{owner}(..., kvstore=...)"):
        with kv.open((store_class,), hint_kv, vector_store) as persisted:
            return open_index(persisted, f"the kvstore ({kv.describe()})", kv)


def _chunks(folder: Path, gen: str) -> Tuple[List[Tuple[str, Dict[str, str]]], Dict[str, Dict[str, Any]]]:
    pairs: List[Tuple[str, Dict[str, str]]] = []
    files: Dict[str, Dict[str, Any]] = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file():
            continue
        rel, data = p.relative_to(folder).as_posix(), p.read_bytes()
        try:
            enc, text = "text", data.decode("utf-8")
        except UnicodeDecodeError:
            enc, text = "base64", base64.b64encode(data).decode("ascii")
        pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
        pairs.extend((f"{gen}/{rel}/{i}", {enc: piece}) for i, piece in enumerate(pieces))
        files[rel] = {"encoding": enc, "chunks": len(pieces)}
    return pairs, files


def _keys(head: Dict[str, Any]) -> List[str]:
    """The value keys ``head`` lists (entries of the wrong shape name none)."""
    gen, files = head.get("generation"), head.get("files")
    if not isinstance(gen, str) or not isinstance(files, dict):
        return []
    return [
        f"{gen}/{rel}/{i}"
        for rel, meta in files.items()
        if isinstance(meta, dict) and isinstance(meta.get("chunks"), int)
        for i in range(min(meta["chunks"], 1 << 20))
    ]


def _identity_text(identity: Optional[Dict[str, Any]]) -> str:
    identity = identity or {}
    table = identity.get("table")
    return f"{identity.get('class')}" + (f" table {table!r}" if table else "")


__all__ = ["DEFAULT_NAMESPACE", "KVState", "default_namespace", "kv_state", "store_identity"]
