"""The dense experts of a :class:`MultiGranularityIndex` served by PostgreSQL's per-granularity
tables (:class:`~llama_index_ext_causalrag.storage.pg_lists.GranularityTables`).

One :class:`GranularityListExpert` per granularity; they share one ``GranularityTables``, so the
fusion retriever sends every list of a query at once and works while they come back
(:func:`start_lists`). The
tables answer row ids and similarities; the nodes are the index's units, already in memory.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.storage.pg_lists import GranularityTables
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import check_query, check_top_k


class GranularityListExpert(BaseRetriever):
    """Dense top-k of granularity ``g`` from ``tables``; ``nodes``: the index's units by node id."""

    def __init__(self, tables: GranularityTables, g: int, embed_model: BaseEmbedding, nodes: Mapping[str, BaseNode],
                 row_ids: RowIds, similarity_top_k: int = 10) -> None:
        check_top_k(similarity_top_k)
        self.tables, self.g, self.embed_model = tables, int(g), embed_model
        self._nodes, self._row_ids = nodes, row_ids
        self.similarity_top_k = similarity_top_k
        self.name = f"dense@{g}"
        super().__init__()

    def with_top_k(self, similarity_top_k: int) -> "GranularityListExpert":
        return GranularityListExpert(self.tables, self.g, self.embed_model, self._nodes, self._row_ids, similarity_top_k)

    def embed_query(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is None:
            query_bundle.embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)

    def ranked(self, rows: Sequence[str], sims: Sequence[float]) -> Tuple[List[BaseNode], np.ndarray]:
        """The list's best ``similarity_top_k`` nodes and scores, by (score desc, node id desc).
        Rows of units this index does not hold (another process's update since it was opened) are
        left out: the index answers from the state it holds."""
        known = [(i, float(x)) for i, x in ((self._row_ids.node_id(r), x) for r, x in zip(rows, sims)) if i in self._nodes]
        ids = [i for i, _ in known]
        s = np.asarray([x for _, x in known], dtype=np.float64)
        order = top_k_by_score_then_id(s, lambda i: ids[i], self.similarity_top_k, margin=TIE_MARGIN)
        return [self._nodes[ids[i]] for i in order], s[order]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "GranularityListExpert")
        rows, sims = self.tables.query(self.embed_query(query_bundle), self.similarity_top_k + TIE_MARGIN,
                                       only=[self.g])[self.g]
        nodes, scores = self.ranked(rows, sims)
        return [annotate(NodeWithScore(node=n, score=float(s)), expert=self.name, scores={self.name: float(s)}, rank=r)
                for r, (n, s) in enumerate(zip(nodes, scores), start=1)]


def start_lists(experts: Sequence[GranularityListExpert],
                qvec: np.ndarray) -> Callable[[], Dict[int, Tuple[List[BaseNode], np.ndarray]]]:
    """Every expert's list for ``qvec``, by granularity, sent now to their shared tables; the
    returned function waits for the answer."""
    k = max(e.similarity_top_k for e in experts) + TIE_MARGIN
    pending = experts[0].tables.start(qvec, k, only=[e.g for e in experts])

    def result() -> Dict[int, Tuple[List[BaseNode], np.ndarray]]:
        found = pending()
        return {e.g: e.ranked(*found[e.g]) for e in experts}

    return result


__all__ = ["GranularityListExpert", "start_lists"]
