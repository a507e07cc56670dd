"""Where UMGP's token budget goes, and which list carries the gold its context misses.

For every question the script builds what ``causalrag-bench`` builds for the ``umgp`` row
(``index_for(ctx).as_retriever(similarity_top_k=top_k)``) and the ``bm25`` and ``dense``
baselines of the same run, and reports per budget B (and per question group):

1. **Where the budget goes.** The tokens of ``retrieve_for_budget(question, B)``, cut and placed
   as the bench scores them (``cut_to_budget``, ``node_span``), and the share of them inside gold
   spans (a piece's tokens times the share of its characters inside gold, the characters P@B
   counts), by how each node came about: a promoted parent kept whole or fitted to its best
   sentences, an unpromoted unit (a window of the parent granularity, or a whole short document)
   kept whole or fitted. Also the pieces, passages (distinct promoted windows) and documents per
   context, and the same shares for the ``bm25`` and ``dense`` contexts at B and for the fused
   ranking itself cut at B (no promotion).
2. **Which list carries the missed gold.** For each gold span the ``umgp`` context at B does not
   cover (``metrics.Coverage``, 75% of its characters): is it covered by the ``bm25`` (or
   ``dense``) context at B; at which rank does one unit of UMGP's own sparse or dense lists (any
   granularity, read to ``--depth`` times ``candidates_per_list``) hold it; is one of the fused
   ranking's ``candidates`` holding it. Each missed span is also put where it was lost: cut from a
   passage the context took, in the fused candidates but its passage not taken, in a list but not
   in the fused candidates, only deeper than ``candidates_per_list``, or in no list.

    python benchmarks/scripts/diagnose_umgp.py --dataset holisqa --path $DATA/holisqa/biology \\
        --out benchmarks/results/umgp_diagnosis_biology
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import NodeWithScore, QueryBundle

from causalrag_bench import metrics as M
from causalrag_bench.cli import script_command, shown_data_path, write_results
from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.runner import node_span
from causalrag_bench.types import EvalDataset, EvalExample
from llama_index_ext_causalrag.experts import SparseExpert
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.entropy import fuse
from llama_index_ext_causalrag.text.provenance import get_provenance
from llama_index_ext_causalrag.text.tokens import cut_to_budget, node_tokens

Span = Tuple[str, int, int]
KINDS = ("parent_whole", "parent_fitted", "unit_whole", "unit_fitted")
CONTEXTS = ("umgp", "fused", "bm25", "dense")
LOST = ("cut_from_taken_passage", "passage_not_taken", "fusion", "list_depth", "no_list")
SHALLOW = 10  # "top 10" of a list


# ---- pure parts --------------------------------------------------------------------------------
def node_kind(prov: Mapping[str, Any]) -> str:
    """How a UMGP context node came about, from its promotion provenance."""
    return f"{'parent' if prov.get('promoted_from') else 'unit'}_{'fitted' if 'fitted_from' in prov else 'whole'}"


@dataclass(frozen=True)
class Piece:
    """The part of one context node inside the budget: its kind, span, tokens and passage."""

    kind: str
    span: Optional[Span]
    tokens: float
    passage: str


def gold_token_share(pieces: Sequence[Piece], gold: Sequence[Span]) -> Dict[str, Dict[str, float]]:
    """Per kind: tokens, gold tokens (tokens x the share of the piece's characters inside
    ``gold``), pieces, and pieces holding any gold."""
    out: Dict[str, Dict[str, float]] = {}
    for p in pieces:
        share = M.precision([p.span], gold) if p.span is not None else 0.0
        d = out.setdefault(p.kind, {"tokens": 0.0, "gold_tokens": 0.0, "pieces": 0, "with_gold": 0})
        d["tokens"] += p.tokens
        d["gold_tokens"] += p.tokens * share
        d["pieces"] += 1
        d["with_gold"] += int(share > 0)
    return out


class RankedSpans:
    """Spans in rank order as arrays: the first rank at which one span holds a gold span."""

    def __init__(self, docs: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.docs, self.starts, self.ends = docs, starts, ends

    @classmethod
    def of(cls, spans: Sequence[Optional[Span]]) -> "RankedSpans":
        """``None`` (an unplaced node) keeps its rank and holds nothing."""
        ok = [s if s is not None else ("", 0, 0) for s in spans]
        return cls(
            np.asarray([s[0] for s in ok], dtype=object),
            np.asarray([s[1] for s in ok], dtype=np.int64),
            np.asarray([s[2] for s in ok], dtype=np.int64),
        )

    def take(self, idx: np.ndarray) -> "RankedSpans":
        return RankedSpans(self.docs[idx], self.starts[idx], self.ends[idx])

    def first_holding(self, gold: Span, rule: str = "span") -> Optional[int]:
        """1-based rank of the first span holding ``gold`` alone (``rule`` as ``metrics.Coverage``)."""
        d, s, e = gold
        overlap = np.clip(np.minimum(self.ends, e) - np.maximum(self.starts, s), 0, None)
        need = overlap > 0 if rule == "doc" else (overlap >= M.MIN_COVERAGE * (e - s)) & (e > s)
        hit = np.flatnonzero((self.docs == d) & need)
        return int(hit[0]) + 1 if hit.size else None


def covered(spans: Sequence[Span], gold: Sequence[Span], rule: str = "span") -> List[bool]:
    """Which gold spans the union of ``spans`` covers (the bench's CR rule)."""
    cov = M.Coverage()
    for s in spans:
        cov.add(s)
    return [cov.covered(g, rule) for g in gold]


def missed_gold(
    gold: Sequence[Span],
    context: Sequence[Span],
    others: Mapping[str, Sequence[Span]],
    ranked: Mapping[str, RankedSpans],
    passages: Sequence[Span],
    rule: str = "span",
) -> List[Dict[str, Any]]:
    """One row per gold span ``context`` misses: is it covered by each of ``others`` (contexts), by
    the full ``passages`` the context was cut from, and each ranked list's first rank holding it."""
    hit = covered(context, gold, rule)
    other = {k: covered(v, gold, rule) for k, v in others.items()}
    inside = covered(passages, gold, rule)
    return [
        {
            "contexts": {k: c[i] for k, c in other.items()},
            "in_taken_passage": inside[i],
            "ranks": {k: r.first_holding(g, rule) for k, r in ranked.items()},
        }
        for i, g in enumerate(gold)
        if not hit[i]
    ]


def best_rank(ranks: Mapping[str, Optional[int]], expert: str) -> Optional[int]:
    """The best rank over ``expert``'s lists (keys ``"<expert>@<granularity>"``)."""
    found = [r for k, r in ranks.items() if k.startswith(expert + "@") and r is not None]
    return min(found) if found else None


def lost_at(row: Mapping[str, Any], per_list: int) -> str:
    """Where a missed gold span was lost (one of ``LOST``, first that applies)."""
    if row["in_taken_passage"]:
        return "cut_from_taken_passage"
    if row["ranks"].get("fused") is not None:
        return "passage_not_taken"
    best = [r for r in (best_rank(row["ranks"], "sparse"), best_rank(row["ranks"], "dense")) if r is not None]
    if best and min(best) <= per_list:
        return "fusion"
    return "list_depth" if best else "no_list"


def _pct(flags: Sequence[bool]) -> Optional[float]:
    return round(100.0 * sum(flags) / len(flags), 1) if flags else None


def source_shares(rows: Sequence[Mapping[str, Any]], per_list: int) -> Dict[str, Optional[float]]:
    """Share (%) of the missed gold spans ``rows`` that each source holds."""

    def within(r: Optional[int], k: int) -> bool:
        return r is not None and r <= k

    sp = [best_rank(r["ranks"], "sparse") for r in rows]
    de = [best_rank(r["ranks"], "dense") for r in rows]
    return {
        "bm25_context": _pct([r["contexts"]["bm25"] for r in rows]),
        "dense_context": _pct([r["contexts"]["dense"] for r in rows]),
        "sparse_lists": _pct([within(x, per_list) for x in sp]),
        "sparse_top10": _pct([within(x, SHALLOW) for x in sp]),
        "sparse_deeper_only": _pct([x is not None and x > per_list for x in sp]),
        "dense_lists": _pct([within(x, per_list) for x in de]),
        "dense_top10": _pct([within(x, SHALLOW) for x in de]),
        "dense_deeper_only": _pct([x is not None and x > per_list for x in de]),
        "sparse_not_dense": _pct([within(s, per_list) and not within(d, per_list) for s, d in zip(sp, de)]),
        "dense_not_sparse": _pct([within(d, per_list) and not within(s, per_list) for s, d in zip(sp, de)]),
        "fused_candidates": _pct([r["ranks"].get("fused") is not None for r in rows]),
        "bm25_context_not_sparse_lists": _pct(
            [r["contexts"]["bm25"] and not within(x, per_list) for r, x in zip(rows, sp)]
        ),
    }


def list_weights(scores: Mapping[str, np.ndarray], weighting: str = "entropy") -> Dict[str, float]:
    """Each list's weight in the fusion (``entropy.fuse`` on its scores)."""
    names = list(scores)
    cand = [(np.arange(len(scores[k])), np.asarray(scores[k], dtype=np.float64)) for k in names]
    res = fuse(cand, max([len(s) for s in scores.values()] + [1]), weighting=weighting)
    return {k: float(w) for k, w in zip(names, res.weights)}


# ---- one question ------------------------------------------------------------------------------
@dataclass
class Setup:
    dataset: EvalDataset
    umgp: Any  # the bench's umgp row: a PostprocessedRetriever (fusion, then promotion)
    baselines: Dict[str, Any]  # the bench's bm25 and dense rows
    lists: List[Tuple[str, Any, RankedSpans]]  # (expert@g, expert, its units' spans)
    per_list: int
    depth: int
    rule: str


def build_setup(ctx: BenchContext, depth_factor: int) -> Setup:
    umgp = get_spec("umgp").build(ctx)
    fusion = umgp.retriever
    lists = [
        (f"{e}@{g}", r, RankedSpans.of([node_span(NodeWithScore(node=n), ctx.dataset) for n in r.nodes]))
        for e, g, r in fusion.experts
    ]
    return Setup(
        ctx.dataset,
        umgp,
        {b: get_spec(b).build(ctx) for b in ("bm25", "dense")},
        lists,
        fusion.candidates_per_list,
        depth_factor * fusion.candidates_per_list,
        ctx.dataset.metadata.get("gold_rule", "span"),
    )


def expert_lists(setup: Setup, question: str, qvec: np.ndarray) -> Tuple[Dict[str, RankedSpans], Dict[str, np.ndarray]]:
    """Each list read to ``depth`` (ordered as the fusion orders it), and its first
    ``per_list`` scores (what the fusion weighs)."""
    ranked, scores = {}, {}
    for name, r, spans in setup.lists:
        sparse = isinstance(r, SparseExpert)
        s, nodes = (r.score_all(question) if sparse else r.score_all(qvec)), r.nodes
        idx = top_k_by_score_then_id(s, lambda i, nodes=nodes: nodes[i].id_, setup.depth)
        idx = np.asarray([i for i in idx if s[i] > 0] if sparse else idx, dtype=np.int64)
        ranked[name] = spans.take(idx)
        scores[name] = s[idx[: setup.per_list]].astype(np.float64)
    return ranked, scores


def bench_pieces(nodes: Sequence[NodeWithScore], budget: int, dataset: EvalDataset, kind: Optional[str]) -> List[Piece]:
    """``nodes`` cut at ``budget`` as ``runner.score_question`` cuts them; ``kind`` None: from provenance."""
    counts = [node_tokens(n) for n in nodes]
    out = []
    for i, (nws, frac) in enumerate(cut_to_budget(nodes, budget, token_counts=counts)):
        sp = node_span(nws, dataset)
        if sp is not None:
            sp = (sp[0], sp[1], sp[1] + int(round(frac * (sp[2] - sp[1]))))
        prov = get_provenance(nws)
        out.append(
            Piece(kind or node_kind(prov), sp, counts[i] * frac, str(prov.get("fitted_from") or nws.node.node_id))
        )
    return out


def context_stats(pieces: Sequence[Piece], gold: Sequence[Span], rule: str) -> Dict[str, Any]:
    spans = [p.span for p in pieces if p.span is not None]
    return {
        "cr": sum(covered(spans, gold, rule)) / len(gold),
        "kinds": gold_token_share(pieces, gold),
        "pieces": len(pieces),
        "passages": len({p.passage for p in pieces}),
        "docs": len({s[0] for s in spans}),
    }


def passage_spans(setup: Setup, pieces: Sequence[Piece]) -> List[Span]:
    """The whole windows the ``umgp`` pieces were taken from (before fitting or truncation)."""
    store = setup.umgp.postprocessors[0].docstore
    nodes = [store.get_node(p, raise_error=False) for p in {p.passage for p in pieces}]
    return [s for s in (node_span(NodeWithScore(node=n), setup.dataset) for n in nodes if n is not None) if s]


def question_record(ex: EvalExample, setup: Setup, budgets: Sequence[int], group_by: Optional[str]) -> Dict[str, Any]:
    ds, qb = setup.dataset, QueryBundle(ex.question)
    setup.umgp.retrieve(qb)
    fused = list(setup.umgp._last[1])  # the fused ranking retrieve_for_budget refits (read only)
    qvec = np.asarray(
        qb.embedding if qb.embedding is not None else setup.umgp.retriever.experts[0][2].embed_query(qb),
        dtype=np.float32,
    )
    ranked, scores = expert_lists(setup, ex.question, qvec)
    ranked["fused"] = RankedSpans.of([node_span(n, ds) for n in fused])
    base = {k: r.retrieve(ex.question) for k, r in setup.baselines.items()}
    gold = [(g.doc_id, g.start, g.end) for g in ex.gold]
    weights = list_weights(scores, setup.umgp.retriever.weighting)
    rec: Dict[str, Any] = {
        "group": str(ex.metadata.get(group_by)) if group_by else None,
        "n_gold": len(gold),
        "sparse_weight": sum(w for k, w in weights.items() if k.startswith("sparse@")),
        "budgets": {},
    }
    for b in budgets:
        pieces = {
            "umgp": bench_pieces(setup.umgp.retrieve_for_budget(ex.question, b), b, ds, None),
            "fused": bench_pieces(fused, b, ds, "fused_unit"),
            **{k: bench_pieces(v, b, ds, "chunk") for k, v in base.items()},
        }
        spans = {k: [p.span for p in v if p.span is not None] for k, v in pieces.items()}
        missed = missed_gold(
            gold, spans["umgp"], {k: spans[k] for k in base}, ranked, passage_spans(setup, pieces["umgp"]), setup.rule
        )
        rec["budgets"][b] = {
            "contexts": {k: context_stats(v, gold, setup.rule) for k, v in pieces.items()},
            "missed": missed,
        }
    return rec


# ---- summaries ---------------------------------------------------------------------------------
def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 2) if values else 0.0


def summarise_context(stats: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """One context over questions: CR (%), mean tokens, pooled gold share (%), per kind."""
    kinds: Dict[str, Dict[str, float]] = {}
    for st in stats:
        for k, d in st["kinds"].items():
            acc = kinds.setdefault(k, {"tokens": 0.0, "gold_tokens": 0.0, "pieces": 0, "with_gold": 0})
            for f in acc:
                acc[f] += d[f]
    n, tok = len(stats), sum(d["tokens"] for d in kinds.values())
    return {
        "CR": round(100.0 * sum(s["cr"] for s in stats) / n, 1),
        "tokens": round(tok / n, 1),
        "gold_share": round(100.0 * sum(d["gold_tokens"] for d in kinds.values()) / tok, 1) if tok else 0.0,
        **{f: _mean([s[f] for s in stats]) for f in ("pieces", "passages", "docs")},
        "kinds": {
            k: {
                "tokens": round(d["tokens"] / n, 1),
                "gold_share": round(100.0 * d["gold_tokens"] / d["tokens"], 1) if d["tokens"] else 0.0,
                "pieces": round(d["pieces"] / n, 2),
                "with_gold": round(100.0 * d["with_gold"] / d["pieces"], 1) if d["pieces"] else 0.0,
            }
            for k, d in sorted(kinds.items())
        },
    }


def summarise(recs: Sequence[Mapping[str, Any]], budgets: Sequence[int], setup: Setup) -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "n": len(recs),
        "sparse_weight": round(_mean([r["sparse_weight"] for r in recs]), 3),
        "budgets": {},
    }
    names = [name for name, _, _ in setup.lists]
    for b in budgets:
        rows = [m for r in recs for m in r["budgets"][b]["missed"]]
        n_gold = sum(r["n_gold"] for r in recs)
        lost = [lost_at(m, setup.per_list) for m in rows]
        out["budgets"][str(b)] = {
            "contexts": {c: summarise_context([r["budgets"][b]["contexts"][c] for r in recs]) for c in CONTEXTS},
            "gold": n_gold,
            "missed": len(rows),
            "missed_pct": round(100.0 * len(rows) / n_gold, 1),
            "sources": source_shares(rows, setup.per_list),
            **{
                key: {k: _pct([m["ranks"][k] is not None and m["ranks"][k] <= top for m in rows]) for k in names}
                for key, top in (("lists", setup.per_list), ("lists_top10", SHALLOW))
            },
            "lost_at": {k: _pct([x == k for x in lost]) for k in LOST},
        }
    return out


def run(
    setup: Setup, examples: Sequence[EvalExample], budgets: Sequence[int], group_by: Optional[str], progress: bool
) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    recs = []
    t0 = time.perf_counter()
    for i, ex in enumerate(examples, start=1):
        recs.append(question_record(ex, setup, budgets, group_by))
        if progress and (i % 50 == 0 or i == len(examples)):
            print(f"  {i}/{len(examples)} questions, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    groups = sorted({r["group"] for r in recs if r["group"] is not None})
    return (
        summarise(recs, budgets, setup),
        {g: summarise([r for r in recs if r["group"] == g], budgets, setup) for g in groups},
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, choices=("graphrag_bench", "holisqa"))
    ap.add_argument("--path", required=True, help="dataset folder")
    ap.add_argument("--budgets", default="256,512,1024", help="token budgets, e.g. 256,512,1024")
    ap.add_argument("--group-by", default=None, help="also report per value of this question metadata key (type)")
    ap.add_argument("--limit", type=int, default=None, help="first N questions only (the whole corpus is indexed)")
    ap.add_argument("--top-k", type=int, default=10, help="the bench's --top-k (default 10)")
    ap.add_argument("--depth", type=int, default=10, help="read each list to this many times candidates_per_list")
    ap.add_argument("--cache-dir", default=None, help="the bench's embedding cache (default: causalrag-bench's)")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--out", default=None, help="folder for results.json")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    if not budgets or min(budgets) <= 0 or args.top_k < 1 or args.depth < 1:
        parser().error(
            f"--budgets must be positive token counts, --top-k and --depth >= 1; got {args.budgets!r}, "
            f"{args.top_k}, {args.depth}."
        )
    try:
        import torch

        torch.set_num_threads(args.torch_threads)
    except ImportError:
        pass
    from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
    from causalrag_bench.loaders import load_dataset
    from causalrag_bench.runner import validate_examples

    t0 = time.perf_counter()
    dataset = load_dataset(args.dataset, args.path)
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    ctx = BenchContext(
        dataset=dataset,
        embed_model=cached_default_embed_model(cache_dir),
        top_k=args.top_k,
        work_dir=cache_dir / "bench" / args.dataset / Path(args.path).resolve().name,
        show_progress=not args.no_progress,
    )
    examples = validate_examples(dataset, drop_no_gold=True)[: args.limit or None]
    setup = build_setup(ctx, args.depth)
    build_s = time.perf_counter() - t0
    summary, groups = run(setup, examples, budgets, args.group_by, not args.no_progress)
    fusion = setup.umgp.retriever
    report = {
        "dataset": dataset.name,
        "path": shown_data_path(args.path),
        "n_questions": len(examples),
        "corpus_size": len(dataset.documents),
        "budgets": budgets,
        "group_by": args.group_by,
        "command": script_command("diagnose_umgp.py", argv),
        "settings": {
            "top_k": args.top_k,
            "candidates": fusion.similarity_top_k,
            "candidates_per_list": setup.per_list,
            "list_depth": setup.depth,
            "lists": [name for name, _, _ in setup.lists],
            "weighting": fusion.weighting,
        },
        "build_s": round(build_s, 1),
        "run_s": round(time.perf_counter() - t0 - build_s, 1),
        "all": summary,
        "groups": groups,
    }
    from causalrag_bench.perf_tables import umgp_diagnosis_table

    print(umgp_diagnosis_table(report))
    if args.out:
        write_results(args.out, report, embed_model=ctx.embed_model, llm=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
