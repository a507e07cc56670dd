"""Try other fusions of UMGP's lists on the ``umgp_passages`` index (development sets only).

The package's fusion (``"sum"``) mixes ``p = minmax(s) / sum(minmax(s))`` of each list with the weight
``c = 1 - H(p) / log n``. The modes tried here replace, inside this script only (the package is not
changed), the function the fusion retriever calls; promotion, the length penalty and the rest of the
pipeline are the package's. Modes (comma separated):

* ``sum``: the package's fusion;
* ``mm``: min-max scores (not divided by their sum: a flat list is not penalised twice), entropy weights;
* ``sum_cN`` / ``mm_cN``: as ``sum`` / ``mm``, the confidence computed on each list's top N scores;
* ``sum_dwG``: ``sum`` with every dense list's confidence multiplied by G (a fixed dense prior);
* ``rrfK``: reciprocal rank fusion ``1 / (K + rank)`` of every list (equal weights).

Prints one JSON line per (mode, variant) and, with ``--out``, writes them to results.json.

    python benchmarks/scripts/tune_umgp_fusion.py 2wiki sum,mm_c10 --out benchmarks/results/umgp_fusion_tuning_2wiki
    python benchmarks/scripts/tune_umgp_fusion.py biology sum,mm_c10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from llama_index_ext_causalrag.multigranularity import entropy as E
from llama_index_ext_causalrag.multigranularity import retriever as R

D = os.environ.get("DATA", "../shared/datasets")  # as tune_umgp_passages.py
SETS = {
    "hotpotqa": ("hipporag", f"{D}/multihop/hotpotqa.json", []),
    "2wiki": ("hipporag", f"{D}/multihop/2wikimultihopqa.json", []),
    "musique": ("hipporag", f"{D}/multihop/musique.json", []),
    "scifact": ("beir", f"{D}/beir_scifact", []),
    "biology": ("holisqa", f"{D}/holisqa/biology", [256, 512, 1024]),
}
KEYS = ["PR@2", "PR@5", "nDCG@10", "PR@100", "CR@256", "CR@512", "CR@1024"]
PACKAGE_FUSE = E.fuse
MODE = {"name": "sum"}


def minmax(s: np.ndarray) -> np.ndarray:
    lo, hi = float(s.min()), float(s.max())
    return (s - lo) / (hi - lo) if hi - lo > 1e-12 else np.ones_like(s)


def list_values(mode: str, s: np.ndarray, p: np.ndarray) -> np.ndarray:
    if mode.startswith("rrf"):
        ranks = np.empty(len(s))
        ranks[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
        return 1.0 / (float(mode[3:] or 60) + ranks)
    return minmax(s) if mode.startswith("mm") else p


def list_confidence(mode: str, s: np.ndarray, dense: bool) -> float:
    if mode.startswith("rrf"):
        return 1.0
    tail = mode.split("_")[-1]
    top = np.sort(s)[::-1][: int(tail[1:])] if tail.startswith("c") else s
    c = E.confidence(E.expert_distribution(top))
    return c * float(tail[2:]) if tail.startswith("dw") and dense else c


def fuse_mode(candidates, n_units, weighting="entropy", dense_lists=()):
    """The fusion of ``MODE["name"]`` (``sum``: the package's)."""
    mode = MODE["name"]
    if mode == "sum":
        return PACKAGE_FUSE(candidates, n_units, weighting)
    base = PACKAGE_FUSE(candidates, n_units, weighting)
    conf = np.zeros(len(candidates))
    P = np.zeros(n_units)
    vals = []
    for j, ((_, s), p) in enumerate(zip(candidates, base.dists)):
        s = np.asarray(s, dtype=np.float64)
        conf[j] = list_confidence(mode, s, j in dense_lists) if len(s) else 0.0
        vals.append(list_values(mode, s, p) if len(s) else s)
    w = conf / conf.sum() if weighting == "entropy" and conf.sum() > 0 else (conf > 0) / max((conf > 0).sum(), 1)
    for (idx, _), v, wl in zip(candidates, vals, w):
        if len(v):
            np.add.at(P, np.asarray(idx, dtype=np.int64), wl * v)
    P = P / P.sum() if P.sum() > 0 else P
    return E.FusionResult(P=P, confidences=conf, weights=w, dists=base.dists)


def evaluate(retriever, ds, examples, budgets) -> Dict[str, float]:
    from causalrag_bench.runner import score_question

    acc: Dict[str, List[float]] = {}
    for ex in examples:
        nodes = retriever.retrieve(ex.question)
        budgeted = {b: retriever.retrieve_for_budget(ex.question, b) for b in budgets} if budgets else None
        for k, v in score_question(nodes, ex, ds, budgets, budgeted).items():
            acc.setdefault(k, []).append(v)
    return {k: round(float(np.mean(v)), 2) for k, v in acc.items() if k in KEYS}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("set", choices=sorted(SETS))
    p.add_argument("modes", help="comma-separated fusion modes, e.g. sum,mm_c10")
    p.add_argument("--variants", default='{"default": {}}', help="JSON {name: as_retriever overrides}")
    p.add_argument("--whole-document-tokens", type=int, default=None, help="default: the umgp_passages row's")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench import umg
    from causalrag_bench.cli import script_command, write_results
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.runner import validate_examples
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex
    from llama_index_ext_causalrag.multigranularity.windows import DEFAULT_GRANULARITIES, MultiGranularityNodeParser

    kind, path, budgets = SETS[args.set]
    ds = load_dataset(kind, path)
    examples = validate_examples(ds, True)
    em = cached_default_embed_model(default_cache_dir())
    limit = args.whole_document_tokens or umg.PASSAGE_TOKENS
    parser = MultiGranularityNodeParser(
        granularities=DEFAULT_GRANULARITIES, parent_granularity=max(DEFAULT_GRANULARITIES), whole_document_tokens=limit
    )
    index = MultiGranularityIndex.from_documents(
        ds.documents, embed_model=em, embedding_mode="sentences", parser=parser
    )
    dense_lists = {j for j, (e, _) in enumerate(index.as_retriever()._retriever._source.keys) if e == "dense"}
    R.fuse = lambda c, n, weighting="entropy": fuse_mode(c, n, weighting, dense_lists)
    rows = []
    for mode in args.modes.split(","):
        MODE["name"] = mode
        for name, overrides in json.loads(args.variants).items():
            r = index.as_retriever(similarity_top_k=100 if kind == "beir" else 10, **overrides)
            rows.append({"set": args.set, "mode": mode, "variant": name, **evaluate(r, ds, examples, budgets)})
            print(json.dumps(rows[-1]), flush=True)
    R.fuse = PACKAGE_FUSE
    if args.out:
        report = {
            "what": __doc__.split("\n\n")[0],
            "command": script_command("tune_umgp_fusion.py", argv),
            "whole_document_tokens": limit,
            "rows": rows,
        }
        write_results(Path(args.out), report, embed_model=em, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
