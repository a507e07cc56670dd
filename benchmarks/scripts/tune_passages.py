"""Choose the ``passages`` preset's ``title_weight`` on multi-hop development questions.

Runs the bench once over a HippoRAG-layout set (``--path FOLDER/NAME.json``) with ``dense``,
``causalrag2_ppr`` (title_weight 0) and one row per grid point, ``ppr_title{w}``
(``index.as_retriever(preset="ppr", title_weight=w)`` on the bench's CausalGraphIndex);
results.json is what ``causalrag-bench --out`` writes, with this script's command. The
``passages`` preset takes the weight with the best mean PR@5 over the three sets.

    python benchmarks/scripts/tune_passages.py --path $DATA/multihop/2wikimultihopqa.json --out benchmarks/results/passages_tuning_2wikimultihopqa
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

WEIGHTS = (1.0, 5.0, 20.0)


def grid_rows() -> List[str]:
    """Register one bench row per grid point; their names, in grid order."""
    from causalrag_bench import causal_graph
    from causalrag_bench.registry import register_retriever

    names = []
    for w in WEIGHTS:
        name = f"ppr_title{w:g}"

        def build(ctx, w=w):
            return causal_graph._retriever(ctx, preset="ppr", title_weight=w)

        register_retriever(name, f"preset 'ppr' with title_weight={w:g}", group="tune_passages")(build)
        names.append(name)
    return names


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HippoRAG-layout questions file (a development set)")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench.cli import main as bench
    from causalrag_bench.cli import script_command

    rows = ["dense", "causalrag2_ppr", *grid_rows()]
    bench_argv = ["--dataset", "hipporag", "--path", args.path, "--retrievers", ",".join(rows), "--no-progress"] + (
        ["--out", args.out] if args.out else []
    )
    code = bench(bench_argv)
    if code == 0 and args.out:
        path = Path(args.out) / "results.json"
        report = json.loads(path.read_text())
        report["command"] = script_command("tune_passages.py", argv)
        path.write_text(json.dumps(report, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
