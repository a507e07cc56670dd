"""EntropyFusionRetriever: confidence-weighted fusion of (expert, granularity) candidate lists."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert, VectorStoreExpert
from llama_index_ext_causalrag.explain import ExplainMixin, StageRecorder
from llama_index_ext_causalrag.fusion import top_k_by_score_then_id
from llama_index_ext_causalrag.multigranularity.entropy import WEIGHTINGS, FusionResult, evidence_utility, fuse
from llama_index_ext_causalrag.multigranularity.lists import GranularityListExpert, start_lists
from llama_index_ext_causalrag.multigranularity.windows import N_TOKENS_KEY
from llama_index_ext_causalrag.text.provenance import PROVENANCE_KEY, annotate
from llama_index_ext_causalrag.text.tokens import count_tokens
from llama_index_ext_causalrag.validation import check_finite, check_query, check_top_k

logger = logging.getLogger(__name__)
_stages = StageRecorder(__name__, "umgp")

# experts that score a query embedding (one embedding serves them all)
_DENSE = (DenseExpert, VectorStoreExpert, GranularityListExpert)

# one candidate list: (expert name, granularity, nodes, raw scores)
CandidateList = Tuple[str, int, List[BaseNode], np.ndarray]


def _n_tokens(node: BaseNode) -> int:
    n = node.metadata.get(N_TOKENS_KEY)
    if n is None:
        n = count_tokens(node.get_content(metadata_mode=MetadataMode.NONE))
    return int(n)


class EntropyFusionRetriever(ExplainMixin, BaseRetriever):
    """UMG-RAG fusion (Jung & Wang 2026): one dense and one sparse expert per granularity.

    Each expert returns its top ``candidates_per_list`` units with raw scores. Scores are
    min-max normalised into a distribution ``p``, the list's confidence is
    ``c = 1 - H(p) / log n``, the mixture is ``P(u) = sum c p(u) / sum c`` and units are ranked
    by ``R(u) = P(u) / len_tokens(u) ** length_exponent``. ``experts`` maps an expert name to
    ``{granularity: retriever}``; :class:`DenseExpert` and :class:`SparseExpert` are scored
    directly over NumPy arrays (one query embedding shared by all dense experts), any other
    ``BaseRetriever`` (e.g. ``VectorStoreIndex.as_retriever``) through ``retrieve``. Returned
    nodes carry provenance: per-list score and confidence, ``P``, ``R`` and rank.
    """

    def __init__(
        self,
        experts: Mapping[str, Mapping[int, BaseRetriever]],
        similarity_top_k: int = 10,
        candidates_per_list: int = 100,
        weighting: str = "entropy",
        length_exponent: float = 0.5,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
    ) -> None:
        check_top_k(similarity_top_k)
        check_top_k(candidates_per_list, "candidates_per_list")
        check_finite(length_exponent, "length_exponent", "0.5 is the paper's sqrt, 0 disables it")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}.")
        if length_exponent < 0:
            raise ValueError(
                f"length_exponent must be >= 0, got {length_exponent!r}; 0.5 is the paper's sqrt, 0 disables it."
            )
        flat = [(e, int(g), r) for e, by_g in experts.items() for g, r in sorted(by_g.items())]
        if not flat:
            raise ValueError(
                "experts is empty; pass e.g. {'dense': {2: DenseExpert(...)}, 'sparse': {2: SparseExpert(...)}} "
                "or use MultiGranularityIndex.as_retriever()."
            )
        self._experts: List[Tuple[str, int, BaseRetriever]] = flat
        self.similarity_top_k = similarity_top_k
        self.candidates_per_list = candidates_per_list
        self.weighting = weighting
        self.length_exponent = length_exponent
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    EXPLAIN_METHOD = "umgp"

    def _explain_options(self) -> Dict[str, object]:
        return {"similarity_top_k": self.similarity_top_k, "candidates_per_list": self.candidates_per_list,
                "weighting": self.weighting, "length_exponent": self.length_exponent,
                "lists": [f"{e}@{g}" for e, g, _ in self._experts]}

    @property
    def experts(self) -> List[Tuple[str, int, BaseRetriever]]:
        return list(self._experts)

    # ---- candidate lists -------------------------------------------------------------
    def _dense_list(self, r: DenseExpert, qvec: np.ndarray) -> Tuple[List[BaseNode], np.ndarray]:
        s, nodes = r.score_all(qvec), r.nodes
        idx = top_k_by_score_then_id(s, lambda i: nodes[i].id_, self.candidates_per_list)
        return [nodes[i] for i in idx], s[idx].astype(np.float64)

    def _sparse_list(self, r: SparseExpert, query: str) -> Tuple[List[BaseNode], np.ndarray]:
        s, nodes = r.score_all(query), r.nodes
        idx = [i for i in top_k_by_score_then_id(s, lambda i: nodes[i].id_, self.candidates_per_list) if s[i] > 0]
        return [nodes[i] for i in idx], s[idx].astype(np.float64) if idx else np.zeros(0)

    @staticmethod
    def _generic_list(nws: Sequence[NodeWithScore]) -> Tuple[List[BaseNode], np.ndarray]:
        nodes = [n.node for n in nws]
        scores = np.asarray([n.score if n.score is not None else 0.0 for n in nws], dtype=np.float64)
        return nodes, scores

    def _embed_for_dense(self, query_bundle: QueryBundle) -> Optional[np.ndarray]:
        for _, _, r in self._experts:
            if isinstance(r, _DENSE):
                return r.embed_query(query_bundle)
        return None

    def _start_table_lists(self, qvec: Optional[np.ndarray]) -> Callable[[], Dict[int, Tuple[List[BaseNode], np.ndarray]]]:
        """The lists of the experts served by per-granularity tables, sent now; the returned
        function waits for them (the other lists are scored meanwhile)."""
        table_experts = [r for _, _, r in self._experts if isinstance(r, GranularityListExpert)]
        return start_lists(table_experts, qvec) if table_experts else dict  # type: ignore[arg-type,return-value]

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "EntropyFusionRetriever")
        qvec = self._embed_for_dense(query_bundle)
        pending = self._start_table_lists(qvec)
        found: Dict[int, Tuple[List[BaseNode], np.ndarray]] = {}
        for i, (e, g, r) in enumerate(self._experts):
            if isinstance(r, DenseExpert):
                found[i] = self._dense_list(r, qvec)
            elif isinstance(r, SparseExpert):
                found[i] = self._sparse_list(r, query_bundle.query_str)
            elif not isinstance(r, GranularityListExpert):
                found[i] = self._generic_list(r.retrieve(query_bundle))
        tables = pending()
        lists: List[CandidateList] = [
            (e, g, *(tables[r.g] if isinstance(r, GranularityListExpert) else found[i]))
            for i, (e, g, r) in enumerate(self._experts)
        ]
        return self._fuse(lists, query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        check_query(query_bundle, "EntropyFusionRetriever")
        dense = [r for _, _, r in self._experts if isinstance(r, _DENSE)]
        if dense and query_bundle.embedding is None:
            query_bundle.embedding = await dense[0].embed_model.aget_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        qvec = None if query_bundle.embedding is None else np.asarray(query_bundle.embedding, dtype=np.float32)
        # only an index on per-granularity tables queries them (sent now, awaited in a thread)
        tables = asyncio.create_task(asyncio.to_thread(self._start_table_lists(qvec))) \
            if any(isinstance(r, GranularityListExpert) for r in dense) else None

        async def run(r: BaseRetriever) -> Tuple[List[BaseNode], np.ndarray]:
            if isinstance(r, GranularityListExpert):
                return (await tables)[r.g]  # type: ignore[misc]
            if isinstance(r, DenseExpert):
                return await asyncio.to_thread(
                    self._dense_list, r, np.asarray(query_bundle.embedding, dtype=np.float32)
                )
            if isinstance(r, SparseExpert):
                return await asyncio.to_thread(self._sparse_list, r, query_bundle.query_str)
            return self._generic_list(await r.aretrieve(query_bundle))

        results = await asyncio.gather(*[run(r) for _, _, r in self._experts])
        lists = [(e, g, n, s) for (e, g, _), (n, s) in zip(self._experts, results)]
        return self._fuse(lists, query_bundle)

    # ---- fusion ----------------------------------------------------------------------
    def _lists_detail(self, keys: List[str], cand: Sequence[Tuple[np.ndarray, np.ndarray]], res: FusionResult) -> Dict:
        rows = [{"list": k, "candidates": int(idx.size), "confidence": float(c), "weight": float(w)}
                for k, (idx, _), c, w in zip(keys, cand, res.confidences, res.weights)]
        return {"took": {"lists": len(keys), "candidates_per_list": self.candidates_per_list},
                "decided": {"lists": rows},
                "why": f"Each (expert, granularity) list weighs its entropy confidence c = 1 - H(p)/log n "
                       f"({self.weighting} weighting); a peaked list counts more than a flat one."}

    def _fusion_detail(self, units: List[BaseNode], order: List[int], P: np.ndarray, R: np.ndarray,
                       lengths: np.ndarray) -> Dict:
        top = [{"id": units[i].id_, "P": float(P[i]), "R": float(R[i]), "tokens": int(lengths[i])} for i in order]
        return {"took": {"units": len(units), "similarity_top_k": self.similarity_top_k},
                "decided": {"ranking": top},
                "why": f"Units ranked by R = P / tokens^{self.length_exponent:g}: the weighted mixture P, "
                       "penalised by length; the best similarity_top_k with P > 0 go on."}

    def _fuse(self, lists: Sequence[CandidateList], query_bundle: QueryBundle) -> List[NodeWithScore]:
        pos: Dict[str, int] = {}
        units: List[BaseNode] = []
        cand: List[Tuple[np.ndarray, np.ndarray]] = []
        for _, _, nodes, scores in lists:
            idx = []
            for n in nodes:
                i = pos.get(n.id_)  # id_: node_id without the property call, on ~1,000 nodes a query
                if i is None:
                    i = pos[n.id_] = len(units)
                    units.append(n)
                idx.append(i)
            cand.append((np.asarray(idx, dtype=np.int64), np.asarray(scores, dtype=np.float64)))
        if not units:
            logger.info("EntropyFusionRetriever: no expert returned a candidate for %r.", query_bundle.query_str)
            return []
        res = fuse(cand, len(units), weighting=self.weighting)
        lengths = np.asarray([_n_tokens(u) for u in units], dtype=np.float64)
        R = evidence_utility(res.P, lengths, self.length_exponent)
        # ties (duplicate texts) by node id, descending, as every list above: the same order in memory and in a store
        order = [i for i in top_k_by_score_then_id(R, lambda i: units[i].id_, self.similarity_top_k) if res.P[i] > 0]
        keys = [f"{e}@{g}" for e, g, _, _ in lists]
        _stages.stage("candidate_lists", {"lists": len(lists), "units": len(units)},
                      lambda: self._lists_detail(keys, cand, res))
        _stages.stage("entropy_fusion", {"units": len(units), "returned": len(order)},
                      lambda: self._fusion_detail(units, order, res.P, R, lengths))
        conf = {k: round(float(c), 6) for k, c in zip(keys, res.confidences)}
        per_unit: Dict[int, Dict[str, float]] = {}
        wanted = np.zeros(len(units), dtype=bool)
        wanted[order] = True
        for k, (idx, scores) in zip(keys, cand):
            hit = wanted[idx]
            for i, s in zip(idx[hit].tolist(), scores[hit].tolist()):
                per_unit.setdefault(i, {})[k] = s
        out = []
        for rank, i in enumerate(order, start=1):
            u = units[i]
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
                )
            )
        return out
