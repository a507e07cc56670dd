"""One writer at a time per index: the lock a store-backed index's writes and opens take.

The index's state lives in one collection of a kvstore (:mod:`.kvstate`). Its writers (a build,
``insert``, ``delete_ref_doc``, ``refresh_ref_docs``) hold :class:`WriteLock` on that collection
for the whole write; an open holds it shared while it reads the stores, so it waits for a
running write and never reads a write half done.

* A ``PostgresKVStore``: a PostgreSQL session advisory lock (``pg_advisory_lock``, shared:
  ``pg_advisory_lock_shared``) on a connection of its own, keyed by the kvstore's table and the
  collection. Processes on any host that share the database are serialised; the server releases
  the lock the moment the holder's session ends (process killed, connection dropped, server
  restarted), so a crashed writer never leaves it held.
* Any other kvstore: a lock of this process (its stores are the process's own:
  ``SimpleKVStore`` and the like), keyed by the kvstore object and the collection.

Waiting is bounded (:data:`WAIT_SECONDS`); past it :class:`ConcurrentWriteError` says which
index is busy.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Dict, Optional, Tuple

WAIT_SECONDS = 300.0  # how long a write or an open waits for another writer of the same index
POLL_SECONDS = 0.05


class ConcurrentWriteError(RuntimeError):
    """Another writer holds the index, or changed it since this index object was opened."""


def _pg_url(kvstore: Any) -> Optional[str]:
    if type(kvstore).__name__ != "PostgresKVStore":
        return None
    url = getattr(kvstore, "connection_string", None)
    engine = getattr(kvstore, "_engine", None)
    if not url and engine is not None:
        url = engine.url.render_as_string(hide_password=False)
    return str(url) if url else None


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
        self._url = _pg_url(kvstore)
        self._key = lock_key(kvstore, collection)
        self._conn: Any = None
        self._engine: Any = None
        self._local: Optional[threading.Lock] = None
        self.shared = False

    @property
    def held(self) -> bool:
        return self._conn is not None or self._local is not None

    def acquire(self, shared: bool = False, wait: Optional[float] = None) -> None:
        """Take the lock (``shared``: alongside other readers), waiting at most ``wait`` seconds
        (default :data:`WAIT_SECONDS`); :class:`ConcurrentWriteError` past it."""
        wait = WAIT_SECONDS if wait is None else wait
        if self._url is None:
            self._acquire_local(wait)
        else:
            self._acquire_pg(shared, wait)
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

    def _acquire_pg(self, shared: bool, wait: float) -> None:
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        fn = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
        self._engine = sqlalchemy.create_engine(self._url, poolclass=NullPool)
        try:
            conn = self._engine.connect()
            conn.execution_options(isolation_level="AUTOCOMMIT")
            deadline = time.monotonic() + wait
            while not conn.execute(sqlalchemy.text(f"SELECT {fn}(:k)"), {"k": self._key}).scalar():
                if time.monotonic() >= deadline:
                    conn.close()
                    raise self._busy(wait)
                time.sleep(POLL_SECONDS)
        except BaseException:
            self._engine.dispose()
            self._engine = None
            raise
        self._conn = conn

    def check_held(self) -> None:
        """Raise ``ConnectionError`` if the lock's session is gone (the server may have handed the
        lock to another writer): called just before a write commits."""
        if self._conn is None:
            return
        import sqlalchemy

        try:
            self._conn.execute(sqlalchemy.text("SELECT 1")).scalar()
        except Exception as e:
            raise ConnectionError(
                f"lost the write lock of the index in {self.where} (its database session ended: "
                f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}); the write was not committed."
            ) from e

    def release(self) -> None:
        """Give the lock back (closing its session releases it on the server in any case)."""
        if self._local is not None:
            self._local.release()
            self._local = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                import sqlalchemy

                fn = "pg_advisory_unlock_shared" if self.shared else "pg_advisory_unlock"
                conn.execute(sqlalchemy.text(f"SELECT {fn}(:k)"), {"k": self._key})
            except Exception:  # the session is gone: so is the lock
                pass
            try:
                conn.close()
            except Exception:  # pragma: no cover - the connection is already broken
                pass
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> "WriteLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["ConcurrentWriteError", "WAIT_SECONDS", "WriteLock", "lock_key"]
