"""Rows a second into PostgreSQL + pgvector: LlamaIndex's ``PGVectorStore.add`` against our
``add_nodes_to_vector_store`` (binary COPY), same rows, same server, one run. Prints numbers.

    python benchmarks/scripts/bench_pg_copy.py --rows 20000 --dim 384
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from llama_index.core.schema import TextNode

from causalrag_bench.pgserver import pg_stores, server_url
from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

WORDS = "cell gene kinase tumour signal receptor membrane enzyme pathway immune".split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    nodes = [TextNode(id_=f"d{i // 50}::s{i}", text=" ".join(rng.choice(WORDS, 40)),
                      metadata={"umg_granularity": 2, "umg_granularity_max": 4}) for i in range(args.rows)]
    emb = rng.normal(size=(args.rows, args.dim)).astype(np.float32)
    url = server_url()
    add_store = pg_stores(url, "bench_add", args.dim, use_jsonb=True).vector_store
    copy_store = pg_stores(url, "bench_copy", args.dim, use_jsonb=True).vector_store
    t = time.perf_counter()
    for s in range(0, args.rows, 256):  # what add_nodes_to_vector_store did before: add() per 256 rows
        add_store.add([n.model_copy(update={"embedding": e.tolist()}) for n, e in zip(nodes[s:s + 256], emb[s:s + 256])])
    t_add = time.perf_counter() - t
    t = time.perf_counter()
    add_nodes_to_vector_store(copy_store, nodes, emb)
    t_copy = time.perf_counter() - t
    print(f"{args.rows} rows of dim {args.dim} (jsonb metadata)")
    print(f"PGVectorStore.add, 256 a batch: {args.rows / t_add:,.0f} rows/s ({t_add:.1f} s)")
    print(f"add_nodes_to_vector_store (binary COPY): {args.rows / t_copy:,.0f} rows/s ({t_copy:.1f} s)")


if __name__ == "__main__":
    main()
