"""The indexes, stores and writes of tests/test_store_faults.py, shared by the test process and the
writer subprocesses it kills (``python tests/_fault_worker.py '<json>'``).

A subprocess runs one write (``build``, ``insert``, ``refresh``) of one index (``"mg"``:
MultiGranularityIndex, ``"cg"``: CausalGraphIndex with the offline steps, ``"std"``:
StandardsIndex, which a reopened index cannot update, so its writer builds the index, then
updates that object: :func:`updatable`) on PostgreSQL, stopping
at ``pause`` (touching the file ``marker``, then sleeping) so the test can kill it or the server
at a known point (it goes on when the file ``marker + ".resume"`` appears), then prints ``{"ok": ..., "error_type": ..., "error": ...}`` as its last line.
Pauses: ``"rows"`` (every row of the write is in the vector store and docstore, the kvstore head
is the old one; where rows and head commit in one transaction, as on one PostgreSQL database:
the rows are written inside it, not committed), ``"commit"`` (the new state's values are written, the head not yet), ``"done"``
(the head names the new state, the clean-up has not run). Two writers started together pass
``ready`` and ``go`` files: each opens (an update) or embeds and checks the stores (a build:
the write lock not yet taken), touches ``ready``, then waits for ``go`` before it takes the write lock.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
DIM = 32


def stores(url: str, table: str) -> Any:
    from causalrag_bench.pgserver import pg_stores

    return pg_stores(url, table, DIM, kv_table=f"{table}_kv")


# text only the refreshed document's rows hold (tests make PostgreSQL refuse rows holding it)
REFRESHED_TEXT = {"mg": "finds", "cg": "Long drought", "std": "acknowledge received packets"}


def docs(kind: str, step: str) -> List[Any]:
    """``"initial"``, ``"refresh"`` (one changed document), ``"insert"`` / ``"insert2"`` (new
    ones); for ``"std"`` also ``"initial2"`` (another corpus, for a second build)."""
    if kind == "std":
        from llama_index.core import Document

        from test_standards_store import docs as standards

        transport, recovery, etsi = standards()
        refreshed = Document(
            text=transport.text.replace("acknowledge packets", "acknowledge received packets"), id_=transport.doc_id
        )
        return {
            "initial": [transport, etsi],
            "initial2": [transport, recovery],
            "refresh": [refreshed],
            "insert": [recovery],
        }[step]
    if kind == "mg":
        from test_multigranularity_store import make_docs
        from test_store_updates import changed

        d = make_docs(6)
        return {"initial": d[:3], "refresh": [changed(d[1])], "insert": [d[3]], "insert2": [d[4]]}[step]
    from test_causal_graph_store import changed, make_docs

    d = make_docs()
    return {"initial": d[:3], "refresh": [changed(d[0])], "insert": [d[3]], "insert2": [d[4]]}[step]


def build(kind: str, st: Any, step: str = "initial") -> Any:
    from store_helpers import RandomEmbedding

    if kind == "std":
        from llama_index_ext_causalrag import StandardsIndex
        from test_standards_store import parser

        return StandardsIndex.from_documents(
            docs(kind, step),
            parser=parser(),
            embed_model=RandomEmbedding(dim=DIM),
            storage_context=st.storage_context(),
            kvstore=st.kvstore,
        )
    if kind == "mg":
        from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

        return MultiGranularityIndex.from_documents(
            docs(kind, step),
            granularities=(2, 4, 8),
            kvstore=st.kvstore,
            storage_context=st.storage_context(),
            embed_model=RandomEmbedding(dim=DIM),
        )
    from llama_index_ext_causalrag import CausalGraphIndex
    from llama_index_ext_causalrag.causal_graph import ExtractiveSummarizer, OfflineEntityExtractor, OfflineGateJudge

    return CausalGraphIndex.from_documents(
        docs(kind, step),
        storage_context=st.storage_context(),
        kvstore=st.kvstore,
        embed_model=RandomEmbedding(dim=DIM),
        extractor=OfflineEntityExtractor(),
        summarizer=ExtractiveSummarizer(),
        gate_judge=OfflineGateJudge(),
        show_progress=False,
        chunk_size=24,
        max_cluster_size=3,
        min_entity_units=1,
    )


def reopen(kind: str, st: Any) -> Any:
    from store_helpers import RandomEmbedding

    if kind == "std":
        from llama_index_ext_causalrag import StandardsIndex as cls
    elif kind == "mg":
        from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex as cls
    else:
        from llama_index_ext_causalrag import CausalGraphIndex as cls
    return cls.from_vector_store(st.vector_store, st.docstore, kvstore=st.kvstore, embed_model=RandomEmbedding(dim=DIM))


def updatable(kind: str, st: Any) -> Any:
    """An index of the stores ``st`` that can be updated: reopened from them, except a
    StandardsIndex (a reopened one keeps no parsed documents and refuses updates), which is
    built into them here."""
    return build(kind, st) if kind == "std" else reopen(kind, st)


def write(kind: str, index: Any, step: str) -> None:
    if step == "refresh":
        index.refresh_ref_docs(docs(kind, step))
    elif step == "delete":  # the document a refresh changes
        index.delete_ref_doc(docs(kind, "refresh")[0].doc_id)
    else:
        index.insert(docs(kind, step)[0])


def answers(kind: str, index: Any) -> List[List[str]]:
    if kind == "std":
        from test_standards_store import QUERIES
    elif kind == "mg":
        from test_multigranularity_store import QUERIES
    else:
        from test_causal_graph_store import QUERIES
    retriever = index.as_retriever(similarity_top_k=8)
    return [[n.node.node_id for n in retriever.retrieve(q)] for q in QUERIES[:6]]


def snapshot(url: str, table: str) -> Dict[str, Any]:
    """Every vector row (row id, text, metadata, embedding as stored), every docstore node, and
    the kvstore's values of the index (keys and contents), read with SQL."""
    import sqlalchemy

    from causalrag_bench.pgserver import driver_url

    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"))
    try:
        with engine.connect() as conn:

            def rows(sql: str) -> List[tuple]:
                return sorted(tuple(str(v) for v in r) for r in conn.execute(sqlalchemy.text(sql)))

            return {
                "vectors": rows(f"SELECT node_id, text, metadata_::text, embedding::text FROM data_{table}"),
                "docstore": rows(f"SELECT namespace, key, value::text FROM data_{table}_docs"),
                "kv": rows(f"SELECT key, value::text FROM data_{table}_kv"),
            }
    finally:
        engine.dispose()


def _pause_at(point: str, marker: Path) -> None:
    """Stop the write at ``point``: touch ``marker``, then sleep (the test kills us or the server)."""

    def stop() -> None:
        marker.write_text("paused")
        resume, deadline = Path(f"{marker}.resume"), time.monotonic() + 60
        while not resume.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    if point == "rows":
        from llama_index_ext_causalrag.storage import sync

        def after(real: Any) -> Any:
            def written(*a: Any, **k: Any) -> Any:
                out = real(*a, **k)
                stop()
                return out

            return written

        from llama_index_ext_causalrag.storage import stores
        from llama_index_ext_causalrag.storage.pg import atomic

        # the rows of a build (beside its docstore's write), or of an update store by store; an update's one
        # transaction on one database
        sync.add_nodes_to_vector_store = after(sync.add_nodes_to_vector_store)
        stores.add_nodes_to_vector_store = after(stores.add_nodes_to_vector_store)
        atomic.write_rows_on = after(atomic.write_rows_on)
    elif point == "commit":
        from llama_index_ext_causalrag.storage import writelock

        real_check = writelock.WriteLock.check_held

        def check_held(self: Any) -> None:
            stop()
            real_check(self)

        writelock.WriteLock.check_held = check_held
    elif point == "done":
        from llama_index_ext_causalrag.storage import journal

        real_finish = journal.finish

        def finish(*a: Any, **k: Any) -> None:
            stop()
            real_finish(*a, **k)

        journal.finish = finish


def _wait_for_go(ready: Path, go: Path) -> None:
    ready.write_text("ready")
    while not go.exists():
        time.sleep(0.02)


def _wait_before_lock(ready: Path, go: Path) -> None:
    """Stop a build once it has embedded and checked the stores, before it takes the write lock."""
    from llama_index_ext_causalrag.storage import sync

    real_journaled = sync._journaled

    def journaled(*a: Any, **k: Any) -> None:
        _wait_for_go(ready, go)
        real_journaled(*a, **k)

    sync._journaled = journaled


def main(args: Dict[str, Any]) -> None:
    st = stores(args["url"], args["table"])
    result: Dict[str, Any] = {"ok": False}
    try:
        if args["op"] == "build":
            if args.get("ready"):  # two builders: both embed and check, then both write
                _wait_before_lock(Path(args["ready"]), Path(args["go"]))
            else:
                _pause_at(args["pause"], Path(args["marker"]))
            build(args["kind"], st, args.get("docs", "initial"))
        else:
            index = updatable(args["kind"], st)
            if args.get("ready"):  # two writers: both open, then both write
                _wait_for_go(Path(args["ready"]), Path(args["go"]))
            if args.get("pause"):
                _pause_at(args["pause"], Path(args["marker"]))
            write(args["kind"], index, args["op"])
        result["ok"] = True
    except Exception as e:
        result.update(error_type=type(e).__name__, mro=[c.__name__ for c in type(e).__mro__], error=str(e))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))  # the package and the bench come from PYTHONPATH, as in the test process
    main(json.loads(sys.argv[1]))
