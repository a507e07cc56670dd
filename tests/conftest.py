"""Shared fixtures: the PostgreSQL server of ``pg_fixture`` (tests marked ``postgres``)."""

from pg_fixture import close_dropped_connections, pg_ext_url, pg_table, pg_url  # noqa: F401
