"""A PostgreSQL session advisory lock: the write lock of an index whose kvstore is a
``PostgresKVStore``. ``pg_try_advisory_lock`` (shared: ``pg_try_advisory_lock_shared``) on a
connection of its own, polled until taken; the server releases it the moment the holder's
session ends (process killed, connection dropped, server restarted), so a crashed writer never
leaves it held. Processes on any host that share the database are serialised."""

from __future__ import annotations

import time
from typing import Any, Optional

POLL_SECONDS = 0.05


class AdvisoryLock:
    """The lock on ``key`` in the database at ``url`` (:class:`~..drivers.SessionLock`)."""

    def __init__(self, url: str, key: int) -> None:
        self.url, self.key = url, key
        self.shared = False
        self._engine: Any = None
        self._conn: Any = None

    def acquire(self, shared: bool, wait: float) -> bool:
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        self.shared = shared
        fn = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
        self._engine = sqlalchemy.create_engine(self.url, poolclass=NullPool)
        try:
            conn = self._engine.connect()
            conn.execution_options(isolation_level="AUTOCOMMIT")
            deadline = time.monotonic() + wait
            while not conn.execute(sqlalchemy.text(f"SELECT {fn}(:k)"), {"k": self.key}).scalar():
                if time.monotonic() >= deadline:
                    conn.close()
                    self._dispose()
                    return False
                time.sleep(POLL_SECONDS)
        except BaseException:
            self._dispose()
            raise
        self._conn = conn
        return True

    def check(self) -> None:
        if self._conn is None:
            return
        import sqlalchemy

        try:
            self._conn.execute(sqlalchemy.text("SELECT 1")).scalar()
        except Exception as e:
            text = str(e).strip()
            raise ConnectionError(
                f"its database session ended: {text.splitlines()[0] if text else type(e).__name__}"
            ) from e

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                import sqlalchemy

                fn = "pg_advisory_unlock_shared" if self.shared else "pg_advisory_unlock"
                conn.execute(sqlalchemy.text(f"SELECT {fn}(:k)"), {"k": self.key})
            except Exception:  # the session is gone: so is the lock
                pass
            try:
                conn.close()
            except Exception:  # pragma: no cover - the connection is already broken
                pass
        self._dispose()

    def _dispose(self) -> None:
        engine: Optional[Any] = self._engine
        self._engine = None
        if engine is not None:
            engine.dispose()


__all__ = ["AdvisoryLock"]
