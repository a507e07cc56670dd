"""MultiGranularityIndex: units, their embeddings and one BM25 index per granularity.

What is embedded (``embedding_mode``) is in :mod:`.build`; where the units live (memory or
LlamaIndex's stores) is the index's backend (:mod:`.backend`); updates are :mod:`.update`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core import StorageContext
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.contract import IndexContract
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.multigranularity.backend import MemoryBackend, MGBackend
from llama_index_ext_causalrag.multigranularity.build import (
    EMBEDDING_MODES,
    parent_of_units,
    parse_and_embed,
    unit_embeddings,
)
from llama_index_ext_causalrag.multigranularity.params import MGParams
from llama_index_ext_causalrag.multigranularity.presets import (
    DEFAULT_PRESET,
    SETTINGS,
    UMGConfig,
    feedback_of,
    get_preset,
)
from llama_index_ext_causalrag.multigranularity.promotion import ParentPromotionPostprocessor
from llama_index_ext_causalrag.multigranularity.retriever import EntropyFusionRetriever
from llama_index_ext_causalrag.multigranularity.state import EXPERT_NAMES, MGState, state_experts
from llama_index_ext_causalrag.multigranularity.store_backend import StoreBackend, backend_for_build
from llama_index_ext_causalrag.multigranularity.update import MultiGranularityUpdates
from llama_index_ext_causalrag.multigranularity.windows import (
    DEFAULT_GRANULARITIES,
    MultiGranularityNodeParser,
    require_units,
)
from llama_index_ext_causalrag.pipeline import PostprocessedRetriever
from llama_index_ext_causalrag.storage.ann import ANN
from llama_index_ext_causalrag.validation import check_keywords, check_no_vector_store, public_method

logger = logging.getLogger(__name__)


class MultiGranularityIndex(MultiGranularityUpdates, IndexContract):
    """The UMG index: units of :class:`MultiGranularityNodeParser` with one dense and one
    sparse expert per granularity.

    ``as_retriever(budget_tokens=B)`` is the measured UMGP configuration (the ``preset``, by
    default ``"umgp"``): entropy fusion, then parent promotion fitted to ``B`` tokens, as one
    retriever. ``as_fusion_retriever`` gives the bare :class:`EntropyFusionRetriever` and
    ``as_postprocessor`` the matching :class:`ParentPromotionPostprocessor`.

    ``insert`` / ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` update it
    without a rebuild, with the same results as one (``docs/updating.md``).
    """

    RETRIEVER_OPTIONS: FrozenSet[str] = (
        frozenset({"similarity_top_k", "budget_tokens", "preset", "filters"})
        | SETTINGS
        | frozenset(UMGConfig.DEPRECATED_STAGE_OF)
    )

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
        _backend: Optional[MGBackend] = None,
    ) -> None:
        units = list(units)
        if not units:
            raise ValueError("MultiGranularityIndex got no units (all documents empty?); pass documents with text.")
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(units):
            raise ValueError(f"embeddings must have shape (n_units={len(units)}, dim), got {emb.shape}.")
        if _tokens is not None and len(_tokens) != len(units):
            raise ValueError(f"got {len(_tokens)} token lists for {len(units)} units; pass one per unit.")
        self._configure(
            resolve_embed_model(embed_model),
            preset,
            parent_granularity,
            embedding_mode,
            bm25_params,
            _backend if _backend is not None else MemoryBackend(),
        )
        self._state = self._backend.make_state(self._params(), units, emb, _tokens, _bm25)

    def _configure(
        self,
        embed_model: BaseEmbedding,
        preset: "str | UMGConfig",
        parent_granularity: Optional[int],
        embedding_mode: str,
        bm25_params: Optional[Dict[str, Any]],
        backend: MGBackend,
    ) -> None:
        """The index's settings and backend (its state is the backend's to make)."""
        self._embed_model = embed_model
        self.config = get_preset(preset)
        self.preset = preset if isinstance(preset, str) else "custom"
        self.parent_granularity = parent_granularity
        self.embedding_mode = embedding_mode
        self.bm25_params = dict(bm25_params or {})
        self._built_with: Optional[str] = None  # the stored embeddings' model, when loaded
        self._parser: Optional[MultiGranularityNodeParser] = None  # the one from_documents used
        self._backend: MGBackend = backend

    def _params(self) -> MGParams:
        """What the index was built with, as its backend takes it."""
        return MGParams(
            self._embed_model,
            self.parent_granularity,
            self.embedding_mode,
            self.bm25_params,
            self.preset,
            self.config,
            self._built_with,
        )

    @classmethod
    def _opened(cls, params: MGParams, backend: MGBackend, state: Any) -> "MultiGranularityIndex":
        """The index a backend opened: its parameters, and the state it read."""
        index = cls.__new__(cls)
        index._configure(
            params.embed_model,
            params.config if params.preset == "custom" else params.preset,
            params.parent_granularity,
            params.embedding_mode,
            params.bm25_params,
            backend,
        )
        index._built_with, index._state = params.built_with, state
        return index

    # ---- construction ----------------------------------------------------------------
    @classmethod
    @public_method
    def from_documents(
        cls,
        documents: Sequence[Document],
        *,
        storage_context: Optional[StorageContext] = None,
        show_progress: bool = False,
        embed_model: Optional[BaseEmbedding] = None,
        granularities: Sequence[int] = DEFAULT_GRANULARITIES,
        parent_granularity: Optional[int] = None,
        embedding_mode: str = "sentences",
        parser: Optional[MultiGranularityNodeParser] = None,
        preset: "str | UMGConfig" = DEFAULT_PRESET,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        lexical: str = "bm25",
        ann: Optional[ANN] = None,
        **bm25_params: Any,
    ) -> "MultiGranularityIndex":
        """Split ``documents`` into sentence windows, embed them, index them with BM25.

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        units and embeddings go to its vector store, units to its docstore, and with ``kvstore``
        (a ``BaseKVStore``; collection ``namespace``, by default the vector store's table name)
        BM25, unit order and parameters go there (docs/stores.md). ``lexical`` picks the sparse
        expert of an index built into stores: ``"bm25"`` (bm25s in memory, persisted beside the
        store; the default) or ``"store"`` (the vector store's full-text search, e.g.
        ``PGVectorStore(hybrid_search=True)``; no BM25 is built or stored). Into a ``PGVectorStore``
        the dense lists are served from one table per granularity beside its table (into Milvus:
        one collection per granularity); ``ann=HNSW(...)`` gives each an HNSW index and, on Milvus
        only, ``ann=IVF(...)`` an IVF_FLAT index (approximate search, for large lists; default: exact).

        ``preset`` names the retrieval configuration ``as_retriever`` gives (``"umgp"``, the
        measured default; ``"paper"``; ``"umg"``) and, unless ``parent_granularity`` is given,
        the window size promotion goes to (``"umgp"``: the coarsest granularity). Other keyword
        arguments are BM25 parameters (:class:`SparseExpert`'s).
        """
        check_no_vector_store(bm25_params)
        backend, model = backend_for_build(storage_context, embed_model, kvstore, namespace, lexical, ann, bm25_params)
        units, emb, model, parser, tokens = parse_and_embed(
            documents,
            granularities,
            parent_granularity,
            model,
            embedding_mode,
            parser,
            show_progress,
            preset,
            bm25_params,
            with_tokens=backend.needs_tokens,
        )
        index = cls(
            units,
            emb,
            model,
            parser.parent_granularity,
            embedding_mode,
            bm25_params,
            preset=preset,
            _tokens=tokens,
            _backend=backend,
        )
        index._parser = parser
        backend.write(index._params(), index._state, emb)
        return index

    @classmethod
    @public_method
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
        check_choice(embedding_mode, "embedding_mode", EMBEDDING_MODES)
        if embedding_mode == "sentences":
            raise ValueError(
                "embedding_mode='sentences' needs the documents; use MultiGranularityIndex.from_documents."
            )
        if not units:
            raise ValueError("no units: every document is empty; pass documents with text.")
        units = require_units(units)
        model = resolve_embed_model(embed_model)
        emb = unit_embeddings(units, model, embedding_mode, show_progress)
        if parent_granularity is None:
            parent_granularity = parent_of_units(units)
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
        """The units' embeddings held in memory (none, shape ``(n, 0)``, for an index on stores)."""
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
    def docstore(self) -> BaseDocumentStore:
        """All units, so that :class:`ParentPromotionPostprocessor` can fetch parents."""
        return self._state.docstore

    def experts(
        self,
        expert_names: Sequence[str] = EXPERT_NAMES,
        granularities: Optional[Sequence[int]] = None,
        _state: Optional[MGState] = None,
    ) -> Dict[str, Dict[int, Any]]:
        return state_experts(_state or self._state, expert_names, granularities)

    @public_method
    def as_fusion_retriever(
        self,
        expert_names: Sequence[str] = EXPERT_NAMES,
        granularities: Optional[Sequence[int]] = None,
        **kwargs: Any,
    ) -> EntropyFusionRetriever:
        """UMG fusion alone: an :class:`EntropyFusionRetriever` over this index's lists."""
        return self._backend.fusion_retriever(self._params(), self._state, expert_names, granularities, **kwargs)

    @public_method
    def as_retriever(
        self,
        *,
        similarity_top_k: int = 10,
        budget_tokens: Optional[int] = None,
        preset: "Optional[str | UMGConfig]" = None,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> BaseRetriever:
        """The index's preset as one retriever: fusion, then (unless the preset is ``"umg"``)
        parent promotion of the fused units, fitted to ``budget_tokens`` (the ``fitting`` stage's
        setting, given here or in the preset; ``fit_mode`` says how a parent that does not fit is cut).

        ``similarity_top_k`` caps the promoted nodes (a parent fitted sentence by sentence may
        give several pieces); ``overrides`` are settings of :class:`UMGConfig`'s stages by name, e.g.
        ``weighting="equal"`` (another name is a ``TypeError``). Returns a
        :class:`PostprocessedRetriever` (its ``retrieve_for_budget(query, b)`` refits the same
        fused ranking to another budget).
        """
        check_keywords(overrides, self.RETRIEVER_OPTIONS)
        config = get_preset(preset) if preset is not None else self.config
        if budget_tokens is not None:  # the fitting stage's budget, by its own argument
            overrides["budget_tokens"] = budget_tokens
        if overrides:
            config = config.with_settings(**overrides)
        fusion_stage, promotion, fitting = config.fusion, config.promotion, config.fitting
        parent_granularity = config.parent_for(self.granularities)
        if promotion.promote and parent_granularity != self.parent_granularity:
            raise ValueError(
                f"this index promotes to {self.parent_granularity}-sentence parents, the configuration asks for "
                f"{parent_granularity}; rebuild with MultiGranularityIndex.from_documents(docs, parent_granularity={parent_granularity})."
            )
        fusion_k = promotion.candidates if promotion.promote else similarity_top_k
        st = self._state  # one snapshot: an update running meanwhile does not mix states
        fusion = self._backend.fusion_retriever(
            self._params(),
            st,
            fusion_stage.expert_names,
            fusion_stage.granularities,
            similarity_top_k=fusion_k,
            candidates_per_list=fusion_stage.candidates_per_list,
            weighting=fusion_stage.weighting,
            length_exponent=fusion_stage.length_exponent,
            filters=filters,
            feedback=feedback_of(fusion_stage),
            pool_documents=promotion.promote and promotion.parent_evidence != "children",
            document_pool="lists" if promotion.parent_evidence == "lists" else "units",
        )
        if not promotion.promote:
            return PostprocessedRetriever(fusion, [], top_n=similarity_top_k, budget_tokens=fitting.budget_tokens)
        if fitting.fit_evidence == "query" and st.finest_scores is None:
            logger.warning(
                "fit_evidence='query' scores sentences with the index's BM25 experts, which an index served "
                "from the store does not hold in the process; fitting by the fused evidence (fit_evidence='fused')."
            )
        promote = self.as_postprocessor(
            docstore=st.docstore,
            top_n=similarity_top_k,
            evidence_key=promotion.evidence_key,
            max_overlap=promotion.max_overlap,
            promote_within_long_documents=promotion.promote_within_long_documents,
            parent_evidence=promotion.parent_evidence,
            filters=filters,
            **fitting.model_dump(),
            sentence_scores=st.finest_scores if fitting.fit_evidence == "query" else None,
        )
        return PostprocessedRetriever(fusion, [promote], budget_tokens=fitting.budget_tokens)

    def as_postprocessor(self, **kwargs: Any) -> ParentPromotionPostprocessor:
        """Parent promotion with the preset's settings (``kwargs`` override them)."""
        config = self.config
        promotion = config.promotion
        defaults = {
            "evidence_key": promotion.evidence_key,
            "max_overlap": promotion.max_overlap,
            "promote_within_long_documents": promotion.promote_within_long_documents,
            "parent_evidence": promotion.parent_evidence,
            **config.fitting.model_dump(),
        }
        kwargs.setdefault("docstore", self.docstore)
        if kwargs.get("fit_evidence", config.fitting.fit_evidence) == "query":
            kwargs.setdefault("sentence_scores", self._state.finest_scores)
        return ParentPromotionPostprocessor(**{**defaults, **kwargs})

    # ---- persistence -----------------------------------------------------------------
    def persist(self, persist_dir: str | Path) -> None:
        """In memory: ``units.json``, ``embeddings.npy``, ``bm25/g{g}/`` (bm25s files),
        ``tokens.json`` (per-unit BM25 tokens, for inserts), ``params.json`` and
        ``manifest.json``, swapped in atomically (no pickle). Built in a store: BM25, unit order
        and parameters only (the store holds the rest; reopen with :meth:`from_vector_store`)."""
        self._backend.persist(self._params(), self._state, persist_dir)

    @classmethod
    @public_method
    def from_vector_store(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: Optional[str | Path] = None,
        embed_model: Optional[BaseEmbedding] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        lexical: Optional[str] = None,
        ann: Optional[ANN] = None,
        bm25_scores: Optional[str] = None,
    ) -> "MultiGranularityIndex":
        """Reopen an index built with ``storage_context=``, without re-embedding: BM25 from the
        ``kvstore`` it was built with, or from ``persist_dir``; ``embed_model`` only embeds queries.
        ``lexical``: by default the build's choice; ``"store"`` serves the sparse lists from the
        vector store's full-text search even if the index was built with ``"bm25"``. ``ann``: by
        default the build's; another ``HNSW.ef_search`` or ``IVF.nprobe`` trades speed for recall.
        ``bm25_scores``, for BM25 lists from pg_textsearch's bm25 index: ``"index"`` (the default
        there) as the index scores them, moved from its one-byte unit lengths to exact ones
        (bm25s's score where each query term occurs once in the unit, a little below where one
        occurs more often); ``"exact"`` rescored exactly as in memory (the same lists, more
        server time a query). Other stores' BM25 lists are scored one way; the option changes nothing there."""
        return cls._opened(
            *StoreBackend.open(
                vector_store, docstore, persist_dir, embed_model, kvstore, namespace, lexical, ann, bm25_scores
            )
        )

    @public_method
    def upgrade_store(self, ann: Optional[ANN] = None) -> None:
        """Serve the dense lists of an index written into a ``PGVectorStore`` by an earlier
        version from per-granularity tables (created and filled from its table, kept in step by
        triggers; ``ann``: with HNSW indexes). Writes to the database; run it once."""
        if not isinstance(self._backend, StoreBackend):
            raise ValueError("upgrade_store: this index is in memory; only an index built into stores has tables.")
        self._backend.upgrade(self._params(), self._state, ann)

    @classmethod
    @public_method
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None
    ) -> "MultiGranularityIndex":
        """Load without re-embedding or re-indexing; ``embed_model`` (checked against the stored
        dimension) only embeds queries."""
        return cls._opened(*MemoryBackend.open(persist_dir, embed_model))
