"""End to end at 1x, 5x, 10x ...: a MultiGranularityIndex served by PostgreSQL, opened by a fresh process.

The corpus at 1x is HolisQA domains (``--domains``, biology by default), split and embedded by
``MultiGranularityIndex.from_documents`` (embeddings from the bench's cache) and built into a
``PGVectorStore`` (layout ``"served"``: every list, dense and BM25, computed by the database). A
corpus of size S adds S - 1 copies of every unit: new ids (``#r{k}``), their documents and
parents renamed the same way, the same text (so BM25 postings and document frequencies grow S
times) and the embedding plus seeded noise (cosine about 0.96 to the original), written through
the same writers as a build (triggers fill the lists). Copies measure memory and speed; quality
is measured at 1x only (``causalrag-bench ... --retrievers umgp,umgp_pg``).

Per size, for exact search and (``--hnsw``) for ``HNSW()`` on the dense lists, a fresh process:
opens the index with ``from_vector_store`` (seconds, after the stores' client libraries are
imported, which is timed apart as ``client_import_s``; resident memory, ``VmRSS``, after the open),
answers ``--queries`` full retrievals (``as_retriever(budget_tokens=--budget)``: every list,
fusion, promotion, fitting; questions cycled, query vectors computed beforehand), and reports
p50 / p95 and resident memory after them; the HNSW run's top-10 is compared with the exact run's
(``top10_as_exact``: share of questions with the same ids in order). At 1x an in-memory index
(``from_persist_dir`` of the same units) is timed the same way. Build rows/s: units written per
second of each size's writes (the 1x build includes parsing; embeddings come from the cache).

    python benchmarks/scripts/bench_served_scale.py --holisqa $DATA/holisqa --sizes 1,5 --hnsw --out benchmarks/results/served_scale

``--store milvus``: the same on Milvus (Milvus's C++ engine, milvus-lite 2.5.1's server on a local
port: every list a search of a collection per granularity, exact search), nodes and state in
PostgreSQL; the copies go through the index's Milvus writer (``MilvusUnits.add``); no HNSW run
(Milvus Lite builds none). ``--store postgres,milvus``: both in one run, the same corpus, copies
and questions, each checked at 1x list by list against the in-memory index (every dense and BM25
list of each question, top 20: ids, and scores). Several ``--domains``: their articles get the
domain as an id prefix; the questions are the first domain's first, as in its own run.

    python benchmarks/scripts/bench_served_scale.py --holisqa $DATA/holisqa --sizes 1,2,5,10 \\
        --store postgres,milvus --queries 300 --out benchmarks/results/milvus_scale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from causalrag_bench.process import latency_ms, rss_mb

SCRIPT = "python benchmarks/scripts/bench_served_scale.py"
TABLE = "served_scale"
MILVUS_IVF = "milvus_ivf"  # the Milvus rows again, built with ann=IVF(--ivf)
LIST_K = 20  # the rows of each list the lists check compares
QUALITY_BUDGETS = (512, 1024)  # CR@B per point (one domain: --domains with several scores none)
PERTURB = 0.1  # the share of a copy's BM25 tokens --copies perturbed replaces


# ---- the query process ----------------------------------------------------------------------
def query_worker(args: argparse.Namespace) -> None:
    from llama_index.core.schema import QueryBundle

    from causalrag_bench.embedding_cache import cached_default_embed_model
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    questions = json.loads(Path(args.questions_file).read_text())
    model = cached_default_embed_model()
    t_import = time.perf_counter()
    _import_clients(bool(args.milvus_uri) and not args.memory_dir, bool(args.url) and not args.memory_dir)
    import_s = time.perf_counter() - t_import
    base = rss_mb()
    t0 = time.perf_counter()
    if args.memory_dir:
        index = MultiGranularityIndex.from_persist_dir(args.memory_dir, embed_model=model)
    else:
        s = stores_for(args.url, args.milvus_uri, args.table)
        index = MultiGranularityIndex.from_vector_store(
            s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model, ann=parse_ann(args.ann)
        )
    open_s = time.perf_counter() - t0
    after_open = rss_mb()
    retriever = index.as_retriever(similarity_top_k=10, budget_tokens=args.budget)
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
        "client_import_s": import_s,
        "rss_mb_before_open": base,
        "rss_mb_after_open": after_open,
        "rss_mb_after_queries": rss_mb(),
        **latency_ms(times),
        "queries": len(times),
        "tops": tops,
    }
    if args.holisqa and "," not in args.domains:  # after the timing: each question once (copies of gold count)
        from causalrag_bench.scale_rows import load_domains, quality

        out.update(quality(retriever, questions, load_domains(args.holisqa, args.domains), QUALITY_BUDGETS))
    print(json.dumps(out))


def parse_ann(spec: str) -> Any:
    """``""`` (exact), ``"hnsw"`` (``HNSW()``) or ``"ivf:NLIST:NPROBE"`` (``IVF(nlist, nprobe)``)."""
    from llama_index_ext_causalrag.multigranularity import HNSW, IVF

    if not spec:
        return None
    if spec == "hnsw":
        return HNSW()
    kind, _, rest = spec.partition(":")
    try:
        nlist, nprobe = (int(x) for x in rest.split(":"))
    except ValueError:
        nlist = nprobe = 0
    if kind != "ivf" or nlist <= 0:
        raise SystemExit(f"ann {spec!r}: give hnsw or ivf:NLIST:NPROBE (e.g. --ivf 1024:32)")
    return IVF(nlist=nlist, nprobe=nprobe)


def _import_clients(milvus: bool, postgres: bool) -> None:
    """The stores' client libraries, imported before the open is timed (once per app process, not
    per index: ``import pymilvus`` alone takes about a second, most of it pandas)."""
    if postgres:
        import llama_index.storage.docstore.postgres  # noqa: F401
        import llama_index.storage.kvstore.postgres  # noqa: F401
        import llama_index.vector_stores.postgres  # noqa: F401
    if milvus:
        import pymilvus  # noqa: F401


def stores_for(url: str, milvus_uri: str = "", table: str = TABLE) -> Any:
    """The bench's stores on PostgreSQL ``url``; with ``milvus_uri`` the vectors and lists in Milvus."""
    from causalrag_bench import milvusserver, pgserver

    s = pgserver.pg_stores(url, table, 384)
    return milvusserver.with_milvus(s, milvus_uri, table) if milvus_uri else s


def run_worker(
    args: argparse.Namespace, url: str, questions_file: Path, ann: str = "", memory_dir: str = ""
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
        "--table",
        args.table,
    ]
    if ann:
        cmd += ["--ann", ann]
    if args.holisqa:
        cmd += ["--holisqa", str(args.holisqa), "--domains", args.domains]
    if memory_dir:
        cmd += ["--memory-dir", memory_dir]
    out = subprocess.run(
        cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- building -------------------------------------------------------------------------------
def replicas(units: List[Any], emb: np.ndarray, tokens: List[List[str]], k: int, seed: int, perturb: bool = False):
    """Copy ``k`` of every unit: ids, documents and parents renamed ``#r{k}``, embedding + seeded
    noise; ``perturb``: its BM25 tokens too (:func:`perturbed_tokens`)."""
    from llama_index.core.schema import RelatedNodeInfo

    rng = np.random.default_rng(seed + k)
    noise = rng.standard_normal(emb.shape).astype(np.float32) * (0.3 / np.sqrt(emb.shape[1]))
    vecs = emb + noise
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    if perturb:
        tokens = perturbed_tokens(tokens, np.random.default_rng([seed, k, 1]))
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


def perturbed_tokens(tokens: List[List[str]], rng: np.random.Generator, share: float = PERTURB) -> List[List[str]]:
    """Each unit's tokens with ``share`` of its positions (at least one) replaced by tokens drawn
    from the corpus's (by frequency, so document frequencies keep their shape): a copy that is no
    longer a tie with its original in any BM25 list, as a new document on the same subject."""
    pool = [t for ts in tokens for t in ts]
    out = []
    for ts in tokens:
        if not ts:
            out.append(ts)
            continue
        n = max(1, int(round(share * len(ts))))
        at = rng.choice(len(ts), size=min(n, len(ts)), replace=False)
        new = list(ts)
        for i, j in zip(at, rng.integers(0, len(pool), size=len(at))):
            new[i] = pool[j]
        out.append(new)
    return out


def write_copies(stores: Any, copies: List[Any], vecs: np.ndarray, tokens: List[List[str]]) -> None:
    from llama_index_ext_causalrag.storage.milvus.store import is_milvus
    from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_docstore, add_nodes_to_vector_store
    from llama_index_ext_causalrag.storage.terms import with_terms

    add_nodes_to_docstore(stores.docstore, copies)
    add_nodes_to_vector_store(
        stores.vector_store,
        [with_terms(u, t) for u, t in zip(copies, tokens)],
        vecs,
        row_ids=RowIds(NODE_ID) if is_milvus(stores.vector_store) else RowIds.for_new_index(),
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--holisqa", type=Path)
    p.add_argument("--domains", default="biology")
    p.add_argument("--sizes", default="1,5")
    p.add_argument("--hnsw", action="store_true", help="also run each size with HNSW() on the dense lists")
    p.add_argument(
        "--ivf",
        default="",
        help="NLIST:NPROBE: also Milvus rows built with ann=IVF(nlist, nprobe) (store milvus_ivf), after the exact ones",
    )
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--budget", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--store",
        default="postgres",
        help="postgres, milvus, or both (postgres,milvus: one run, the same corpus and questions)",
    )
    p.add_argument("--out", type=Path)
    p.add_argument("--milvus-uri", default="", help=argparse.SUPPRESS)
    p.add_argument("--query-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--questions-file", help=argparse.SUPPRESS)
    p.add_argument("--ann", default="", help=argparse.SUPPRESS)
    p.add_argument("--memory-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("--table", default=TABLE, help=argparse.SUPPRESS)
    p.add_argument("--lists-check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lists_check:
        lists_worker(args)
        return
    if args.query_worker:
        query_worker(args)
        return
    build_and_measure(args)


def build_and_measure(args: argparse.Namespace) -> None:
    from causalrag_bench import pgserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_holisqa
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    stores = [x.strip() for x in args.store.split(",") if x.strip()]
    bad = [x for x in stores if x not in ("postgres", "milvus")]
    if bad or not stores:
        raise SystemExit(f"--store {args.store!r}: give postgres, milvus or postgres,milvus")
    if args.ivf:
        if "milvus" not in stores:
            raise SystemExit(f"--ivf {args.ivf}: IVF rows are Milvus rows; add milvus to --store")
        parse_ann(f"ivf:{args.ivf}")  # a bad spec stops the run before the build
        stores.append(MILVUS_IVF)
    docs, questions = [], []
    domains = args.domains.split(",")
    for d in domains:
        ds = load_holisqa(args.holisqa / d)
        for doc in ds.documents:  # the domains number their articles alike: one id space
            if len(domains) > 1:
                doc.id_ = f"{d}/{doc.id_}"
        docs += ds.documents
        questions += [(q.qid, q.question) for q in ds.examples]
    questions = questions[: args.questions]  # the first domain's first: the same as its own run's
    model = cached_default_embed_model()
    tmp = Path(tempfile.mkdtemp(prefix="served-scale-"))
    qfile = tmp / "questions.json"
    qfile.write_text(
        json.dumps([{"qid": i, "text": q, "embedding": model.get_query_embedding(q)} for i, q in questions])
    )
    server = pgserver.start_server(tmp)
    url = server.get_uri()
    report: Dict[str, Any] = {
        "command": f"{SCRIPT} --holisqa $DATA/holisqa --domains {args.domains} --sizes {args.sizes}"
        + (" --hnsw" if args.hnsw else "")
        + f" --store {','.join(x for x in stores if x != MILVUS_IVF)}"
        + (f" --ivf {args.ivf}" if args.ivf else "")
        + f" --queries {args.queries} --budget {args.budget}",
        "domains": args.domains,
        "queries": args.queries,
        "budget": args.budget,
        "store": ",".join(stores),
        "by_store": {},
        **({"ivf": parse_ann(f"ivf:{args.ivf}").params()} if args.ivf else {}),
    }
    try:
        t0 = time.perf_counter()
        memory = MultiGranularityIndex.from_documents(docs, embed_model=model)
        memory.persist(tmp / "memory")
        print(f"1x: {len(memory._state.units)} units, memory build {time.perf_counter() - t0:.1f} s", flush=True)
        mem = run_worker(args, url, qfile, memory_dir=str(tmp / "memory"))
        report["memory_1x"] = {k: v for k, v in mem.items() if k != "tops"}
        exact_tops: Dict[int, List[List[str]]] = {}  # the exact Milvus run's, per size: IVF's top-10 against them
        for store in stores:
            report["by_store"][store] = measure_store(args, store, docs, memory, mem, url, qfile, tmp, exact_tops)
        if len(stores) == 1:  # the layout of one store's report, as before
            report["points"] = report["by_store"][stores[0]]["points"]
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)  # the in-memory copy, questions and Milvus data
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


def measure_store(
    args: argparse.Namespace,
    store: str,
    docs: List[Any],
    memory: Any,
    mem: Dict[str, Any],
    url: str,
    qfile: Path,
    tmp: Path,
    exact_tops: Dict[int, List[List[str]]],
) -> Dict[str, Any]:
    """Build ``docs`` into ``store`` and measure each size in fresh processes: ``{"points": [...]}``
    (``milvus_ivf``: Milvus with ``ann=IVF(--ivf)``, its top-10 also against ``exact_tops``)."""
    from causalrag_bench import milvusserver
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
    from llama_index_ext_causalrag.storage.pg.served import ServedTables

    args.table, args.milvus_uri = f"{TABLE}_{store}", ""
    ann = f"ivf:{args.ivf}" if store == MILVUS_IVF else ""
    milvus = None
    if store in ("milvus", MILVUS_IVF):
        milvus, args.milvus_uri = milvusserver.start_server(str(tmp / store))
    hnsw_runs = args.hnsw and store == "postgres"  # Milvus Lite builds no HNSW index
    model, sizes = memory._embed_model, sorted(int(x) for x in args.sizes.split(","))
    units, emb, tokens = memory._state.units, memory._state.embeddings, memory._state.tokens
    out: Dict[str, Any] = {"points": []}
    try:
        s = stores_for(url, args.milvus_uri, args.table)
        t1 = time.perf_counter()
        MultiGranularityIndex.from_documents(
            docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore, ann=parse_ann(ann)
        )
        build_s = time.perf_counter() - t1
        print(f"{store} 1x: store build {build_s:.1f} s", flush=True)
        tables = (
            s.vector_store.lists()
            if milvus
            else ServedTables(s.vector_store, sorted(memory.granularities), emb.shape[1])
        )
        out["lists_1x"] = run_lists_check(args, url, qfile, str(tmp / "memory"))
        have = 1
        for size in sizes:
            t = time.perf_counter()
            for k in range(have, size):
                write_copies(s, *replicas(units, emb, tokens, k, args.seed))
            if size > have:
                tables.analyze()
                build_s = time.perf_counter() - t
            rows = len(units) * (size - have if size > have else 1)
            have = max(have, size)
            point: Dict[str, Any] = {
                "size": size,
                "units": len(units) * size,
                "build_rows_per_s": rows / build_s,
                "database_gb": (_dir_gb(tmp / store) if milvus else _pg_gb(url)),
            }
            exact = run_worker(args, url, qfile, ann=ann)
            point["exact"] = {k: v for k, v in exact.items() if k != "tops"}
            if size == 1:
                point["exact"]["top10_as_memory"] = _same(exact["tops"], mem["tops"])
            if store == "milvus":
                exact_tops[size] = exact["tops"]
            elif store == MILVUS_IVF and size in exact_tops:
                point["exact"]["top10_as_exact"] = _same(exact["tops"], exact_tops[size])
            if hnsw_runs:
                point["hnsw"] = _hnsw_point(args, s, memory, url, qfile, exact, point)
            out["points"].append(point)
            print(store, json.dumps(point), flush=True)
    finally:
        if milvus is not None:
            milvusserver.stop(milvus)
    return out


def _same(tops: List[List[str]], other: List[List[str]]) -> float:
    """The share of questions whose top ids are ``other``'s, in order."""
    return float(np.mean([a == b for a, b in zip(tops, other)]))


def _pg_gb(url: str) -> float:
    from causalrag_bench import pgserver

    return pgserver.database_size(url) / 1024**3


def _hnsw_point(
    args: argparse.Namespace, s: Any, memory: Any, url: str, qfile: Path, exact: Dict[str, Any], point: Dict[str, Any]
) -> Dict[str, Any]:
    from llama_index_ext_causalrag.multigranularity import HNSW
    from llama_index_ext_causalrag.storage.pg.served import ServedTables

    t = time.perf_counter()
    hnsw = ServedTables(s.vector_store, sorted(memory.granularities), memory._state.embeddings.shape[1], HNSW())
    hnsw.build_ann()
    point["hnsw_build_s"] = time.perf_counter() - t
    _set_ann_params(s, HNSW())
    ann = run_worker(args, url, qfile, ann="hnsw")
    got = {k: v for k, v in ann.items() if k != "tops"}
    got["top10_as_exact"] = _same(ann["tops"], exact["tops"])
    hnsw._execute([f'DROP INDEX IF EXISTS "{lst}_hnsw"' for lst in hnsw.lists.values()])
    _set_ann_params(s, None)
    return got


# ---- every list against memory's (1x) ---------------------------------------------------------
def lists_worker(args: argparse.Namespace) -> None:
    """Every list (dense and BM25, each granularity, top ``LIST_K``) of each question, served and
    in memory: the share equal in ids and order, the share equal up to ties at the cut, and the
    largest relative score difference."""
    from llama_index.core.schema import QueryBundle

    from causalrag_bench.embedding_cache import cached_default_embed_model
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex

    questions = json.loads(Path(args.questions_file).read_text())
    model = cached_default_embed_model()
    memory = MultiGranularityIndex.from_persist_dir(args.memory_dir, embed_model=model).as_fusion_retriever().source
    s = stores_for(args.url, args.milvus_uri, args.table)
    served = (
        MultiGranularityIndex.from_vector_store(s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model)
        .as_fusion_retriever()
        .source
    )
    same = tied = total = 0
    worst = 0.0
    for q in questions:
        bundle = QueryBundle(q["text"], embedding=q["embedding"])
        got, want = served.lists(bundle, LIST_K), memory.lists(bundle, 10 * LIST_K)
        for key, g in got.items():
            w_ids, w_scores = want[key].ids, np.asarray(want[key].scores, dtype=np.float64)
            scores = np.asarray(g.scores, dtype=np.float64)
            n = len(g.ids)
            total += 1
            if n != min(LIST_K, len(w_ids)):
                continue
            rel = np.abs(scores - w_scores[:n]) / np.maximum(np.abs(w_scores[:n]), 1e-12)
            worst = max(worst, float(rel.max()) if n else 0.0)
            if list(g.ids) == list(w_ids[:n]):
                same += 1
                tied += 1
            elif n and set(g.ids) - set(w_ids[:n]) <= {
                i for i, x in zip(w_ids, w_scores) if abs(x - scores[-1]) <= 1e-5 * abs(scores[-1])
            }:
                tied += 1
    print(
        json.dumps(
            {
                "lists": total,
                "k": LIST_K,
                "same_ids_in_order": same / total,
                "same_up_to_ties": tied / total,
                "max_rel_score_diff": worst,
            }
        )
    )


def run_lists_check(args: argparse.Namespace, url: str, qfile: Path, memory_dir: str) -> Dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--lists-check",
        "--url",
        url,
        "--questions-file",
        str(qfile),
        "--milvus-uri",
        args.milvus_uri,
        "--table",
        args.table,
        "--memory-dir",
        memory_dir,
    ]
    out = subprocess.run(
        cmd, check=True, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    print("lists at 1x:", json.dumps(got), flush=True)
    return got


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
