"""The dense experts of a :class:`MultiGranularityIndex` served by a store's per-granularity tables
(what :meth:`~llama_index_ext_causalrag.storage.drivers.StoreDriver.granularity_lists` gives:
PostgreSQL's ``GranularityTables``).

One :class:`GranularityListExpert` per granularity; they share one tables object, so the
fusion's source (:class:`TablesSource`) sends every list of a query at once and scores BM25
while they come back. The
tables answer row ids and similarities; the nodes are the index's units, already in memory.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.source import CandidateSource, ExpertSource, ListKey, Ranked
from llama_index_ext_causalrag.storage.row_ids import RowIds
from llama_index_ext_causalrag.text.provenance import annotate
from llama_index_ext_causalrag.validation import check_query, check_top_k


class GranularityListExpert(BaseRetriever):
    """Dense top-k of granularity ``g`` from ``tables``; ``nodes``: the index's units by node id."""

    def __init__(
        self,
        tables: Any,
        g: int,
        embed_model: BaseEmbedding,
        nodes: Mapping[str, BaseNode],
        row_ids: RowIds,
        similarity_top_k: int = 10,
    ) -> None:
        check_top_k(similarity_top_k)
        self.tables, self.g, self.embed_model = tables, int(g), embed_model
        self._nodes, self._row_ids = nodes, row_ids
        self.similarity_top_k = similarity_top_k
        self.name = f"dense@{g}"
        super().__init__()

    def with_top_k(self, similarity_top_k: int) -> "GranularityListExpert":
        return GranularityListExpert(
            self.tables, self.g, self.embed_model, self._nodes, self._row_ids, similarity_top_k
        )

    def embed_query(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is None:
            query_bundle.embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)

    def ranked(self, rows: Sequence[str], sims: Sequence[float]) -> Tuple[List[BaseNode], np.ndarray]:
        """The list's best ``similarity_top_k`` nodes and scores, by (score desc, node id desc).
        Rows of units this index does not hold (another process's update since it was opened) are
        left out: the index answers from the state it holds."""
        known = [
            (i, float(x)) for i, x in ((self._row_ids.node_id(r), x) for r, x in zip(rows, sims)) if i in self._nodes
        ]
        ids = [i for i, _ in known]
        s = np.asarray([x for _, x in known], dtype=np.float64)
        order = top_k_by_score_then_id(s, lambda i: ids[i], self.similarity_top_k, margin=TIE_MARGIN)
        return [self._nodes[ids[i]] for i in order], s[order]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "GranularityListExpert")
        rows, sims = self.tables.query(
            self.embed_query(query_bundle), self.similarity_top_k + TIE_MARGIN, only=[self.g]
        )[self.g]
        nodes, scores = self.ranked(rows, sims)
        return [
            annotate(NodeWithScore(node=n, score=float(s)), expert=self.name, scores={self.name: float(s)}, rank=r)
            for r, (n, s) in enumerate(zip(nodes, scores), start=1)
        ]


class TablesSource(ExpertSource):
    """An :class:`ExpertSource` whose :class:`GranularityListExpert` s share one set of tables:
    their lists go out at once, before the other experts are scored, and are waited for last."""

    def lists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        if filters is not None:
            raise ValueError(
                "filters: an index on per-granularity tables written before the 'served' layout keeps no metadata "
                "beside its lists; rebuild it into an empty table to filter queries in the store."
            )
        qvec = self.embed(query_bundle)
        tabled = [(e, g, r) for e, g, r in self._experts if isinstance(r, GranularityListExpert)]
        pending = None
        if tabled:
            want = max(r.similarity_top_k for _, _, r in tabled) + TIE_MARGIN
            pending = tabled[0][2].tables.start(qvec, want, only=[r.g for _, _, r in tabled])
        out = {
            (e, g): self._one(r, query_bundle, qvec, k, None)
            for e, g, r in self._experts
            if not isinstance(r, GranularityListExpert)
        }
        if pending is not None:
            found = pending()
            for e, g, r in tabled:
                out[(e, g)] = Ranked.of_nodes(*r.ranked(*found[r.g]))
        return {key: out[key] for key in self.keys}

    async def alists(
        self, query_bundle: QueryBundle, k: int, filters: Optional[MetadataFilters] = None
    ) -> Dict[ListKey, Ranked]:
        """The lists in a worker thread (they are sent together), as :class:`CandidateSource` does."""
        return await CandidateSource.alists(self, query_bundle, k, filters)


__all__ = ["GranularityListExpert", "TablesSource"]
