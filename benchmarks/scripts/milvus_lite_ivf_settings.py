"""Past Milvus Lite's 100,000-row threshold: does an IVF index's nlist, or a search's nprobe, change anything?

One fresh Milvus server (milvus-lite 2.5.1's C++ engine); 110,000 clustered random unit vectors
(384 dimensions, 500 centres) written through ``MilvusLists`` (the index's writer) into one
collection exact (``FLAT``) and two with ``IVF(nlist=64)`` and ``IVF(nlist=2048)``; 60 questions
searched for 116 rows each with nprobe 1, 4, 32, 64: p50 ms and recall of the exact top 116.
With the index's settings, nprobe=1 of 2,048 clusters would scan about 54 rows (fewer than 116).

    python benchmarks/scripts/milvus_lite_ivf_settings.py
"""

import json
import shutil
import tempfile
import time

import numpy as np
from llama_index.core.schema import TextNode

from causalrag_bench import milvusserver
from llama_index_ext_causalrag.multigranularity import IVF
from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits
from llama_index_ext_causalrag.storage.terms import TERMS_KEY

D, N, K, CENTRES = 384, 110000, 116, 500


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def collections(uri: str) -> dict:
    """One exact collection and two IVF ones (nlist 64, 2048), on one client."""
    out, client = {}, None
    for name, ann in (("flat", None), ("ivf64", IVF(nlist=64, nprobe=1)), ("ivf2048", IVF(nlist=2048, nprobe=1))):
        store = MilvusUnits(uri=uri, collection_name=name, embed_dim=D)
        client = client or store.client
        store._client = client
        lists = store.lists([2], D, ann)
        lists.bm25(1.2, 0.75)
        lists.create()
        out[name] = lists
    return out


def measure(lists, queries: np.ndarray, exact: np.ndarray) -> tuple:
    times, recall = [], []
    for qi, q in enumerate(queries):
        t = time.perf_counter()
        ids = lists._search("dense", 2, q, K, "")[0]
        times.append(time.perf_counter() - t)
        recall.append(len({int(i[1:]) for i in ids} & set(exact[qi].tolist())) / K)
    return float(np.median(times) * 1000), float(np.mean(recall))


def main() -> None:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CENTRES, D)).astype(np.float32)
    x = unit(centres[rng.integers(0, CENTRES, N)] + rng.standard_normal((N, D)).astype(np.float32))
    queries = unit(centres[rng.integers(0, CENTRES, 60)] + rng.standard_normal((60, D)).astype(np.float32))
    tmp = tempfile.mkdtemp(prefix="lite-ivf-")
    proc, uri = milvusserver.start_server(tmp)
    try:
        sets = collections(uri)
        t = time.time()
        for s in range(0, N, 2000):
            nodes = [
                TextNode(id_=f"n{i}", text="", metadata={"umg_granularity": 2, TERMS_KEY: {"w": 1}})
                for i in range(s, min(N, s + 2000))
            ]
            for lists in sets.values():
                lists.insert(nodes, x[s : s + 2000])
        for lists in sets.values():
            lists.analyze()
        print(f"inserted {N} rows into each of {len(sets)} collections in {time.time() - t:.0f} s", flush=True)
        exact = np.argsort(-(queries @ x.T), axis=1)[:, :K]
        for name, lists in sets.items():
            for nprobe in (None,) if name == "flat" else (1, 4, 32, 64):
                if nprobe is not None:
                    lists.ann = IVF(nlist=lists.ann.nlist, nprobe=nprobe)
                ms, recall = measure(lists, queries, exact)
                print(json.dumps({"collection": name, "nprobe": nprobe, "p50_ms": round(ms, 2), f"recall@{K}": recall}))
    finally:
        milvusserver.stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
