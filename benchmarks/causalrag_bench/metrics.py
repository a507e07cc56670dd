"""Span-coverage retrieval metrics. Pure: plain tuples in, floats out, no llama_index.

A retrieved item is ``(doc_id, start, end)``: a character span of a corpus document. A gold
span is *covered* when at least ``min_coverage`` (0.75) of its characters lie inside the union
of the retrieved spans (rule ``"span"``), or when any retrieved span overlaps it (rule ``"doc"``,
for datasets whose gold is a whole document).

LlamaIndex's ``RetrievalMetric``s (``HitRate``, ``MRR``, ...) compare node ids, which cannot
express "75% of a quote lies in the retrieved text" across differently chunked retrievers, so
the formulas are re-stated here over spans.
"""

from __future__ import annotations

import math
from typing import Dict, List, Mapping, Sequence, Tuple

Span = Tuple[str, int, int]

MIN_COVERAGE = 0.75


def _merge(intervals: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _overlap(a: Tuple[int, int], merged: List[Tuple[int, int]]) -> int:
    return sum(max(0, min(a[1], e) - max(a[0], s)) for s, e in merged)


class Coverage:
    """Incremental union of retrieved spans per document."""

    def __init__(self) -> None:
        self._by_doc: Dict[str, List[Tuple[int, int]]] = {}

    def add(self, span: Span) -> None:
        doc, s, e = span
        if e > s:
            self._by_doc[doc] = _merge(self._by_doc.get(doc, []) + [(s, e)])

    def covered(self, gold: Span, rule: str = "span", min_coverage: float = MIN_COVERAGE) -> bool:
        doc, s, e = gold
        got = _overlap((s, e), self._by_doc.get(doc, []))
        if rule == "doc":
            return got > 0
        return e > s and got >= min_coverage * (e - s)


def _check_gold(gold: Sequence[Span]) -> None:
    if not gold:
        raise ValueError("a question has no gold spans; drop it or give it gold evidence before scoring.")


def recall(retrieved: Sequence[Span], gold: Sequence[Span], rule: str = "span") -> float:
    """Share of gold spans covered by the union of ``retrieved``."""
    _check_gold(gold)
    cov = Coverage()
    for r in retrieved:
        cov.add(r)
    return sum(cov.covered(g, rule) for g in gold) / len(gold)


def precision(retrieved: Sequence[Span], gold: Sequence[Span]) -> float:
    """Share of retrieved characters that lie inside gold spans (each retrieved span counted
    on its own, so duplicated text costs precision)."""
    _check_gold(gold)
    merged: Dict[str, List[Tuple[int, int]]] = {}
    for d, s, e in gold:
        merged[d] = _merge(merged.get(d, []) + [(s, e)])
    total = sum(max(0, e - s) for _, s, e in retrieved)
    if total == 0:
        return 0.0
    hit = sum(_overlap((s, e), merged.get(d, [])) for d, s, e in retrieved)
    return hit / total


def newly_covered_by_rank(retrieved: Sequence[Span], gold: Sequence[Span], rule: str = "span") -> List[int]:
    """For each rank, how many gold spans became covered when that item was added."""
    cov = Coverage()
    done = [False] * len(gold)
    out = []
    for r in retrieved:
        cov.add(r)
        n = 0
        for i, g in enumerate(gold):
            if not done[i] and cov.covered(g, rule):
                done[i] = True
                n += 1
        out.append(n)
    return out


def mrr_at_k(retrieved: Sequence[Span], gold: Sequence[Span], k: int, rule: str = "span") -> float:
    """1 / (first rank at which some gold span is covered), 0 if none within k."""
    _check_gold(gold)
    for rank, n in enumerate(newly_covered_by_rank(retrieved[:k], gold, rule), start=1):
        if n:
            return 1.0 / rank
    return 0.0


def ap_at_k(retrieved: Sequence[Span], gold: Sequence[Span], k: int, rule: str = "span") -> float:
    """Average precision over gold spans: sum over ranks r of new_r * P(r) / |gold|, where
    new_r is the number of gold spans first covered at r and P(r) the share of the first r
    items that covered something new."""
    _check_gold(gold)
    useful = 0
    total = 0.0
    for rank, n in enumerate(newly_covered_by_rank(retrieved[:k], gold, rule), start=1):
        if n:
            useful += 1
            total += n * useful / rank
    return total / len(gold)


# ---- passage metrics, as the peers define them (HippoRAG 2, BEIR) --------------------------------
def passage_ranking(doc_ids: Sequence[str]) -> List[str]:
    """The distinct documents of a ranked result list, in order of first appearance (a passage
    counts as retrieved at the rank of its first unit; empty ids, unplaced nodes, are skipped)."""
    seen: Dict[str, None] = {}
    for d in doc_ids:
        if d and d not in seen:
            seen[d] = None
    return list(seen)


def passage_recall_at_k(ranking: Sequence[str], gold: Sequence[str], k: int) -> float:
    """|gold ∩ top-k of ``ranking``| / |gold| (HippoRAG 2's passage recall@k; BEIR's recall@k)."""
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("a question has no gold passages; drop it or give it gold evidence before scoring.")
    return len(gold_set.intersection(ranking[:k])) / len(gold_set)


def ndcg_at_k(ranking: Sequence[str], grades: Mapping[str, float], k: int) -> float:
    """nDCG@k with linear gains, as BEIR computes it (trec_eval's ndcg_cut):
    DCG = sum over ranks r <= k of grade(d_r) / log2(r + 1), divided by the DCG of the grades sorted."""
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    if not ideal:
        raise ValueError("a question has no relevant documents; drop it or give it qrels before scoring.")
    dcg = sum(grades.get(d, 0) / math.log2(r + 1) for r, d in enumerate(ranking[:k], start=1))
    idcg = sum(g / math.log2(r + 1) for r, g in enumerate(ideal, start=1))
    return dcg / idcg
