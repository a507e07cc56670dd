"""Shared fixtures: the PostgreSQL servers of ``pg_fixture`` (tests marked ``postgres``) and the Milvus
server of ``milvus_fixture`` (tests marked ``milvus``)."""

from milvus_fixture import milvus_uri  # noqa: F401
from pg_fixture import close_dropped_connections, pg_ext_url, pg_table, pg_url  # noqa: F401
