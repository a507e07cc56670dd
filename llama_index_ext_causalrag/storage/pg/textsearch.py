"""BM25 lists from pg_textsearch's ``bm25`` index: the best ``k`` found with Block-Max WAND
inside PostgreSQL, without scoring every posting of the query's terms.

Where the database has the extension (pg_textsearch >= 1.0, in ``shared_preload_libraries``),
the ``"served"`` layout (:mod:`.served`) keeps no postings tables: each granularity's table
``data_units__g{g}`` gains a column ``terms`` holding the unit's own BM25 tokens (the tokens of
the in-memory :class:`~llama_index_ext_causalrag.experts.SparseExpert`, from the row's metadata
``umg_terms``, written by the same statement-level triggers), indexed by
``USING bm25 (terms) WITH (text_config='simple', k1=..., b=...)`` with the index's ``k1`` and ``b``.

Each token is written as one lexeme the ``simple`` configuration keeps whole: the hex digits of its
UTF-8 bytes spelled with the letters ``a``-``p`` (:func:`lexeme`; the parser would split a token
at digits, dots or hyphens), a token longer than :data:`LONG_TOKEN` bytes as the letters of its
md5 (a lexeme holds at most 2,047 bytes). The query is written the same way.

Scores. pg_textsearch's IDF is bm25s's, ``ln(1 + (N - df + 0.5) / (df + 0.5))``, and its term
part ``tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl))`` is ``k1 + 1`` times bm25s's (Lucene's
variant); a repeated query term counts again in both. But it stores a unit's length in one byte
(:func:`stored_length`, Lucene's SmallFloat: exact below 40 tokens, then up to 1/8 below the true
length). Two ways of scoring follow (:data:`INDEX_SCORES`, :data:`EXACT_SCORES`; a reopen chooses with
``MultiGranularityIndex.from_vector_store(..., bm25_scores=...)``, by default the first where the
extension gives it):

* ``"index"`` (where the extension has ``bm25_get_current_score()``, as 1.0 has): each list is
  the index's own top ``k``, each score the one its scan computed, divided by ``k1 + 1`` and moved
  from the unit's one-byte length to its exact one (the list table's ``dl``, with each list's
  ``avgdl``; :func:`length_corrected`, in the client). The move takes each term at one occurrence,
  so a score is bm25s's where every query term occurs once in the unit, and a little below it
  where one occurs more often (uncorrected, up to 8/7 above it). HolisQA biology, every question's
  five lists (``benchmarks/scripts/bench_textsearch_lists.py``): 0.967 to 1.000 times bm25s's,
  median 0.998 (uncorrected: 1.000 to 1.058, median 1.007); the top 10 in bm25s's order in 74% of
  the lists (47%), 99.4% of its top-10 ids found (98.3%); what a query returns is measured end to
  end in ``docs/stores.md``. No unit's text or term counts are read: a list costs about a quarter
  of the exact one's server time.
* ``"exact"``: the index only chooses the candidates, the ``k`` (plus the tie margin) rows a list
  asks for, and the statement scores them again exactly as bm25s does: each unit's exact length
  and term counts are in the list table (``dl``, ``tf``), ``N``, ``df`` and ``avgdl`` in the
  statistics tables the postings layout keeps too (``__bdf``, ``__bn``: transactional, kept by the
  same triggers); ties by node id, descending. Measured on every HolisQA biology question
  (``benchmarks/scripts/bench_textsearch_lists.py``): the top-10 lists equal to in memory, the
  top-100 id sets equal, scores within 2.2e-7 relative (bm25s keeps float32).

What remains in both is the choice of candidates: two limits of PostgreSQL's ``tsvector``, which
the extension reads (a term counts at most 255 times in a unit, positions stop at 16,383), and the
extension's own statistics: pg_textsearch 1.0 keeps a deleted or rolled-back row in its ``N``,
``df`` and average length until the index is rebuilt, so an update that deletes units, or fails,
rebuilds the lists' bm25 indexes (:meth:`TextSearchTables.reindex`, concurrently: readers go on; a
writer killed mid-update leaves them until the next such rebuild or a ``REINDEX`` by hand); and
rows written after an index was built wait in its memtable, scored posting by posting, so an
insert that leaves an eighth of a list's rows there rebuilds that list's index too.

Filters go into the same statement: the index scan gives rows best first and pg_textsearch scores
a larger batch whenever the filter left too few, so a filtered list is not short while enough
units match.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union, get_args

import numpy as np
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.storage.ann import HNSW
from llama_index_ext_causalrag.storage.drivers import BM25Scores
from llama_index_ext_causalrag.storage.pg.lists import _q
from llama_index_ext_causalrag.storage.pg.served import ENABLE_HINT, Found, ServedTables, lists_then_statistics
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY
from llama_index_ext_causalrag.storage.terms import TERMS_KEY, TERMS_LEN_KEY
from llama_index_ext_causalrag.validation import caller

logger = logging.getLogger(__name__)

TEXTSEARCH, POSTINGS = "pg_textsearch", "postings"  # what serves the BM25 lists
INDEX_SCORES, EXACT_SCORES = get_args(BM25Scores)  # how a list's units are scored (module docstring)
SCORE_FUNCTION = "bm25_get_current_score"  # the score the extension's scan computed for the row it returned
AVGDL = "avgdl"  # a statement's row of a list's average unit length, before the lists (TextSearchTables._read_list)
EXTENSION, MIN_VERSION = "pg_textsearch", (1, 0)
LONG_TOKEN = 1000  # bytes: a longer token is written as its md5
DEPTH = 1.0  # candidates read from the bm25 index per row a list asks for (k plus its tie margin), scored again exactly
# (HolisQA biology: top-10 and top-100 id sets equal to in memory at 1.0, as at 2.0)
RECORD_TERMS = 400  # distinct query terms up to which a candidate's counts are read as one record (columns)
MAX_COLUMN = 63  # bytes of a column name (PostgreSQL's NAMEDATALEN - 1): a longer term is read the other way
T = TypeVar("T", float, np.ndarray)
_LETTERS = str.maketrans("0123456789abcdef", "abcdefghijklmnop")
_BM25_DEF = re.compile(r"USING bm25 \(terms\) WITH \((.*)\)")
_MEMTABLE_DOCS = re.compile(r"Memtable:\s+terms: \d+\s+documents: (\d+)")  # bm25_summarize_index's report
_SEGMENT_DOCS = re.compile(r"Total: \d+ segments, .*?, (\d+) docs")
REBUILD_SHARE = 0.125  # memtable rows / index rows at which an insert's end rebuilds a bm25 index (see reindex)


def stored_length(n: Union[int, np.ndarray]) -> Union[int, np.ndarray]:
    """Unit length ``n`` (an int, or an array of them) as pg_textsearch 1.0 keeps it, in one byte
    (Lucene's SmallFloat: exact below 40, then four significant bits of ``n - 24``, rounded down)."""
    a = np.asarray(n, dtype=np.int64)
    over = np.maximum(a - 24, 1)
    shift = np.maximum(np.frexp(over.astype(np.float64))[1] - 4, 0)  # frexp's exponent: the bit length
    kept = np.where(a < 40, a, 24 + (over >> shift << shift))
    return kept if isinstance(n, np.ndarray) else int(kept)


def length_corrected(score: T, dl: Union[int, np.ndarray], avgdl: float, k1: float, b: float) -> T:
    """A score the bm25 index computed with length :func:`stored_length` of ``dl`` (divided by
    ``k1 + 1``), moved to length ``dl``: each term's ``tf / (tf + k1 (1 - b + b len / avgdl))`` is
    taken at ``tf = 1``, so the score is bm25s's where each query term occurs once in the unit and
    a little below it where one occurs more often (the index's was above). ``score`` and ``dl``
    may be arrays (a list's rows at once; the same values as one at a time)."""
    base, per = 1.0 + k1 * (1.0 - b), k1 * b / avgdl
    return score * (base + per * stored_length(dl)) / (base + per * dl)


def lexeme(token: str) -> str:
    """``token`` as one lexeme of the ``simple`` text configuration (letters ``a``-``p`` only)."""
    raw = token.encode("utf-8")
    return (hashlib.md5(raw).hexdigest() if len(raw) > LONG_TOKEN else raw.hex()).translate(_LETTERS)


def lexeme_sql(expr: str) -> str:
    """SQL: :func:`lexeme` of the text ``expr``."""
    return (
        f"translate(CASE WHEN octet_length({expr}) > {LONG_TOKEN} THEN md5({expr}) "
        f"ELSE encode(convert_to({expr}, 'UTF8'), 'hex') END, '0123456789abcdef', 'abcdefghijklmnop')"
    )


def query_text(terms: Mapping[str, float]) -> str:
    """The query ``terms`` (term -> count) as the text pg_textsearch parses: each lexeme as often as counted."""
    return " ".join(" ".join([lexeme(t)] * max(1, int(c))) for t, c in terms.items())


def _col(term: str) -> str:
    """``term`` as a quoted column name of ``jsonb_to_record`` (``%`` doubled for the driver's parameters)."""
    return '"' + term.replace('"', '""').replace("%", "%%") + '"'


def textsearch_status(tables: ServedTables, create: bool = False) -> Tuple[bool, str]:
    """``(usable, why)``: whether the database of ``tables`` can serve BM25 lists from
    pg_textsearch, and what it found. ``create``: create the extension where it is installed and
    preloaded but not created yet (a failure to create it is a reason, not an error)."""
    ((created, available, preload),) = tables._fetch(
        "SELECT (SELECT extversion FROM pg_extension WHERE extname = %(e)s), "
        "(SELECT default_version FROM pg_available_extensions WHERE name = %(e)s), "
        "current_setting('shared_preload_libraries')",
        {"e": EXTENSION},
    )
    if created is None and available is None:
        return False, "pg_textsearch is not installed on the server"
    version = created or available
    if _version(version) < MIN_VERSION:
        return False, f"pg_textsearch {version} is installed, {'.'.join(map(str, MIN_VERSION))} or later is needed"
    if EXTENSION not in (preload or ""):
        return False, f"pg_textsearch {version} is installed but not in shared_preload_libraries"
    if created is None and not create:
        return False, f"pg_textsearch {version} is installed but not created in this database"
    if created is None:
        try:
            tables._execute([f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}"])
        except Exception as e:  # no privilege, another version of the library: the postings serve
            return False, f"CREATE EXTENSION pg_textsearch failed: {str(e).splitlines()[0]}"
    return True, f"pg_textsearch {version}"


def scores_status(tables: ServedTables) -> str:
    """:data:`INDEX_SCORES` where the database has the extension's :data:`SCORE_FUNCTION`, else
    :data:`EXACT_SCORES` (a version without it: the candidates are scored again)."""
    ((found,),) = tables._fetch(f"SELECT to_regprocedure('{SCORE_FUNCTION}()') IS NOT NULL", {})
    return INDEX_SCORES if found else EXACT_SCORES


def _version(text: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2]) or (0,)


class TextSearchTables(ServedTables):
    """The ``"served"`` layout with BM25 from a pg_textsearch ``bm25`` index on each list's ``terms``."""

    bm25_lists = TEXTSEARCH
    # not prepared: with the query as a parameter ($1) of a prepared statement the planner cannot fold
    # to_bm25query() to a constant, and each list took 10-30 ms instead of about 1 (HolisQA biology)
    prepare_sparse = False

    def __init__(
        self,
        vector_store: Any,
        granularities: Sequence[int],
        dim: int,
        ann: Optional[HNSW] = None,
        k1: float = 1.5,
        b: float = 0.75,
        scores: str = EXACT_SCORES,
    ) -> None:
        super().__init__(vector_store, granularities, dim, ann)
        if scores not in (INDEX_SCORES, EXACT_SCORES):
            raise ValueError(f"scores={scores!r}: pass {INDEX_SCORES!r} or {EXACT_SCORES!r}.")
        self.k1, self.b, self.scores = float(k1), float(b), scores
        self.bm25_indexes = {g: f"{lst}_bm25" for g, lst in self.lists.items()}
        if scores == INDEX_SCORES:
            # a list is about an index scan alone: one statement for all of them, and the dense lists, now the
            # longer part, in two (HolisQA biology, 1x, p50: BM25 in one 19.4-19.9 against 20.1-21.4 ms in two, the
            # server's time 15 against 22 ms a query; then the dense lists in two, exact search 20.5-21.2 against
            # 23.1-23.6 ms in one, 26.7 in three; HNSW 18.5-18.8 against 18.8-19.7)
            self.sparse_statements, self.dense_statements = 1, 2

    def describe(self) -> str:
        return f"the served lists of {self._name(self.table)} (BM25 from pg_textsearch bm25 indexes)"

    def describe_bm25(self) -> str:
        how = (
            "the index's scores, moved from its one-byte lengths to exact lengths"
            if self.scores == INDEX_SCORES
            else "candidates scored again exactly as bm25s"
        )
        return f"pg_textsearch bm25 indexes (top-k pruned; {how})"

    def check_open(self, where: str) -> None:
        super().check_open(where)
        self.check_bm25()

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:
        """The bm25 indexes rebuilt where the update's rows would stay in their statistics: rows it
        deleted, or (on a roll-back) rows it had inserted (see :meth:`reindex`); after an update
        that only added rows, those whose memtable holds :data:`REBUILD_SHARE` of their rows."""
        if not failed and removed:
            self.reindex()
        elif not failed and added:
            self.reindex(REBUILD_SHARE)
        elif failed and added:
            try:
                self.reindex()
            except Exception as e:  # the server may be what failed: say so, keep the update's own error
                logger.warning(
                    "could not rebuild the bm25 indexes after a failed update (%s); rows it rolled back "
                    "count in BM25's statistics until REINDEX of %s.",
                    e,
                    self.describe(),
                )

    @property
    def relations(self) -> List[str]:
        return [*self.lists.values(), self.df, self.stats, self.gen]

    # ---- creating -------------------------------------------------------------------------
    def _terms_sql(self, tf: str) -> str:
        """SQL: the ``terms`` text of a row whose term counts are the jsonb ``tf`` (each token's lexeme, as often as it occurs)."""
        return (
            f"(SELECT coalesce(string_agg(repeat({lexeme_sql('e.key')} || ' ', e.value::int), ''), '') "
            f"FROM jsonb_each_text({tf}) e)"
        )

    def _insert_body(self) -> str:
        """The insert trigger's statement: each new row's metadata parsed once into the columns the
        lists take (its ``terms`` text made once, not once a list it is in, and not its whole
        metadata carried along), then the lists, the document frequencies and the statistics from
        them (HolisQA biology, one 2,000-row batch beside 16,000 rows: 941 -> 553 ms, best of 7; the
        metadata's JSON was parsed again for every column read from it)."""
        gs = ", ".join(str(g) for g in self.granularities)
        parsed = (
            f"SELECT coalesce(m->>'{NODE_ID_KEY}', s.node_id) AS nid, s.embedding, (m->>'umg_granularity')::int AS lo, "
            "coalesce(m->>'umg_granularity_max', m->>'umg_granularity')::int AS hi, "
            f"coalesce((m->>'umg_n_tokens')::int, 0) AS nt, coalesce((m->>'{TERMS_LEN_KEY}')::int, 0) AS dl, "
            f"coalesce(m->'{TERMS_KEY}', '{{}}'::jsonb) AS tf FROM (SELECT node_id, embedding, metadata_::jsonb AS m "
            "FROM new_rows OFFSET 0) s"  # OFFSET 0: parsed once a row, not once a column that reads it
        )
        rows = f"r AS MATERIALIZED (SELECT x.*, {self._terms_sql('x.tf')} AS terms FROM ({parsed}) x)"
        member = f"CROSS JOIN LATERAL unnest(ARRAY[{gs}]) gs(g) WHERE r.lo <= gs.g AND r.hi >= gs.g"
        writes = [
            f"INSERT INTO {self._name(lst)} (node_id, embedding, n_tokens, dl, tf, terms) "
            f"SELECT nid, embedding, nt, dl, tf, terms FROM r WHERE lo <= {g} AND hi >= {g}"
            for g, lst in self.lists.items()
        ]

        def statistics(df_after: str, stats_after: str) -> Tuple[str, str]:
            return (
                f"INSERT INTO {self._name(self.df)} AS d (g, term, df) SELECT gs.g, e.term, count(*) FROM r "
                f"CROSS JOIN LATERAL jsonb_object_keys(r.tf) e(term) {member} AND {df_after} "
                "GROUP BY gs.g, e.term ORDER BY gs.g, e.term ON CONFLICT (g, term) DO UPDATE SET df = d.df + EXCLUDED.df",
                f"INSERT INTO {self._name(self.stats)} AS s (g, n, total) SELECT gs.g, count(*), "
                f"coalesce(sum(r.dl), 0) FROM r {member} AND {stats_after} GROUP BY gs.g ORDER BY gs.g "
                "ON CONFLICT (g) DO UPDATE SET n = s.n + EXCLUDED.n, total = s.total + EXCLUDED.total",
            )

        return f"{lists_then_statistics(rows, writes, statistics)};\n{self._bump()}"

    def _delete_body(self) -> str:
        steps = [f"DELETE FROM {self._name(lst)} l USING r WHERE l.node_id = r.nid" for lst in self.lists.values()]
        df_step, last = self._statistics_delete()
        ctes = ", ".join([self._rows("old_rows")] + [f"w{i} AS ({x})" for i, x in enumerate([*steps, df_step])])
        return f"WITH {ctes} {last};\nDELETE FROM {self._name(self.df)} WHERE df <= 0;\n{self._bump()}"

    def create(self, backfill: bool = False) -> None:
        """The tables and the triggers, in one transaction (the bm25 indexes: :meth:`build_ann`)."""
        if backfill:
            raise ValueError(
                f"{self.describe()} are written by the index as it writes its rows; rebuild the index "
                "into an empty table to serve it from the store."
            )
        t, statements = self._name(self.table), []
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {_q(self.table + '__nid')} ON {t} "
            f"((coalesce(metadata_ ->> '{NODE_ID_KEY}', node_id)))"
        )
        for lst in self.lists.values():
            statements += [
                f"CREATE TABLE IF NOT EXISTS {self._name(lst)} (node_id varchar NOT NULL, embedding vector({self.dim}) "
                "NOT NULL, n_tokens int NOT NULL, dl int NOT NULL, tf jsonb NOT NULL, terms text NOT NULL)",
                # the vector stays in the row, the BM25 columns go to TOAST: a row over 2 KB otherwise has its
                # vector moved out (pgvector's storage is EXTERNAL) and an exact scan reads it back row by row
                f"ALTER TABLE {self._name(lst)} ALTER COLUMN embedding SET STORAGE PLAIN",
                f"CREATE INDEX IF NOT EXISTS {_q(lst + '_node_id')} ON {self._name(lst)} (node_id)",
            ]
        statements += self._statistics_tables()
        statements += self._trigger_statements(self._insert_body(), self._delete_body())
        self._execute(statements)

    def build_ann(self) -> None:
        """The HNSW index of each list (if asked for) and its ``bm25`` index, after the rows are in
        (one build is faster than growing the index row by row; later writes update both)."""
        super().build_ann()
        self._execute(
            [self.build_memory_sql()]
            + [
                f"CREATE INDEX IF NOT EXISTS {_q(idx)} ON {self._name(self.lists[g])} USING bm25 (terms) "
                f"WITH (text_config = 'simple', k1 = {self.k1!r}, b = {self.b!r})"
                for g, idx in self.bm25_indexes.items()
            ]
        )

    def reindex(self, share: Optional[float] = None) -> None:
        """Rebuild each bm25 index (``REINDEX INDEX CONCURRENTLY``: readers go on), then merge it
        into one segment (``bm25_force_merge``); ``share``: only an index whose memtable holds at
        least that share of its rows (:meth:`memtable_share`).

        Why rebuild. pg_textsearch 1.0 keeps counting a deleted or rolled-back row in ``N``,
        ``df`` and the average length (``VACUUM`` removes it from the lists, not from the
        statistics) until its index is rebuilt. And rows written after an index was built wait in
        its memtable (shared memory; spilled by itself at 32 million postings), which has no skip
        index: a query scores every memtable posting of its terms (pg_textsearch's
        ``src/scoring/bmw.c``). HolisQA biology at 100x, rows written after the index: a BM25
        statement took 115-175 ms against 10-16 ms once rebuilt. ``bm25_spill_index`` would move
        them to a segment cheaply, but 1.0's leaves the rows' recovery pages behind, so a server
        restart puts them back into the memtable (measured: 2 GB of it and the slow scans again).
        A rebuild leaves neither. Its time grows with the list (HolisQA biology: 0.15 s at 16,000
        rows, 26 s at 923,000, which a rebuild writes as 5 segments, merged in about 6 s); the
        share keeps inserts' rebuilds to a bounded cost per row."""
        with self.vector_store._engine.connect() as conn:
            cursor = conn.execution_options(isolation_level="AUTOCOMMIT").connection.cursor()
            for idx in self.bm25_indexes.values():
                if share is not None and self.memtable_share(cursor, idx) < share:
                    continue
                cursor.execute(f"REINDEX INDEX CONCURRENTLY {self._name(idx)}")
                try:
                    cursor.execute("SELECT bm25_force_merge(%s)", (f"{self.schema}.{idx}",))
                except Exception as e:  # rebuilt: only the merge is missing (several segments are scanned)
                    logger.warning("bm25_force_merge of %s failed (%s); its segments stay as built.", idx, e)

    def memtable_share(self, cursor: Any, idx: str) -> float:
        """The share of bm25 index ``idx``'s rows in its memtable, read from
        ``bm25_summarize_index`` (0 where its report cannot be read: then nothing is rebuilt)."""
        try:
            cursor.execute("SELECT bm25_summarize_index(%s)", (f"{self.schema}.{idx}",))
            report = str(cursor.fetchone()[0])
        except Exception as e:
            report = f"ERROR: {e}"
        memtable = _MEMTABLE_DOCS.search(report)
        if memtable is None:  # another version's report, or none
            logger.warning(
                "could not read the memtable size of bm25 index %s from bm25_summarize_index (%s); its memtable "
                "is left as it is (REINDEX it by hand after large inserts).",
                idx,
                " ".join(report.split())[:200],
            )
            return 0.0
        segments = _SEGMENT_DOCS.search(report)
        held = int(memtable.group(1))
        return held / max(1, held + (int(segments.group(1)) if segments else 0))

    # ---- checking -------------------------------------------------------------------------
    def missing(self) -> List[str]:
        names = [*self.relations, *self.triggers, *self.bm25_indexes.values()]
        rows = self._fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %(schema)s AND c.relname = ANY(%(names)s) "
            "UNION ALL SELECT tgname FROM pg_trigger WHERE tgname = ANY(%(names)s)",
            {"schema": self.schema, "names": names},
        )
        have = {r[0] for r in rows}
        return [n for n in names if n not in have]

    def check_bm25(self) -> None:
        """Refuse bm25 indexes built with another ``k1`` or ``b`` than the index's."""
        rows = self._fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(schema)s AND indexname = ANY(%(names)s)",
            {"schema": self.schema, "names": list(self.bm25_indexes.values())},
        )
        for name, definition in rows:
            m = _BM25_DEF.search(definition)
            options = dict(re.findall(r"(\w+)='?([^,')]+)'?", m.group(1))) if m else {}
            have = (float(options.get("k1", "nan")), float(options.get("b", "nan")), options.get("text_config"))
            if have != (self.k1, self.b, "simple"):
                raise ValueError(
                    f"the bm25 index {name!r} was built with k1={have[0]}, b={have[1]}, text_config="
                    f"{have[2]}; the index's BM25 asks for k1={self.k1}, b={self.b}, 'simple': drop it "
                    "and rebuild the index."
                )

    # ---- querying -------------------------------------------------------------------------
    def sparse_params(self, terms: Mapping[str, int]) -> Dict[str, Any]:
        # the terms in jsonb's key order (byte length, then bytes): a unit's score sums them in the order
        # jsonb_each_text gave them, so the sum is the same float as before, bit for bit
        ordered = sorted(terms, key=lambda t: (len(t.encode("utf-8")), t.encode("utf-8")))
        return {
            **super().sparse_params(terms),
            "bq": query_text(terms),
            "tk": ordered,
            "tkw": [float(terms[t]) for t in ordered],
        }

    def _sparse_sql(
        self, g: int, k: int, k1: float, b: float, filters: Optional[MetadataFilters], params: Dict[str, Any]
    ) -> str:
        """BM25 list ``g``: the best :data:`DEPTH` x ``k`` candidates by the bm25 index (lengths
        quantized), scored again exactly as bm25s scores them (the unit's exact length and term
        counts, ``N``, ``df`` and ``avgdl`` of the statistics tables), the best ``k`` of them, ties
        by node id descending. Unfiltered, the candidates are read in index order alone, so the
        extension reads its scan's own score instead of parsing each row's text again (9 against
        0.7 ms for 116 rows of HolisQA biology's finest list); filtered, the list joins the vector
        store's table and the index scan goes on until enough rows pass."""
        index = f"{_q(self.schema)}.{_q(self.bm25_indexes[g])}".replace("'", "''")
        distance = f"l.terms <@> to_bm25query(%(bq)s, '{index}')"
        join, where = self._filtered("l", filters, params)
        if self.scores == INDEX_SCORES:
            return self._index_scored(g, k, k1, distance, join, where)
        depth = int(DEPTH * int(k))
        candidates = (
            f"c AS NOT MATERIALIZED (SELECT l.node_id, l.n_tokens, l.dl, l.tf FROM {self._name(self.lists[g])} "
            f"l{join}{where} ORDER BY {distance} LIMIT {depth})"
        )
        stats = (
            f"st AS MATERIALIZED (SELECT n::float8 AS n, CASE WHEN n > 0 THEN total::float8 / n ELSE 1 END "
            f"AS avgdl FROM {self._name(self.stats)} WHERE g = {g})"
        )
        terms = params.get("tk") or []
        scored = (
            self._scored_by_record(g, terms, float(k1), float(b))
            if 0 < len(terms) <= RECORD_TERMS and all(len(t.encode("utf-8")) < MAX_COLUMN for t in terms)
            else self._scored_by_each(g, float(k1), float(b))
        )
        return (
            f"(WITH {stats}, {candidates}, {scored} "
            f"SELECT 'sparse' AS e, {g} AS g, a.node_id, a.n_tokens, a.s FROM a "
            f'ORDER BY a.s DESC, a.node_id COLLATE "C" DESC LIMIT {int(k)})'
        )

    def _index_scored(self, g: int, k: int, k1: float, distance: str, join: str, where: str) -> str:
        """BM25 list ``g`` as the bm25 index ranks it: the best ``k`` rows of its scan, each scored
        by the scan itself (``bm25_get_current_score()``, read as the row is returned, so no unit's
        text is scored again: selecting ``distance`` instead took 13 against 0.6 ms a list of
        HolisQA biology's coarsest), negated and divided by ``k1 + 1`` (bm25s's scale), with the
        unit's exact length (``dl``) for :meth:`_read_list`. Filtered, the scan is the outer side of
        the join (:meth:`_settings`), so the score read is the joined row's."""
        return (
            f"(SELECT 'sparse' AS e, {g} AS g, l.node_id, l.n_tokens, -{SCORE_FUNCTION}() / {k1 + 1.0!r} AS s, "
            f"l.dl FROM {self._name(self.lists[g])} l{join}{where} ORDER BY {distance} LIMIT {int(k)})"
        )

    def _index_scored_statement(self, kind: str) -> bool:
        return kind == "sparse" and self.scores == INDEX_SCORES

    def _before_lists(self, kind: str, gs: Sequence[int]) -> List[str]:
        """Before lists the index scores, each list's average unit length (a row :data:`AVGDL`)."""
        if not self._index_scored_statement(kind):
            return []
        return [
            f"(SELECT '{AVGDL}' AS e, g, NULL AS node_id, 0 AS n_tokens, CASE WHEN n > 0 THEN total::float8 / n "
            f"ELSE 1 END AS s{self._extra_columns(kind)} FROM {self._name(self.stats)} "
            f"WHERE g IN ({', '.join(str(int(g)) for g in gs)}))"
        ]

    def _extra_columns(self, kind: str) -> str:
        """Rows of lists the index scores carry the unit's length after the score (:meth:`_index_scored`)."""
        return ", 0 AS dl" if self._index_scored_statement(kind) else ""

    def _read_list(self, e: str, g: int, rows: List[Tuple[Any, ...]], before: Dict[Any, Any]) -> Optional[Found]:
        """A list the index scored, each score with the unit's exact length in place of the one byte
        the index keeps (:func:`length_corrected`), best first, ties by node id descending (as
        ``COLLATE "C"``: UTF-8 orders as code points)."""
        if e == AVGDL:
            before[(AVGDL, g)] = float(rows[0][4])
            return None
        if not self._index_scored_statement(e):
            return super()._read_list(e, g, rows, before)
        avgdl = before.get((AVGDL, g))
        _, _, nids, ns, ss, dls = zip(*rows)
        scores = np.asarray(ss, dtype=np.float64)
        if avgdl:  # the list's rows at once (one at a time was a third of reading a query's lists)
            scores = length_corrected(scores, np.asarray(dls, dtype=np.int64), avgdl, self.k1, self.b)
        scored = sorted(zip(scores.tolist(), nids, ns), reverse=True)
        return [r[1] for r in scored], [r[0] for r in scored], [int(r[2]) for r in scored]

    def _scored_by_record(self, g: int, terms: Sequence[str], k1: float, b: float) -> str:
        """SQL CTEs ``i``, ``a``: each candidate's score, its term counts read by one
        ``jsonb_to_record`` of its ``tf`` (one column a query term: the value is decompressed once,
        each term found by binary search), summed in the order of :meth:`sparse_params`
        (HolisQA biology: 1.4-2.0 ms a list against 2.2-3.6 expanding every term of ``tf``)."""
        cols = ", ".join(f"{_col(t)} float8" for t in terms)
        total = " + ".join(f"coalesce(i.w[{j}] * x.{_col(t)} / (x.{_col(t)} + k.d), 0)" for j, t in enumerate(terms, 1))
        # the length part once a candidate, in float8 (0.75 * dl as numeric was the slowest step; same values:
        # b * dl and 1 - b are exact either way); the score in a subquery (OFFSET 0), computed once a row
        return (
            f"i AS MATERIALIZED (SELECT array_agg(q.w * ln(1 + (st.n - d.df + 0.5) / (d.df + 0.5)) ORDER BY q.o) AS w "
            f"FROM unnest(%(tk)s::text[], %(tkw)s::float8[]) WITH ORDINALITY AS q(term, w, o) "
            f"LEFT JOIN {self._name(self.df)} d ON d.g = {g} AND d.term = q.term CROSS JOIN st), "
            f"a AS NOT MATERIALIZED (SELECT c.node_id, c.n_tokens, sc.s FROM c CROSS JOIN i CROSS JOIN st "
            f"CROSS JOIN LATERAL (SELECT ({total}) AS s FROM (SELECT {k1!r}::float8 * (1 - {b!r}::float8 + "
            f"{b!r}::float8 * c.dl / st.avgdl) AS d) k, jsonb_to_record(c.tf) AS x({cols}) OFFSET 0) sc "
            "WHERE sc.s > 0)"
        )

    def _scored_by_each(self, g: int, k1: float, b: float) -> str:
        """SQL CTEs ``i``, ``a`` for queries :meth:`_scored_by_record` cannot write (more than
        :data:`RECORD_TERMS` terms, or one too long for a column name): every term of each
        candidate's ``tf`` expanded once and looked up in the query's idf map."""
        tfc = f"e.value::float8 / (e.value::float8 + {k1!r} * (1 - {b!r} + {b!r} * c.dl / st.avgdl))"
        return (
            f"i AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(q.term, q.w * ln(1 + (st.n - d.df + 0.5) / "
            f"(d.df + 0.5))), '{{}}'::jsonb) AS idf FROM unnest(%(terms)s::text[], %(tw)s::float8[]) AS q(term, w) "
            f"JOIN {self._name(self.df)} d ON d.g = {g} AND d.term = q.term CROSS JOIN st), "
            f"a AS NOT MATERIALIZED (SELECT c.node_id, c.n_tokens, x.s FROM c CROSS JOIN i CROSS JOIN st CROSS JOIN "
            f"LATERAL (SELECT sum((i.idf ->> e.key)::float8 * {tfc}) AS s FROM jsonb_each_text(c.tf) e "
            f"WHERE i.idf ? e.key) x WHERE x.s > 0)"
        )

    def _settings(self, kind: str, k: int, filtered: bool = False) -> str:
        settings = super()._settings(kind, k, filtered)
        if kind == "sparse":  # the bm25 index scan in index order, whatever the planner thinks of a small table
            settings += (
                "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; "
                "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; "
            )
        return settings


__all__ = [
    "ENABLE_HINT",
    "EXACT_SCORES",
    "INDEX_SCORES",
    "POSTINGS",
    "TEXTSEARCH",
    "TextSearchTables",
    "lexeme",
    "query_text",
    "scores_status",
    "textsearch_status",
]


def served_tables(
    vector_store: Any,
    granularities: Sequence[int],
    dim: int,
    ann: Optional[HNSW],
    bm25: Tuple[float, float],
    saved: Optional[Dict[str, Any]],
    scores: Optional[str] = None,
) -> ServedTables:
    """The served lists of ``vector_store``: with BM25 from pg_textsearch where a new index
    (``saved`` None) finds it usable (one log line says which, and why), else from postings
    tables; a reopened index keeps its build's choice (an index built on pg_textsearch whose
    server lost it is refused here, never at a query). ``scores``: pg_textsearch's lists scored
    so (None: :data:`INDEX_SCORES` where the extension gives them, see :func:`scores_status`)."""
    owner = caller("MultiGranularityIndex")
    postings = ServedTables(vector_store, granularities, dim, ann)
    usable, why = textsearch_status(postings, create=saved is None)
    chosen = (TEXTSEARCH if usable else POSTINGS) if saved is None else saved.get("bm25_lists", POSTINGS)
    if chosen == TEXTSEARCH and not usable:
        raise ValueError(
            f"{owner}: the index was built with pg_textsearch bm25 indexes, but {why}; add pg_textsearch "
            "to shared_preload_libraries and restart the server, or rebuild the index (without the "
            "extension it is served from postings tables)."
        )
    if chosen == TEXTSEARCH:
        available = scores_status(postings) if scores != EXACT_SCORES else EXACT_SCORES  # exact: nothing to ask
        if scores == INDEX_SCORES and available != INDEX_SCORES:
            raise ValueError(
                f"{owner}: bm25_scores='index' reads each row's score from pg_textsearch's {SCORE_FUNCTION}(), "
                f"which this server's extension lacks ({why}); pass bm25_scores='exact' (or None), or upgrade "
                "pg_textsearch."
            )
        scores = scores or available
        logger.info("%s: BM25 lists from pg_textsearch bm25 indexes (%s, %s scores).", owner, why, scores)
        return TextSearchTables(vector_store, granularities, dim, ann, *bm25, scores=scores)
    if usable:
        logger.info(
            "%s: BM25 lists from postings tables: the index was built without pg_textsearch (%s is here "
            "now); rebuild it for top-k pruned BM25 lists.",
            owner,
            why,
        )
    else:
        logger.info("%s: BM25 lists from postings tables (%s); %s.", owner, why, ENABLE_HINT)
    return postings
