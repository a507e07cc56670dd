"""PostgreSQL answers a :class:`StandardsIndex`'s queries: its units as one served list.

The units are rows of the ``PGVectorStore``'s table, each with its BM25 terms and its facts
(section, degree, neighbours: written by the index into the row's metadata). The ``"served"``
layout (:mod:`.served`, BM25 from postings tables or from pg_textsearch, :mod:`.textsearch`) keeps
the list of granularity :data:`UNITS_LIST`: :class:`ServedUnits` asks it for the BM25 list (the
prefilter) and the dense list (the fallback when no unit shares a term with the query), and reads
the cosine and the facts of given units by id, filters inside every statement. Each statement
also reads the tables' write counter, so a query can check that it saw one state of the index.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.storage.pg.filters import filter_sql
from llama_index_ext_causalrag.storage.pg.lists import vector_literal
from llama_index_ext_causalrag.storage.pg.served import ServedTables, _nid

UNITS_LIST = 1  # the granularity a standards index's units are written with (one list)

Ranked = Tuple[List[str], List[float]]  # node ids and scores, best first


class ServedUnits:
    """The units of an index as one served list of ``tables`` (:class:`ServedTables`, granularity
    :data:`UNITS_LIST`), with reads by id."""

    def __init__(self, tables: ServedTables) -> None:
        self.tables = tables
        self.layout = tables.layout

    # ---- the lists' life: delegated -------------------------------------------------------
    def params(self) -> Dict[str, Any]:
        return self.tables.params()

    def describe(self) -> str:
        return self.tables.describe()

    def describe_bm25(self) -> str:
        return self.tables.describe_bm25()

    def create(self) -> None:
        self.tables.drop_if_table_empty()
        self.tables.create()

    def finish_build(self) -> None:
        """After a build's rows are in: the lists' indexes (pg_textsearch's bm25), then fresh statistics."""
        self.tables.build_ann()
        self.tables.analyze()

    def check_open(self, where: str) -> None:
        self.tables.check_open(where)

    def after_update(self, added: bool, removed: bool, failed: bool) -> None:
        self.tables.after_update(added, removed, failed)

    def generation(self) -> int:
        return self.tables.generation()

    def counter_sql(self, docstore: Any) -> Optional[str]:
        """SQL of the write counter, to read in the same snapshot as ``docstore``'s nodes where it
        lives in the tables' database; None elsewhere."""
        return self.tables.generation_sql() if self.tables.covers(docstore) else None

    # ---- queries --------------------------------------------------------------------------
    def bm25(
        self, terms: Mapping[str, float], k: int, k1: float, b: float, filters: Optional[MetadataFilters]
    ) -> Tuple[Ranked, List[int]]:
        """The best ``k`` units by BM25 for query ``terms`` (term -> weight: a repeated term
        counts its weight times), ties by node id descending; and the write counters seen."""
        return self._list(None, terms, "sparse", k, k1, b, filters)

    def dense(self, qvec: np.ndarray, k: int, filters: Optional[MetadataFilters]) -> Tuple[Ranked, List[int]]:
        """The best ``k`` units by cosine to ``qvec`` (exact), ties by node id descending."""
        return self._list(qvec, {}, "dense", k, 0.0, 0.0, filters)

    def _list(
        self,
        qvec: Optional[np.ndarray],
        terms: Mapping[str, float],
        kind: str,
        k: int,
        k1: float,
        b: float,
        filters: Optional[MetadataFilters],
    ) -> Tuple[Ranked, List[int]]:
        if kind == "sparse" and not terms:
            return ([], []), [self.generation()]
        found, seen = self.tables.start_lists(qvec, terms, [(kind, UNITS_LIST)], k, k1, b, filters)()
        ids, scores, _ = found[(kind, UNITS_LIST)]
        return (ids, scores), seen

    def cosines(
        self, qvec: np.ndarray, ids: Sequence[str], filters: Optional[MetadataFilters] = None
    ) -> Tuple[Dict[str, float], List[int]]:
        """The cosine to ``qvec`` of each unit of ``ids`` passing ``filters``, computed by the database
        from the list's own table (no JSON metadata parsed without filters); and the write counter."""
        t = self.tables
        params: Dict[str, Any] = {"q": vector_literal(qvec), "ids": sorted(set(ids))}
        if not params["ids"]:
            return {}, [self.generation()]
        join, where = t._filtered("l", filters, params)
        sql = (
            f"SELECT l.node_id, 1 - (l.embedding <=> %(q)s::vector), (SELECT gen FROM {t._name(t.gen)}) "
            f"FROM {t._name(t.lists[UNITS_LIST])} l{join} "
            f"WHERE l.node_id = ANY(%(ids)s::varchar[]){where.replace(' WHERE ', ' AND ', 1)}"
        )
        rows = t._fetch(sql, params)
        return {nid: float(s) for nid, s, _ in rows}, [int(g) for *_, g in rows] or [self.generation()]

    def facts(
        self,
        qvec: np.ndarray,
        ids: Sequence[str],
        keys: Sequence[str],
        filters: Optional[MetadataFilters] = None,
    ) -> Tuple[Dict[str, Tuple[float, Dict[str, Any]]], List[int]]:
        """For each unit of ``ids`` passing ``filters``: its cosine to ``qvec`` (computed by the
        database) and the values of metadata ``keys``; and the write counter, in one statement."""
        t = self.tables
        params: Dict[str, Any] = {"q": vector_literal(qvec), "ids": sorted(set(ids))}
        where = ""
        if filters is not None:
            cond, values = filter_sql(filters, "t.metadata_")
            params.update(values)
            where = f" AND {cond}"
        params.update({f"k{i}": k for i, k in enumerate(keys)})
        values = ", ".join(f"%(k{i})s::text, x.m -> %(k{i})s::text" for i in range(len(keys)))
        # by the index on the node id expression (the planner would scan the table: it does not know
        # that reading a row's JSON metadata costs more than an index probe); each row's metadata parsed
        # once (a JSON key lookup parses the whole text: twice for two keys)
        sql = (
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; "
            f"SELECT {_nid('t.')} AS nid, 1 - (t.embedding <=> %(q)s::vector) AS s, json_build_object({values}) AS m, "
            f"(SELECT gen FROM {t._name(t.gen)}) AS gen "
            f"FROM {t._name(t.table)} t CROSS JOIN LATERAL (SELECT t.metadata_::jsonb AS m) x "
            f"WHERE {_nid('t.')} = ANY(%(ids)s::text[]){where}"
        )
        out: Dict[str, Tuple[float, Dict[str, Any]]] = {}
        seen: List[int] = []
        if not params["ids"]:
            return out, [self.generation()]
        for nid, s, meta, gen in t._fetch(sql, params):
            out[nid] = (float(s), dict(meta or {}))
            seen.append(int(gen))
        return out, seen or [self.generation()]

    def overlap(self, terms: Sequence[str], filters: Optional[MetadataFilters] = None) -> Tuple[List[str], List[int]]:
        """Every unit passing ``filters`` that holds one or more of ``terms`` (distinct), with how
        many of them it holds, from the list's postings in one statement (ids in no set order)."""
        t = self.tables
        if t.bm25_lists != "postings":
            raise ValueError(f"{self.describe()} keep no postings tables ({t.bm25_lists}); a term overlap needs them.")
        params: Dict[str, Any] = {"terms": sorted(set(terms))}
        if not params["terms"]:
            return [], []
        join, where = t._filtered("p", filters, params)
        cond = "p.term = ANY(%(terms)s::text[])"
        where = f" WHERE {cond}" if not where else f"{where} AND {cond}"
        rows = t._fetch(
            "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off; "
            f"SELECT p.node_id, count(*) FROM {t._name(t.postings[UNITS_LIST])} p{join}{where} GROUP BY p.node_id",
            params,
        )
        return [nid for nid, _ in rows], [int(c) for _, c in rows]

    def vectors(self, ids: Sequence[str]) -> Dict[str, np.ndarray]:
        """The stored float32 vector of each unit of ``ids`` (those the list holds), read from the
        list's own table: no text, no JSON metadata."""
        t = self.tables
        if not ids:
            return {}
        rows = t._fetch(
            f"SELECT node_id, embedding::real[] FROM {t._name(t.lists[UNITS_LIST])} "
            "WHERE node_id = ANY(%(ids)s::varchar[])",
            {"ids": list(ids)},
        )
        return {nid: np.asarray(v, dtype=np.float32) for nid, v in rows}

    def passing(self, ids: Sequence[str], filters: MetadataFilters) -> set:
        """The units of ``ids`` whose rows pass ``filters`` (by the index on the node id)."""
        t = self.tables
        cond, params = filter_sql(filters, "t.metadata_")
        params = {**params, "ids": sorted(set(ids))}
        if not params["ids"]:
            return set()
        sql = (
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; "
            f"SELECT {_nid('t.')} FROM {t._name(t.table)} t WHERE {_nid('t.')} = ANY(%(ids)s::text[]) AND {cond}"
        )
        return {nid for (nid,) in t._fetch(sql, params)}

    def doc_freq(self, terms: Sequence[str]) -> Dict[str, int]:
        """The units holding each of ``terms`` (terms no unit holds are left out)."""
        t = self.tables
        rows = t._fetch(
            f"SELECT term, df FROM {t._name(t.df)} WHERE g = {UNITS_LIST} AND term = ANY(%(terms)s::text[]) AND df > 0",
            {"terms": sorted(set(terms))},
        )
        return {term: int(df) for term, df in rows}

    def count(self) -> int:
        """The units in the list."""
        t = self.tables
        rows = t._fetch(f"SELECT n FROM {t._name(t.stats)} WHERE g = {UNITS_LIST}", {})
        return int(rows[0][0]) if rows else 0

    def idf(self, terms: Sequence[str]) -> Dict[str, float]:
        """Lucene idf ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the units of each of ``terms``
        that occurs in them (the in-memory ``SparseExpert.idf``)."""
        t = self.tables
        rows = t._fetch(
            f"SELECT d.term, ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) FROM {t._name(t.df)} d "
            f"JOIN {t._name(t.stats)} s ON s.g = d.g WHERE d.g = {UNITS_LIST} AND d.term = ANY(%(terms)s::text[]) "
            "AND d.df > 0",
            {"terms": sorted(set(terms))},
        )
        return {term: float(v) for term, v in rows}


__all__ = ["UNITS_LIST", "ServedUnits"]
