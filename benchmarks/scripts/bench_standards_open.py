"""What a StandardsIndex reopened from PostgreSQL costs a query process, at growing corpus sizes.

A ``StandardsIndex`` ranks in memory (BM25 prefilter, dense re-rank, the section tree and the
citation graph), so reopening it with ``from_vector_store`` reads every unit and its vector and
rebuilds BM25 and the graphs: its open time and memory grow with the corpus. This measures how
fast. The corpus at 1x is the QUIC RFCs (``--quic``); a size of S adds S - 1 copies of every RFC
(new document ids, the same text: parsed, linked and embedded again, embeddings from the
bench's cache). Per size the index is built into a fresh ``PGVectorStore`` / docstore / kvstore,
then a fresh process opens it and answers ``--queries`` retrievals (the dev questions, cycled):
open seconds, resident memory (``VmRSS``) before and after the open, p50 / p95.

    python benchmarks/scripts/bench_standards_open.py --quic $DATA/ietf_quic_rfcs --sizes 1,4,16 --out benchmarks/results/standards_open
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

SCRIPT = "python benchmarks/scripts/bench_standards_open.py"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def query_worker(args: argparse.Namespace) -> None:
    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from llama_index.core.schema import QueryBundle
    from llama_index_ext_causalrag.standards import StandardsIndex

    questions = json.loads(Path(args.questions_file).read_text())
    model = cached_default_embed_model()
    s = pgserver.pg_stores(args.url, args.table, 384)
    base = rss_mb()
    t0 = time.perf_counter()
    index = StandardsIndex.from_vector_store(s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model)
    open_s = time.perf_counter() - t0
    after_open = rss_mb()
    retriever = index.as_retriever(similarity_top_k=10)
    times: List[float] = []
    for i in range(args.queries):
        q = questions[i % len(questions)]
        t = time.perf_counter()
        retriever.retrieve(QueryBundle(q["text"], embedding=q["embedding"]))
        times.append(time.perf_counter() - t)
    ms = sorted(1000 * x for x in times)
    print(json.dumps({"open_s": open_s, "rss_mb_before_open": base, "rss_mb_after_open": after_open,
                      "p50_ms": statistics.median(ms), "p95_ms": ms[int(0.95 * (len(ms) - 1))]}))


def copies(documents: List[Any], k: int) -> List[Any]:
    return [d.model_copy(update={"id_": f"{d.doc_id}#c{k}"}) for d in documents]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quic", type=Path)
    p.add_argument("--sizes", default="1,4")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--out", type=Path)
    p.add_argument("--query-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--table", help=argparse.SUPPRESS)
    p.add_argument("--questions-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.query_worker:
        query_worker(args)
        return
    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_quic
    from llama_index_ext_causalrag.standards import StandardsIndex

    ds = load_quic(args.quic)
    model = cached_default_embed_model()
    tmp = Path(tempfile.mkdtemp(prefix="standards-open-"))
    qfile = tmp / "questions.json"
    qfile.write_text(json.dumps([{"text": q.question, "embedding": model.get_query_embedding(q.question)}
                                 for q in ds.examples]))
    server = pgserver.start_server(tmp)
    url = server.get_uri()
    report: Dict[str, Any] = {"command": f"{SCRIPT} --quic $DATA/ietf_quic_rfcs --sizes {args.sizes} --queries {args.queries}",
                              "queries": args.queries, "documents_1x": len(ds.documents), "points": []}
    try:
        for size in sorted(int(x) for x in args.sizes.split(",")):
            docs = list(ds.documents) + [d for k in range(1, size) for d in copies(ds.documents, k)]
            table = f"std_{size}x"
            s = pgserver.pg_stores(url, table, 384)
            t = time.perf_counter()
            index = StandardsIndex.from_documents(docs, embed_model=model, storage_context=s.storage_context(),
                                                  kvstore=s.kvstore)
            build_s = time.perf_counter() - t
            units = len(index.units)
            del index
            cmd = [sys.executable, __file__, "--query-worker", "--url", url, "--table", table,
                   "--questions-file", str(qfile), "--queries", str(args.queries)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
            point = {"size": size, "documents": len(docs), "units": units, "build_s": build_s,
                     **json.loads(out.stdout.strip().splitlines()[-1])}
            report["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        server.cleanup()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
