"""Latency of ``umgp`` against ``umgp_queryfit`` (``fit_evidence="query"``), in one process.

The bench times each row in turn, so rows run minutes apart and a machine shared with other
work moves their p50 by more than a fitting step costs. This script builds the bench's ``umgp``
index once and asks both retrievers every question, alternating which goes first: the p50 of one
``retrieve`` (no budget: the call the bench times) and of ``retrieve_for_budget`` at each budget
(each a fitting step).

    python benchmarks/scripts/bench_fit_latency.py --dataset graphrag_bench --path $DATA/graphrag_bench \\
        --out benchmarks/results/umgp_fit_latency_graphrag
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from causalrag_bench.cli import script_command, write_results
from causalrag_bench.registry import BenchContext
from causalrag_bench.umg import index_for

ROWS = {"umgp": {}, "umgp_queryfit": {"fit_evidence": "query"}}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--budgets", default="128,256,512,1024")
    p.add_argument("--limit", type=int, default=300, help="first N questions with gold evidence")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset

    budgets = [int(b) for b in args.budgets.split(",")]
    dataset = load_dataset(args.dataset, args.path)
    ctx = BenchContext(
        dataset=dataset,
        embed_model=cached_default_embed_model(default_cache_dir()),
        work_dir=default_cache_dir() / "bench" / args.dataset,
        top_k=10,
        chunk_size=256,
        show_progress=False,
    )
    index = index_for(ctx)
    retrievers = {name: index.as_retriever(similarity_top_k=ctx.top_k, **kw) for name, kw in ROWS.items()}
    questions = [e.question for e in dataset.examples if e.gold][: args.limit]
    times: Dict[str, List[float]] = {f"{n}{part}": [] for n in ROWS for part in ("", "_fit")}
    for i, q in enumerate(questions):
        for name in list(ROWS) if i % 2 == 0 else list(ROWS)[::-1]:
            r: Any = retrievers[name]
            t = time.perf_counter()
            r.retrieve(q)
            times[name].append(1000.0 * (time.perf_counter() - t))
            for b in budgets:
                t = time.perf_counter()
                r.retrieve_for_budget(q, b)
                times[f"{name}_fit"].append(1000.0 * (time.perf_counter() - t))
    rows = [
        {
            "retriever": n,
            "p50_ms": round(statistics.median(times[n]), 2),
            "p50_fit_ms": round(statistics.median(times[f"{n}_fit"]), 3),
        }
        for n in ROWS
    ]
    for row in rows:
        print(row)
    report = {
        "dataset": dataset.name,
        "n_questions": len(questions),
        "budgets": budgets,
        "rows": rows,
        "command": script_command("bench_fit_latency.py", list(argv if argv is not None else sys.argv[1:])),
    }
    write_results(args.out, report, embed_model=ctx.embed_model, llm=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
