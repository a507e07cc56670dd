"""One writer at a time per index: the lock a store-backed index's writes and opens take.

The index's state lives in one collection of a kvstore (:mod:`.kvstate`). Its writers (a build,
``insert``, ``delete_ref_doc``, ``refresh_ref_docs``) hold :class:`WriteLock` on that collection
for the whole write; an open holds it shared while it reads the stores, so it waits for a
running write and never reads a write half done.

* A kvstore whose driver offers a session lock (:meth:`~.drivers.StoreDriver.session_lock`;
  ``PostgresKVStore``: a PostgreSQL session advisory lock, :mod:`.pg.lock`), keyed by the
  kvstore's table and the collection. Processes on any host that share the store are
  serialised; the store releases the lock the moment the holder's session ends (process killed,
  connection dropped, server restarted), so a crashed writer never leaves it held.
* Any other kvstore: a lock of this process (its stores are the process's own:
  ``SimpleKVStore`` and the like), keyed by the kvstore object and the collection.

Waiting is bounded (:data:`WAIT_SECONDS`); past it :class:`ConcurrentWriteError` says which
index is busy.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Dict, Optional, Tuple

from llama_index_ext_causalrag.storage.drivers import SessionLock, driver_for

WAIT_SECONDS = 300.0  # how long a write or an open waits for another writer of the same index


class ConcurrentWriteError(RuntimeError):
    """Another writer holds the index, or changed it since this index object was opened."""


def lock_key(kvstore: Any, collection: str) -> int:
    """A signed 64-bit advisory-lock key for ``collection`` of ``kvstore``'s table."""
    ident = f"causalrag:{getattr(kvstore, 'schema_name', '')}.{getattr(kvstore, 'table_name', '')}/{collection}"
    return int.from_bytes(hashlib.sha256(ident.encode("utf-8")).digest()[:8], "big", signed=True)


_local_guard = threading.Lock()
_local: Dict[Tuple[int, str], threading.Lock] = {}


class WriteLock:
    """The write lock of ``collection`` in ``kvstore`` (``where``: how messages name the index)."""

    def __init__(self, kvstore: Any, collection: str, where: str) -> None:
        self.kvstore, self.collection, self.where = kvstore, collection, where
        self._key = lock_key(kvstore, collection)
        self._session: Optional[SessionLock] = None
        self._local: Optional[threading.Lock] = None
        self.shared = False

    @property
    def held(self) -> bool:
        return self._session is not None or self._local is not None

    def acquire(self, shared: bool = False, wait: Optional[float] = None) -> None:
        """Take the lock (``shared``: alongside other readers), waiting at most ``wait`` seconds
        (default :data:`WAIT_SECONDS`); :class:`ConcurrentWriteError` past it."""
        wait = WAIT_SECONDS if wait is None else wait
        session = driver_for(self.kvstore).session_lock(self.kvstore, self._key)
        if session is None:
            self._acquire_local(wait)
        elif session.acquire(shared, wait):
            self._session = session
        else:
            raise self._busy(wait)
        self.shared = shared

    def try_acquire(self) -> bool:
        """Take the lock exclusively if it is free; False if another holder has it."""
        try:
            self.acquire(wait=0.0)
        except ConcurrentWriteError:
            return False
        return True

    def _busy(self, wait: float) -> ConcurrentWriteError:
        return ConcurrentWriteError(
            f"another writer has held the index in {self.where} for more than {wait:g} s; retry when its write "
            "is done (a crashed writer releases the lock at once)."
        )

    def _acquire_local(self, wait: float) -> None:
        with _local_guard:
            lock = _local.setdefault((id(self.kvstore), self.collection), threading.Lock())
        ok = lock.acquire(timeout=wait) if wait > 0 else lock.acquire(blocking=False)
        if not ok:
            raise self._busy(wait)
        self._local = lock

    def check_held(self) -> None:
        """Raise ``ConnectionError`` if the lock's session is gone (the server may have handed the
        lock to another writer): called just before a write commits."""
        if self._session is None:
            return
        try:
            self._session.check()
        except Exception as e:
            text = str(e).strip()
            raise ConnectionError(
                f"lost the write lock of the index in {self.where} ("
                f"{text.splitlines()[0] if text else type(e).__name__}); the write was not committed."
            ) from e

    def release(self) -> None:
        """Give the lock back (closing its session releases it on the server in any case)."""
        if self._local is not None:
            self._local.release()
            self._local = None
        if self._session is not None:
            session, self._session = self._session, None
            session.release()

    def __enter__(self) -> "WriteLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["ConcurrentWriteError", "WAIT_SECONDS", "WriteLock", "lock_key"]
