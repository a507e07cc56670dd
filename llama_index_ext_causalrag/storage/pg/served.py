"""PostgreSQL answers every candidate list of a :class:`MultiGranularityIndex`: dense and BM25.

The layout ``"served"``: beside a ``PGVectorStore``'s table ``data_units`` (LlamaIndex's own,
one row per unit: text, JSON metadata, embedding), for each granularity ``g``

* ``data_units__g{g}`` ``(node_id, embedding, n_tokens)``: the units of the list, as the
  per-granularity tables of :mod:`.lists` plus each unit's token length (fusion divides by it);
* ``data_units__b{g}`` ``(term, node_id, tf, dl, n_tokens)``: BM25 postings, one row per
  (unit, distinct term), indexed by term;

and for all granularities ``data_units__bdf`` ``(g, term, df)`` (document frequencies) and
``data_units__bn`` ``(g, n, total)`` (units and summed lengths). Statement-level triggers on
``data_units`` keep all of them in step with the table, in the same transaction as the write,
from each row's metadata: its granularities, its node id, its token length and its BM25 terms
(``umg_terms``: term -> count, written by the index; :func:`with_terms`). So the database holds
the whole index, and a query process holds nothing that grows with the corpus.

A list's BM25 is bm25s's Lucene variant, computed by the database over the list's units:
``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, ``tf / (tf + k1 (1 - b + b dl / avgdl))``,
summed over the query's terms (a repeated term counts again), with ``N``, ``df`` and ``avgdl``
of that granularity: the scores of :class:`~llama_index_ext_causalrag.experts.SparseExpert`
over the same units (up to float32 rounding: bm25s keeps float32). Metadata filters join the
list to ``data_units`` and test its metadata before the list's top-k.
"""

from __future__ import annotations

import logging
from itertools import groupby
from operator import itemgetter
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.storage.ann import HNSW, list_executor
from llama_index_ext_causalrag.storage.pg.filters import filter_sql
from llama_index_ext_causalrag.storage.pg.lists import (
    MAX_IDENTIFIER,
    GranularityTables,
    _q,
    split_by_work,
    vector_literal,
)
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY
from llama_index_ext_causalrag.storage.terms import TERMS_KEY, TERMS_LEN_KEY
from llama_index_ext_causalrag.validation import caller

logger = logging.getLogger(__name__)

SERVED = "served"
SPARSE_STATEMENTS = 2  # statements a query's BM25 lists are sent in (beside the dense lists' one)
EXACT_PER_EF = 8  # a dense list of at most this many times ef_search rows is scanned exactly (see _dense_sql)
ENABLE_HINT = (
    "for BM25 lists with top-k pruning install pg_textsearch >= 1.0 on the server (PostgreSQL 17 or 18), "
    "add it to shared_preload_libraries, restart, then rebuild the index"
)


# a row's node id (its row id is uuid5 of it, or the node id itself); indexed, so a filter joins by it
def _nid(row: str = "") -> str:
    return f"coalesce({row}metadata_ ->> '{NODE_ID_KEY}', {row}node_id)"


def lists_then_statistics(head: str, writes: Sequence[str], statistics: Callable[[str, str], Tuple[str, str]]) -> str:
    """SQL: one statement, ``WITH`` the CTEs ``head`` (the rows to write, ``r``, materialized),
    that computes all of ``r``, then runs the lists' ``writes`` (each ending in a ``WHERE``
    clause), then the document frequencies' upsert, then the statistics' (``statistics(df_after,
    stats_after)`` gives both, each holding back its rows until its condition is evaluated): each
    step starts by counting what the steps before it returned, whatever the executor's order.

    Why this order. Both upserts lock rows that every batch of a build raises, until the batch's
    transaction ends. PostgreSQL runs a ``WITH`` statement's main query before its data-modifying
    CTEs, so the statistics' upsert written as the main query locked its rows before the lists
    were written, and the trigger of a second batch sent at once (:func:`~.copy.copy_batches`)
    waited for the whole of the first's. And pg_textsearch 1.0 holds a bm25 index's lock from a
    transaction's first insert into it to its end, so ``r`` (each row's metadata parsed, its terms
    text made) is computed before the first list insert, while the other batch holds the lock."""
    ready = "(SELECT count(*) FROM r) >= 0"
    ctes = [head] + [f"w{i} AS ({w} AND {ready} RETURNING 1)" for i, w in enumerate(writes)]
    listed = " + ".join(f"(SELECT count(*) FROM w{i})" for i in range(len(writes))) or "0"
    df, stats = statistics(f"({listed}) >= 0", "(SELECT count(*) FROM df_raised) >= 0")
    ctes.append(f"df_raised AS ({df} RETURNING 1)")
    return f"WITH {', '.join(ctes)} {stats}"


ListKey = Tuple[str, int]  # ("dense" | "sparse", granularity)
Found = Tuple[List[str], List[float], List[int]]  # node ids, scores, token lengths, best first


class ServedTables(GranularityTables):
    """The ``"served"`` layout of ``vector_store`` (a ``PGVectorStore``) for ``granularities``,
    BM25 from postings tables (:mod:`.textsearch`: from pg_textsearch's index instead)."""

    layout = SERVED
    bm25_lists = "postings"
    prepare_sparse = True  # the BM25 statement prepared once a connection (see _fetch_prepared)
    sparse_statements = SPARSE_STATEMENTS
    dense_statements = 1

    def __init__(self, vector_store: Any, granularities: Sequence[int], dim: int, ann: Optional[HNSW] = None) -> None:
        super().__init__(vector_store, granularities, dim, ann)
        self.postings = {g: f"{self.table}__b{g}" for g in self.granularities}
        self.df, self.stats, self.gen = f"{self.table}__bdf", f"{self.table}__bn", f"{self.table}__gen"
        self.trigger = f"{self.table}__umg_served"
        longest = max([self.trigger + "_upd", *self.relations], key=len)
        if len(longest) > MAX_IDENTIFIER:
            raise ValueError(
                f"the vector store's table {self.table!r} gives names up to {len(longest)} characters ({longest!r}); "
                f"PostgreSQL keeps {MAX_IDENTIFIER}: use a shorter table_name."
            )

    def describe(self) -> str:
        return f"the served lists of {self._name(self.table)}"

    def params(self) -> Dict[str, Any]:
        """What an index served by these tables records to reopen them."""
        return {"bm25_lists": self.bm25_lists}

    def describe_bm25(self) -> str:
        """What serves the BM25 lists, for ``explain()`` and messages."""
        return f"postings tables (every posting of the query's terms scored); {ENABLE_HINT}"

    def covers(self, docstore: Any) -> bool:
        """True if ``docstore`` is in this table's database: the write counter covers its reads too."""
        from llama_index_ext_causalrag.storage.pg.atomic import shares_database

        return shares_database(self.vector_store, docstore)

    def check_open(self, where: str) -> None:
        """The tables of an index in ``where`` are all there (the write counter of an index served
        before queries checked it is added, once), with the build's HNSW parameters."""
        owner = caller("MultiGranularityIndex")
        missing = self.missing()
        if missing == [self.gen]:  # served before queries checked the write counter: add it, once
            logger.info("%s: adding the write counter %s to the served lists (once).", owner, self.gen)
            self.create()
            missing = self.missing()
        if missing:
            raise ValueError(
                f"{owner}: {self.describe()} lack {', '.join(missing)}; the index in {where} was served from them. "
                "Pass the vector store it was built into, or rebuild it."
            )
        self.check_ann()

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:
        """Nothing: the triggers kept every list and statistic in the update's transactions."""

    @property
    def relations(self) -> List[str]:
        return [*self.lists.values(), *self.postings.values(), self.df, self.stats, self.gen]

    # ---- creating -------------------------------------------------------------------------
    def _rows(self, source: str) -> str:
        """SQL: the rows of transition table ``source`` with what the lists need, parsed once."""
        return (
            "r AS MATERIALIZED (SELECT coalesce(m->>'" + NODE_ID_KEY + "', s.node_id) AS nid, s.embedding, m, "
            "(m->>'umg_granularity')::int AS lo, coalesce(m->>'umg_granularity_max', m->>'umg_granularity')::int AS hi, "
            "coalesce((m->>'umg_n_tokens')::int, 0) AS nt, coalesce((m->>'" + TERMS_LEN_KEY + "')::int, 0) AS dl "
            # OFFSET 0: each row's metadata parsed once, not once for every column read from it
            f"FROM (SELECT node_id, embedding, metadata_::jsonb AS m FROM {source} OFFSET 0) s), "
            "p AS MATERIALIZED (SELECT r.nid, r.lo, r.hi, r.dl, r.nt, e.key AS term, e.value::int AS tf FROM r, "
            "jsonb_each_text(coalesce(r.m->'" + TERMS_KEY + "', '{}'::jsonb)) e), "
            f"gs(g) AS (VALUES {', '.join(f'({g})' for g in self.granularities)})"
        )

    def _insert_body(self) -> str:
        writes = []
        for g in self.granularities:
            writes.append(
                f"INSERT INTO {self._name(self.lists[g])} (node_id, embedding, n_tokens) "
                f"SELECT nid, embedding, nt FROM r WHERE lo <= {g} AND hi >= {g}"
            )
            writes.append(
                f"INSERT INTO {self._name(self.postings[g])} (term, node_id, tf, dl, n_tokens) "
                f"SELECT term, nid, tf, dl, nt FROM p WHERE lo <= {g} AND hi >= {g}"
            )
        return f"{lists_then_statistics(self._rows('new_rows'), writes, self._statistics_insert)};\n{self._bump()}"

    def _delete_body(self) -> str:
        steps = []
        for g in self.granularities:
            for rel in (self.lists[g], self.postings[g]):
                steps.append(f"DELETE FROM {self._name(rel)} l USING r WHERE l.node_id = r.nid")
        df_step, last = self._statistics_delete()
        steps.append(df_step)
        ctes = ", ".join([self._rows("old_rows")] + [f"w{i} AS ({s})" for i, s in enumerate(steps)])
        return f"WITH {ctes} {last};\nDELETE FROM {self._name(self.df)} WHERE df <= 0;\n{self._bump()}"

    def _statistics_insert(self, df_after: str, stats_after: str) -> Tuple[str, str]:
        """SQL over CTEs ``r``, ``p``, ``gs`` (:meth:`_rows`): the document frequencies and the
        units and summed lengths per granularity, raised by the rows ``r``; each statement reads
        no row before its condition (``df_after``, ``stats_after``) is evaluated."""
        df, st = self._name(self.df), self._name(self.stats)
        return (
            f"INSERT INTO {df} AS d (g, term, df) SELECT gs.g, p.term, count(*) FROM p JOIN gs "
            f"ON p.lo <= gs.g AND p.hi >= gs.g WHERE {df_after} GROUP BY gs.g, p.term ORDER BY gs.g, p.term "
            "ON CONFLICT (g, term) DO UPDATE SET df = d.df + EXCLUDED.df",
            f"INSERT INTO {st} AS s (g, n, total) SELECT gs.g, count(*), coalesce(sum(r.dl), 0) FROM r JOIN gs "
            f"ON r.lo <= gs.g AND r.hi >= gs.g WHERE {stats_after} GROUP BY gs.g ORDER BY gs.g "
            "ON CONFLICT (g) DO UPDATE SET n = s.n + EXCLUDED.n, total = s.total + EXCLUDED.total",
        )

    def _statistics_delete(self) -> Tuple[str, str]:
        """:meth:`_statistics_insert` lowered by the rows ``r`` instead."""
        df, st = self._name(self.df), self._name(self.stats)
        return (
            f"UPDATE {df} d SET df = d.df - c.n FROM (SELECT gs.g, p.term, count(*) AS n FROM p JOIN gs "
            "ON p.lo <= gs.g AND p.hi >= gs.g GROUP BY gs.g, p.term) c WHERE d.g = c.g AND d.term = c.term",
            f"UPDATE {st} s SET n = s.n - c.n, total = s.total - c.total FROM (SELECT gs.g, count(*) AS n, "
            "coalesce(sum(r.dl), 0) AS total FROM r JOIN gs ON r.lo <= gs.g AND r.hi >= gs.g GROUP BY gs.g) c "
            "WHERE s.g = c.g",
        )

    def _statistics_tables(self) -> List[str]:
        """SQL: the document frequency, statistics and write counter tables."""
        return [
            f"CREATE TABLE IF NOT EXISTS {self._name(self.df)} (g int NOT NULL, term text NOT NULL, df int NOT NULL, "
            "PRIMARY KEY (g, term))",
            f"CREATE TABLE IF NOT EXISTS {self._name(self.stats)} (g int PRIMARY KEY, n bigint NOT NULL, "
            "total bigint NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {self._name(self.gen)} (one int PRIMARY KEY CHECK (one = 1), gen bigint NOT NULL)",
            f"INSERT INTO {self._name(self.gen)} (one, gen) VALUES (1, 0) ON CONFLICT (one) DO NOTHING",
        ]

    def _bump(self) -> str:
        """SQL: the write counter one up, in the writing transaction (:meth:`generation`)."""
        return f"UPDATE {self._name(self.gen)} SET gen = gen + 1;"

    def generation_sql(self) -> str:
        """SQL of the write counter's value (:meth:`generation`), to read beside other rows."""
        return f"SELECT gen FROM {self._name(self.gen)}"

    def generation(self) -> int:
        """The write counter: one up with every statement that changes the table, committed with
        it. A query that sees one value in each of its statements saw one state of the index."""
        return int(self._fetch(self.generation_sql(), {})[0][0])

    def create(self, backfill: bool = False) -> None:
        """The tables and the triggers, in one transaction."""
        if backfill:
            raise ValueError(
                f"{self.describe()} are written by the index as it writes its rows; rebuild the index "
                "into an empty table to serve it from the store."
            )
        t = self._name(self.table)
        statements = [f"CREATE INDEX IF NOT EXISTS {_q(self.table + '__nid')} ON {t} (({_nid()}))"]
        for g in self.granularities:
            lst, post = self.lists[g], self.postings[g]
            statements += [
                f"CREATE TABLE IF NOT EXISTS {self._name(lst)} (node_id varchar NOT NULL, "
                f"embedding vector({self.dim}) NOT NULL, n_tokens int NOT NULL)",
                f"CREATE INDEX IF NOT EXISTS {_q(lst + '_node_id')} ON {self._name(lst)} (node_id)",
                f"CREATE TABLE IF NOT EXISTS {self._name(post)} (term text NOT NULL, node_id varchar NOT NULL, "
                "tf int NOT NULL, dl int NOT NULL, n_tokens int NOT NULL)",
                # covering: a list's postings are read from the index alone (after VACUUM), no heap page per posting
                f"CREATE INDEX IF NOT EXISTS {_q(post + '_term')} ON {self._name(post)} (term) "
                "INCLUDE (node_id, tf, dl, n_tokens)",
                f"CREATE INDEX IF NOT EXISTS {_q(post + '_node_id')} ON {self._name(post)} (node_id)",
            ]
        statements += self._statistics_tables()
        statements += self._trigger_statements(self._insert_body(), self._delete_body())
        self._execute(statements)

    def drop_if_table_empty(self) -> None:
        t = self._name(self.table)
        self._execute(
            [
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM {t}) THEN "
                + " ".join(f"DROP TABLE IF EXISTS {self._name(rel)};" for rel in self.relations)
                + " END IF; END $$"
            ]
        )

    def analyze(self) -> None:
        """``VACUUM ANALYZE`` of every relation (after a build): fresh planner statistics (the
        estimates were of empty tables) and a visibility map, so postings are read by index-only scans."""
        with self.vector_store._engine.connect() as conn:
            cursor = conn.execution_options(isolation_level="AUTOCOMMIT").connection.cursor()
            for rel in self.relations:
                cursor.execute(f"VACUUM ANALYZE {self._name(rel)}")

    def drop(self) -> None:
        t = self._name(self.table)
        self._execute(
            [f"DROP TRIGGER IF EXISTS {_q(name)} ON {t}" for name in self.triggers]
            + [f"DROP FUNCTION IF EXISTS {self._name(name)}()" for name in self.triggers]
            + [f"DROP TABLE IF EXISTS {self._name(rel)}" for rel in self.relations]
        )

    # ---- querying -------------------------------------------------------------------------
    def _filtered(self, alias: str, filters: Optional[MetadataFilters], params: Dict[str, Any]) -> Tuple[str, str]:
        """``(JOIN, WHERE)`` SQL restricting list rows ``alias`` to the units passing ``filters``."""
        if filters is None:
            return "", ""
        cond, values = filter_sql(filters, "t.metadata_")
        params.update(values)
        join = f" JOIN {self._name(self.table)} t ON {_nid('t.')} = {alias}.node_id"
        return join, f" WHERE {cond}"

    def _dense_sql(self, g: int, k: int, filters: Optional[MetadataFilters], params: Dict[str, Any]) -> str:
        """Dense list ``g``: the ``k`` rows nearest the query, by its HNSW index; a list of at most
        :data:`EXACT_PER_EF` x ``ef_search`` rows (``n`` of the statistics table, read in the
        statement) by an exact scan instead, faster there and exact (HolisQA biology at 1x, lists
        of 1,111-1,968 rows: 0.60-0.87 against 0.92-1.13 ms a list, ef_search 400)."""
        join, where = self._filtered("l", filters, params)
        if self.ann is None:
            return self._dense_scan(g, k, join, where, exact=True)
        small = f"(SELECT n FROM {self._name(self.stats)} WHERE g = {g}) <= {EXACT_PER_EF * self._ef_search(k)}"
        both = " AND " if where else " WHERE "
        return (
            f"{self._dense_scan(g, k, join, f'{where}{both}NOT {small}', exact=False)} UNION ALL "
            f"{self._dense_scan(g, k, join, f'{where}{both}{small}', exact=True)}"
        )

    def _dense_scan(self, g: int, k: int, join: str, where: str, exact: bool) -> str:
        # exact: ties (duplicate texts) by node id, descending, as in memory, and `+ 0` keeps the HNSW index out
        # (it would order by the distance alone, approximately); an HNSW scan orders by distance alone
        d = "(l.embedding <=> %(q)s::vector) + 0" if exact else "l.embedding <=> %(q)s::vector"
        tie = ', l.node_id COLLATE "C" DESC' if exact else ""
        # the distance computed once a row (in the order by and the score it was twice: an exact scan's main cost)
        return (
            f"(SELECT 'dense' AS e, {g} AS g, l.node_id, l.n_tokens, 1 - l.d AS s FROM (SELECT l.node_id, l.n_tokens, "
            f"{d} AS d FROM {self._name(self.lists[g])} l{join}{where} ORDER BY d{tie} LIMIT {int(k)}) l)"
        )

    def sparse_params(self, terms: Mapping[str, int]) -> Dict[str, Any]:
        """The statement parameters of query ``terms`` (term -> count) for :meth:`_sparse_sql`."""
        return {"terms": list(terms), "tw": [float(c) for c in terms.values()]}

    def _sparse_sql(
        self, g: int, k: int, k1: float, b: float, filters: Optional[MetadataFilters], params: Dict[str, Any]
    ) -> str:
        """BM25 list ``g``: every posting of the query's terms scored, the best ``k`` (ties by node id)."""
        join, where = self._filtered("a", filters, params)
        tfc = f"p.tf / (p.tf + {float(k1)!r} * (1 - {float(b)!r} + {float(b)!r} * p.dl / st.avgdl))"
        return (
            f"(WITH st AS (SELECT n::float8 AS n, CASE WHEN n > 0 THEN total::float8 / n ELSE 1 END AS avgdl "
            f"FROM {self._name(self.stats)} WHERE g = {g}), "
            f"i AS (SELECT q.term, q.w * ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5)) AS idf "
            f"FROM unnest(%(terms)s::text[], %(tw)s::float8[]) AS q(term, w) "
            f"JOIN {self._name(self.df)} d ON d.g = {g} AND d.term = q.term CROSS JOIN st), "
            f"a AS (SELECT p.node_id, max(p.n_tokens) AS n_tokens, sum(i.idf * {tfc}) AS s "
            f"FROM {self._name(self.postings[g])} p JOIN i ON i.term = p.term CROSS JOIN st GROUP BY p.node_id) "
            f"SELECT 'sparse' AS e, {g} AS g, a.node_id, a.n_tokens, a.s FROM a{join}{where} "
            f'ORDER BY a.s DESC, a.node_id COLLATE "C" DESC LIMIT {int(k)})'
        )

    def start_lists(
        self,
        qvec: Optional[np.ndarray],
        terms: Mapping[str, int],
        wanted: Sequence[ListKey],
        k: int,
        k1: float,
        b: float,
        filters: Optional[MetadataFilters] = None,
    ) -> Callable[[], Tuple[Dict[ListKey, Found], List[int]]]:
        """Every list of ``wanted`` for query vector ``qvec`` and query ``terms`` (term -> count),
        ``k`` rows each, sent now in statements on pooled connections at once (the dense lists in
        ``dense_statements``, the BM25 lists in ``sparse_statements``); the returned function waits and
        gives the lists and the write counter (:meth:`generation`) each statement saw."""
        wanted = list(wanted)
        dense = [g for e, g in wanted if e == "dense"]
        sparse = [g for e, g in wanted if e == "sparse"] if terms else []
        base: Dict[str, Any] = {}
        if dense:
            base["q"] = vector_literal(qvec)
        if sparse:
            base.update(self.sparse_params(terms))
        # the dense lists in `dense_statements`, the BM25 lists in `sparse_statements`: postings tables, dense in
        # one and BM25 in two (each about as long as the dense one at 1x, shorter with HNSW), so three server
        # processes share the machine's cores instead of the BM25 one alone; lists pg_textsearch's index scores,
        # the other way round (see TextSearchTables)
        groups = [("dense", gs) for gs in split_by_work(dense, self.dense_statements, ann=self.ann is not None)] + [
            ("sparse", gs) for gs in split_by_work(sparse, self.sparse_statements, ann=True)
        ]
        futures = []
        for kind, gs in groups:
            params = dict(base)
            parts = self._statement_parts(kind, gs, k, k1, b, filters, params)
            sql, settings = " UNION ALL ".join(parts), self._settings(kind, k, filters is not None)
            # unfiltered, the statement's text is the same at every query: prepared once a connection
            prepared = filters is None and (kind == "dense" or self.prepare_sparse)
            futures.append(
                list_executor().submit(self._fetch_prepared, settings, sql, params)
                if prepared
                else list_executor().submit(self._fetch, settings + sql, params)
            )

        def result() -> Tuple[Dict[ListKey, Found], List[int]]:
            out: Dict[ListKey, Found] = {key: ([], [], []) for key in wanted}
            seen: List[int] = []
            # a list's rows come together, in order (each its own part of the UNION ALL): taken a list at a time
            for future in futures:
                before: Dict[Any, Any] = {}  # what the statement's rows before its lists said (_read_list)
                for (e, g), rows in groupby(future.result(), key=itemgetter(0, 1)):
                    if e == "gen":
                        seen.extend(int(r[4]) for r in rows)
                        continue
                    found = self._read_list(e, int(g), list(rows), before)
                    if found is not None:
                        ids, scores, lengths = out[(e, int(g))]
                        ids.extend(found[0])
                        scores.extend(found[1])
                        lengths.extend(found[2])
            return out, seen

        return result

    def _statement_parts(
        self,
        kind: str,
        gs: Sequence[int],
        k: int,
        k1: float,
        b: float,
        filters: Optional[MetadataFilters],
        params: Dict[str, Any],
    ) -> List[str]:
        """The parts of one statement (joined by ``UNION ALL``), each row ``(kind, g, node id,
        tokens, score)`` and :meth:`_extra_columns`: :meth:`_before_lists`, the lists ``gs`` of
        ``kind``, then the write counter (in the same statement, one snapshot: the caller checks
        every statement saw one state)."""
        lists = [
            self._dense_sql(g, k, filters, params)
            if kind == "dense"
            else self._sparse_sql(g, k, k1, b, filters, params)
            for g in gs
        ]
        return [
            *self._before_lists(kind, gs),
            *lists,
            f"(SELECT 'gen' AS e, 0 AS g, NULL AS node_id, 0 AS n_tokens, gen::float8 AS s{self._extra_columns(kind)} "
            f"FROM {self._name(self.gen)})",
        ]

    def _before_lists(self, kind: str, gs: Sequence[int]) -> List[str]:
        """SQL parts a statement of ``kind`` returns before its lists ``gs``, for :meth:`_read_list` (none)."""
        return []

    def _extra_columns(self, kind: str) -> str:
        """SQL: the columns after the score of a statement of ``kind``'s rows that are no list (none)."""
        return ""

    def _read_list(self, e: str, g: int, rows: List[Tuple[Any, ...]], before: Dict[Any, Any]) -> Optional[Found]:
        """List ``(e, g)`` from its rows, best first (``before``: what the statement's rows before
        it said; None for rows that are no list)."""
        _, _, node_ids, n_tokens, s = zip(*rows)
        return list(node_ids), [float(x) for x in s], [int(n) for n in n_tokens]

    def _settings(self, kind: str, k: int, filtered: bool = False) -> str:
        settings = "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off; "
        if kind == "sparse":
            return settings
        if self.ann is not None:
            settings += f"SET LOCAL hnsw.ef_search = {self._ef_search(k)}; "
            # filtered: pgvector searches on until the list is full; unfiltered, the ef_search rows suffice (the
            # iterative scan cost 8.1 against 5.7 ms for HolisQA biology's five lists) and the HNSW index the caller
            # chose answers, even where the planner costs a small list's scan lower
            settings += (
                "SET LOCAL hnsw.iterative_scan = relaxed_order; " if filtered else "SET LOCAL enable_seqscan = off; "
            )
        return settings


__all__ = ["SERVED", "ServedTables"]
