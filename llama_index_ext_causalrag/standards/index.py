"""``StandardsIndex``: the facade of structure-aware standards retrieval.

``StandardsIndex.from_documents(docs).as_retriever()`` parses the section tree and the
citations, embeds the units and returns the retriever the benchmark reports (preset
``"standards"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, FrozenSet, Optional, Sequence

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, Document
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.storage.kvstore.types import BaseKVStore
from llama_index.core.storage.storage_context import StorageContext
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_ext_causalrag.contract import IndexContract
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.standards.backend import MemoryBackend, StandardsBackend, StandardsParams, StoresBackend
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.presets import (
    DEFAULT_PRESET,
    SETTINGS,
    StructureAwareConfig,
    get_preset,
    preset_from_json,
    preset_to_json,
)
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.update import ParsedCorpus, StandardsUpdates
from llama_index_ext_causalrag.storage.persistence import IndexWriter, array_dim, check_embedder
from llama_index_ext_causalrag.validation import check_keywords, check_no_vector_store, public_method

# what as_retriever takes as overrides: every setting by name, and whole stages (lexical=LexicalConfig(...))
OVERRIDES: FrozenSet[str] = SETTINGS | frozenset(StructureAwareConfig.STAGES)


class StandardsIndex(StandardsUpdates, StandardsGraph, IndexContract):
    """A corpus of standards (section tree + citation graph) with its unit embeddings.

    ``preset`` (``"standards"``, the measured default; ``"first"``; ``"paper"``; or a
    :class:`StructureAwareConfig`) is what :meth:`as_retriever` gives. ``insert`` /
    ``delete_ref_doc`` / ``refresh_ref_docs`` update an index built by :meth:`from_documents`
    with the same graph and results as a rebuild (``docs/updating.md``). The index holds one
    backend (``standards/backend.py``): in memory, or the stores of ``storage_context=``.
    """

    RETRIEVER_OPTIONS: FrozenSet[str] = frozenset({"preset", "callback_manager", "verbose", "filters"}) | OVERRIDES

    preset: "str | StructureAwareConfig" = DEFAULT_PRESET
    _embed_model: Optional[BaseEmbedding] = None
    _corpus: Optional[ParsedCorpus] = None

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        graph: nx.DiGraph,
        embeddings: Optional[np.ndarray] = None,
        embed_model_name: Optional[str] = None,
        backend: Optional[StandardsBackend] = None,
    ) -> None:
        super().__init__(nodes, graph, embeddings, embed_model_name)
        self._backend: StandardsBackend = backend if backend is not None else MemoryBackend()

    @classmethod
    @public_method
    def from_documents(  # type: ignore[override]
        cls,
        documents: Sequence[Document],
        *,
        storage_context: Optional[StorageContext] = None,
        show_progress: bool = False,
        embed_model: Optional[BaseEmbedding] = None,
        parser: Optional[StructuredDocumentParser] = None,
        doc_aliases: Optional[Dict[str, str]] = None,
        preset: "str | StructureAwareConfig" = DEFAULT_PRESET,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        **kwargs: Any,
    ) -> "StandardsIndex":
        """Parse, link and embed ``documents`` (a parser with ``chunk_size=256`` by default).

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        the nodes go to its docstore, the units with their embeddings to its vector store, and
        with ``kvstore`` (collection ``namespace``, by default the vector store's table name) the
        section tree, citation graph and parameters to that ``BaseKVStore`` (docs/stores.md)."""
        check_no_vector_store(kwargs)
        check_keywords(kwargs, ())
        get_preset(preset)  # fail before the embedding work
        backend: StandardsBackend
        if storage_context is not None:  # the stores are checked before anything is embedded
            backend, embed_model = StoresBackend.for_build(storage_context, embed_model, kvstore, namespace)
        elif kvstore is not None or namespace is not None:
            raise ValueError(
                "kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too."
            )
        else:
            backend = MemoryBackend()
        parser = parser or StructuredDocumentParser()
        index = super().from_documents(documents, parser=parser, doc_aliases=doc_aliases)
        assert isinstance(index, StandardsIndex)
        parsed = {p.doc_id: (p, d.hash) for p, d in zip(index.__dict__.pop("_parsed"), documents)}
        index._corpus = ParsedCorpus(parser, doc_aliases, parsed)
        index.preset = preset
        index._embed_model = resolve_embed_model(embed_model)
        index.embed(index._embed_model, show_progress=show_progress)
        index._backend = backend
        backend.write(index._params(), index.state())
        return index

    def _params(self) -> StandardsParams:
        """What the backend records beside the state."""
        return StandardsParams(self.preset, type(self).__name__)

    def _persist_files(self, w: IndexWriter) -> None:
        super()._persist_files(w)
        w.params["preset"] = preset_to_json(self.preset)

    def persist(self, persist_dir: "str | Path") -> None:
        """The whole index as files (``StandardsGraph.persist``); built in stores, the graph and
        parameters only (reopen with :meth:`from_vector_store`)."""
        self._backend.persist(self._params(), self.state(), persist_dir)

    @classmethod
    @public_method
    def from_vector_store(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore,
        persist_dir: "Optional[str | Path]" = None,
        embed_model: Optional[BaseEmbedding] = None,
        kvstore: Optional[BaseKVStore] = None,
        namespace: Optional[str] = None,
        preset: "Optional[str | StructureAwareConfig]" = None,
    ) -> "StandardsIndex":
        """Reopen an index built with ``storage_context=``, without re-embedding: nodes from the
        docstore, unit vectors from the vector store, the graph from the ``kvstore`` it was built
        with (or ``persist_dir``); ``embed_model`` only embeds queries."""
        return StoresBackend.open(
            cls,
            vector_store=vector_store,
            docstore=docstore,
            persist_dir=persist_dir,
            embed_model=embed_model,
            kvstore=kvstore,
            namespace=namespace,
            preset=preset,
        )

    @classmethod
    @public_method
    def from_persist_dir(  # type: ignore[override]
        cls,
        persist_dir: "str | Path",
        embed_model: Optional[BaseEmbedding] = None,
        preset: "Optional[str | StructureAwareConfig]" = None,
    ) -> "StandardsIndex":
        """Load without re-embedding; the query embedder is checked against the stored dimension.
        ``preset`` defaults to the one the index was persisted with."""
        index = super().from_persist_dir(persist_dir)
        assert isinstance(index, StandardsIndex)
        if preset is None:
            params = json.loads((Path(persist_dir) / "params.json").read_text(encoding="utf-8"))
            preset = preset_from_json(params.get("preset"))
        index.preset = preset
        if index.embeddings is not None:
            embed_model = resolve_embed_model(embed_model)
            saved = {"embed_model": index.embed_model_name, "embed_dim": array_dim(index.embeddings)}
            check_embedder(saved, embed_model, Path(persist_dir))
        index._embed_model = embed_model
        return index

    @public_method
    def as_retriever(
        self,
        *,
        preset: "Optional[str | StructureAwareConfig]" = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> StructureAwareRetriever:
        """The preset's :class:`StructureAwareRetriever`; ``overrides`` are settings of
        :class:`StructureAwareConfig`'s stages by name (``rrf_k=30``) or whole stages
        (``fusion=FusionConfig(...)``), another name is a ``TypeError`` naming it; ``filters``
        (LlamaIndex's ``MetadataFilters``) restrict every stage to the units passing them."""
        check_keywords(overrides, OVERRIDES)
        config = get_preset(preset if preset is not None else self.preset)
        return self._backend.retriever(
            self.state(),
            config,
            embed_model=self._embed_model,
            callback_manager=callback_manager,
            verbose=verbose,
            filters=filters,
            **overrides,
        )
