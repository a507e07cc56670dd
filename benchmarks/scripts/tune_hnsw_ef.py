"""Choose ``HNSW.ef_search`` on a development set: a store-backed MultiGranularityIndex with HNSW
indexes on its per-granularity tables, against the in-memory index (exact search), per ef_search.

Builds the dataset into PostgreSQL once (``ann=HNSW()``), then for each ``--ef`` value asks every
question as the bench does and reports: questions with the in-memory index's top-10 (ids, in
order), questions with all of its budget-fitted contexts (``retrieve_for_budget`` at each budget),
CR@B of both, and p50 of one ``retrieve``. HolisQA biology is a development set.

    python benchmarks/scripts/tune_hnsw_ef.py --path $DATA/holisqa/biology --ef 200,400,700,1000 \\
        --out benchmarks/results/hnsw_ef
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

SCRIPT = "python benchmarks/scripts/tune_hnsw_ef.py"
BUDGETS = (256, 512, 1024)


def server_prefix() -> str:
    """The environment the run's server came from, as the command must set it again."""
    from causalrag_bench.pgserver import SERVER_ENV

    server = os.environ.get(SERVER_ENV)
    return f"{SERVER_ENV}={server} " if server else ""


def server_version(url: str) -> str:
    import psycopg2

    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SHOW server_version")
        return cur.fetchone()[0]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HolisQA domain folder (a development set)")
    p.add_argument("--ef", default="200,400,700,1000", help="ef_search values, comma-separated")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench.cli import display_command, write_results
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.pgserver import pg_stores, server_url
    from causalrag_bench.runner import score_question
    from llama_index_ext_causalrag import MultiGranularityIndex
    from llama_index_ext_causalrag.multigranularity import HNSW

    ds = load_dataset("holisqa", args.path)
    model = cached_default_embed_model()
    memory = MultiGranularityIndex.from_documents(ds.documents, embed_model=model)
    url = server_url(SCRIPT)
    s = pg_stores(url, "tune_hnsw", 384)
    MultiGranularityIndex.from_documents(
        ds.documents, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore, ann=HNSW()
    )
    s2 = pg_stores(url, "tune_hnsw", 384)
    index = MultiGranularityIndex.from_vector_store(s2.vector_store, s2.docstore, kvstore=s2.kvstore, embed_model=model)

    def ask(retriever: Any, question: str) -> Any:
        t = time.perf_counter()
        top = retriever.retrieve(question)
        ms = 1000.0 * (time.perf_counter() - t)
        return top, {b: retriever.retrieve_for_budget(question, b) for b in BUDGETS}, ms

    def ids(nodes: Any) -> List[str]:
        return [n.node.node_id for n in nodes]

    exact = {ex.qid: ask(memory.as_retriever(similarity_top_k=10), ex.question) for ex in ds.examples}
    runs: List[Dict[str, Any]] = []
    cr_exact = {
        b: statistics.fmean(
            score_question(t, ex, ds, BUDGETS, bud)[f"CR@{b}"] for ex in ds.examples for t, bud, _ in [exact[ex.qid]]
        )
        for b in BUDGETS
    }
    for ef in [int(x) for x in args.ef.split(",")]:
        index._backend.tables.ann = HNSW(ef_search=ef)
        retriever = index.as_retriever(similarity_top_k=10)
        same_top = same_budgeted = 0
        lat: List[float] = []
        cr: Dict[int, List[float]] = {b: [] for b in BUDGETS}
        for ex in ds.examples:
            top, budgeted, ms = ask(retriever, ex.question)
            lat.append(ms)
            m = score_question(top, ex, ds, BUDGETS, budgeted)
            for b in BUDGETS:
                cr[b].append(m[f"CR@{b}"])
            want_top, want_budgeted, _ = exact[ex.qid]
            same_top += ids(top) == ids(want_top)
            same_budgeted += all(ids(budgeted[b]) == ids(want_budgeted[b]) for b in BUDGETS)
        run = {
            "ef_search": ef,
            "identical_top10": same_top,
            "identical_budgeted": same_budgeted,
            "cr": {str(b): statistics.fmean(cr[b]) for b in BUDGETS},
            "p50_ms": statistics.median(lat),
        }
        runs.append(run)
        print(
            f"ef_search {ef}: identical top-10 {same_top}/{len(ds.examples)}, identical budget-fitted contexts "
            f"{same_budgeted}/{len(ds.examples)}, CR "
            + ", ".join(f"@{b} {run['cr'][str(b)]:.2f}" for b in BUDGETS)
            + " (exact "
            + ", ".join(f"{cr_exact[b]:.2f}" for b in BUDGETS)
            + f"), p50 {run['p50_ms']:.1f} ms",
            flush=True,
        )
    report = {
        "dataset": "holisqa",
        "path_name": Path(args.path).name,
        "n_questions": len(ds.examples),
        "budgets": list(BUDGETS),
        "exact_cr": {str(b): v for b, v in cr_exact.items()},
        "memory_p50_ms": statistics.median(ms for _, _, ms in exact.values()),
        "runs": runs,
        "command": server_prefix()
        + display_command(list(sys.argv[1:] if argv is None else argv)).replace("causalrag-bench", SCRIPT, 1),
        "postgres": server_version(url),
    }
    if args.out:
        write_results(args.out, report, embed_model=model, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
