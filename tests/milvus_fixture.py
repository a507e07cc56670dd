"""A real Milvus server for tests marked ``@pytest.mark.milvus``: Milvus's C++ engine.

The bench's helper (``causalrag_bench.milvusserver``, shared with the bench's Milvus rows)
starts ``milvus_lite/lib/milvus DB_FILE 127.0.0.1:PORT ERROR`` (milvus-lite 2.5.1's C++ binary:
knowhere's BM25, sparse inverted index, FLAT and HNSW, as Milvus's query nodes run them) once per
test session on a free port in a temporary data folder, and stops it at the end: the tests talk
to it as an app talks to a Milvus cluster (pymilvus over gRPC, several clients and processes at
once). Tests skip, saying why, only when the milvus extra is not installed, or milvus-lite is the
pure-Python 3.x server (``pip install -e ".[dev,milvus]"`` installs the C++ one).
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
