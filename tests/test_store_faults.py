"""Store writes under faults, on a real PostgreSQL this module starts, kills and restarts itself:
a build, insert or refresh cut short by a dropped connection, a killed server or a killed writer
leaves the index answering as before the write (or as after it), its rows as in one of the two
states, reopenable, and an interrupted build rerunnable; two writer processes never lose a write
reported successful; a row the database refuses is a ``StoreWriteError`` that leaves the index
as before.

A reopened StandardsIndex ("std") cannot be updated (it keeps no parsed documents), so its
updates run on the index ``from_documents`` built: the writer process builds it, then writes
(``_fault_worker.updatable``), and two processes can only race to build it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import _fault_worker as fw

pytestmark = pytest.mark.postgres
TESTS = Path(__file__).resolve().parent
KINDS = ["mg", "cg", "std"]
STORES = ("PGVectorStore", "PostgresDocumentStore", "PostgresKVStore")


class Server:
    """A PostgreSQL of this module's own (``causalrag_bench.pgserver.start_server``), killed with
    SIGKILL (postmaster and backends) and restarted on the same data folder."""

    def __init__(self, root: Path) -> None:
        from causalrag_bench.pgserver import start_server

        self.root, self.pg = root, start_server(root)
        self._fsync_off()

    def _fsync_off(self) -> None:
        """``fsync = off``: the tests kill processes, not the machine, so what a killed server wrote
        is in the OS page cache and its crash recovery replays the same WAL; a restart no longer
        syncs the whole data folder first (over 10 s on a loaded machine, pg_ctl's wait)."""
        import sqlalchemy

        engine, conn = self.admin()
        try:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sqlalchemy.text("ALTER SYSTEM SET fsync = off"))
            conn.execute(sqlalchemy.text("SELECT pg_reload_conf()"))
        finally:
            conn.close()
            engine.dispose()

    @property
    def url(self) -> str:
        return self.pg.get_uri()

    def kill(self) -> None:
        """SIGKILL the postmaster and every process of this server (its backends have the data
        folder as their working directory; the session's other server is left alone)."""
        import psutil

        data = str((self.root / "data").resolve())

        def ours():
            out = []
            for p in psutil.process_iter(["name"]):
                try:
                    if p.info["name"] == "postgres" and p.cwd() == data:
                        out.append(p)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            return out

        deadline = time.monotonic() + 30
        while procs := ours():
            for p in procs:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=5)
            assert time.monotonic() < deadline, "the server's processes outlived SIGKILL"

    def restart(self) -> None:
        # get_server(path) hands back this handle; start its postmaster again on the same data. Its
        # crash recovery can outlast pg_ctl's 10 s wait on a loaded machine: asked again until ready
        deadline = time.monotonic() + 180
        while True:
            try:
                with self.pg._lock:
                    self.pg.ensure_postgres_running()
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    log = self.root / "data" / "log"
                    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                    raise AssertionError(f"restart failed: {e}\n{tail}") from e
                time.sleep(0.5)

    def admin(self):
        """A connection of the test's own (SQLAlchemy engine, connection), outside the writer's pools."""
        import sqlalchemy

        from causalrag_bench.pgserver import driver_url

        engine = sqlalchemy.create_engine(driver_url(self.url, "psycopg2"))
        return engine, engine.connect()

    @staticmethod
    def terminate_backends(conn) -> int:
        """Drop every client connection but ``conn`` (``pg_terminate_backend``)."""
        import sqlalchemy

        return len(
            conn.execute(
                sqlalchemy.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend' AND datname = current_database()"
                )
            ).fetchall()
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from causalrag_bench.pgserver import PostgresUnavailable, require_postgres

    try:
        require_postgres("store fault tests")
        srv = Server(tmp_path_factory.mktemp("pg-faults"))
    except PostgresUnavailable as e:
        pytest.skip(str(e).splitlines()[0])
    try:
        yield srv
    finally:
        srv.pg.cleanup()


@pytest.fixture(autouse=True)
def _running(server):
    """A test that failed between a kill and its restart leaves the next one a running server; a
    finished test's pooled connections are closed, so the module's tests never reach the server's
    max_connections (each store object pools its own, and a served index uses two at once)."""
    if not server.pg.get_postmaster_info().is_running():
        server.restart()
    yield
    import gc

    gc.collect()
    if server.pg.get_postmaster_info().is_running():
        engine, conn = server.admin()
        try:
            server.terminate_backends(conn)
        finally:
            conn.close()
            engine.dispose()


def table() -> str:
    return f"f_{uuid.uuid4().hex[:10]}"


def worker(server: Server, tmp_path: Path, **args) -> subprocess.Popen:
    path = [
        str(TESTS),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
        str(TESTS.parent),
        str(TESTS.parent / "benchmarks"),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, str(TESTS / "_fault_worker.py"), json.dumps({"url": server.url, **args})],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(
                f"the writer exited before its pause: {proc.stdout.read()}\n{proc.stderr.read()[-3000:]}"
            )
        assert time.monotonic() < deadline, "the writer never reached its pause"
        time.sleep(0.05)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=180)
    lines = out.strip().splitlines()
    assert lines, err[-3000:]
    return json.loads(lines[-1])


def assert_database_error_named(res: dict, op: str) -> None:
    """A failed write names the store and the operation, as a ConnectionError (no bare DatabaseError)."""
    assert not res["ok"]
    assert "ConnectionError" in res["mro"], res
    assert op in res["error"] and any(f"{store} at postgresql" in res["error"] for store in STORES), res


def index_state(server: Server, kind: str, name: str) -> tuple:
    """(answers of the reopened index, its units, every row of its stores)."""
    index = fw.reopen(kind, fw.stores(server.url, name))
    return fw.answers(kind, index), sorted(u.node_id for u in index.units), fw.snapshot(server.url, name)


def reference_states(server: Server, kind: str, op: str) -> tuple:
    """The index's state before ``op`` and after it, on a table written without faults; the
    write's tables differ from it only by name, so rows are compared with the table name left out."""
    name = table()
    index = fw.build(kind, fw.stores(server.url, name))
    before = index_state(server, kind, name)
    fw.write(kind, index if kind == "std" else fw.reopen(kind, fw.stores(server.url, name)), op)
    return before, index_state(server, kind, name)


def built_for_update(server: Server, kind: str, name: str):
    """Build the index into ``name``; the object that updates it: the built StandardsIndex, else
    the index reopened from the stores."""
    index = fw.build(kind, fw.stores(server.url, name))
    return index if kind == "std" else fw.reopen(kind, fw.stores(server.url, name))


def build_for_worker(server: Server, kind: str, name: str) -> None:
    """Build the index a writer process updates (a StandardsIndex's writer builds it itself)."""
    if kind != "std":
        fw.build(kind, fw.stores(server.url, name))


def without_generations(state: tuple) -> tuple:
    """Rows compared without the kvstore's generation names (random per write)."""
    answers, units, snap = state
    return answers, units, snap["vectors"], snap["docstore"], len(snap["kv"])


# ---- a dropped connection ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_dropped_mid_refresh_leaves_the_index_as_before_and_a_retry_works(
    kind, server, monkeypatch, caplog
):
    import psycopg2

    from llama_index_ext_causalrag.storage import sync
    from llama_index_ext_causalrag.storage.pg import atomic

    before, after = reference_states(server, kind, "refresh")
    name = table()
    index = built_for_update(server, kind, name)
    engine, admin = server.admin()

    def refused(*a, **k):
        raise psycopg2.OperationalError("connection refused (the test's outage)")

    def then_drop(real):
        def written(*a, **k):  # the refreshed rows are written in place; then every connection drops
            out = real(*a, **k)
            assert server.terminate_backends(admin) > 0
            monkeypatch.setattr(psycopg2, "connect", refused)  # and none reconnects until the write returns
            return out

        return written

    # store by store, or one transaction where the docstore and kvstore are in the vector store's database
    monkeypatch.setattr(sync, "add_nodes_to_vector_store", then_drop(sync.add_nodes_to_vector_store))
    monkeypatch.setattr(atomic, "write_rows_on", then_drop(atomic.write_rows_on))
    with pytest.raises(ConnectionError) as err:
        fw.write(kind, index, "refresh")
    assert "refresh" in str(err.value) and "PostgresKVStore at" in str(err.value)
    monkeypatch.undo()
    admin.close()
    engine.dispose()
    with caplog.at_level(logging.WARNING):
        assert without_generations(index_state(server, kind, name)) == without_generations(before)
    assert "swept an interrupted refresh" in caplog.text and "undone" in caplog.text
    assert fw.answers(kind, index) == before[0]  # the object that failed answers as before
    fw.write(kind, index, "refresh")  # the retry, by that object (a reopened StandardsIndex cannot update)
    assert without_generations(index_state(server, kind, name)) == without_generations(after)


# ---- one commit point: no reader answers from an update that did not commit ----------------------------
def _drop_connections_after(server: Server, monkeypatch, module, name: str) -> None:
    """After ``module.name`` returns, every client connection drops and none reconnects until
    the test undoes the patches (the write in progress fails)."""
    import psycopg2

    engine, admin = server.admin()
    real = getattr(module, name)

    def refused(*a, **k):
        raise psycopg2.OperationalError("connection refused (the test's outage)")

    def then_drop(*a, **k):
        out = real(*a, **k)
        assert server.terminate_backends(admin) > 0
        monkeypatch.setattr(psycopg2, "connect", refused)
        return out

    monkeypatch.setattr(module, name, then_drop)


@pytest.mark.parametrize("op", ["insert", "refresh", "delete"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("step", ["rows", "state"])
def test_no_reader_answers_from_an_update_whose_commit_did_not_happen(step, kind, op, server, monkeypatch):
    """The connection drops after the update's rows (inside its transaction) or after its new
    state's values (before the head): the index object that wrote and a reader opened before the
    write answer as before, before anything recovers the write; the retry's result is what both
    answer afterwards."""
    from llama_index_ext_causalrag.storage import kvstate
    from llama_index_ext_causalrag.storage.pg import atomic

    before, after = reference_states(server, kind, op)
    name = table()
    index = built_for_update(server, kind, name)
    reader = fw.reopen(kind, fw.stores(server.url, name))
    assert fw.answers(kind, reader) == before[0]
    if step == "rows":
        _drop_connections_after(server, monkeypatch, atomic, "write_rows_on")
    else:  # the new generation's values are in the kvstore, the head is not: the commit fails
        _drop_connections_after(server, monkeypatch, kvstate, "_chunks")
    with pytest.raises(ConnectionError):
        fw.write(kind, index, op)
    monkeypatch.undo()
    assert fw.answers(kind, index) == before[0]  # the object whose write failed
    assert fw.answers(kind, reader) == before[0]  # another reader, nothing recovered yet
    fw.write(kind, index, op)  # the retry commits
    assert fw.answers(kind, index) == after[0]
    follows = kind != "std"  # a StandardsIndex holds its units: a reader sees a write when it reopens
    assert fw.answers(kind, reader if follows else fw.reopen(kind, fw.stores(server.url, name))) == after[0]


# ---- the server killed, then restarted ---------------------------------------------------------------
@pytest.mark.parametrize(
    "kind,pause,want",
    [
        ("mg", "rows", "before"),
        ("cg", "rows", "before"),
        ("cg", "commit", "before"),
        ("mg", "done", "after"),
        ("std", "rows", "before"),
        ("std", "done", "after"),
    ],
)
def test_a_server_killed_mid_refresh_then_restarted_leaves_the_index_as_before_or_after(
    kind, pause, want, server, tmp_path
):
    before, after = reference_states(server, kind, "refresh")
    name = table()
    build_for_worker(server, kind, name)
    reader = fw.reopen(kind, fw.stores(server.url, name)) if kind != "std" else None  # a reader open meanwhile
    marker = tmp_path / "paused"
    proc = worker(server, tmp_path, kind=kind, table=name, op="refresh", pause=pause, marker=str(marker))
    wait_for(marker, proc)
    server.kill()
    Path(f"{marker}.resume").write_text("go")
    res = result(proc)
    server.restart()
    if pause != "done":  # after the commit the write is reported done; its clean-up is left for the next open
        assert_database_error_named(res, "refresh")
    if reader is not None:  # before anything recovered the write: the committed state only
        assert fw.answers(kind, reader) == (before if want == "before" else after)[0]
    state = index_state(server, kind, name)
    assert without_generations(state) == without_generations(before if want == "before" else after)


@pytest.mark.parametrize("kind", KINDS)
def test_a_server_killed_mid_build_leaves_a_store_the_rerun_builds_into(kind, server, tmp_path):
    name = table()
    marker = tmp_path / "paused"
    proc = worker(server, tmp_path, kind=kind, table=name, op="build", pause="rows", marker=str(marker))
    wait_for(marker, proc)
    server.kill()
    Path(f"{marker}.resume").write_text("go")
    res = result(proc)
    server.restart()
    assert_database_error_named(res, "build")
    with pytest.raises(FileNotFoundError, match="holds no index"):  # nothing half-built is opened
        fw.reopen(kind, fw.stores(server.url, name))
    fw.build(kind, fw.stores(server.url, name))  # the rerun
    reference = table()
    fw.build(kind, fw.stores(server.url, reference))
    assert without_generations(index_state(server, kind, name)) == without_generations(
        index_state(server, kind, reference)
    )


# ---- the writer process killed -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind,pause,want",
    [("mg", "rows", "before"), ("cg", "commit", "before"), ("cg", "done", "after"), ("std", "commit", "before")],
)
def test_a_writer_killed_mid_insert_is_swept_on_the_next_open(kind, pause, want, server, tmp_path, caplog):
    before, after = reference_states(server, kind, "insert")
    name = table()
    build_for_worker(server, kind, name)
    marker = tmp_path / "paused"
    proc = worker(server, tmp_path, kind=kind, table=name, op="insert", pause=pause, marker=str(marker))
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    with caplog.at_level(logging.WARNING):
        state = index_state(server, kind, name)
    assert without_generations(state) == without_generations(before if want == "before" else after)
    assert "swept an interrupted insert" in caplog.text
    assert ("finished" if want == "after" else "undone") in caplog.text


# ---- two writer processes ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mg", "cg"])
def test_two_processes_inserting_into_one_index_lose_no_reported_write(kind, server, tmp_path):
    name = table()
    fw.build(kind, fw.stores(server.url, name))
    go = tmp_path / "go"
    procs = [
        worker(server, tmp_path, kind=kind, table=name, op=op, ready=str(tmp_path / f"ready{i}"), go=str(go))
        for i, op in enumerate(["insert", "insert2"])
    ]
    for i, p in enumerate(procs):
        wait_for(tmp_path / f"ready{i}", p)
    go.write_text("go")
    results = {op: result(p) for op, p in zip(["insert", "insert2"], procs)}
    ok = {op for op, r in results.items() if r["ok"]}
    assert len(ok) == 1, results  # both opened the same state: the second is refused, not merged or lost
    refused = ({"insert", "insert2"} - ok).pop()
    r = results[refused]
    assert r["error_type"] == "ConcurrentWriteError" and "another process changed the index" in r["error"], r
    assert "nothing was written" in r["error"] and "from_vector_store" in r["error"]
    docs_of = {op: fw.docs(kind, op)[0].doc_id for op in ("insert", "insert2")}
    st = fw.stores(server.url, name)
    index = fw.reopen(kind, st)
    held = {u.ref_doc_id for u in index.units}
    assert docs_of[ok.pop()] in held and docs_of[refused] not in held
    snap, doc = fw.snapshot(server.url, name), docs_of[refused]
    leaked = [r for r in snap["docstore"] if r[1] == doc or r[1].startswith(f"{doc}::")]
    leaked += [r for r in snap["vectors"] if f"{doc}::" in r[2]]
    assert not leaked and not any(r[0] == "pending" for r in snap["kv"])
    fw.write(kind, index, refused)  # the retry the message asks for
    assert {docs_of["insert"], docs_of["insert2"]} <= {
        u.ref_doc_id for u in fw.reopen(kind, fw.stores(server.url, name)).units
    }


def test_a_stale_index_object_is_refused_in_one_process_too(server):
    name = table()
    fw.build("mg", fw.stores(server.url, name))
    a, b = (fw.reopen("mg", fw.stores(server.url, name)) for _ in range(2))
    fw.write("mg", a, "insert")
    from llama_index_ext_causalrag.storage.writelock import ConcurrentWriteError

    before = fw.snapshot(server.url, name)
    with pytest.raises(ConcurrentWriteError, match="another process changed the index .* nothing was written"):
        fw.write("mg", b, "insert2")
    assert fw.snapshot(server.url, name) == before


def test_two_processes_building_one_standards_index_are_serialised_and_the_second_is_refused(server, tmp_path):
    """A StandardsIndex is updated only by the object that built it, so its concurrent writers are
    two builds into one namespace: both embed and check the empty stores, then race for the lock."""
    name, go = table(), tmp_path / "go"
    corpora, procs = ["initial", "initial2"], []
    for i, corpus in enumerate(corpora):  # one after the other up to the lock: the tables are created once
        procs.append(
            worker(
                server,
                tmp_path,
                kind="std",
                table=name,
                op="build",
                docs=corpus,
                ready=str(tmp_path / f"ready{i}"),
                go=str(go),
            )
        )
        wait_for(tmp_path / f"ready{i}", procs[-1])
    go.write_text("go")
    results = {corpus: result(p) for corpus, p in zip(corpora, procs)}
    ok = [corpus for corpus, r in results.items() if r["ok"]]
    assert len(ok) == 1, results  # serialised: the second sees the first's index, not empty stores
    r = results[({"initial", "initial2"} - set(ok)).pop()]
    assert r["error_type"] == "ValueError" and "already holds a StandardsIndex@store" in r["error"], r
    reference = table()
    fw.build("std", fw.stores(server.url, reference), ok[0])
    state = index_state(server, "std", name)  # the winner's index alone: no row of the refused build
    assert without_generations(state) == without_generations(index_state(server, "std", reference))
    assert not any(row[0] == "pending" for row in state[2]["kv"])


# ---- a row the database refuses ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_a_row_the_database_refuses_mid_refresh_is_a_store_write_error_and_leaves_the_index_as_before(kind, server):
    """A CHECK constraint (``NOT VALID``: the rows already there stay) refuses the refreshed
    document's vector rows, after its docstore entries and the old rows' deletion are written."""
    import psycopg2
    import sqlalchemy

    from llama_index_ext_causalrag.storage.sync import StoreWriteError

    name = table()
    index = built_for_update(server, kind, name)
    before = index_state(server, kind, name)
    text = fw.REFRESHED_TEXT[kind]
    assert not any(text in row[1] for row in before[2]["vectors"])
    engine, admin = server.admin()

    def ddl(sql: str) -> None:
        admin.execute(sqlalchemy.text(sql))
        admin.commit()

    try:
        ddl(f"ALTER TABLE data_{name} ADD CONSTRAINT refused_row CHECK (strpos(text, '{text}') = 0) NOT VALID")
        with pytest.raises(StoreWriteError) as err:
            fw.write(kind, index, "refresh")
        msg = str(err.value)
        assert not isinstance(err.value, ConnectionError)
        assert "the database refused the refresh" in msg and "refused_row" in msg, msg
        assert "vector store PGVectorStore at postgresql" in msg and repr(name) in msg, msg
        chain, e = [], err.value.__cause__
        while e is not None:
            chain.append(e)
            e = e.__cause__ or e.__context__
        assert any(isinstance(e, psycopg2.errors.CheckViolation) for e in chain), chain
        assert fw.snapshot(server.url, name) == before[2]  # every row and kvstore value, before any open sweeps
        assert fw.answers(kind, index) == before[0]  # the object that failed answers as before
        assert index_state(server, kind, name) == before
        ddl(f"ALTER TABLE data_{name} DROP CONSTRAINT refused_row")
    finally:
        admin.close()
        engine.dispose()
    fw.write(kind, index, "refresh")  # and the same object writes once the database accepts the rows
    assert any(text in row[1] for row in fw.snapshot(server.url, name)["vectors"])


# ---- a server restarted between two queries ------------------------------------------------------
def test_a_server_killed_and_restarted_between_two_queries_of_one_index_object(server):
    """psycopg2 raises DatabaseError for a server that died mid-statement; the index's next query
    drops the dead pooled connections and answers on new ones (served layout: every list, the
    nodes and the parents come from the database)."""
    name = table()
    fw.build("mg", fw.stores(server.url, name))
    index = fw.reopen("mg", fw.stores(server.url, name))
    assert index._backend.layout == "served"
    retriever = index.as_retriever(similarity_top_k=5, budget_tokens=128)
    before = [n.node.node_id for n in retriever.retrieve("photosynthesis chlorophyll light")]
    assert before
    server.kill()
    server.restart()
    after = [n.node.node_id for n in retriever.retrieve("photosynthesis chlorophyll light")]
    assert after == before
    server.kill()  # a query while the server is down: a ConnectionError naming the store, not a raw driver error
    with pytest.raises(ConnectionError, match="PGVectorStore at postgresql|PostgresDocumentStore at postgresql"):
        retriever.retrieve("photosynthesis chlorophyll light")
    server.restart()
    assert [n.node.node_id for n in retriever.retrieve("photosynthesis chlorophyll light")] == before
