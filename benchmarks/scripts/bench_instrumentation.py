"""Cost of the stage instrumentation on plain ``retrieve``: UMGP on HolisQA biology, p50 latency
with the stages as shipped (no event handler attached, no ``explain``) against the same retriever
with ``StageRecorder.stage`` and ``StageRecorder.active`` monkeypatched to no-ops.

A/B interleaved per question (the order alternates from one question to the next), query
embeddings computed once up front so the timings are retrieval only (the stricter ratio).

    python benchmarks/scripts/bench_instrumentation.py --path ../shared/datasets/holisqa/biology
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, List

from llama_index.core.schema import QueryBundle

from causalrag_bench.embedding_cache import cached_default_embed_model
from causalrag_bench.loaders import load_dataset
from llama_index_ext_causalrag import MultiGranularityIndex
from llama_index_ext_causalrag.explain.trace import StageRecorder

SHIPPED = (StageRecorder.stage, StageRecorder.active)


def _set(enabled: bool) -> None:
    if enabled:
        StageRecorder.stage, StageRecorder.active = SHIPPED  # type: ignore[method-assign]
    else:
        StageRecorder.stage = lambda self, *a, **k: None  # type: ignore[method-assign]
        StageRecorder.active = lambda self, *a, **k: False  # type: ignore[method-assign]


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True)
    ap.add_argument("--questions", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the questions")
    args = ap.parse_args()
    ds = load_dataset("holisqa", args.path)
    embed = cached_default_embed_model()
    retriever = MultiGranularityIndex.from_documents(ds.documents, embed_model=embed).as_retriever()
    questions = [ex.question for ex in ds.examples[: args.questions]]
    vectors = embed.get_query_embedding_batch(questions)
    bundles = [QueryBundle(q, embedding=v) for q, v in zip(questions, vectors)]
    for qb in bundles[:20]:  # warm-up: caches, allocator
        retriever.retrieve(qb)
    on: List[float] = []
    off: List[float] = []
    for r in range(args.rounds):
        for i, qb in enumerate(bundles):
            for enabled in (True, False) if (i + r) % 2 == 0 else (False, True):
                _set(enabled)
                (on if enabled else off).append(_timed(lambda qb=qb: retriever.retrieve(qb)))
    _set(True)
    p_on, p_off = statistics.median(on), statistics.median(off)
    print(f"questions {len(bundles)} x {args.rounds} rounds, UMGP retrieve (query embedding excluded)")
    print(f"p50 with stage instrumentation (shipped): {p_on * 1e3:.3f} ms")
    print(f"p50 with stage recording disabled:        {p_off * 1e3:.3f} ms")
    print(f"ratio: {p_on / p_off:.4f} ({(p_on / p_off - 1) * 100:+.2f}%)")


if __name__ == "__main__":
    main()
