"""PostgreSQL's connections as LlamaIndex's stores hold them: which errors mean a lost
connection, where a store lives (for messages), closing a store's pooled connections, and the
one retry a read gets after a restart."""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, TypeVar

from llama_index_ext_causalrag.storage.drivers import retry_if_lost

T = TypeVar("T")
# psycopg2 raises DatabaseError, not OperationalError, for a server that died mid-statement
LOST_CONNECTION = re.compile(
    r"server closed the connection|connection already closed|terminating connection|"
    r"could not receive data from server|SSL connection has been closed|no connection to the server",
    re.I,
)


def lost_connection(error: BaseException) -> bool:
    return type(error).__name__ == "DatabaseError" and bool(LOST_CONNECTION.search(str(error)))


def kvstore_of(store: Any) -> Any:
    """A KV-backed docstore's kvstore (LlamaIndex's ``KVDocumentStore``), else None."""
    return getattr(store, "_kvstore", None)


def describe(store: Any) -> Optional[str]:
    """``PGVectorStore at postgresql+psycopg2://user:***@host/db, table 'name'`` (password hidden);
    a vector store, a kvstore or a KV-backed docstore (its kvstore has the connection)."""
    target = store
    url = getattr(target, "connection_string", None)
    if not url:
        target = kvstore_of(store)
        url = getattr(target, "connection_string", None)
    if not url:
        return None
    try:
        from sqlalchemy.engine import make_url

        url = make_url(str(url)).render_as_string(hide_password=True)
    except Exception:  # not a SQLAlchemy URL: show it without anything after '@' credentials
        url = str(url).split("@")[-1]
    table = getattr(target, "table_name", None)
    return f"{type(store).__name__} at {url}" + (f", table {table!r}" if table else "")


def drop_connections(store: Any) -> None:
    """Close the pooled connections of ``store`` (a SQLAlchemy store's engine, a KV-backed
    docstore's through its kvstore): after a lost connection the pool may hand out dead ones."""
    for target in (store, kvstore_of(store), getattr(store, "kvstore", None)):
        dispose = getattr(getattr(target, "_engine", None), "dispose", None)
        if callable(dispose):
            try:
                dispose()
            except Exception:  # pragma: no cover - closing a dead connection
                pass


def once_more_if_lost(fn: Callable[[], T], store: Any, what: str) -> T:
    """``fn()``, once more on new connections if the connection to ``store`` was lost."""
    return retry_if_lost(fn, store, what, lambda s: describe(s) or type(s).__name__)


def url_of(store: Any) -> Optional[str]:
    """The SQLAlchemy URL ``store`` connects with (a kvstore's engine if it has no string)."""
    url = getattr(store, "connection_string", None)
    engine = getattr(store, "_engine", None)
    if not url and engine is not None:
        url = engine.url.render_as_string(hide_password=False)
    return str(url) if url else None


def same_database(*urls: Any) -> bool:
    """All ``urls`` name one server and database (an URL SQLAlchemy cannot parse: not provably)."""
    import sqlalchemy

    try:
        places = set()
        for url in urls:
            u = sqlalchemy.engine.make_url(url) if isinstance(url, str) else url
            places.add((u.host, u.port, u.database))
        return len(places) == 1
    except Exception:
        return False


__all__ = ["describe", "drop_connections", "lost_connection", "once_more_if_lost", "same_database", "url_of"]
