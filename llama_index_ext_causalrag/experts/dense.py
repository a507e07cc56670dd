"""DenseExpert: exact cosine top-k over one in-memory NumPy matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, NamedTuple, Optional, Sequence

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts._nodes_io import load_nodes, require_nodes, save_nodes
from llama_index_ext_causalrag.experts.expert_updates import ExpertUpdates
from llama_index_ext_causalrag.fusion import DescStr, top_k_indices
from llama_index_ext_causalrag.storage.persistence import (
    array_dim,
    check_embedder,
    embedder_params,
    open_persisted,
    persist_to,
)
from llama_index_ext_causalrag.storage.update_plan import (
    Source,
    check_insert_embedder,
    embed_by_document,
    in_plan_order,
)
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import check_finite_array, check_query, check_top_k, public_method

TIE_MARGIN = 16


_Desc = DescStr  # (score desc, node id desc) orderings


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms == 0, 1.0, norms)).astype(np.float32)


class _DenseState(NamedTuple):
    nodes: List[BaseNode]
    raw: np.ndarray  # (n_nodes, dim) as given
    matrix: np.ndarray  # (n_nodes, dim) unit rows


def _embed_missing(nodes: Sequence[BaseNode], model: BaseEmbedding, show_progress: bool) -> np.ndarray:
    missing = [i for i, n in enumerate(nodes) if n.embedding is None]
    vectors: List[Optional[List[float]]] = [n.embedding for n in nodes]
    if missing:  # one document per batch: a node embeds the same in an insert as in a rebuild
        texts = [nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in missing]
        keys = [nodes[i].ref_doc_id or "" for i in missing]  # nodes without a document: one group
        new = embed_by_document(model, texts, keys, show_progress)
        for i, v in zip(missing, new):
            vectors[i] = v.tolist()
    return np.asarray(vectors, dtype=np.float32)


class DenseExpert(ExpertUpdates, BaseRetriever):
    """Cosine similarity over unit-normalised embeddings, top-k by one matrix product.

    Same ranking and scores as ``VectorStoreIndex(...).as_retriever()`` on the same nodes
    and embeddings, without a vector store round trip. Embeddings come from ``embeddings``
    (shape ``(n_nodes, dim)``), else from ``node.embedding``, else from ``embed_model``.
    ``insert_nodes`` / ``delete_ref_doc`` / ``refresh_ref_docs`` embed only the new nodes.
    """

    @public_method
    def __init__(
        self,
        nodes: Sequence[BaseNode],
        embed_model: Optional[BaseEmbedding] = None,
        embeddings: Optional[np.ndarray] = None,
        similarity_top_k: int = 10,
        show_progress: bool = False,
        name: str = "dense",
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        check_top_k(similarity_top_k)
        nodes = require_nodes(nodes)
        self._embed_model = resolve_embed_model(embed_model)
        self._built_with: Optional[str] = None  # name of the model of stored embeddings, if loaded
        self.similarity_top_k = similarity_top_k
        self.name = name
        self._show_progress = show_progress
        if embeddings is None:
            embeddings = _embed_missing(nodes, self._embed_model, show_progress)
        self._st = self._state(nodes, embeddings)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @staticmethod
    def _state(nodes: List[BaseNode], embeddings: np.ndarray) -> _DenseState:
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(nodes):
            raise ValueError(
                f"embeddings must have shape (n_nodes={len(nodes)}, dim), "
                f"got {embeddings.shape}; pass one row per node."
            )
        check_finite_array(embeddings, "DenseExpert embeddings")
        return _DenseState(nodes, embeddings, _unit_rows(embeddings))

    def _updated(self, plan: List[Source], new_nodes: List[BaseNode]) -> _DenseState:
        check_insert_embedder(self._built_with, self._embed_model)
        st = self._st
        new_raw = _embed_missing(new_nodes, self._embed_model, self._show_progress) if new_nodes else st.raw[:0]
        if new_nodes and new_raw.shape[1] != st.raw.shape[1]:
            raise ValueError(
                f"DenseExpert holds {st.raw.shape[1]}-dimensional embeddings, the inserted nodes have "
                f"{new_raw.shape[1]}; embed them with the index's model."
            )
        rows = [st.raw[i] if side == "old" else new_raw[i] for side, i in plan]
        return self._state(in_plan_order(plan, st.nodes, new_nodes), np.stack(rows))

    @property
    def _raw(self) -> np.ndarray:
        return self._st.raw

    @property
    def embeddings(self) -> np.ndarray:
        """The unit-normalised embedding matrix, shape ``(n_nodes, dim)``."""
        return self._st.matrix

    @property
    def embed_model(self) -> BaseEmbedding:
        return self._embed_model

    def embed_query(self, query_bundle: QueryBundle) -> np.ndarray:
        """The query's embedding (``query_bundle.embedding`` if set), as a float32 vector."""
        if query_bundle.embedding is None:
            query_bundle.embedding = self._embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)

    def score_all(self, query_embedding: np.ndarray) -> np.ndarray:
        """Cosine of the query with every node, shape ``(n_nodes,)``."""
        return self._score(self._st, query_embedding)

    @staticmethod
    def _score(st: _DenseState, query_embedding: np.ndarray) -> np.ndarray:
        q = np.asarray(query_embedding, dtype=np.float32)
        qn = float(np.linalg.norm(q))
        # einsum, not BLAS: right after the embedding model has run (or beside another process),
        # a multi-threaded BLAS matrix-vector product waits for its threads (measured: 33 ms for
        # 16k x 384 against 7 ms single-threaded)
        return np.einsum("ij,j->i", st.matrix, q / (qn if qn > 0 else 1.0))

    def top_k(self, query_embedding: np.ndarray, k: Optional[int] = None) -> List[NodeWithScore]:
        """Top ``k`` by cosine. Candidates come from one float32 matrix product; the best
        ``k + TIE_MARGIN`` are re-scored in float64 with VectorStoreIndex's formula
        (dot / (|q| |e|)) and ordered by (score desc, node id desc), which is how
        ``SimpleVectorStore``'s heap resolves exact ties (duplicate texts)."""
        k = k or self.similarity_top_k
        st = self._st  # one read: a concurrent update swaps the whole state
        cand = top_k_indices(self._score(st, query_embedding), k + TIE_MARGIN)
        q = np.asarray(query_embedding, dtype=np.float64)
        rows = st.raw[cand].astype(np.float64)
        denom = np.linalg.norm(rows, axis=1) * np.linalg.norm(q)
        exact = (rows @ q) / np.where(denom == 0, 1.0, denom)
        order = sorted(range(len(cand)), key=lambda j: (-exact[j], _Desc(st.nodes[cand[j]].node_id)))[:k]
        return [
            annotate(
                NodeWithScore(node=st.nodes[cand[j]], score=float(exact[j])),
                expert=self.name,
                scores={self.name: float(exact[j])},
                rank=r,
            )
            for r, j in enumerate(order, start=1)
        ]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "DenseExpert")
        return self.top_k(self.embed_query(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "DenseExpert")
        if query_bundle.embedding is None:
            query_bundle.embedding = await self._embed_model.aget_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        return self.top_k(np.asarray(query_bundle.embedding, dtype=np.float32))

    def persist(self, persist_dir: str | Path) -> None:
        """``embeddings.npy``, ``nodes.json``, ``params.json`` and ``manifest.json``, swapped in
        atomically (:mod:`llama_index_ext_causalrag.storage.persistence`; no pickle)."""
        st = self._st
        with persist_to(persist_dir, "DenseExpert") as w:
            w.save_array("embeddings.npy", st.raw)
            save_nodes(st.nodes, w.dir / "nodes.json")
            w.rows["nodes"] = len(st.nodes)
            w.params.update(
                similarity_top_k=self.similarity_top_k,
                name=self.name,
                **embedder_params(self._embed_model, array_dim(st.raw)),
            )

    @classmethod
    @public_method
    def from_persist_dir(
        cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None, **overrides: Any
    ) -> "DenseExpert":
        """Load without re-embedding; ``embed_model`` (checked against the stored dimension)
        only embeds queries."""
        persisted = open_persisted(persist_dir, "DenseExpert", "DenseExpert.persist(dir)")
        model = resolve_embed_model(embed_model)
        check_embedder(persisted.params, model, persisted.dir)
        kwargs = {"similarity_top_k": persisted.params["similarity_top_k"], "name": persisted.params["name"]}
        kwargs.update(overrides)
        nodes = load_nodes(persisted.path("nodes.json"))
        persisted.check_rows("nodes", len(nodes))
        out = cls(nodes, embed_model=model, embeddings=persisted.array("embeddings.npy"), **kwargs)
        out._built_with = persisted.params.get("embed_model")
        return out
