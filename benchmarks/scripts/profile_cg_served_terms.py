"""What a CausalGraphIndex's unit scores cost when PostgreSQL serves its units' terms and list.

Per size (HolisQA biology, S - 1 copies of every document added, as ``bench_store_open.py
--grow copies``) the index is built into PostgreSQL 16 and reopened with ``from_vector_store``;
for each of ``--queries`` questions this times, in this process, the lexical scores two ways: from
the store (``ServedTerms.lexical``: one statement over the postings table, the ids mapped to
positions) and from the in-process postings a non-PostgreSQL store keeps (``TermPostings``, built
once from the units' text), checking that both give the same floats; and the whole ``retrieve``
(similarity_top_k=10) of two index objects opened on the same stores, each with its own caches,
asked in turn: the served one (the dense list and the unit vectors from the served list's table)
and one whose dense list and vectors come from the vector store (``VectorStoreQuery`` and
``get_nodes``, as on other stores), checking that both return the same ids. Interleaved, the two
share whatever else runs on the machine. Prints one JSON line per size and writes
``--out/results.json``.

    python benchmarks/scripts/profile_cg_served_terms.py --corpus $DATA/holisqa/biology --sizes 1,4,16 \\
        --out benchmarks/results/cg_served_list_profile
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
from llama_index.core.schema import QueryBundle

from causalrag_bench import pgserver
from causalrag_bench.embedding_cache import cached_default_embed_model
from causalrag_bench.loaders import load_holisqa
from causalrag_bench.process import latency_ms
from llama_index_ext_causalrag.causal_graph import CausalGraphIndex
from llama_index_ext_causalrag.causal_graph.retriever import terms_of
from llama_index_ext_causalrag.causal_graph.unit_terms import TermPostings
from llama_index_ext_causalrag.causal_graph.units import unit_texts

SCRIPT = "python benchmarks/scripts/profile_cg_served_terms.py"


def one_size(url: str, docs: List[Any], size: int, questions: List[Dict[str, Any]], model: Any) -> Dict[str, Any]:
    s = pgserver.pg_stores(url, f"cg_terms_{size}x", 384)
    CausalGraphIndex.from_documents(docs, embed_model=model, storage_context=s.storage_context(), kvstore=s.kvstore)
    s = pgserver.pg_stores(url, f"cg_terms_{size}x", 384)
    index = CausalGraphIndex.from_vector_store(s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model)
    src = index._state._stored
    n = len(src.ids)
    memory = TermPostings.from_texts(unit_texts(index.units), terms_of)
    served_t, memory_t, retrieve_t, store_t, matched, same, same_ids = [], [], [], [], [], 0, 0
    retriever = index.as_retriever(similarity_top_k=10)
    plain = CausalGraphIndex.from_vector_store(s.vector_store, s.docstore, kvstore=s.kvstore, embed_model=model)
    plain._state._stored.served = None  # the dense list and the vectors from the vector store
    plain_retriever = plain.as_retriever(similarity_top_k=10)
    for q in questions:
        qterms = sorted(terms_of(q["text"]))
        t = time.perf_counter()
        got = src.postings.lexical(qterms, n)
        served_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        want = memory.lexical(qterms, n)
        memory_t.append(time.perf_counter() - t)
        same += int(np.array_equal(got, want))
        matched.append(int((got > 0).sum()))
        bundle = QueryBundle(q["text"], embedding=q["embedding"])
        t = time.perf_counter()
        got_nodes = retriever.retrieve(bundle)
        retrieve_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        want_nodes = plain_retriever.retrieve(bundle)
        store_t.append(time.perf_counter() - t)
        same_ids += int([x.node.node_id for x in got_nodes] == [x.node.node_id for x in want_nodes])
    return {
        "size": size,
        "units": n,
        "queries": len(questions),
        "identical_lexical": same,
        "units_matched_p50": float(np.median(matched)),
        "served_ms": latency_ms(served_t),
        "memory_ms": latency_ms(memory_t),
        "retrieve_ms": latency_ms(retrieve_t),
        "retrieve_vector_store_ms": latency_ms(store_t),
        "identical_retrieve_ids": same_ids,
        "postings_mb_in_memory": memory.nbytes / 2**20,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="a HolisQA domain folder")
    p.add_argument("--sizes", default="1,4,16")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    ds = load_holisqa(Path(args.corpus))
    model = cached_default_embed_model()
    questions = [
        {"text": q.question, "embedding": model.get_query_embedding(q.question)} for q in ds.examples[: args.queries]
    ]
    server = pgserver.start_server(Path(tempfile.mkdtemp(prefix="cg-terms-")))
    report: Dict[str, Any] = {
        "command": f"{SCRIPT} --corpus $DATA/holisqa/{Path(args.corpus).name} --sizes {args.sizes} "
        f"--queries {args.queries}",
        "points": [],
    }
    try:
        for size in sorted(int(x) for x in args.sizes.split(",")):
            docs = list(ds.documents) + [
                d.model_copy(update={"id_": f"{d.doc_id}#c{k}"}) for k in range(1, size) for d in ds.documents
            ]
            point = one_size(server.get_uri(), docs, size, questions, model)
            report["points"].append(point)
            print(json.dumps(point), flush=True)
    finally:
        server.cleanup()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
