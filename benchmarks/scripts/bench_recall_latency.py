"""Latency of ``umgp`` against its recall ablations (issue 46), in one process.

The bench times each row in turn, minutes apart, on a machine shared with other work. This script
builds the bench's rows once (``causalrag_bench.registry``: the same index) and asks every row
every question, rotating which goes first: the p50 of one ``retrieve`` (no budget: the call the
bench times) and of ``retrieve_for_budget`` at each budget, and each p50 over ``umgp``'s.

    python benchmarks/scripts/bench_recall_latency.py --dataset holisqa --path $DATA/holisqa/biology \\
        --out benchmarks/results/umgp_recall_latency_biology
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from causalrag_bench.cli import script_command, write_results
from causalrag_bench.registry import BenchContext, get_spec

ROWS = "umgp,umgp_dprf,umgp_lprf,umgp_docpool,umgp_deep200,umgp_deep300,umgp_cand100,umgp_alloc,umgp_alloc_queryfit"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--rows", default=ROWS, help="registered rows, umgp first")
    p.add_argument("--budgets", default="128,256,512,1024")
    p.add_argument("--limit", type=int, default=200, help="first N questions with gold evidence")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset

    budgets = [int(b) for b in args.budgets.split(",")]
    names = args.rows.split(",")
    dataset = load_dataset(args.dataset, args.path)
    ctx = BenchContext(
        dataset=dataset,
        embed_model=cached_default_embed_model(default_cache_dir()),
        work_dir=default_cache_dir() / "bench" / args.dataset,
        top_k=10,
        chunk_size=256,
        show_progress=False,
    )
    retrievers = {n: get_spec(n).build(ctx) for n in names}
    questions = [e.question for e in dataset.examples if e.gold][: args.limit]
    times: Dict[str, List[float]] = {f"{n}{part}": [] for n in names for part in ("", "_fit")}
    for i, q in enumerate(questions):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            r: Any = retrievers[name]
            t = time.perf_counter()
            r.retrieve(q)
            times[name].append(1000.0 * (time.perf_counter() - t))
            t = time.perf_counter()
            for b in budgets:
                r.retrieve_for_budget(q, b)
            times[f"{name}_fit"].append(1000.0 * (time.perf_counter() - t))
    base = statistics.median(times[names[0]])
    rows = [
        {
            "retriever": n,
            "p50_ms": round(statistics.median(times[n]), 2),
            "p50_refit_ms": round(statistics.median(times[f"{n}_fit"]), 2),
            "over_umgp": round(statistics.median(times[n]) / base, 3),
        }
        for n in names
    ]
    for row in rows:
        print(row)
    report = {
        "dataset": dataset.name,
        "n_questions": len(questions),
        "budgets": budgets,
        "rows": rows,
        "command": script_command("bench_recall_latency.py", list(argv if argv is not None else sys.argv[1:])),
    }
    write_results(args.out, report, embed_model=ctx.embed_model, llm=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
