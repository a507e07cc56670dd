"""HCQR with a real local LLM (issue 7, LLM part): retrieval metrics of hcqr_llm / hyde / raw
question, answer accuracy with no retrieval, plain retrieval and HCQR context at one budget, and
the DUR of each context with the same LLM as judge.

Heavy: run it alone, under the LLM lock, on both threads when nothing else runs:

    GGUF=$(bash ../shared/tools/local-llm.sh)
    OMP_WAIT_POLICY=PASSIVE flock /tmp/llm.lock python benchmarks/scripts/bench_hcqr_llm.py --gguf "$GGUF" \
        --limit 150 --budget 256 --n-threads 2 --out benchmarks/llm_runs/medmcqa_hcqr

Prints Markdown tables and writes llm_results.json into --out. Resumable: each question is appended
to --out/per_question.jsonl as soon as it is done, and a rerun of the same command skips those.
At about 73 s per question (Qwen2.5-Coder-1.5B Q4, 2 threads) 150 questions outlast one working
session on a machine that starts empty, so the log of that run is kept in git under
benchmarks/llm_runs/ (ids, metrics, answer letters and judge labels; no dataset or generated text).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore

from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
from causalrag_bench.loaders import load_dataset
from causalrag_bench.registry import BenchContext, available
from causalrag_bench.runner import score_question
from llama_index_ext_causalrag.hypothesis import DecisionUsefulnessEvaluator
from llama_index_ext_causalrag.hypothesis.options import format_options
from llama_index_ext_causalrag.text.tokens import cut_to_budget

# Same prefix as the DUR judge prompt ("Context:\n...\n\nQuestion: ...\nOptions:\n...\n"), so the
# judge call right after the answer call reuses llama.cpp's cached prefix.
ANSWER_PROMPT = PromptTemplate(
    "{context_block}Question: {question}\nOptions:\n{options_str}\n"
    "Reply with the letter of the correct option only.\nAnswer:"
)


def context_text(nodes: List[NodeWithScore], budget: int) -> str:
    parts = []
    for nws, frac in cut_to_budget(nodes, budget):
        text = nws.node.get_content(metadata_mode=MetadataMode.NONE)
        parts.append(text[: max(1, int(len(text) * frac))])
    return "\n\n".join(parts)


def answer_letter(llm: LLM, question: str, options: Dict[str, str], context: Optional[str]) -> Optional[str]:
    """The option letter the LLM picks (a short completion, parsed; None if it names no letter)."""
    block = f"Context:\n{context}\n\n" if context else ""
    prompt = ANSWER_PROMPT.format(context_block=block, question=question, options_str=format_options(options))
    reply = llm.complete(prompt, max_tokens=4).text  # four tokens are enough for a letter
    m = re.search(r"\b([A-H])\b", reply.strip().upper())
    return m.group(1) if m else None


RETRIEVAL = ("q_raw", "hyde", "hcqr_llm")  # --retrievers; add fusion_llm (LlamaIndex QueryFusionRetriever)
ANSWERED = ("q_raw", "hyde", "hcqr_llm")  # contexts given to the answerer and the DUR judge


def run(ctx: BenchContext, limit: int, budget: int, out: Optional[Path], retrieval=RETRIEVAL) -> Dict[str, Any]:
    """One pass per question: every retriever once, then answers and DUR labels on those contexts."""
    ds, llm = ctx.dataset, ctx.llm
    assert llm is not None
    examples = [e for e in ds.examples if e.gold][:limit]
    judge = DecisionUsefulnessEvaluator(llm=llm)
    specs = available()
    retrievers = {n: specs[n].build(ctx) for n in retrieval}
    per_q: List[Dict[str, Any]] = []
    log = None
    if out is not None:  # resumable: questions already in per_question.jsonl are not asked again
        out.mkdir(parents=True, exist_ok=True)
        log_path = out / "per_question.jsonl"
        if log_path.exists():
            wanted = {e.qid for e in examples}
            per_q = [
                r
                for r in map(json.loads, log_path.read_text(encoding="utf-8").splitlines())
                if r.get("budget") == budget and r["qid"] in wanted
            ]
            print(f"resuming: {len(per_q)} question(s) already in {log_path}")
        log = log_path.open("a", encoding="utf-8")
    done = {r["qid"] for r in per_q}
    t_start = time.perf_counter()
    for ex in examples:
        if ex.qid in done:
            continue
        opts, gold = ex.metadata["options"], ex.metadata["answer"]
        row: Dict[str, Any] = {
            "qid": ex.qid,
            "budget": budget,
            "gold": gold,
            "metrics": {},
            "seconds": {},
            "answer": {},
            "dur": {},
        }
        t = time.perf_counter()
        row["answer"]["none"] = answer_letter(llm, ex.question, opts, None)
        row["seconds"]["answer_none"] = time.perf_counter() - t
        for name, r in retrievers.items():
            t = time.perf_counter()
            nodes = r.retrieve_example(ex)[: ctx.top_k]
            row["seconds"][name] = time.perf_counter() - t
            row["metrics"][name] = score_question(nodes, ex, ds, [budget])
            if name == "hcqr_llm":
                plan = r.last_plan
                row["planner"] = plan.metadata["planner"]  # "llm", or "offline" after malformed output twice
                # The option the plan bets on; the query text stays out of the log, which is kept in git.
                row["hcqr_plan"] = {
                    "working_option": plan.metadata["hypothesis"].get("working_option"),
                    "n_queries": len(plan.queries),
                }
            if name not in ANSWERED:
                continue
            text = context_text(nodes, budget)
            t = time.perf_counter()
            row["answer"][name] = answer_letter(llm, ex.question, opts, text)
            res = judge.evaluate(query=ex.question, contexts=[text], reference=gold, options=opts)
            row["seconds"][f"judge_{name}"] = time.perf_counter() - t
            row["dur"][name] = DecisionUsefulnessEvaluator.label_of(res)
            row.setdefault("p_useful", {})[name] = res.p_decision_useful  # None without logprobs
        per_q.append(row)
        if log is not None:
            log.write(json.dumps(row) + "\n")
            log.flush()
        acc = {k: sum(r["answer"].get(k) == r["gold"] for r in per_q) for k in ("none",) + ANSWERED}
        print(f"{len(per_q)}/{len(examples)} {time.perf_counter() - t_start:.0f}s correct {acc}", flush=True)
    result = summarize(per_q, budget)
    print(format_tables(result))
    if out is not None:
        (out / "llm_results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def summarize(per_q: List[Dict[str, Any]], budget: int) -> Dict[str, Any]:
    n = len(per_q)
    names = [m for m in per_q[0]["metrics"] if all(m in r["metrics"] for r in per_q)] if per_q else []
    keys = list(per_q[0]["metrics"][names[0]]) if names else []
    retrieval = {name: {k: round(sum(r["metrics"][name][k] for r in per_q) / n, 3) for k in keys} for name in names}
    seconds = (
        {k: round(sum(r["seconds"].get(k, 0.0) for r in per_q) / n, 2) for k in per_q[0]["seconds"]} if per_q else {}
    )
    accuracy = {k: _pct([r["answer"].get(k) == r["gold"] for r in per_q]) for k in ("none",) + ANSWERED}
    dur = {}
    for k in ANSWERED:
        labels = [r["dur"].get(k) for r in per_q]
        dur[k] = {lab: sum(x == lab for x in labels) for lab in ("entailed", "useful", "not_useful")}
        dur[k]["unparsed"] = sum(x is None for x in labels)
        dur[k]["dur"] = round(100.0 * (dur[k]["entailed"] + dur[k]["useful"]) / n, 1)
    # Does the judge track the evidence? DUR and accuracy split by whether the context holds gold text.
    cr = f"CR@{budget}"
    by_gold = {}
    for k in ANSWERED:
        split = {
            "gold_in_context": [r for r in per_q if r["metrics"][k][cr] > 0],
            "gold_not_in_context": [r for r in per_q if r["metrics"][k][cr] == 0],
        }
        by_gold[k] = {
            part: {
                "n": len(rs),
                "dur": _pct([r["dur"].get(k) in ("entailed", "useful") for r in rs]),
                "accuracy": _pct([r["answer"].get(k) == r["gold"] for r in rs]),
            }
            for part, rs in split.items()
        }
        by_gold[k]["p_useful_auc"] = _auc(
            [r["p_useful"][k] for r in split["gold_in_context"] if (r.get("p_useful") or {}).get(k) is not None],
            [r["p_useful"][k] for r in split["gold_not_in_context"] if (r.get("p_useful") or {}).get(k) is not None],
        )
    planners = {p: sum(r.get("planner") == p for r in per_q) for p in ("llm", "offline")}
    planned = [r for r in per_q if r.get("hcqr_plan")]
    right = [r for r in planned if r["hcqr_plan"]["working_option"] == r["gold"]]
    wrong = [r for r in planned if r["hcqr_plan"]["working_option"] != r["gold"]]
    working = {
        "n": len(planned),
        "working_option_correct": len(right),
        "hcqr_accuracy_if_right": _pct([r["answer"].get("hcqr_llm") == r["gold"] for r in right]),
        "hcqr_accuracy_if_wrong": _pct([r["answer"].get("hcqr_llm") == r["gold"] for r in wrong]),
    }
    return {
        "n": n,
        "budget": budget,
        "retrieval": retrieval,
        "seconds_per_question": seconds,
        "hcqr_planner": planners,
        "hcqr_working_answer": working,
        "by_gold_in_context": by_gold,
        "accuracy": accuracy,
        "dur": dur,
    }


def _pct(hits: List[bool]) -> Optional[float]:
    """Share of true values in percent, one decimal; None for no values."""
    return round(100.0 * sum(hits) / len(hits), 1) if hits else None


def _auc(pos: List[float], neg: List[float]) -> Optional[float]:
    """P(score of a random positive > a random negative), ties count half; None if a side is empty."""
    if not pos or not neg:
        return None
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return round(wins / (len(pos) * len(neg)), 3)


def format_tables(result: Dict[str, Any]) -> str:
    cr = f"CR@{result['budget']}"
    lines = [
        f"n = {result['n']}, budget {result['budget']} tokens, HCQR planner used {result.get('hcqr_planner')}",
        f"HCQR working answer: {result.get('hcqr_working_answer')}",
        "",
        f"| retriever | R@1 | R@5 | MRR@10 | {cr} | s/question |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in result["retrieval"].items():
        lines.append(
            f"| {name} | {m['R@1']:.1f} | {m['R@5']:.1f} | {m['MRR@10']:.3f} | {m[cr]:.1f} "
            f"| {result['seconds_per_question'].get(name, 0):.1f} |"
        )
    lines += [
        "",
        "| context | answer accuracy % | DUR % | entailed / useful / not useful / unparsed |",
        "|---|---|---|---|",
        f"| none | {result['accuracy']['none']} | - | - |",
    ]
    for k in ANSWERED:
        d = result["dur"][k]
        lines.append(
            f"| {k} | {result['accuracy'][k]} | {d['dur']} "
            f"| {d['entailed']} / {d['useful']} / {d['not_useful']} / {d['unparsed']} |"
        )
    lines += [
        "",
        "| context | gold text in context: n / DUR % / accuracy % | not in context: n / DUR % / accuracy % "
        "| AUC of the judge's P(entailed or useful), gold in vs not |",
        "|---|---|---|---|",
    ]
    for k, parts in result["by_gold_in_context"].items():
        cells = [
            f"{parts[p]['n']} / {parts[p]['dur']} / {parts[p]['accuracy']}"
            for p in ("gold_in_context", "gold_not_in_context")
        ]
        lines.append(f"| {k} | {cells[0]} | {cells[1]} | {parts['p_useful_auc']} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, help="GGUF path printed by ../shared/tools/local-llm.sh")
    p.add_argument("--path", default="/work/shared/datasets/mirage_medical_mcqa/medmcqa/dev.jsonl")
    p.add_argument("--limit", type=int, default=150)
    p.add_argument("--budget", type=int, default=256)
    p.add_argument("--n-threads", type=int, default=1)
    p.add_argument(
        "--retrievers",
        default=",".join(RETRIEVAL),
        help="comma-separated; q_raw, hyde and hcqr_llm are always answered and judged",
    )
    p.add_argument("--out", default="/tmp/results/medmcqa_llm")
    a = p.parse_args()
    from causalrag_bench.local_llm import chatml_llama_cpp  # needs llama-cpp-python

    ds = load_dataset("medmcqa", a.path)
    cache = default_cache_dir()
    ctx = BenchContext(
        dataset=ds,
        embed_model=cached_default_embed_model(cache),
        work_dir=cache / "bench" / "medmcqa" / Path(a.path).resolve().name,
        llm=chatml_llama_cpp(a.gguf, a.n_threads, max_new_tokens=160),
    )
    retrieval = tuple(dict.fromkeys(list(ANSWERED) + [n.strip() for n in a.retrievers.split(",") if n.strip()]))
    run(ctx, a.limit, a.budget, Path(a.out), retrieval)


if __name__ == "__main__":
    main()
