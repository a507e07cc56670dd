"""Choose the propagation retriever's ``text_share`` and ``damping`` on a development set.

Runs the bench once over HolisQA (a development set) with ``dense``, ``bm25``, ``causalrag2`` and
one row per grid point, ``ppr_share{text_share}_d{damping}`` (``index.as_retriever(preset="ppr",
text_share=..., damping=...)`` on the bench's CausalGraphIndex), grouped by articles per
question; results.json is what ``causalrag-bench --out`` writes, with this script's command.
The ``ppr`` preset takes the grid point with the best mean CR@256/512/1024 over all questions.

    python benchmarks/scripts/tune_ppr.py --path $DATA/holisqa/biology --out benchmarks/results/ppr_tuning
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

SHARES = (0.2, 0.5, 0.8)
DAMPINGS = (0.5, 0.7)


def grid_rows() -> List[str]:
    """Register one bench row per grid point; their names, in grid order."""
    from causalrag_bench import causal_graph
    from causalrag_bench.registry import register_retriever

    names = []
    for share in SHARES:
        for damping in DAMPINGS:
            name = f"ppr_share{share}_d{damping}"

            def build(ctx, share=share, damping=damping):
                index = ctx.memo("causalrag2_index_members", lambda: causal_graph._load_or_build(ctx))
                return index.as_retriever(similarity_top_k=ctx.top_k, preset="ppr", text_share=share, damping=damping)

            register_retriever(name, f"preset 'ppr' with text_share={share}, damping={damping}", group="tune_ppr")(
                build
            )
            names.append(name)
    return names


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HolisQA domain folder (a development set)")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench.cli import main as bench
    from causalrag_bench.cli import script_command

    rows = ["dense", "bm25", "causalrag2", *grid_rows()]
    bench_argv = [
        "--dataset",
        "holisqa",
        "--path",
        args.path,
        "--group-by",
        "n_articles",
        "--budgets",
        "256,512,1024",
        "--retrievers",
        ",".join(rows),
        "--no-progress",
    ] + (["--out", args.out] if args.out else [])
    code = bench(bench_argv)
    if code == 0 and args.out:
        path = Path(args.out) / "results.json"
        report = json.loads(path.read_text())
        report["command"] = script_command("tune_ppr.py", argv)
        path.write_text(json.dumps(report, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
