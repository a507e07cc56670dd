"""The project's own PostgreSQL + pgvector server starts, answers and has the extension."""

import pytest

from pg_fixture import driver_url

pytestmark = pytest.mark.postgres


def test_server_is_postgres_16_with_pgvector(pg_url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(driver_url(pg_url, "psycopg2"))
    try:
        with engine.connect() as conn:
            version = conn.execute(sqlalchemy.text("SHOW server_version")).scalar()
            ext = conn.execute(sqlalchemy.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
            dist = conn.execute(sqlalchemy.text("SELECT '[1,0]'::vector <=> '[0,1]'::vector")).scalar()
    finally:
        engine.dispose()
    assert version.startswith("16.")
    assert ext is not None
    assert dist == pytest.approx(1.0)


def test_async_driver_reaches_the_socket(pg_url):
    import asyncio

    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    async def run() -> int:
        engine = create_async_engine(driver_url(pg_url, "asyncpg"))
        try:
            async with engine.connect() as conn:
                return (await conn.execute(text("SELECT 41 + 1"))).scalar()
        finally:
            await engine.dispose()

    assert asyncio.run(run()) == 42
