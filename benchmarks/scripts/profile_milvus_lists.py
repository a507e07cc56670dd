"""Where a Milvus-served query and build spend their time: per list, per size, per write step.

Builds HolisQA ``--domains`` in memory, writes its units into a fresh Milvus server (milvus-lite
2.5.1's C++ engine) through :class:`MilvusUnits` (the index's writer), timing the insert and the
flush apart, then at each of ``--sizes`` (the scale bench's copies: ``--copies same`` the same
text, ``perturbed`` a few words of each copy replaced) times every list of each question alone
(dense and BM25, per granularity, sequential round trips) and all of a question's lists as the
index sends them (concurrently), plus variants of the search call (no output field, Bounded
consistency). Prints one JSON line per size.

``--ivf NLIST:NPROBE``: the same rows also go into collections built with ``ann=IVF(nlist,
nprobe)`` (Milvus's ``IVF_FLAT``), whose dense lists are timed the same way and compared with the
exact (``FLAT``) ones: ``ivf_recall`` is, per granularity, the share of the exact list's top ``k``
ids the IVF list returns (mean over the questions); ``rows`` the rows of each collection.

    python benchmarks/scripts/profile_milvus_lists.py --holisqa $DATA/holisqa --sizes 1,5,10
    python benchmarks/scripts/profile_milvus_lists.py --holisqa $DATA/holisqa --sizes 1,5,10 --ivf 1024:32
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_served_scale import replicas  # noqa: E402

from llama_index_ext_causalrag.storage.milvus.rows import term_text  # noqa: E402


def _median_ms(times: List[float]) -> float:
    return float(np.median(times) * 1000) if times else 0.0


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def write(units_store: Any, units: List[Any], vecs: np.ndarray, tokens: List[List[str]]) -> Dict[str, float]:
    from llama_index_ext_causalrag.storage.row_ids import NODE_ID, RowIds
    from llama_index_ext_causalrag.storage.stores import add_nodes_to_vector_store
    from llama_index_ext_causalrag.storage.terms import with_terms

    t = time.perf_counter()
    rows = [with_terms(u, tk) for u, tk in zip(units, tokens)]
    prep = time.perf_counter() - t
    ins = timed(lambda: add_nodes_to_vector_store(units_store, rows, vecs, row_ids=RowIds(NODE_ID)))
    return {"with_terms_s": prep, "insert_s": ins}


def profile_size(lists: Any, questions: List[Dict[str, Any]], tokenizer: Any, k: int, k1: float, b: float) -> Dict:
    keys = [(e, g) for g in lists.granularities for e in ("dense", "sparse")]
    alone: Dict[str, List[float]] = {f"{e}{g}": [] for e, g in keys}
    variants: Dict[str, List[float]] = {"all_concurrent": [], "all_sequential": []}
    for q in questions:
        terms = Counter(tokenizer(q["text"]))
        vec = np.asarray(q["embedding"], dtype=np.float32)
        text = term_text(terms)
        for e, g in keys:
            data = lists.query_vector(vec) if e == "dense" else text
            alone[f"{e}{g}"].append(timed(partial(lists._search, e, g, data, k, "")))
        variants["all_concurrent"].append(timed(lambda: lists.start_lists(vec, terms, keys, k, k1, b)()))  # noqa: B023
        variants["all_sequential"].append(sum(alone[f"{e}{g}"][-1] for e, g in keys))
    return {
        "alone_p50_ms": {key: round(_median_ms(v), 2) for key, v in alone.items()},
        **{f"{key}_p50_ms": round(_median_ms(v), 2) for key, v in variants.items()},
    }


def profile_ivf(exact: Any, ivf: Any, questions: List[Dict[str, Any]], k: int) -> Dict:
    """Each dense list of ``ivf`` timed alone, and its top ``k`` against ``exact``'s (recall)."""
    alone: Dict[str, List[float]] = {f"dense{g}": [] for g in ivf.granularities}
    recall: Dict[str, List[float]] = {f"dense{g}": [] for g in ivf.granularities}
    for q in questions:
        vec = exact.query_vector(np.asarray(q["embedding"], dtype=np.float32))
        for g in ivf.granularities:
            want = exact._search("dense", g, vec, k, "")[0]
            t = time.perf_counter()
            got = ivf._search("dense", g, vec, k, "")[0]
            alone[f"dense{g}"].append(time.perf_counter() - t)
            recall[f"dense{g}"].append(len(set(got) & set(want)) / max(1, len(want)))
    return {
        "ivf_alone_p50_ms": {key: round(_median_ms(v), 2) for key, v in alone.items()},
        "ivf_recall": {key: round(float(np.mean(v)), 4) for key, v in recall.items()},
    }


def rows_per_list(lists: Any) -> Dict[str, int]:
    return {
        f"g{g}": int(lists.client.query(lists.collection(g), filter="", output_fields=["count(*)"])[0]["count(*)"])
        for g in lists.granularities
    }


def parse_ivf(text: str) -> Any:
    from llama_index_ext_causalrag.multigranularity import IVF

    try:
        nlist, nprobe = (int(x) for x in text.split(":"))
    except ValueError:
        raise SystemExit(f"--ivf {text!r}: give NLIST:NPROBE, e.g. 1024:32") from None
    return IVF(nlist=nlist, nprobe=nprobe)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--holisqa", type=Path, required=True)
    p.add_argument("--domains", default="biology")
    p.add_argument("--sizes", default="1,5,10")
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--copies", default="same", choices=["same", "perturbed"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ivf", default="", help="NLIST:NPROBE: also IVF collections, timed and compared with exact")
    p.add_argument("--out", type=Path, help="also write the points to OUT/results.json")
    args = p.parse_args()

    from causalrag_bench import milvusserver
    from causalrag_bench.embedding_cache import cached_default_embed_model
    from causalrag_bench.loaders import load_holisqa
    from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
    from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer
    from llama_index_ext_causalrag.multigranularity import MultiGranularityIndex
    from llama_index_ext_causalrag.multigranularity.served_source import bm25_k1_b
    from llama_index_ext_causalrag.multigranularity.stages import FUSION
    from llama_index_ext_causalrag.storage.milvus.store import MilvusUnits

    ds = load_holisqa(args.holisqa / args.domains)
    model = cached_default_embed_model()
    memory = MultiGranularityIndex.from_documents(ds.documents, embed_model=model)
    questions = [
        {"text": q.question, "embedding": model.get_query_embedding(q.question)} for q in ds.examples[: args.questions]
    ]
    st = memory._state
    units, emb, tokens = st.units, st.embeddings, st.tokens
    k = FUSION.candidates_per_list + TIE_MARGIN  # what a query asks of each list
    k1, b = bm25_k1_b(memory.bm25_params)
    tokenizer = BM25Tokenizer()
    tmp = Path(tempfile.mkdtemp(prefix="profile-milvus-"))
    proc, uri = milvusserver.start_server(str(tmp / "milvus"))
    try:
        store = MilvusUnits(uri=uri, collection_name="prof", embed_dim=emb.shape[1])
        lists = store.lists(sorted(memory.granularities), emb.shape[1], None)
        lists.bm25(k1, b)
        lists.create()
        ivf_store, ivf_lists = None, None
        if args.ivf:
            ivf_store = MilvusUnits(uri=uri, collection_name="prof_ivf", embed_dim=emb.shape[1])
            ivf_lists = ivf_store.lists(sorted(memory.granularities), emb.shape[1], parse_ivf(args.ivf))
            ivf_lists.bm25(k1, b)
            ivf_lists.create()
        have, points = 0, []
        for size in sorted(int(s) for s in args.sizes.split(",")):
            steps: Dict[str, float] = {"with_terms_s": 0.0, "insert_s": 0.0}
            rows = 0
            for c in range(have, size):
                if c == 0:
                    rows_c, vecs, toks = units, emb, tokens
                else:
                    rows_c, vecs, toks = replicas(units, emb, tokens, c, args.seed, perturb=args.copies == "perturbed")
                got = write(store, rows_c, vecs, toks)
                if ivf_store is not None:
                    write(ivf_store, rows_c, vecs, toks)
                rows += len(units)
                for key, v in got.items():
                    steps[key] += v
            steps["flush_s"] = timed(lists.analyze)
            have = size
            out = {"size": size, "units": len(units) * size, "k": k, "rows_written": rows, **steps}
            if rows:
                out["vector_store_rows_per_s"] = rows / (steps["with_terms_s"] + steps["insert_s"] + steps["flush_s"])
            out["rows"] = rows_per_list(lists)
            out.update(profile_size(lists, questions, tokenizer, k, k1, b))
            if ivf_lists is not None:
                ivf_lists.analyze()
                out["ivf"] = args.ivf
                out.update(profile_ivf(lists, ivf_lists, questions, k))
            print(json.dumps(out), flush=True)
            points.append(out)
    finally:
        milvusserver.stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        command = f"python benchmarks/scripts/profile_milvus_lists.py --holisqa $DATA/holisqa --domains {args.domains}"
        command += f" --sizes {args.sizes} --questions {args.questions} --copies {args.copies}"
        command += f" --ivf {args.ivf}" if args.ivf else ""
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"command": command, "points": points}, indent=1))


if __name__ == "__main__":
    main()
