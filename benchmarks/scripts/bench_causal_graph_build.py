"""Benchmark: build a CausalGraphIndex, print per-stage cost, gate statistics and load time.

Offline (no LLM), full HolisQA biology:
    flock /tmp/bench.lock python benchmarks/scripts/bench_causal_graph_build.py \
        --path /work/shared/datasets/holisqa/biology --persist-dir /tmp/cg_bio

With a local llama.cpp model on the first 100 articles (run twice: the second build must
make zero LLM calls), alone under the LLM lock:
    OMP_WAIT_POLICY=PASSIVE flock /tmp/llm.lock python benchmarks/scripts/bench_causal_graph_build.py --limit 100 \
        --gguf ~/.cache/causalrag-llm/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf --n-threads 2 \
        --cache-dir /tmp/cg_llm_cache --cache-jsonl benchmarks/llm_runs/bio100_llm_cache.jsonl
That build takes hours; --cache-jsonl keeps its answers in one file (kept in git) so that it
resumes on a new machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", default="/work/shared/datasets/holisqa/biology")
    ap.add_argument("--limit", type=int, default=None, help="first N articles only")
    ap.add_argument("--persist-dir", default="/tmp/cg_bench_index")
    ap.add_argument("--gguf", default=None, help="build with a local llama.cpp model (LLM extractor/summaries/judge)")
    ap.add_argument("--n-threads", type=int, default=1)
    ap.add_argument("--cache-dir", default=None, help="LLM answer cache")
    ap.add_argument(
        "--cache-jsonl",
        default=None,
        help="one-file copy of the LLM answer cache: read into --cache-dir before the build, "
        "written back after it, also when the build is stopped (a build longer than one "
        "machine's life resumes from it on the next)",
    )
    ap.add_argument("--progress", action="store_true")
    ap.add_argument(
        "--estimate-only",
        action="store_true",
        help="print CausalGraphIndex.estimate() and stop (with a fresh --cache-dir and no "
        "--cache-jsonl: the prediction before anything is spent)",
    )
    ap.add_argument(
        "--max-entities",
        type=int,
        default=8,
        help="LLM extractor: entities asked for per unit (the package default, 15, overruns a "
        "1.5B model's answer length)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=512, help="LLM answer length cap")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from causalrag_bench.loaders import load_dataset
    from llama_index_ext_causalrag.causal_graph import CausalGraphIndex, LLMEntityExtractor, LLMGateJudge
    from llama_index_ext_causalrag.embeddings.defaults import default_embed_model
    from llama_index_ext_causalrag.llm.cache import LLMCache

    ds = load_dataset("holisqa", args.path)
    docs = ds.documents[: args.limit] if args.limit else ds.documents
    chars = sum(len(d.text) for d in docs)
    print(f"corpus: {len(docs)} documents, {chars} characters")
    llm = None
    if args.gguf:
        from causalrag_bench.local_llm import (
            chatml_llama_cpp,
        )  # examples/local_llm.py: first-token logprobs, no logits_all

        llm = chatml_llama_cpp(args.gguf, args.n_threads, max_new_tokens=args.max_new_tokens)
    extractor = judge = None
    if llm is not None:
        extractor = LLMEntityExtractor(llm, max_entities=args.max_entities, cache_dir=args.cache_dir)
        # P(yes) comes from the first token; the cap stops a verbose reason
        judge = LLMGateJudge(llm, cache_dir=args.cache_dir, max_answer_tokens=32)
    embed = default_embed_model()
    cache = LLMCache(args.cache_dir)  # the directory the build uses (the package default without --cache-dir)
    if args.cache_jsonl and Path(args.cache_jsonl).exists():
        print(f"cache: {cache.import_jsonl(args.cache_jsonl)} answer(s) read from {args.cache_jsonl}")
    if llm is not None:
        est = CausalGraphIndex.estimate(docs, llm=llm, extractor=extractor, cache_dir=args.cache_dir)
        print("estimate:", json.dumps(est))
    if args.estimate_only:
        return

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped build still saves its answers
    t0 = time.perf_counter()
    try:
        idx = CausalGraphIndex.from_documents(
            docs,
            llm=llm,
            embed_model=embed,
            extractor=extractor,
            gate_judge=judge,
            show_progress=args.progress,
            cache_dir=args.cache_dir,
        )
    finally:
        if args.cache_jsonl:
            print(f"cache: {cache.export_jsonl(args.cache_jsonl)} answer(s) written to {args.cache_jsonl}")
        paid = print_spent(cache) if llm is not None else 0
    build_s = time.perf_counter() - t0
    st = idx.build_stats
    print(f"\nbuild: {build_s:.1f} s total; {st['units']} units, {st['sentences']} sentences")
    print("graph:", json.dumps(st["graph"]))
    print(
        "\n| stage | seconds | LLM calls | cache hits | failures | prompt tok | completion tok |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for k, s in st["cost"].items():
        print(
            f"| {k} | {s['seconds']:.1f} | {s['calls']} | {s['cache_hits']} | {s['failures']} "
            f"| {s['prompt_tokens']} | {s['completion_tokens']} |"
        )
    g = st["gates"]
    print(
        "\n| level | modules | possible pairs | distant pairs | skipped (ancestor gated) | judged | gates |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for lvl, s in sorted(g["per_level"].items(), key=lambda kv: -int(kv[0])):
        print(
            f"| H{lvl} | {s['modules']} | {s['possible_pairs']} | {s['distant_pairs']} "
            f"| {s['skipped_by_ancestor_gate']} | {s['judged']} | {s['gates']} |"
        )
    print(f"| all | | {g['possible_pairs']} | | | {g['judged']} | {g['gates']} |")
    print(f"judged / possible = {100 * g['judged_share']:.2f}% (target <= 5%)")
    print(f"LLM calls: {st['llm_calls']}")
    for m in st["messages"]:
        print("message:", m)

    idx.persist(args.persist_dir)
    t1 = time.perf_counter()
    loaded = CausalGraphIndex.from_persist_dir(args.persist_dir)
    load_s = time.perf_counter() - t1
    same = (
        loaded.graph.to_dict() == idx.graph.to_dict()
        and np.array_equal(loaded.entity_embeddings, idx.entity_embeddings)
        and np.array_equal(loaded.module_embeddings, idx.module_embeddings)
        and [u.node_id for u in loaded.units] == [u.node_id for u in idx.units]
    )
    print(f"\nload from disk: {load_s:.2f} s; round trip equal: {same}")
    if llm is not None:
        print(
            f"ledger: {paid} LLM calls over all runs of this cache; estimate at this "
            f"run's start {est['total_calls']} (extraction re-priced from the cache, summaries and judgements "
            f"predicted as if none were cached; for the pre-spend estimate run --estimate-only on an empty "
            f"--cache-dir)"
        )


def print_spent(cache) -> int:
    """What filling the cache cost, over every run (also stopped ones) recorded in its ledger;
    returns the number of calls."""
    spent = cache.spent()
    print("\nLLM calls paid for by this cache, all runs (ledger):")
    print("| stage | calls | prompt tok | completion tok | LLM seconds |\n|---|---:|---:|---:|---:|")
    for k, s in spent.items():
        print(f"| {k} | {s['calls']} | {s['prompt_tokens']} | {s['completion_tokens']} | {s['seconds']:.0f} |")
    tot = {f: sum(s[f] for s in spent.values()) for f in ("calls", "prompt_tokens", "completion_tokens", "seconds")}
    print(
        f"| all | {tot['calls']} | {tot['prompt_tokens']} | {tot['completion_tokens']} | {tot['seconds']:.0f} |",
        flush=True,
    )
    return tot["calls"]


if __name__ == "__main__":
    main()
