"""One thin table per granularity beside a ``PGVectorStore``'s table: the layout that lets
PostgreSQL serve a :class:`MultiGranularityIndex`'s dense lists.

A store-backed index keeps every unit in the vector store's table, its granularity in the row's
JSON metadata. A dense list filtered on that metadata makes PostgreSQL parse the JSON of every
row of the table (HolisQA biology, 16,139 rows: 270 ms for one list, 1.3 s for the five, on this
machine); a table per granularity holding only ``(node_id, embedding)`` is scanned in about
2.6 ms (``benchmarks/scripts/bench_pg_lists.py``). So :class:`GranularityTables` adds, next to
the table ``data_units``:

* ``data_units__g{g}`` for each granularity ``g``: the ``node_id`` and ``embedding`` of every row
  whose ``umg_granularity <= g <= umg_granularity_max`` (rows without the maximum: ``g`` only);
* statement-level triggers on ``data_units`` that keep them in step, in the same transaction as
  the write, whoever writes (``PGVectorStore.add``/``delete_nodes``, the bulk ``COPY``, SQL), so
  the lists hold exactly the table's rows after every commit;
* optionally an HNSW index on each (:class:`HNSW`), for approximate search at scale.

The vector store's table stays LlamaIndex's own, and :meth:`GranularityTables.query` returns the
best ``k`` row ids of every list in two statements sent at once; the index holds the unit nodes already.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from llama_index_ext_causalrag.storage.ann import HNSW, IVF, list_executor
from llama_index_ext_causalrag.storage.pg.copy import supports_copy
from llama_index_ext_causalrag.validation import caller

MAX_IDENTIFIER = 63  # PostgreSQL truncates longer names, which could make two lists share one
_HNSW_DEF = re.compile(r"USING hnsw \(embedding vector_cosine_ops\) WITH \(m='?(\d+)'?, ef_construction='?(\d+)'?\)")


_PREPARED, _UNPREPARED = "causalrag_prepared", "causalrag_unprepared"  # a pooled connection's info keys
_STATEMENT_MISSING = {"26000", "42P05"}  # prepared statement missing / already there (a pooler moved the session)
CONNECTIONS = 2  # statements a query's lists are split into (the server scans them in parallel)
# maintenance_work_mem an index build asks for at most: an HNSW graph that outgrows it is built on disk, several
# times slower (60,000 HolisQA-like vectors, 94 MB: 17-23 s at the server's 64 MB, 6.2 s at 192 MB, 5.3 s at 1 GB); pgvector's README
# raises it for builds the same way. A build never lowers the server's own setting.
BUILD_MEMORY = 4 * 1024**3


def split_by_work(granularities: Sequence[int], parts: int, ann: bool = False) -> List[List[int]]:
    """``granularities`` in at most ``parts`` groups of about equal work, each list going, finest
    first, to the group with the least work so far. A scan's work is the list's rows, about ``1/g``
    of a document's sentences as windows of ``g`` (the finest list is the longest); an HNSW search
    visits about ``ef_search`` rows whatever the list's length, so each list counts the same."""
    groups: List[List[int]] = [[] for _ in range(max(1, min(parts, len(granularities))))]
    work = [0.0] * len(groups)
    for g in sorted(granularities):
        i = work.index(min(work))
        groups[i].append(g)
        work[i] += 1.0 if ann else 1.0 / g
    return [sorted(group) for group in groups if group]


GRANULARITY_TABLES = "granularity_tables"  # the layout: dense lists from these tables, units in the process


def supports_lists(vector_store: Any) -> bool:
    """A ``PGVectorStore`` on psycopg2: the stores this layout is written for."""
    return supports_copy(vector_store)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def vector_literal(qvec: np.ndarray) -> str:
    """``qvec`` as a pgvector literal (float32, every digit kept: nine significant digits; one
    format of all of them, half the time of one a value)."""
    values = np.asarray(qvec, dtype=np.float32).tolist()
    return "[" + ",".join(["%.9g"] * len(values)) % tuple(values) + "]"


class GranularityTables:
    """The per-granularity tables of ``vector_store`` (a ``PGVectorStore``) for ``granularities``."""

    layout = GRANULARITY_TABLES

    def __init__(self, vector_store: Any, granularities: Sequence[int], dim: int, ann: Optional[HNSW] = None) -> None:
        if isinstance(ann, IVF):
            raise ValueError(
                f"{caller('MultiGranularityIndex')}: ann={ann!r}: IVF indexes are built on Milvus; on PostgreSQL pass "
                "ann=HNSW(...) (pgvector's HNSW index) or None (exact search)."
            )
        self.vector_store, self.dim, self.ann = vector_store, int(dim), ann
        self.granularities = sorted(int(g) for g in granularities)
        vector_store._initialize()
        self.schema = vector_store.schema_name
        self.table = vector_store._table_class.__tablename__
        self.lists = {g: f"{self.table}__g{g}" for g in self.granularities}
        self.trigger = f"{self.table}__umg_lists"
        longest = max([self.trigger + "_upd", *self.lists.values()], key=len)
        if len(longest) > MAX_IDENTIFIER:
            raise ValueError(
                f"the vector store's table {self.table!r} gives per-granularity names up to {len(longest)} characters "
                f"({longest!r}); PostgreSQL keeps {MAX_IDENTIFIER}: use a table_name of at most "
                f"{MAX_IDENTIFIER - len(longest) + len(self.table) - len('data_')} characters."
            )

    def _name(self, name: str) -> str:
        return f"{_q(self.schema)}.{_q(name)}"

    def describe(self) -> str:
        return f"the per-granularity tables of {self._name(self.table)}"

    # ---- creating -------------------------------------------------------------------------
    def _member(self, g: int, row: str = "") -> str:
        """SQL: the row belongs to granularity ``g``'s list."""
        gmin = f"({row}metadata_->>'umg_granularity')::int"
        gmax = f"coalesce({row}metadata_->>'umg_granularity_max', {row}metadata_->>'umg_granularity')::int"
        return f"{gmin} <= {g} AND {gmax} >= {g}"

    def create(self, backfill: bool = False) -> None:
        """The tables and the triggers (in one transaction); ``backfill``: fill the tables from
        the rows already in the vector store's table (an index written by an earlier version)."""
        t = self._name(self.table)
        # one statement: each row's metadata is parsed once (as json it is text, parsed on every read)
        ranged = (
            "WITH r AS MATERIALIZED (SELECT node_id, embedding, (metadata_->>'umg_granularity')::int AS lo, "
            "coalesce(metadata_->>'umg_granularity_max', metadata_->>'umg_granularity')::int AS hi "
            "FROM new_rows)"
        )
        steps = [
            f"INSERT INTO {self._name(lst)} (node_id, embedding) SELECT node_id, embedding FROM r "
            f"WHERE lo <= {g} AND hi >= {g}"
            for g, lst in self.lists.items()
        ]
        inserts = (
            (", ".join([ranged] + [f"i{i} AS ({step})" for i, step in enumerate(steps[:-1])]) + f" {steps[-1]};")
            if steps
            else ""
        )
        deletes = "\n".join(
            f"DELETE FROM {self._name(lst)} l USING old_rows o WHERE l.node_id = o.node_id;"
            for lst in self.lists.values()
        )
        statements = []
        for lst in self.lists.values():
            statements += [
                f"CREATE TABLE IF NOT EXISTS {self._name(lst)} (node_id varchar NOT NULL, embedding vector({self.dim}) NOT NULL)",
                f"CREATE INDEX IF NOT EXISTS {_q(lst + '_node_id')} ON {self._name(lst)} (node_id)",
            ]
        statements += self._trigger_statements(inserts, deletes)
        if backfill:
            for g, lst in self.lists.items():
                statements += [
                    f"TRUNCATE {self._name(lst)}",
                    f"INSERT INTO {self._name(lst)} (node_id, embedding) SELECT node_id, embedding FROM {t} "
                    f"WHERE {self._member(g)}",
                ]
        self._execute(statements)

    def _trigger_statements(self, inserts: str, deletes: str) -> List[str]:
        """The statement-level insert, delete and update triggers on the vector store's table (and
        their functions) that run ``inserts`` (over ``new_rows``) and ``deletes`` (over ``old_rows``)."""
        t, out = self._name(self.table), []
        for event, body, refs in (
            ("ins", inserts, "NEW TABLE AS new_rows"),
            ("del", deletes, "OLD TABLE AS old_rows"),
            ("upd", deletes + "\n" + inserts, "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ):
            fn, op = self._name(f"{self.trigger}_{event}"), {"ins": "INSERT", "del": "DELETE", "upd": "UPDATE"}[event]
            out += [
                f"CREATE OR REPLACE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $body$\nBEGIN\n{body}\n"
                "RETURN NULL;\nEND\n$body$",
                f"DROP TRIGGER IF EXISTS {_q(f'{self.trigger}_{event}')} ON {t}",
                f"CREATE TRIGGER {_q(f'{self.trigger}_{event}')} AFTER {op} ON {t} REFERENCING {refs} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()",
            ]
        return out

    def drop_if_table_empty(self) -> None:
        """Drop lists left beside an empty table (the table dropped and re-created by hand, perhaps
        for another dimension), so that :meth:`create` makes them afresh."""
        t = self._name(self.table)
        self._execute(
            [
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM {t}) THEN "
                + " ".join(f"DROP TABLE IF EXISTS {self._name(lst)};" for lst in self.lists.values())
                + " END IF; END $$"
            ]
        )

    def build_ann(self) -> None:
        """The HNSW index of each list (after the rows are in: faster than growing it row by row)."""
        if self.ann is None:
            return
        self._execute(
            [self.build_memory_sql()]
            + [
                f"CREATE INDEX IF NOT EXISTS {_q(lst + '_hnsw')} ON {self._name(lst)} USING hnsw (embedding vector_cosine_ops) "
                f"WITH (m = {self.ann.m}, ef_construction = {self.ann.ef_construction})"
                for lst in self.lists.values()
            ]
            + [f"ANALYZE {self._name(lst)}" for lst in self.lists.values()]
        )

    def build_memory_sql(self) -> str:
        """SQL: ``SET LOCAL maintenance_work_mem`` for the index builds of this transaction, enough to
        build the largest list's index in memory (three times its table: the vectors and the graph's
        links), at most :data:`BUILD_MEMORY` and never below the server's setting."""
        ((largest, have),) = self._fetch(
            "SELECT coalesce(max(pg_relation_size(to_regclass(n))), 0), "
            "pg_size_bytes(current_setting('maintenance_work_mem')) FROM unnest(%(names)s::text[]) n",
            {"names": [self._name(lst) for lst in self.lists.values()]},
        )
        want = max(int(have), min(BUILD_MEMORY, 3 * int(largest)))
        return f"SET LOCAL maintenance_work_mem = '{max(1, want // 1024**2)}MB'"

    @property
    def triggers(self) -> List[str]:
        """The names of the insert, delete and update triggers (and of their functions)."""
        return [f"{self.trigger}_{e}" for e in ("ins", "del", "upd")]

    def drop(self) -> None:
        t = self._name(self.table)
        self._execute(
            [f"DROP TRIGGER IF EXISTS {_q(name)} ON {t}" for name in self.triggers]
            + [f"DROP FUNCTION IF EXISTS {self._name(name)}()" for name in self.triggers]
            + [f"DROP TABLE IF EXISTS {self._name(lst)}" for lst in self.lists.values()]
        )

    # ---- checking -------------------------------------------------------------------------
    @property
    def relations(self) -> List[str]:
        """The tables of the layout."""
        return list(self.lists.values())

    def missing(self) -> List[str]:
        """What of the layout is not in the database (tables and triggers), empty if complete."""
        names = [*self.relations, *self.triggers]
        rows = self._fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %(schema)s AND c.relname = ANY(%(names)s) "
            "UNION ALL SELECT tgname FROM pg_trigger WHERE tgname = ANY(%(names)s)",
            {"schema": self.schema, "names": names},
        )
        have = {r[0] for r in rows}
        return [n for n in names if n not in have]

    def check_ann(self) -> None:
        """Refuse lists whose HNSW indexes are missing or were built with other parameters than ``ann``."""
        rows = self._fetch(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = %(schema)s AND tablename = ANY(%(names)s) "
            "AND indexdef LIKE '%%USING hnsw%%'",
            {"schema": self.schema, "names": list(self.lists.values())},
        )
        found = {t: _HNSW_DEF.search(d) for t, d in rows}
        for lst in self.lists.values():
            m = found.get(lst)
            have = (int(m.group(1)), int(m.group(2))) if m else None
            want = (self.ann.m, self.ann.ef_construction) if self.ann else None
            if have != want:
                what = f"an HNSW index with m={have[0]}, ef_construction={have[1]}" if have else "no HNSW index"
                fix = (
                    f"HNSW(m={have[0]}, ef_construction={have[1]}, ...)" if have else "ann=None"
                ) + f", or drop the index of {self._name(lst)} and call index.upgrade_store()"
                raise ValueError(
                    f"{self._name(lst)} has {what}, the index asks for "
                    f"{'HNSW(m=%d, ef_construction=%d)' % want if want else 'exact search'}; pass {fix}."
                )

    # ---- querying -------------------------------------------------------------------------
    def query(
        self, qvec: np.ndarray, k: int, only: Optional[Sequence[int]] = None
    ) -> Dict[int, Tuple[List[str], List[float]]]:
        """The ``k`` rows nearest to ``qvec`` (cosine) in every list (``only``: these granularities),
        best first: ``{g: (row ids, similarities)}``."""
        return self.start(qvec, k, only)()

    def start(
        self, qvec: np.ndarray, k: int, only: Optional[Sequence[int]] = None
    ) -> Callable[[], Dict[int, Tuple[List[str], List[float]]]]:
        """:meth:`query` sent now, answered by the returned function, so the caller can work
        meanwhile. The lists go out in :data:`CONNECTIONS` statements of about equal work, each on
        its own pooled connection at once: the server scans them in parallel."""
        gs = self.granularities if only is None else [int(g) for g in only]
        vec = vector_literal(qvec)
        groups = split_by_work(gs, CONNECTIONS, ann=self.ann is not None)
        futures = [list_executor().submit(self._query_group, group, vec, k) for group in groups]

        def result() -> Dict[int, Tuple[List[str], List[float]]]:
            out: Dict[int, Tuple[List[str], List[float]]] = {g: ([], []) for g in gs}
            for future in futures:
                for g, node_id, d in future.result():
                    out[g][0].append(node_id)
                    out[g][1].append(1.0 - float(d))
            return out

        return result

    def _ef_search(self, k: int) -> int:
        """The HNSW ``ef_search`` of a list of ``k`` rows: the index's, raised to ``k`` (HNSW returns
        at most ``ef_search`` rows: never fewer than the list asks for)."""
        return max(int(self.ann.ef_search), int(k))  # type: ignore[union-attr]

    def _query_group(self, gs: Sequence[int], vec: str, k: int) -> List[Tuple[Any, ...]]:
        parts = [
            f"(SELECT {g} AS g, node_id, embedding <=> %(q)s::vector AS d FROM {self._name(self.lists[g])} "
            f"ORDER BY d LIMIT {int(k)})"
            for g in gs
        ]
        # The statements of one query already run side by side: no parallel workers (starting one
        # costs more than a list's scan) and no JIT (compiling costs more than the scan it speeds up).
        settings = "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off; "
        if self.ann is not None:
            settings += f"SET LOCAL hnsw.ef_search = {self._ef_search(k)}; "
        else:  # exact: a scan, even where an HNSW index exists (it would return at most its ef_search rows)
            settings += "SET LOCAL enable_indexscan = off; "
        return self._fetch(settings + " UNION ALL ".join(parts), {"q": vec})

    # ---- plumbing -------------------------------------------------------------------------
    def _execute(self, statements: Sequence[str]) -> None:
        with self.vector_store._session() as session, session.begin():
            cursor = session.connection().connection.cursor()
            for sql in statements:
                cursor.execute(sql)

    def _fetch(self, sql: str, params: Mapping[str, Any]) -> List[Tuple[Any, ...]]:
        """The rows of ``sql``; a connection lost since the last query (a server restart) is
        replaced and the statement sent once more."""
        from llama_index_ext_causalrag.storage.pg.connection import once_more_if_lost

        def run() -> List[Tuple[Any, ...]]:
            with self.vector_store._session() as session, session.begin():
                cursor = session.connection().connection.cursor()
                cursor.execute(sql, params)
                return list(cursor.fetchall())

        return once_more_if_lost(run, self.vector_store, self.describe())

    def _fetch_prepared(self, settings: str, sql: str, params: Mapping[str, Any]) -> List[Tuple[Any, ...]]:
        """The rows of ``settings`` then ``sql`` (parameters ``%(name)s`` from ``params``), ``sql``
        as a statement prepared once on each pooled connection: parsed and planned once instead
        of at every query (the served lists' BM25 statement: HolisQA biology 13.4 -> 10.5 ms).
        A connection that loses its prepared statements (a transaction-pooling proxy between
        us and the server) is sent the plain text from then on."""
        from llama_index_ext_causalrag.storage.pg.connection import once_more_if_lost

        names = [name for name in params if f"%({name})s" in sql]
        params = {name: params[name] for name in names}
        body = sql
        for i, name in enumerate(names, 1):
            body = body.replace(f"%({name})s", f"${i}")
        statement = "causalrag_" + hashlib.sha1(body.encode()).hexdigest()[:20]
        call = f"EXECUTE {statement} (" + ", ".join(f"%({name})s" for name in names) + ")"

        def attempt(used: List[Any], plain: bool = False) -> List[Tuple[Any, ...]]:
            with self.vector_store._session() as session, session.begin():
                connection = session.connection().connection
                used.append(connection)
                cursor = connection.cursor()
                if plain or connection.info.get(_UNPREPARED):
                    cursor.execute(settings + sql, params)
                    return list(cursor.fetchall())
                prepared = connection.info.setdefault(_PREPARED, set())
                if statement not in prepared:
                    cursor.execute(f"PREPARE {statement} AS {body}")
                    prepared.add(statement)  # kept by a rollback: PREPARE is not transactional
                cursor.execute(settings + call, params)
                return list(cursor.fetchall())

        def run() -> List[Tuple[Any, ...]]:
            used: List[Any] = []
            try:
                return attempt(used)
            except Exception as e:
                if getattr(e, "pgcode", None) not in _STATEMENT_MISSING or not used:
                    raise
                used[0].info[_UNPREPARED] = True
            # the failed transaction rolled back: once more, as plain text (the pool may hand out another
            # connection, which may have lost its statements too)
            return attempt([], plain=True)

        return once_more_if_lost(run, self.vector_store, self.describe())


__all__ = ["GranularityTables", "supports_lists"]
