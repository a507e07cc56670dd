"""A Milvus server for the bench's Milvus rows and scripts, and the tests: ``milvus-lite server``.

``milvus-lite`` 3.x (``pip install -e ".[milvus]"``) runs a gRPC Milvus server, the protocol of
Milvus Standalone and Distributed, so a row talks to it as an app talks to a cluster: pymilvus
over the network. :func:`server_uri` starts one per process on 127.0.0.1 and a free port, in a
temporary data folder, once it answers; it is stopped and the folder deleted at exit
(``atexit``) or by :func:`stop_server`. :func:`start_server` starts another (a test that kills
and restarts its own). The tests' fixture (``tests/milvus_fixture.py``) uses the same server.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, List, Optional, Tuple

from causalrag_bench.registry import RowUnavailable

INSTALL_HINT = 'pip install -e ".[milvus]"'


class MilvusUnavailable(RowUnavailable):
    """The milvus extra is not installed."""


def require_milvus(what: str = "Milvus rows") -> None:
    """Raise :class:`MilvusUnavailable` naming the install command if pymilvus or milvus-lite is missing."""
    import importlib

    missing: List[str] = []
    for name in ("pymilvus", "milvus_lite"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise MilvusUnavailable(f"{what} need the milvus extra (missing: {', '.join(missing)}); install it with "
                                f"{INSTALL_HINT} in the repository root.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: str, port: Optional[int] = None, timeout: float = 60.0) -> Tuple[subprocess.Popen, str]:
    """``milvus-lite server`` on 127.0.0.1 and ``port`` (default: a free one), once it answers: ``(process, uri)``."""
    from pymilvus import MilvusClient

    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir", data_dir,
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"milvus-lite server exited ({proc.returncode}): "
                               f"{proc.stderr.read().decode(errors='replace')[-2000:]}")  # type: ignore[union-attr]
        try:
            MilvusClient(uri=uri, timeout=2).list_collections()
            return proc, uri
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_LOCK = threading.Lock()
_SERVER: Optional[Tuple[subprocess.Popen, str, str]] = None


def server_uri(what: str = "Milvus rows") -> str:
    """The URI of this process's server, started on first use."""
    global _SERVER
    require_milvus(what)
    with _LOCK:
        if _SERVER is None:
            data = tempfile.mkdtemp(prefix="causalrag-milvus-")
            proc, uri = start_server(data)
            _SERVER = (proc, uri, data)
            atexit.register(stop_server)
        return _SERVER[1]


def with_milvus(stores: Any, uri: str, collection: str) -> Any:
    """The bench's PostgreSQL ``stores`` with their vector store replaced by collection ``collection``
    of the Milvus server at ``uri`` (nodes and index state stay in PostgreSQL)."""
    from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits

    return dataclasses.replace(stores, vector_store=MilvusUnits(uri=uri, collection_name=collection))


def stop_server() -> None:
    global _SERVER
    with _LOCK:
        if _SERVER is not None:
            proc, _, data = _SERVER
            _SERVER = None
            stop(proc)
            shutil.rmtree(data, ignore_errors=True)


__all__ = ["MilvusUnavailable", "free_port", "require_milvus", "server_uri", "start_server", "stop", "stop_server",
           "with_milvus"]
