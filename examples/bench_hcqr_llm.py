"""HCQR with a real local LLM (issue 7, LLM part): retrieval metrics of hcqr_llm / hyde / raw
question, answer accuracy with no retrieval, plain retrieval and HCQR context at one budget, and
the DUR of each context with the same LLM as judge.

Heavy: run it alone, under the bench lock, with one thread:

    GGUF=$(bash ../shared/tools/local-llm.sh)
    flock /tmp/bench.lock python examples/bench_hcqr_llm.py --gguf "$GGUF" --limit 150 --budget 512

Prints Markdown tables and writes results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore

from llama_index_ext_causalrag.eval.embedding_cache import cached_default_embed_model, default_cache_dir
from llama_index_ext_causalrag.eval.loaders import load_dataset
from llama_index_ext_causalrag.eval.registry import BenchContext, available
from llama_index_ext_causalrag.eval.runner import markdown_table, run_bench
from llama_index_ext_causalrag.hypothesis import DecisionUsefulnessEvaluator
from llama_index_ext_causalrag.hypothesis.text import format_options
from llama_index_ext_causalrag.tokens import cut_to_budget

ANSWER_PROMPT = PromptTemplate(
    "{context_block}Question: {question}\nOptions:\n{options_str}\n"
    "Reply with the letter of the correct option only.\nAnswer:"
)


def chatml_llm(gguf: str, n_threads: int = 1) -> LLM:
    from llama_index.llms.llama_cpp import LlamaCPP

    def completion_to_prompt(c: str) -> str:
        return f"<|im_start|>user\n{c}<|im_end|>\n<|im_start|>assistant\n"

    return LlamaCPP(
        model_path=gguf,
        temperature=0.0,
        max_new_tokens=256,
        context_window=4096,
        completion_to_prompt=completion_to_prompt,
        model_kwargs={"n_threads": n_threads, "n_ctx": 4096},
        verbose=False,
    )


def context_text(nodes: List[NodeWithScore], budget: int) -> str:
    parts = []
    for nws, frac in cut_to_budget(nodes, budget):
        text = nws.node.get_content(metadata_mode=MetadataMode.NONE)
        parts.append(text[: max(1, int(len(text) * frac))])
    return "\n\n".join(parts)


def answer_letter(llm: LLM, question: str, options: Dict[str, str], context: Optional[str]) -> Optional[str]:
    block = f"Context:\n{context}\n\n" if context else ""
    reply = llm.predict(ANSWER_PROMPT, context_block=block, question=question, options_str=format_options(options))
    m = re.search(r"\b([A-H])\b", reply.strip().upper())
    return m.group(1) if m else None


def run(ctx: BenchContext, limit: int, budget: int, out: Optional[Path]) -> Dict[str, Any]:
    ds, llm = ctx.dataset, ctx.llm
    assert llm is not None
    names = ["q_raw", "hyde", "hcqr_llm"]
    report = run_bench(ds, names, ctx, budgets=(budget,), out_dir=out, limit=limit)
    examples = [e for e in ds.examples if e.gold][:limit]
    judge = DecisionUsefulnessEvaluator(llm=llm)
    specs = available()
    retrievers = {n: specs[n].build(ctx) for n in ("q_raw", "hcqr_llm")}
    acc: Dict[str, int] = {"no_retrieval": 0, "q_raw": 0, "hcqr_llm": 0}
    evals: Dict[str, list] = {"q_raw": [], "hcqr_llm": []}
    for ex in examples:
        opts, gold = ex.metadata["options"], ex.metadata["answer"]
        acc["no_retrieval"] += answer_letter(llm, ex.question, opts, None) == gold
        for name, r in retrievers.items():
            ctx_text = context_text(r.retrieve_example(ex), budget)
            acc[name] += answer_letter(llm, ex.question, opts, ctx_text) == gold
            evals[name].append(judge.evaluate(query=ex.question, contexts=[ctx_text], reference=gold, options=opts))
    n = len(examples)
    result = {
        "retrieval": report["rows"],
        "accuracy": {k: round(100.0 * v / n, 1) for k, v in acc.items()},
        "dur": {k: DecisionUsefulnessEvaluator.decision_useful_rate(v) for k, v in evals.items()},
        "n": n,
        "budget": budget,
    }
    print(markdown_table(report["rows"], (budget,)))
    print("\n| context | accuracy % | DUR % |\n|---|---|---|")
    print(f"| none | {result['accuracy']['no_retrieval']} | - |")
    for k in ("q_raw", "hcqr_llm"):
        print(f"| {k} | {result['accuracy'][k]} | {100 * result['dur'][k]['dur']:.1f} |")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "llm_results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, help="GGUF path printed by ../shared/tools/local-llm.sh")
    p.add_argument("--path", default="/work/shared/datasets/mirage_medical_mcqa/medmcqa/dev.jsonl")
    p.add_argument("--limit", type=int, default=150)
    p.add_argument("--budget", type=int, default=512)
    p.add_argument("--n-threads", type=int, default=1)
    p.add_argument("--out", default="/tmp/results/medmcqa_llm")
    a = p.parse_args()
    ds = load_dataset("medmcqa", a.path)
    cache = default_cache_dir()
    ctx = BenchContext(
        dataset=ds,
        embed_model=cached_default_embed_model(cache),
        work_dir=cache / "bench" / "medmcqa" / Path(a.path).resolve().name,
        llm=chatml_llm(a.gguf, a.n_threads),
    )
    run(ctx, a.limit, a.budget, Path(a.out))


if __name__ == "__main__":
    main()
