"""Choose the ``documents`` preset of ``MultiGranularityIndex`` on the first half of a multi-hop set.

Builds ``MultiGranularityIndex.from_documents(docs, parser=MultiGranularityNodeParser(...))`` once per
layout (``none``: the default parser; ``N``: ``whole_document_tokens=N``; ``dvN``:
``document_vector_tokens=N``) and scores ``index.as_retriever(**variant)`` by PR@2 / PR@5 on the first
half of the questions (the tuning half) and on the second; optional ``"mode"`` in a variant replaces the
fusion by one of ``tune_umgp_fusion.py``'s modes (e.g. ``sum_c10``). MiniLM from the bench's embedding
cache; the rows ``dense``, ``bm25``, ``rrf`` with ``--baselines``.

    python benchmarks/scripts/tune_umgp_documents.py --path $DATA/multihop/musique.json --layouts none,dv256 \\
        --variants '{"default": {}, "lists": {"parent_evidence": "lists"}}' --baselines
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


def parser_for(layout: str):
    from llama_index_ext_causalrag.multigranularity.windows import DEFAULT_GRANULARITIES, MultiGranularityNodeParser

    kw = (
        {"document_vector_tokens": int(layout[2:])}
        if layout.startswith("dv")
        else {}
        if layout == "none"
        else {"whole_document_tokens": int(layout)}
    )
    return MultiGranularityNodeParser(
        granularities=DEFAULT_GRANULARITIES, parent_granularity=max(DEFAULT_GRANULARITIES), **kw
    )


def by_half(ranks: List[List[str]], gold: List[List[str]]) -> Dict[str, float]:
    h = len(gold) // 2
    out = {}
    for part, sl in (("first", slice(0, h)), ("second", slice(h, None))):
        for k in (2, 5):
            v = [M.passage_recall_at_k(r, g, k) for r, g in zip(ranks[sl], gold[sl])]
            out[f"{part} PR@{k}"] = round(100 * float(np.mean(v)), 2)
    return out


def retrieve_with(retriever, mode: str, questions: List[str]):
    """``retriever.retrieve`` of each question, with ``tune_umgp_fusion.py``'s fusion ``mode`` in place."""
    if mode == "sum":
        return [retriever.retrieve(q) for q in questions]
    sys.path.insert(0, str(Path(__file__).parent))
    import tune_umgp_fusion as TF

    from llama_index_ext_causalrag.multigranularity import retriever as R

    TF.MODE["name"] = mode
    R.fuse = lambda c, n, weighting="entropy": TF.fuse_mode(c, n, weighting, ())
    try:
        return [retriever.retrieve(q) for q in questions]
    finally:
        R.fuse = TF.PACKAGE_FUSE


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HippoRAG-layout questions file (a development set)")
    p.add_argument("--layouts", default="none,dv256", help="comma separated: none | N | dvN")
    p.add_argument("--variants", default='{"default": {}, "lists": {"parent_evidence": "lists"}}')
    p.add_argument("--baselines", action="store_true", help="also score dense, bm25, rrf")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

    ds = load_dataset("hipporag", args.path)
    examples = validate_examples(ds, True)
    questions = [ex.question for ex in examples]
    gold = [list(dict.fromkeys(g.doc_id for g in ex.gold)) for ex in examples]
    em = cached_default_embed_model(default_cache_dir())

    def ranks_of(nodes_per_question) -> List[List[str]]:
        return [M.passage_ranking([(node_span(n, ds) or ("", 0, 0))[0] for n in ns]) for ns in nodes_per_question]

    rows = []
    if args.baselines:
        ctx = BenchContext(dataset=ds, embed_model=em, work_dir=default_cache_dir() / "bench" / "hipporag", top_k=10)
        for b in ("dense", "bm25", "rrf"):
            r = get_spec(b).build(ctx)
            rows.append({"row": b, **by_half(ranks_of(r.retrieve(q) for q in questions), gold)})
            print(json.dumps(rows[-1]), flush=True)
    for layout in args.layouts.split(","):
        index = MultiGranularityIndex.from_documents(
            ds.documents, embed_model=em, embedding_mode="sentences", parser=parser_for(layout)
        )
        for name, variant in json.loads(args.variants).items():
            variant = dict(variant)
            mode = variant.pop("mode", "sum")
            r = index.as_retriever(similarity_top_k=10, **variant)
            rows.append({"layout": layout, "row": name, **by_half(ranks_of(retrieve_with(r, mode, questions)), gold)})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        report = {
            "what": __doc__.split("\n\n")[0],
            "command": script_command("tune_umgp_documents.py", argv),
            "dataset": shown_data_path(args.path),
            "n_questions": len(examples),
            "rows": rows,
        }
        write_results(Path(args.out), report, embed_model=em, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
