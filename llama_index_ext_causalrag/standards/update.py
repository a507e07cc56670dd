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
from llama_index.core.schema import Document, MetadataMode

from llama_index_ext_causalrag.storage import updates as up
from llama_index_ext_causalrag.standards.parser import ParsedDocument, StructuredDocumentParser
from llama_index_ext_causalrag.validation import check_documents


class ParsedCorpus:
    """What an update needs: the parser, the aliases and doc id -> (parse, document hash)."""

    def __init__(self, parser: StructuredDocumentParser, doc_aliases: Optional[Dict[str, str]],
                 parsed: Dict[str, Tuple[ParsedDocument, str]]) -> None:
        self.parser, self.doc_aliases, self.parsed = parser, doc_aliases, parsed


class StandardsUpdates:
    """``insert`` / ``delete_ref_doc`` / ``refresh_ref_docs`` (mixin of :class:`StandardsIndex`)."""

    _corpus: Optional[ParsedCorpus]
    _embed_model: Optional[BaseEmbedding]
    unit_ids: List[str]
    embeddings: Optional[np.ndarray]
    embed_model_name: Optional[str]

    def _require_corpus(self, verb: str) -> ParsedCorpus:
        if self._corpus is None:
            raise ValueError(
                f"StandardsIndex.{verb} needs the parsed documents, which a persisted StandardsIndex "
                "does not keep; rebuild it with StandardsIndex.from_documents(all documents) and "
                "update that index in memory (then persist it)."
            )
        return self._corpus

    def snapshot(self) -> Any:
        """A shallow copy sharing this state; updates replace state, never mutate it."""
        return copy.copy(self)

    def insert(self, documents: "Sequence[Document] | Document", persist_dir: "Optional[str | Path]" = None) -> None:
        """Parse, link and embed ``documents``; a document whose id is indexed is refreshed
        (replaced in place if its hash changed). With ``persist_dir`` the updated index is
        written there before it replaces the one in memory."""
        if isinstance(documents, Document):
            documents = [documents]
        self.refresh_ref_docs(documents, persist_dir=persist_dir)

    def refresh_ref_docs(self, documents: Sequence[Document],
                         persist_dir: "Optional[str | Path]" = None) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document."""
        documents = check_documents(documents, "StandardsIndex.refresh_ref_docs")
        corpus = self._require_corpus("refresh_ref_docs")
        todo, flags = up.changed_documents(documents, {d: h for d, (_, h) in corpus.parsed.items()})
        if todo:
            up.check_insert_embedder("StandardsIndex", self.embed_model_name, self._model())
            fresh = {d.doc_id: (corpus.parser.parse_document(d), d.hash) for d in todo}
            parsed = {d: fresh.get(d, v) for d, v in corpus.parsed.items()}
            parsed.update({d: v for d, v in fresh.items() if d not in parsed})
            self._relink(ParsedCorpus(corpus.parser, corpus.doc_aliases, parsed), set(fresh), persist_dir)
        return flags

    def delete_ref_doc(self, ref_doc_id: str, persist_dir: "Optional[str | Path]" = None, **delete_kwargs: Any) -> None:
        """Remove a document; citations to it become external placeholders again. An unknown
        id logs a warning and does nothing."""
        corpus = self._require_corpus("delete_ref_doc")
        if ref_doc_id not in corpus.parsed:
            up.unknown_ref_doc("StandardsIndex", ref_doc_id)
            return
        parsed = {d: v for d, v in corpus.parsed.items() if d != ref_doc_id}
        if not parsed:
            raise up.cannot_empty("StandardsIndex", ref_doc_id)
        self._relink(ParsedCorpus(corpus.parser, corpus.doc_aliases, parsed), set(), persist_dir)

    def _model(self) -> BaseEmbedding:
        from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model

        return resolve_embed_model(self._embed_model)

    def _relink(self, corpus: ParsedCorpus, changed: set, persist_dir: "Optional[str | Path]") -> None:
        new = type(self).from_parsed([p for p, _ in corpus.parsed.values()], corpus.doc_aliases)
        for k in ("preset", "_embed_model"):
            setattr(new, k, getattr(self, k))
        new._corpus = corpus
        if self.embeddings is not None:
            new.embeddings = self._reused_embeddings(new, changed)
            new.embed_model_name = self.embed_model_name
        if getattr(self, "_store", None) is not None:  # built into stores: write the change there (undone on failure)
            from llama_index_ext_causalrag.standards.store import sync_update

            sync_update(self, new, persist_dir)  # type: ignore[arg-type]
        elif persist_dir is not None:
            new.persist(persist_dir)  # folder swap: the old folder stays on failure
        self.__dict__.update(new.__dict__)  # one update of complete state

    def _reused_embeddings(self, new: Any, changed: set) -> np.ndarray:
        old_row = {u: i for i, u in enumerate(self.unit_ids)}
        keep = {u: old_row[u] for u in new.unit_ids
                if u in old_row and new.graph.nodes[u].get("doc_id") not in changed}
        todo = [u for u in new.unit_ids if u not in keep]
        texts = [new.node(u).get_content(metadata_mode=MetadataMode.EMBED) for u in todo]
        keys = [str(new.graph.nodes[u].get("doc_id")) for u in todo]
        fresh = up.embed_by_document(self._model(), texts, keys) if todo else None
        pos = {u: j for j, u in enumerate(todo)}
        assert self.embeddings is not None
        rows = [self.embeddings[keep[u]] if u in keep else fresh[pos[u]] for u in new.unit_ids]  # type: ignore[index]
        return np.stack(rows).astype(np.float32)
