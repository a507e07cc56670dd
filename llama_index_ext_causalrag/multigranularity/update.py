"""Incremental updates of :class:`MultiGranularityIndex`: the state object and the mixin.

All that queries read (units, embeddings, per-unit BM25 tokens, the experts) is one
:class:`MGState`, replaced by one assignment once the new state is complete; an update
that fails part-way leaves the index as it was. ``insert(documents)`` parses and embeds
the new documents only, and rebuilds each granularity's BM25 matrices from the cached
tokens: results equal ``from_documents(old + new)`` (same units in the same order, same
embeddings, same BM25 statistics). Retrievers made before an update keep answering from the
state they were made on; call ``as_retriever()`` again to see the update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_causalrag.storage import updates as up
from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer
from llama_index_ext_causalrag.multigranularity.windows import (
    MultiGranularityNodeParser,
    require_units,
    units_by_granularity,
)
from llama_index_ext_causalrag.validation import check_documents

TOKENIZER_PARAMS = ("language", "stemmer", "stopwords", "token_pattern")


class MGState:
    """Units, their embeddings and BM25 tokens, and the experts built on them."""

    def __init__(
        self,
        units: List[BaseNode],
        embeddings: np.ndarray,
        tokens: Optional[List[List[str]]],
        embed_model: BaseEmbedding,
        bm25_params: Dict[str, Any],
        bm25: Optional[Dict[int, Any]] = None,
        dense: Optional[Dict[int, Any]] = None,
        sparse: Optional[Dict[int, Any]] = None,
    ) -> None:
        """``dense`` / ``sparse``: one retriever per granularity to use instead of in-memory
        :class:`DenseExpert` s / :class:`SparseExpert` s (e.g. filtered queries of a vector store;
        with ``sparse`` no BM25 is built)."""
        self.units, self.embeddings, self.tokens = units, embeddings, tokens
        self.by_g = units_by_granularity(units)
        self.dense: Dict[int, DenseExpert] = {}
        self.sparse: Dict[int, SparseExpert] = {}
        for g, idx in self.by_g.items():
            nodes = [units[i] for i in idx]
            self.dense[g] = dense[g] if dense is not None else DenseExpert(
                nodes, embed_model=embed_model, embeddings=embeddings[idx], name=f"dense@{g}")
            if sparse is not None:
                self.sparse[g] = sparse[g]
                continue
            toks = None if tokens is None else [tokens[i] for i in idx]
            self.sparse[g] = SparseExpert(
                nodes, name=f"sparse@{g}", _bm25=(bm25 or {}).get(g), _tokens=toks, **bm25_params
            )
        self.docstore: Optional[SimpleDocumentStore] = None


def unit_tokens(units: Sequence[BaseNode], bm25_params: Dict[str, Any]) -> List[List[str]]:
    """BM25 tokens of each unit's embed text, as :class:`SparseExpert` computes them."""
    tokenizer = BM25Tokenizer(**{k: bm25_params[k] for k in TOKENIZER_PARAMS if k in bm25_params})
    return [tokenizer(u.get_content(metadata_mode=MetadataMode.EMBED)) for u in units]


class MultiGranularityUpdates:
    """``insert`` / ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` (mixin of
    :class:`MultiGranularityIndex`)."""

    _state: MGState
    _embed_model: BaseEmbedding
    _built_with: Optional[str]
    _parser: Optional[MultiGranularityNodeParser]
    bm25_params: Dict[str, Any]
    embedding_mode: str
    parent_granularity: Optional[int]

    # ---- hooks of the facade (index.py) ---------------------------------------------------
    def _persist_state(self, st: MGState, persist_dir: "str | Path") -> None:  # pragma: no cover
        raise NotImplementedError

    def _document_units(self, documents: List[Document]) -> "tuple[List[BaseNode], np.ndarray, List[List[str]]]":
        raise NotImplementedError  # pragma: no cover

    # ---- the update verbs ---------------------------------------------------------------
    def _tokens_of_state(self) -> List[List[str]]:
        st = self._state
        if st.tokens is None:  # loaded from a folder written before tokens were persisted
            st.tokens = unit_tokens(st.units, self.bm25_params)
        return st.tokens

    def _apply(
        self,
        new_units: List[BaseNode],
        new_emb: Optional[np.ndarray],
        new_tokens: List[List[str]],
        drop: Sequence[str] = (),
        persist_dir: "Optional[str | Path]" = None,
    ) -> None:
        if getattr(self, "_store", None) is not None:  # built into stores: write the change there
            from llama_index_ext_causalrag.multigranularity.store import apply_in_store

            return apply_in_store(self, new_units, new_emb, new_tokens, drop, persist_dir)  # type: ignore[arg-type]
        st = self._state
        plan = up.merge_plan(st.units, new_units, drop)
        if not plan:
            raise up.cannot_empty(type(self).__name__, ", ".join(drop))
        if new_units and new_emb is not None and new_emb.shape[1] != st.embeddings.shape[1]:
            raise ValueError(
                f"{type(self).__name__} holds {st.embeddings.shape[1]}-dimensional embeddings, the new "
                f"units have {new_emb.shape[1]}; embed them with the index's model."
            )
        rows = [st.embeddings[i] if side == "old" else new_emb[i] for side, i in plan]  # type: ignore[index]
        new = MGState(
            up.pick(plan, st.units, new_units),
            np.stack(rows).astype(np.float32),
            up.pick(plan, self._tokens_of_state(), new_tokens),
            self._embed_model,
            self.bm25_params,
        )
        if persist_dir is not None:
            self._persist_state(new, persist_dir)  # folder swap: the old folder stays on failure
        self._state = new  # one assignment: queries see the old or the new state

    def insert(self, documents: "Sequence[Document] | Document", persist_dir: "Optional[str | Path]" = None) -> None:
        """Parse, embed and index ``documents`` (a document whose id is indexed is refreshed:
        replaced in place if its hash changed, else left alone). With ``persist_dir`` the
        updated index is written there before it replaces the one in memory."""
        if isinstance(documents, Document):
            documents = [documents]
        self.refresh_ref_docs(documents, persist_dir=persist_dir)

    def refresh_ref_docs(
        self, documents: Sequence[Document], persist_dir: "Optional[str | Path]" = None
    ) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document."""
        documents = check_documents(documents, f"{type(self).__name__}.refresh_ref_docs")
        todo, flags = up.changed_documents(documents, up.known_docs(self._state.units))
        if todo:
            up.check_insert_embedder(type(self).__name__, self._built_with, self._embed_model)
            units, emb, tokens = self._document_units(todo)
            present = {d.doc_id for d in todo}
            gone = [d for d in present if d not in up.known_docs(units)]  # emptied documents
            self._apply(units, emb, tokens, drop=gone, persist_dir=persist_dir)
        return flags

    def insert_nodes(self, nodes: Sequence[BaseNode], persist_dir: "Optional[str | Path]" = None) -> None:
        """Add units of :class:`MultiGranularityNodeParser`; units of an indexed document
        replace all of its units. Not for ``embedding_mode="sentences"`` (needs documents)."""
        from llama_index_ext_causalrag.multigranularity.index import _unit_embeddings

        units = require_units(nodes, f"{type(self).__name__}.insert_nodes")
        if not units:
            return
        if self.embedding_mode == "sentences":
            raise ValueError(
                "insert_nodes cannot embed units of an index with embedding_mode='sentences' (it "
                "embeds documents' sentences); use index.insert(documents)."
            )
        up.check_insert_embedder(type(self).__name__, self._built_with, self._embed_model)
        emb = _unit_embeddings(units, self._embed_model, self.embedding_mode, False)
        self._apply(units, emb, unit_tokens(units, self.bm25_params), persist_dir=persist_dir)

    def delete_ref_doc(self, ref_doc_id: str, persist_dir: "Optional[str | Path]" = None, **delete_kwargs: Any) -> None:
        """Remove every unit of ``ref_doc_id``; an unknown id logs a warning and does nothing."""
        if ref_doc_id not in up.known_docs(self._state.units):
            up.unknown_ref_doc(type(self).__name__, ref_doc_id)
            return
        self._apply([], None, [], drop=[ref_doc_id], persist_dir=persist_dir)
