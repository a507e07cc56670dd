"""In memory against PostgreSQL: the same bench row built both ways, compared question by question.

For each index, the in-memory row (``umgp``, ``standards``, ``causalrag2``) and its
store-backed twin (``umgp_pg``, ...: built into PostgreSQL, then reopened from the stores with
``from_vector_store``) are built in one process from the same BenchContext. Every question goes
to both, as the bench runs it (one ``retrieve`` call, plus ``retrieve_for_budget`` per budget for
a budget-aware retriever), and :func:`causalrag_bench.runner.score_question` scores both. The
report says, per index: the share of questions whose top-k ids are identical and in the same
order, the share whose budget-fitted contexts are identical too, the largest absolute score
difference of a node both returned, CR@B of both, and for each question that differs the
first differing rank and the two ids there.

Used by ``benchmarks/scripts/bench_store_equivalence.py``; the docs table is
:func:`causalrag_bench.perf_tables.store_equivalence_table`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from causalrag_bench.registry import BenchContext, get_spec
from causalrag_bench.runner import score_question
from causalrag_bench.types import EvalExample
from llama_index_ext_causalrag.text.pieces import piece_key

# index -> (in-memory row, store-backed row)
PAIRS: Dict[str, Tuple[str, str]] = {
    "umgp": ("umgp", "umgp_pg"),
    "umgp_hnsw": ("umgp", "umgp_pg_hnsw"),
    "standards": ("standards", "standards_pg"),
    "causalrag2": ("causalrag2", "causalrag2_pg"),
}
DEFAULT_INDEXES: Dict[str, Tuple[str, ...]] = {"holisqa": ("umgp", "causalrag2"), "quic": ("standards",)}
BUDGETS = (512, 1024)


def _ask(
    retriever: Any, ex: EvalExample, budgets: Sequence[int]
) -> Tuple[List[Any], Optional[Dict[int, List[Any]]], float]:
    """What the bench asks one retriever: the ranking (timed) and, if it fits budgets, each budget's context."""
    by_example = getattr(retriever, "retrieve_example", None)
    t = time.perf_counter()
    nodes = by_example(ex) if by_example is not None else retriever.retrieve(ex.question)
    ms = 1000.0 * (time.perf_counter() - t)
    by_budget = getattr(retriever, "retrieve_for_budget", None)
    budgeted = {b: by_budget(ex.question, b) for b in budgets} if by_budget is not None else None
    return nodes, budgeted, ms


def _ids(nodes: Sequence[Any]) -> List[str]:
    """Node ids, with the cut for a budget-fitted piece (pieces of one node share its id)."""
    return [piece_key(n) for n in nodes]


def first_difference(a: Sequence[str], b: Sequence[str]) -> Optional[Tuple[int, Optional[str], Optional[str]]]:
    """``(rank, a's id, b's id)`` at the first rank (1-based) where the lists differ (``None``
    for a list that ended), or ``None`` if they are identical."""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            return i + 1, x, y
    return None


def cached_texts(embed_model: Any) -> Optional[int]:
    """Texts in the bench's embedding cache (``None`` for another embed model): a build that adds
    some embedded them, and its time counts the embedding."""
    db = getattr(embed_model, "_db", None)
    if db is None:
        return None
    with embed_model._lock:
        return int(db.execute("SELECT COUNT(*) FROM emb").fetchone()[0])


def _mean(rows: Sequence[Dict[str, float]], key: str) -> float:
    return round(sum(r[key] for r in rows) / len(rows), 4) if rows else 0.0


def compare_index(
    ctx: BenchContext, examples: Sequence[EvalExample], index: str, budgets: Sequence[int] = BUDGETS
) -> Dict[str, Any]:
    """Build ``PAIRS[index]`` (in memory, then in PostgreSQL and reopened) and compare them on ``examples``."""
    if index not in PAIRS:
        raise ValueError(f"unknown index {index!r}; choose from: {', '.join(PAIRS)}.")
    mem_name, pg_name = PAIRS[index]
    specs = get_spec(mem_name), get_spec(pg_name)
    for spec in specs:
        if spec.check is not None:
            spec.check()
    built, build_s, embedded = [], [], []
    for spec in specs:
        before = cached_texts(ctx.embed_model)
        t = time.perf_counter()
        built.append(spec.build(ctx))
        build_s.append(time.perf_counter() - t)
        after = cached_texts(ctx.embed_model)
        embedded.append(after - before if before is not None and after is not None else None)
    mem, pg = built
    k = ctx.top_k
    n_same = n_same_budgeted = 0
    max_diff = 0.0
    metrics: Tuple[List[Dict[str, float]], List[Dict[str, float]]] = ([], [])
    latency: Tuple[List[float], List[float]] = ([], [])
    differences: List[Dict[str, Any]] = []
    for ex in examples:
        answers = [_ask(r, ex, budgets) for r in (mem, pg)]
        for side, (nodes, budgeted, ms) in enumerate(answers):
            metrics[side].append(score_question(nodes, ex, ctx.dataset, budgets, budgeted))
            latency[side].append(ms)
        (a, a_b, _), (b, b_b, _) = answers
        ids_a, ids_b = _ids(a)[:k], _ids(b)[:k]
        scores_b = {piece_key(n): n.score for n in b[:k]}
        for n in a[:k]:
            other = scores_b.get(piece_key(n))
            if other is not None and n.score is not None:
                max_diff = max(max_diff, abs(float(n.score) - float(other)))
        diff = first_difference(ids_a, ids_b)
        if diff is None:
            n_same += 1
        else:
            rank, x, y = diff
            differences.append({"qid": ex.qid, "rank": rank, "memory_id": x, "postgres_id": y})
        if a_b is None and b_b is None:
            n_same_budgeted += diff is None
        elif a_b is not None and b_b is not None:
            n_same_budgeted += all(_ids(a_b[bb]) == _ids(b_b[bb]) for bb in budgets)
    n = len(examples)
    cr = [f"CR@{b}" for b in budgets]
    return {
        "index": index,
        "memory_row": mem_name,
        "store_row": pg_name,
        "n_questions": n,
        "top_k": k,
        "n_identical": n_same,
        "identical_share": round(n_same / n, 4) if n else None,
        "n_identical_budgeted": n_same_budgeted,
        "identical_budgeted_share": round(n_same_budgeted / n, 4) if n else None,
        "max_abs_score_diff": max_diff,
        "memory": {c: _mean(metrics[0], c) for c in cr},
        "postgres": {c: _mean(metrics[1], c) for c in cr},
        "build_s": {"memory": round(build_s[0], 2), "postgres": round(build_s[1], 2)},
        # texts the build embedded (missing from the embedding cache): its build time counts them
        "embedded_texts": {"memory": embedded[0], "postgres": embedded[1]},
        "open_s": ctx.memo(f"open_s_{pg_name}", lambda: None),
        "p50_ms": {
            side: round(statistics.median(lat), 2) if lat else None
            for side, lat in zip(("memory", "postgres"), latency)
        },
        "differences": differences,
    }
