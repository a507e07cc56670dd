"""Why ``umgp_passages`` trails the best LlamaIndex row on multi-hop passage recall, question by question.

Builds what ``causalrag-bench`` builds for ``dense``, ``bm25``, ``rrf`` and ``umgp_passages`` (the same
``BenchContext``, MiniLM from the embedding cache) and, on the ``umgp_passages`` index, its stages:

* ``fusion``: ``as_retriever(promote=False)`` (entropy fusion ranked by R = P / len^0.5, no promotion);
* ``fusion_nolen``: the same with ``length_exponent=0`` (ranked by the mixture P);
* ``dense_expert`` / ``sparse_expert``: one expert's lists only, no promotion, no length penalty.

PR@k reads ``retrieve()``, so the budget fitting (``retrieve_for_budget``) plays no part in it. For
each gold passage the best baseline (``--against``, default: the best of dense/bm25/rrf by PR@5) has
in its first 5 passages and ``umgp_passages`` does not (and the reverse), the stage that lost it:

* ``promotion``: in the first 5 of ``fusion`` but not of the final ranking;
* ``length_penalty``: in the first 5 of ``fusion_nolen`` but not of ``fusion``;
* ``fusion_dense_only`` / ``fusion_sparse_only`` / ``fusion_both``: not in ``fusion_nolen``'s first 5
  although the dense (sparse, both) expert alone has it there: the mixture's weights lost it;
* ``experts``: neither expert alone has it in its first 5 (the units or their scores).

Each passage is also marked ``long`` when its document is longer than the whole-document limit
(windowed, not one unit). Also: the paired mean difference of PR@2/PR@5 against the baseline with
its standard error, and the mean normalised weight of the dense and the BM25 lists.

    python benchmarks/scripts/diagnose_umgp_passages.py --path $DATA/multihop/2wikimultihopqa.json \\
        --out benchmarks/results/umgp_passages_diagnosis_2wikimultihopqa
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from causalrag_bench import metrics as M
from causalrag_bench.cli import script_command, shown_data_path, write_results
from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.runner import node_span, validate_examples
from llama_index_ext_causalrag.text.provenance import get_provenance
from llama_index_ext_causalrag.text.tokens import count_tokens

BASELINES = ("dense", "bm25", "rrf")
STAGES = {
    "fusion": {"promote": False},
    "fusion_nolen": {"promote": False, "length_exponent": 0.0},
    "dense_expert": {"promote": False, "length_exponent": 0.0, "expert_names": ("dense",)},
    "sparse_expert": {"promote": False, "length_exponent": 0.0, "expert_names": ("sparse",)},
}
TOP = 5


def where_lost(doc: str, i: int, ranks: Dict[str, List[List[str]]]) -> str:
    """The stage of ``umgp_passages`` at which gold passage ``doc`` of question ``i`` left the first 5."""
    top = {name: ranks[name][i][:TOP] for name in ranks}
    if doc in top["fusion"]:
        return "promotion"
    if doc in top["fusion_nolen"]:
        return "length_penalty"
    dense, sparse = doc in top["dense_expert"], doc in top["sparse_expert"]
    if dense and sparse:
        return "fusion_both"
    if dense:
        return "fusion_dense_only"
    if sparse:
        return "fusion_sparse_only"
    return "experts"


def changes(
    gold: Sequence[Sequence[str]], ranks: Dict[str, List[List[str]]], against: str, long_docs: set
) -> Dict[str, Dict[str, int]]:
    """Gold passages in ``against``'s first 5 and not ``umgp_passages``'s (lost), and the reverse
    (gained), counted by the stage that lost them (or, for gains, the same classification read the
    other way) and by whether their document is long."""
    out: Dict[str, Dict[str, int]] = {"lost": {}, "gained": {}}
    for i, g in enumerate(gold):
        for d in g:
            a, b = d in ranks[against][i][:TOP], d in ranks["umgp_passages"][i][:TOP]
            if a == b:
                continue
            kind = "lost" if a else "gained"
            stage = where_lost(d, i, ranks) if a else "—"
            for key in ("total", f"stage:{stage}" if a else None, "long" if d in long_docs else "short"):
                if key is not None:
                    out[kind][key] = out[kind].get(key, 0) + 1
    return out


def paired(gold: Sequence[Sequence[str]], ranks: Dict[str, List[List[str]]], against: str, k: int) -> Dict:
    """Mean per-question difference of PR@k (umgp_passages - against), its standard error, and
    the number of questions where they differ."""
    d = np.array(
        [
            M.passage_recall_at_k(ranks["umgp_passages"][i], g, k) - M.passage_recall_at_k(ranks[against][i], g, k)
            for i, g in enumerate(gold)
        ]
    )
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0.0
    return {"diff": round(100 * d.mean(), 2), "se": round(100 * se, 2), "questions_differing": int((d != 0).sum())}


def list_weights(retriever, questions: Sequence[str]) -> Dict[str, float]:
    """Mean normalised weight of the dense and of the BM25 lists (from the first node's provenance)."""
    acc: Dict[str, List[float]] = {"dense": [], "sparse": []}
    for q in questions:
        nodes = retriever.retrieve(q)
        conf = get_provenance(nodes[0]).get("confidences", {}) if nodes else {}
        total = sum(conf.values())
        if total > 0:
            for e in acc:
                acc[e].append(sum(v for k, v in conf.items() if k.startswith(e + "@")) / total)
    return {e: round(float(np.mean(v)), 3) for e, v in acc.items() if v}


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True, help="a HippoRAG-layout questions file (a development set)")
    p.add_argument("--against", default=None, help="the baseline row compared with; default the best by PR@5")
    p.add_argument("--out", default=None, help="folder for results.json")
    args = p.parse_args(argv)

    from causalrag_bench import umg
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset

    ds = load_dataset("hipporag", args.path)
    examples = validate_examples(ds, True)
    em = cached_default_embed_model(default_cache_dir())
    ctx = BenchContext(dataset=ds, embed_model=em, work_dir=default_cache_dir() / "bench" / "hipporag", top_k=10)
    rows = {name: get_spec(name).build(ctx) for name in (*BASELINES, "umgp_passages")}
    index = ctx.memo("umg_index_passages", lambda: None)
    rows.update({name: index.as_retriever(similarity_top_k=10, **ov) for name, ov in STAGES.items()})
    ranks = {
        name: [
            M.passage_ranking([(node_span(n, ds) or ("", 0, 0))[0] for n in r.retrieve(ex.question)]) for ex in examples
        ]
        for name, r in rows.items()
    }
    gold = [list(dict.fromkeys(g.doc_id for g in ex.gold)) for ex in examples]
    recall = {
        name: {
            f"PR@{k}": round(100 * float(np.mean([M.passage_recall_at_k(r, g, k) for r, g in zip(rk, gold)])), 2)
            for k in (2, TOP)
        }
        for name, rk in ranks.items()
    }
    against = args.against or max(BASELINES, key=lambda b: (recall[b][f"PR@{TOP}"], recall[b]["PR@2"]))
    long_docs = {d.node_id for d in ds.documents if count_tokens(d.text) > umg.PASSAGE_TOKENS}
    report = {
        "what": __doc__.split("\n\n")[0],
        "command": script_command("diagnose_umgp_passages.py", argv),
        "dataset": shown_data_path(args.path),
        "n_questions": len(examples),
        "whole_document_tokens": umg.PASSAGE_TOKENS,
        "recall": recall,
        "against": against,
        "changes_at_5": changes(gold, ranks, against, long_docs),
        "paired": {f"PR@{k}": paired(gold, ranks, against, k) for k in (2, TOP)},
        "list_weights": list_weights(rows["fusion_nolen"], [ex.question for ex in examples]),
    }
    import json

    print(json.dumps(report, indent=1))
    if args.out:
        write_results(Path(args.out), report, embed_model=em, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
