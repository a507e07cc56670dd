"""Does a local LLM's P(yes) agree with corpus evidence on which module pairs are causally linked?

Rebuilds the 100-article biology graph from a filled LLM answer cache (no LLM call is made:
every judgement is a cache hit) and puts each pair the LLM judge judged before the offline
evidence judge too. Corpus evidence is not ground truth; it is the one independent signal we
have. Prints the distribution of P(yes), the gates each threshold would make, and AUCs of
P(yes) and of the summary cosine that proposed the pair, against the offline verdicts.

    OMP_WAIT_POLICY=PASSIVE HF_HUB_OFFLINE=1 python benchmarks/scripts/bench_gate_judge_agreement.py \
        --gguf ~/.cache/causalrag-llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        --cache-dir /tmp/cg_agree_cache --cache-jsonl benchmarks/llm_runs/bio100_llm_cache.jsonl
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties count half."""
    pos, neg = scores[labels], scores[~labels]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default="/work/shared/datasets/holisqa/biology")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--gguf", required=True, help="the model that filled the cache (its path is in the cache key)")
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--cache-jsonl", default=None)
    ap.add_argument("--max-entities", type=int, default=8)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.local_llm import chatml_llama_cpp
    from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, LLMEntityExtractor, LLMGateJudge
    from llama_index_ext_causalrag.causal_graph.gates import OfflineGateJudge
    from llama_index_ext_causalrag.embeddings.defaults import default_embed_model
    from llama_index_ext_causalrag.llm.cache import LLMCache

    docs = load_dataset("holisqa", args.path).documents[: args.limit]
    if args.cache_jsonl:
        LLMCache(args.cache_dir).import_jsonl(args.cache_jsonl)
    llm = chatml_llama_cpp(args.gguf, 1, max_new_tokens=512)
    offline = OfflineGateJudge()
    rows = []  # (level, p_yes, cosine, offline yes, cue sentences >= 1)

    class Recording(LLMGateJudge):
        def judge(self, a, b, cos, ctx, cost):
            j = super().judge(a, b, cos, ctx, cost)
            o = offline.judge(a, b, cos, ctx, cost)
            rows.append((a.level, j.score, cos, o.yes, not o.reason.startswith("0 ")))
            return j

    judge = Recording(llm, cache_dir=args.cache_dir, max_answer_tokens=32)
    idx = CausalGraphIndex.from_documents(
        docs,
        llm=llm,
        embed_model=default_embed_model(),
        gate_judge=judge,
        cache_dir=args.cache_dir,
        extractor=LLMEntityExtractor(llm, max_entities=args.max_entities, cache_dir=args.cache_dir),
        show_progress=False,
    )
    calls = idx.build_stats["llm_calls"]
    p = np.array([r[1] for r in rows])
    cos = np.array([r[2] for r in rows])
    off_yes = np.array([r[3] for r in rows])
    any_cue = np.array([r[4] for r in rows])
    print(f"pairs judged: {len(rows)}; LLM calls this run: {calls} (all judgements from the cache)")
    print(f"P(yes) percentiles 10/25/50/75/90: {np.round(np.percentile(p, [10, 25, 50, 75, 90]), 3).tolist()}")
    print("\n| p_yes_threshold | gates | share of judged | offline-yes pairs among them |\n|---:|---:|---:|---:|")
    for t in (0.5, 0.55, 0.6, 0.65, 0.7, 0.8):
        g = p >= t
        print(f"| {t} | {g.sum()} | {100 * g.mean():.1f}% | {off_yes[g].sum()} |")
    print(
        f"\noffline judge says yes to {off_yes.sum()} of the {len(rows)} pairs; "
        f"{any_cue.sum()} have at least one cue sentence linking them"
    )
    print("\n| score | AUC vs offline yes | AUC vs >= 1 cue sentence |\n|---|---:|---:|")
    print(f"| LLM P(yes) | {auc(p, off_yes):.3f} | {auc(p, any_cue):.3f} |")
    print(f"| summary cosine (proposed the pair) | {auc(cos, off_yes):.3f} | {auc(cos, any_cue):.3f} |")


if __name__ == "__main__":
    main()
