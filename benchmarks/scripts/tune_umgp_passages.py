"""Choose ``whole_document_tokens`` of the ``umgp_passages`` bench row on the development sets.

Builds ``MultiGranularityIndex.from_documents(docs, parser=MultiGranularityNodeParser(
whole_document_tokens=N))`` once per N ("none": the default parser) and scores
``index.as_retriever(**variant)`` with the bench's metrics (PR@2/PR@5, nDCG@10/PR@100 or CR@B);
prints one JSON line per (N, variant). MiniLM from the bench's embedding cache.

    python benchmarks/scripts/tune_umgp_passages.py hotpotqa 128,192,256,none
    python benchmarks/scripts/tune_umgp_passages.py 2wiki 256 '{"cpl30": {"candidates_per_list": 30}}'
"""

import json
import os
import sys
import time

import numpy as np

from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
from causalrag_bench.loaders import load_dataset
from causalrag_bench.runner import score_question, validate_examples
from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

D = os.environ.get("DATA", "../shared/datasets")
SETS = {
    "hotpotqa": ("hipporag", f"{D}/multihop/hotpotqa.json", []),
    "2wiki": ("hipporag", f"{D}/multihop/2wikimultihopqa.json", []),
    "musique": ("hipporag", f"{D}/multihop/musique.json", []),
    "scifact": ("beir", f"{D}/beir_scifact", []),
    "biology": ("holisqa", f"{D}/holisqa/biology", [256, 512, 1024]),
}
KEYS = ["PR@2", "PR@5", "nDCG@10", "PR@100", "CR@256", "CR@512", "CR@1024"]


def evaluate(retr, ds, exs, budgets):
    acc = {}
    for ex in exs:
        nodes = retr.retrieve(ex.question)
        budgeted = {b: retr.retrieve_for_budget(ex.question, b) for b in budgets} if budgets else None
        for k, v in score_question(nodes, ex, ds, budgets, budgeted).items():
            acc.setdefault(k, []).append(v)
    return {k: round(float(np.mean(v)), 2) for k, v in acc.items() if k in KEYS}


def main():
    name = sys.argv[1]
    builds = sys.argv[2].split(",")  # whole-doc limits: none | 256 | big
    variants = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {"default": {}}
    kind, path, budgets = SETS[name]
    ds = load_dataset(kind, path)
    exs = validate_examples(ds, True)
    if os.environ.get("LIMIT"):
        exs = exs[: int(os.environ["LIMIT"])]
    em = cached_default_embed_model(default_cache_dir())
    for b in builds:
        from llama_index_ext_causalrag.multigranularity.windows import MultiGranularityNodeParser

        parser = MultiGranularityNodeParser(
            granularities=(2, 4, 8, 16, 32),
            parent_granularity=32,
            whole_document_tokens=None if b == "none" else int(b),
        )
        t = time.time()
        idx = MultiGranularityIndex.from_documents(
            ds.documents, embed_model=em, embedding_mode="sentences", parser=parser
        )
        bt = time.time() - t
        for vn, ov in variants.items():
            t = time.time()
            r = idx.as_retriever(similarity_top_k=100 if kind == "beir" else 10, **ov)
            m = evaluate(r, ds, exs, budgets)
            print(
                json.dumps(
                    {
                        "set": name,
                        "build": b,
                        "variant": vn,
                        **m,
                        "build_s": round(bt),
                        "eval_s": round(time.time() - t),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
