"""The bench loop: build each retriever once, run every question, score spans, summarise."""

from __future__ import annotations

import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from llama_index.core.schema import MetadataMode, NodeWithScore

from causalrag_bench import metrics as M
from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.types import EvalDataset, EvalExample
from llama_index_ext_causalrag.text.tokens import cut_to_budget, node_tokens, validate_budget

logger = logging.getLogger(__name__)

RECALL_KS = (1, 5, 10)
MRR_K = 10
AP_K = 5
PASSAGE_KS = (2, 5)  # HippoRAG 2's passage recall@2 / @5
NDCG_K = 10  # BEIR's nDCG@10
BEIR_RECALL_K = 100
PASSAGE_COLUMNS = tuple(f"PR@{k}" for k in PASSAGE_KS) + (f"nDCG@{NDCG_K}", f"PR@{BEIR_RECALL_K}")


def node_span(nws: NodeWithScore, dataset: EvalDataset) -> Optional[M.Span]:
    """The character span of a retrieved node in its source document.

    Uses ``ref_doc_id`` and ``start/end_char_idx`` when the text there matches the node's
    text; otherwise (e.g. sentence windows swapped in by a postprocessor) locates the node
    text in the document. ``None`` when the node cannot be placed (it then scores nothing).
    """
    node = nws.node
    doc_id = node.ref_doc_id
    if doc_id is None or not dataset.has_doc(doc_id):
        return None
    doc = dataset.doc_text(doc_id)
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    s, e = node.start_char_idx, node.end_char_idx
    if s is not None and e is not None and doc[s:e] == text:
        return (doc_id, s, e)
    pos = doc.find(text)
    if pos >= 0:
        return (doc_id, pos, pos + len(text))
    head, tail = text[:60], text[-60:]
    hs = doc.find(head)
    if hs >= 0:
        te = doc.find(tail, hs)
        if te >= 0:
            return (doc_id, hs, te + len(tail))
    if s is not None and e is not None:
        return (doc_id, s, e)
    return None


@dataclass
class QuestionResult:
    metrics: Dict[str, float]
    latency_ms: float  # one query, as a user runs it (retrieve / retrieve_example)
    group: Optional[str] = None
    node_tokens: float = 0.0  # mean tokens of the returned nodes (unbudgeted ranking)
    refit_ms: Optional[float] = None  # the bench's extra retrieve_for_budget calls, all budgets


@dataclass
class RetrieverResult:
    name: str
    build_s: float
    questions: List[QuestionResult] = field(default_factory=list)

    def summary(self, group: Optional[str] = None) -> Dict[str, Any]:
        qs = [q for q in self.questions if group is None or q.group == group]
        lat = sorted(q.latency_ms for q in self.questions)
        refit = sorted(q.refit_ms for q in self.questions if q.refit_ms is not None)
        keys = list(qs[0].metrics) if qs else []
        extra = {"p50_refit_ms": round(statistics.median(refit), 2)} if refit else {}
        return {
            "retriever": self.name,
            "build_s": round(self.build_s, 2),
            "p50_ms": round(statistics.median(lat), 2) if lat else None,
            "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2) if lat else None,
            "n": len(qs),
            "metrics": {k: round(sum(q.metrics[k] for q in qs) / len(qs), 4) for k in keys},
            "mean_node_tokens": round(sum(q.node_tokens for q in qs) / len(qs), 1) if qs else None,
            **extra,
        }


def score_question(
    nodes: Sequence[NodeWithScore],
    example: EvalExample,
    dataset: EvalDataset,
    budgets: Sequence[int],
    budgeted: Optional[Mapping[int, Sequence[NodeWithScore]]] = None,
) -> Dict[str, float]:
    """Metrics of one question. ``budgeted[b]``, when given, is what a budget-aware retriever
    returned for budget ``b`` (its ``retrieve_for_budget``): CR@b and P@b score it instead of
    ``nodes`` (still cut at ``b``); R@K, MRR and AP always score ``nodes``."""
    rule = dataset.metadata.get("gold_rule", "span")
    gold = [(g.doc_id, g.start, g.end) for g in example.gold]
    spans = [node_span(n, dataset) for n in nodes]
    ranked = [s if s is not None else ("", 0, 0) for s in spans]
    counts = [node_tokens(n) for n in nodes]
    out: Dict[str, float] = {}
    for b in budgets:
        b_nodes, b_spans, b_counts = nodes, spans, counts
        if budgeted is not None:
            b_nodes = budgeted[b]
            b_spans = [node_span(n, dataset) for n in b_nodes]
            b_counts = [node_tokens(n) for n in b_nodes]
        cut = []
        for i, (_, frac) in enumerate(cut_to_budget(b_nodes, b, token_counts=b_counts)):
            sp = b_spans[i]  # cut_to_budget keeps rank order
            if sp is not None:
                cut.append((sp[0], sp[1], sp[1] + int(round(frac * (sp[2] - sp[1])))))
        out[f"CR@{b}"] = 100.0 * M.recall(cut, gold, rule)
        out[f"P@{b}"] = 100.0 * M.precision(cut, gold)
    for k in RECALL_KS:
        out[f"R@{k}"] = 100.0 * M.recall(ranked[:k], gold, rule)
    out[f"MRR@{MRR_K}"] = M.mrr_at_k(ranked, gold, MRR_K, rule)
    out[f"AP@{AP_K}"] = M.ap_at_k(ranked, gold, AP_K, rule)
    out.update(passage_metrics(dataset.metadata.get("passage_metrics"), [s[0] for s in ranked], example))
    return out


def passage_metrics(kind: Optional[str], doc_ids: Sequence[str], example: EvalExample) -> Dict[str, float]:
    """The peers' metrics on the ranking of distinct passages (``M.passage_ranking`` of the
    nodes' documents): ``"hipporag"``: PR@2, PR@5 (passage recall, %); ``"beir"``: nDCG@10 and
    PR@100 (%), graded by ``example.metadata["qrels"]``; other kinds: none."""
    if kind is None:
        return {}
    ranking = M.passage_ranking(doc_ids)
    gold = [g.doc_id for g in example.gold]
    if kind == "hipporag":
        return {f"PR@{k}": 100.0 * M.passage_recall_at_k(ranking, gold, k) for k in PASSAGE_KS}
    if kind == "beir":
        grades = example.metadata.get("qrels") or {d: 1 for d in gold}
        return {
            f"nDCG@{NDCG_K}": 100.0 * M.ndcg_at_k(ranking, grades, NDCG_K),
            f"PR@{BEIR_RECALL_K}": 100.0 * M.passage_recall_at_k(ranking, gold, BEIR_RECALL_K),
        }
    raise ValueError(f"unknown passage_metrics {kind!r}; expected 'hipporag' or 'beir'.")


def validate_examples(dataset: EvalDataset, drop_no_gold: bool) -> List[EvalExample]:
    empty = [e.qid for e in dataset.examples if not e.gold]
    if empty and not drop_no_gold:
        raise ValueError(
            f"{len(empty)} question(s) have no gold evidence (e.g. {', '.join(empty[:5])}); "
            "fix the data or pass --drop-no-gold to skip them."
        )
    return [e for e in dataset.examples if e.gold]


def run_retriever(
    name: str,
    ctx: BenchContext,
    examples: Sequence[EvalExample],
    budgets: Sequence[int],
    group_by: Optional[str] = None,
) -> RetrieverResult:
    spec = get_spec(name)
    t0 = time.perf_counter()
    if ctx.show_progress:
        print(f"[{name}] building ...", file=sys.stderr, flush=True)
    retriever = spec.build(ctx)
    result = RetrieverResult(name, time.perf_counter() - t0)
    if ctx.show_progress:
        print(f"[{name}] built in {result.build_s:.1f} s; {len(examples)} questions", file=sys.stderr, flush=True)
    iterator: Any = examples
    if ctx.show_progress:
        from tqdm.auto import tqdm

        iterator = tqdm(examples, desc=name, leave=False)
    by_example = getattr(retriever, "retrieve_example", None)
    # optional: a retriever that fits its context to a token budget. A user's query is one call
    # (timed as latency); the refits to the other budgets, made only to score each budget, are
    # timed apart (refit_ms).
    by_budget = getattr(retriever, "retrieve_for_budget", None)
    for ex in iterator:
        t = time.perf_counter()
        nodes = by_example(ex) if by_example is not None else retriever.retrieve(ex.question)
        ms = 1000.0 * (time.perf_counter() - t)
        refit_ms = None
        budgeted = None
        if by_budget is not None:
            t = time.perf_counter()
            budgeted = {b: by_budget(ex.question, b) for b in budgets}
            refit_ms = 1000.0 * (time.perf_counter() - t)
        group = str(ex.metadata.get(group_by)) if group_by else None
        metrics = score_question(nodes, ex, ctx.dataset, budgets, budgeted)
        mean_tok = sum(node_tokens(n) for n in nodes) / len(nodes) if nodes else 0.0
        result.questions.append(QuestionResult(metrics, ms, group, mean_tok, refit_ms))
    return result


LEGEND = (
    "CR@B: share of gold evidence inside the first B tokens of context (the comparable metric); "
    "P@B: share of those tokens that are gold; R@K: gold recall of the top K nodes; PR@K (passage sets): "
    "share of the gold passages among the first K distinct passages of the nodes (HippoRAG's recall@K, BEIR's "
    "recall@K), nDCG@10: BEIR's, on the same passage ranking; MRR@10, AP@5: rank "
    "quality; build s: index build; p50/p95 ms: latency of one query (one retrieve call; a budget-aware "
    "retriever's refits to the other budgets, made only for scoring, are not in it). {mark} marks rows whose nodes differ in "
    "size by over 30% from the flat {chunk}-token chunks (mean tokens per node in brackets): their "
    "R@K/MRR/AP rank other units, compare them by CR@B."
)
UNIT_MARK = "†"


FLAT_BASELINES = ("dense", "bm25", "rrf", "dense_expert", "sparse_expert")


def flat_node_tokens(rows: Sequence[Mapping[str, Any]], chunk_size: int) -> float:
    """Mean tokens per node of the flat-chunk baselines in ``rows`` (``chunk_size`` if none ran)."""
    ts = [r["mean_node_tokens"] for r in rows if r["retriever"] in FLAT_BASELINES and r.get("mean_node_tokens")]
    return statistics.median(ts) if ts else float(chunk_size)


def unit_size_differs(row: Mapping[str, Any], reference: float) -> bool:
    """Nodes on average 30% longer or shorter than the flat chunks."""
    t = row.get("mean_node_tokens")
    return bool(t) and (t > 1.3 * reference or t < 0.7 * reference)


def legend(chunk_size: int) -> str:
    return LEGEND.format(mark=UNIT_MARK, chunk=chunk_size)


def markdown_table(rows: List[Dict[str, Any]], budgets: Sequence[int], chunk_size: Optional[int] = None) -> str:
    cols = [f"CR@{b}" for b in budgets] + [f"P@{b}" for b in budgets]
    cols += [f"R@{k}" for k in RECALL_KS] + [f"MRR@{MRR_K}", f"AP@{AP_K}"]
    cols = [c for c in PASSAGE_COLUMNS if rows and c in rows[0]["metrics"]] + cols
    head = "| retriever | " + " | ".join(cols) + " | build s | p50 ms | p95 ms |"
    sep = "|" + "---|" * (len(cols) + 4)
    lines = [head, sep]
    ref = flat_node_tokens(rows, chunk_size) if chunk_size is not None else None
    for r in rows:
        m = r["metrics"]
        vals = [f"{m[c]:.3f}" if c.startswith(("MRR", "AP")) else f"{m[c]:.1f}" for c in cols]
        name = r["retriever"]
        if ref is not None and unit_size_differs(r, ref):
            name = f"{name} {UNIT_MARK} [{r['mean_node_tokens']:.0f}]"
        lines.append(
            f"| {name} | " + " | ".join(vals) + f" | {r['build_s']:.1f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |"
        )
    return "\n".join(lines)


def plot(rows: List[Dict[str, Any]], budgets: Sequence[int], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.plot(list(budgets), [r["metrics"][f"CR@{b}"] for b in budgets], marker="o", label=r["retriever"])
    ax.set_xlabel("context budget (tokens)")
    ax.set_ylabel("context recall (%)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(budgets), [str(b) for b in budgets])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def query_embedding_latency(embed_model: Any, examples: Sequence[EvalExample], n: int = 100) -> Dict[str, Any]:
    """p50/p95 ms of embedding one question (the first ``n``, after a warm-up): the floor of
    any retriever that embeds its query, to read the rows' p50 against."""
    questions = [ex.question for ex in examples[:n]]
    for q in questions[:3]:
        embed_model.get_query_embedding(q)
    lat = []
    for q in questions:
        t = time.perf_counter()
        embed_model.get_query_embedding(q)
        lat.append(1000.0 * (time.perf_counter() - t))
    lat.sort()
    return {
        "n": len(lat),
        "p50_ms": round(statistics.median(lat), 2),
        "p95_ms": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2),
    }


def run_bench(
    dataset: EvalDataset,
    retrievers: Sequence[str],
    ctx: BenchContext,
    budgets: Sequence[int] = (256, 512, 1024),
    out_dir: Optional[Path] = None,
    limit: Optional[int] = None,
    group_by: Optional[str] = None,
    drop_no_gold: bool = False,
    command: Optional[str] = None,
) -> Dict[str, Any]:
    for b in budgets:
        validate_budget(b, "budget")
    for name in retrievers:
        spec = get_spec(name)  # fail on an unknown name, or a row that cannot run here, before any building
        if spec.check is not None:
            spec.check()
    examples = validate_examples(dataset, drop_no_gold)[: limit or None]
    if not examples:
        raise ValueError(f"{dataset.path}: no questions to run (limit={limit!r}).")
    results = [run_retriever(n, ctx, examples, budgets, group_by) for n in retrievers]
    rows = [r.summary() for r in results]
    report: Dict[str, Any] = {
        "dataset": dataset.name,
        "path": dataset.path,
        "n_questions": len(examples),
        "budgets": list(budgets),
        "command": command,
        "chunk_size": ctx.chunk_size,
        "corpus_size": len(dataset.documents),
        "rows": rows,
        "query_embedding": query_embedding_latency(ctx.embed_model, examples),
    }
    if group_by:
        groups = sorted({q.group for r in results for q in r.questions if q.group is not None})
        report["group_by"] = group_by
        report["groups"] = {g: [r.summary(g) for r in results] for g in groups}
    if out_dir is not None:
        from causalrag_bench.cli import write_results

        write_results(out_dir, report, embed_model=ctx.embed_model, llm=ctx.llm)
        plot(rows, budgets, out_dir / "recall_vs_budget.png", f"{dataset.name}: {Path(dataset.path).name}")
    return report
