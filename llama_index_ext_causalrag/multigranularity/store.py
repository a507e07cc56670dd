"""MultiGranularityIndex on LlamaIndex's storage interfaces: a vector store, a docstore and a kvstore.

One vector store holds every unit of every granularity with its embedding; the granularity is
node metadata (``umg_granularity``) and each dense expert is a :class:`VectorStoreExpert`
filtered on it. The docstore holds the units, so parent promotion fetches parents from it.
The sparse experts are BM25 in memory (bm25s; ``lexical="bm25"``, the default) or, with
``lexical="store"``, :class:`VectorStoreTextExpert` s: the vector store's full-text search,
filtered the same way (no BM25 is built or stored). The BM25 indexes, the unit order and the
build parameters (``lexical`` among them) are one persisted folder, kept in a ``BaseKVStore`` (:mod:`llama_index_ext_causalrag.storage.kvstate`) when
the index is built with ``kvstore=``, or written by ``persist(dir)``. :func:`open_from_store`
reopens the index from the stores (and the folder) without embedding anything.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Type

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts.store import VectorStoreExpert
from llama_index_ext_causalrag.storage.stores import (
    check_holds,
    check_vector_store,
    describe_store,
)
from llama_index_ext_causalrag.experts.store_text import VectorStoreTextExpert, check_text_search
from llama_index_ext_causalrag.storage.kvstate import KVState, open_index_state
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.update import MGState
from llama_index_ext_causalrag.multigranularity.windows import (
    GRANULARITIES_KEY,
    GRANULARITY_KEY,
    GRANULARITY_MAX_KEY,
    units_by_granularity,
)
from llama_index_ext_causalrag.storage.persistence import (
    PersistedIndex,
    check_embedder,
    embedder_params,
    persist_to,
)
from llama_index_ext_causalrag.storage.row_ids import LEGACY, RowIds

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.index import MultiGranularityIndex

logger = logging.getLogger(__name__)

STORE_CLASS = "MultiGranularityIndex@store"
UNIT_IDS_FILE = "unit_ids.json"
REOPEN = "MultiGranularityIndex.from_vector_store"
HINT_DIR = "index.persist(dir) on an index built with storage_context="
HINT_KV = "MultiGranularityIndex.from_documents(docs, storage_context=..., kvstore=...)"
LEXICAL = ("bm25", "store")


def check_lexical(lexical: str, vector_store: BasePydanticVectorStore, owner: str) -> None:
    """``lexical`` is one of :data:`LEXICAL`, and ``"store"`` only over a store with full-text search."""
    if lexical not in LEXICAL:
        raise ValueError(
            f"{owner}: lexical must be one of {LEXICAL}, got {lexical!r}; 'bm25' (bm25s beside the store) is the default."
        )
    if lexical == "store":
        check_text_search(vector_store, owner)


def granularity_filter(g: int, ranged: bool = True) -> MetadataFilters:
    """The vector store's units of granularity ``g``: ``umg_granularity <= g <= umg_granularity_max``.

    A unit may belong to several granularities (the whole-document window of a document shorter
    than the coarser windows); they are the consecutive granularities from its finest to its
    coarsest. ``ranged=False``: ``umg_granularity == g``, for units written without
    ``umg_granularity_max``, which then miss their coarser lists."""
    if not ranged:
        return MetadataFilters(filters=[MetadataFilter(key=GRANULARITY_KEY, value=int(g))])
    return MetadataFilters(filters=[
        MetadataFilter(key=GRANULARITY_KEY, value=int(g), operator=FilterOperator.LTE),
        MetadataFilter(key=GRANULARITY_MAX_KEY, value=int(g), operator=FilterOperator.GTE),
    ])


def dense_experts(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    embed_model: BaseEmbedding,
    units: Sequence[BaseNode],
    row_ids: RowIds = LEGACY,
) -> Dict[int, VectorStoreExpert]:
    """One :class:`VectorStoreExpert` per granularity of ``units``, each filtered on it (rows keyed by ``row_ids``)."""
    by_g = units_by_granularity(units)
    ranged = all(GRANULARITY_MAX_KEY in u.metadata for u in units)
    if ranged:
        for u in units:
            m = u.metadata
            run = [g for g in by_g if int(m[GRANULARITY_KEY]) <= g <= int(m[GRANULARITY_MAX_KEY])]
            if run != [int(g) for g in m.get(GRANULARITIES_KEY, [m[GRANULARITY_KEY]])]:
                raise ValueError(
                    f"unit {u.node_id!r} belongs to granularities {m.get(GRANULARITIES_KEY)!r}, not the consecutive "
                    f"granularities {run!r} from {GRANULARITY_KEY!r} to {GRANULARITY_MAX_KEY!r}: a vector store "
                    "cannot select its lists; use the units of MultiGranularityNodeParser."
                )
    elif any(len(u.metadata.get(GRANULARITIES_KEY, ())) > 1 for u in units):
        logger.warning(
            "MultiGranularityIndex: units without %r metadata (written by an earlier version) that belong to "
            "several granularities are found in their finest granularity's dense list only; rebuild the index "
            "into new stores to include them in the coarser lists.", GRANULARITY_MAX_KEY,
        )
    ids = row_ids.with_nodes([u.node_id for u in units])
    return {
        int(g): VectorStoreExpert(vector_store, embed_model, filters=granularity_filter(g, ranged),
                                  docstore=docstore, name=f"dense@{g}", row_ids=ids)
        for g in by_g
    }


def text_experts(
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    units: Sequence[BaseNode],
    row_ids: RowIds = LEGACY,
) -> Dict[int, VectorStoreTextExpert]:
    """One :class:`VectorStoreTextExpert` per granularity of ``units``, filtered as the dense ones."""
    ranged = all(GRANULARITY_MAX_KEY in u.metadata for u in units)
    ids = row_ids.with_nodes([u.node_id for u in units])
    return {
        int(g): VectorStoreTextExpert(vector_store, filters=granularity_filter(g, ranged), docstore=docstore,
                                      name=f"sparse@{g}", row_ids=ids)
        for g in units_by_granularity(units)
    }


def build_in_store(
    cls: Type["MultiGranularityIndex"],
    documents: Sequence[Document],
    storage_context: Any,
    embed_model: Optional[BaseEmbedding] = None,
    kvstore: Optional[BaseKVStore] = None,
    namespace: Optional[str] = None,
    lexical: str = "bm25",
    *,
    granularities: Sequence[int],
    parent_granularity: Optional[int],
    embedding_mode: str,
    parser: Any,
    show_progress: bool,
    preset: Any,
    **bm25_params: Any,
) -> "MultiGranularityIndex":
    """``MultiGranularityIndex.from_documents(docs, storage_context=..., kvstore=...)``: check
    the stores are reachable, empty and of the embedder's dimension (and, for ``lexical="store"``,
    have full-text search), build, then write units to the docstore, units + embeddings to the
    vector store and the rest to ``kvstore`` (all undone if a write fails)."""
    from llama_index_ext_causalrag.multigranularity.index import parse_and_embed
    from llama_index_ext_causalrag.storage.sync import open_for_build, write_new_index

    owner = "MultiGranularityIndex.from_documents"
    vector_store, docstore, model, dim, kv = open_for_build(storage_context, embed_model, kvstore, namespace,
                                                           owner, REOPEN)
    check_lexical(lexical, vector_store, owner)
    units, emb, model, parser, tokens = parse_and_embed(
        documents, granularities, parent_granularity, model, embedding_mode, parser, show_progress, preset,
        bm25_params, with_tokens=lexical == "bm25",
    )
    index = _make(cls, units, vector_store, docstore, model, parser.parent_granularity, embedding_mode,
                  bm25_params, None, preset, dim, tokens=tokens, kv=kv, lexical=lexical,
                  row_ids=RowIds.for_new_index())
    index._parser = parser
    write_new_index(vector_store, docstore, units, units, emb, owner, lambda: save_state(index, index._state),
                    index._store["row_ids"])
    return index


def _make(
    cls: Type["MultiGranularityIndex"],
    units: List[BaseNode],
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    model: BaseEmbedding,
    parent_granularity: Optional[int],
    embedding_mode: str,
    bm25_params: Dict[str, Any],
    bm25: Dict[int, Any],
    preset: Any,
    dim: int,
    tokens: Optional[List[List[str]]] = None,
    kv: Optional[KVState] = None,
    lexical: str = "bm25",
    row_ids: RowIds = LEGACY,
) -> "MultiGranularityIndex":
    dense = dense_experts(vector_store, docstore, model, units, row_ids)
    sparse = text_experts(vector_store, docstore, units, row_ids) if lexical == "store" else None
    index = cls(units, np.zeros((len(units), 0), dtype=np.float32), model, parent_granularity, embedding_mode,
                bm25_params, _bm25=bm25, preset=preset, _tokens=tokens, _dense=dense, _sparse=sparse)
    index._state.docstore = docstore
    index._store = {"vector_store": vector_store, "dim": dim, "kv": kv, "lexical": lexical, "row_ids": row_ids}
    return index


def fusion_over_store(index: "MultiGranularityIndex", experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
    """The fusion retriever, with each store expert asked for ``candidates_per_list`` units (an
    in-memory dense expert is scored in full and cut to that many)."""
    k = EntropyFusionRetriever(experts, **kwargs).candidates_per_list
    store_experts = (VectorStoreExpert, VectorStoreTextExpert)
    experts = {e: {g: (r.with_top_k(k) if isinstance(r, store_experts) else r) for g, r in by_g.items()}
               for e, by_g in experts.items()}
    return EntropyFusionRetriever(experts, **kwargs)


def write_folder(index: "MultiGranularityIndex", st: MGState, persist_dir: str | Path) -> None:
    """``bm25/g{g}/`` (``lexical="bm25"`` only), ``unit_ids.json`` and ``params.json`` of state
    ``st`` (the embeddings are in the vector store, the units in the docstore)."""
    lexical = index._store["lexical"]
    with persist_to(persist_dir, STORE_CLASS) as w:
        w.write_json(UNIT_IDS_FILE, [u.node_id for u in st.units])
        for g, expert in st.sparse.items() if lexical == "bm25" else ():
            expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
        w.rows["units"] = len(st.units)
        w.params.update(
            lexical=lexical,
            granularities=list(st.by_g),
            parent_granularity=index.parent_granularity,
            embedding_mode=index.embedding_mode,
            bm25_params=index.bm25_params,
            preset=index.config.model_dump() if index.preset == "custom" else index.preset,
            vector_store=describe_store(index._store["vector_store"]),
            **embedder_params(index._embed_model, index._store["dim"]),
        )
        w.params.update(index._store["row_ids"].params())
        if index._built_with is not None:  # reopened with another (same-dimension) query model
            w.params["embed_model"] = index._built_with


def persist_store_index(index: "MultiGranularityIndex", persist_dir: str | Path) -> None:
    write_folder(index, index._state, persist_dir)


def save_state(index: "MultiGranularityIndex", st: MGState) -> None:
    """Write state ``st`` to the index's kvstore, if it has one (the folder, value by value)."""
    kv = index._store["kv"] if index._store else None
    if kv is not None:
        with tempfile.TemporaryDirectory(prefix="causalrag-kv-") as tmp:
            write_folder(index, st, Path(tmp) / "ix")
            kv.save(Path(tmp) / "ix", STORE_CLASS, index._store["vector_store"])


def open_from_store(
    cls: Type["MultiGranularityIndex"],
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    persist_dir: Optional[str | Path] = None,
    embed_model: Optional[BaseEmbedding] = None,
    kvstore: Optional[BaseKVStore] = None,
    namespace: Optional[str] = None,
    lexical: Optional[str] = None,
) -> "MultiGranularityIndex":
    """Reopen an index built with ``from_documents(docs, storage_context=...)``: units from
    ``docstore``, embeddings stay in ``vector_store``, the rest from ``kvstore`` (the one it was
    built with) or from ``persist_dir`` (written by ``index.persist``); ``embed_model`` only
    embeds queries; ``lexical`` (by default the build's) as in :func:`build_in_store`."""
    if lexical is not None and lexical not in LEXICAL:
        raise ValueError(f"{REOPEN}: lexical must be one of {LEXICAL} or None (the build's), got {lexical!r}.")
    return open_index_state(
        REOPEN, persist_dir, kvstore, namespace, vector_store, STORE_CLASS, HINT_DIR, HINT_KV,
        lambda ix, where, kv: _open(cls, ix, where, vector_store, docstore, embed_model, kv, lexical),
    )


def _open(
    cls: Type["MultiGranularityIndex"],
    ix: PersistedIndex,
    where: str,
    vector_store: BasePydanticVectorStore,
    docstore: BaseDocumentStore,
    embed_model: Optional[BaseEmbedding],
    kv: Optional[KVState],
    lexical: Optional[str] = None,
) -> "MultiGranularityIndex":
    import bm25s

    from llama_index_ext_causalrag.multigranularity.index import _load_preset

    owner = REOPEN
    p = ix.params
    built = p.get("lexical", "bm25")  # an index written before the option: bm25s
    lexical = lexical or built
    if lexical == "bm25" and built != "bm25":
        raise ValueError(
            f"{owner}: the index in {where} was built with lexical={built!r} and stores no BM25; reopen it with "
            "lexical='store' (or None), or rebuild with lexical='bm25'."
        )
    model = resolve_embed_model(embed_model)
    check_embedder(p, model, where, "MultiGranularityIndex")  # type: ignore[arg-type]
    dim = int(p["embed_dim"])
    check_vector_store(vector_store, dim, owner, built_in=str(where))
    check_lexical(lexical, vector_store, owner)
    ids = ix.json(UNIT_IDS_FILE)
    ix.check_rows("units", len(ids))
    row_ids = RowIds.from_params(p)
    check_holds(vector_store, dim, ids, owner, row_ids)
    try:
        units = docstore.get_nodes(ids)
    except ValueError as e:
        raise ValueError(f"{owner}: the docstore lacks units of the index in {where} ({e}); pass its docstore.") from e
    bm25 = {g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
            for g in p["granularities"]} if lexical == "bm25" else None
    index = _make(cls, list(units), vector_store, docstore, model, p["parent_granularity"], p["embedding_mode"],
                  p["bm25_params"], bm25, _load_preset(p.get("preset")), dim, kv=kv, lexical=lexical,
                  row_ids=row_ids)
    index._built_with = p.get("embed_model")
    return index


def apply_in_store(
    index: "MultiGranularityIndex",
    new_units: List[BaseNode],
    new_emb: Optional[np.ndarray],
    new_tokens: List[List[str]],
    drop: Sequence[str] = (),
    persist_dir: Optional[str | Path] = None,
) -> None:
    """An update of a store-backed index: the units of the documents it replaces or drops leave
    the vector store and docstore, the new units (with ``new_emb``) enter them, BM25 is rebuilt
    from the cached tokens and written to the kvstore (and ``persist_dir``); on a failure the
    stores are put back and the index stays as it was."""
    from llama_index_ext_causalrag.storage import updates as up
    from llama_index_ext_causalrag.storage.sync import replace_in_stores

    name = type(index).__name__
    st = index._state
    plan = up.merge_plan(st.units, new_units, drop)
    if not plan:
        raise up.cannot_empty(name, ", ".join(drop))
    dim = index._store["dim"]  # type: ignore[index]
    if new_units and new_emb is not None and new_emb.shape[1] != dim:
        raise ValueError(
            f"{name} holds {dim}-dimensional embeddings, the new units have {new_emb.shape[1]}; embed them "
            "with the index's model."
        )
    vector_store, docstore = index._store["vector_store"], st.docstore  # type: ignore[index]
    row_ids = index._store["row_ids"]  # type: ignore[index]
    units = up.pick(plan, st.units, new_units)
    by_store = index._store["lexical"] == "store"  # type: ignore[index]
    tokens = None if by_store else up.pick(plan, index._tokens_of_state(), new_tokens)
    new = MGState(units, np.zeros((len(units), 0), dtype=np.float32), tokens, index._embed_model, index.bm25_params,
                  dense=dense_experts(vector_store, docstore, index._embed_model, units, row_ids),
                  sparse=text_experts(vector_store, docstore, units, row_ids) if by_store else None)
    new.docstore = docstore
    affected = {up.doc_key(u) for u in new_units} | set(drop)
    old = [u for u in st.units if up.doc_key(u) in affected]

    def write_state() -> None:
        if persist_dir is not None:
            write_folder(index, new, persist_dir)
        save_state(index, new)  # last: one put of the head makes the new state visible

    replace_in_stores(vector_store, docstore, f"{name} update", old, new_units, new_emb, old, new_units, write_state,  # type: ignore[arg-type]
                      row_ids)
    index._state = new  # one assignment: queries see the old or the new state
