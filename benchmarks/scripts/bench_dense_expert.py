"""DenseExpert vs LlamaIndex's VectorStoreIndex retriever: same top-10, and query latency.

One node per HolisQA sentence (11,051 for biology), the same embeddings for both (from the
bench's disk cache), query embeddings computed once up front and timed separately, so the
retrieval latencies exclude them.

    python benchmarks/scripts/bench_dense_expert.py --path ../shared/datasets/holisqa/biology
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode

from causalrag_bench.embedding_cache import cached_default_embed_model
from causalrag_bench.loaders import load_dataset
from llama_index_ext_causalrag import DenseExpert


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.torch_threads)
    ds = load_dataset("holisqa", args.path)
    embed = cached_default_embed_model()
    nodes = [
        TextNode(
            id_=sid,
            text=ds.doc_text(sp.doc_id)[sp.start : sp.end],
            start_char_idx=sp.start,
            end_char_idx=sp.end,
        )
        for sid, sp in ds.metadata["sentence_spans"].items()
    ]
    t = time.perf_counter()
    vectors = embed.get_text_embedding_batch([n.text for n in nodes])
    print(f"{len(nodes)} sentence nodes, document embeddings ready in {time.perf_counter() - t:.1f}s (disk cache)")
    for n, v in zip(nodes, vectors):
        n.embedding = v

    t = time.perf_counter()
    li = VectorStoreIndex(nodes, embed_model=embed).as_retriever(similarity_top_k=args.k)
    li_build = time.perf_counter() - t
    t = time.perf_counter()
    ours = DenseExpert(nodes, embed_model=embed, similarity_top_k=args.k)
    our_build = time.perf_counter() - t

    questions = [ex.question for ex in ds.examples]
    t = time.perf_counter()
    qvecs = [embed.get_query_embedding(q) for q in questions]
    q_ms = 1000 * (time.perf_counter() - t) / len(questions)

    same, same_mod_ties, same_set, max_diff, li_ms, our_ms = 0, 0, 0, 0.0, [], []
    for q, v in zip(questions, qvecs):
        t = time.perf_counter()
        a = li.retrieve(QueryBundle(query_str=q, embedding=v))
        li_ms.append(1000 * (time.perf_counter() - t))
        t = time.perf_counter()
        b = ours.retrieve(QueryBundle(query_str=q, embedding=v))
        our_ms.append(1000 * (time.perf_counter() - t))
        ids_a, ids_b = [x.node.node_id for x in a], [x.node.node_id for x in b]
        same += ids_a == ids_b
        same_set += set(ids_a) == set(ids_b)
        # exact ties (duplicate sentences) are ordered by SimpleVectorStore's heap layout
        same_mod_ties += _canon(a) == _canon(b)
        max_diff = max(max_diff, float(np.max(np.abs(np.array([x.score for x in a]) - np.array([x.score for x in b])))))
    p50_li, p50_ours = statistics.median(li_ms), statistics.median(our_ms)
    n = len(questions)
    print(
        f"questions: {n}; identical top-{args.k} ids and order: {same}/{n}; identical up to the order of exact ties: "
        f"{same_mod_ties}/{n}; same set: {same_set}/{n}; max |score diff| {max_diff:.2e}"
    )
    print(f"build: VectorStoreIndex {li_build:.2f}s, DenseExpert {our_build:.2f}s")
    print(f"query embedding (excluded below): {q_ms:.1f} ms/query")
    print(
        f"retrieval p50: VectorStoreIndex retriever {p50_li:.2f} ms, DenseExpert {p50_ours:.3f} ms, ratio {p50_li / p50_ours:.0f}x"
    )


def _canon(results) -> list:
    return sorted((round(x.score, 6), x.node.node_id) for x in results)


if __name__ == "__main__":
    main()
