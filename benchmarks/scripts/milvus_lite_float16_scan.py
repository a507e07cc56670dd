"""Whether half-precision dense rows would make Milvus Lite's brute-force scan cheaper.

Below 100,000 rows a collection, Milvus Lite's C++ engine (milvus-lite 2.5.1) answers a dense
search by scanning every row (``milvus_lite_ivf_settings.py``), so a list's time grows with the
corpus. This probe stores the same ``--rows`` random unit vectors of 384 dimensions once as
``FLOAT_VECTOR`` and once as ``FLOAT16_VECTOR`` (FLAT, inner product) on a fresh server and prints,
per layout, the p50 and min ms of 50 searches for the top 116 (a served list's depth) and their
recall of the exact top 116 computed here. One JSON line per layout.

    python benchmarks/scripts/milvus_lite_float16_scan.py --rows 92000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from typing import Any, Callable

import numpy as np

K, DIM, QUERIES, BATCH = 116, 384, 50, 5000


def one_layout(client: Any, name: str, kind: Any, cast: Callable, x: np.ndarray, q: np.ndarray) -> dict:
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False)
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("v", kind, dim=DIM)
    index = client.prepare_index_params()
    index.add_index(field_name="v", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=index)
    for start in range(0, len(x), BATCH):
        client.insert(name, [{"pk": j, "v": cast(x[j])} for j in range(start, min(len(x), start + BATCH))])
    client.flush(name)
    client.load_collection(name)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :K]
    times, recall = [], []
    for i, vec in enumerate(q):
        t = time.perf_counter()
        hits = client.search(name, data=[cast(vec)], anns_field="v", limit=K, search_params={"metric_type": "IP"})
        times.append(time.perf_counter() - t)
        recall.append(len({h["id"] for h in hits[0]} & set(exact[i].tolist())) / K)
    return {
        "layout": name,
        "rows": len(x),
        "p50_ms": 1000 * float(np.median(times)),
        "min_ms": 1000 * min(times),
        "recall": float(np.mean(recall)),
    }


def main() -> None:
    from pymilvus import DataType, MilvusClient

    from causalrag_bench.milvusserver import start_server

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=92000, help="rows a collection (the finest list at 10x: 92,290)")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = rng.standard_normal((QUERIES, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    folder = tempfile.mkdtemp(prefix="milvus-f16-")
    proc, uri = start_server(folder)
    try:
        client = MilvusClient(uri)
        for name, kind, cast in (
            ("float32", DataType.FLOAT_VECTOR, lambda a: a),
            ("float16", DataType.FLOAT16_VECTOR, lambda a: a.astype(np.float16)),
        ):
            print(json.dumps(one_layout(client, name, kind, cast, x, q)), flush=True)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
