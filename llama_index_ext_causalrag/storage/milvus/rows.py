"""What a Milvus-served index's collections hold: their schema and indexes, and a unit's row.

One collection per granularity (:class:`~.served.MilvusLists`), one row per unit of its list:
``pk`` (the node id); ``embedding``, the embedding scaled to length 1 (``IP``: the cosine), and
``norm``, its length; ``terms``, the unit's BM25 tokens, analyzed by Milvus's ``whitespace``
tokenizer into ``sparse`` by the ``BM25`` function; ``n_tokens``; ``doc_id``; ``metadata`` (JSON).
Collections written before ``norm`` (``COSINE`` over the embedding as given) keep that layout.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.storage.ann import ANN, HNSW, IVF
from llama_index_ext_causalrag.storage.row_ids import NODE_ID_KEY
from llama_index_ext_causalrag.storage.terms import TERMS_KEY, TERMS_LEN_KEY

MAX_TEXT = 65535  # bytes a Milvus VARCHAR holds
MAX_ID = 512
ANALYZER = {"tokenizer": "whitespace"}
SPARSE_ALGO = "DAAT_MAXSCORE"
DROP_RATIO = 0.0
IP, COSINE = "IP", "COSINE"
DENSE_METRIC = IP  # new collections' (COSINE: the layout before unit vectors, still read and written)
_SPACE = re.compile(r"\s")


def term_text(counts: Mapping[str, int]) -> str:
    """Term counts as the space-separated text Milvus's analyzer splits back into them."""
    return " ".join(t for t, c in counts.items() for _ in range(int(c)))


def unit_vector(vec: Any) -> Tuple[np.ndarray, float]:
    """``vec`` scaled to length 1 (a zero vector stays zero) and its length."""
    v = np.asarray(vec, dtype=np.float32)
    n = float(np.linalg.norm(v))
    return (v / n if n > 0 else v), n


def collection_schema(client: Any, dim: int, ann: Optional[ANN], k1: float, b: float) -> Tuple[Any, Any]:
    """The schema and index parameters of a new collection (``DENSE_METRIC``; BM25 ``k1``, ``b``)."""
    from pymilvus import DataType, Function, FunctionType

    s = client.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=MAX_ID)
    s.add_field("embedding", DataType.FLOAT_VECTOR, dim=dim)
    if DENSE_METRIC == IP:
        s.add_field("norm", DataType.FLOAT)
    s.add_field("terms", DataType.VARCHAR, max_length=MAX_TEXT, enable_analyzer=True, analyzer_params=dict(ANALYZER))
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_field("n_tokens", DataType.INT64)
    s.add_field("doc_id", DataType.VARCHAR, max_length=MAX_ID)
    s.add_field("metadata", DataType.JSON)
    s.add_function(
        Function(
            name="bm25", function_type=FunctionType.BM25, input_field_names=["terms"], output_field_names=["sparse"]
        )
    )
    ip = client.prepare_index_params()
    kind, params = dense_index(ann)
    ip.add_index(field_name="embedding", index_type=kind, metric_type=DENSE_METRIC, params=params)
    ip.add_index(
        field_name="sparse",
        index_type="SPARSE_INVERTED_INDEX",
        metric_type="BM25",
        params={"bm25_k1": k1, "bm25_b": b, "inverted_index_algo": SPARSE_ALGO},
    )
    return s, ip


def dense_index(ann: Optional[ANN]) -> Tuple[str, Dict[str, int]]:
    """The dense field's Milvus index type and build parameters for ``ann`` (None: ``FLAT``, exact)."""
    if isinstance(ann, HNSW):
        return "HNSW", {"M": ann.m, "efConstruction": ann.ef_construction}
    if isinstance(ann, IVF):
        return "IVF_FLAT", {"nlist": ann.nlist}
    return "FLAT", {}


def dense_search_params(ann: Optional[ANN], k: int) -> Dict[str, int]:
    """A dense search's parameters: HNSW's ``ef`` (never below ``k``: HNSW returns at most ``ef``
    rows), IVF's ``nprobe``; none for exact search."""
    if isinstance(ann, HNSW):
        return {"ef": max(int(ann.ef_search), int(k))}
    if isinstance(ann, IVF):
        return {"nprobe": int(ann.nprobe)}
    return {}


def vector_fields(embedding: Any, metric: str) -> Dict[str, Any]:
    """A row's vector fields: the unit vector and its length, or (``COSINE``) the embedding as given."""
    if metric == COSINE:
        return {"embedding": np.asarray(embedding, dtype=np.float32)}
    unit, norm = unit_vector(embedding)
    return {"embedding": unit, "norm": norm}


def unit_row(u: BaseNode, embedding: Any, metric: str) -> Tuple[Dict[str, Any], int, int]:
    """Unit ``u``'s row (a vector-store row: metadata set) and the granularities ``lo..hi`` it serves."""
    meta = dict(u.metadata)
    nid = str(meta.pop(NODE_ID_KEY, u.node_id))
    counts: Mapping[str, int] = meta.pop(TERMS_KEY, {}) or {}
    meta.pop(TERMS_LEN_KEY, None)
    bad = [t for t in counts if not t or _SPACE.search(t)]
    if bad:
        raise ValueError(
            f"unit {nid!r}: BM25 tokens {bad[:3]} are empty or hold white space, which Milvus's "
            "whitespace tokenizer would split; use a token_pattern without spaces."
        )
    terms = term_text(counts)
    if len(terms.encode("utf-8")) > MAX_TEXT:
        raise ValueError(
            f"unit {nid!r}: its BM25 tokens take more than {MAX_TEXT} bytes, a Milvus VARCHAR's "
            "limit; split its document into shorter ones."
        )
    lo = int(meta.get("umg_granularity", 0))
    row = {
        "pk": nid,
        **vector_fields(embedding, metric),
        "terms": terms,
        "n_tokens": int(meta.get("umg_n_tokens", 0) or 0),
        "doc_id": str(u.ref_doc_id or ""),
        "metadata": meta,
    }
    return row, lo, int(meta.get("umg_granularity_max", lo))


__all__ = [
    "ANALYZER",
    "COSINE",
    "DENSE_METRIC",
    "DROP_RATIO",
    "IP",
    "SPARSE_ALGO",
    "collection_schema",
    "dense_index",
    "dense_search_params",
    "term_text",
    "unit_row",
    "unit_vector",
    "vector_fields",
]
