"""Memory and speed at 1x, 10x and 100x HolisQA: MultiGranularityIndex's dense lists in memory and in PostgreSQL.

The corpus at 1x is HolisQA biology + business (about 2,200 abstracts; ``--articles N`` keeps the
first N of each domain, for smoke runs), split into the units of
``MultiGranularityIndex.from_documents`` (2/4/8/16/32-sentence windows) and embedded as the
index embeds them (the bench's embedding cache, or ``--random-embeddings``). A corpus of size S
replicates the 1x units S times: each copy has new ids, its own copy of the text and a random
unit-norm embedding (seeded). **The larger points measure memory and speed only, not quality**:
the copies' embeddings are random and their texts repeat.

What is measured, and why: the dense half of UMGP's fusion, one list per granularity of its
``candidates_per_list`` (100) best units, fused (``EntropyFusionRetriever`` over dense experts
only), per question:

* ``memory``: one ``DenseExpert`` per granularity, what ``MultiGranularityIndex`` builds in memory
  (plus the index's own embedding matrix, which it keeps);
* ``postgres``: ``PGVectorStore`` with exact search (no HNSW index, a sequential scan per list),
  one ``VectorStoreExpert`` per granularity filtered on the unit's granularity, what the
  store-backed ``MultiGranularityIndex`` queries (the vector store only: its docstore is read
  for parent promotion, not for these lists).

BM25, fusion and parent promotion run in memory, on the same data, for both backends (a
store-backed index loads its bm25s index from the kvstore), so the backend changes the dense
lists only; that is what grows with the corpus here. Replicated texts would make a BM25
measurement meaningless anyway (every posting list repeats S times).

Per point (size x backend, each in its own process, so its peak RSS is its own): build seconds
(memory: the DenseExperts from the nodes and vectors; postgres: writing the rows, batch by batch,
through ``add_nodes_to_vector_store``; making the copies is not counted); peak RSS of the process
(``VmHWM``, else ``resource.getrusage``) once built and queried, and for the memory backend again
after its ``persist`` (serialising every node is a peak of its own); RSS once built (for postgres
also the server processes' RSS at the end, with ``psutil`` if installed, shared memory counted in
each); bytes on disk (memory: ``persist(dir)`` of the DenseExperts; postgres: the growth of
``pg_database_size``); query p50/p95 over ``--questions`` questions (100) whose embeddings are
computed once beforehand (embedding a query costs the same at every size). The growth exponent of
query p50 in corpus size is the slope of a least-squares line through (log units, log p50).

Before any point runs, the RAM each would need is estimated from the 1x units (the estimate is
printed next to the measured peak); a point that would exceed ``--max-gb`` (8) is refused, with a
message, and so is a PostgreSQL point the free disk space of the temporary folder cannot hold; the
other points run (on 8 GB: memory at 100x, about 30 GB, is refused).

Time: PostgreSQL's exact search scans every row for each of the five lists, so its query time
grows with the corpus. On a 2-core machine one 1x question took about 5 s (``json`` metadata),
so 100 questions at 100x would take more than ten hours: ``--max-query-s 900`` stops timing a
point's questions after 15 minutes (at least 10 questions; ``n_questions`` of each point says how
many were timed), ``--questions`` cuts them from the start. Writing the rows took 37 s for the
30,528 units at 1x; at 100x (3 million rows) expect about an hour.

    python benchmarks/scripts/bench_scale.py --holisqa $DATA/holisqa --sizes 1,10,100 --max-query-s 900 --out benchmarks/results/scale
    python benchmarks/scripts/bench_scale.py --holisqa $DATA/holisqa --sizes 1 --articles 100   # smoke run

PGVectorStore keeps node metadata as ``json`` by default, and every filtered scan extracts the
granularity from each row's metadata; ``--pg-jsonb`` measures ``use_jsonb=True`` instead.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

SCRIPT = "python benchmarks/scripts/bench_scale.py"
BACKENDS = ("memory", "postgres", "pg_lists", "pg_hnsw")
PG_BACKENDS = ("postgres", "pg_lists", "pg_hnsw")
GB = 1024**3
# RSS of a process that has imported the library and LlamaIndex, before any unit (measured: about 0.15 GB)
BASE_RSS = 0.3 * GB
SAFETY = 1.25  # on the per-unit part of the RAM estimate
MIN_QUESTIONS = 10  # timed per point even past --max-query-s


# ---------------------------------------------------------------------------------- helpers
def rss_bytes() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak RSS: ``VmHWM`` of /proc/self/status where there is one (the high-water
    mark of this program only; ``getrusage``'s ``ru_maxrss`` keeps the forking parent's across
    exec), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def percentile(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def growth_exponent(units: Sequence[int], p50: Sequence[float]) -> Optional[float]:
    """Slope of the least-squares line through (log units, log p50); ``None`` below two sizes."""
    if len(set(units)) < 2:
        return None
    return float(np.polyfit(np.log(np.asarray(units, dtype=float)), np.log(np.asarray(p50, dtype=float)), 1)[0])


def random_unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def replica(units: List[Any], r: int) -> List[Any]:
    """Copy ``r`` of the 1x units: new ids, their own metadata and text (deep copies, not shared objects)."""
    if r == 0:
        return units
    return [
        u.model_copy(update={"id_": f"{u.node_id}#r{r}", "text": "".join((u.text[:1], u.text[1:]))}, deep=True)
        for u in units
    ]


def replica_embeddings(emb: np.ndarray, r: int, seed: int) -> np.ndarray:
    return emb if r == 0 else random_unit_rows(emb.shape[0], emb.shape[1], seed * 1_000_003 + r)


class QueryVectorsOnly:
    """An embed model for the experts that refuses to embed: every query brings its vector."""

    @staticmethod
    def make(dim: int) -> Any:
        from llama_index.core.base.embeddings.base import BaseEmbedding

        class _NoEmbedding(BaseEmbedding):
            embed_dim: int = dim

            def _get_text_embedding(self, text: str) -> List[float]:
                raise RuntimeError("bench_scale: the query embeddings are computed beforehand")

            _get_query_embedding = _get_text_embedding

            async def _aget_query_embedding(self, query: str) -> List[float]:
                raise RuntimeError("bench_scale: the query embeddings are computed beforehand")

        return _NoEmbedding(model_name="bench-scale-precomputed")


# ------------------------------------------------------------------------- the 1x corpus
def load_corpus(holisqa: Path, domains: Sequence[str], articles: Optional[int]):
    """Documents of every domain (ids ``domain:article``) and the questions, in file order."""
    from llama_index.core import Document

    from causalrag_bench.loaders import load_dataset

    docs, questions = [], []
    for d in domains:
        ds = load_dataset("holisqa", holisqa / d)
        keep = ds.documents[:articles] if articles else ds.documents
        docs += [Document(text=x.text, id_=f"{d}:{x.doc_id}", metadata=dict(x.metadata)) for x in keep]
        questions += [e.question for e in ds.examples]
    return docs, questions


def node_bytes(units: List[Any], n: int = 300) -> float:
    """Bytes one copy of a unit takes (the node object and its text), measured on ``n`` copies."""
    sample = units[:n]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    copies = replica(sample, 1)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del copies
    return used / max(1, len(sample))


def estimate(backend: str, size: int, n_units: int, dim: int, per_node: float, row_bytes: float) -> Dict[str, float]:
    """RAM (and for postgres disk) a point needs, in bytes.

    memory: every copy's node and text (1.5x what one copy measures: the allocator's overhead),
    the index's matrix, each DenseExpert's raw rows and unit rows and the temporary of their
    normalisation (4 float32 copies); postgres: the 1x units, one copy being written (twice:
    add_nodes_to_vector_store copies each batch) and the server's buffers; the disk holds every
    row. On HolisQA at 1x and 3x the memory estimate was 16% and 8% above the point's peak
    (which is while persisting; the index alone peaked 35% lower)."""
    vec = dim * 4
    if backend == "memory":
        ram = BASE_RSS + SAFETY * size * n_units * (1.5 * per_node + 4 * vec)
        return {"ram": ram, "disk": size * n_units * (row_bytes + vec)}
    ram = BASE_RSS + SAFETY * 3 * n_units * (per_node + vec) + 0.3 * GB
    return {"ram": ram, "disk": 1.3 * size * n_units * (row_bytes + vec)}


# ------------------------------------------------------------------------------ one point
def run_point(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Build one backend at one size from the saved 1x units and vectors, then time the queries."""
    from llama_index.core.schema import QueryBundle
    from llama_index.core.storage.docstore.utils import json_to_doc

    from llama_index_ext_causalrag.experts import DenseExpert
    from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
    from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity

    work = Path(spec["work"])
    with open(work / "units.jsonl", encoding="utf-8") as f:  # line by line: no transient copy of the whole file
        units = [json_to_doc(json.loads(line)) for line in f]
    gc.collect()
    emb = np.load(work / "embeddings.npy")
    qvecs = np.load(work / "queries.npy")
    questions = json.loads((work / "questions.json").read_text(encoding="utf-8"))
    size, backend, k, seed = spec["size"], spec["backend"], spec["candidates"], spec["seed"]
    model = QueryVectorsOnly.make(emb.shape[1])
    rss_before = rss_bytes()
    out: Dict[str, Any] = {"size": size, "backend": backend, "units": size * len(units)}
    if backend == "memory":
        all_units: List[Any] = []
        # kept, as MultiGranularityIndex keeps its matrix; filled copy by copy (no second copy while joining)
        matrix = np.empty((size * len(units), emb.shape[1]), dtype=np.float32) if size > 1 else emb
        for r in range(size):
            all_units += replica(units, r)
            if size > 1:
                matrix[r * len(units) : (r + 1) * len(units)] = replica_embeddings(emb, r, seed)
        t = time.perf_counter()
        experts = {
            g: DenseExpert([all_units[i] for i in idx], embed_model=model, embeddings=matrix[idx], name=f"dense@{g}")
            for g, idx in units_by_granularity(all_units).items()
        }
        out["build_s"] = time.perf_counter() - t
        fusion = EntropyFusionRetriever({"dense": experts}, similarity_top_k=10, candidates_per_list=k)
    else:
        from causalrag_bench import pgserver
        from llama_index_ext_causalrag.multigranularity.lists import GranularityListExpert
        from llama_index_ext_causalrag.multigranularity.store_experts import dense_experts
        from llama_index_ext_causalrag.storage.ann import HNSW
        from llama_index_ext_causalrag.storage.pg.lists import GranularityTables
        from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
        from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store

        row_ids = RowIds(NODE_ID)  # rows under the node ids, one scheme for the writes and the experts

        url = pgserver.server_url("bench_scale.py --backends postgres")
        size_empty = pgserver.database_size(url)
        vs = pgserver.pg_stores(url, "scale_units", emb.shape[1], use_jsonb=spec.get("jsonb", False)).vector_store
        gs = sorted(units_by_granularity(units))
        ann = HNSW(ef_search=spec["ef_search"]) if backend == "pg_hnsw" else None
        tables = GranularityTables(vs, gs, emb.shape[1], ann) if backend != "postgres" else None
        if tables is not None:
            tables.create()  # before the rows: the triggers fill the lists as the rows arrive
        build = 0.0
        for r in range(size):
            part, vecs = replica(units, r), replica_embeddings(emb, r, seed)
            t = time.perf_counter()
            add_nodes_to_vector_store(vs, part, vecs, row_ids=row_ids)
            build += time.perf_counter() - t
            del part, vecs
        out["build_s"] = build
        if ann is not None:
            set_server(url, maintenance_work_mem=spec["maintenance_work_mem"], max_parallel_maintenance_workers=1)
            t = time.perf_counter()
            tables.build_ann()
            out["ann_build_s"] = time.perf_counter() - t
            out["ann"] = ann.params()
        out["disk_bytes"] = pgserver.database_size(url) - size_empty
        out["disk_what"] = "growth of pg_database_size"
        if tables is None:  # the layout before per-granularity tables: one filtered expert per granularity
            experts = {g: e.with_top_k(k) for g, e in dense_experts(vs, None, model, units, row_ids).items()}
        else:  # what the store-backed index queries now: every list in one round trip
            nodes = ReplicaNodes(units)
            experts = {g: GranularityListExpert(tables, g, model, nodes, row_ids, k) for g in gs}
        fusion = EntropyFusionRetriever({"dense": experts}, similarity_top_k=10, candidates_per_list=k)
    gc.collect()
    out["rss_after_build_bytes"] = rss_bytes()
    for q, v in list(zip(questions, qvecs))[:3]:  # warm-up
        fusion.retrieve(QueryBundle(query_str=q, embedding=v.tolist()))
    lat: List[float] = []
    cap = spec.get("max_query_s")
    t_queries = time.perf_counter()
    for q, v in zip(questions, qvecs):
        if cap is not None and len(lat) >= MIN_QUESTIONS and time.perf_counter() - t_queries > cap:
            break  # --max-query-s: p50/p95 over the questions timed so far (n_questions says how many)
        t = time.perf_counter()
        fusion.retrieve(QueryBundle(query_str=q, embedding=v.tolist()))
        lat.append(1000.0 * (time.perf_counter() - t))
    if backend == "pg_hnsw":  # against exact search over the same tables, for the questions timed
        out.update(recall_against_exact(tables, fusion, questions[: len(lat)], qvecs[: len(lat)], k))
    out.update(
        n_questions=len(lat),
        p50_ms=statistics.median(lat),
        p95_ms=percentile(lat, 0.95),
        rss_before_build_bytes=rss_before,
        peak_rss_bytes=peak_rss_bytes(),
    )  # built and queried
    if backend in PG_BACKENDS:
        out["server_rss_bytes"] = server_rss()
    else:  # last: persisting serialises every node, a peak of its own that is not the index's
        with tempfile.TemporaryDirectory(prefix="causalrag-scale-") as d:
            t = time.perf_counter()
            for g, e in experts.items():
                e.persist(Path(d) / f"dense_g{g}")
            out["persist_s"] = time.perf_counter() - t
            out["disk_bytes"] = dir_bytes(Path(d))
        out["disk_what"] = "persist(dir) of the DenseExperts"
        out["peak_rss_with_persist_bytes"] = peak_rss_bytes()
    return out


class ReplicaNodes(dict):
    """Node id -> node for every copy of the 1x ``units`` (copy ``r``'s ids end in ``#r{r}``), made
    on first use: the store-backed index holds its units in memory; 3 million objects would not
    fit this bench's budget, and the lists' nodes are all the fusion reads."""

    def __init__(self, units: List[Any]) -> None:
        super().__init__((u.node_id, u) for u in units)

    def __missing__(self, node_id: str) -> Any:
        base, _, r = node_id.rpartition("#r")
        return dict.__getitem__(self, base).model_copy(update={"id_": node_id})

    def __contains__(self, node_id: object) -> bool:
        """A copy's id is held too (``in`` does not call ``__missing__``: without this every copy's
        row was left out of the lists, and "top-10 as exact" above 1x compared 1x rows only)."""
        if dict.__contains__(self, node_id):
            return True
        base, sep, r = str(node_id).rpartition("#r")
        return bool(sep) and r.isdigit() and dict.__contains__(self, base)


def set_server(url: str, **settings: Any) -> None:
    """``ALTER SYSTEM`` settings of the bench's own server, reloaded (HNSW builds in memory)."""
    import sqlalchemy

    from causalrag_bench.pgserver import driver_url

    engine = sqlalchemy.create_engine(driver_url(url, "psycopg2"), isolation_level="AUTOCOMMIT")
    with engine.connect() as c:
        for name, value in settings.items():
            c.execute(sqlalchemy.text(f"ALTER SYSTEM SET {name} = '{value}'"))
        c.execute(sqlalchemy.text("SELECT pg_reload_conf()"))
    engine.dispose()


def recall_against_exact(
    tables: Any, fusion: Any, questions: Sequence[str], qvecs: np.ndarray, k: int
) -> Dict[str, Any]:
    """Share of questions whose fused top-10 equals exact search's, the mean share of each list's
    ``k`` exact candidates that the approximate list holds, and exact search's p50/p95 over the
    same tables (the same point measures both)."""
    from llama_index.core.schema import QueryBundle

    exact = type(tables)(tables.vector_store, tables.granularities, tables.dim, None)
    same, recall, exact_ms = 0, [], []
    for q, v in zip(questions, qvecs):
        approx_lists, exact_lists = tables.query(v, k), exact.query(v, k)
        recall += [
            len(set(approx_lists[g][0]) & set(exact_lists[g][0])) / max(len(exact_lists[g][0]), 1) for g in exact_lists
        ]
        got = [n.node.node_id for n in fusion.retrieve(QueryBundle(query_str=q, embedding=v.tolist()))]
        tables_ann = tables.ann
        tables.ann = None  # the same experts over exact search
        try:
            t = time.perf_counter()
            want = [n.node.node_id for n in fusion.retrieve(QueryBundle(query_str=q, embedding=v.tolist()))]
            exact_ms.append(1000.0 * (time.perf_counter() - t))
        finally:
            tables.ann = tables_ann
        same += got == want
    return {
        "identical_top10_share": same / max(len(questions), 1),
        "list_recall_at_k": float(np.mean(recall)),
        "recall_questions": len(questions),
        "exact_p50_ms": statistics.median(exact_ms),
        "exact_p95_ms": percentile(exact_ms, 0.95),
    }


def server_rss() -> Optional[int]:
    """RSS of the postmaster and its children (shared buffers counted in each), ``None`` without psutil."""
    from causalrag_bench import pgserver

    try:
        import psutil
    except ImportError:
        return None
    pid = pgserver.server_pid()
    if pid is None:
        return None
    try:
        p = psutil.Process(pid)
        return int(sum(x.memory_info().rss for x in [p, *p.children(recursive=True)]))
    except psutil.Error:
        return None


# ---------------------------------------------------------------------------------- main
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--holisqa", help="the HolisQA folder (holds biology/ and business/)")
    p.add_argument("--domains", default="biology,business", help="HolisQA domains of the 1x corpus")
    p.add_argument("--sizes", default="1,10,100", help="corpus sizes, multiples of the 1x corpus")
    p.add_argument("--backends", default="memory,postgres", help=f"of {', '.join(BACKENDS)}")
    p.add_argument("--questions", type=int, default=100, help="questions timed per point (default 100)")
    p.add_argument(
        "--max-query-s",
        type=float,
        default=None,
        help=f"stop timing a point's questions after this many seconds (at least {MIN_QUESTIONS} questions; "
        "default: all --questions)",
    )
    p.add_argument("--articles", type=int, default=None, help="smoke run: first N articles per domain at 1x")
    p.add_argument(
        "--random-embeddings",
        action="store_true",
        help="random unit-norm vectors at 1x too (no embedding model; the numbers measure speed only anyway)",
    )
    p.add_argument(
        "--pg-jsonb",
        action="store_true",
        help="PGVectorStore(use_jsonb=True): metadata as jsonb (default: json, the store's default)",
    )
    p.add_argument(
        "--ef-search", type=int, default=400, help="pg_hnsw: hnsw.ef_search of each list (default 400, HNSW()'s)"
    )
    p.add_argument("--maintenance-work-mem", default="4GB", help="pg_hnsw: the server's memory for building HNSW")
    p.add_argument(
        "--max-gb", type=float, default=8.0, help="refuse points whose estimated RAM exceeds this (default 8)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random embeddings")
    p.add_argument("--cache-dir", default=None, help="embedding cache (default: the bench's)")
    p.add_argument("--out", default=None, help="folder for results.json")
    p.add_argument(
        "--append",
        action="store_true",
        help="add this run's points to --out's results.json (same corpus, embeddings and metadata type; "
        "a point of the same size and backend is replaced) and refit the growth exponents",
    )
    p.add_argument("--point", default=None, help=argparse.SUPPRESS)  # internal: one point, as JSON
    return p


def appended(
    previous: Dict[str, Any],
    corpus: Dict[str, Any],
    metadata: str,
    results: List[Dict[str, Any]],
    refused: List[Dict[str, Any]],
    commands: List[str],
):
    """The points, refusals and commands of ``previous`` (a results.json) with this run's added: a
    point of the same size and backend replaces the old one. ``ValueError`` if the runs measured
    different corpora or metadata types (their points would not belong in one table)."""
    keys = ("domains", "articles", "units_1x", "dim", "embeddings_1x")
    if (
        any(previous["corpus"].get(k) != corpus.get(k) for k in keys[:4])
        or previous["corpus"]["embeddings_1x"].split(" (")[0] != corpus["embeddings_1x"].split(" (")[0]
    ):
        raise ValueError(
            "--append: the results.json in --out measured another corpus "
            f"({ {k: previous['corpus'].get(k) for k in keys[:4]} }, this run: "
            f"{ {k: corpus.get(k) for k in keys[:4]} }); write to another --out"
        )
    if previous.get("postgres_metadata") != metadata:
        raise ValueError(
            f"--append: the results.json in --out measured PostgreSQL metadata as "
            f"{previous.get('postgres_metadata')}, this run as {metadata}; pass the same --pg-jsonb or "
            "write to another --out"
        )
    new = {(r["size"], r["backend"]) for r in results} | {(r["size"], r["backend"]) for r in refused}
    kept = [r for r in previous["points"] if (r["size"], r["backend"]) not in new]
    kept_refused = [r for r in previous.get("refused", []) if (r["size"], r["backend"]) not in new]
    order = lambda r: (BACKENDS.index(r["backend"]), r["size"])  # noqa: E731
    return (
        sorted(kept + results, key=order),
        sorted(kept_refused + refused, key=order),
        previous.get("commands", [previous.get("command")]) + commands,
    )


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.point:
        print(json.dumps(run_point(json.loads(args.point))))
        return 0
    # here, not at the top: a --point process measures memory, and this reads the git state at the start
    from causalrag_bench.cli import provenance_of, write_results

    argv = list(argv if argv is not None else sys.argv[1:])
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    except ValueError:
        print(f"bench_scale: error: --sizes must be integers, got {args.sizes!r}", file=sys.stderr)
        return 2
    bad = [b for b in backends if b not in BACKENDS]
    if not args.holisqa or bad or not sizes or min(sizes) < 1 or args.questions < 1:
        print(
            "bench_scale: error: pass --holisqa DIR, --sizes of integers >= 1, --backends of "
            f"{', '.join(BACKENDS)} (got {', '.join(bad) or args.backends}) and --questions >= 1",
            file=sys.stderr,
        )
        return 2
    if any(b in PG_BACKENDS for b in backends):
        from causalrag_bench.pgserver import PostgresUnavailable, require_postgres

        try:
            require_postgres("bench_scale.py --backends postgres")
        except PostgresUnavailable as e:
            print(f"bench_scale: error: {e}", file=sys.stderr)
            return 2
    from llama_index_ext_causalrag.multigranularity.presets import UMG_PRESETS
    from llama_index_ext_causalrag.multigranularity.windows import MultiGranularityNodeParser

    t0 = time.perf_counter()
    docs, questions = load_corpus(Path(args.holisqa), [d.strip() for d in args.domains.split(",")], args.articles)
    questions = questions[: args.questions]
    units = MultiGranularityNodeParser().get_nodes_from_documents(docs)
    dim = 384 if args.random_embeddings else None
    from llama_index.core.storage.docstore.utils import doc_to_json

    per_node = node_bytes(units)
    row_bytes = float(np.mean([len(json.dumps(doc_to_json(u))) for u in units[:500]]))
    if dim is None:
        from causalrag_bench.embedding_cache import cached_default_embed_model, default_cache_dir
        from llama_index_ext_causalrag.storage.persistence import embed_dim

        model = cached_default_embed_model(Path(args.cache_dir) if args.cache_dir else default_cache_dir())
        dim = embed_dim(model)
    print(
        f"1x corpus: {len(docs)} articles ({args.domains}{f', first {args.articles} each' if args.articles else ''}), "
        f"{len(units)} units, {dim}-dimensional; {per_node:.0f} bytes per unit object, {row_bytes:.0f} bytes of node JSON",
        flush=True,
    )
    all_points = [(s, b) for s in sizes for b in backends]
    est = {(s, b): estimate(b, s, len(units), dim, per_node, row_bytes) for s, b in all_points}
    free = shutil.disk_usage(tempfile.gettempdir()).free
    refused: List[Dict[str, Any]] = []
    for s, b in all_points:
        ram, disk = est[(s, b)]["ram"], est[(s, b)]["disk"]
        if ram > args.max_gb * GB:
            why = f"its RAM would exceed --max-gb {args.max_gb:g} (estimated {ram / GB:.1f} GB)"
        elif b in PG_BACKENDS and disk > 0.9 * free:
            why = f"its rows need about {disk / GB:.1f} GB of disk in {tempfile.gettempdir()}, {free / GB:.1f} GB are free"
        else:
            continue
        refused.append({"size": s, "backend": b, "refused": why, "estimated_ram_bytes": ram})
        print(
            f"bench_scale: refusing size {s} on {b}: {why}; raise --max-gb only if the machine has the memory.",
            file=sys.stderr,
            flush=True,
        )
    points = [(s, b) for s, b in all_points if not any(r["size"] == s and r["backend"] == b for r in refused)]
    if not points:
        print("bench_scale: error: every requested point was refused (above); nothing to run.", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="causalrag-scale-") as work:
        work_dir = Path(work)
        t = time.perf_counter()
        if args.random_embeddings:
            emb = random_unit_rows(len(units), dim, args.seed)
            qvecs = random_unit_rows(len(questions), dim, args.seed + 1)
            how = "random unit-norm vectors (--random-embeddings)"
        else:
            from llama_index_ext_causalrag import MultiGranularityIndex

            index = MultiGranularityIndex.from_documents(docs, embed_model=model)  # the in-memory default
            units = index.units
            emb = np.asarray(index.embeddings, dtype=np.float32)
            del index
            qvecs = np.asarray(model.get_query_embedding_batch(questions), dtype=np.float32)
            how = f"MultiGranularityIndex.from_documents with the bench's cached embedder ({time.perf_counter() - t:.1f} s)"
        with open(work_dir / "units.jsonl", "w", encoding="utf-8") as f:
            for u in units:
                f.write(json.dumps(doc_to_json(u)) + "\n")
        np.save(work_dir / "embeddings.npy", emb)
        np.save(work_dir / "queries.npy", qvecs)
        (work_dir / "questions.json").write_text(json.dumps(questions), encoding="utf-8")
        n_units = len(units)
        del units, emb
        gc.collect()
        print(
            f"1x embeddings: {how}. Sizes above 1x replicate these units with random unit-norm embeddings: "
            "memory and speed only, no quality.",
            flush=True,
        )
        results = []
        for s, b in points:
            spec = {
                "work": work,
                "size": s,
                "backend": b,
                "candidates": UMG_PRESETS["umgp"].fusion.candidates_per_list,
                "seed": args.seed,
                "jsonb": args.pg_jsonb,
                "max_query_s": args.max_query_s,
                "ef_search": args.ef_search,
                "maintenance_work_mem": args.maintenance_work_mem,
            }
            print(f"[{b} x{s}] {s * n_units:,} units (estimated RAM {est[(s, b)]['ram'] / GB:.1f} GB) ...", flush=True)
            proc = subprocess.run(
                [sys.executable, __file__, "--point", json.dumps(spec)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                print(f"bench_scale: error: the point {b} x{s} failed (exit {proc.returncode})", file=sys.stderr)
                return 1
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            r["estimated_ram_bytes"] = est[(s, b)]["ram"]
            results.append(r)
            print(
                f"[{b} x{s}] build {r['build_s']:.1f} s, peak RSS {r['peak_rss_bytes'] / GB:.2f} GB, disk "
                f"{r['disk_bytes'] / 1e6:.1f} MB, p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms",
                flush=True,
            )
    corpus = {
        "domains": args.domains,
        "articles": len(docs),
        "articles_per_domain": args.articles,
        "units_1x": n_units,
        "dim": dim,
        "embeddings_1x": how,
        "replicas": "new ids, copied texts, random unit-norm embeddings (memory and speed only, no quality)",
    }
    commands = [" ".join([SCRIPT, *["$DATA/holisqa" if a == args.holisqa else a for a in argv]])]
    embedder = None if args.random_embeddings else model
    # one per command: an --append run keeps the earlier runs' (None where they recorded none)
    provenances = [provenance_of(embedder, None)]
    if args.append and args.out and (Path(args.out) / "results.json").exists():
        previous = json.loads((Path(args.out) / "results.json").read_text())
        try:
            results, refused, commands = appended(
                previous, corpus, "jsonb" if args.pg_jsonb else "json", results, refused, commands
            )
        except ValueError as e:
            print(f"bench_scale: error: {e}", file=sys.stderr)
            return 2
        earlier = list(previous.get("provenances") or [])
        provenances = (earlier + [None] * (len(commands) - 1 - len(earlier)))[: len(commands) - 1] + provenances
    exponents = {}
    for b in sorted({r["backend"] for r in results}, key=BACKENDS.index):
        rows = sorted((r for r in results if r["backend"] == b), key=lambda r: r["size"])
        exponents[b] = growth_exponent([r["units"] for r in rows], [r["p50_ms"] for r in rows])
    report = {
        "command": " && ".join(commands),
        "commands": commands,
        "provenances": provenances,
        "corpus": corpus,
        "postgres_metadata": "jsonb" if args.pg_jsonb else "json",
        "measured": "the dense lists of UMGP's fusion (EntropyFusionRetriever over one dense expert per granularity, "
        f"candidates_per_list {UMG_PRESETS['umgp'].fusion.candidates_per_list}), query embeddings computed beforehand",
        "n_questions": len(questions),
        "points": results,
        "refused": refused,
        "p50_growth_exponent": exponents,
        "max_gb": args.max_gb,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(
        "\n| backend | size | units | build s | peak RSS GB: index / with persist (estimate) | RSS after build GB "
        "| disk MB | p50 ms | p95 ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        persist = f" / {r['peak_rss_with_persist_bytes'] / GB:.2f}" if "peak_rss_with_persist_bytes" in r else ""
        print(
            f"| {r['backend']} | {r['size']}x | {r['units']:,} | {r['build_s']:.1f} | {r['peak_rss_bytes'] / GB:.2f}{persist} "
            f"({r['estimated_ram_bytes'] / GB:.2f}) | {r['rss_after_build_bytes'] / GB:.2f} | {r['disk_bytes'] / 1e6:.1f} "
            f"| {r['p50_ms']:.2f} | {r['p95_ms']:.2f} |"
        )
    for r in refused:
        print(f"| {r['backend']} | {r['size']}x | refused: {r['refused']} | | | | | | |")
    for b, e in exponents.items():
        print(
            f"query p50 growth exponent, {b}: "
            + (f"{e:.2f} (p50 ~ units^{e:.2f})" if e is not None else "n/a (needs two sizes or more)")
        )
    print("Sizes above 1x: replicated units with random unit-norm embeddings; memory and speed only, no quality.")
    if args.out:
        write_results(args.out, report, embed_model=embedder, llm=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
