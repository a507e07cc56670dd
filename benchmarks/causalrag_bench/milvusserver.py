"""A Milvus server for the bench's Milvus rows and scripts, and the tests: Milvus's C++ engine.

``milvus-lite`` 2.5 (``pip install -e ".[milvus]"``) ships the C++ Milvus binary
(``milvus_lite/lib/milvus`` with ``libknowhere.so``: the ``BM25`` function, the sparse inverted
index, FLAT and HNSW, the index code Milvus's query nodes run). ``milvus DB_FILE
127.0.0.1:PORT ERROR`` serves gRPC on a TCP port, the protocol of Milvus Standalone and
Distributed, so a row talks to it as an app talks to a cluster: pymilvus over the network, several
clients and processes at once. :func:`server_uri` starts one per process on 127.0.0.1 and a free
port, in a temporary data folder, once it answers; it is stopped and the folder deleted at exit
(``atexit``) or by :func:`stop_server`. :func:`start_server` starts another (a test that kills
and restarts its own). The tests' fixture (``tests/milvus_fixture.py``) uses the same server.

``milvus-lite`` 3.x is a pure-Python rewrite (its BM25 loops over every posting, its search
scans every row) with no C++ binary: :func:`binary` refuses it, naming the install command.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Tuple

from causalrag_bench.registry import RowUnavailable

INSTALL_HINT = 'pip install -e ".[milvus]"'
ENGINE = "milvus-lite==2.5.1"  # the C++ engine's wheel (the milvus extra pins it)
DB_FILE = "milvus.db"


class MilvusUnavailable(RowUnavailable):
    """The milvus extra is not installed, or milvus-lite is not the C++ engine's."""


def require_milvus(what: str = "Milvus rows") -> None:
    """Raise :class:`MilvusUnavailable` naming the install command if pymilvus or the C++ server is missing."""
    import importlib.util

    # found, not imported: milvus_lite 2.5's __init__ imports pkg_resources, which setuptools >= 81 lacks
    missing = [name for name in ("pymilvus", "milvus_lite") if importlib.util.find_spec(name) is None]
    if missing:
        raise MilvusUnavailable(
            f"{what} need the milvus extra (missing: {', '.join(missing)}); install it with "
            f"{INSTALL_HINT} in the repository root."
        )
    binary(what)


def binary(what: str = "Milvus rows") -> Path:
    """The C++ Milvus server of the installed ``milvus_lite`` (``milvus_lite/lib/milvus``)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("milvus_lite")
    root = Path(spec.origin).parent if spec is not None and spec.origin else None
    path = root / "lib" / "milvus" if root is not None else None
    if path is None or not path.is_file():
        try:
            version = importlib.metadata.version("milvus-lite")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        raise MilvusUnavailable(
            f"{what} run Milvus's C++ server, which milvus-lite {version} at {root} does not ship (3.x is a "
            f'pure-Python server); install it with pip install "{ENGINE}" (or {INSTALL_HINT}).'
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: str, port: Optional[int] = None, timeout: float = 60.0) -> Tuple[subprocess.Popen, str]:
    """The C++ Milvus server on 127.0.0.1 and ``port`` (default: a free one), its data in
    ``data_dir/milvus.db``, once it answers: ``(process, uri)``. Its log: ``data_dir/milvus.log``."""
    from pymilvus import MilvusClient

    exe = binary()
    folder = Path(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    lib = str(exe.parent)
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH")) if p)}
    with open(folder / "milvus.log", "ab") as log:
        proc = subprocess.Popen(
            [str(exe), str(folder / DB_FILE), f"127.0.0.1:{port}", "ERROR"],
            cwd=str(folder),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = (folder / "milvus.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the Milvus server ({exe}) exited ({proc.returncode}): {tail}")
        try:
            MilvusClient(uri=uri, timeout=2).list_collections()
            return proc, uri
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    """Stop the server (SIGTERM, then SIGKILL after 20 s)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kill(proc: subprocess.Popen) -> None:
    """Kill the server at once (SIGKILL: no flush, no goodbye), as a crash would."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
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


__all__ = [
    "MilvusUnavailable",
    "binary",
    "free_port",
    "kill",
    "require_milvus",
    "server_uri",
    "start_server",
    "stop",
    "stop_server",
    "with_milvus",
]
