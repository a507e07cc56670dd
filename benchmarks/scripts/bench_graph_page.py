"""Benchmark: size and time of ``CausalGraphIndex.to_graphml`` and ``graph_page`` (issue 33).

For a persisted index (e.g. the bench's HolisQA biology index, built offline by the
``causalrag2`` row or by ``bench_causal_graph_build.py``): the graph's size, the seconds and
bytes of the GraphML file, and for each ``--max-nodes`` the seconds and bytes of the page and,
if a ``chromium`` binary is on PATH, the seconds headless Chromium takes to load and screenshot it.

    python benchmarks/scripts/bench_graph_page.py --persist-dir /tmp/cg_bio --max-nodes 100 300 1000 3000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Optional


def chromium_seconds(page: Path, shot: Path, timeout: float = 300.0) -> Optional[float]:
    """Seconds for headless Chromium to load ``page`` and write a screenshot; None without Chromium."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        return None
    t0 = time.perf_counter()
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1100,900",
            f"--screenshot={shot}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        timeout=timeout,
        check=True,
    )
    return round(time.perf_counter() - t0, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--persist-dir", required=True)
    ap.add_argument("--max-nodes", type=int, nargs="+", default=[100, 300, 1000, 3000])
    ap.add_argument("--out", default=None, help="folder for the files (default: a temporary folder)")
    args = ap.parse_args()
    from llama_index_ext_causalrag.causal_graph import CausalGraphIndex

    out = Path(args.out or tempfile.mkdtemp(prefix="graph_page_"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = CausalGraphIndex.from_persist_dir(args.persist_dir)
    report: Dict[str, Any] = {"graph": index.graph.summary_stats(), "load_s": round(time.perf_counter() - t0, 2)}
    t0 = time.perf_counter()
    gml = index.to_graphml(out / "graph.graphml")
    report["graphml"] = {"s": round(time.perf_counter() - t0, 2), "bytes": gml.stat().st_size}
    report["pages"] = []
    for n in args.max_nodes:
        t0 = time.perf_counter()
        page = index.graph_page(out / f"graph_{n}.html", max_nodes=n)
        row = {
            "max_nodes": n,
            "write_s": round(time.perf_counter() - t0, 2),
            "bytes": page.stat().st_size,
            "chromium_s": chromium_seconds(page, out / f"graph_{n}.png"),
        }
        report["pages"].append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
