"""Probe for issue 35, item 2: UMGP with promotion only to parents of at most ``cap`` tokens.

The ``umgp`` row's index and fusion, with a parent-promotion step whose docstore holds only the
parents of at most ``cap`` tokens (a fine hit whose parent is longer stays itself; overlap
skipping and budget fitting as in ``umgp``). ``cap`` 0: no promotion at all. Scored by the bench's
loop (``runner.run_retriever``: ``retrieve_for_budget`` at each budget), beside ``umgp``, ``bm25``
and ``rrf`` of the same run. Exploratory: no library change, nothing registered for the bench.

    python benchmarks/scripts/probe_umgp_parent_cap.py --dataset graphrag_bench --path $DATA/graphrag_bench \\
        --caps 0,512 --group-by type
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.storage.docstore import SimpleDocumentStore

from causalrag_bench.registry import BenchContext, register_retriever
from causalrag_bench.runner import run_retriever, validate_examples
from causalrag_bench.umg import index_for
from llama_index_ext_causalrag.multigranularity.windows import N_TOKENS_KEY
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever


def capped_umgp(ctx: BenchContext, cap: int) -> PostprocessedRetriever:
    """``umgp`` whose promotion sees only parents of at most ``cap`` tokens."""
    index = index_for(ctx)
    parents = SimpleDocumentStore()
    parents.add_documents([u for u in index.units if u.child_nodes and int(u.metadata[N_TOKENS_KEY]) <= cap])
    c = index.config
    fusion = index.as_fusion_retriever(
        similarity_top_k=c.candidates,
        candidates_per_list=c.candidates_per_list,
        weighting=c.weighting,
        length_exponent=c.length_exponent,
    )
    return PostprocessedRetriever(fusion, [index.as_postprocessor(docstore=parents, top_n=ctx.top_k)])


def parent_tokens(ctx: BenchContext) -> Dict[str, float]:
    """Token length of the index's parents (units with children): quantiles."""
    t = np.asarray([int(u.metadata[N_TOKENS_KEY]) for u in index_for(ctx).units if u.child_nodes])
    return {"parents": int(t.size), **{f"p{q}": float(np.percentile(t, q)) for q in (10, 50, 90)}}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, choices=("graphrag_bench", "holisqa"))
    ap.add_argument("--path", required=True)
    ap.add_argument("--caps", default="0,512", help="parent token caps, comma-separated")
    ap.add_argument("--group-by", default=None)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    logging.getLogger("llama_index_ext_causalrag.multigranularity.promotion").setLevel(logging.ERROR)
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset

    dataset = load_dataset(args.dataset, args.path)
    ctx = BenchContext(
        dataset=dataset,
        embed_model=cached_default_embed_model(default_cache_dir()),
        work_dir=default_cache_dir() / "bench" / args.dataset / Path(args.path).resolve().name,
    )
    names: List[str] = ["bm25", "rrf", "umgp"]
    for cap in [int(c) for c in args.caps.split(",") if c.strip()]:
        name = f"umgp_cap{cap}"
        register_retriever(name, f"umgp, promotion only to parents of at most {cap} tokens")(
            lambda c, cap=cap: capped_umgp(c, cap)
        )
        names.append(name)
    examples = validate_examples(dataset, drop_no_gold=True)[: args.limit or None]
    print(f"{dataset.name} {Path(args.path).name}: {len(examples)} questions; parent tokens {parent_tokens(ctx)}")
    results = [run_retriever(n, ctx, examples, (256, 512, 1024), args.group_by) for n in names]
    groups: List[Any] = [None] + sorted({q.group for q in results[0].questions if q.group is not None})
    for g in groups:
        print(f"\n{g or 'all'}")
        for r in results:
            s = r.summary(g)
            print(
                f"  {r.name:14s} n={s['n']:4d} "
                + " ".join(f"CR@{b} {s['metrics'][f'CR@{b}']:.1f}" for b in (256, 512, 1024))
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
