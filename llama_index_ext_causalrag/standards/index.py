"""``StandardsIndex``: the facade of structure-aware standards retrieval.

``StandardsIndex.from_documents(docs).as_retriever()`` parses the section tree and the
citations, embeds the units and returns the retriever the benchmark reports (preset
``"standards"``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import Document

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.storage.persistence import array_dim, check_embedder
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.parser import StructuredDocumentParser
from llama_index_ext_causalrag.standards.presets import DEFAULT_PRESET, StructureAwareConfig, get_preset
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.standards.update import ParsedCorpus, StandardsUpdates


class StandardsIndex(StandardsUpdates, StandardsGraph):
    """A corpus of standards (section tree + citation graph) with its unit embeddings.

    ``preset`` (``"standards"``, the measured default; ``"first"``; ``"paper"``; or a
    :class:`StructureAwareConfig`) is what :meth:`as_retriever` gives. ``insert`` /
    ``delete_ref_doc`` / ``refresh_ref_docs`` update an index built by :meth:`from_documents`
    in memory, with the same graph and results as a rebuild (``docs/updating.md``).
    """

    preset: "str | StructureAwareConfig" = DEFAULT_PRESET
    _embed_model: Optional[BaseEmbedding] = None
    _corpus: Optional[ParsedCorpus] = None
    _store: Optional[Dict[str, Any]] = None  # set by standards.store: vector store, docstore, kvstate

    @classmethod
    def from_documents(  # type: ignore[override]
        cls,
        documents: Sequence[Document],
        parser: Optional[StructuredDocumentParser] = None,
        doc_aliases: Optional[Dict[str, str]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        show_progress: bool = False,
        preset: "str | StructureAwareConfig" = DEFAULT_PRESET,
        storage_context: Optional[Any] = None,
        kvstore: Optional[Any] = None,
        namespace: Optional[str] = None,
    ) -> "StandardsIndex":
        """Parse, link and embed ``documents`` (a parser with ``chunk_size=256`` by default).

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        the nodes go to its docstore, the units with their embeddings to its vector store, and
        with ``kvstore`` (collection ``namespace``, by default the vector store's table name) the
        section tree, citation graph and parameters to that ``BaseKVStore`` (docs/stores.md)."""
        get_preset(preset)  # fail before the embedding work
        if storage_context is not None:
            from llama_index_ext_causalrag.standards.store import build_in_store

            return build_in_store(cls, documents, storage_context, embed_model, kvstore, namespace, parser=parser,
                                  doc_aliases=doc_aliases, show_progress=show_progress, preset=preset)
        if kvstore is not None or namespace is not None:
            raise ValueError("kvstore= and namespace= keep the state of an index built into stores; pass storage_context= too.")
        parser = parser or StructuredDocumentParser()
        index = super().from_documents(documents, parser=parser, doc_aliases=doc_aliases)
        assert isinstance(index, StandardsIndex)
        parsed = {p.doc_id: (p, d.hash) for p, d in zip(index.__dict__.pop("_parsed"), documents)}
        index._corpus = ParsedCorpus(parser, doc_aliases, parsed)
        index.preset = preset
        index._embed_model = resolve_embed_model(embed_model)
        index.embed(index._embed_model, show_progress=show_progress)
        return index

    def _persist_files(self, w: Any) -> None:
        super()._persist_files(w)
        p = self.preset
        w.params["preset"] = p.model_dump(mode="json") if isinstance(p, StructureAwareConfig) else p

    def persist(self, persist_dir: "str | Path") -> None:
        """The whole index as files (``StandardsGraph.persist``); built in stores, the graph and
        parameters only (reopen with :meth:`from_vector_store`)."""
        if self._store is not None:
            from llama_index_ext_causalrag.standards.store import write_folder

            return write_folder(self, persist_dir)
        super().persist(persist_dir)

    @classmethod
    def from_vector_store(
        cls, vector_store: Any, docstore: Any, persist_dir: "Optional[str | Path]" = None,
        embed_model: Optional[BaseEmbedding] = None, kvstore: Optional[Any] = None, namespace: Optional[str] = None,
        preset: "Optional[str | StructureAwareConfig]" = None,
    ) -> "StandardsIndex":
        """Reopen an index built with ``storage_context=``, without re-embedding: nodes from the
        docstore, unit vectors from the vector store, the graph from the ``kvstore`` it was built
        with (or ``persist_dir``); ``embed_model`` only embeds queries."""
        from llama_index_ext_causalrag.standards.store import open_from_store

        return open_from_store(cls, vector_store, docstore, persist_dir, embed_model, kvstore, namespace, preset)

    @classmethod
    def from_persist_dir(  # type: ignore[override]
        cls, persist_dir: "str | Path", embed_model: Optional[BaseEmbedding] = None,
        preset: "Optional[str | StructureAwareConfig]" = None,
    ) -> "StandardsIndex":
        """Load without re-embedding; the query embedder is checked against the stored dimension.
        ``preset`` defaults to the one the index was persisted with."""
        index = super().from_persist_dir(persist_dir)
        assert isinstance(index, StandardsIndex)
        if preset is None:
            stored = json.loads((Path(persist_dir) / "params.json").read_text(encoding="utf-8")).get("preset")
            preset = StructureAwareConfig(**stored) if isinstance(stored, dict) else (stored or DEFAULT_PRESET)
        index.preset = preset
        if index.embeddings is not None:
            embed_model = resolve_embed_model(embed_model)
            saved = {"embed_model": index.embed_model_name, "embed_dim": array_dim(index.embeddings)}
            check_embedder(saved, embed_model, Path(persist_dir), "StandardsIndex")
        index._embed_model = embed_model
        return index

    def as_retriever(self, preset: "Optional[str | StructureAwareConfig]" = None, **overrides: Any) -> StructureAwareRetriever:
        """The preset's :class:`StructureAwareRetriever`; ``overrides`` are any of its settings."""
        config = get_preset(preset if preset is not None else self.preset)
        return StructureAwareRetriever(self.snapshot(), config=config, embed_model=self._embed_model, **overrides)

    def as_query_engine(self, llm: Optional[LLM] = None, **kwargs: Any) -> Any:
        """A ``RetrieverQueryEngine`` over :meth:`as_retriever` (``kwargs`` go to it)."""
        from llama_index_ext_causalrag.query_engine import retriever_query_engine

        return retriever_query_engine(self.as_retriever(**kwargs), llm=llm, step="StandardsIndex")
