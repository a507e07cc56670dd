"""The terms of a :class:`CausalGraphIndex`'s text units, as a query's lexical score reads them.

``lex(q, u)``, the share of the query's distinct terms found in unit u's text
(:func:`~.expansion.lexical_overlap`, ``terms_of`` terms), comes from one of two sources with one
interface (:meth:`lexical`, :meth:`doc_freq`):

* :class:`TermPostings`: term -> unit positions, in the process (an in-memory index; a
  store-backed index whose store serves no terms, saved in its kvstore as ``unit_terms.json`` and
  ``unit_postings.npy``).
* :class:`ServedTerms`: the store's postings (PostgreSQL: :meth:`StoreDriver.served_terms
  <llama_index_ext_causalrag.storage.drivers.StoreDriver.served_terms>`, the ``"served"`` tables'
  postings of one list, kept by triggers in the same transactions as the vector-store rows, which
  carry each unit's distinct terms in their metadata, :func:`term_rows`). A query sends one
  statement: the units holding any of its terms and how many, ``filters`` inside; the process
  holds no posting.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.causal_graph.expansion import lexical_overlap
from llama_index_ext_causalrag.storage.drivers import driver_for_layout
from llama_index_ext_causalrag.storage.terms import LIST_KEY, with_terms

POSTINGS_FILE = "unit_postings.npy"
TERMS_FILE = "unit_terms.json"
SERVED_LIST = 1  # the served list a unit's row is written to (one list: the units)


class TermPostings(Mapping[str, np.ndarray]):
    """term -> the unit positions whose text holds it (ascending int32), stored as one CSR pair:
    ``rows`` (every posting) and ``offsets`` (term i's postings are ``rows[offsets[i]:offsets[i+1]]``).
    Memory: 4 bytes a (unit, distinct term) pair plus one dict entry per term."""

    def __init__(self, terms: Sequence[str], offsets: np.ndarray, rows: np.ndarray) -> None:
        self.terms = list(terms)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int32)
        if self.offsets.shape != (len(self.terms) + 1,) or (self.offsets.size and self.offsets[-1] != self.rows.size):
            raise ValueError(
                f"unit postings do not match their terms ({len(self.terms)} terms, "
                f"{self.offsets.size} offsets, {self.rows.size} rows); rebuild the index."
            )
        self._at = {t: i for i, t in enumerate(self.terms)}

    @classmethod
    def from_texts(cls, texts: Sequence[str], terms_of: Callable[[str], Set[str]]) -> "TermPostings":
        inv: Dict[str, List[int]] = defaultdict(list)
        for i, t in enumerate(texts):
            for term in terms_of(t):
                inv[term].append(i)
        terms = sorted(inv)
        sizes = np.fromiter((len(inv[t]) for t in terms), dtype=np.int64, count=len(terms))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.fromiter((i for t in terms for i in inv[t]), dtype=np.int32, count=int(offsets[-1]))
        return cls(terms, offsets, rows)

    def __getitem__(self, term: str) -> np.ndarray:
        i = self._at[term]
        return self.rows[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    def lexical(self, query_terms: Sequence[str], n: int, filters: Optional[MetadataFilters] = None) -> np.ndarray:
        """``lex(q, u)`` of every unit position (n,): :func:`lexical_overlap` (``filters`` are the
        caller's to apply: every unit scored)."""
        return lexical_overlap(query_terms, self, n)

    def doc_freq(self, terms: Sequence[str]) -> Dict[str, int]:
        """The units holding each of ``terms`` (terms no unit holds are left out)."""
        return {t: int(self.offsets[self._at[t] + 1] - self.offsets[self._at[t]]) for t in set(terms) if t in self._at}

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.offsets.nbytes)

    def save(self, w: Any) -> None:
        """Into the folder of an ``IndexWriter``: ``unit_terms.json`` and ``unit_postings.npy``."""
        w.write_json(TERMS_FILE, {"terms": self.terms, "offsets": self.offsets.tolist()}, ensure_ascii=False)
        w.save_array(POSTINGS_FILE, self.rows)

    @classmethod
    def load(cls, persisted: Any) -> "Optional[TermPostings]":
        """The postings a folder holds (None: written by a version without them)."""
        if not (persisted.has(TERMS_FILE) and persisted.has(POSTINGS_FILE)):
            return None
        meta = persisted.json(TERMS_FILE)
        return cls(meta["terms"], np.asarray(meta["offsets"], dtype=np.int64), persisted.array(POSTINGS_FILE))


class ServedTerms:
    """The units' terms in the store: ``served`` (the driver's ``ServedUnits``) answers which units
    hold a query's terms; ``pos`` maps a node id to its position in this state (rows of units
    another index object added since are not in it, and are left out)."""

    nbytes = 0  # no posting in the process

    def __init__(self, served: Any, pos: Mapping[str, int]) -> None:
        self.served, self.pos = served, pos

    def lexical(self, query_terms: Sequence[str], n: int, filters: Optional[MetadataFilters] = None) -> np.ndarray:
        """``lex(q, u)`` of every unit position (n,), 0 for units outside ``filters`` (their scores
        are -inf whatever it is): the in-memory :func:`lexical_overlap`, bit for bit."""
        terms = sorted(set(query_terms))
        out = np.zeros(n, dtype=np.float64)
        if not terms or n == 0:
            return out
        ids, counts = self.served.overlap(terms, filters)
        at = [(self.pos.get(i), c) for i, c in zip(ids, counts)]
        known = [(p, c) for p, c in at if p is not None and p < n]
        if known:
            pos, cnt = zip(*known)
            out[np.asarray(pos, dtype=np.int64)] = np.asarray(cnt, dtype=np.float64)
        return out / len(terms)

    def doc_freq(self, terms: Sequence[str]) -> Dict[str, int]:
        return self.served.doc_freq(terms)


def term_rows(units: Sequence[BaseNode], terms_of: Callable[[str], Set[str]]) -> List[BaseNode]:
    """The vector-store rows of ``units`` for a store serving their terms: each with its distinct
    ``terms_of`` terms in its metadata (:func:`~llama_index_ext_causalrag.storage.terms.with_terms`)."""
    return [
        with_terms(u, sorted(terms_of(u.get_content(metadata_mode=MetadataMode.NONE))), {LIST_KEY: SERVED_LIST})
        for u in units
    ]


def open_served_terms(vector_store: Any, p: Mapping[str, Any], where: str, owner: str) -> Any:
    """The served terms of an index built where the store served them (parameters ``p``, recorded
    in ``where``), checked to be all there; a ``ValueError`` naming the fix if ``vector_store``
    cannot serve them."""
    driver = driver_for_layout(str(p["store_layout"]))
    served = driver.served_terms(vector_store, int(p["embed_dim"]), dict(p["served"]))
    if served is None:
        raise ValueError(
            f"{owner}: the units' terms of the index in {where} are served by the store ({p['store_layout']!r}); "
            f"pass the vector store it was built into, got {type(vector_store).__name__}."
        )
    served.check_open(where)
    return served


__all__ = [
    "POSTINGS_FILE",
    "SERVED_LIST",
    "ServedTerms",
    "TERMS_FILE",
    "TermPostings",
    "open_served_terms",
    "term_rows",
]
