"""Where the gold evidence of HolisQA's multi-article questions lies, and what a retriever that
starts from the question can reach of it.

For each question whose gold sentences sit in two or more articles, the *primary* article is the
one holding most of them (ties: the one ranked higher for the question); the others are
*secondary*. The script reports, per domain:

* the share of gold sentences in secondary articles, and how many secondary articles are copies of
  the primary (the same text: the corpus holds duplicated abstracts);
* how the question ranks those sentences and articles: each gold sentence's rank among all the
  corpus's sentences by cosine to the question (MiniLM), and each gold article's best rank among
  all articles by dense (its best sentence's cosine) or BM25 (its whole text); the questions whose
  primary article is outside the top ``--top-articles``, and for comparison the share of
  single-article questions whose gold article is;
* whether CausalRAG2's gated expansion reaches a secondary article, seeded as the bridge seeds it
  (the question, plus the entities of the ``umgp`` context at the largest budget), and how many
  articles it reaches per question;
* ``umgp``'s CR@B on these questions split into primary and secondary gold, and the *headroom*:
  the CR points the secondary gold that ``umgp`` leaves out would add if a retriever put all of it
  into the context for free, counting only secondary articles the question can reach (top
  ``--top-articles`` by dense or BM25, or reached by the graph).

    python benchmarks/scripts/multi_article_reach.py --path $DATA/holisqa/biology $DATA/holisqa/business \
        --out benchmarks/results/multi_article_reach

Reuses the bench's embedding cache and persisted CausalRAG2 index (``causalrag-bench`` runs on the
same paths build them). Writes --out/results.json (per question and per domain).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Sequence

import bm25s
import numpy as np
from llama_index.core.schema import MetadataMode

from causalrag_bench import metrics as M
from causalrag_bench.causal_graph import _load_or_build
from causalrag_bench.cli import script_command, write_results
from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
from causalrag_bench.loaders import load_dataset
from causalrag_bench.registry import BenchContext
from causalrag_bench.runner import node_span
from causalrag_bench.types import EvalDataset, EvalExample, GoldSpan
from causalrag_bench.umg import index_for


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of every position under ``scores`` (descending, ties by position)."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.int64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


class DomainIndex:
    """Sentence vectors and an article BM25 index of one HolisQA domain, for ranking by question."""

    def __init__(self, dataset: EvalDataset, embed_model: Any) -> None:
        spans: Dict[str, GoldSpan] = dataset.metadata["sentence_spans"]
        self.sentence_keys = sorted({(g.doc_id, g.start, g.end) for g in spans.values()})
        texts = [dataset.doc_text(d)[s:e] for d, s, e in self.sentence_keys]
        emb = np.asarray(embed_model.get_text_embedding_batch(texts), dtype=np.float32)
        self.sentence_emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        self.sentence_pos = {k: i for i, k in enumerate(self.sentence_keys)}
        self.doc_ids = [d.doc_id for d in dataset.documents]
        self.doc_pos = {d: i for i, d in enumerate(self.doc_ids)}
        self.sentence_doc = np.asarray([self.doc_pos[d] for d, _, _ in self.sentence_keys])
        self.bm25 = bm25s.BM25()
        self.bm25.index(
            bm25s.tokenize([d.text for d in dataset.documents], stopwords="en", show_progress=False),
            show_progress=False,
        )
        self.embed_model = embed_model

    def rank(self, question: str) -> Dict[str, Any]:
        q = np.asarray(self.embed_model.get_query_embedding(question), dtype=np.float32)
        cos = self.sentence_emb @ (q / max(float(np.linalg.norm(q)), 1e-12))
        best = np.full(len(self.doc_ids), -np.inf, dtype=np.float32)
        np.maximum.at(best, self.sentence_doc, cos)
        docs, scores = self.bm25.retrieve(
            bm25s.tokenize([question], stopwords="en", show_progress=False), k=len(self.doc_ids), show_progress=False
        )
        bm = np.zeros(len(self.doc_ids), dtype=np.float32)
        bm[docs[0]] = scores[0]
        return {"q": q, "sentence_rank": _ranks(cos), "dense_doc_rank": _ranks(best), "bm25_doc_rank": _ranks(bm)}


def _covered(context: Sequence[Any], gold: Sequence[GoldSpan], dataset: EvalDataset) -> List[bool]:
    cov = M.Coverage()
    for n in context:
        sp = node_span(n, dataset)
        if sp is not None:
            cov.add(sp)
    return [cov.covered((g.doc_id, g.start, g.end)) for g in gold]


def question_row(
    ex: EvalExample,
    dataset: EvalDataset,
    di: DomainIndex,
    umgp: Any,
    bridge: Any,
    budgets: Sequence[int],
    top_articles: int,
) -> Dict[str, Any]:
    """One multi-article question; ``bridge`` is the ``causalrag2_seeded`` row's
    CausalBridgeRetriever over ``umgp``, whose graph and context seeds the reach uses."""
    r = di.rank(ex.question)
    doc_rank = {
        d: int(min(r["dense_doc_rank"][di.doc_pos[d]], r["bm25_doc_rank"][di.doc_pos[d]]))
        for d in {g.doc_id for g in ex.gold}
    }
    by_doc: Dict[str, int] = defaultdict(int)
    for g in ex.gold:
        by_doc[g.doc_id] += 1
    primary = min(by_doc, key=lambda d: (-by_doc[d], doc_rank[d]))
    contexts = {b: umgp.retrieve_for_budget(ex.question, b) for b in budgets}
    text = " ".join(n.node.get_content(metadata_mode=MetadataMode.NONE) for n in contexts[max(budgets)])
    graph = bridge.graph
    reach = graph.reach(ex.question, r["q"], graph.mentioned_entities(text), bridge.context_seeds)
    graph_docs = {graph.units[u].ref_doc_id for u in reach.hits}
    secondary = sorted(d for d in by_doc if d != primary)
    reachable = {d for d in secondary if doc_rank[d] <= top_articles or d in graph_docs}
    primary_text = dataset.doc_text(primary)
    row: Dict[str, Any] = {
        "qid": ex.qid,
        "n_gold": len(ex.gold),
        "primary": primary,
        "secondary": [
            {
                "doc": d,
                "gold": by_doc[d],
                "dense_rank": int(r["dense_doc_rank"][di.doc_pos[d]]),
                "bm25_rank": int(r["bm25_doc_rank"][di.doc_pos[d]]),
                "graph_reached": d in graph_docs,
                "same_text_as_primary": dataset.doc_text(d) == primary_text,
            }
            for d in secondary
        ],
        "graph_articles": len(graph_docs),
        "primary_rank": doc_rank[primary],
        "gold_sentence_ranks": [
            {
                "primary": g.doc_id == primary,
                "rank": int(r["sentence_rank"][di.sentence_pos[(g.doc_id, g.start, g.end)]]),
            }
            for g in ex.gold
        ],
        "budgets": {},
    }
    for b, ctx in contexts.items():
        cov = _covered(ctx, ex.gold, dataset)
        left = [g for g, c in zip(ex.gold, cov) if not c and g.doc_id in reachable]
        row["budgets"][str(b)] = {
            "primary": sum(c for g, c in zip(ex.gold, cov) if g.doc_id == primary) / len(ex.gold),
            "secondary": sum(c for g, c in zip(ex.gold, cov) if g.doc_id != primary) / len(ex.gold),
            "headroom": len(left) / len(ex.gold),
        }
    return row


def single_article_far(examples: Sequence[EvalExample], di: DomainIndex, top_articles: int) -> float:
    """Share (%) of single-article questions whose gold article is outside the question's top
    ``top_articles`` by both dense and BM25: the same test on the questions the subset is compared with."""
    far = 0
    for ex in examples:
        r, pos = di.rank(ex.question), di.doc_pos[ex.gold[0].doc_id]
        far += min(r["dense_doc_rank"][pos], r["bm25_doc_rank"][pos]) > top_articles
    return round(100.0 * far / max(len(examples), 1), 1)


def summarise(
    rows: Sequence[Dict[str, Any]], budgets: Sequence[int], top_articles: int, n_sentences: int, n_articles: int
) -> Dict[str, Any]:
    sec = [s for r in rows for s in r["secondary"]]
    best = [min(s["dense_rank"], s["bm25_rank"]) for s in sec]
    prim_s = [g["rank"] for r in rows for g in r["gold_sentence_ranks"] if g["primary"]]
    sec_s = [g["rank"] for r in rows for g in r["gold_sentence_ranks"] if not g["primary"]]
    n_gold = sum(r["n_gold"] for r in rows)

    def near(s: Dict[str, Any]) -> bool:
        return min(s["dense_rank"], s["bm25_rank"]) <= top_articles

    out: Dict[str, Any] = {
        "questions": len(rows),
        "sentences": n_sentences,
        "articles": n_articles,
        "top_articles": top_articles,
        "gold_secondary_share": round(100.0 * len(sec_s) / n_gold, 1),
        "primary_sentence_rank_median": statistics.median(prim_s),
        "secondary_sentence_rank_median": statistics.median(sec_s),
        "secondary_articles": len(sec),
        "secondary_article_rank_median": statistics.median(best),
        "secondary_articles_near": sum(near(s) for s in sec),
        "secondary_articles_graph": sum(s["graph_reached"] for s in sec),
        "graph_articles_median": statistics.median(r["graph_articles"] for r in rows),
        "secondary_articles_same_text": sum(s["same_text_as_primary"] for s in sec),
        "questions_with_same_text_secondary": sum(any(s["same_text_as_primary"] for s in r["secondary"]) for r in rows),
        "secondary_articles_reachable": sum(near(s) or s["graph_reached"] for s in sec),
        "questions_no_reachable_secondary": sum(
            not any(near(s) or s["graph_reached"] for s in r["secondary"]) for r in rows
        ),
        "primary_article_rank_median": statistics.median(r["primary_rank"] for r in rows),
        "questions_primary_far": sum(r["primary_rank"] > top_articles for r in rows),
        "budgets": {},
    }
    for b in budgets:
        parts = [r["budgets"][str(b)] for r in rows]
        out["budgets"][str(b)] = {
            k: round(100.0 * sum(p[k] for p in parts) / len(parts), 1) for k in ("primary", "secondary", "headroom")
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", nargs="+", required=True, help="HolisQA domain folders")
    ap.add_argument("--budgets", default="512,1024", help="token budgets of the umgp context")
    ap.add_argument(
        "--top-articles",
        type=int,
        default=10,
        help="a secondary article within this rank (dense or BM25) counts as reachable from the question",
    )
    ap.add_argument("--cache-dir", default=None, help="the bench's cache (default: causalrag-bench's)")
    ap.add_argument("--out", default=None, help="folder for results.json")
    args = ap.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    if not budgets or min(budgets) <= 0 or args.top_articles < 1:
        ap.error(
            f"--budgets must be positive token counts and --top-articles >= 1, got {args.budgets!r}, "
            f"{args.top_articles}."
        )
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    embed_model = cached_default_embed_model(cache_dir)
    report: Dict[str, Any] = {
        "command": script_command("multi_article_reach.py", list(argv or sys.argv[1:])),
        "budgets": budgets,
        "domains": {},
    }
    for path in args.path:
        t0 = time.perf_counter()
        dataset = load_dataset("holisqa", path)
        ctx = BenchContext(
            dataset=dataset,
            embed_model=embed_model,
            work_dir=cache_dir / "bench" / "holisqa" / Path(path).resolve().name,
        )
        umgp = index_for(ctx).as_retriever(similarity_top_k=ctx.top_k)
        bridge = _load_or_build(ctx).as_bridge_retriever(umgp, similarity_top_k=ctx.top_k)
        di = DomainIndex(dataset, embed_model)
        multi = [ex for ex in dataset.examples if ex.metadata["n_articles"] >= 2]
        rows = [question_row(ex, dataset, di, umgp, bridge, budgets, args.top_articles) for ex in multi]
        name = Path(path).resolve().name
        summary = summarise(rows, budgets, args.top_articles, len(di.sentence_keys), len(di.doc_ids))
        single = [ex for ex in dataset.examples if ex.metadata["n_articles"] == 1]
        summary["single_article_far_pct"] = single_article_far(single, di, args.top_articles)
        report["domains"][name] = {"summary": summary, "questions": rows}
        print(f"{name}: {json.dumps(summary)} ({time.perf_counter() - t0:.0f} s)")
    if args.out:
        write_results(args.out, report, embed_model=embed_model, llm=None)  # the CausalRAG2 index is the offline build
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
