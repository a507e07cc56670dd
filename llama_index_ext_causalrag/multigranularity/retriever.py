"""EntropyFusionRetriever: confidence-weighted fusion of (expert, granularity) candidate lists."""

from __future__ import annotations

import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.choices import check_choice
from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.entropy import (
    DocumentPool,
    FusionResult,
    Weighting,
    evidence_utility,
    fuse,
    pool_by_document,
)
from llama_index_ext_causalrag.multigranularity.feedback import Feedback
from llama_index_ext_causalrag.multigranularity.source import CandidateSource, ExpertSource, ListKey, Ranked
from llama_index_ext_causalrag.multigranularity.stages import FUSION, check_feedback
from llama_index_ext_causalrag.multigranularity.windows import document_of_unit
from llama_index_ext_causalrag.storage.filters import check_filters
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, annotate
from llama_index_ext_causalrag.validation import caller, check_finite, check_query, check_top_k, public_call

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "umgp")


class EntropyFusionRetriever(ExplainMixin, BaseRetriever):
    """UMG-RAG fusion (Jung & Wang 2026): one dense and one sparse expert per granularity.

    Each list holds its top ``candidates_per_list`` units with raw scores. Scores are
    min-max normalised into a distribution ``p``, the list's confidence is
    ``c = 1 - H(p) / log n``, the mixture is ``P(u) = sum c p(u) / sum c`` and units are ranked
    by ``R(u) = P(u) / len_tokens(u) ** length_exponent``. ``experts`` maps an expert name to
    ``{granularity: retriever}`` (:class:`DenseExpert` and :class:`SparseExpert` are scored
    directly over NumPy arrays, one query embedding shared by all dense experts; any other
    ``BaseRetriever``, e.g. ``VectorStoreIndex.as_retriever``, through ``retrieve``), or is a
    :class:`CandidateSource` (a store-backed index's: the store computes the lists). ``filters``
    (LlamaIndex's ``MetadataFilters``) go into every list before its top-k. Returned nodes carry
    provenance: per-list score and confidence, ``P``, ``R`` and rank.
    """

    def __init__(
        self,
        experts: Union[Mapping[str, Mapping[int, BaseRetriever]], CandidateSource],
        similarity_top_k: int = 10,
        candidates_per_list: int = FUSION.candidates_per_list,
        weighting: Weighting = FUSION.weighting,
        length_exponent: float = FUSION.length_exponent,
        filters: Optional[MetadataFilters] = None,
        feedback: Optional[Feedback] = None,
        pool_documents: bool = False,
        document_pool: DocumentPool = "units",
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        check_top_k(similarity_top_k)
        check_top_k(candidates_per_list, "candidates_per_list")
        check_finite(length_exponent, "length_exponent", "0.5 is the paper's sqrt, 0 disables it")
        check_choice(weighting, "weighting", Weighting)
        check_choice(document_pool, "document_pool", DocumentPool)
        if length_exponent < 0:
            raise ValueError(
                f"length_exponent must be >= 0, got {length_exponent!r}; 0.5 is the paper's sqrt, 0 disables it."
            )
        feedback = feedback if feedback is not None else Feedback()
        check_feedback(feedback.dense, feedback.terms, feedback.weight, feedback.depth)
        self._source: CandidateSource = experts if isinstance(experts, CandidateSource) else ExpertSource(experts)
        if isinstance(self._source, ExpertSource):
            self._source.feedback = feedback
        elif feedback.active:
            logger.warning(
                "EntropyFusionRetriever: pseudo-relevance feedback needs the lists in the process; a "
                "store's lists (%s) are searched once, without it.",
                type(self._source).__name__,
            )
        self.feedback = feedback
        self.pool_documents = pool_documents
        self.document_pool = document_pool
        self.similarity_top_k = similarity_top_k
        self.candidates_per_list = candidates_per_list
        self.weighting = weighting
        self.length_exponent = length_exponent
        with public_call(caller("EntropyFusionRetriever")):
            self.filters = check_filters(filters)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    EXPLAIN_METHOD = "umgp"

    def _explain_options(self) -> Dict[str, object]:
        return {
            "similarity_top_k": self.similarity_top_k,
            "candidates_per_list": self.candidates_per_list,
            "weighting": self.weighting,
            "length_exponent": self.length_exponent,
            "feedback": vars(self.feedback),
            "pool_documents": self.pool_documents,
            "document_pool": self.document_pool,
            "lists": self._source.describe(),
        }

    @property
    def source(self) -> CandidateSource:
        """Where the candidate lists come from."""
        return self._source

    @property
    def experts(self) -> List[Tuple[str, int, BaseRetriever]]:
        """``(expert, granularity, retriever)`` of a fusion over retrievers (empty over a store's source)."""
        return self._source.experts if isinstance(self._source, ExpertSource) else []

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "EntropyFusionRetriever")
        return self._source.consistent(
            lambda: self._fuse(self._source.lists(query_bundle, self.candidates_per_list, self.filters), query_bundle)
        )

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "EntropyFusionRetriever")

        async def read() -> List[NodeWithScore]:
            lists = await self._source.alists(query_bundle, self.candidates_per_list, self.filters)
            return self._fuse(lists, query_bundle)

        return await self._source.aconsistent(read)

    # ---- fusion ----------------------------------------------------------------------
    def _lists_detail(self, keys: List[str], cand: Sequence[Tuple[np.ndarray, np.ndarray]], res: FusionResult) -> Dict:
        rows = [
            {"list": k, "candidates": int(idx.size), "confidence": float(c), "weight": float(w)}
            for k, (idx, _), c, w in zip(keys, cand, res.confidences, res.weights)
        ]
        return {
            "took": {"lists": len(keys), "candidates_per_list": self.candidates_per_list},
            "decided": {"lists": rows},
            "why": f"Each (expert, granularity) list weighs its entropy confidence c = 1 - H(p)/log n "
            f"({self.weighting} weighting); a peaked list counts more than a flat one.",
        }

    def _fusion_detail(
        self, ids: List[str], order: List[int], P: np.ndarray, R: np.ndarray, lengths: np.ndarray
    ) -> Dict:
        top = [{"id": ids[i], "P": float(P[i]), "R": float(R[i]), "tokens": int(lengths[i])} for i in order]
        return {
            "took": {"units": len(ids), "similarity_top_k": self.similarity_top_k},
            "decided": {"ranking": top},
            "why": f"Units ranked by R = P / tokens^{self.length_exponent:g}: the weighted mixture P, "
            "penalised by length; the best similarity_top_k with P > 0 go on.",
        }

    def _fuse(self, found: Mapping[ListKey, Ranked], query_bundle: QueryBundle) -> List[NodeWithScore]:
        keys = [k for k in self._source.keys if k in found]
        pos: Dict[str, int] = {}
        ids: List[str] = []
        known: Dict[str, BaseNode] = {}
        length: List[float] = []
        cand: List[Tuple[np.ndarray, np.ndarray]] = []
        for key in keys:
            ranked = found[key]
            idx = []
            for j, uid in enumerate(ranked.ids):
                i = pos.get(uid)
                if i is None:
                    i = pos[uid] = len(ids)
                    ids.append(uid)
                    length.append(float(ranked.n_tokens[j]))
                    if ranked.nodes is not None:
                        known[uid] = ranked.nodes[j]
                idx.append(i)
            cand.append((np.asarray(idx, dtype=np.int64), np.asarray(ranked.scores, dtype=np.float64)))
        if not ids:
            logger.info("EntropyFusionRetriever: no expert returned a candidate for %r.", query_bundle.query_str)
            return []
        res = fuse(cand, len(ids), weighting=self.weighting)
        lengths = np.asarray(length, dtype=np.float64)
        R = evidence_utility(res.P, lengths, self.length_exponent)
        # ties (duplicate texts) by node id, descending, as every list above: the same order in memory and in a store
        order = [i for i in top_k_by_score_then_id(R, lambda i: ids[i], self.similarity_top_k) if res.P[i] > 0]
        doc_of: Dict[int, str] = {}
        doc_P: Dict[str, float] = {}
        if self.pool_documents:
            order, doc_of, doc_P = self._pooled(ids, known, order, res, R, cand)
        names = [f"{e}@{g}" for e, g in keys]
        _stages.stage(
            "candidate_lists", {"lists": len(keys), "units": len(ids)}, lambda: self._lists_detail(names, cand, res)
        )
        _stages.stage(
            "entropy_fusion",
            {"units": len(ids), "returned": len(order)},
            lambda: self._fusion_detail(ids, order, res.P, R, lengths),
        )
        missing = [ids[i] for i in order if ids[i] not in known]
        if missing:  # a store's lists: the nodes of the kept units only, in one read
            known.update(self._source.nodes(missing))
        conf = {k: round(float(c), 6) for k, c in zip(names, res.confidences)}
        per_unit: Dict[int, Dict[str, float]] = {}
        wanted = np.zeros(len(ids), dtype=bool)
        wanted[order] = True
        for k, (idx, scores) in zip(names, cand):
            hit = wanted[idx]
            for i, s in zip(idx[hit].tolist(), scores[hit].tolist()):
                per_unit.setdefault(i, {})[k] = s
        out = []
        for rank, i in enumerate(order, start=1):
            u = known.get(ids[i])
            if u is None:  # deleted between the lists and the read: left out, said once
                logger.info("EntropyFusionRetriever: unit %r left the store during the query; skipped.", ids[i])
                continue
            if PROVENANCE_KEY in u.metadata:  # a generic expert annotated it; start clean
                meta = {k: v for k, v in u.metadata.items() if k != PROVENANCE_KEY}
                u = u.model_copy(update={"metadata": meta})
            out.append(
                annotate(
                    NodeWithScore(node=u, score=float(R[i])),
                    method="umg",
                    stage="entropy_fusion",
                    scores=per_unit.get(i, {}),
                    confidences={k: conf[k] for k in per_unit.get(i, {})},
                    weighting=self.weighting,
                    P=float(res.P[i]),
                    R=float(R[i]),
                    n_tokens=int(lengths[i]),
                    rank=rank,
                    **({"doc_P": round(doc_P[doc_of[i]], 9)} if i in doc_of else {}),
                )
            )
        return out

    def _pooled(
        self,
        ids: List[str],
        known: Mapping[str, BaseNode],
        order: List[int],
        res: FusionResult,
        R: np.ndarray,
        cand: Sequence[Tuple[np.ndarray, np.ndarray]],
    ) -> Tuple[List[int], Dict[int, str], Dict[str, float]]:
        """Document evidence pooling: a document's ``doc_P`` is the summed ``P`` of all its fused
        units (``document_pool="units"``: every list, every granularity) or, with ``"lists"``, the
        weighted sum over lists of each list's best unit of the document (one vote per list, as a
        flat retriever ranks a document by its best chunk); the best unit (by ``R``) of each of the
        top ``similarity_top_k`` documents by ``doc_P`` joins ``order`` if none of its units is in it.
        A unit whose node the source does not hold (a store's) is pooled by the document its id names."""
        P = res.P
        doc_of = {i: d for i, d in enumerate(self._documents(ids, known)) if d is not None and P[i] > 0}
        pool = pool_by_document(doc_of, res, cand, self.document_pool)
        best: Dict[str, int] = {}
        for i, d in doc_of.items():
            b = best.get(d)
            if b is None or (R[i], ids[i]) > (R[b], ids[b]):
                best[d] = i
        have = {doc_of.get(i) for i in order}
        top_docs = sorted(pool, key=lambda d: (-pool[d], d))[: self.similarity_top_k]
        extra = [best[d] for d in top_docs if d not in have]
        return order + extra, doc_of, pool

    @staticmethod
    def _documents(ids: Sequence[str], known: Mapping[str, BaseNode]) -> List[Optional[str]]:
        """The document of each unit: its node's ``ref_doc_id``, else the one its parser id names."""
        return [(known[u].ref_doc_id or "") if u in known else document_of_unit(u) for u in ids]
