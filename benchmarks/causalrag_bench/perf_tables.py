"""Speed tables of docs/performance.md, generated from bench ``results.json`` files.

Latency rows come from one ``causalrag-bench`` run: build seconds, query p50/p95, and each
row's p50 against the floor every embedding retriever pays, one query embedding
(``query_embedding`` in the report, measured in the same run). Embedder rows come from
``benchmarks/scripts/bench_embedder.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# Rows of LlamaIndex's own retrievers, and query baselines over our RRF (the rest are ours).
LLAMAINDEX_ROWS = ("dense", "bm25", "rrf", "automerging", "sentence_window")
BASELINE_ROWS = ("q_raw", "q_options")
# Ours that embed several query texts per question: their target is a ratio to rrf instead.
SEVERAL_QUERIES_PREFIX = "hcqr"
# Ours without a query embedding: their floor is 0.
NO_EMBEDDING_ROWS = ("bm25", "umgp_sparse")
# Over the query embedding, what a retriever of ours may add at p50 (ms).
OVERHEAD_TARGET_MS = 20.0


def _row(report: Mapping[str, Any], name: str) -> Optional[Mapping[str, Any]]:
    return next((r for r in report["rows"] if r["retriever"] == name), None)


def latency_table(report: Mapping[str, Any], rows: Optional[Sequence[str]] = None, show_build: bool = True) -> str:
    """One line per retriever: build s, p50, p95, p50 minus one query embedding, and whether a
    retriever of ours is within the target over that floor. ``show_build=False`` leaves build
    seconds out (a run whose embeddings came from a warm cache)."""
    qe = report.get("query_embedding") or {}
    floor = qe.get("p50_ms")
    lines = [
        f"Query embedding alone, same run: p50 {floor:.1f} ms, p95 {qe.get('p95_ms', 0.0):.1f} ms "
        f"({qe.get('n', 0)} questions), {report['corpus_size']} documents, {report['n_questions']} questions."
        if floor is not None
        else "No query-embedding measurement in this run.",
        "",
        "| retriever | whose |" + (" build s |" if show_build else "") + " p50 ms | p95 ms | "
        f"p50 - one query embedding | ours within {OVERHEAD_TARGET_MS:.0f} ms | refits to 3 budgets, p50 ms |",
        "|---|---|" + ("---:|" if show_build else "") + "---:|---:|---:|:---:|---:|",
    ]
    names = rows or [r["retriever"] for r in report["rows"]]
    for name in names:
        r = _row(report, name)
        if r is None or r.get("p50_ms") is None:
            continue
        ours = name not in LLAMAINDEX_ROWS + BASELINE_ROWS
        whose = "ours" if ours else "LlamaIndex" if name in LLAMAINDEX_ROWS else "baseline"
        base = 0.0 if name in NO_EMBEDDING_ROWS else (floor or 0.0)
        over = r["p50_ms"] - base
        verdict = ("yes" if over <= OVERHEAD_TARGET_MS else "no") if ours and floor is not None else ""
        if ours and name.startswith(SEVERAL_QUERIES_PREFIX):
            verdict = "several queries: see ratio"
        refit = f"{r['p50_refit_ms']:.1f}" if r.get("p50_refit_ms") is not None else ""
        build = f" {r['build_s']:.1f} |" if show_build else ""
        lines.append(
            f"| {name} | {whose} |{build} {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {over:+.1f} | {verdict} | {refit} |"
        )
    return "\n".join(lines)


def ratio_lines(report: Mapping[str, Any], pairs: Sequence[tuple]) -> str:
    """``(numerator row, denominator row, field, target)`` ratios, e.g. umgp build / dense build."""
    out: List[str] = ["| ratio | value | target | met |", "|---|---:|---:|:---:|"]
    for num, den, field, target in pairs:
        a, b = _row(report, num), _row(report, den)
        if a is None or b is None or not b.get(field):
            continue
        value = a[field] / b[field]
        out.append(f"| {num} / {den} {field} | {value:.2f} | {target:.2f} | {'yes' if value <= target else 'no'} |")
    return "\n".join(out)


def biology_speed(report: Mapping[str, Any]) -> str:
    return latency_table(report) + "\n\n" + ratio_lines(report, [("umgp", "dense", "build_s", 1.25)])


def biology_latency(report: Mapping[str, Any]) -> str:
    """Query latency only, from a run on a warm embedding cache (its build seconds mean nothing)."""
    return latency_table(report, show_build=False) + f"\n\nCommand: `{report.get('command', '')}`"


def medmcqa_speed(report: Mapping[str, Any]) -> str:
    return latency_table(report) + "\n\n" + ratio_lines(report, [("hcqr", "rrf", "p50_ms", 1.5)])


def embedder_table(report: Mapping[str, Any]) -> str:
    """bench_embedder.py: texts/s per backend and cosine to today's torch vectors."""
    env: Dict[str, Any] = report.get("environment", {})
    sets = ", ".join(f"{n} {name}" for name, n in report["n_texts"].items())
    lines = [
        f"Texts: {sets}; torch {env.get('torch')}, onnxruntime {env.get('onnxruntime')}, {env.get('cpu_count')} CPUs.",
        "",
        "| text set | configuration | texts/s | speed-up vs torch | mean cos | min cos |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        name = r["name"].replace("torch (today)", "torch, unsorted")
        lines.append(
            f"| {r['text_set']} | {name} | {r['texts_per_s']:.1f} | {r['speedup']:.2f}x "
            f"| {r['mean_cosine']:.6f} | {r['min_cosine']:.6f} |"
        )
    latency = report.get("query_latency") or []
    if latency:
        cpu = all("cpu_ms_per_query" in r for r in latency)
        lines += [
            "",
            "One query at a time (`get_query_embedding`, HolisQA biology questions, the models "
            "alternating question by question)"
            + (
                f"; CPU ms a query: process CPU time per query when each is followed by "
                f"{latency[0]['idle_ms']:.0f} ms of sleep (what the model's threads keep using after "
                "the vector is returned counts)"
                if cpu
                else ""
            )
            + ":",
            "",
            "| backend | questions | p50 ms | p95 ms |" + (" CPU ms a query |" if cpu else ""),
            "|---|---:|---:|---:|" + ("---:|" if cpu else ""),
        ]
        lines += [
            f"| {r['name']} | {r['n']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} |"
            + (f" {r['cpu_ms_per_query']:.1f} |" if cpu else "")
            for r in latency
        ]
    return "\n".join(lines)


def causal_incremental_table(report: Mapping[str, Any]) -> str:
    """docs/updating.md: a CausalGraphIndex insert against a full rebuild, per LLM mode run by
    ``benchmarks/scripts/bench_causal_incremental.py --out``."""
    runs = report["runs"]
    modes = [m for m in ("scripted", "offline") if m in runs] + sorted(set(runs) - {"scripted", "offline"})
    first = runs[modes[0]]
    header = ["HolisQA biology"]
    for m in modes:
        header += [
            f"{m}: insert of {runs[m]['n_inserted']:,}",
            f"{m}: rebuild of {runs[m]['n_built'] + runs[m]['n_inserted']:,}",
        ]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]

    def row(label: str, cell) -> None:
        cells = [c for m in modes for c in cell(runs[m])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def calls(run: Mapping[str, Any], stage: Optional[str]) -> List[str]:
        ins, full = (run[k]["llm_calls"] for k in ("insert", "rebuild"))
        a, b = (sum(c.values()) if stage is None else c.get(stage, 0) for c in (ins, full))
        share = f" ({a / b:.1%})" if stage is None and b else ""
        return [f"**{a:,}{share}**" if share else f"{a:,}", f"{b:,}"]

    def cr(key: str):
        def cell(run: Mapping[str, Any]) -> List[str]:
            vals = [run[k].get(key) for k in ("insert", "rebuild")]
            return [" / ".join(f"{v[f'CR@{b}']:.2f}" for b in (512, 1024)) if v else "" for v in vals]

        return cell

    for stage, label in (("extract", "extraction"), ("summaries", "summaries"), ("gates", "gate judgements")):
        row(f"LLM calls: {label}", lambda run, s=stage: calls(run, s))
    row("LLM calls: total", lambda run: calls(run, None))
    row(
        "modules kept / summarised again",
        lambda run: [f"{run['insert']['modules_kept']:,} / {run['insert']['modules_changed']:,}", ""],
    )
    row("entities", lambda run: [f"{run[k]['entities']:,}" for k in ("insert", "rebuild")])
    row(f"CR@512 / CR@1024, {first['n_questions']} questions", cr("cr"))
    row(
        f"CR@512 / CR@1024, the {first['n_questions_on_inserted']} questions on inserted articles", cr("cr_on_inserted")
    )
    row("seconds", lambda run: [f"{run[k]['seconds']:.0f}" for k in ("insert", "rebuild")])
    commands = "; ".join(f"`{runs[m]['command']}`" for m in modes)
    return "\n".join(lines) + f"\n\nGenerated from `benchmarks/results/causal_incremental/results.json` ({commands})."


def _ranks(differences: Sequence[Mapping[str, Any]]) -> str:
    """``rank 3: 2, rank 9: 1`` (questions by first differing rank), ``none`` if no question differs."""
    counts: Dict[int, int] = {}
    for d in differences:
        counts[int(d["rank"])] = counts.get(int(d["rank"]), 0) + 1
    return ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items())) or "none"


def _build(ix: Mapping[str, Any], side: str) -> str:
    """Build seconds, marked ``*`` if the build embedded texts missing from the embedding cache."""
    cold = (ix.get("embedded_texts") or {}).get(side)
    return f"{ix['build_s'][side]:.1f}" + ("*" if cold else "")


def _maybe(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def store_equivalence_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: each index in memory against PostgreSQL (built, then reopened from the
    stores), one line per index and dataset (``benchmarks/scripts/bench_store_equivalence.py --out``)."""
    runs = list(report["runs"].values())
    budgets = runs[0]["budgets"] if runs else []
    cr = " / ".join(f"CR@{b}" for b in budgets)
    lines = [
        f"| index (rows) | dataset | questions | identical top-k ids, in order | identical budgeted contexts "
        f"| max abs score difference | {cr}, memory | {cr}, PostgreSQL | build s, memory / PostgreSQL "
        "| open s, PostgreSQL | p50 ms, memory / PostgreSQL | questions by first differing rank |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        data = f"{run['dataset']} `{run['path_name']}`" + (
            f" (corpus cut to {run['corpus_limit']} questions)" if run.get("corpus_limit") else ""
        )
        for ix in run["indexes"]:
            n = ix["n_questions"]
            mem = " / ".join(f"{ix['memory'][f'CR@{b}']:.2f}" for b in run["budgets"])
            pg = " / ".join(f"{ix['postgres'][f'CR@{b}']:.2f}" for b in run["budgets"])
            lines.append(
                f"| {ix['index']} (`{ix['memory_row']}`, `{ix['store_row']}`) | {data} | {n} "
                f"| {ix['n_identical']}/{n} ({ix['identical_share']:.1%}), top {ix['top_k']} "
                f"| {ix['n_identical_budgeted']}/{n} | {ix['max_abs_score_diff']:.1e} | {mem} | {pg} "
                f"| {_build(ix, 'memory')} / {_build(ix, 'postgres')} | {_maybe(ix.get('open_s'), '.1f')} "
                f"| {_maybe((ix.get('p50_ms') or {}).get('memory'), '.1f')} / "
                f"{_maybe((ix.get('p50_ms') or {}).get('postgres'), '.1f')} | {_ranks(ix['differences'])} |"
            )
    cold = any(
        (ix.get("embedded_texts") or {}).get(side)
        for run in runs
        for ix in run["indexes"]
        for side in ("memory", "postgres")
    )
    commands = "; ".join(f"`{run['command']}`" for run in runs if run.get("command"))
    notes = [
        "Max abs score difference: over the nodes both return. Build s: building (and for PostgreSQL "
        "reopening) the index in the run; open s: reopening it from the stores (from_vector_store) alone; p50: one "
        "retrieve call"
        + ("; * the build embedded texts missing from the embedding cache, and its time counts that." if cold else ".")
    ]
    if commands:
        notes.append(f"Generated from `benchmarks/results/store_equivalence/results.json` ({commands}).")
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


GB = 1024**3


def max_units_within(
    points: Sequence[Mapping[str, Any]], budget_bytes: float, key: str = "peak_rss_bytes"
) -> Optional[int]:
    """The corpus (units) whose peak RSS reaches ``budget_bytes`` on a least-squares line through
    the measured points (RSS against units); ``None`` with fewer than two points or no growth."""
    xs = [float(p["units"]) for p in points if p.get(key)]
    ys = [float(p[key]) for p in points if p.get(key)]
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    if slope <= 0:
        return None
    return int((budget_bytes - (my - slope * mx)) / slope)


PROFILE_LAYOUTS = {
    "memory": "in memory",
    "filtered": "PostgreSQL, filtered queries (before)",
    "granularity_tables": "PostgreSQL, per-granularity tables (now)",
}


def query_profile_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: where a store-backed query spends its time, per layout, and each list's
    database time (``benchmarks/scripts/bench_pg_query_profile.py --out``)."""
    kinds = sorted({k for r in report["layouts"].values() for k in r.get("sql", {})})
    waits = any("lists_wait_ms" in r for r in report["layouts"].values())
    lines = [
        "| layout | p50 ms | p95 ms | aretrieve p50 ms | open s | "
        + " | ".join(f"{k}: round trips, ms" for k in kinds)
        + (" | waited for the lists, ms" if waits else "")
        + " | client ms (decoding, fusion, promotion) |",
        "|---|---:|---:|---:|---:|" + "---:|" * (len(kinds) + 1 + int(waits)),
    ]
    for name, r in report["layouts"].items():
        sql = r.get("sql", {})
        cells = [f"{sql[k]['round_trips']:.1f}, {sql[k]['ms']:.1f}" if k in sql else "-" for k in kinds]
        if waits:
            cells.append(_maybe(r.get("lists_wait_ms"), ".1f"))
        client = f"{r['client_ms']:.1f}" if "client_ms" in r else "-"
        lines.append(
            f"| {PROFILE_LAYOUTS.get(name, name)} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} "
            f"| {_maybe(r.get('aretrieve_p50_ms'), '.1f')} | {_maybe(r.get('open_s'), '.1f')} | "
            + " | ".join(cells)
            + f" | {client} |"
        )
    per = report["explain_ms_by_granularity"]
    gs = sorted(per["granularity_tables"], key=int)
    lines += [
        "",
        "| one list, EXPLAIN ANALYZE execution ms (median) | " + " | ".join(f"g={g}" for g in gs) + " |",
        "|---|" + "---:|" * len(gs),
    ]
    for name in ("filtered", "granularity_tables"):
        lines.append(f"| {PROFILE_LAYOUTS[name]} | " + " | ".join(f"{per[name][g]:.1f}" for g in gs) + " |")
    c = report["corpus"]
    n = next(iter(report["layouts"].values()))["questions"]
    lines += [
        "",
        f"HolisQA {c['domains'].replace(',', ' + ')}: {c['articles']:,} articles, {c['units']:,} units; "
        f"{n} questions through `as_retriever()`, exact search. Round trips and ms are per query, by kind of "
        "statement (database time: statements sent at once are each counted); waited: the time a query blocked "
        "on its lists after scoring BM25; client ms: the mean query time less its SQL wall time. Command: "
        f"`{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def hnsw_ef_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: HNSW ef_search against exact search on a development set
    (``benchmarks/scripts/tune_hnsw_ef.py --out``)."""
    budgets = report["budgets"]
    n = report["n_questions"]
    lines = [
        "| ef_search | identical top-10 | identical budget-fitted contexts | "
        + " | ".join(f"CR@{b}" for b in budgets)
        + " | p50 ms |",
        "|---:|---:|---:|" + "---:|" * (len(budgets) + 1),
    ]
    lines.append(
        "| exact (in memory) | - | - | "
        + " | ".join(f"{report['exact_cr'][str(b)]:.2f}" for b in budgets)
        + f" | {report['memory_p50_ms']:.1f} |"
    )
    for r in report["runs"]:
        lines.append(
            f"| {r['ef_search']} | {r['identical_top10']}/{n} | {r['identical_budgeted']}/{n} | "
            + " | ".join(f"{r['cr'][str(b)]:.2f}" for b in budgets)
            + f" | {r['p50_ms']:.1f} |"
        )
    server = f", PostgreSQL {report['postgres']}" if report.get("postgres") else ""
    lines += [
        "",
        f"HolisQA `{report['path_name']}` (a development set), {n} questions{server}. Command: `{report['command']}`",
    ]
    return "\n".join(lines)


SCALE_BACKENDS = {
    "memory": "memory",
    "postgres": "postgres, filtered (before)",
    "pg_lists": "postgres, per-granularity tables",
    "pg_hnsw": "postgres, per-granularity tables + HNSW",
}


def scale_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: memory and query time of UMGP's dense lists at growing corpus sizes, in memory
    and in PostgreSQL (``benchmarks/scripts/bench_scale.py --out``)."""
    corpus = report["corpus"]
    lines = [
        "| backend | size | units | build s | rows/s | ANN build s | peak RSS GB (estimate) | peak RSS with persist GB "
        "| disk MB | questions timed | p50 ms | p95 ms | top-10 as exact | list recall | exact p50 / p95 ms, same tables |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["points"]:
        persist = f"{p['peak_rss_with_persist_bytes'] / GB:.2f}" if p.get("peak_rss_with_persist_bytes") else "-"
        rate = f"{p['units'] / p['build_s']:,.0f}" if p["backend"] != "memory" and p.get("build_s") else "-"
        ann = f"{p['ann_build_s']:.1f}" if p.get("ann_build_s") is not None else "-"
        same = f"{100 * p['identical_top10_share']:.0f}%" if "identical_top10_share" in p else "-"
        recall = f"{p['list_recall_at_k']:.3f}" if "list_recall_at_k" in p else "-"
        exact = f"{p['exact_p50_ms']:,.1f} / {p['exact_p95_ms']:,.1f}" if "exact_p50_ms" in p else "-"
        label = SCALE_BACKENDS.get(p["backend"], p["backend"])
        if p.get("ann"):
            label += f" (ef_search {p['ann']['ef_search']})"
        lines.append(
            f"| {label} | {p['size']}x | {p['units']:,} | {p['build_s']:.1f} "
            f"| {rate} | {ann} | {p['peak_rss_bytes'] / GB:.2f} ({p['estimated_ram_bytes'] / GB:.2f}) | {persist} "
            f"| {p['disk_bytes'] / 1e6:,.0f} | {p['n_questions']} | {p['p50_ms']:,.1f} | {p['p95_ms']:,.1f} "
            f"| {same} | {recall} | {exact} |"
        )
    for r in report.get("refused", []):
        lines.append(
            f"| {SCALE_BACKENDS.get(r['backend'], r['backend'])} | {r['size']}x | {r['size'] * corpus['units_1x']:,} "
            f"| refused: {r['refused']} | | | | | | | | | | | |"
        )
    notes = []
    for b, e in report.get("p50_growth_exponent", {}).items():
        if e is not None:
            notes.append(f"query p50 grows as units^{e:.2f} ({b})")
    budget = float(report.get("max_gb", 8.0))
    mem = [p for p in report["points"] if p["backend"] == "memory"]
    n_index = max_units_within(mem, budget * GB, "peak_rss_bytes") if mem else None
    n_persist = max_units_within(mem, budget * GB, "peak_rss_with_persist_bytes") if mem else None
    if n_index is not None and n_persist is not None:
        notes.append(
            f"in memory, a line through the measured peaks reaches {budget:g} GB at about {n_index:,} units "
            f"({n_index / corpus['units_1x']:.0f}x this corpus) for building and querying, and at about "
            f"{n_persist:,} units ({n_persist / corpus['units_1x']:.0f}x) if the index is also persisted "
            "(serialising the nodes is a peak of its own)"
        )
    text = "\n".join(lines) + "\n\n"
    text += (
        f"1x: HolisQA {corpus['domains'].replace(',', ' + ')}, {corpus['articles']:,} articles, "
        f"{corpus['units_1x']:,} units of {corpus['dim']} dimensions ({corpus['embeddings_1x']}). Larger sizes: "
        f"{corpus['replicas']}. PostgreSQL: exact search, metadata as `{report.get('postgres_metadata', 'json')}`. "
        f"Measured: {report['measured']}."
    )
    if notes:
        joined = "; ".join(notes)
        text += " " + joined[:1].upper() + joined[1:] + "."
    commands = report.get("commands") or [report.get("command")]
    text += (
        "\n\nGenerated from `benchmarks/results/scale/results.json` ("
        + "; ".join(f"`{c}`" for c in commands if c)
        + ")."
    )
    return text


def served_scale_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: a MultiGranularityIndex served by PostgreSQL (or ``--store milvus``: Milvus)
    at growing corpus sizes, end to end from a freshly opened process
    (``benchmarks/scripts/bench_served_scale.py --out``)."""
    store_gb = "Milvus data GB" if report.get("store") == "milvus" else "database GB"
    lines = [
        "| size | units | search | open s | RSS after open MB | RSS after queries MB | p50 ms | p95 ms "
        f"| top-10 as exact | build rows/s | {store_gb} |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mem = report.get("memory_1x")
    if mem:
        lines.append(
            f"| 1x | - | in memory | {mem['open_s']:.2f} | {mem['rss_mb_after_open']:,.0f} "
            f"| {mem['rss_mb_after_queries']:,.0f} | {mem['p50_ms']:.1f} | {mem['p95_ms']:.1f} | - | - | - |"
        )
    for p in report["points"]:
        for kind in ("exact", "hnsw"):
            r = p.get(kind)
            if r is None:
                continue
            same = r.get("top10_as_exact", r.get("top10_as_memory"))
            same = "-" if same is None else f"{100 * same:.0f}%" + (" (of memory)" if "top10_as_memory" in r else "")
            label = "exact" if kind == "exact" else "HNSW()"
            lines.append(
                f"| {p['size']}x | {p['units']:,} | {label} | {r['open_s']:.2f} | {r['rss_mb_after_open']:,.0f} "
                f"| {r['rss_mb_after_queries']:,.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {same} "
                f"| {p['build_rows_per_s']:,.0f} | {p['database_gb']:.2f} |"
            )
    pts = {p["size"]: p for p in report["points"]}
    notes = []
    if 1 in pts and mem:
        notes.append(f"exact p50 at 1x is {pts[1]['exact']['p50_ms'] / mem['p50_ms']:.2f}x the in-memory index's")
    sizes = sorted(pts)
    if len(sizes) > 1:
        a, b = pts[sizes[0]], pts[sizes[-1]]
        for kind in ("exact", "hnsw"):
            if kind in a and kind in b:
                notes.append(
                    f"{kind} p50 grows {b[kind]['p50_ms'] / a[kind]['p50_ms']:.2f}x and resident memory after "
                    f"the queries {b[kind]['rss_mb_after_queries'] / a[kind]['rss_mb_after_queries']:.2f}x from "
                    f"{sizes[0]}x to {sizes[-1]}x"
                )
    text = "\n".join(lines) + "\n\n"
    text += (
        f"HolisQA {report['domains']} at 1x; larger sizes add copies of every unit (new ids, same text, the "
        f"embedding plus noise). {report['queries']} full retrievals a process (`as_retriever(budget_tokens="
        f"{report['budget']})`, query vectors computed beforehand), each point in a fresh process. "
    )
    if report.get("store") == "milvus":
        text += (
            "Every list a search of a Milvus server on this machine (exact search), nodes and state in "
            "PostgreSQL; the in-memory row is the same corpus in memory. "
        )
    if notes:
        joined = "; ".join(notes)
        text += joined[:1].upper() + joined[1:] + ". "
    return text + f"Command: `{report['command']}`."


LEXICAL_ROWS = ("umgp", "umgp_pg", "umgp_pg_fts", "bm25", "dense")
LEXICAL_OF = {
    "umgp": "bm25s, in memory",
    "umgp_pg": "bm25s, kvstore",
    "umgp_pg_fts": "PostgreSQL full text (ts_rank)",
    "bm25": "bm25s (flat chunks)",
    "dense": "none",
}


def lexical_table(report: Mapping[str, Any]) -> str:
    """The lexical expert of UMGP in memory and in PostgreSQL (bm25s against the store's full
    text), with the flat baselines: CR@B of each budget, p50/p95 ms, build s, from one run."""
    budgets = [int(b) for b in report["budgets"]]
    lines = [
        "| retriever | lexical expert | " + " | ".join(f"CR@{b}" for b in budgets) + " | p50 ms | p95 ms | build s |",
        "|---|---|" + "---:|" * (len(budgets) + 3),
    ]
    for name in LEXICAL_ROWS:
        r = _row(report, name)
        if r is None:
            continue
        cr = " | ".join(f"{r['metrics'][f'CR@{b}']:.2f}" for b in budgets)
        lines.append(
            f"| {name} | {LEXICAL_OF[name]} | {cr} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['build_s']:.1f} |"
        )
    lines += [
        "",
        f"{report['n_questions']} questions, {report['corpus_size']} documents. Command: `{report.get('command', '')}`",
    ]
    return "\n".join(lines)


LAYOUT_ROWS = {
    "umgp": "in memory",
    "umgp_pg": "PostgreSQL, served (every list in SQL), exact",
    "umgp_pg_hnsw": "PostgreSQL, served, HNSW (`HNSW()`)",
    "umgp_milvus": "Milvus (C++ engine, milvus-lite 2.5.1), every list a search, exact",
    "pg_dense": "LlamaIndex PGVectorStore, 256-token chunks, exact",
    "pg_hybrid": "LlamaIndex PGVectorStore(hybrid_search=True), top 10 dense + 10 ts_rank",
    "pg_fusion": "LlamaIndex QueryFusionRetriever (RRF) over PGVectorStore dense + text",
}
# the same rows on PostgreSQL 18 with pg_textsearch: BM25 lists from its bm25 index
TEXTSEARCH_ROWS = {
    **LAYOUT_ROWS,
    "umgp_pg": "PostgreSQL 18, served, exact dense, BM25 from pg_textsearch",
    "umgp_pg_hnsw": "PostgreSQL 18, served, HNSW (`HNSW()`), BM25 from pg_textsearch",
}


def store_layout_table(report: Mapping[str, Any], rows: Mapping[str, str] = LAYOUT_ROWS) -> str:
    """docs/stores.md: UMGP in memory and in PostgreSQL (exact and HNSW) from one run: CR@B,
    p50/p95 and the p50 ratio to the in-memory row; ``rows``: name -> where it runs."""
    budgets = [int(b) for b in report["budgets"]]
    base = _row(report, "umgp")
    lines = [
        "| retriever | where | "
        + " | ".join(f"CR@{b}" for b in budgets)
        + " | p50 ms | p95 ms | p50 / in-memory p50 | build s |",
        "|---|---|" + "---:|" * (len(budgets) + 4),
    ]
    for name, where in rows.items():
        r = _row(report, name)
        if r is None:
            continue
        cr = " | ".join(f"{r['metrics'][f'CR@{b}']:.2f}" for b in budgets)
        ratio = f"{r['p50_ms'] / base['p50_ms']:.2f}x" if base else "-"
        lines.append(
            f"| {name} | {where} | {cr} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {ratio} | {r['build_s']:.1f} |"
        )
    lines += [
        "",
        f"{report['n_questions']} questions, {report['corpus_size']} documents, one run. Command: "
        f"`{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def _multi_article(report: Mapping[str, Any], name: str, metric: str, min_articles: int = 2) -> Optional[float]:
    """``metric`` of row ``name`` over the questions whose gold spans at least ``min_articles``
    articles: the groups' values weighted by their question counts."""
    total = weight = 0.0
    for key, rows in (report.get("groups") or {}).items():
        if not key.isdigit() or int(key) < min_articles:
            continue
        r = next((x for x in rows if x["retriever"] == name), None)
        if r is not None and metric in r["metrics"]:
            total += r["n"] * r["metrics"][metric]
            weight += r["n"]
    return total / weight if weight else None


def _bold_best(values: Sequence[Optional[float]], best: Sequence[Optional[float]]) -> List[str]:
    """One row's cells to one decimal, bold where the value is its column's ``best``; None is "-"."""
    return [
        "-" if v is None else (f"**{v:.1f}**" if b is not None and abs(v - b) < 1e-9 else f"{v:.1f}")
        for v, b in zip(values, best)
    ]


def multi_article_table(report: Mapping[str, Any]) -> str:
    """docs/causalrag2.md: CR@B on multi-article questions (gold in 2+ articles) and on all
    questions, every row of one ``--group-by n_articles`` run, the best per column in bold."""
    budgets = [int(b) for b in report["budgets"]]
    cols = [("multi", b) for b in budgets] + [("all", b) for b in budgets]
    values = {}
    for r in report["rows"]:
        values[r["retriever"]] = [
            (_multi_article(report, r["retriever"], f"CR@{b}") if part == "multi" else r["metrics"][f"CR@{b}"])
            for part, b in cols
        ]
    best = [max((v[i] for v in values.values() if v[i] is not None), default=None) for i in range(len(cols))]
    n_multi = sum(
        next(iter(rows))["n"] for k, rows in (report.get("groups") or {}).items() if k.isdigit() and int(k) >= 2
    )
    lines = [
        "| retriever | " + " | ".join(f"{'multi' if p == 'multi' else 'all'} CR@{b}" for p, b in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, vals in values.items():
        lines.append(f"| {name} | " + " | ".join(_bold_best(vals, best)) + " |")
    lines += [
        "",
        f"Multi: the {n_multi} questions whose gold evidence is in two or more articles; all: "
        f"{report['n_questions']} questions, {report['corpus_size']} documents. Command: `{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def budget_table(report: Mapping[str, Any]) -> str:
    """docs/umgp.md: CR@B at every budget of a run for each row, the best per column in bold,
    with the latency of one query and of the refits to the run's budgets (p50)."""
    budgets = [int(b) for b in report["budgets"]]
    values = {r["retriever"]: [r["metrics"][f"CR@{b}"] for b in budgets] for r in report["rows"]}
    best = [max(v[i] for v in values.values()) for i in range(len(budgets))]
    lines = [
        "| retriever | " + " | ".join(f"CR@{b}" for b in budgets) + " | p50 ms | p50 refit ms |",
        "|---|" + "---:|" * (len(budgets) + 2),
    ]
    for r in report["rows"]:
        refit = r.get("p50_refit_ms")
        lines.append(
            f"| {r['retriever']} | "
            + " | ".join(_bold_best(values[r["retriever"]], best))
            + f" | {r['p50_ms']:.1f} | {'–' if refit is None else f'{refit:.1f}'} |"
        )
    lines += [
        "",
        f"{report['n_questions']} questions, {report['corpus_size']} documents; p50 refit ms: the "
        f"bench's retrieve_for_budget calls for all {len(budgets)} budgets of one question. Command: "
        f"`{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def multi_article_reach_table(report: Mapping[str, Any]) -> str:
    """docs/causalrag2.md: where the gold of the multi-article questions lies and what of it the
    question reaches (benchmarks/scripts/multi_article_reach.py), one column per domain."""
    domains = {name: d["summary"] for name, d in report["domains"].items()}
    first = next(iter(domains.values()))
    top = first["top_articles"]

    def of(key: str, total: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda s: f"{s[key]} of {s[total]}"

    rows: List[Tuple[str, Callable[[Mapping[str, Any]], str]]] = [
        ("multi-article questions", lambda s: str(s["questions"])),
        ("gold sentences in secondary articles", lambda s: f"{s['gold_secondary_share']:.1f}%"),
        (
            "secondary articles that are a copy of the primary (same text)",
            of("secondary_articles_same_text", "secondary_articles"),
        ),
        (
            "median rank of a gold sentence by cosine to the question, primary / secondary article",
            lambda s: (
                f"{s['primary_sentence_rank_median']:,.0f} / {s['secondary_sentence_rank_median']:,.0f} "
                f"of {s['sentences']:,}"
            ),
        ),
        (
            "median rank of the primary article / of a secondary article (best of dense, BM25)",
            lambda s: (
                f"{s['primary_article_rank_median']:,.0f} / {s['secondary_article_rank_median']:,.0f} "
                f"of {s['articles']:,}"
            ),
        ),
        (
            f"questions whose primary article is outside the question's top {top} (dense and BM25)",
            of("questions_primary_far", "questions"),
        ),
        (
            f"single-article questions whose article is outside their top {top}, for comparison",
            lambda s: f"{s['single_article_far_pct']:.1f}%",
        ),
        (
            f"secondary articles in the question's top {top} (dense or BM25)",
            of("secondary_articles_near", "secondary_articles"),
        ),
        (
            "secondary articles the graph reaches (query and context seeds); articles it reaches per question, median",
            lambda s: (
                f"{s['secondary_articles_graph']} of {s['secondary_articles']}; {s['graph_articles_median']:,.0f}"
            ),
        ),
        ("questions with no reachable secondary article", of("questions_no_reachable_secondary", "questions")),
    ]
    for b in report["budgets"]:
        rows += [
            (
                f"`umgp` CR@{b}: primary + secondary gold",
                lambda s, b=b: f"{s['budgets'][str(b)]['primary']:.1f} + {s['budgets'][str(b)]['secondary']:.1f}",
            ),
            (
                f"headroom at {b}: reachable secondary gold `umgp` leaves out, CR points",
                lambda s, b=b: f"{s['budgets'][str(b)]['headroom']:.1f}",
            ),
        ]
    lines = ["| | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    lines += [f"| {label} | " + " | ".join(cell(s) for s in domains.values()) + " |" for label, cell in rows]
    lines += [
        "",
        f"Primary: the article holding most of a question's gold sentences; secondary: its other gold "
        f"articles; reachable: in the question's top {top} articles or reached by the graph. "
        f"Command: `{report['command']}`",
    ]
    return "\n".join(lines)


def _settings(p: Mapping[str, Any]) -> str:
    w = p["role_weights"]
    return (
        f"k={p['rrf_k']:g}, original {p['original_weight']:g}, support {w['support']:g}, "
        f"distinguish {w['distinguish']:g}, key features {w['key_features']:g}, top {p['per_query_k']}"
        + ("" if p["option_terms"] else ", published q3")
    )


def hcqr_tuning_table(report: Mapping[str, Any], top: int = 8) -> str:
    """The best grid points of benchmarks/scripts/tune_hcqr.py (MedMCQA dev), with the worst
    leave-one-out ablation of each, the previous default (k=60, all roles 1) and the chosen point."""
    points = sorted(report["points"], key=lambda p: (-p["full"]["R@1"], -p["full"]["R@5"], -p["full"]["MRR@10"]))
    chosen = report["chosen"]

    def is_previous(p: Mapping[str, Any]) -> bool:
        return (
            p["rrf_k"] == 60
            and p["original_weight"] == 2
            and p["per_query_k"] == 5
            and p["option_terms"]
            and all(v == 1 for v in p["role_weights"].values())
        )

    shown = points[:top] + [p for p in points[top:] if is_previous(p)]
    lines = [
        "| settings | R@1 | R@5 | MRR@10 | best leave-one-out R@1 / R@5 | every list helps |",
        "|---|---:|---:|---:|---|:---:|",
    ]
    for p in shown:
        name, best = max(p["ablations"].items(), key=lambda kv: (kv[1]["R@1"], kv[1]["R@5"]))
        tag = (
            " **(chosen: the default preset)**"
            if p == chosen
            else (" (the previous default)" if is_previous(p) else "")
        )
        lines.append(
            f"| {_settings(p)}{tag} | {p['full']['R@1']:.2f} | {p['full']['R@5']:.2f} | "
            f"{p['full']['MRR@10']:.4f} | {name}: {best['R@1']:.2f} / {best['R@5']:.2f} | "
            f"{'yes' if p['every_list_helps'] else 'no'} |"
        )
    lines += [
        "",
        f"{len(report['points'])} grid points on {report['n_questions']} MedMCQA dev questions; the "
        f"top {top} by R@1 (then R@5, MRR@10), and the previous default. The chosen point is the best "
        "one where no leave-one-out ablation scores above the full fusion on R@1, R@5 or MRR@10. "
        f"Command: `{report['command']}`",
    ]
    return "\n".join(lines)


def question_type_table(
    report: Mapping[str, Any], metrics: Sequence[str] = ("CR@512", "CR@1024"), names: Optional[Sequence[str]] = None
) -> str:
    """``metrics`` per retriever (``names``, default every row) and question type of one
    ``--group-by`` run (GraphRAG-Bench's or the QUIC questions' ``type``), all questions last;
    the best per column in bold."""
    groups = report.get("groups") or {}
    cols: List[tuple] = [(g, m) for g in groups for m in metrics] + [(None, m) for m in metrics]
    names = list(names) if names is not None else [r["retriever"] for r in report["rows"]]

    def value(name: str, group: Optional[str], metric: str) -> float:
        rows = report["rows"] if group is None else groups[group]
        return next(r for r in rows if r["retriever"] == name)["metrics"][metric]

    best = [max(value(n, g, m) for n in names) for g, m in cols]
    head = [
        f"{g} ({groups[g][0]['n']}) {m}" if g is not None else f"all ({report['n_questions']}) {m}" for g, m in cols
    ]
    lines = ["| retriever | " + " | ".join(head) + " |", "|---|" + "---:|" * len(cols)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(_bold_best([value(n, g, m) for g, m in cols], best)) + " |")
    lines += [
        "",
        f"{report['n_questions']} questions, {report['corpus_size']} documents; the number of questions "
        f"of each type in brackets. Command: `{report.get('command', '')}`",
    ]
    return "\n".join(lines)


def standards_type_table(report: Mapping[str, Any]) -> str:
    """docs/standards.md: R@5 and CR@512 per QUIC question type, LlamaIndex's retrievers and the
    standards presets (the ablation grid stays in docs/results/quic_dev.md)."""
    shown = ("dense", "bm25", "rrf", "standards", "standards_first", "standards_paper")
    present = {r["retriever"] for r in report["rows"]}
    return question_type_table(report, ("R@5", "CR@512"), [n for n in shown if n in present])


def _share(d: Optional[Mapping[str, Any]]) -> str:
    """``tokens (gold %)`` of one kind of context piece; a dash when the context had none."""
    return f"{d['tokens']:.0f} ({d['gold_share']:.1f}%)" if d and d.get("tokens") else "–"


def _slash(values: Sequence[Optional[float]]) -> str:
    return " / ".join("–" if v is None else f"{v:.1f}" for v in values)


_CONTEXTS = ("umgp", "fused", "bm25", "dense")
_KINDS = ("parent_whole", "parent_fitted", "unit_whole", "unit_fitted")
_LOST = ("cut_from_taken_passage", "passage_not_taken", "fusion", "list_depth", "no_list")


def _budget_row(label: str, b: int, r: Mapping[str, Any]) -> str:
    c, u = r["contexts"], r["contexts"]["umgp"]
    tokens = " / ".join(format(c[k]["tokens"], ".0f") for k in _CONTEXTS)
    return (
        f"| {label} | {b} | {_slash([c[k]['CR'] for k in _CONTEXTS])} | {_slash([c[k]['gold_share'] for k in _CONTEXTS])} "
        f"| {tokens} | "
        + " | ".join(_share(u["kinds"].get(k)) for k in _KINDS)
        + f" | {u['pieces']:.1f} / {u['passages']:.1f} / {u['docs']:.1f} | {c['bm25']['pieces']:.1f} / {c['bm25']['docs']:.1f} |"
    )


def _missed_row(label: str, b: int, r: Mapping[str, Any], sparse_weight: float) -> str:
    src, top = r["sources"], r["lists_top10"]

    def by_g(expert: str) -> str:
        return _slash([v for k, v in top.items() if k.startswith(expert + "@")])

    return (
        f"| {label} | {b} | {r['missed']} ({r['missed_pct']:.1f}%) | {_slash([src['bm25_context']])} "
        f"| {_slash([src['dense_context']])} | {_slash([src['sparse_lists']])} ({_slash([src['sparse_top10']])}) "
        f"| {_slash([src['dense_lists']])} ({_slash([src['dense_top10']])}) | {by_g('sparse')} | {by_g('dense')} "
        f"| {_slash([src['sparse_not_dense'], src['dense_not_sparse']])} | {_slash([src['fused_candidates']])} "
        f"| {_slash([r['lost_at'][k] for k in _LOST])} | {sparse_weight:.2f} |"
    )


def umgp_diagnosis_table(report: Mapping[str, Any]) -> str:
    """benchmarks/scripts/diagnose_umgp.py: where ``umgp``'s tokens go at each budget (by how each
    piece came about) beside the fused ranking and the bm25/dense contexts, and which list holds
    the gold spans its context misses; all questions first, then each group."""
    s = report["settings"]
    per_list, cands = s["candidates_per_list"], s["candidates"]
    one = [
        "| questions | B | CR@B: umgp / fused / bm25 / dense | gold % of tokens: umgp / fused / bm25 / dense "
        "| tokens: umgp / fused / bm25 / dense | umgp: parent whole | parent fitted | unit whole | unit fitted "
        "| umgp pieces / passages / docs | bm25 chunks / docs |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    gs = " / ".join(k.split("@")[1] for k in s["lists"] if k.startswith("sparse@"))
    two = [
        f"| questions | B | gold missed | in bm25 context | in dense context | sparse lists ≤{per_list} (≤10) "
        f"| dense lists ≤{per_list} (≤10) | sparse top 10 at {gs} | dense top 10 at {gs} | only sparse / only dense "
        f"| fused top {cands} | lost: cut from a taken "
        "passage / passage not taken / fusion / list depth / no list | sparse weight |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|",
    ]
    for name, part in [("all", report["all"]), *(report.get("groups") or {}).items()]:
        for b in report["budgets"]:
            r = part["budgets"][str(b)]
            one.append(_budget_row(f"{name} ({part['n']})", b, r))
            two.append(_missed_row(f"{name} ({part['n']})", b, r, part["sparse_weight"]))
    note = (
        f"{report['dataset']} `{Path(report['path']).name}`, {report['n_questions']} questions, "
        f"{report['corpus_size']} documents. Tokens: means per question; gold %: pooled over questions (a "
        "piece's tokens times the share of its characters inside gold spans); umgp's tokens split by how each "
        f"piece came about, as tokens (gold %). `fused`: the fused ranking (top {cands}) cut at B, no promotion. "
        "Second table: shares (%) of the gold spans the umgp context misses; a list holds a span when one of "
        "its units covers 75% of it, at any granularity unless one is named; lost: the first of those stages that applies; "
        f"sparse weight: the sparse lists' share of the entropy weights. Command: `{report.get('command', '')}`"
    )
    return "\n".join(one + [""] + two + ["", note])


def store_open_table(report: Mapping[str, Any]) -> str:
    """docs/stores.md: a StandardsIndex or CausalGraphIndex reopened from PostgreSQL at growing
    corpus sizes (``benchmarks/scripts/bench_store_open.py --out``): open seconds, memory the open
    adds (per unit; for the causal graph also entities and modules), p50."""
    graph = any("entities" in p for p in report["points"])
    head = "| size | documents | units |" + (" entities | modules |" if graph else "")
    lines = [
        head + " open s | RSS added by the open MB | per unit KB | p50 ms | p95 ms | build s |",
        "|---:|---:|---:|" + ("---:|---:|" if graph else "") + "---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["points"]:
        added = p["rss_mb_after_open"] - p["rss_mb_before_open"]
        ents = f" {p.get('entities', 0):,} | {p.get('modules', 0):,} |" if graph else ""
        lines.append(
            f"| {p['size']}x | {p['documents']:,} | {p['units']:,} |{ents} {p['open_s']:.2f} | {added:,.0f} "
            f"| {1024 * added / max(p['units'], 1):.1f} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {p['build_s']:.1f} |"
        )
    pts = report["points"]
    corpus = (
        "The QUIC RFCs"
        if report.get("index", "standards") == "standards"
        else f"HolisQA ({report.get('corpus')}; built offline, no LLM)"
    )
    text = "\n".join(lines) + "\n\n"
    grow = (
        "a size of S holds the first S corpora"
        if report.get("grow") == "distinct"
        else "a size of S adds S - 1 copies of every document (new ids, the same text)"
    )
    text += (
        f"{corpus} ({report['documents_1x']} documents) at 1x; {grow}. Each point: built into "
        + ("PostgreSQL 18 with pg_textsearch" if report.get("server") == "pg_textsearch" else "PostgreSQL")
        + ", then opened by a fresh process with "
        f"`from_vector_store`, {report['queries']} retrievals; build s: parsing, extraction, embedding (from the "
        f"bench's cache where it holds the text) and writing. "
    )
    if len(pts) > 1:
        a, b = pts[0], pts[-1]
        grown = (b["rss_mb_after_open"] - b["rss_mb_before_open"]) / max(
            a["rss_mb_after_open"] - a["rss_mb_before_open"], 1e-9
        )
        text += (
            f"From {a['size']}x to {b['size']}x the open takes {b['open_s'] / a['open_s']:.1f}x as long, the memory "
            f"it adds is {grown:.1f}x and the p50 {b['p50_ms'] / a['p50_ms']:.1f}x. "
        )
    return text + f"Command: `{report['command']}`."
