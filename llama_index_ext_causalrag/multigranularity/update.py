"""Incremental updates of :class:`MultiGranularityIndex`: ``insert``, ``insert_nodes``,
``delete_ref_doc`` and ``refresh_ref_docs`` (a mixin of the facade).

``insert(documents)`` parses and embeds the new documents only, and rebuilds each granularity's
BM25 matrices from the cached tokens: results equal ``from_documents(old + new)`` (same units in
the same order, same embeddings, same BM25 statistics). The new :class:`MGState` is made and
committed by the index's backend (in memory: written to ``persist_dir`` if given; on stores: the
changed rows replaced, put back on failure), then swapped in by one assignment, so an update
that fails part-way leaves the index as it was. Retrievers made before an update keep answering
from the state they were made on; call ``as_retriever()`` again to see the update.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document

from llama_index_ext_causalrag.multigranularity.build import document_units, unit_embeddings
from llama_index_ext_causalrag.multigranularity.presets import parser_settings
from llama_index_ext_causalrag.multigranularity.sentence_tokens import unit_tokens
from llama_index_ext_causalrag.multigranularity.state import MGChange, MGState
from llama_index_ext_causalrag.multigranularity.windows import MultiGranularityNodeParser, require_units
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.validation import check_documents, check_keywords, public_method

if TYPE_CHECKING:
    from llama_index_ext_causalrag.multigranularity.backend import MGBackend

UPDATE_OPTIONS = frozenset({"persist_dir"})


class MultiGranularityUpdates:
    """``insert`` / ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` with LlamaIndex's
    signatures; their one keyword of ours, ``persist_dir=``, writes the updated index there before
    it replaces the one in memory (mixin of :class:`MultiGranularityIndex`)."""

    _state: MGState
    _backend: "MGBackend"
    _embed_model: BaseEmbedding
    _built_with: Optional[str]
    _parser: Optional[MultiGranularityNodeParser]
    bm25_params: Dict[str, Any]
    embedding_mode: str
    parent_granularity: Optional[int]
    granularities: "tuple[int, ...]"
    preset: str  # a name, or "custom"

    def _persist_dir(self, kwargs: Dict[str, Any]) -> "Optional[str | Path]":
        check_keywords(kwargs, UPDATE_OPTIONS)
        return kwargs.get("persist_dir")

    def _apply(self, change: MGChange, persist_dir: "Optional[str | Path]" = None) -> None:
        """Merge ``change`` into a new state, commit it to the backend, swap it in."""
        st, backend, params = self._state, self._backend, self._params()  # type: ignore[attr-defined]
        new = backend.next_state(params, st, change)
        backend.commit(params, st, new, change=change, persist_dir=persist_dir)
        self._state = new  # one assignment: queries see the old or the new state

    @public_method
    def insert(self, document: "Document | Sequence[Document]", **insert_kwargs: Any) -> None:
        """Parse, embed and index ``document`` (or a list of documents; a document whose id is
        indexed is refreshed: replaced in place if its hash changed, else left alone). With
        ``persist_dir=`` the updated index is written there before it replaces the one in memory."""
        persist_dir = self._persist_dir(insert_kwargs)
        documents = [document] if isinstance(document, Document) else document
        self.refresh_ref_docs(documents, persist_dir=persist_dir)

    @public_method
    def refresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document
        (``persist_dir=`` as in :meth:`insert`)."""
        persist_dir = self._persist_dir(update_kwargs)
        documents = check_documents(documents)
        todo, flags = update_plan.changed_documents(
            documents, self._backend.known_docs(self._state, [d.doc_id for d in documents])
        )
        if todo:
            update_plan.check_insert_embedder(self._built_with, self._embed_model)
            parser = self._parser or MultiGranularityNodeParser(
                granularities=self.granularities,
                parent_granularity=self.parent_granularity,
                **parser_settings(self.preset),
            )
            units, emb, tokens = document_units(todo, parser, self._embed_model, self.embedding_mode, self.bm25_params)
            present = {d.doc_id for d in todo}
            gone = [d for d in present if d not in update_plan.known_docs(units)]  # emptied documents
            self._apply(MGChange(units, emb, tokens, tuple(gone)), persist_dir)
        return flags

    @public_method
    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Add units of :class:`MultiGranularityNodeParser`; units of an indexed document
        replace all of its units. Not for ``embedding_mode="sentences"`` (needs documents).
        ``persist_dir=`` as in :meth:`insert`."""
        persist_dir = self._persist_dir(insert_kwargs)
        units = require_units(nodes)
        if not units:
            return
        if self.embedding_mode == "sentences":
            raise ValueError(
                "insert_nodes cannot embed units of an index with embedding_mode='sentences' (it "
                "embeds documents' sentences); use index.insert(documents)."
            )
        update_plan.check_insert_embedder(self._built_with, self._embed_model)
        emb = unit_embeddings(units, self._embed_model, self.embedding_mode, False)
        self._apply(MGChange(units, emb, unit_tokens(units, self.bm25_params)), persist_dir)

    @public_method
    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> None:
        """Remove every unit of ``ref_doc_id``; an unknown id logs a warning and does nothing.

        ``delete_from_docstore`` is accepted for LlamaIndex's signature and changes nothing here:
        this index's docstore (in memory, or the one of its ``storage_context``) holds its units,
        not the documents, and the document's units always leave it. ``persist_dir=`` as in
        :meth:`insert`."""
        persist_dir = self._persist_dir(delete_kwargs)
        if ref_doc_id not in self._backend.known_docs(self._state, [ref_doc_id]):
            update_plan.unknown_ref_doc(ref_doc_id)
            return
        self._apply(MGChange([], None, [], (ref_doc_id,)), persist_dir)
