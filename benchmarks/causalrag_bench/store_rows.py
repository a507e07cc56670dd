"""Store-backed twins of bench rows (``umgp_pg``, ``umgp_pg_fts``, ``standards_pg``, ``causalrag2_pg``).

Each builds the same index as its in-memory row (same embedder from the BenchContext, same
parameters and preset) into PostgreSQL (``PGVectorStore`` with exact search, i.e. no HNSW
index; ``PostgresDocumentStore``; ``PostgresKVStore``), then reopens it with
``from_vector_store`` from new store objects, as a second process would; the reopened index is
the one measured. The server is this process's (:func:`causalrag_bench.pgserver.server_url`),
started on first use in a temporary folder and stopped at exit. A row's build time counts the
store build and the reopening (document embeddings come from the bench's embedding cache, as
for the in-memory rows).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable

from causalrag_bench import milvusserver, pgserver
from causalrag_bench.registry import BenchContext

logger = logging.getLogger(__name__)

STORE_ROWS = ("umgp_pg", "umgp_pg_hnsw", "umgp_pg_fts", "umgp_milvus", "standards_pg", "causalrag2_pg")


def check_postgres() -> None:
    """The rows' ``check``: the postgres extra is installed (else PostgresUnavailable, naming
    the install command)."""
    pgserver.require_postgres(f"the store-backed rows ({', '.join(STORE_ROWS)})")


def check_milvus() -> None:
    """The Milvus rows' ``check``: the milvus and postgres extras are installed."""
    milvusserver.require_milvus("the Milvus row (umgp_milvus)")
    pgserver.require_postgres("the Milvus row's docstore and kvstore (umgp_milvus)")


def built_and_reopened(
    ctx: BenchContext,
    name: str,
    build: Callable[[pgserver.PGStores], Any],
    reopen: Callable[[pgserver.PGStores], Any],
    hybrid_search: bool = False,
    milvus: bool = False,
) -> Any:
    """``build(stores)`` into fresh tables of this process's server, then ``reopen(stores)`` on
    new store objects over the same tables; the reopened index, built once per run under ``name``.
    ``hybrid_search``: the vector table has PGVectorStore's full-text column; ``milvus``: the
    vectors and every list in collections of this process's Milvus server
    (:mod:`causalrag_bench.milvusserver`), nodes and state in PostgreSQL."""

    def make() -> Any:
        from llama_index_ext_causalrag.storage.persistence import embed_dim

        url = pgserver.server_url(f"the row {name!r}")
        dim = embed_dim(ctx.embed_model)
        table = f"{name}_{uuid.uuid4().hex[:8]}".lower()

        def stores() -> pgserver.PGStores:
            s = pgserver.pg_stores(url, table, dim, hybrid_search=hybrid_search)
            return milvusserver.with_milvus(s, milvusserver.server_uri(f"the row {name!r}"), table) if milvus else s

        t0 = time.perf_counter()
        build(stores())
        t1 = time.perf_counter()
        index = reopen(stores())
        ctx.memo(f"open_s_{name}", lambda: time.perf_counter() - t1)
        logger.warning(
            "%s: built into "
            + ("Milvus + PostgreSQL" if milvus else "PostgreSQL")
            + " (table %s) in %.1f s, reopened from the stores in %.1f s",
            name,
            table,
            t1 - t0,
            time.perf_counter() - t1,
        )
        return index

    return ctx.memo(f"store_index_{name}", make)
