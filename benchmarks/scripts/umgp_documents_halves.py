"""PR@2 / PR@5 of ``dense``, ``bm25``, ``rrf``, ``umgp`` and ``umgp_documents`` on each half of a
multi-hop set's questions.

The preset ``documents`` (and its settings: ``parent_evidence="lists"``, ``document_vector_tokens=256``)
was chosen on the FIRST half of HotpotQA, 2WikiMultiHopQA and MuSiQue; the second half was not looked
at while choosing. Builds the rows as ``causalrag-bench`` does (the same ``BenchContext``, MiniLM from
the embedding cache, ``top_k`` 10) and scores the questions ``[:n // 2]`` and ``[n // 2:]``; also the
best LlamaIndex row of each half and ``umgp_documents`` minus it.

    python benchmarks/scripts/umgp_documents_halves.py --path $DATA/multihop/musique.json \\
        --out benchmarks/results/umgp_documents_halves_musique
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from causalrag_bench import metrics as M
from causalrag_bench.cli import script_command, shown_data_path, write_results
from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.runner import node_span, validate_examples

ROWS = ("dense", "bm25", "rrf", "umgp", "umgp_documents")
BASELINES = ("dense", "bm25", "rrf")
KS = (2, 5)


def recall(ranks: List[List[str]], gold: List[List[str]], k: int) -> float:
    return round(100 * float(np.mean([M.passage_recall_at_k(r, g, k) for r, g in zip(ranks, gold)])), 2)


def halves(ranks: Dict[str, List[List[str]]], gold: List[List[str]]) -> Dict[str, Dict]:
    """Each half's PR@k per row, its best LlamaIndex row and ``umgp_documents`` minus that row."""
    h = len(gold) // 2
    out = {}
    for name, sl in (("first", slice(0, h)), ("second", slice(h, None))):
        part = {row: {f"PR@{k}": recall(rk[sl], gold[sl], k) for k in KS} for row, rk in ranks.items()}
        for k in KS:
            key = f"PR@{k}"
            best = max(BASELINES, key=lambda b: part[b][key])
            part[f"best {key}"] = {"row": best, "value": part[best][key]}
            part[f"umgp_documents - best {key}"] = round(part["umgp_documents"][key] - part[best][key], 2)
        out[name] = {"questions": len(gold[sl]), **part}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HippoRAG-layout questions file (a development set)")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset

    ds = load_dataset("hipporag", args.path)
    examples = validate_examples(ds, True)
    em = cached_default_embed_model(default_cache_dir())
    ctx = BenchContext(dataset=ds, embed_model=em, work_dir=default_cache_dir() / "bench" / "hipporag", top_k=10)
    ranks = {}
    for row in ROWS:
        r = get_spec(row).build(ctx)
        ranks[row] = [
            M.passage_ranking([(node_span(n, ds) or ("", 0, 0))[0] for n in r.retrieve(ex.question)]) for ex in examples
        ]
    gold = [list(dict.fromkeys(g.doc_id for g in ex.gold)) for ex in examples]
    report = {
        "what": __doc__.split("\n\n")[0],
        "command": script_command("umgp_documents_halves.py", argv),
        "dataset": shown_data_path(args.path),
        "n_questions": len(examples),
        "all": {row: {f"PR@{k}": recall(rk, gold, k) for k in KS} for row, rk in ranks.items()},
        "halves": halves(ranks, gold),
    }
    print(json.dumps(report, indent=1))
    if args.out:
        write_results(Path(args.out), report, embed_model=em, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
