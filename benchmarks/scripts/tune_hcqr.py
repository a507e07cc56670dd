"""Grid search of HCQR's fusion settings on MedMCQA dev with the offline planner (dev data only).

Each question is planned and searched once per planner setting (the four lists, top 10 each);
a grid point then costs only the library's fusion of those lists. For each point it prints R@1, R@5
and MRR@10 of the four-list fusion and of its four leave-one-out ablations, and marks the
points where every list helps (no ablation above the full fusion on any of the three metrics).

    python benchmarks/scripts/tune_hcqr.py --path $DATA/mirage_medical_mcqa/medmcqa/dev.jsonl \
        --out benchmarks/results/hcqr_tuning

Writes --out/results.json (every grid point, its ablations, and the settings chosen).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from llama_index.core.schema import NodeWithScore

from causalrag_bench.cli import script_command, write_results
from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
from causalrag_bench.hypothesis import _base, _options, _planner_retriever
from causalrag_bench.loaders import load_dataset
from causalrag_bench.registry import BenchContext
from causalrag_bench.runner import score_question
from llama_index_ext_causalrag.embeddings.query import QueryEmbedder
from llama_index_ext_causalrag.hypothesis import HypothesisQueryTransform, HypothesisRetriever
from llama_index_ext_causalrag.hypothesis.presets import HypothesisConfig
from llama_index_ext_causalrag.hypothesis.state import ALL_ROLES, QUERY_ROLES

METRICS = ("R@1", "R@5", "MRR@10")


def _floats(text: str) -> List[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _mean(rows: Sequence[Dict[str, float]]) -> Dict[str, float]:
    return {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in METRICS}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", required=True, help="MedMCQA dev.jsonl")
    ap.add_argument("--rrf-k", default="5,10,20,40,60", help="RRF constants to try")
    ap.add_argument("--original-weight", default="1,1.5,2,3", help="weights of the 'original' list to try")
    ap.add_argument("--per-query-k", default="3,5,10", help="nodes taken from each list")
    ap.add_argument(
        "--role-weights", default="1:1:1", help="space-separated support:distinguish:key_features RRF weights to try"
    )
    ap.add_argument("--limit", type=int, default=None, help="first N questions (smoke runs)")
    ap.add_argument("--out", default=None, help="folder for results.json")
    args = ap.parse_args(argv)

    dataset = load_dataset("medmcqa", args.path)
    cache_dir = default_cache_dir()
    ctx = BenchContext(
        dataset=dataset,
        embed_model=cached_default_embed_model(cache_dir),
        work_dir=cache_dir / "bench" / "medmcqa" / Path(args.path).resolve().name,
    )
    examples = [e for e in dataset.examples if e.gold][: args.limit or None]
    base, scorer = _base(ctx), _planner_retriever(ctx)
    transform = HypothesisQueryTransform(retriever=scorer)  # unused by the fusion; built once

    t0 = time.perf_counter()
    searched: Dict[bool, List[Tuple[Any, Dict[str, List[NodeWithScore]]]]] = {}
    for option_terms in (True, False):
        hr = HypothesisRetriever.from_defaults(
            base, scoring_retriever=scorer, preset=HypothesisConfig(option_terms=option_terms)
        )
        searched[option_terms] = []
        for ex in examples:
            embedder = QueryEmbedder(hr._embed_model)
            plan = hr.plan(ex.question, _options(ex), embedder)
            lists = [base.retrieve(q) for q in hr._queries(plan, embedder)]
            searched[option_terms].append((plan, dict(zip(ALL_ROLES, lists))))
    print(f"{len(examples)} questions planned and searched in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    def evaluate(
        option_terms: bool, rrf_k: float, weight: float, per_k: int, roles: Tuple[float, ...], use: Tuple[str, ...]
    ) -> Dict[str, float]:
        hr = HypothesisRetriever(
            base,
            transform=transform,
            role_weights=dict(zip(QUERY_ROLES, roles)),
            preset=HypothesisConfig(
                use_queries=use, original_weight=weight, option_terms=option_terms, per_query_k=per_k, rrf_k=rrf_k
            ),
        )
        rows = []
        for ex, (plan, lists) in zip(examples, searched[option_terms]):
            nodes = hr._fuse(plan, [lists[r] for r in hr.use_queries])
            rows.append(score_question(nodes, ex, dataset, budgets=()))
        return _mean(rows)

    points = []
    grid = itertools.product(
        (True, False),
        _floats(args.rrf_k),
        _floats(args.original_weight),
        [int(v) for v in _floats(args.per_query_k)],
        [tuple(float(w) for w in t.split(":")) for t in args.role_weights.split()],
    )
    for option_terms, rrf_k, weight, per_k, roles in grid:
        full = evaluate(option_terms, rrf_k, weight, per_k, roles, ALL_ROLES)
        ablations = {
            f"no_{r}": evaluate(option_terms, rrf_k, weight, per_k, roles, tuple(x for x in ALL_ROLES if x != r))
            for r in ALL_ROLES
        }
        every_list_helps = all(a[m] <= full[m] for a in ablations.values() for m in METRICS)
        point = {
            "option_terms": option_terms,
            "rrf_k": rrf_k,
            "original_weight": weight,
            "per_query_k": per_k,
            "role_weights": dict(zip(QUERY_ROLES, roles)),
            "full": full,
            "ablations": ablations,
            "every_list_helps": every_list_helps,
        }
        points.append(point)
        worst = max(ablations.items(), key=lambda kv: kv[1]["R@1"])
        print(
            f"terms={option_terms!s:5} k={rrf_k:>4g} w={weight:>3g} per_k={per_k:>2} roles={roles}  "
            f"R@1 {full['R@1']:6.2f} R@5 {full['R@5']:6.2f} MRR {full['MRR@10']:.4f}  "
            f"best ablation {worst[0]} R@1 {worst[1]['R@1']:6.2f}  {'every list helps' if every_list_helps else ''}",
            flush=True,
        )

    eligible = [p for p in points if p["every_list_helps"]] or points
    best = max(eligible, key=lambda p: (p["full"]["R@1"], p["full"]["R@5"], p["full"]["MRR@10"]))
    print(
        f"chosen: {json.dumps({k: best[k] for k in ('option_terms', 'rrf_k', 'original_weight', 'per_query_k', 'role_weights')})} "
        f"{best['full']}"
    )
    if args.out:
        write_results(
            args.out,
            {
                "dataset": "medmcqa",
                "path": args.path,
                "n_questions": len(examples),
                "command": script_command("tune_hcqr.py", list(argv or sys.argv[1:])),
                "points": points,
                "chosen": best,
            },
            embed_model=ctx.embed_model,
            llm=None,
        )  # the offline planner
    return 0


if __name__ == "__main__":
    sys.exit(main())
