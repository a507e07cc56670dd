"""Seconds to reopen a store-backed index from PostgreSQL (``from_vector_store``), what an app pays
at start-up. Prints numbers.

Builds HolisQA biology (or ``--path``) into PostgreSQL + pgvector once per index, with the bench's
cached embedder, then reopens it ``--opens`` times from new store objects (new connections) and
prints the median, min and max: ``MultiGranularityIndex`` (its units from the docstore, BM25 from
the kvstore, the per-granularity tables checked) and ``CausalGraphIndex`` (its units, graph and
unit vectors).

    python benchmarks/scripts/bench_pg_open.py --path $DATA/holisqa/biology --opens 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, List

from causalrag_bench.embedding_cache import cached_default_embed_model
from causalrag_bench.loaders import load_dataset
from causalrag_bench.pgserver import pg_stores, server_url
from llama_index_ext_causalrag import CausalGraphIndex, MultiGranularityIndex


def time_opens(url: str, table: str, dim: int, opens: int, reopen: Callable[[Any], Any]) -> List[float]:
    seconds = []
    for _ in range(opens):
        stores = pg_stores(url, table, dim)  # what another process would open
        t = time.perf_counter()
        reopen(stores)
        seconds.append(time.perf_counter() - t)
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HolisQA domain folder")
    p.add_argument("--opens", type=int, default=7, help="reopens per index (default 7)")
    args = p.parse_args()
    docs = load_dataset("holisqa", args.path).documents
    emb = cached_default_embed_model()
    dim = len(emb.get_query_embedding("dimension"))
    url = server_url("bench_pg_open.py")
    for name, cls, kw in (
        ("MultiGranularityIndex", MultiGranularityIndex, {}),
        ("CausalGraphIndex", CausalGraphIndex, {"show_progress": False}),
    ):
        table = f"open_{cls.__name__.lower()}"
        s = pg_stores(url, table, dim)
        index = cls.from_documents(docs, storage_context=s.storage_context(), kvstore=s.kvstore, embed_model=emb, **kw)
        units = len(index.units)
        seconds = time_opens(
            url,
            table,
            dim,
            args.opens,
            lambda st, cls=cls: cls.from_vector_store(
                st.vector_store, st.docstore, kvstore=st.kvstore, embed_model=emb
            ),
        )
        print(
            f"{name}: {units:,} units, reopened {args.opens} times: median {statistics.median(seconds):.2f} s "
            f"(min {min(seconds):.2f}, max {max(seconds):.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
