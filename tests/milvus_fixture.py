"""A real Milvus server for tests marked ``@pytest.mark.milvus``: ``milvus-lite server``.

The bench's helper (``causalrag_bench.milvusserver``, shared with the bench's Milvus rows)
starts it once per test session on 127.0.0.1 and a free port in a temporary data folder, and
stops it at the end: the tests talk to it as an app talks to a Milvus cluster (pymilvus over
gRPC, several clients and processes at once). Tests skip, saying why, only when the milvus
extra is not installed (``pip install -e ".[dev,milvus]"``).
"""

from __future__ import annotations

from typing import Iterator

import pytest

from causalrag_bench.milvusserver import MilvusUnavailable, require_milvus, server_uri, stop_server

__all__ = ["milvus_uri"]


@pytest.fixture(scope="session")
def milvus_uri() -> Iterator[str]:
    """The URI (``http://127.0.0.1:<port>``) of the session's Milvus server."""
    try:
        require_milvus("Milvus tests")
    except MilvusUnavailable as e:
        pytest.skip(str(e))
    try:
        yield server_uri("Milvus tests")
    finally:
        stop_server()
