"""docs/stores.md: the served index beside LlamaIndex's own PostgreSQL rows at growing corpus
sizes (``benchmarks/scripts/bench_served_scale_textsearch.py --llamaindex --out``): open, memory, p50/p95,
CR@512/1024 and build rows/s of every row at every size, and the issue's targets checked."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median
from typing import Any, Dict, List, Mapping, Optional

OURS = ("exact", "hnsw", "hnsw_exact_scores")  # our rows' keys; the others are LlamaIndex's
ROWS = (
    ("memory", "ours, in memory"),  # a point's own in-memory index (--extra-inserted); at 1x: memory_1x
    ("exact", "ours, exact dense"),
    ("hnsw", "ours, HNSW() dense"),
    ("hnsw_exact_scores", "ours, HNSW() dense, bm25_scores='exact'"),
    ("pg_dense", "LlamaIndex PGVectorStore"),
    ("pg_hybrid", "LlamaIndex PGVectorStore(hybrid_search=True)"),
    ("pg_fusion", "LlamaIndex QueryFusionRetriever"),
)


def _cells(r: Mapping[str, Any]) -> str:
    cr = " | ".join(f"{r[k]:.1f}" if k in r else "-" for k in ("CR@512", "CR@1024"))
    return (
        f"{r['open_s']:.2f} | {r['rss_mb_after_open']:,.0f} | {r['rss_mb_after_queries']:,.0f} | "
        f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {cr}"
    )


def _ratios(rounds: List[Mapping[str, float]], over: str) -> List[float]:
    """The HNSW-served p50 over ``over``'s within each round (``--rounds``)."""
    return [r["hnsw"] / r[over] for r in rounds]


def _name(name: str) -> str:
    return name.removesuffix(".json")


def _notes(report: Mapping[str, Any]) -> List[str]:
    pts: Dict[int, Mapping[str, Any]] = {p["size"]: p for p in report["points"]}
    notes, mem = [], report.get("memory_1x")
    if 1 in pts and mem:
        one = pts[1]
        for kind in OURS:
            if kind in one:
                rounds = one[kind].get("rounds") or []
                notes.append(
                    (
                        f"{kind.replace('_', ' ')} p50 at 1x is {median(_ratios(rounds, 'memory')):.2f}x "
                        f"the in-memory index's (the median of {len(rounds)} rounds' ratios, each round's processes back "
                        "to back: " + ", ".join(f"{x:.2f}x" for x in _ratios(rounds, "memory")) + "; each row's p50 "
                        f"is the median of its {len(rounds) + 1} processes)"
                        if rounds
                        else f"{kind.replace('_', ' ')} p50 at 1x is {one[kind]['p50_ms'] / mem['p50_ms']:.2f}x the "
                        "in-memory index's"
                    )
                    + (
                        f", CR@512/1024 {one[kind]['CR@512'] - mem['CR@512']:+.1f}/"
                        f"{one[kind]['CR@1024'] - mem['CR@1024']:+.1f} against it"
                        if "CR@512" in mem
                        else ""
                    )
                )
    # the growth target's points: 5x copies, and a real corpus inserted after 1x (--extra-inserted)
    for q in [p for size, p in sorted(pts.items()) if 1 in pts and (size == 5 or "added" in p)]:
        to = f"{q['size']}x" + (f" ({' + '.join(_name(n) for n in q['added'])} inserted)" if "added" in q else "")
        for kind in ("memory", "exact", "hnsw"):
            x = mem if kind == "memory" else pts[1].get(kind)
            if x and kind in q:
                a, b = x.get("rounds"), q[kind].get("rounds")
                notes.append(
                    f"{kind} p50 grows {median(_ratios(b, 'memory')) / median(_ratios(a, 'memory')):.2f}x "
                    f"from 1x to {to} (each size's ratio to the in-memory 1x process of the same round, the "
                    f"machine's yardstick; the rows' p50s: {q[kind]['p50_ms'] / x['p50_ms']:.2f}x)"
                    if a and b
                    else f"{kind} p50 grows {q[kind]['p50_ms'] / x['p50_ms']:.2f}x from 1x to {to}"
                    + (" (one process each)" if kind == "memory" else "")
                )
    for size, p in sorted(pts.items()):
        # the units the build's copies added (results from before build_rows was recorded: every copy)
        copied = p.get("build_rows", p["units"] - p["units"] // size) if size > 1 else 0
        if copied and "hnsw_build_s" in p and "added" not in p:
            with_hnsw = copied / (copied / p["build_rows_per_s"] + p["hnsw_build_s"])
            notes.append(
                f"{size}x: build {p['build_rows_per_s']:,.0f} rows/s, {with_hnsw:,.0f} with the HNSW builds "
                f"({p['hnsw_build_s']:.0f} s)"
            )
        if "added" in p:
            notes.append(
                f"{size}x: {p['build_rows']:,} units of the added sets inserted into the served index at "
                f"{p['build_rows_per_s']:,.0f} rows/s (its bm25 indexes kept current"
                + (f"; the HNSW indexes built after it in {p['hnsw_build_s']:.0f} s" if "hnsw_build_s" in p else "")
                + ")"
            )
        if "insert_rows_per_s" in p:
            notes.append(
                f"{size}x: one more copy inserted into the served index at {p['insert_rows_per_s']:,.0f} rows/s "
                "(its bm25 indexes kept current)"
            )
        wal = p.get("build_wal")
        if wal:
            notes.append(
                f"{size}x: the copies wrote {wal['wal_bytes'] / 1e9:.1f} GB of WAL with "
                f"{wal['full_page_images'] / 1e6:.2f} million full-page images, {wal['checkpoints']} checkpoints"
            )
        h, ours = p.get("pg_hybrid"), p.get("hnsw") or p.get("exact")
        if h and ours and "CR@512" in h:
            rounds = [r for r in ours.get("rounds", []) if "pg_hybrid" in r]
            ratios = _ratios(rounds, "pg_hybrid")
            notes.append(
                f"{size}x: CR@512 {ours['CR@512'] - h['CR@512']:+.1f} against PGVectorStore(hybrid_search=True), "
                + (
                    f"p50 {median(ratios):.2f}x its p50 (the median of the rounds' ratios: "
                    + ", ".join(f"{x:.2f}x" for x in ratios)
                    + ")"
                    if rounds
                    else f"p50 {ours['p50_ms'] / h['p50_ms']:.2f}x its p50"
                )
            )
    return notes


def served_scale_rows_table(report: Mapping[str, Any]) -> str:
    lines = [
        "| size | units | row | open s | RSS after open MB | RSS after queries MB | p50 ms | p95 ms | CR@512 | CR@1024 "
        "| build rows/s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mem: Optional[Mapping[str, Any]] = report.get("memory_1x")
    if mem:
        lines.append(f"| 1x | - | ours, in memory | {_cells(mem)} | - |")
    ef = report.get("ef_search")
    rows = [(k, f"ours, HNSW(ef_search={ef}) dense" if k == "hnsw" and ef else label) for k, label in ROWS]
    for p in report["points"]:
        for key, label in rows:
            r = p.get(key)
            if r is None:
                continue
            ours = key in OURS
            rate = None if key == "memory" else p["build_rows_per_s"] if ours else p.get("llamaindex_build_rows_per_s")
            chunks = p.get("llamaindex_chunks", report.get("llamaindex_chunks_1x", 0) * p["size"])
            units = f"{p['units']:,}" if ours or key == "memory" else f"{chunks:,} chunks"
            lines.append(
                f"| {p['size']}x | {units} | {label} | {_cells(r)} | {'-' if rate is None else f'{rate:,.0f}'} |"
            )
    text = "\n".join(lines) + "\n\n"
    bm25 = {
        "pg_textsearch": "BM25 lists from pg_textsearch's bm25 index (PostgreSQL 18)",
        "postings": "BM25 lists from postings tables",
    }.get(report.get("bm25_lists", ""), "")
    extra = "".join(
        f" + {_name(e['name'])} ({e['documents']:,} documents, no questions)" for e in report.get("extra") or []
    )
    grown = (
        f"HolisQA {report['domains'].replace(',', ' + ')} at 1x; then{extra.removeprefix(' +')} inserted into "
        "the same indexes and measured again (a real, distinct corpus; CR asks biology's questions of it)"
        if report.get("extra_inserted")
        else f"HolisQA {report['domains'].replace(',', ' + ')}{extra} at 1x; larger sizes add copies of every unit "
        "and chunk (new ids, same text, the embedding plus noise; CR counts a copy of gold text as gold)"
    )
    text += (
        f"{grown}. "
        + (f"{bm25}. " if bm25 else "")
        + f"{report['queries']} retrievals a process, each point a fresh process (query vectors computed "
        f"beforehand; ours `as_retriever(budget_tokens={report['budget']})`, LlamaIndex's top 10, "
        "hybrid top 10 + 10), all rows on the same database"
        + (", `VACUUM ANALYZE` after each point's writes" if report.get("vacuumed") else "")
    )
    settings = report.get("server_settings") or {}
    wal = settings.get("max_wal_size", "1GB")
    text += (
        f" (PostgreSQL {settings.get('server_version', '?').split()[0]}, shared_buffers "
        f"{settings.get('shared_buffers', '?')}{'' if wal == '1GB' else f', max_wal_size {wal}'}). "
        if settings
        else " (the server's default shared_buffers, 128MB). "
    )
    notes = _notes(report)
    if notes:
        joined = "; ".join(notes)
        text += joined[:1].upper() + joined[1:] + ". "
    # a run from before --shared-buffers had the server's default, which the flag now has to ask for
    command = report["command"] + (
        "" if settings or "--shared-buffers" in report["command"] else " --shared-buffers default"
    )
    return text + f"Command: `{command}`."


def results(name: str) -> Mapping[str, Any]:
    """``benchmarks/results/{name}/results.json`` (empty where it is missing)."""
    path = Path(__file__).resolve().parents[1] / "results" / name / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def served_growth_table(
    report: Mapping[str, Any], base: Optional[Mapping[str, Any]] = None, base_label: str = "the table above"
) -> str:
    """:func:`served_scale_rows_table` of a larger real corpus at 1x (more domains, ``--extra``
    data sets), and each row's p50 growth from ``base`` (default: ``results/served_scale_textsearch``,
    its first domain alone) at 1x: the growth target measured on distinct texts, not copies."""
    if base is None:
        base = results("served_scale_textsearch")
    text = served_scale_rows_table(report)
    one = [p for p in base.get("points", []) if p["size"] == 1]
    here = [p for p in report["points"] if p["size"] == 1]
    if not (one and here):
        return text
    a, b = one[0], here[0]
    pairs = [(label, a.get(key), b.get(key)) for key, label in ROWS]
    pairs.insert(0, ("ours, in memory", base.get("memory_1x"), report.get("memory_1x")))
    grown = [
        f"{label} {x['p50_ms']:.1f} -> {y['p50_ms']:.1f} ms ({y['p50_ms'] / x['p50_ms']:.2f}x)"
        for label, x, y in pairs
        if x and y
    ]
    return (
        text
        + f"\n\nGrowth of p50 from HolisQA {base['domains']} alone ({a['units']:,} units, {base_label}) "
        + f"to this corpus ({b['units']:,} units, {b['units'] / a['units']:.2f}x): "
        + "; ".join(grown)
        + " (two runs, each alone on the machine)."
    )


__all__ = ["served_growth_table", "served_scale_rows_table"]
