"""Where a store-backed MultiGranularityIndex query spends its time in PostgreSQL, per layout.

Builds HolisQA (``--domains``, default biology + business) into PostgreSQL once
(``PGVectorStore`` exact search, ``PostgresDocumentStore``, ``PostgresKVStore``), reopens it from
the stores and times the bench's questions through ``as_retriever()`` twice: on the
per-granularity tables (the layout a build writes now) and on filtered queries of the vector
store's table (the layout before them: the tables dropped, the index reopened). The in-memory
index answers the same questions for reference. Per query it reports p50 and p95 (and the p50 of
``aretrieve``, the same questions again on an event loop), round trips
and database time by kind (dense lists, docstore reads, other; SQLAlchemy's cursor events), and
the rest (client side: decoding rows into nodes, fusion, promotion). ``EXPLAIN ANALYZE`` gives
each granularity's list alone, both layouts, over the first ``--explain`` questions.

    python benchmarks/scripts/bench_pg_query_profile.py --holisqa $DATA/holisqa --out benchmarks/results/pg_query_profile
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

SCRIPT = "python benchmarks/scripts/bench_pg_query_profile.py"
TABLE_LISTS = "lists (per-granularity tables)"  # the kind of statement the per-granularity tables send


class StatementClock:
    """Round trips and seconds of every SQL statement, by kind, while attached."""

    def __init__(self) -> None:
        import sqlalchemy
        from sqlalchemy import event

        self.calls: Dict[str, List[float]] = defaultdict(list)
        self.waits: List[float] = []  # seconds a query blocked on its lists after scoring BM25
        self._starts: List[float] = []
        event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", self._before)
        event.listen(sqlalchemy.engine.Engine, "after_cursor_execute", self._after)
        self.raw = _RawCursorClock(self)

    def _before(self, *args: Any) -> None:
        self._starts.append(time.perf_counter())

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.calls[kind_of(statement)].append(time.perf_counter() - self._starts.pop())

    def reset(self) -> None:
        self.calls.clear()
        self.waits.clear()


class _RawCursorClock:
    """The per-granularity tables run SQL on the DBAPI cursor (no SQLAlchemy events): timed here.
    Their statements run at once on pooled connections while the client scores BM25, so the
    clock also keeps what a query waited for them (``waits``): the lists' share of its wall time."""

    def __init__(self, clock: StatementClock) -> None:
        from llama_index_ext_causalrag.storage.pg import lists as pg_lists

        original = pg_lists.GranularityTables._fetch

        def timed(tables: Any, sql: str, params: Any) -> Any:
            t = time.perf_counter()
            try:
                return original(tables, sql, params)
            finally:
                clock.calls[kind_of(sql)].append(time.perf_counter() - t)

        pg_lists.GranularityTables._fetch = timed  # type: ignore[method-assign]
        original_start = pg_lists.GranularityTables.start

        def timed_start(tables: Any, *args: Any, **kwargs: Any) -> Any:
            result = original_start(tables, *args, **kwargs)

            def waited() -> Any:
                t = time.perf_counter()
                try:
                    return result()
                finally:
                    clock.waits.append(time.perf_counter() - t)

            return waited

        pg_lists.GranularityTables.start = timed_start  # type: ignore[method-assign]


def kind_of(statement: str) -> str:
    s = " ".join(statement.split())
    if "UNION ALL" in s or re.search(r"__g\d+", s):
        return TABLE_LISTS
    if "cosine_distance" in s or "<=>" in s:
        return "lists (filtered table)"
    if "_docs" in s:
        return "docstore"
    return "other"


def explain_ms(engine: Any, sql: str) -> float:
    import sqlalchemy

    with engine.begin() as c:
        rows = c.execute(sqlalchemy.text("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)).scalar()
    return float(rows[0]["Execution Time"])


def time_aretrieve(retriever: Any, questions: Sequence[str]) -> float:
    """p50 ms of ``aretrieve`` over ``questions``, one at a time on one event loop."""
    import asyncio

    async def run() -> List[float]:
        for q in questions[:3]:
            await retriever.aretrieve(q)
        lat = []
        for q in questions:
            t = time.perf_counter()
            await retriever.aretrieve(q)
            lat.append(1000.0 * (time.perf_counter() - t))
        return lat

    return statistics.median(asyncio.run(run()))


def time_queries(
    retriever: Any, questions: Sequence[str], clock: Optional[StatementClock], aretrieve: bool = True
) -> Dict[str, Any]:
    for q in questions[:3]:
        retriever.retrieve(q)
    if clock is not None:
        clock.reset()
    lat = []
    for q in questions:
        t = time.perf_counter()
        retriever.retrieve(q)
        lat.append(1000.0 * (time.perf_counter() - t))
    out: Dict[str, Any] = {
        "p50_ms": statistics.median(lat),
        "p95_ms": sorted(lat)[int(0.95 * (len(lat) - 1))],
        "mean_ms": statistics.fmean(lat),
        "questions": len(lat),
    }
    if clock is not None:
        n = len(questions)
        out["sql"] = {k: {"round_trips": len(v) / n, "ms": 1000.0 * sum(v) / n} for k, v in sorted(clock.calls.items())}
        # statements sent at once overlap each other and BM25: the wall time they cost is the wait
        wall = {k: v["ms"] for k, v in out["sql"].items()}
        if clock.waits:
            out["lists_wait_ms"] = 1000.0 * sum(clock.waits) / n
            wall[TABLE_LISTS] = out["lists_wait_ms"]
        out["client_ms"] = out["mean_ms"] - sum(wall.values())
    if aretrieve:
        out["aretrieve_p50_ms"] = time_aretrieve(retriever, questions)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--holisqa", required=True, help="the HolisQA folder (holds biology/ and business/)")
    p.add_argument("--domains", default="biology,business")
    p.add_argument("--questions", type=int, default=100, help="questions timed (default 100)")
    p.add_argument("--explain", type=int, default=10, help="questions whose lists are EXPLAIN ANALYZEd (default 10)")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    import numpy as np
    import sqlalchemy
    from llama_index.core import Document

    from causalrag_bench import pgserver
    from causalrag_bench.cli import display_command, write_results
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_dataset
    from llama_index_ext_causalrag import MultiGranularityIndex
    from llama_index_ext_causalrag.storage.pg.lists import GranularityTables

    docs: List[Document] = []
    questions: List[str] = []
    for d in (d.strip() for d in args.domains.split(",")):  # ids "domain:article": the domains share article ids
        ds = load_dataset("holisqa", Path(args.holisqa) / d)
        docs += [Document(text=x.text, id_=f"{d}:{x.doc_id}", metadata=dict(x.metadata)) for x in ds.documents]
        questions += [e.question for e in ds.examples]
    questions = questions[: args.questions]
    model = cached_default_embed_model()
    clock = StatementClock()
    url = pgserver.server_url(SCRIPT)
    engine = sqlalchemy.create_engine(pgserver.driver_url(url, "psycopg2"))
    table = "profile_units"
    t = time.perf_counter()
    memory = MultiGranularityIndex.from_documents(docs, embed_model=model)
    memory_build = time.perf_counter() - t
    s = pgserver.pg_stores(url, table, 384)
    t = time.perf_counter()
    MultiGranularityIndex.from_documents(
        docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore
    )
    pg_build = time.perf_counter() - t
    n_units = len(memory.units)

    def reopen() -> Any:
        s2 = pgserver.pg_stores(url, table, 384)
        t = time.perf_counter()
        ix = MultiGranularityIndex.from_vector_store(
            s2.vector_store, s2.docstore, kvstore=s2.kvstore, embed_model=model
        )
        return ix, time.perf_counter() - t

    report: Dict[str, Any] = {
        "corpus": {"domains": args.domains, "articles": len(docs), "units": n_units},
        "build_s": {"memory": memory_build, "postgres": pg_build},
        "layouts": {},
    }
    qvecs = [np.asarray(model.get_query_embedding(q), dtype=np.float32) for q in questions[: args.explain]]
    report["layouts"]["memory"] = time_queries(memory.as_retriever(), questions, None)
    tables_ix, open_s = reopen()
    report["layouts"]["granularity_tables"] = {
        **time_queries(tables_ix.as_retriever(), questions, clock),
        "open_s": open_s,
    }
    tables: GranularityTables = tables_ix._backend.tables
    lit = ["[" + ",".join(format(float(x), ".9g") for x in v) + "]" for v in qvecs]
    k = tables_ix.config.fusion.candidates_per_list + 16
    per_list: Dict[str, Dict[str, float]] = {"granularity_tables": {}, "filtered": {}}
    for g in tables.granularities:
        per_list["granularity_tables"][str(g)] = statistics.median(
            explain_ms(
                engine,
                f"SELECT node_id, embedding <=> '{v}'::vector AS d FROM \"{tables.lists[g]}\" ORDER BY d LIMIT {k}",
            )
            for v in lit
        )
        per_list["filtered"][str(g)] = statistics.median(
            explain_ms(
                engine,
                f"SELECT id, node_id, text, metadata_, embedding <=> '{v}'::vector AS d FROM \"{tables.table}\" "
                f"WHERE (metadata_->>'umg_granularity')::int <= {g} AND (metadata_->>'umg_granularity_max')::int >= {g} "
                f"ORDER BY d LIMIT {k}",
            )
            for v in lit
        )
    report["explain_ms_by_granularity"] = per_list
    tables.drop()  # what an earlier version wrote: the vector store's table alone
    filtered_ix, open_s = reopen()
    # aretrieve not timed on the old layout: it sends the same filtered queries (2.6 s each)
    report["layouts"]["filtered"] = {
        **time_queries(filtered_ix.as_retriever(), questions, clock, aretrieve=False),
        "open_s": open_s,
    }
    engine.dispose()
    for name, r in report["layouts"].items():
        sql = "; ".join(
            f"{k}: {v['round_trips']:.1f} round trips, {v['ms']:.1f} ms" for k, v in r.get("sql", {}).items()
        )
        extra = f"; waited {r['lists_wait_ms']:.1f} ms for the lists" if "lists_wait_ms" in r else ""
        if "aretrieve_p50_ms" in r:
            extra += f"; aretrieve p50 {r['aretrieve_p50_ms']:.1f} ms"
        print(
            f"{name}: p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms"
            + (f"; {sql}{extra}; client {r['client_ms']:.1f} ms" if sql else "")
        )
    print("EXPLAIN ANALYZE ms by granularity:", per_list)
    words = ["$DATA/holisqa" if a == args.holisqa else a for a in (sys.argv[1:] if argv is None else argv)]
    report["command"] = display_command(words).replace("causalrag-bench", SCRIPT, 1)
    if args.out:
        path = write_results(args.out, report, embed_model=model, llm=None)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
