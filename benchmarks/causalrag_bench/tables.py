"""Results tables for the docs, generated from the ``results.json`` files of bench runs.

    python -m causalrag_bench.tables            # rewrite docs/results/*.md and the README block

Every run lives in ``docs/results/<run>/results.json`` (written by ``causalrag-bench --out``).
This script writes ``docs/results/<run>.md`` (every row, every group) and the summary table of
``README.md`` between ``<!-- results:start -->`` and ``<!-- results:end -->``: one row per
method, its benchmark, the number of questions, whether the method's defaults were chosen on
those questions, the best LlamaIndex baseline in the same run, ours and the difference of the two
numbers as shown, the run's commit (or "provenance not recorded"), and the command. Run pages
show the run's whole ``provenance``. No number in those tables is typed by hand.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from causalrag_bench import milvus_tables, peer_tables, perf_tables, provenance, scale_tables
from causalrag_bench.runner import legend, markdown_table

LLAMAINDEX_BASELINES = ("dense", "bm25", "rrf", "automerging", "sentence_window")
# the rows of the GraphRAG-Bench run each guide shows (the run holds both methods' rows)
CAUSALRAG2_TYPE_ROWS = (
    *LLAMAINDEX_BASELINES,
    "umgp",
    "causalrag2",
    "causalrag2_nogates",
    "causalrag2_flat",
    "causalrag2_nofilter",
    "causalrag2_ppr",
    "causalrag2_ppr_nogates",
)
UMGP_TYPE_ROWS = (*LLAMAINDEX_BASELINES, "umgp", "umgp_longpromote", "umg", "umgp_paper")
START, END = "<!-- results:start -->", "<!-- results:end -->"


@dataclass(frozen=True)
class Summary:
    """One README row: ``ours`` against the best of ``baselines`` on ``metric`` of ``run``."""

    method: str
    run: str
    ours: str
    metric: str
    baselines: Tuple[str, ...] = LLAMAINDEX_BASELINES
    min_group: Optional[int] = None  # only questions whose group value (an int) is >= this
    questions: str = "all questions"
    # whether the method's defaults were chosen on the questions the row reports (from its guide)
    tuned: str = "not documented"


SUMMARIES = (
    # docs/umgp.md does not say on which questions the umgp preset was chosen
    Summary(
        "UMGP-RAG",
        "holisqa_biology",
        "umgp",
        "CR@512",
        tuned="**yes**: the `umgp` preset's choices (sentence embeddings, promotion fitted to the budget) were compared on these questions",
    ),
    # docs/standards.md: "The standards settings were chosen on the QUIC development questions" (qa_dev, all 80)
    Summary(
        "Standards retrieval",
        "quic_dev",
        "standards",
        "R@5",
        tuned="**yes**: the `standards` preset was chosen on these questions (QUIC `qa_dev`)",
    ),
    # docs/causalrag2.md: the ppr preset's text_share and damping were chosen on all of HolisQA biology
    # (benchmarks/scripts/tune_ppr.py); business was not used to choose anything
    Summary(
        "CausalRAG2 (`ppr`, the default)",
        "causalrag2_holisqa_business",
        "causalrag2_ppr",
        "CR@512",
        min_group=2,
        baselines=(*LLAMAINDEX_BASELINES, "umgp"),
        questions="gold in 2+ articles; umgp compared too",
        tuned="no: the `ppr` preset was chosen on HolisQA biology",
    ),
    # docs/hcqr.md, benchmarks/scripts/tune_hcqr.py: the default preset was chosen on MedMCQA dev
    Summary(
        "HCQR (offline planner)",
        "medmcqa",
        "hcqr",
        "R@1",
        baselines=("dense", "bm25", "rrf", "q_raw", "q_options"),
        questions="all questions; q_raw/q_options: the raw question / question + options, same retriever",
        tuned="**yes**: the `default` preset was chosen on these questions (MedMCQA dev, `tune_hcqr.py`)",
    ),
)


def load_runs(results_dir: Path) -> Dict[str, Dict[str, Any]]:
    return {
        p.parent.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(results_dir.glob("*/results.json"))
    }


def pooled_rows(report: Mapping[str, Any], min_group: Optional[int]) -> List[Dict[str, Any]]:
    """The run's rows, or their question-weighted means over groups with value >= ``min_group``."""
    if min_group is None:
        return list(report["rows"])
    groups = [rows for g, rows in report.get("groups", {}).items() if g.lstrip("-").isdigit() and int(g) >= min_group]
    if not groups:
        raise ValueError(f"run {report.get('dataset')!r} has no groups >= {min_group}; rerun with --group-by.")
    out = []
    for i, row in enumerate(groups[0]):
        parts = [rows[i] for rows in groups]
        n = sum(p["n"] for p in parts)
        metrics = {k: sum(p["metrics"][k] * p["n"] for p in parts) / n for k in row["metrics"]}
        out.append({**row, "n": n, "metrics": metrics})
    return out


def _fmt(metric: str, value: float) -> str:
    return f"{value:.3f}" if metric.startswith(("MRR", "AP")) else f"{value:.1f}"


def shown_delta(metric: str, ours: float, best: float) -> str:
    """``ours - best`` as the difference of the two numbers as shown (each rounded first), signed:
    86.8 against 82.0 reads +4.8, whatever the unrounded values were."""
    shown = Decimal(_fmt(metric, ours)) - Decimal(_fmt(metric, best))
    return f"{shown:+.3f}" if metric.startswith(("MRR", "AP")) else f"{shown:+.1f}"


def summary_row(s: Summary, report: Mapping[str, Any]) -> str:
    rows = {r["retriever"]: r for r in pooled_rows(report, s.min_group)}
    if s.ours not in rows:
        raise ValueError(f"run {s.run!r} has no row {s.ours!r}")
    base = [(rows[b]["metrics"][s.metric], b) for b in s.baselines if b in rows]
    if not base:
        raise ValueError(f"run {s.run!r} has none of the baselines {s.baselines}")
    best, name = max(base)
    ours = rows[s.ours]["metrics"][s.metric]
    n = rows[s.ours]["n"]
    bench = f"{report['dataset']} `{Path(report['path']).name}`, {s.metric} ({s.questions})"
    return (
        f"| {s.method} | {bench} | {n} | {s.tuned} | {name} {_fmt(s.metric, best)} | **{_fmt(s.metric, ours)}** "
        f"({shown_delta(s.metric, ours, best)}) | {provenance.summary(report.get('provenance'))} "
        f"| `{row_command(s, report, [b for _, b in base])}` ([all rows](docs/results/{s.run}.md)) |"
    )


def row_command(s: Summary, report: Mapping[str, Any], baselines: Sequence[str]) -> str:
    """The bench command that reproduces one README row: the baselines that ran and ours."""
    words = (report.get("command") or "").split()
    path = words[words.index("--path") + 1] if "--path" in words else report["path"]
    names = ",".join([*baselines, s.ours])
    cmd = f"causalrag-bench --dataset {report['dataset']} --path {path} --retrievers {names}"
    return cmd + (f" --group-by {report['group_by']}" if s.min_group is not None else "")


def readme_block(runs: Mapping[str, Mapping[str, Any]], summaries: Sequence[Summary] = SUMMARIES) -> str:
    lines = [
        "| method | benchmark (metric) | questions | defaults tuned on these questions? "
        "| strongest comparison, same run | ours (difference) | run | command |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    lines += [summary_row(s, runs[s.run]) for s in summaries if s.run in runs]
    return "\n".join(lines)


def fitting_table(report: Mapping[str, Any]) -> str:
    """docs/hcqr.md, docs/causalrag2.md, docs/standards.md: CR@B and P@B at every budget of a run,
    a retriever's rows cut by the bench (its prefix) or by the retriever (fit_mode), best CR in bold."""
    budgets = [int(b) for b in report["budgets"]]
    cr = {r["retriever"]: [r["metrics"][f"CR@{b}"] for b in budgets] for r in report["rows"]}
    best = [max(v[i] for v in cr.values()) for i in range(len(budgets))]
    lines = [
        "| retriever | "
        + " | ".join(f"CR@{b}" for b in budgets)
        + " | "
        + " | ".join(f"P@{b}" for b in budgets)
        + " |",
        "|---|" + "---:|" * (2 * len(budgets)),
    ]
    for r in report["rows"]:
        cells = [f"**{v:.1f}**" if v >= m else f"{v:.1f}" for v, m in zip(cr[r["retriever"]], best)]
        cells += [f"{r['metrics'][f'P@{b}']:.1f}" for b in budgets]
        lines.append(f"| {r['retriever']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{report['n_questions']} questions, {report['corpus_size']} documents, one run. Command: "
        f"`{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def run_page(name: str, report: Mapping[str, Any]) -> str:
    budgets = report["budgets"]
    chunk = int(report.get("chunk_size", 256))
    out = [
        f"# Results: {name}",
        "",
        f"Generated by `python -m causalrag_bench.tables` from `{name}/results.json`; do not edit by hand.",
        "",
        f"Dataset `{report['dataset']}` ({Path(report['path']).name}), {report['n_questions']} questions, "
        f"{report.get('corpus_size', '?')} documents. Command:",
        "",
        "```bash",
        report.get("command", "(not recorded)"),
        "```",
        "",
        *provenance.markdown(report.get("provenance")),
        "",
        markdown_table(list(report["rows"]), budgets, chunk),
    ]
    for g, rows in report.get("groups", {}).items():
        out += [
            "",
            f"## {report.get('group_by')} = {g} ({rows[0]['n']} questions)",
            "",
            markdown_table(list(rows), budgets, chunk),
        ]
    out += ["", legend(chunk), ""]
    out += [f"Note: {n}\n" for n in report.get("notes", [])]
    return "\n".join(out)


def replace_block(text: str, block: str, start: str = START, end: str = END) -> str:
    if start not in text or end not in text:
        raise ValueError(f"the file has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block}\n{end}{tail}"


def llm_concurrency_table(report: Mapping[str, Any]) -> str:
    """The simulated hosted-LLM build at each ``num_workers`` (benchmarks/scripts/bench_llm_concurrency.py)."""
    lines = [
        "| num_workers | wall s | LLM stages s | ideal s | wall / ideal | LLM stages / ideal | answers lost | same graph as 1 worker |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in report["runs"]:
        lines.append(
            f"| {r['num_workers']} | {r['wall_seconds']:.1f} | {r['llm_stage_seconds']:.1f} | {r['ideal_seconds']:.1f} "
            f"| {r['wall_over_ideal']:.2f} | {r['llm_stages_over_ideal']:.2f} | {r['answers_lost']} "
            f"| {'yes' if r['graph_equals_1_worker'] else 'NO'} |"
        )
    return "\n".join(lines)


def recall_latency_table(report: Mapping[str, Any]) -> str:
    """docs/umgp.md: p50 of one retrieve and of the refits of each row, asked in one process
    (benchmarks/scripts/bench_recall_latency.py), and each over umgp's."""
    lines = ["| retriever | p50 ms | p50 refit ms | p50 over umgp |", "|---|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['retriever']} | {r['p50_ms']:.2f} | {r['p50_refit_ms']:.2f} | {r['over_umgp']:.2f}x |")
    lines += [
        "",
        f"{report['n_questions']} questions, every row asked each in turn (the first rotating); refit: "
        f"retrieve_for_budget at {', '.join(str(b) for b in report['budgets'])} tokens. Command: "
        f"`{report.get('command', '')}`",
    ]
    return "\n".join(lines)


UMGP_RECALL_TYPE_ROWS = ("dense", "bm25", "umgp", "umgp_dprf", "umgp_docpool", "umgp_alloc", "umgp_alloc_queryfit")

# (doc, block name, results.json, renderer): tables inside the guides, regenerated like the README's
DOC_TABLES = (
    ("docs/llm.md", "llm_concurrency", "benchmarks/results/llm_concurrency/results.json", llm_concurrency_table),
    ("docs/performance.md", "embedder", "benchmarks/results/embedder/results.json", perf_tables.embedder_table),
    ("docs/performance.md", "speed_biology", "docs/results/holisqa_biology/results.json", perf_tables.biology_speed),
    (
        "docs/performance.md",
        "latency_biology",
        "benchmarks/results/latency_biology/results.json",
        perf_tables.biology_latency,
    ),
    ("docs/performance.md", "speed_medmcqa", "docs/results/medmcqa/results.json", perf_tables.medmcqa_speed),
    (
        "docs/updating.md",
        "causal_incremental",
        "benchmarks/results/causal_incremental/results.json",
        perf_tables.causal_incremental_table,
    ),
    (
        "docs/stores.md",
        "store_equivalence",
        "benchmarks/results/store_equivalence/results.json",
        perf_tables.store_equivalence_table,
    ),
    ("docs/stores.md", "scale", "benchmarks/results/scale/results.json", perf_tables.scale_table),
    ("docs/stores.md", "served_scale", "benchmarks/results/served_scale/results.json", perf_tables.served_scale_table),
    (
        "docs/stores.md",
        "standards_open",
        "benchmarks/results/standards_open/results.json",
        perf_tables.store_open_table,
    ),
    (
        "docs/stores.md",
        "standards_open_textsearch",
        "benchmarks/results/standards_open_textsearch/results.json",
        perf_tables.store_open_table,
    ),
    (
        "docs/stores.md",
        "causal_graph_open",
        "benchmarks/results/cg_served_open/results.json",
        perf_tables.store_open_table,
    ),
    (
        "docs/stores.md",
        "causal_graph_open_before",
        "benchmarks/results/cg_served_open_before/results.json",
        perf_tables.store_open_table,
    ),
    ("docs/stores.md", "milvus_scale", "benchmarks/results/milvus_scale/results.json", milvus_tables.store_scale_table),
    (
        "docs/stores.md",
        "milvus_scale_domains",
        "benchmarks/results/milvus_scale_domains/results.json",
        milvus_tables.domains_table,
    ),
    (
        "docs/stores.md",
        "milvus_lists_profile",
        "benchmarks/results/milvus_lists_profile/results.json",
        milvus_tables.lists_profile_table,
    ),
    (
        "docs/stores.md",
        "milvus_lists_profile_perturbed",
        "benchmarks/results/milvus_lists_profile_perturbed/results.json",
        milvus_tables.lists_profile_table,
    ),
    (
        "docs/stores.md",
        "milvus_lists_profile_ivf",
        "benchmarks/results/milvus_lists_profile_ivf/results.json",
        milvus_tables.ivf_profile_table,
    ),
    (
        "docs/stores.md",
        "milvus_scale_ivf",
        "benchmarks/results/milvus_scale_ivf/results.json",
        milvus_tables.ivf_scale_table,
    ),
    ("docs/stores.md", "hnsw_ef", "benchmarks/results/hnsw_ef/results.json", perf_tables.hnsw_ef_table),
    (
        "docs/stores.md",
        "query_profile",
        "benchmarks/results/pg_query_profile/results.json",
        perf_tables.query_profile_table,
    ),
    (
        "docs/causalrag2.md",
        "multi_article_bridge",
        "benchmarks/results/causalrag2_bridge_biology/results.json",
        perf_tables.multi_article_table,
    ),
    (
        "docs/causalrag2.md",
        "multi_article_bridge_business",
        "benchmarks/results/causalrag2_bridge_business/results.json",
        perf_tables.multi_article_table,
    ),
    (
        "docs/causalrag2.md",
        "multi_article_reach",
        "benchmarks/results/multi_article_reach/results.json",
        perf_tables.multi_article_reach_table,
    ),
    ("docs/causalrag2.md", "ppr_tuning", "benchmarks/results/ppr_tuning/results.json", perf_tables.multi_article_table),
    (
        "docs/causalrag2.md",
        "ppr_holisqa_biology",
        "docs/results/causalrag2_holisqa_biology/results.json",
        perf_tables.multi_article_table,
    ),
    (
        "docs/causalrag2.md",
        "ppr_holisqa_business",
        "docs/results/causalrag2_holisqa_business/results.json",
        perf_tables.multi_article_table,
    ),
    ("docs/hcqr.md", "hcqr_tuning", "benchmarks/results/hcqr_tuning/results.json", perf_tables.hcqr_tuning_table),
    ("docs/hcqr.md", "hcqr_fit_medmcqa", "benchmarks/results/fit_medmcqa/results.json", fitting_table),
    ("docs/causalrag2.md", "causalrag2_fit_biology", "benchmarks/results/fit_biology/results.json", fitting_table),
    ("docs/standards.md", "standards_fit_quic", "benchmarks/results/fit_quic/results.json", fitting_table),
    (
        "docs/causalrag2.md",
        "graphrag_bench_types",
        "docs/results/graphrag_bench_novel/results.json",
        lambda r: perf_tables.question_type_table(r, names=CAUSALRAG2_TYPE_ROWS),
    ),
    (
        "docs/umgp.md",
        "umgp_longdoc_graphrag",
        "docs/results/graphrag_bench_novel/results.json",
        lambda r: perf_tables.question_type_table(r, metrics=("CR@256", "CR@512", "CR@1024"), names=UMGP_TYPE_ROWS),
    ),
    (
        "docs/umgp.md",
        "umgp_longdoc_biology",
        "benchmarks/results/umgp_longdoc_biology/results.json",
        perf_tables.multi_article_table,
    ),
    (
        "docs/umgp.md",
        "umgp_longdoc_business",
        "benchmarks/results/umgp_longdoc_business/results.json",
        perf_tables.multi_article_table,
    ),
    ("docs/standards.md", "standards_types", "docs/results/quic_dev/results.json", perf_tables.standards_type_table),
    (
        "docs/stores.md",
        "store_layout",
        "benchmarks/results/served_biology/results.json",
        perf_tables.store_layout_table,
    ),
    (
        "docs/stores.md",
        "milvus_biology",
        "benchmarks/results/milvus_biology/results.json",
        perf_tables.store_layout_table,
    ),
    (
        "docs/stores.md",
        "store_layout_textsearch",
        "benchmarks/results/served_biology_textsearch/results.json",
        lambda r: perf_tables.store_layout_table(r, perf_tables.TEXTSEARCH_ROWS),
    ),
    (
        "docs/stores.md",
        "store_layout_textsearch_plain",
        "benchmarks/results/served_biology_textsearch_plain/results.json",
        lambda r: perf_tables.store_layout_table(r, perf_tables.TEXTSEARCH_ROWS),
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch",
        "benchmarks/results/served_scale_textsearch/results.json",
        scale_tables.served_scale_rows_table,
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_100x",
        "benchmarks/results/served_scale_textsearch_100x/results.json",
        scale_tables.served_scale_rows_table,
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_domains",
        "benchmarks/results/served_scale_textsearch_domains/results.json",
        lambda r: scale_tables.served_growth_table(r, base_label="the 1x / 5x / 10x table above"),
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_base",
        "benchmarks/results/served_scale_textsearch_base/results.json",
        scale_tables.served_scale_rows_table,
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_scifact",
        "benchmarks/results/served_scale_textsearch_scifact/results.json",
        lambda r: scale_tables.served_growth_table(r, scale_tables.results("served_scale_textsearch_base")),
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_mixed",
        "benchmarks/results/served_scale_textsearch_mixed/results.json",
        lambda r: scale_tables.served_growth_table(r, base_label="the 1x / 5x / 10x table above"),
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_holisqa",
        "benchmarks/results/served_scale_textsearch_holisqa/results.json",
        scale_tables.served_scale_rows_table,
    ),
    (
        "docs/stores.md",
        "served_scale_textsearch_1x_rounds",
        "benchmarks/results/served_scale_textsearch_1x_rounds/results.json",
        scale_tables.served_scale_rows_table,
    ),
    ("docs/stores.md", "pg_lexical", "benchmarks/results/pg_lexical_limit20/results.json", perf_tables.lexical_table),
    (
        "docs/umgp.md",
        "umgp_evidence_fit_biology",
        "benchmarks/results/umgp_evidence_fit_biology/results.json",
        perf_tables.budget_table,
    ),
    (
        "docs/umgp.md",
        "umgp_evidence_fit_business",
        "benchmarks/results/umgp_evidence_fit_business/results.json",
        perf_tables.budget_table,
    ),
    (
        "docs/umgp.md",
        "umgp_evidence_fit_dense_biology",
        "benchmarks/results/umgp_evidence_fit_dense_biology/results.json",
        perf_tables.budget_table,
    ),
    (
        "docs/umgp.md",
        "umgp_evidence_fit_graphrag",
        "benchmarks/results/umgp_evidence_fit_graphrag/results.json",
        perf_tables.budget_table,
    ),
    *[
        (
            "docs/umgp.md",
            f"umgp_recall_{d}",
            f"benchmarks/results/umgp_recall_{d}/results.json",
            perf_tables.budget_table,
        )
        for d in ("biology", "business", "graphrag", "quic")
    ],
    (
        "docs/umgp.md",
        "umgp_recall_graphrag_types",
        "benchmarks/results/umgp_recall_graphrag/results.json",
        lambda r: perf_tables.question_type_table(
            r, metrics=("CR@256", "CR@512", "CR@1024"), names=UMGP_RECALL_TYPE_ROWS
        ),
    ),
    (
        "docs/umgp.md",
        "umgp_recall_quic_types",
        "benchmarks/results/umgp_recall_quic/results.json",
        lambda r: perf_tables.question_type_table(
            r, metrics=("CR@256", "CR@512", "CR@1024"), names=(*LLAMAINDEX_BASELINES, "umgp", "umgp_alloc_queryfit")
        ),
    ),
    (
        "docs/umgp.md",
        "umgp_recall_multi_biology",
        "benchmarks/results/umgp_recall_biology/results.json",
        perf_tables.multi_article_table,
    ),
    (
        "docs/umgp.md",
        "umgp_recall_multi_business",
        "benchmarks/results/umgp_recall_business/results.json",
        perf_tables.multi_article_table,
    ),
    *[
        (
            "docs/umgp.md",
            f"umgp_recall_latency_{d}",
            f"benchmarks/results/umgp_recall_latency_{d}/results.json",
            recall_latency_table,
        )
        for d in ("biology", "graphrag")
    ],
    (
        "docs/umgp.md",
        "umgp_diagnosis_graphrag",
        "benchmarks/results/umgp_diagnosis_graphrag/results.json",
        perf_tables.umgp_diagnosis_table,
    ),
    (
        "docs/umgp.md",
        "umgp_diagnosis_biology",
        "benchmarks/results/umgp_diagnosis_biology/results.json",
        perf_tables.umgp_diagnosis_table,
    ),
    ("docs/peers.md", "umgp_passages", "benchmarks/results/umgp_passages_hotpotqa/results.json", peer_tables.run_table),
    (
        "docs/peers.md",
        "scifact_whole_abstracts",
        "benchmarks/results/scifact_whole_abstracts/results.json",
        peer_tables.run_table,
    ),
    (
        "docs/umgp.md",
        "umgp_diagnosis_business",
        "benchmarks/results/umgp_diagnosis_business/results.json",
        perf_tables.umgp_diagnosis_table,
    ),
)


def doc_markers(name: str) -> Tuple[str, str]:
    return f"<!-- table:{name} -->", f"<!-- /table:{name} -->"


def render_doc_tables(root: Path) -> Dict[str, str]:
    """``{doc path: new text}`` for every doc table whose doc and results.json exist."""
    out: Dict[str, str] = {}
    for doc, name, results, render in DOC_TABLES:
        if not (root / results).exists() or not (root / doc).exists():
            continue
        text = out.get(doc) or (root / doc).read_text(encoding="utf-8")
        block = render(json.loads((root / results).read_text(encoding="utf-8")))
        out[doc] = replace_block(text, block, *doc_markers(name))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m causalrag_bench.tables", description=__doc__.splitlines()[0])
    p.add_argument("--root", default=".", help="repository root (holds README.md and docs/results/)")
    args = p.parse_args(argv)
    root = Path(args.root)
    runs = load_runs(root / "docs" / "results")
    for name, report in runs.items():
        (root / "docs" / "results" / f"{name}.md").write_text(run_page(name, report), encoding="utf-8")
    readme = root / "README.md"
    readme.write_text(replace_block(readme.read_text(encoding="utf-8"), readme_block(runs)), encoding="utf-8")
    docs = render_doc_tables(root)
    docs.update(peer_tables.render(root, docs.get(peer_tables.DOC)))
    for doc, text in docs.items():
        (root / doc).write_text(text, encoding="utf-8")
    print(f"wrote {len(runs)} result pages and the README summary ({', '.join(runs) or 'no runs'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
