"""MultiGranularityIndex: units, their embeddings and one BM25 index per granularity.

Build cost (issue item 5): ``embedding_mode`` chooses what is actually embedded.

* ``"full"``: every unit at every granularity (about 8x the text of a flat index, and
  windows of 16/32 sentences are truncated by a 256 word-piece model anyway);
* ``"pooled"``: only the finest windows are embedded; a coarser unit is the normalised mean
  of the finest windows inside it (``entropy.pool_rows``); the default of :meth:`from_nodes`;
* ``"sentences"`` (the default of :meth:`from_documents`): every sentence once; every unit is
  the normalised mean of its sentences weighted by their word counts (a sentence-transformer
  mean-pools over tokens, so a long sentence weighs more in the embedding of a window). It
  needs the documents, so only :meth:`from_documents`; on HolisQA biology it embeds 1.4x the
  text of flat chunks against 1.95x for ``"pooled"``, at the same context recall.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.experts._nodes_io import load_nodes, save_nodes
from llama_index_ext_causalrag.multigranularity.entropy import pool_rows
from llama_index_ext_causalrag.storage.unit_docstore import UnitDocumentStore
from llama_index_ext_causalrag.multigranularity.presets import DEFAULT_PRESET, UMGConfig, get_preset
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.sentence_tokens import sentence_tokens
from llama_index_ext_causalrag.multigranularity.update import MGState, MultiGranularityUpdates
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.multigranularity.windows import (
    DEFAULT_GRANULARITIES,
    GRANULARITY_KEY,
    SENTENCE_SPAN_KEY,
    MultiGranularityNodeParser,
    require_units,
)
from llama_index_ext_causalrag.storage.persistence import (
    array_dim,
    check_embedder,
    embedder_params,
    open_persisted,
    persist_to,
)
from llama_index_ext_causalrag.storage.updates import embed_by_document
from llama_index_ext_causalrag.validation import check_documents

logger = logging.getLogger(__name__)

EMBEDDING_MODES = ("pooled", "full", "sentences")
EXPERT_NAMES = ("dense", "sparse")


def _embed(embed_model: BaseEmbedding, texts: List[str], show_progress: bool) -> np.ndarray:
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.asarray(embed_model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)


def _parent_of_units(units: Sequence[BaseNode]) -> Optional[int]:
    """The granularity the units' PARENT relationships point to (None: no parents)."""
    by_id = {u.node_id: u for u in units}
    for u in units:
        rel = u.parent_node
        if rel is not None and rel.node_id in by_id:
            return int(by_id[rel.node_id].metadata[GRANULARITY_KEY])
    return None


def _doc_key(u: BaseNode) -> str:
    return u.ref_doc_id or ""


def pooled_unit_embeddings(
    units: Sequence[BaseNode], embed_model: BaseEmbedding, show_progress: bool = False
) -> np.ndarray:
    """Embed the finest units; pool each coarser unit from the finest units inside its span."""
    finest = min(int(u.metadata[GRANULARITY_KEY]) for u in units)
    base = [i for i, u in enumerate(units) if int(u.metadata[GRANULARITY_KEY]) == finest]
    X = embed_by_document(embed_model, [units[i].get_content(metadata_mode=MetadataMode.EMBED) for i in base],
                          [_doc_key(units[i]) for i in base], show_progress)
    row = {i: r for r, i in enumerate(base)}
    by_doc: Dict[str, List[Tuple[int, int, int]]] = {}
    for i in base:
        s0, s1 = units[i].metadata[SENTENCE_SPAN_KEY]
        by_doc.setdefault(_doc_key(units[i]), []).append((int(s0), int(s1), row[i]))
    groups: List[List[int]] = []
    for i, u in enumerate(units):
        if i in row:
            groups.append([row[i]])
            continue
        s0, s1 = u.metadata[SENTENCE_SPAN_KEY]
        inside = [r for a, b, r in by_doc.get(_doc_key(u), []) if s0 <= a and b <= s1]
        if not inside:
            raise ValueError(
                f"unit {u.node_id!r} contains no finest window; build units with "
                "MultiGranularityNodeParser or use embedding_mode='full'."
            )
        groups.append(inside)
    return pool_rows(X, groups)


def _unit_embeddings(
    units: Sequence[BaseNode], model: BaseEmbedding, embedding_mode: str, show_progress: bool
) -> np.ndarray:
    if embedding_mode == "full":
        texts = [u.get_content(metadata_mode=MetadataMode.EMBED) for u in units]
        X = embed_by_document(model, texts, [_doc_key(u) for u in units], show_progress)
        return pool_rows(X, [[i] for i in range(len(texts))])
    return pooled_unit_embeddings(units, model, show_progress)


def sentence_unit_embeddings(
    units: Sequence[BaseNode],
    documents: Sequence[Document],
    parser: MultiGranularityNodeParser,
    embed_model: BaseEmbedding,
    show_progress: bool = False,
) -> np.ndarray:
    """Embed each sentence once; a unit is the normalised mean of its sentences, weighted by
    their word counts."""
    texts: List[str] = []
    keys: List[str] = []
    first: Dict[str, int] = {}
    for d in documents:
        text = d.get_content(metadata_mode=MetadataMode.NONE)
        first[d.node_id] = len(texts)
        spans = parser.split_sentences(text)
        texts.extend(text[a:b] for a, b in spans)
        keys.extend([d.node_id] * len(spans))
    X = embed_by_document(embed_model, texts, keys, show_progress)
    groups = []
    for u in units:
        s0, s1 = u.metadata[SENTENCE_SPAN_KEY]
        off = first[_doc_key(u)]
        groups.append(list(range(off + int(s0), off + int(s1))))
    weights = np.array([max(1, len(t.split())) for t in texts], dtype=np.float64)
    return pool_rows(X, groups, weights)


def parse_and_embed(
    documents: Sequence[Document],
    granularities: Sequence[int],
    parent_granularity: Optional[int],
    embed_model: Optional[BaseEmbedding],
    embedding_mode: str,
    parser: Optional[MultiGranularityNodeParser],
    show_progress: bool,
    preset: "str | UMGConfig",
    bm25_params: Dict[str, Any],
    with_tokens: bool = True,
) -> Tuple[List[BaseNode], np.ndarray, BaseEmbedding, MultiGranularityNodeParser, Optional[List[List[str]]]]:
    """What :meth:`MultiGranularityIndex.from_documents` indexes: units, their embeddings, the
    embed model, the parser and (``with_tokens``) each unit's BM25 tokens."""
    documents = check_documents(documents, "MultiGranularityIndex.from_documents", invisible="skip")
    if parent_granularity is None:
        parent_granularity = get_preset(preset).parent_for(granularities)
    parser = parser or MultiGranularityNodeParser(
        granularities=tuple(granularities), parent_granularity=parent_granularity
    )
    units = parser.get_nodes_from_documents(documents, show_progress=show_progress)
    if embedding_mode not in EMBEDDING_MODES:
        raise ValueError(f"embedding_mode must be one of {EMBEDDING_MODES}, got {embedding_mode!r}.")
    if not units:
        raise ValueError("no units: every document is empty; pass documents with text.")
    model = resolve_embed_model(embed_model)
    if embedding_mode == "sentences":
        emb = sentence_unit_embeddings(units, documents, parser, model, show_progress)
    else:
        emb = _unit_embeddings(units, model, embedding_mode, show_progress)
    tokens = sentence_tokens(units, documents, parser._sentences, bm25_params) if with_tokens else None
    return units, emb, model, parser, tokens


def _load_preset(value: Any) -> "str | UMGConfig":
    return UMGConfig(**value) if isinstance(value, dict) else str(value)


class MultiGranularityIndex(MultiGranularityUpdates):
    """The UMG index: units of :class:`MultiGranularityNodeParser` with one dense and one
    sparse expert per granularity.

    ``as_retriever(budget_tokens=B)`` is the measured UMGP configuration (the ``preset``, by
    default ``"umgp"``): entropy fusion, then parent promotion fitted to ``B`` tokens, as one
    retriever. ``as_fusion_retriever`` gives the bare :class:`EntropyFusionRetriever` and
    ``as_postprocessor`` the matching :class:`ParentPromotionPostprocessor`.

    ``insert`` / ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` update it
    without a rebuild, with the same results as one (``docs/updating.md``).
    """

    def __init__(
        self,
        units: Sequence[BaseNode],
        embeddings: np.ndarray,
        embed_model: Optional[BaseEmbedding] = None,
        parent_granularity: Optional[int] = None,
        embedding_mode: str = "pooled",
        bm25_params: Optional[Dict[str, Any]] = None,
        _bm25: Optional[Dict[int, Any]] = None,
        preset: "str | UMGConfig" = DEFAULT_PRESET,
        _tokens: Optional[List[List[str]]] = None,
        _dense: Optional[Dict[int, BaseRetriever]] = None,
        _sparse: Optional[Dict[int, BaseRetriever]] = None,
    ) -> None:
        units = list(units)
        if not units:
            raise ValueError(
                "MultiGranularityIndex got no units (all documents empty?); pass documents with text."
            )
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(units):
            raise ValueError(
                f"embeddings must have shape (n_units={len(units)}, dim), got {emb.shape}."
            )
        if _tokens is not None and len(_tokens) != len(units):
            raise ValueError(f"got {len(_tokens)} token lists for {len(units)} units; pass one per unit.")
        self._embed_model = resolve_embed_model(embed_model)
        self.config = get_preset(preset)
        self.preset = preset if isinstance(preset, str) else "custom"
        self.parent_granularity = parent_granularity
        self.embedding_mode = embedding_mode
        self.bm25_params = dict(bm25_params or {})
        self._built_with: Optional[str] = None  # the stored embeddings' model, when loaded
        self._parser: Optional[MultiGranularityNodeParser] = None  # the one from_documents used
        self._state = MGState(units, emb, _tokens, self._embed_model, self.bm25_params, _bm25, dense=_dense,
                              sparse=_sparse)
        self._store: Optional[Dict[str, Any]] = None  # set by multigranularity.store

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        granularities: Sequence[int] = DEFAULT_GRANULARITIES,
        parent_granularity: Optional[int] = None,
        embed_model: Optional[BaseEmbedding] = None,
        embedding_mode: str = "sentences",
        parser: Optional[MultiGranularityNodeParser] = None,
        show_progress: bool = False,
        preset: "str | UMGConfig" = DEFAULT_PRESET,
        storage_context: Optional[Any] = None,
        kvstore: Optional[Any] = None,
        namespace: Optional[str] = None,
        lexical: str = "bm25",
        **bm25_params: Any,
    ) -> "MultiGranularityIndex":
        """Split ``documents`` into sentence windows, embed them, index them with BM25.

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        units and embeddings go to its vector store, units to its docstore, and with ``kvstore``
        (a ``BaseKVStore``; collection ``namespace``, by default the vector store's table name)
        BM25, unit order and parameters go there (docs/stores.md). ``lexical`` picks the sparse
        expert of an index built into stores: ``"bm25"`` (bm25s in memory, persisted beside the
        store; the default) or ``"store"`` (the vector store's full-text search, e.g.
        ``PGVectorStore(hybrid_search=True)``; no BM25 is built or stored).

        ``preset`` names the retrieval configuration ``as_retriever`` gives (``"umgp"``, the
        measured default; ``"paper"``; ``"umg"``) and, unless ``parent_granularity`` is given,
        the window size promotion goes to (``"umgp"``: the coarsest granularity).
        """
        if storage_context is not None:
            from llama_index_ext_causalrag.multigranularity.store import build_in_store

            return build_in_store(cls, documents, storage_context, embed_model, kvstore, namespace, lexical,
                                  granularities=granularities, parent_granularity=parent_granularity,
                                  embedding_mode=embedding_mode, parser=parser, show_progress=show_progress,
                                  preset=preset, **bm25_params)
        if kvstore is not None or namespace is not None:
            raise ValueError("kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too.")
        if lexical != "bm25":
            raise ValueError(
                f"lexical={lexical!r} needs an index built into stores; pass storage_context= with a vector store "
                "that has full-text search, or leave lexical='bm25' (the in-memory index always uses bm25s)."
            )
        units, emb, model, parser, tokens = parse_and_embed(
            documents, granularities, parent_granularity, embed_model, embedding_mode, parser, show_progress,
            preset, bm25_params,
        )
        index = cls(units, emb, model, parser.parent_granularity, embedding_mode, bm25_params, preset=preset,
                    _tokens=tokens)
        index._parser = parser
        return index

    def _document_units(self, documents: List[Document]) -> Tuple[List[BaseNode], np.ndarray, List[List[str]]]:
        """Units, embeddings and BM25 tokens of new documents, as :meth:`from_documents` makes them."""
        parser = self._parser or MultiGranularityNodeParser(
            granularities=self.granularities, parent_granularity=self.parent_granularity
        )
        units = parser.get_nodes_from_documents(documents)
        if not units:
            return [], np.zeros((0, self._state.embeddings.shape[1]), dtype=np.float32), []
        if self.embedding_mode == "sentences":
            emb = sentence_unit_embeddings(units, documents, parser, self._embed_model)
        else:
            emb = _unit_embeddings(units, self._embed_model, self.embedding_mode, False)
        return units, emb, sentence_tokens(units, documents, parser._sentences, self.bm25_params)

    @classmethod
    def from_nodes(
        cls,
        units: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        parent_granularity: Optional[int] = None,
        embedding_mode: str = "pooled",
        show_progress: bool = False,
        preset: "str | UMGConfig" = DEFAULT_PRESET,
        **bm25_params: Any,
    ) -> "MultiGranularityIndex":
        if embedding_mode not in EMBEDDING_MODES:
            raise ValueError(f"embedding_mode must be one of {EMBEDDING_MODES}, got {embedding_mode!r}.")
        if embedding_mode == "sentences":
            raise ValueError(
                "embedding_mode='sentences' needs the documents; use MultiGranularityIndex.from_documents."
            )
        if not units:
            raise ValueError("no units: every document is empty; pass documents with text.")
        units = require_units(units, "MultiGranularityIndex.from_nodes")
        model = resolve_embed_model(embed_model)
        emb = _unit_embeddings(units, model, embedding_mode, show_progress)
        if parent_granularity is None:
            parent_granularity = _parent_of_units(units)
        return cls(units, emb, model, parent_granularity, embedding_mode, bm25_params, preset=preset)

    # ---- access ----------------------------------------------------------------------
    @property
    def units(self) -> List[BaseNode]:
        return list(self._state.units)

    @property
    def _units(self) -> List[BaseNode]:
        return self._state.units

    @property
    def granularities(self) -> Tuple[int, ...]:
        return tuple(self._state.by_g)

    @property
    def embeddings(self) -> np.ndarray:
        return self._state.embeddings

    @property
    def dense(self) -> Dict[int, DenseExpert]:
        return self._state.dense

    @property
    def sparse(self) -> Dict[int, SparseExpert]:
        """One lexical expert per granularity: :class:`SparseExpert` (bm25s), or for an index
        built with ``lexical="store"`` a ``VectorStoreTextExpert``."""
        return self._state.sparse

    @property
    def docstore(self) -> SimpleDocumentStore:
        """All units, so that :class:`ParentPromotionPostprocessor` can fetch parents."""
        return self._docstore_of(self._state)

    @staticmethod
    def _docstore_of(st: MGState) -> SimpleDocumentStore:
        if st.docstore is None:
            st.docstore = UnitDocumentStore(st.units)
        return st.docstore

    def experts(
        self, expert_names: Sequence[str] = EXPERT_NAMES, granularities: Optional[Sequence[int]] = None,
        _state: Optional[MGState] = None,
    ) -> Dict[str, Dict[int, Any]]:
        bad = [e for e in expert_names if e not in EXPERT_NAMES]
        if bad or not expert_names:
            raise ValueError(f"expert_names must be a non-empty subset of {EXPERT_NAMES}, got {list(expert_names)!r}.")
        st = _state or self._state
        gs = tuple(granularities) if granularities is not None else tuple(st.by_g)
        missing = [g for g in gs if g not in st.by_g]
        if missing or not gs:
            raise ValueError(
                f"granularities {list(gs)!r} are not all in this index (it has {list(st.by_g)!r})."
            )
        pool = {"dense": st.dense, "sparse": st.sparse}
        return {e: {g: pool[e][g] for g in gs} for e in expert_names}

    def as_fusion_retriever(
        self,
        expert_names: Sequence[str] = EXPERT_NAMES,
        granularities: Optional[Sequence[int]] = None,
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        """UMG fusion alone: an :class:`EntropyFusionRetriever` over this index's experts."""
        return self._fusion(self.experts(expert_names, granularities), **kwargs)

    def _fusion(self, experts: Dict[str, Dict[int, Any]], **kwargs: Any) -> EntropyFusionRetriever:
        if self._store is not None:  # store experts share one query embedding
            from llama_index_ext_causalrag.multigranularity.store import fusion_over_store

            return fusion_over_store(self, experts, **kwargs)
        return EntropyFusionRetriever(experts, **kwargs)

    def as_retriever(
        self,
        similarity_top_k: int = 10,
        budget_tokens: Optional[int] = None,
        preset: "Optional[str | UMGConfig]" = None,
        **overrides: Any,
    ) -> BaseRetriever:
        """The index's preset as one retriever: fusion, then (unless the preset is ``"umg"``)
        parent promotion of the fused units, fitted to ``budget_tokens``.

        ``similarity_top_k`` caps the promoted nodes (a parent fitted sentence by sentence may
        give several pieces); ``overrides`` are :class:`UMGConfig` fields, e.g.
        ``weighting="equal"``. Returns a :class:`PostprocessedRetriever` (its
        ``retrieve_for_budget(query, b)`` refits the same fused ranking to another budget).
        """
        config = get_preset(preset) if preset is not None else self.config
        if overrides:
            config = UMGConfig(**{**config.model_dump(), **overrides})
        pg = config.parent_for(self.granularities)
        if config.promote and pg != self.parent_granularity:
            raise ValueError(
                f"this index promotes to {self.parent_granularity}-sentence parents, the configuration asks for "
                f"{pg}; rebuild with MultiGranularityIndex.from_documents(docs, parent_granularity={pg})."
            )
        fusion_k = config.candidates if config.promote else similarity_top_k
        st = self._state  # one snapshot: an update running meanwhile does not mix states
        fusion = self._fusion(
            self.experts(config.expert_names, config.granularities, _state=st), similarity_top_k=fusion_k,
            candidates_per_list=config.candidates_per_list, weighting=config.weighting,
            length_exponent=config.length_exponent,
        )
        if not config.promote:
            return PostprocessedRetriever(fusion, [], top_n=similarity_top_k, budget_tokens=budget_tokens)
        promote = self.as_postprocessor(
            docstore=self._docstore_of(st), top_n=similarity_top_k, evidence_key=config.evidence_key, fit_to_budget=config.fit_to_budget,
            fit_mode=config.fit_mode, max_overlap=config.max_overlap,
        )
        return PostprocessedRetriever(fusion, [promote], budget_tokens=budget_tokens)

    def as_postprocessor(self, **kwargs: Any) -> ParentPromotionPostprocessor:
        """Parent promotion with the preset's settings (``kwargs`` override them)."""
        c = self.config
        defaults = {"evidence_key": c.evidence_key, "fit_to_budget": c.fit_to_budget, "fit_mode": c.fit_mode,
                    "max_overlap": c.max_overlap}
        kwargs.setdefault("docstore", self.docstore)
        return ParentPromotionPostprocessor(**{**defaults, **kwargs})

    def as_query_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> Any:
        """A ``RetrieverQueryEngine`` over :meth:`as_retriever` (``kwargs`` go to it, e.g.
        ``budget_tokens=1024``). With no LLM the engine returns the retrieved nodes only."""
        from llama_index_ext_causalrag.query_engine import retriever_query_engine

        return retriever_query_engine(self.as_retriever(**kwargs), llm=llm, step="MultiGranularityIndex")

    # ---- persistence -----------------------------------------------------------------
    def persist(self, persist_dir: str | Path) -> None:
        """``units.json``, ``embeddings.npy``, ``bm25/g{g}/`` (bm25s files), ``tokens.json``
        (per-unit BM25 tokens, for inserts), ``params.json`` and ``manifest.json``, swapped in
        atomically (no pickle). Built in a store: BM25, unit order and parameters only (the store
        holds the rest; reopen with :meth:`from_vector_store`)."""
        if self._store is not None:
            from llama_index_ext_causalrag.multigranularity.store import persist_store_index

            return persist_store_index(self, persist_dir)
        self._persist_state(self._state, persist_dir)

    def _persist_state(self, st: MGState, persist_dir: str | Path) -> None:
        with persist_to(persist_dir, "MultiGranularityIndex") as w:
            save_nodes(st.units, w.dir / "units.json")
            w.save_array("embeddings.npy", st.embeddings)
            for g, expert in st.sparse.items():
                expert._bm25.save(w.dir / "bm25" / f"g{g}", allow_pickle=False, show_progress=False)
            if st.tokens is not None:
                w.write_json("tokens.json", st.tokens, ensure_ascii=False)
            w.rows["units"] = len(st.units)
            w.params.update(
                granularities=list(st.by_g),
                parent_granularity=self.parent_granularity,
                embedding_mode=self.embedding_mode,
                bm25_params=self.bm25_params,
                preset=self.config.model_dump() if self.preset == "custom" else self.preset,
                **embedder_params(self._embed_model, array_dim(st.embeddings)),
            )

    @classmethod
    def from_vector_store(
        cls, vector_store: Any, docstore: Any, persist_dir: Optional[str | Path] = None,
        embed_model: Optional[BaseEmbedding] = None, kvstore: Optional[Any] = None, namespace: Optional[str] = None,
        lexical: Optional[str] = None,
    ) -> "MultiGranularityIndex":
        """Reopen an index built with ``storage_context=``, without re-embedding: BM25 from the
        ``kvstore`` it was built with, or from ``persist_dir``; ``embed_model`` only embeds queries.
        ``lexical``: by default the build's choice; ``"store"`` serves the sparse lists from the
        vector store's full-text search even if the index was built with ``"bm25"``."""
        from llama_index_ext_causalrag.multigranularity.store import open_from_store

        return open_from_store(cls, vector_store, docstore, persist_dir, embed_model, kvstore, namespace, lexical)

    @classmethod
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None
    ) -> "MultiGranularityIndex":
        """Load without re-embedding or re-indexing; ``embed_model`` (checked against the stored
        dimension) only embeds queries."""
        import bm25s

        ix = open_persisted(persist_dir, "MultiGranularityIndex", "index.persist(dir)")
        p = ix.params
        model = resolve_embed_model(embed_model)
        check_embedder(p, model, ix.dir, "MultiGranularityIndex")
        bm25 = {
            g: bm25s.BM25.load(ix.path("bm25") / f"g{g}", allow_pickle=False, show_progress=False)
            for g in p["granularities"]
        }
        units = load_nodes(ix.path("units.json"))
        ix.check_rows("units", len(units))
        tokens = ix.json("tokens.json") if ix.has("tokens.json") else None
        index = cls(
            units,
            ix.array("embeddings.npy"),
            embed_model=model,
            parent_granularity=p["parent_granularity"],
            embedding_mode=p["embedding_mode"],
            bm25_params=p["bm25_params"],
            _bm25=bm25,
            preset=_load_preset(p.get("preset", DEFAULT_PRESET)),
            _tokens=tokens,
        )
        index._built_with = p.get("embed_model")
        return index
