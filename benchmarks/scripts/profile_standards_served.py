"""Where a served StandardsIndex's query spends its time: each statement kind timed, at growing corpus sizes.

The QUIC RFCs at 1x; a size of S adds S - 1 copies of every document. Per size the index is built
into a fresh ``PGVectorStore`` / docstore / kvstore of the chosen server, reopened with
``from_vector_store`` (served: no unit read), and asked the dev questions (embedded beforehand;
one warm-up pass, then one timed pass). Printed and written: the p50 of a whole ``retrieve`` and,
per statement kind, calls and milliseconds a query (the BM25 list; the candidates' cosines; the
records and cosines read by id; the returned nodes from the docstore).

    python benchmarks/scripts/profile_standards_served.py --corpus $DATA/ietf_quic_rfcs --sizes 1,16 \\
        --server postgres16 --out benchmarks/results/standards_served_profile/postgres16
    python benchmarks/scripts/profile_standards_served.py --corpus $DATA/ietf_quic_rfcs --sizes 1,16 \\
        --server pg_textsearch --out benchmarks/results/standards_served_profile/pg_textsearch
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Dict, List

SCRIPT = "python benchmarks/scripts/profile_standards_served.py"


def timed(cls: Any, name: str, times: Dict[str, List[float]]) -> None:
    """Time every call of ``cls.name`` into ``times[name]`` (ms)."""
    f: Callable[..., Any] = getattr(cls, name)

    def wrapper(self: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return f(self, *a, **k)
        finally:
            times[name].append((time.perf_counter() - t) * 1000)

    setattr(cls, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="the QUIC RFCs folder")
    p.add_argument("--sizes", default="1,16")
    p.add_argument("--server", choices=("postgres16", "pg_textsearch"), default="postgres16")
    p.add_argument("--out", type=Path)
    args = p.parse_args()

    from llama_index.core.schema import QueryBundle

    from causalrag_bench import pgserver, pgserver_extend
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_quic
    from llama_index_ext_causalrag.standards import StandardsIndex
    from llama_index_ext_causalrag.standards.served import StoreFacts
    from llama_index_ext_causalrag.storage.pg.units import ServedUnits

    times: Dict[str, List[float]] = defaultdict(list)
    for name in ("bm25", "dense", "cosines", "facts"):
        timed(ServedUnits, name, times)
    timed(StoreFacts, "prepare_nodes", times)
    url = pgserver.server_url() if args.server == "postgres16" else pgserver_extend.extend_server_url()
    ds = load_quic(Path(args.corpus))
    model = cached_default_embed_model()
    questions = [(e.question, model.get_query_embedding(e.question)) for e in ds.examples]
    report: Dict[str, Any] = {
        "command": f"{SCRIPT} --corpus $DATA/ietf_quic_rfcs --sizes {args.sizes} --server {args.server}",
        "server": args.server,
        "questions": len(questions),
        "points": [],
    }
    try:
        for size in sorted(int(x) for x in args.sizes.split(",")):
            docs = list(ds.documents) + [
                d.model_copy(update={"id_": f"{d.doc_id}#c{k}"}) for k in range(1, size) for d in ds.documents
            ]
            table = f"std_profile_{size}x_{int(time.time())}"
            s = pgserver.pg_stores(url, table, 384)
            StandardsIndex.from_documents(
                docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore
            )
            s = pgserver.pg_stores(url, table, 384)
            retriever = StandardsIndex.from_vector_store(
                s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model
            ).as_retriever()
            for q, e in questions:  # warm-up
                retriever.retrieve(QueryBundle(q, embedding=e))
            times.clear()
            total = []
            for q, e in questions:
                t = time.perf_counter()
                retriever.retrieve(QueryBundle(q, embedding=e))
                total.append((time.perf_counter() - t) * 1000)
            n = len(questions)
            point = {
                "size": size,
                "documents": len(docs),
                "p50_ms": statistics.median(total),
                "statements": {
                    k: {"calls_per_query": len(v) / n, "ms_per_query": sum(v) / n} for k, v in times.items()
                },
            }
            report["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        if args.server == "postgres16":
            pgserver.stop_server()
        else:
            pgserver_extend.stop_extend_server()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
