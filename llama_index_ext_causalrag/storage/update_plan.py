"""Shared pieces of incremental updates (``insert``, ``delete_ref_doc``, ``refresh_ref_docs``).

Every index keeps its units grouped by source document, in the order the documents were
given. An update is a :func:`merge_plan`: documents replaced keep their slot, deleted ones
leave, new ones are appended. Built from ``A`` then given ``B``, the plan lists the units
in the order ``from_documents(A + B)`` would, so position-dependent tie-breaks (BM25
``top_k_indices``, RRF first-seen order) give the same results as a rebuild.

Semantics, as in LlamaIndex's ``BaseIndex``:

* ``delete_ref_doc`` of an unknown id logs a warning and changes nothing;
* ``insert`` of a document whose id is indexed is a refresh: unchanged hash, nothing
  happens; changed hash, its units are replaced in place;
* ``refresh_ref_docs`` returns one bool per document, True if it was (re-)indexed.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.schema import BaseNode, Document

from llama_index_ext_causalrag.storage.persistence import embed_model_name, stable_model_name
from llama_index_ext_causalrag.validation import caller

logger = logging.getLogger(__name__)

# one row of a plan: ("old", position in the old units) or ("new", position in the new units)
Source = Tuple[str, int]


def doc_key(node: BaseNode) -> str:
    """The document a unit belongs to: its ``ref_doc_id``, else its own id."""
    return node.ref_doc_id or node.node_id


def source_hash(node: BaseNode) -> Optional[str]:
    """The hash of the source document recorded when the unit was parsed (None if unknown)."""
    src = node.source_node
    return src.hash if src is not None else None


def group_by_doc(nodes: Sequence[BaseNode]) -> Dict[str, List[int]]:
    """document key -> positions of its units, documents in first-appearance order."""
    out: Dict[str, List[int]] = {}
    for i, n in enumerate(nodes):
        out.setdefault(doc_key(n), []).append(i)
    return out


def merge_plan(old: Sequence[BaseNode], new: Sequence[BaseNode], drop: Iterable[str] = ()) -> List[Source]:
    """Rows of the updated index: old documents in order (replaced by their new units when
    ``new`` has the same document, left out when in ``drop``), then documents only in ``new``."""
    old_g, new_g = group_by_doc(old), group_by_doc(new)
    drop_set: Set[str] = set(drop)
    plan: List[Source] = []
    for d, rows in old_g.items():
        if d in new_g:
            plan.extend(("new", j) for j in new_g[d])
        elif d not in drop_set:
            plan.extend(("old", i) for i in rows)
    for d, rows in new_g.items():
        if d not in old_g:
            plan.extend(("new", j) for j in rows)
    return plan


def in_plan_order(plan: Sequence[Source], old: Sequence, new: Sequence) -> list:
    """The plan's items taken from ``old`` and ``new``."""
    return [old[i] if side == "old" else new[i] for side, i in plan]


def known_docs(nodes: Sequence[BaseNode]) -> Dict[str, Optional[str]]:
    """document key -> recorded source hash of its first unit."""
    out: Dict[str, Optional[str]] = {}
    for n in nodes:
        out.setdefault(doc_key(n), source_hash(n))
    return out


def changed_documents(
    documents: Sequence[Document], known: Dict[str, Optional[str]]
) -> Tuple[List[Document], List[bool]]:
    """The documents to (re-)index and one flag per input: new, or indexed with another hash.
    A repeated id keeps its last occurrence."""
    last = {d.doc_id: i for i, d in enumerate(documents)}
    flags = [last[d.doc_id] == i and known.get(d.doc_id, "\0missing") != d.hash for i, d in enumerate(documents)]
    return [d for d, f in zip(documents, flags) if f], flags


def unknown_ref_doc(ref_doc_id: str) -> None:
    """LlamaIndex's behaviour for an id that is not indexed: a warning (naming the public call,
    :func:`caller`), nothing deleted."""
    logger.warning("%s: ref_doc_id %r not found, nothing deleted.", caller("delete_ref_doc"), ref_doc_id)


def cannot_empty(ref_doc_id: str) -> ValueError:
    return ValueError(
        f"{caller('delete_ref_doc')}: deleting {ref_doc_id!r} would leave the index without units; an index needs at "
        "least one document, so build a new one instead."
    )


def embed_by_document(
    embed_model: Any, texts: Sequence[str], keys: Sequence[str], show_progress: bool = False
) -> np.ndarray:
    """Embeddings of ``texts``, shape ``(len(texts), dim)``, one document (``keys``) at a time.

    Batched transformer inference pads a batch to its longest text, which moves float32
    results by about 1e-7; with batches that never mix documents a unit's embedding does not
    depend on the rest of the corpus, so an insert embeds it exactly as a rebuild does.
    """
    groups: Dict[str, List[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    items = list(groups.values())
    if show_progress:
        from tqdm.auto import tqdm

        items = tqdm(items, desc="Embedding documents")
    rows: List[Optional[np.ndarray]] = [None] * len(texts)
    for idx in items:
        vecs = embed_model.get_text_embedding_batch([texts[i] for i in idx], show_progress=False)
        for i, v in zip(idx, vecs):
            rows[i] = np.asarray(v, dtype=np.float32)
    if not rows:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack(rows)  # type: ignore[arg-type]


def check_insert_embedder(built_with: Optional[str], embed_model: object) -> None:
    """Raise (naming the public call, :func:`caller`) if new units would be embedded by another
    model than the stored ones."""
    owner = caller("insert")
    name = embed_model_name(embed_model)
    built = stable_model_name(built_with)
    if built is not None and name != built:
        raise ValueError(
            f"{owner}: the index holds embeddings of {built!r} but would embed the inserted units with {name!r}; "
            f"load it with embed_model= the {built!r} model, or rebuild the index with {name!r}."
        )


__all__ = [
    "cannot_empty",
    "changed_documents",
    "check_insert_embedder",
    "doc_key",
    "embed_by_document",
    "group_by_doc",
    "known_docs",
    "merge_plan",
    "in_plan_order",
    "source_hash",
    "unknown_ref_doc",
]
