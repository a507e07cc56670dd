"""What queries of a :class:`MultiGranularityIndex` read: one :class:`MGState`, swapped whole.

All that queries read (units, embeddings, per-unit BM25 tokens, the experts) is one
:class:`MGState`, replaced by one assignment once the new state is complete; an update that
fails part-way leaves the index as it was. Retrievers made before an update keep answering
from the state they were made on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore

from llama_index_ext_causalrag.experts import DenseExpert, SparseExpert
from llama_index_ext_causalrag.multigranularity.sentence_scores import FinestUnitScores
from llama_index_ext_causalrag.multigranularity.stages import EXPERT_NAMES
from llama_index_ext_causalrag.multigranularity.windows import units_by_granularity
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.unit_docstore import UnitDocumentStore

OWNER = "MultiGranularityIndex"


@dataclass(frozen=True)
class MGChange:
    """What an update brings: new ``units`` (with their ``embeddings`` and BM25 ``tokens``,
    replacing every unit of their documents) and the documents it ``drop`` s."""

    units: List[BaseNode]
    embeddings: Optional[np.ndarray]
    tokens: List[List[str]]
    drop: Tuple[str, ...] = ()


def check_lists(
    expert_names: Sequence[str], granularities: Optional[Sequence[int]], have: Sequence[int]
) -> Tuple[Tuple[str, ...], Tuple[int, ...]]:
    """``(expert names, granularities)`` of a fusion over an index with granularities ``have``
    (``granularities`` None: all); a name or a size the index lacks is a ``ValueError``."""
    bad = [e for e in expert_names if e not in EXPERT_NAMES]
    if bad or not expert_names:
        raise ValueError(f"expert_names must be a non-empty subset of {EXPERT_NAMES}, got {list(expert_names)!r}.")
    gs = tuple(int(g) for g in granularities) if granularities is not None else tuple(have)
    missing = [g for g in gs if g not in have]
    if missing or not gs:
        raise ValueError(f"granularities {list(gs)!r} are not all in this index (it has {list(have)!r}).")
    return tuple(expert_names), gs


def state_experts(
    st: "MGState", expert_names: Sequence[str], granularities: Optional[Sequence[int]]
) -> Dict[str, Dict[int, Any]]:
    """The experts of ``st`` by name and granularity (``granularities`` None: all), checked."""
    names, gs = check_lists(expert_names, granularities, list(st.by_g))
    pool = {"dense": st.dense, "sparse": st.sparse}
    return {e: {g: pool[e][g] for g in gs} for e in names}


def state_tokens(st: "MGState", params: Any) -> List[List[str]]:
    """The per-unit BM25 tokens of ``st`` (made once for a state loaded from a folder written before they were)."""
    if st.tokens is None:
        st.tokens = params.tokens(st.units)
    return st.tokens


def merged(
    backend: Any,
    params: Any,
    old: "MGState",
    change: MGChange,
    embeddings_of: Callable[[Sequence[Any]], Optional[np.ndarray]],
) -> "MGState":
    """The state after ``change``: old units in order (replaced or dropped by document), new ones
    appended; ``embeddings_of(plan)``: the merged units' embeddings, as ``backend.make_state`` takes them."""
    plan = update_plan.merge_plan(old.units, change.units, change.drop)
    if not plan:
        raise update_plan.cannot_empty(", ".join(change.drop))
    dim = backend.embed_dim(old)
    if change.units and change.embeddings is not None and change.embeddings.shape[1] != dim:
        raise ValueError(
            f"{OWNER} holds {dim}-dimensional embeddings, the new units have {change.embeddings.shape[1]}; "
            "embed them with the index's model."
        )
    tokens = update_plan.in_plan_order(plan, state_tokens(old, params), change.tokens) if backend.needs_tokens else None
    return backend.make_state(
        params, update_plan.in_plan_order(plan, old.units, change.units), embeddings_of(plan), tokens
    )


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
        docstore: Optional[BaseDocumentStore] = None,
    ) -> None:
        """``dense`` / ``sparse``: one retriever per granularity to use instead of in-memory
        :class:`DenseExpert` s / :class:`SparseExpert` s (e.g. filtered queries of a vector store;
        with ``sparse`` no BM25 is built). ``docstore``: where parents are fetched (by default a
        :class:`UnitDocumentStore` of ``units``, made on first use)."""
        self.units, self.embeddings, self.tokens = units, embeddings, tokens
        self.by_g = units_by_granularity(units)
        self.dense: Dict[int, DenseExpert] = {}
        self.sparse: Dict[int, SparseExpert] = {}
        for g, idx in self.by_g.items():
            nodes = [units[i] for i in idx]
            self.dense[g] = (
                dense[g]
                if dense is not None
                else DenseExpert(nodes, embed_model=embed_model, embeddings=embeddings[idx], name=f"dense@{g}")
            )
            if sparse is not None:
                self.sparse[g] = sparse[g]
                continue
            toks = None if tokens is None else [tokens[i] for i in idx]
            self.sparse[g] = SparseExpert(
                nodes, name=f"sparse@{g}", _bm25=(bm25 or {}).get(g), _tokens=toks, **bm25_params
            )
        self._docstore = docstore
        self._finest: Optional[FinestUnitScores] = None

    def known_docs(self, doc_ids: Sequence[str]) -> Dict[str, Optional[str]]:
        """The indexed documents among ``doc_ids`` -> the source hash their units recorded."""
        known = update_plan.known_docs(self.units)
        return {d: known[d] for d in doc_ids if d in known}

    @property
    def docstore(self) -> BaseDocumentStore:
        """All units, so that parent promotion can fetch parents."""
        if self._docstore is None:
            self._docstore = UnitDocumentStore(self.units)
        return self._docstore

    @property
    def finest_scores(self) -> Optional[FinestUnitScores]:
        """The query's scores of the finest units, for evidence-aware fitting (made on first use);
        None when neither finest list is in memory (a store's dense list and full-text search)."""
        if self._finest is None and self.by_g:
            g = min(self.by_g)
            dense, sparse = self.dense.get(g), self.sparse.get(g)
            if isinstance(dense, DenseExpert) or isinstance(sparse, SparseExpert):
                self._finest = FinestUnitScores(dense, sparse)
        return self._finest
