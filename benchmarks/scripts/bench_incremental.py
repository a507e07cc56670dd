"""MultiGranularityIndex: insert of the last 10% of HolisQA biology vs a full rebuild.

Builds the index of the first 90% of the articles, times ``insert`` of the rest, times
``from_documents`` of all articles, and compares the two indexes' ``as_retriever()``
results on every question (ids in order, max score difference). Default offline embedder.

    python benchmarks/scripts/bench_incremental.py --path $DATA/holisqa/biology
"""

from __future__ import annotations

import argparse
import time

from causalrag_bench.loaders import load_dataset
from llama_index_ext_causalrag import MultiGranularityIndex
from llama_index_ext_causalrag.embeddings.defaults import default_embed_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True, help="the holisqa/biology folder")
    ap.add_argument("--fraction", type=float, default=0.1, help="share of the articles inserted")
    ap.add_argument("--torch-threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.torch_threads)
    ds = load_dataset("holisqa", args.path)
    docs = list(ds.documents)
    cut = len(docs) - max(1, round(len(docs) * args.fraction))
    embed = default_embed_model()

    index = MultiGranularityIndex.from_documents(docs[:cut], embed_model=embed)
    t0 = time.perf_counter()
    index.insert(docs[cut:])
    t_insert = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = MultiGranularityIndex.from_documents(docs, embed_model=embed)
    t_rebuild = time.perf_counter() - t0

    same_units = [u.node_id for u in index.units] == [u.node_id for u in full.units]
    r_inc, r_full = index.as_retriever(), full.as_retriever()
    n_same, max_diff = 0, 0.0
    for ex in ds.examples:
        a, b = r_inc.retrieve(ex.question), r_full.retrieve(ex.question)
        ids_equal = [n.node.node_id for n in a] == [n.node.node_id for n in b]
        diff = max((abs(x.score - y.score) for x, y in zip(a, b)), default=0.0)
        max_diff = max(max_diff, diff)
        n_same += ids_equal and diff <= 1e-9
    print(f"articles: {cut} built + {len(docs) - cut} inserted = {len(docs)}; units {len(full.units)}")
    print(f"insert of {len(docs) - cut} articles: {t_insert:.2f} s")
    print(f"full rebuild of {len(docs)} articles: {t_rebuild:.2f} s  ({t_rebuild / t_insert:.1f}x the insert)")
    print(f"same units in the same order: {same_units}")
    print(
        f"identical results (ids in order, scores within 1e-9): {n_same}/{len(ds.examples)} questions; "
        f"max score difference {max_diff:.2e}"
    )


if __name__ == "__main__":
    main()
