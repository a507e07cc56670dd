"""Store-neutral settings and threads of served candidate lists.

:class:`HNSW` and :class:`IVF` are the approximate searches a store-backed index asks of its
store (``ann=``; ``None`` means exact search): HNSW is pgvector's HNSW index on PostgreSQL and
Milvus's on Milvus Standalone or Distributed; IVF is Milvus's ``IVF_FLAT`` (PostgreSQL refuses
it). Each store's driver translates them; :func:`ann_from_params` reads the one an index
recorded. :func:`list_executor` holds the threads that wait on a query's list statements or
searches.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional, Union

from llama_index_ext_causalrag.validation import caller


@dataclass(frozen=True)
class HNSW:
    """Approximate search on each list: the store's HNSW index (``m``,
    ``ef_construction``), queried with ``hnsw.ef_search = ef_search``, raised to the number of
    candidates a list asks for where it is lower (HNSW returns at most ``ef_search`` rows)."""

    m: int = 16
    ef_construction: int = 64
    # HolisQA biology (development): on PostgreSQL 16, every budget-fitted context as exact search's; on 18, 419/421
    # (at 116, a list's depth: 393/421, CR within 0.13, but at 100x the corpus, among near-equal copies, CR@512 67.7
    # against 79.2 at 400 and 83.4 exact, for the same p50)
    ef_search: int = 400

    def __post_init__(self) -> None:
        for name, value, low in (
            ("m", self.m, 2),
            ("ef_construction", self.ef_construction, 4),
            ("ef_search", self.ef_search, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 1000:
                raise ValueError(f"HNSW {name} must be an int in [{low}, 1000], got {value!r}.")

    def params(self) -> Dict[str, int]:
        return asdict(self)

    def built_with(self) -> str:
        """The settings fixed at the build (the others may change at a reopen)."""
        return f"HNSW(m={self.m}, ef_construction={self.ef_construction})"

    @staticmethod
    def check_arg(ann: Any) -> None:
        """``ann`` is None, an :class:`HNSW` or an :class:`IVF` (else a ``TypeError`` naming the
        public call, :func:`caller`)."""
        if ann is not None and not isinstance(ann, (HNSW, IVF)):
            raise TypeError(
                f"{caller('ann')}: ann must be None (exact search), HNSW(m=..., ef_construction=..., ef_search=...) "
                f"or IVF(nlist=..., nprobe=...), got {ann!r}."
            )

    @staticmethod
    def for_reopen(ann: Optional["ANN"], params: Mapping[str, Any], where: str) -> Optional["ANN"]:
        """The approximate search a reopened index uses: the build's (recorded in ``params``), or
        ``ann`` where it changes the search-time setting only (``ef_search``, ``nprobe``); another
        index (kind, ``m``, ``ef_construction``, ``nlist``) is a ``ValueError``."""
        built = ann_from_params(params.get("ann"))
        if ann is not None and (built is None or ann.built_with() != built.built_with()):
            fix = (
                "None (exact search; an approximate index needs a rebuild with ann=...)"
                if built is None
                else f"{built.built_with()} with the {built.search_setting()} you want, or None"
            )
            raise ValueError(
                f"{caller('from_vector_store')}: the index in {where} was built with "
                f"{built.built_with() if built else 'exact search (ann=None)'}, got ann={ann!r}; a reopen may change "
                f"the search setting only (ef_search, nprobe): pass {fix}."
            )
        return ann or built

    @staticmethod
    def search_setting() -> str:
        return "ef_search"


@dataclass(frozen=True)
class IVF:
    """Approximate search on each list: an inverted-file index (Milvus's ``IVF_FLAT``): k-means
    parts the rows into ``nlist`` clusters at the index's build, and a query scans the ``nprobe``
    clusters whose centroids are nearest it (``nprobe = nlist``: every row, exact). Milvus
    Standalone and Distributed build it per sealed segment; Milvus Lite (2.5) accepts it, searches
    a collection of fewer than 100,000 rows exactly and a larger one with its server's own
    ``nlist`` and ``nprobe``, not these (measured: docs/stores.md). PostgreSQL refuses it (use
    :class:`HNSW`)."""

    nlist: int = 1024
    nprobe: int = 32

    def __post_init__(self) -> None:
        for name, value, high in (("nlist", self.nlist, 65536), ("nprobe", self.nprobe, 65536)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
                raise ValueError(f"IVF {name} must be an int in [1, {high}], got {value!r}.")
        if self.nprobe > self.nlist:
            raise ValueError(
                f"IVF nprobe={self.nprobe} exceeds nlist={self.nlist} (a query scans at most every cluster); "
                f"pass nprobe <= {self.nlist}."
            )

    def params(self) -> Dict[str, Any]:
        return {"kind": "ivf", **asdict(self)}

    def built_with(self) -> str:
        return f"IVF(nlist={self.nlist})"

    @staticmethod
    def search_setting() -> str:
        return "nprobe"


ANN = Union[HNSW, IVF]


def ann_from_params(params: Optional[Mapping[str, Any]]) -> Optional[ANN]:
    """The approximate search an index recorded (``ANN.params()``; an HNSW's carries no kind)."""
    if not params:
        return None
    kind = params.get("kind", "hnsw")
    rest = {k: v for k, v in params.items() if k != "kind"}
    if kind == "ivf":
        return IVF(**rest)
    if kind == "hnsw":
        return HNSW(**rest)
    raise ValueError(f"the index records ann kind {kind!r}, which this version does not know; upgrade the package.")


_EXECUTOR: Optional[ThreadPoolExecutor] = None
_EXECUTOR_LOCK = threading.Lock()


def list_executor() -> ThreadPoolExecutor:
    """The threads that wait on the lists' statements or searches (they wait on the network,
    holding no GIL): PostgreSQL's two statements a query, Milvus's ten searches."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=12, thread_name_prefix="causalrag-lists")
        return _EXECUTOR


__all__ = ["ANN", "HNSW", "IVF", "ann_from_params", "list_executor"]
