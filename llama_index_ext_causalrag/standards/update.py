"""Incremental updates of :class:`StandardsIndex`: re-link from cached parsed documents.

The index keeps every document's :class:`ParsedDocument` (tree, nodes, citations) and
hash. An update parses the new or changed documents only, re-links the whole citation
graph from the cached parses (cheap: no text is parsed twice) and embeds only units that
did not exist before, reusing the rows of unchanged documents by node id. So a citation of
a document outside the corpus (an ``ext::RFC9002`` placeholder) resolves to the real
section once that document is inserted, and turns back into a placeholder when it is
deleted, exactly as ``from_documents`` of the new corpus links it.

The new index is complete before it replaces the old one, by one ``__dict__`` update.
Retrievers made before an update keep the state they were made on (``as_retriever`` gives
each retriever a snapshot); call ``as_retriever()`` again to see the update.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.standards.backend import StandardsBackend
from llama_index_ext_causalrag.standards.parser import ParsedDocument, StructuredDocumentParser
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.validation import caller, check_documents, check_keywords, public_method

UPDATE_OPTIONS = ("persist_dir",)


def _persist_dir(kwargs: Dict[str, Any]) -> "Optional[str | Path]":
    """The ``persist_dir=`` of an update's keyword arguments; any other name is a ``TypeError``."""
    check_keywords(kwargs, UPDATE_OPTIONS)
    return kwargs.get("persist_dir")


class ParsedCorpus:
    """What an update needs: the parser, the aliases and doc id -> (parse, document hash)."""

    def __init__(
        self,
        parser: StructuredDocumentParser,
        doc_aliases: Optional[Dict[str, str]],
        parsed: Dict[str, Tuple[ParsedDocument, str]],
    ) -> None:
        self.parser, self.doc_aliases, self.parsed = parser, doc_aliases, parsed


class StandardsUpdates:
    """``insert`` / ``delete_ref_doc`` / ``refresh_ref_docs`` (mixin of :class:`StandardsIndex`)."""

    _corpus: Optional[ParsedCorpus]
    _embed_model: Optional[BaseEmbedding]
    _backend: StandardsBackend
    unit_ids: List[str]
    embeddings: Optional[np.ndarray]
    embed_model_name: Optional[str]

    def _require_corpus(self) -> ParsedCorpus:
        if self._corpus is None:
            raise ValueError(
                f"{caller()} needs the parsed documents, which a persisted StandardsIndex "
                "does not keep; rebuild it with StandardsIndex.from_documents(all documents) and "
                "update that index in memory (then persist it)."
            )
        return self._corpus

    def snapshot(self) -> Any:
        """A shallow copy sharing this state; updates replace state, never mutate it."""
        return copy.copy(self)

    @public_method
    def insert(self, document: "Document | Sequence[Document]", **insert_kwargs: Any) -> None:
        """Parse, link and embed ``document`` (or a list of documents); a document whose id is
        indexed is refreshed (replaced in place if its hash changed). With ``persist_dir=`` the
        updated index is written there before it replaces the one in memory."""
        persist_dir = _persist_dir(insert_kwargs)
        documents = [document] if isinstance(document, Document) else document
        self._refresh(documents, persist_dir)

    @public_method
    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Not supported: a standards index links the sections it parses from whole documents
        (section tree, citations), which nodes of another parser do not carry; :meth:`insert`
        the documents instead."""
        _persist_dir(insert_kwargs)
        raise NotImplementedError(
            f"StandardsIndex.insert_nodes cannot link {len(nodes)} node(s) into the section tree and "
            "citation graph, which are parsed from whole documents; pass the documents to "
            "index.insert(documents) instead."
        )

    @public_method
    def refresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document
        (``True``: re-indexed). ``persist_dir=`` as for :meth:`insert`."""
        return self._refresh(documents, _persist_dir(update_kwargs))

    def _refresh(self, documents: Sequence[Document], persist_dir: "Optional[str | Path]") -> List[bool]:
        documents = check_documents(documents)
        corpus = self._require_corpus()
        todo, flags = update_plan.changed_documents(documents, {d: h for d, (_, h) in corpus.parsed.items()})
        if todo:
            update_plan.check_insert_embedder(self.embed_model_name, self._model())
            fresh = {d.doc_id: (corpus.parser.parse_document(d), d.hash) for d in todo}
            parsed = {d: fresh.get(d, v) for d, v in corpus.parsed.items()}
            parsed.update({d: v for d, v in fresh.items() if d not in parsed})
            self._relink(ParsedCorpus(corpus.parser, corpus.doc_aliases, parsed), set(fresh), persist_dir)
        return flags

    @public_method
    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> None:
        """Remove a document; citations to it become external placeholders again. An unknown
        id logs a warning and does nothing. The document's nodes always leave the index's own
        docstore (and, built into stores, its docstore and vector store), whatever
        ``delete_from_docstore`` says: it is accepted for LlamaIndex's signature. ``persist_dir=``
        as for :meth:`insert`."""
        persist_dir = _persist_dir(delete_kwargs)
        corpus = self._require_corpus()
        if ref_doc_id not in corpus.parsed:
            update_plan.unknown_ref_doc(ref_doc_id)
            return
        parsed = {d: v for d, v in corpus.parsed.items() if d != ref_doc_id}
        if not parsed:
            raise update_plan.cannot_empty(ref_doc_id)
        self._relink(ParsedCorpus(corpus.parser, corpus.doc_aliases, parsed), set(), persist_dir)

    def _model(self) -> BaseEmbedding:
        from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model

        return resolve_embed_model(self._embed_model)

    def _relink(self, corpus: ParsedCorpus, changed: set, persist_dir: "Optional[str | Path]") -> None:
        new = type(self).from_parsed([p for p, _ in corpus.parsed.values()], corpus.doc_aliases)
        for k in ("preset", "_embed_model", "_backend"):
            setattr(new, k, getattr(self, k))
        new._corpus = corpus
        if self.embeddings is not None:
            new.embeddings = self._reused_embeddings(new, changed)
            new.embed_model_name = self.embed_model_name
        self._backend.commit(self._params(), self.state(), new.state(), persist_dir=persist_dir)  # undone on failure
        self.__dict__.update(new.__dict__)  # one update of complete state

    def _reused_embeddings(self, new: Any, changed: set) -> np.ndarray:
        old_row = {u: i for i, u in enumerate(self.unit_ids)}
        keep = {u: old_row[u] for u in new.unit_ids if u in old_row and new.graph.nodes[u].get("doc_id") not in changed}
        todo = [u for u in new.unit_ids if u not in keep]
        texts = [new.node(u).get_content(metadata_mode=MetadataMode.EMBED) for u in todo]
        keys = [str(new.graph.nodes[u].get("doc_id")) for u in todo]
        fresh = update_plan.embed_by_document(self._model(), texts, keys) if todo else None
        pos = {u: j for j, u in enumerate(todo)}
        assert self.embeddings is not None
        rows = [self.embeddings[keep[u]] if u in keep else fresh[pos[u]] for u in new.unit_ids]  # type: ignore[index]
        return np.stack(rows).astype(np.float32)
