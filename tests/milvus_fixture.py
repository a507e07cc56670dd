"""A real Milvus server for tests marked ``@pytest.mark.milvus``: ``milvus-lite server``.

``milvus-lite`` 3.x (``pip install -e ".[dev,milvus]"``) runs a gRPC Milvus server, the protocol
of Milvus Standalone and Distributed, so the tests talk to it as an app talks to a cluster:
pymilvus over the network, several clients and processes at once. The session starts one on
127.0.0.1 and a free port in a temporary data folder, and stops it at the end. Tests skip, saying
why, only when the extra is not installed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest

__all__ = ["milvus_uri", "start_milvus"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_milvus(data_dir: str, timeout: float = 60.0) -> "tuple[subprocess.Popen, str]":
    """``milvus-lite server`` on 127.0.0.1 and a free port, once it answers: ``(process, uri)``."""
    from pymilvus import MilvusClient

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir", data_dir,
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"milvus-lite server exited ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
        try:
            MilvusClient(uri=uri, timeout=2).list_collections()
            return proc, uri
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.3)


@pytest.fixture(scope="session")
def milvus_uri() -> Iterator[str]:
    """The URI (``http://127.0.0.1:<port>``) of the session's Milvus server."""
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as e:
        pytest.skip(f"Milvus tests need the milvus extra ({e}): pip install -e \".[dev,milvus]\"")
    data = tempfile.mkdtemp(prefix="causalrag-milvus-")
    proc, uri = start_milvus(data)
    try:
        yield uri
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)
