"""docs/stores.md: a served MultiGranularityIndex on Milvus's C++ engine beside PostgreSQL, one run.

:func:`store_scale_table` renders ``benchmarks/scripts/bench_served_scale.py --store
postgres,milvus --out`` (its ``by_store`` report): per size and store, the open, resident memory,
p50/p95, build rows/s and top-10 as in memory, then the growth of p50 per step and the 1x lists
check (every dense and BM25 list against the in-memory index's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

STORE_LABEL = {"postgres": "PostgreSQL", "milvus": "Milvus (C++ engine)"}


def _row(size: str, units: str, where: str, r: Mapping[str, Any], same: str, build: str, gb: str) -> str:
    return (
        f"| {size} | {units} | {where} | {r['open_s']:.2f} | {r['rss_mb_after_open']:,.0f} "
        f"| {r['rss_mb_after_queries']:,.0f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {same} | {build} | {gb} |"
    )


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
    lines = [
        "| size | units | store | open s | RSS after open MB | RSS after queries MB | p50 ms | p95 ms "
        "| top-10 as memory | build rows/s | data GB |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
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
                lines.append(
                    _row(
                        f"{size}x",
                        f"{p['units']:,}",
                        STORE_LABEL.get(store, store),
                        r,
                        same,
                        f"{p['build_rows_per_s']:,.0f}",
                        f"{p['database_gb']:.2f}",
                    )
                )
    notes = []
    for store, got in by_store.items():
        label = STORE_LABEL.get(store, store)
        pts = sorted(got["points"], key=lambda p: p["size"])
        imports = [p["exact"]["client_import_s"] for p in pts if "client_import_s" in p["exact"]]
        if imports:
            span = f"{min(imports):.2f}" + (f"-{max(imports):.2f}" if max(imports) - min(imports) >= 0.005 else "")
            notes.append(
                f"{label}: open s is after the stores' client libraries are imported (once per app "
                f"process, timed apart: {span} s)"
            )
        else:
            notes.append(f"{label}: open s includes importing the stores' client libraries")
        if len(pts) > 1:
            first = pts[0]
            direct = ", ".join(
                f"{first['size']}x→{p['size']}x {p['exact']['p50_ms'] / first['exact']['p50_ms']:.2f}x" for p in pts[1:]
            )
            notes.append(
                f"{label} exact p50 growth per step {', '.join(_growth(pts))}; from {first['size']}x: {direct}"
            )
        lists = got.get("lists_1x")
        if lists:
            notes.append(
                f"{label} at 1x: of {lists['lists']:,} lists (every dense and BM25 list of each question, "
                f"top {lists['k']}), {100 * lists['same_ids_in_order']:.2f}% have the in-memory index's ids "
                f"in order, {100 * lists['same_up_to_ties']:.2f}% up to ties at the cut; scores differ by at "
                f"most {lists['max_rel_score_diff']:.1e} (relative)"
            )
    text = "\n".join(lines) + "\n\n"
    copies = any(p["size"] > 1 for s in by_store.values() for p in s["points"])
    text += (
        f"HolisQA {report['domains'].replace(',', ' + ')} at 1x"
        + (
            "; larger sizes add copies of every unit (new ids, same text, the embedding plus noise). "
            if copies
            else ". "
        )
        + f"{report['queries']} full retrievals a process (`as_retriever("
        f"budget_tokens={report['budget']})`, query vectors computed beforehand), each point in a fresh process; "
        "both stores exact search, nodes and state in PostgreSQL; Milvus: milvus-lite 2.5.1's C++ server on a "
        "local port, every list a search. "
    )
    if notes:
        text += "; ".join(n[:1].upper() + n[1:] for n in notes) + ". "
    return text + f"Command: `{report['command']}`."


def domains_table(report: Mapping[str, Any], base: Optional[Mapping[str, Any]] = None) -> str:
    """:func:`store_scale_table` of a run over several domains at 1x, and the growth of each
    store's p50 from ``base`` (the first domain's run, default: ``results/milvus_scale``) at 1x."""
    if base is None:
        path = Path(__file__).resolve().parents[1] / "results" / "milvus_scale" / "results.json"
        base = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    text = store_scale_table(report)
    notes = []
    for store, got in report["by_store"].items():
        one = [p for p in base.get("by_store", {}).get(store, {}).get("points", []) if p["size"] == 1]
        here = [p for p in got["points"] if p["size"] == 1]
        if one and here:
            a, b = one[0], here[0]
            notes.append(
                f"{STORE_LABEL.get(store, store)} p50 {a['exact']['p50_ms']:.1f} ms on "
                f"{base['domains']} alone ({a['units']:,} units, the table above) against "
                f"{b['exact']['p50_ms']:.1f} ms here ({b['units']:,} units, "
                f"{b['units'] / a['units']:.2f}x): {b['exact']['p50_ms'] / a['exact']['p50_ms']:.2f}x"
            )
    return text + ("\n\n" + "; ".join(notes) + " (two runs, each under the machine lock)." if notes else "")


def lists_profile_table(report: Mapping[str, Any]) -> str:
    """``benchmarks/scripts/profile_milvus_lists.py --out``: per size, each list's search alone
    (p50 ms, dense and BM25 per granularity), all of a question's lists as a query sends them,
    and the vector store's write rate."""
    pts = report["points"]
    keys = list(pts[0]["alone_p50_ms"])
    head = [f"dense g{k[5:]}" if k.startswith("dense") else f"BM25 g{k[6:]}" for k in keys]
    lines = [
        "| size | units | " + " | ".join(head) + " | all lists at once | one after another | rows/s written |",
        "|---:|---:|" + "---:|" * (len(keys) + 3),
    ]
    for p in pts:
        alone = " | ".join(f"{p['alone_p50_ms'][k]:.1f}" for k in keys)
        rate = f"{p['vector_store_rows_per_s']:,.0f}" if "vector_store_rows_per_s" in p else "-"
        lines.append(
            f"| {p['size']}x | {p['units']:,} | {alone} | {p['all_concurrent_p50_ms']:.1f} "
            f"| {p['all_sequential_p50_ms']:.1f} | {rate} |"
        )
    return (
        "\n".join(lines)
        + f"\n\np50 ms of {pts[0]['k']} rows a list (a query's candidates_per_list plus the tie margin), "
        "one Milvus server (milvus-lite 2.5.1's C++ engine), exact search; rows/s: the vector store's writes "
        f"alone (no docstore). Command: `{report['command']}`."
    )


def _ivf_label(ivf: Mapping[str, Any]) -> str:
    return f"IVF(nlist={ivf['nlist']}, nprobe={ivf['nprobe']})"


def ivf_scale_table(report: Mapping[str, Any]) -> str:
    """``bench_served_scale.py --store milvus --ivf NLIST:NPROBE --out``: per size, the Milvus rows
    built exact and with ``ann=IVF(...)`` (store ``milvus_ivf``): p50/p95, CR@512/1024 (copies of
    gold text count as gold), top-10 as the in-memory index's (1x) and as the exact rows' (each
    size), build rows/s; then the growth of p50 per step of each."""
    label = {"milvus": "Milvus, exact (FLAT)", "milvus_ivf": f"Milvus, {_ivf_label(report['ivf'])}"}
    lines = [
        "| size | units | dense lists | p50 ms | p95 ms | CR@512 | CR@1024 | top-10 as memory | top-10 as exact "
        "| build rows/s | RSS after queries MB |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pct(r: Mapping[str, Any], key: str) -> str:
        return f"{100 * r[key]:.0f}%" if key in r else "-"

    def cr(r: Mapping[str, Any], b: int) -> str:
        return f"{r[f'CR@{b}']:.2f}" if f"CR@{b}" in r else "-"

    mem = report.get("memory_1x")
    if mem:
        lines.append(
            f"| 1x | - | in memory | {mem['p50_ms']:.1f} | {mem['p95_ms']:.1f} | {cr(mem, 512)} | {cr(mem, 1024)} "
            f"| - | - | - | {mem['rss_mb_after_queries']:,.0f} |"
        )
    by_store = {k: v for k, v in report["by_store"].items() if k in label}
    for size in sorted({p["size"] for s in by_store.values() for p in s["points"]}):
        for store, got in by_store.items():
            for p in (p for p in got["points"] if p["size"] == size):
                r = p["exact"]  # the run of the store's own dense index
                lines.append(
                    f"| {size}x | {p['units']:,} | {label[store]} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} "
                    f"| {cr(r, 512)} | {cr(r, 1024)} | {pct(r, 'top10_as_memory')} | {pct(r, 'top10_as_exact')} "
                    f"| {p['build_rows_per_s']:,.0f} | {r['rss_mb_after_queries']:,.0f} |"
                )
    notes = [
        f"{label[store]} p50 growth per step {', '.join(_growth(sorted(got['points'], key=lambda p: p['size'])))}"
        for store, got in by_store.items()
        if len(got["points"]) > 1
    ]
    return (
        "\n".join(lines)
        + f"\n\nHolisQA {report['domains']} at 1x; larger sizes add copies of every unit (new ids, same text, the "
        f"embedding plus noise; CR counts a copy of gold text as gold). {report['queries']} full retrievals a "
        f"process (`as_retriever(budget_tokens={report['budget']})`), each point in a fresh process, then CR of "
        "each question once; milvus-lite 2.5.1's C++ server on a local port, nodes and state in PostgreSQL; "
        "top-10 as exact: the share of questions whose top 10 is the exact Milvus rows' of the same size, in "
        "order. " + ("; ".join(notes) + ". " if notes else "") + f"Command: `{report['command']}`."
    )


def ivf_profile_table(report: Mapping[str, Any]) -> str:
    """``profile_milvus_lists.py --ivf NLIST:NPROBE --out``: per size and granularity, the rows of
    the collection, its dense list's search alone exact and IVF (p50 ms), and IVF's recall of the
    exact list's top k."""
    pts = report["points"]
    lines = [
        "| size | granularity | rows | exact dense ms | IVF dense ms | IVF recall of exact top-k |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for p in pts:
        for key in p["ivf_alone_p50_ms"]:
            g = key[len("dense") :]
            lines.append(
                f"| {p['size']}x | {g} | {p['rows'][f'g{g}']:,} | {p['alone_p50_ms'][key]:.1f} "
                f"| {p['ivf_alone_p50_ms'][key]:.1f} | {100 * p['ivf_recall'][key]:.1f}% |"
            )
    return (
        "\n".join(lines)
        + f"\n\np50 ms of {pts[0]['k']} rows a list, each search alone, {len(pts)} sizes on one Milvus server "
        f"(milvus-lite 2.5.1's C++ engine) holding both sets of collections; IVF: `ann=IVF` of `--ivf "
        f"{pts[0]['ivf']}` (nlist:nprobe). Command: `{report['command']}`."
    )


__all__ = ["domains_table", "ivf_profile_table", "ivf_scale_table", "lists_profile_table", "store_scale_table"]
