"""docs/stores.md: a served MultiGranularityIndex on Milvus's C++ engine beside PostgreSQL, one run.

:func:`store_scale_table` renders ``benchmarks/scripts/bench_served_scale.py --store
postgres,milvus --out`` (its ``by_store`` report): per size and store, the open, resident memory,
p50/p95, build rows/s and top-10 as in memory, then the growth of p50 per step and the 1x lists
check (every dense and BM25 list against the in-memory index's).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

STORE_LABEL = {"postgres": "PostgreSQL", "milvus": "Milvus (C++ engine)"}


def _row(size: str, units: str, where: str, r: Mapping[str, Any], same: str, build: str, gb: str) -> str:
    return (f"| {size} | {units} | {where} | {r['open_s']:.2f} | {r['rss_mb_after_open']:,.0f} "
            f"| {r['rss_mb_after_queries']:,.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {same} | {build} | {gb} |")


def _growth(points: List[Mapping[str, Any]]) -> List[str]:
    """``"1x→5x 1.27x"`` per step of exact p50, and per 5x of corpus (the ratio to the power 5/log-step)."""
    import math

    out = []
    for a, b in zip(points, points[1:]):
        ratio = b["exact"]["p50_ms"] / a["exact"]["p50_ms"]
        step = b["size"] / a["size"]
        per5 = ratio ** (math.log(5) / math.log(step)) if step > 1 else float("nan")
        out.append(f"{a['size']}x→{b['size']}x {ratio:.2f}x ({per5:.2f}x per 5x)")
    return out


def store_scale_table(report: Mapping[str, Any]) -> str:
    lines = ["| size | units | store | open s | RSS after open MB | RSS after queries MB | p50 ms | p95 ms "
             "| top-10 as memory | build rows/s | data GB |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    mem = report.get("memory_1x")
    if mem:
        lines.append(_row("1x", "-", "in memory", mem, "-", "-", "-"))
    by_store: Dict[str, Any] = report["by_store"]
    for size in sorted({p["size"] for s in by_store.values() for p in s["points"]}):
        for store, got in by_store.items():
            for p in got["points"]:
                if p["size"] != size:
                    continue
                r = p["exact"]
                same = "-" if "top10_as_memory" not in r else f"{100 * r['top10_as_memory']:.0f}%"
                lines.append(_row(f"{size}x", f"{p['units']:,}", STORE_LABEL.get(store, store), r, same,
                                  f"{p['build_rows_per_s']:,.0f}", f"{p['database_gb']:.2f}"))
    notes = []
    for store, got in by_store.items():
        label = STORE_LABEL.get(store, store)
        pts = sorted(got["points"], key=lambda p: p["size"])
        imports = [p["exact"]["client_import_s"] for p in pts if "client_import_s" in p["exact"]]
        if imports:
            notes.append(f"{label}: open s is after the stores' client libraries are imported (once per app "
                         f"process, timed apart: {min(imports):.2f}-{max(imports):.2f} s)")
        if len(pts) > 1:
            notes.append(f"{label} exact p50 growth {', '.join(_growth(pts))}")
        lists = got.get("lists_1x")
        if lists:
            notes.append(f"{label} at 1x: of {lists['lists']:,} lists (every dense and BM25 list of each question, "
                         f"top {lists['k']}), {100 * lists['same_ids_in_order']:.1f}% have the in-memory index's ids "
                         f"in order, {100 * lists['same_up_to_ties']:.1f}% up to ties at the cut; scores differ by at "
                         f"most {lists['max_rel_score_diff']:.1e} (relative)")
    text = "\n".join(lines) + "\n\n"
    text += (f"HolisQA {report['domains'].replace(',', ' + ')} at 1x; larger sizes add copies of every unit (new ids, "
             f"same text, the embedding plus noise). {report['queries']} full retrievals a process (`as_retriever("
             f"budget_tokens={report['budget']})`, query vectors computed beforehand), each point in a fresh process; "
             "both stores exact search, nodes and state in PostgreSQL; Milvus: milvus-lite 2.5.1's C++ server on a "
             "local port, every list a search. ")
    if notes:
        text += "; ".join(n[:1].upper() + n[1:] for n in notes) + ". "
    return text + f"Command: `{report['command']}`."


__all__ = ["store_scale_table"]
