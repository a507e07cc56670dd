"""The query's sentence-level scores inside a passage: what evidence-aware fitting reads.

The index already holds them, so fitting searches nothing again. Lexical: the BM25 terms of
each sentence against the query's, weighted by the idf of the finest BM25 index. Dense: an
index built with ``embedding_mode="sentences"`` makes every unit the mean of its sentences, so
its finest units (2-sentence windows, stride 1) are the sentence-level embeddings it keeps;
their cosine with the query embedding the fusion left on the ``QueryBundle``.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode, QueryBundle

from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.multigranularity.fitting import idf_overlap, sentence_evidence, spread_to_sentences

QueryTerms = Tuple[List[str], Dict[str, float]]  # the query's BM25 terms, their idf


class FinestUnitScores:
    """Sentence-level scores from the finest granularity's experts, one query at a time.

    ``dense``: its in-memory :class:`DenseExpert` (None, e.g. a store's list: no dense scores);
    ``sparse``: its :class:`SparseExpert` (anything else, e.g. a store's full-text search: no
    lexical scores).
    """

    def __init__(self, dense: Optional[DenseExpert], sparse: Optional[SparseExpert] = None) -> None:
        self._dense = dense if isinstance(dense, DenseExpert) else None
        self._sparse = sparse if isinstance(sparse, SparseExpert) else None
        self._rows: Optional[Dict[str, np.ndarray]] = None  # document -> its rows, made on the first passage()
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._spans = np.zeros((0, 2), dtype=np.int64)
        self._last: Tuple[Optional[str], QueryTerms] = (None, ([], {}))

    def idf(self, query: str) -> QueryTerms:
        """The query's BM25 terms and their idf over the finest units (``([], {})`` without BM25)."""
        last = self._last
        if last[0] == query:
            return last[1]
        if self._sparse is None:
            return [], {}
        terms = self._sparse.tokenizer(query)
        found = (terms, self._sparse.idf(terms))
        self._last = (query, found)
        return found

    def terms(self, texts: Sequence[str]) -> Optional[List[List[str]]]:
        """The BM25 terms of each of ``texts`` (None without BM25)."""
        return None if self._sparse is None else [self._sparse.tokenizer(t) for t in texts]

    def _query_vector(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is None:  # the fusion embeds the query; a bare postprocessor call may not
            model = self._dense.embed_model  # type: ignore[union-attr]
            query_bundle.embedding = model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        q = np.asarray(query_bundle.embedding, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def _index_rows(self) -> Dict[str, np.ndarray]:
        if self._rows is None:
            nodes = self._dense.nodes  # type: ignore[union-attr]
            self._matrix = self._dense.embeddings  # type: ignore[union-attr]  # one snapshot with the nodes
            by_doc: Dict[str, List[int]] = {}
            for i, n in enumerate(nodes):
                if n.start_char_idx is not None and n.end_char_idx is not None:
                    by_doc.setdefault(n.ref_doc_id or "", []).append(i)
            self._spans = np.asarray([[n.start_char_idx or 0, n.end_char_idx or 0] for n in nodes], dtype=np.int64)
            self._rows = {d: np.asarray(r, dtype=np.int64) for d, r in by_doc.items()}
        return self._rows

    def passage(self, query_bundle: QueryBundle, node: BaseNode) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The finest units inside ``node``'s span: their character spans relative to ``node``'s
        text ``(m, 2)`` and their cosine with the query ``(m,)``; None without dense scores, if
        ``node`` has no span or its document no unit."""
        s, e = node.start_char_idx, node.end_char_idx
        if self._dense is None or s is None or e is None:
            return None
        rows = self._index_rows().get(node.ref_doc_id or "")
        if rows is None:
            return None
        sp = self._spans[rows]
        rows = rows[(sp[:, 0] < e) & (sp[:, 1] > s)]
        if not rows.size:
            return None
        cos = self._matrix[rows] @ self._query_vector(query_bundle)
        return self._spans[rows] - int(s), cos.astype(np.float64)

    def evidence(
        self,
        query_bundle: QueryBundle,
        node: BaseNode,
        sentences: Sequence[Tuple[int, int]],
        prior: np.ndarray,
        free: np.ndarray,
        weights: Tuple[float, float],
    ) -> np.ndarray:
        """:func:`sentence_evidence` of ``node``'s ``sentences`` (character spans in its text):
        ``prior`` re-weighted by their cosine with the query (``weights[0] > 0``) and their
        :func:`idf_overlap` with it (``weights[1] > 0``); a signal this index lacks counts 0."""
        dense = lexical = None
        if weights[0] > 0:
            found = self.passage(query_bundle, node)
            if found is not None:
                dense = spread_to_sentences(np.asarray(sentences, dtype=np.float64), *found)
        if weights[1] > 0:
            terms, idf = self.idf(query_bundle.query_str)
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            sent_terms = self.terms([text[a:b] for a, b in sentences]) if idf else None
            lexical = None if sent_terms is None else idf_overlap(terms, sent_terms, idf)
        return sentence_evidence(prior, dense, lexical, weights, free)
