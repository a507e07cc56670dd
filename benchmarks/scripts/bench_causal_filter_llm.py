"""CausalRAG2's causal filter with a local LLM vs the offline filter vs no filter (issue 6).

The first N HolisQA questions: the same 10 `GatedExpansionRetriever` candidates go to no filter,
to the offline causal-path rule and to the LLM filter; context recall and precision at 512
tokens, LLM calls and seconds per query. Heavy (one LLM call of ~600-900 prompt tokens per
question); run it alone, with one thread. Resumable: each question is appended to
``--out/per_question.jsonl`` and skipped on a rerun.

    GGUF=$(bash ../shared/tools/local-llm.sh)
    flock /tmp/llm.lock python benchmarks/scripts/bench_causal_filter_llm.py --gguf "$GGUF" --limit 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from llama_index.core.schema import QueryBundle

VARIANTS = ("off", "offline", "llm")


def summarize(rows: List[Dict[str, Any]], budget: int) -> str:
    n = len(rows)
    lines = [
        f"{n} questions, budget {budget} tokens",
        "",
        "| filter | CR | P | nodes kept of 10 |",
        "|---|---|---|---|",
    ]
    for k in VARIANTS:
        lines.append(
            f"| {k} | {sum(r[k]['CR'] for r in rows) / n:.1f} | {sum(r[k]['P'] for r in rows) / n:.1f} "
            f"| {sum(r[k]['n'] for r in rows) / n:.1f} |"
        )
    secs = [r["llm"]["s"] for r in rows]
    worse = sum(r["llm"]["CR"] < r["off"]["CR"] for r in rows)
    better = sum(r["llm"]["CR"] > r["off"]["CR"] for r in rows)
    modes = {m: sum(r["llm"]["mode"] == m for r in rows) for m in sorted({str(r["llm"]["mode"]) for r in rows})}
    lines += [
        "",
        f"LLM filter: {sum(r['llm']['calls'] for r in rows) / n:.2f} calls/query, "
        f"{statistics.mean(secs):.1f} s/query mean, {statistics.median(secs):.1f} s p50; "
        f"recall lower than no filter on {worse} questions, higher on {better}; modes {modes}",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--path", default="/work/shared/datasets/holisqa/biology")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--max-text-chars", type=int, default=120, help="item text shown to the LLM per node")
    ap.add_argument("--out", default="/tmp/results/causal_filter_llm")
    a = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from causalrag_bench import causal_graph as bench
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.registry import BenchContext
    from causalrag_bench.runner import score_question
    from llama_index_ext_causalrag.causal_graph.causal_filter import CausalFilterPostprocessor
    from llama_index_ext_causalrag.text.provenance import get_provenance

    sys.path.insert(0, str(Path(__file__).parent))
    from causal_query_engine import local_llm

    ds = load_dataset("holisqa", a.path)
    cache = default_cache_dir()
    ctx = BenchContext(
        dataset=ds,
        embed_model=cached_default_embed_model(cache),
        work_dir=cache / "bench" / "holisqa" / Path(a.path).name,
    )
    base = bench._retriever(ctx, use_filter=False)  # the index the bench builds once and reuses
    filters = {
        "off": None,
        "offline": CausalFilterPostprocessor(),
        "llm": CausalFilterPostprocessor(llm=local_llm(a.gguf, 1), max_text_chars=a.max_text_chars),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "per_question.jsonl"
    rows = [json.loads(x) for x in log_path.read_text().splitlines()] if log_path.exists() else []
    done = {r["qid"] for r in rows}
    with log_path.open("a") as log:
        for i, e in enumerate([e for e in ds.examples if e.gold][: a.limit]):
            if e.qid in done:
                continue
            q = QueryBundle(e.question, embedding=ctx.embed_model.get_query_embedding(e.question))
            nodes = base.retrieve(q)
            row: Dict[str, Any] = {"qid": e.qid, "i": i}
            for k, f in filters.items():
                calls0 = f.stats["calls"] if f is not None else 0
                t = time.perf_counter()
                kept = nodes if f is None else f.postprocess_nodes(nodes, query_bundle=q)
                sc = score_question(kept[: ctx.top_k], e, ds, [a.budget])
                row[k] = {
                    "CR": sc[f"CR@{a.budget}"],
                    "P": sc[f"P@{a.budget}"],
                    "n": len(kept),
                    "s": time.perf_counter() - t,
                    "calls": (f.stats["calls"] - calls0) if f is not None else 0,
                    "mode": get_provenance(kept[0]).get("filter", {}).get("mode") if f is not None and kept else None,
                }
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(i + 1, {k: round(row[k]["CR"], 1) for k in VARIANTS}, f"llm {row['llm']['s']:.0f}s", flush=True)
    print(summarize(rows, a.budget))


if __name__ == "__main__":
    main()
