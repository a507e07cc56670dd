"""Store-neutral settings and threads of served candidate lists.

:class:`HNSW` is the approximate search a store-backed index asks of its store (pgvector's
HNSW index on PostgreSQL, Milvus's HNSW index on Milvus); ``None`` means exact search. Each
store's driver translates it. :func:`list_executor` holds the threads that wait on a query's
list statements or searches.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Dict, Mapping, Optional

from llama_index_ext_causalrag.validation import caller


@dataclass(frozen=True)
class HNSW:
    """Approximate search on each list: the store's HNSW index (``m``,
    ``ef_construction``), queried with ``hnsw.ef_search = ef_search``, raised to the number of
    candidates a list asks for where it is lower (HNSW returns at most ``ef_search`` rows)."""

    m: int = 16
    ef_construction: int = 64
    ef_search: int = 400  # HolisQA biology (development): every budget-fitted context as exact search's

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

    @classmethod
    def from_params(cls, params: Optional[Mapping[str, Any]]) -> Optional["HNSW"]:
        return cls(**params) if params else None

    @staticmethod
    def check_arg(ann: Any) -> None:
        """``ann`` is None or an :class:`HNSW` (else a ``TypeError`` naming the public call, :func:`caller`)."""
        if ann is not None and not isinstance(ann, HNSW):
            raise TypeError(
                f"{caller('ann')}: ann must be None (exact search) or HNSW(m=..., ef_construction=..., "
                f"ef_search=...), got {ann!r}."
            )

    @staticmethod
    def for_reopen(ann: Optional["HNSW"], params: Mapping[str, Any], where: str) -> Optional["HNSW"]:
        """The HNSW a reopened index uses: the build's (recorded in ``params``), or ``ann`` where it
        changes ``ef_search`` only (another ``m`` or ``ef_construction`` is a ``ValueError``)."""
        owner = caller("from_vector_store")
        built = HNSW.from_params(params.get("ann"))
        if ann is not None and (built is None or (ann.m, ann.ef_construction) != (built.m, built.ef_construction)):
            raise ValueError(
                f"{owner}: the index in {where} was built with {built or 'exact search (ann=None)'}; ann= may change "
                "ef_search only: pass HNSW with the build's m and ef_construction, or None."
            )
        return ann or built


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


__all__ = ["HNSW", "list_executor"]
