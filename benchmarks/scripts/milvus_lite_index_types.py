"""Which dense indexes Milvus Lite's C++ engine (milvus-lite 2.5.1) builds, and what a search gets from each.

On a fresh server (``causalrag_bench.milvusserver``), for each index type: ``create_index`` (or
the server's refusal), ``--rows`` random unit vectors of 384 dimensions inserted, what
``describe_index`` reports, and the p50 ms and recall@60 (against exact inner products computed
here) of 50 searches with the type's usual search parameters. Prints one JSON line per type.

    python benchmarks/scripts/milvus_lite_index_types.py --rows 20000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from typing import Any, Dict, List, Tuple

import numpy as np

TYPES: List[Tuple[str, Dict[str, Any], Dict[str, Any]]] = [
    ("FLAT", {}, {}),
    ("IVF_FLAT", {"nlist": 256}, {"nprobe": 16}),
    ("AUTOINDEX", {}, {}),
    ("HNSW", {"M": 16, "efConstruction": 64}, {"ef": 100}),
    ("IVF_SQ8", {"nlist": 256}, {"nprobe": 16}),
    ("IVF_PQ", {"nlist": 256, "m": 48, "nbits": 8}, {"nprobe": 16}),
    ("SCANN", {"nlist": 256}, {"nprobe": 16}),
    ("DISKANN", {}, {}),
]
K, DIM, QUERIES = 60, 384, 50


def one_type(client: Any, kind: str, params: Dict[str, Any], search: Dict[str, Any], x: np.ndarray, q: np.ndarray):
    from pymilvus import DataType

    name = "t_" + kind.lower()
    schema = client.create_schema(auto_id=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=DIM)
    client.create_collection(name, schema=schema, consistency_level="Strong")
    ip = client.prepare_index_params()
    ip.add_index(field_name="v", index_type=kind, metric_type="IP", params=params)
    try:
        client.create_index(name, ip)
    except Exception as e:  # the server's refusal is the answer
        client.drop_collection(name)
        return {"index_type": kind, "refused": str(e).splitlines()[0]}
    for start in range(0, len(x), 5000):
        client.insert(name, [{"pk": i, "v": x[i]} for i in range(start, min(len(x), start + 5000))])
    client.flush(name)
    client.load_collection(name)
    desc = client.describe_index(name, "v")
    exact = np.argsort(-(q @ x.T), axis=1)[:, :K]
    times, recall = [], []
    for i, v in enumerate(q):
        t = time.perf_counter()
        hits = client.search(
            name, data=[v], anns_field="v", limit=K, search_params={"metric_type": "IP", "params": search}
        )
        times.append(time.perf_counter() - t)
        recall.append(len({h["id"] for h in hits[0]} & set(exact[i].tolist())) / K)
    client.drop_collection(name)
    return {
        "index_type": kind,
        "described": {k: desc.get(k) for k in ("index_type", "nlist", "M", "efConstruction") if k in desc},
        "search_params": search,
        "p50_ms": round(float(np.median(times)) * 1000, 2),
        f"recall@{K}": round(float(np.mean(recall)), 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    from pymilvus import MilvusClient

    from causalrag_bench import milvusserver

    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.rows, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:QUERIES] + 0.3 * rng.standard_normal((QUERIES, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    tmp = tempfile.mkdtemp(prefix="lite-index-types-")
    proc, uri = milvusserver.start_server(tmp)
    try:
        client = MilvusClient(uri=uri)
        for kind, params, search in TYPES:
            print(json.dumps({"rows": args.rows, **one_type(client, kind, params, search, x, q)}), flush=True)
    finally:
        milvusserver.stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
