"""Rows a second into PostgreSQL + pgvector, LlamaIndex's path against ours, same rows, same
server, one run. Prints numbers.

Vectors: ``PGVectorStore.add`` against ``add_nodes_to_vector_store`` (binary COPY), and the same
COPY into a table with per-granularity tables whose triggers fill them (what a
``MultiGranularityIndex`` build writes into a ``PGVectorStore``). Docstore:
``PostgresDocumentStore.add_documents(batch_size=1000)`` against ``add_nodes_to_docstore``
(COPY and one upsert), nodes of 50 a document, and whether both wrote the same rows.

    python benchmarks/scripts/bench_pg_copy.py --rows 20000 --dim 384
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import sqlalchemy
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from causalrag_bench.pgserver import driver_url, pg_stores, server_url
from llama_index_ext_causalrag.storage.pg.lists import GranularityTables
from llama_index_ext_causalrag.storage.stores import (
    add_nodes_to_docstore,
    add_nodes_to_vector_store,
)

WORDS = ["cell", "gene", "kinase", "tumour", "signal", "receptor", "membrane", "enzyme", "pathway", "immune"]


def bench_vectors(url: str, nodes: list, dim: int, rng: np.random.Generator) -> None:
    emb = rng.normal(size=(len(nodes), dim)).astype(np.float32)
    add_store = pg_stores(url, "bench_add", dim, use_jsonb=True).vector_store
    copy_store = pg_stores(url, "bench_copy", dim, use_jsonb=True).vector_store
    lists_store = pg_stores(url, "bench_lists", dim, use_jsonb=True).vector_store
    GranularityTables(lists_store, (2, 4), dim).create()
    t = time.perf_counter()
    for s in range(0, len(nodes), 256):  # what add_nodes_to_vector_store did before: add() per 256 rows
        add_store.add(
            [n.model_copy(update={"embedding": e.tolist()}) for n, e in zip(nodes[s : s + 256], emb[s : s + 256])]
        )
    t_add = time.perf_counter() - t
    t = time.perf_counter()
    add_nodes_to_vector_store(copy_store, nodes, emb)
    t_copy = time.perf_counter() - t
    t = time.perf_counter()
    add_nodes_to_vector_store(lists_store, nodes, emb)
    t_lists = time.perf_counter() - t
    print(f"{len(nodes)} rows of dim {dim} (jsonb metadata)")
    print(f"PGVectorStore.add, 256 a batch: {len(nodes) / t_add:,.0f} rows/s ({t_add:.1f} s)")
    print(f"add_nodes_to_vector_store (binary COPY): {len(nodes) / t_copy:,.0f} rows/s ({t_copy:.1f} s)")
    print(
        f"the same COPY, per-granularity tables filled by triggers: {len(nodes) / t_lists:,.0f} rows/s ({t_lists:.1f} s)"
    )


def bench_docstore(url: str, nodes: list) -> None:
    docs = [
        n.model_copy(update={"relationships": {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"d{i // 50}")}})
        for i, n in enumerate(nodes)
    ]  # a build's units point to their document
    theirs, ours = pg_stores(url, "bench_docs_add", 8).docstore, pg_stores(url, "bench_docs_copy", 8).docstore
    for store in (theirs, ours):
        store._kvstore._initialize()  # connect and create the table outside the timing
    t = time.perf_counter()
    theirs.add_documents(docs, allow_update=True, batch_size=1000)
    t_add = time.perf_counter() - t
    t = time.perf_counter()
    add_nodes_to_docstore(ours, docs)
    t_copy = time.perf_counter() - t
    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"))
    with engine.connect() as c:
        rows = [
            c.execute(
                sqlalchemy.text(f"SELECT namespace, key, value::text FROM public.data_{name}_docs ORDER BY 1, 2")
            ).fetchall()
            for name in ("bench_docs_add", "bench_docs_copy")
        ]
    engine.dispose()
    print(
        f"{len(docs)} docstore nodes, {len(docs) // 50 + (len(docs) % 50 > 0)} documents (PostgresDocumentStore, json)"
    )
    print(f"PostgresDocumentStore.add_documents, batch_size=1000: {len(docs) / t_add:,.0f} nodes/s ({t_add:.1f} s)")
    print(f"add_nodes_to_docstore (COPY + upsert): {len(docs) / t_copy:,.0f} nodes/s ({t_copy:.1f} s)")
    print(f"same rows: {rows[0] == rows[1]} ({len(rows[1])} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=384)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    nodes = [
        TextNode(
            id_=f"d{i // 50}::s{i}",
            text=" ".join(rng.choice(WORDS, 40)),
            metadata={"umg_granularity": 2, "umg_granularity_max": 4},
        )
        for i in range(args.rows)
    ]
    url = server_url()
    bench_vectors(url, nodes, args.dim, rng)
    bench_docstore(url, nodes)


if __name__ == "__main__":
    main()
