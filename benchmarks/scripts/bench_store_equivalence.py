"""Each index in memory and in PostgreSQL, in one process: are the results the same?

For every index (``umgp`` and ``causalrag2`` on HolisQA, ``standards`` on QUIC by default) the
script builds the bench's in-memory row and its store-backed twin (``umgp_pg``, ...: the same
index built into PostgreSQL with exact search, then reopened from the stores with
``from_vector_store``), asks both every question as the bench does and prints: the share of
questions with identical top-10 ids in the same order, the share with identical budget-fitted
contexts, the largest absolute score difference of a node both returned, CR@512 and CR@1024 of
both (``runner.score_question``), and for each question that differs the first differing rank
and the two ids there. The PostgreSQL 16 + pgvector server is started in a temporary folder and
stopped at exit (``pip install -e ".[postgres]"``). Document embeddings come from the bench's
embedding cache; the in-memory CausalRAG2 index is built afresh (not read from the bench's
artifact folder), like its PostgreSQL twin.

    python benchmarks/scripts/bench_store_equivalence.py --dataset holisqa --path $DATA/holisqa/biology \\
        --out benchmarks/results/store_equivalence
    python benchmarks/scripts/bench_store_equivalence.py --dataset quic --path $DATA/ietf_quic_rfcs \\
        --out benchmarks/results/store_equivalence

``--out DIR`` writes ``DIR/results.json``; a run of another dataset is added next to the runs
already there (the same dataset and folder replaces its run), so both commands above fill one
table: ``python -m causalrag_bench.tables`` writes it into docs/stores.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from causalrag_bench.cli import display_command, provenance_of, write_results
from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
from causalrag_bench.loaders import load_dataset
from causalrag_bench.perf_tables import store_equivalence_table
from causalrag_bench.registry import BenchContext, RowUnavailable
from causalrag_bench.runner import validate_examples
from causalrag_bench.store_equivalence import BUDGETS, DEFAULT_INDEXES, PAIRS, compare_index
from causalrag_bench.types import corpus_subset

SCRIPT = "python benchmarks/scripts/bench_store_equivalence.py"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, choices=sorted(DEFAULT_INDEXES), help="dataset format")
    p.add_argument("--path", required=True, help="dataset folder")
    p.add_argument(
        "--indexes",
        default=None,
        help=f"comma-separated, of {', '.join(PAIRS)} (default: holisqa umgp,causalrag2; quic standards)",
    )
    p.add_argument("--limit", type=int, default=None, help="first N questions only (the whole corpus is indexed)")
    p.add_argument(
        "--corpus-limit",
        type=int,
        default=None,
        help="smoke run: first N questions, corpus cut to their gold documents plus N distractors",
    )
    p.add_argument("--top-k", type=int, default=10, help="nodes each retriever returns (default 10)")
    p.add_argument("--chunk-size", type=int, default=256, help="as causalrag-bench --chunk-size (default 256)")
    p.add_argument("--out", default=None, help="folder for results.json (runs of other datasets in it are kept)")
    p.add_argument("--cache-dir", default=None, help="embedding cache (default: the bench's)")
    p.add_argument(
        "--show-differences", type=int, default=20, help="differing questions printed per index (default 20)"
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def shown_command(argv: List[str]) -> str:
    """The command line with the dataset path as ``$DATA/...`` and a relative ``--out`` kept as given."""
    words, out = list(argv), None
    if "--out" in words:
        i = words.index("--out")
        out = words[i + 1] if i + 1 < len(words) else ""
        del words[i : i + 2]
        out = out if not Path(out).is_absolute() else f"results/{Path(out).name}"
    cmd = display_command(words).replace("causalrag-bench", SCRIPT, 1)
    return cmd + (f" --out {out}" if out is not None else "")


def run_key(dataset: str, path: str, corpus_limit: Optional[int]) -> str:
    return f"{dataset}/{Path(path).resolve().name}" + (f"/corpus_limit_{corpus_limit}" if corpus_limit else "")


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    args = parser().parse_args(argv)
    argv = list(argv if argv is not None else sys.argv[1:])
    indexes = [s.strip() for s in (args.indexes or ",".join(DEFAULT_INDEXES[args.dataset])).split(",") if s.strip()]
    try:
        unknown = [i for i in indexes if i not in PAIRS]
        if unknown:
            raise ValueError(f"unknown index(es) {unknown}; choose from: {', '.join(PAIRS)}.")
        dataset = load_dataset(args.dataset, args.path)
        if args.corpus_limit is not None:
            dataset = corpus_subset(dataset, args.corpus_limit)
        examples = validate_examples(dataset, drop_no_gold=True)[: args.limit or None]
        if not examples:
            raise ValueError(f"{args.path}: no questions with gold evidence (limit={args.limit!r}).")
        cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        with tempfile.TemporaryDirectory(prefix="causalrag-equivalence-") as work:
            embed_model = cached_default_embed_model(cache_dir)
            ctx = BenchContext(
                dataset=dataset,
                embed_model=embed_model,
                work_dir=Path(work),
                top_k=args.top_k,
                chunk_size=args.chunk_size,
                show_progress=not args.no_progress,
            )
            print(
                f"{args.dataset} {Path(args.path).name}: {len(examples)} questions, {len(dataset.documents)} documents; "
                f"indexes {', '.join(indexes)}",
                file=sys.stderr,
                flush=True,
            )
            results = [compare_index(ctx, examples, ix, BUDGETS) for ix in indexes]
    except (ValueError, FileNotFoundError, RowUnavailable) as e:
        print(f"bench_store_equivalence: error: {e}", file=sys.stderr)
        return 2
    run: Dict[str, Any] = {
        "dataset": args.dataset,
        "path_name": Path(args.path).resolve().name,
        "command": shown_command(argv),
        "n_questions": len(examples),
        "corpus_size": len(dataset.documents),
        "corpus_limit": args.corpus_limit,
        "budgets": list(BUDGETS),
        "indexes": results,
        # the file keeps runs of earlier processes: each run says where it came from
        "provenance": provenance_of(embed_model, ctx.llm),
    }
    report: Dict[str, Any] = {"runs": {}}
    out = Path(args.out) / "results.json" if args.out else None
    if out is not None and out.exists():
        report = json.loads(out.read_text(encoding="utf-8"))
    report["runs"][run_key(args.dataset, args.path, args.corpus_limit)] = run
    print()
    print(store_equivalence_table({"runs": {"this run": run}}))
    for ix in results:
        shown = ix["differences"][: args.show_differences]
        if shown:
            print(
                f"\n{ix['index']}: {len(ix['differences'])} question(s) differ; first differing rank, "
                f"memory id / PostgreSQL id:"
            )
            for d in shown:
                print(f"  {d['qid']}: rank {d['rank']}: {d['memory_id']} / {d['postgres_id']}")
    if out is not None:
        write_results(out.parent, report, embed_model=embed_model, llm=ctx.llm)
        print(f"{len(report['runs'])} run(s) in it: {', '.join(report['runs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
