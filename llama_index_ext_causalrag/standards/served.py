"""A :class:`StandardsIndex` served by its store: queries read the few units they reach.

Built into a store whose driver serves lists (:meth:`StoreDriver.served_units`: PostgreSQL's
``"served"`` tables, BM25 from postings or pg_textsearch), each unit's vector-store row carries,
besides its BM25 terms (:func:`~llama_index_ext_causalrag.storage.terms.with_terms`), what the
retriever needs of the section tree and citation graph (:func:`unit_records`): its section, its hub
degree and its neighbour groups by relation. The index writes them at build and rewrites the rows
whose records an update changes, in the update's commit. So a reopened index reads parameters only,
and :class:`ServedStructureAwareRetriever` answers a query with a few statements: the BM25
prefilter (the store's list of the weighted query terms, filters inside), the cosines and facts of
the candidates by id, the neighbour records of the seeds, the cosines and facts of their
neighbours, and the returned nodes from the docstore. The ranking code is the in-memory
retriever's (:class:`~.retriever.StructureAwareRetriever`), over :class:`StoreFacts`.
"""

from __future__ import annotations

import logging
from collections import Counter
from contextvars import ContextVar
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import networkx as nx
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks.base import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.experts.dense import TIE_MARGIN
from llama_index_ext_causalrag.experts.sparse import BM25Tokenizer
from llama_index_ext_causalrag.fusion import DescStr
from llama_index_ext_causalrag.standards.facts import QueryFacts
from llama_index_ext_causalrag.standards.graph import StandardsGraph
from llama_index_ext_causalrag.standards.presets import StructureAwareConfig
from llama_index_ext_causalrag.standards.retriever import StructureAwareRetriever
from llama_index_ext_causalrag.storage.drivers import driver_for_layout
from llama_index_ext_causalrag.storage.filters import check_filters
from llama_index_ext_causalrag.storage.stores import fetch_nodes
from llama_index_ext_causalrag.storage.terms import LIST_KEY, with_terms
from llama_index_ext_causalrag.text.fitting import QueryEvidence
from llama_index_ext_causalrag.validation import caller, public_call

logger = logging.getLogger(__name__)

# a unit's section and hub degree under one key (a JSON key lookup parses the row's whole metadata:
# one lookup a row, not two), its neighbour groups under another (read for the seeds only)
UNIT_KEY, NEIGHBOURS_KEY = "std_unit", "std_neighbours"
RECORD_KEYS = (UNIT_KEY, NEIGHBOURS_KEY)
UNITS_LIST = 1  # the list the units are written to (one granularity)
READS = 5  # reads of one query at most, while other processes' writes land between its statements
_SEEN: ContextVar[Optional[List[int]]] = ContextVar("causalrag_standards_generations", default=None)


def unit_records(graph: StandardsGraph) -> Dict[str, Dict[str, Any]]:
    """Each unit's facts as row metadata: section, hub degree, and neighbour groups as
    ``[relation, groups]`` pairs in :meth:`StandardsGraph.unit_neighbours`'s order (siblings included)."""
    return {
        u: {
            UNIT_KEY: {"section": graph.section_of(u), "degree": graph.degree(u)},
            NEIGHBOURS_KEY: [[rel, groups] for rel, groups in graph.unit_neighbours(u, siblings=True).items()],
        }
        for u in graph.unit_ids
    }


def unit_tokens(units: Sequence[BaseNode]) -> List[List[str]]:
    """The BM25 tokens of ``units``: what the in-memory retriever's ``SparseExpert`` indexes."""
    return BM25Tokenizer().tokenize([n.get_content(metadata_mode=MetadataMode.EMBED) for n in units])


def served_rows(units: Sequence[BaseNode], records: Mapping[str, Dict[str, Any]]) -> List[BaseNode]:
    """The vector-store rows of ``units``: each with its BM25 terms, its list and its record."""
    return [with_terms(u, t, {LIST_KEY: UNITS_LIST, **records[u.node_id]}) for u, t in zip(units, unit_tokens(units))]


def open_served_units(
    vector_store: Any, p: Dict[str, Any], where: str, config: StructureAwareConfig, owner: str
) -> Any:
    """The served units of a reopened index (parameters ``p``, recorded in ``where``), checked to be
    all there; a ``ValueError`` naming the fix if ``vector_store`` cannot serve them."""
    lx = config.lexical
    driver = driver_for_layout(str(p["store_layout"]))
    served = driver.served_units(vector_store, int(p["embed_dim"]), (lx.bm25_k1, lx.bm25_b), dict(p["served"]))
    if served is None:
        raise ValueError(
            f"{owner}: the index in {where} is served from the store's lists ({p['store_layout']!r}); pass the "
            f"vector store it was built into, got {type(vector_store).__name__}."
        )
    served.check_open(where)
    return served


def empty_index(make_index: Any, p: Dict[str, Any], backend: Any, preset: Any, model: BaseEmbedding) -> Any:
    """An index of class ``make_index`` holding none of its corpus (served by ``backend``'s store)."""
    index = make_index.__new__(make_index)
    index.__dict__.update(
        _nodes={},
        graph=nx.DiGraph(),
        unit_ids=[],
        _unit_pos={},
        embeddings=None,
        embed_model_name=p.get("embed_model"),
        warnings=list(p.get("warnings", [])),
        _backend=backend,
        _corpus=None,
        preset=preset,
        _embed_model=model,
    )
    return index


def _saw(generations: Sequence[int]) -> None:
    seen = _SEEN.get()
    if seen is not None:
        seen.extend(generations)


class StoreFacts(QueryFacts):
    """What one query read of the units from the store (``units``: the driver's served units),
    read in batches as the retriever reaches them; every unit it holds passed ``filters``."""

    def __init__(
        self, units: Any, docstore: BaseDocumentStore, qvec: np.ndarray, filters: Optional[MetadataFilters]
    ) -> None:
        self.units, self.docstore, self.qvec, self.filters = units, docstore, qvec, filters
        self._cos: Dict[str, float] = {}
        self._meta: Dict[str, Dict[str, Any]] = {}
        self._nodes: Dict[str, BaseNode] = {}
        self._passing: Set[str] = set()

    def read_cosines(self, ids: Sequence[str]) -> None:
        """The cosine of those of ``ids`` not read yet that pass the filters."""
        todo = [u for u in dict.fromkeys(ids) if u not in self._cos]
        if todo:
            found, seen = self.units.cosines(self.qvec, todo, self.filters)
            _saw(seen)
            self._cos.update(found)
            self._passing.update(found)

    def read(self, ids: Sequence[str], keys: Sequence[str], filtered: bool = True) -> None:
        """Cosine and ``keys`` of those of ``ids`` not read yet (``filtered``: those passing the filters)."""
        todo = [u for u in dict.fromkeys(ids) if not all(k in self._meta.get(u, {}) for k in keys)]
        if not todo:
            return
        found, seen = self.units.facts(self.qvec, todo, keys, self.filters if filtered else None)
        _saw(seen)
        for u, (cos, meta) in found.items():
            self._cos[u] = cos
            self._meta.setdefault(u, {}).update(meta)
            if filtered:
                self._passing.add(u)

    def cos(self, u: str) -> float:
        return self._cos[u]

    def degree(self, u: str) -> float:
        return float(self._meta[u][UNIT_KEY]["degree"])

    def section(self, u: str) -> str:
        return str(self._meta[u][UNIT_KEY]["section"])

    def neighbours(self, u: str, siblings: bool) -> Dict[str, List[List[str]]]:
        return {rel: groups for rel, groups in self._meta[u][NEIGHBOURS_KEY] if siblings or rel != "sibling"}

    def passes(self, u: str) -> bool:
        return u in self._passing

    def node(self, u: str) -> BaseNode:
        return self._nodes[u]

    def label(self, u: str) -> str:
        node = self._nodes.get(u)
        return str(node.metadata.get("section_path") or u) if node is not None else u

    def prepare(self, pool: Sequence[str], seeds: Sequence[str], siblings: bool) -> None:
        """The seeds' neighbour records, then the cosine and facts of every unit of their groups and
        the facts of the pool (two statements)."""
        members: List[str] = []
        if seeds:
            self.read(seeds, [NEIGHBOURS_KEY], filtered=False)
            members = [x for s in seeds for groups in self.neighbours(s, siblings).values() for g in groups for x in g]
        self.read([*pool, *members], [UNIT_KEY])

    def prepare_nodes(self, ids: Sequence[str]) -> None:
        todo = [u for u in ids if u not in self._nodes]
        read: List[int] = []
        self._nodes.update(fetch_nodes(self.docstore, todo, counter=self.units.counter_sql(self.docstore), seen=read))
        _saw(read if read else [self.units.generation()])
        missing = [u for u in todo if u not in self._nodes]
        if missing:
            raise ValueError(
                f"{caller('StandardsIndex')}: the docstore lacks {len(missing)} unit(s) the vector store holds "
                f"(first {missing[0]!r}); pass the docstore the index was built with."
            )


class _QueryEmbedder:
    """The query's embedding, as the in-memory retriever's ``DenseExpert`` gives it."""

    def __init__(self, embed_model: BaseEmbedding) -> None:
        self.embed_model = embed_model

    def embed_query(self, query_bundle: QueryBundle) -> np.ndarray:
        if query_bundle.embedding is None:
            query_bundle.embedding = self.embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)
        return np.asarray(query_bundle.embedding, dtype=np.float32)


class ServedStructureAwareRetriever(StructureAwareRetriever):
    """:class:`StructureAwareRetriever` whose units stay in the store (``units``: the driver's
    served units, ``docstore``: the nodes); same settings, same ranking code, same results."""

    def __init__(
        self,
        units: Any,
        docstore: BaseDocumentStore,
        config: StructureAwareConfig,
        embed_model: Optional[BaseEmbedding] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        filters: Optional[MetadataFilters] = None,
        **overrides: Any,
    ) -> None:
        cfg = config.with_settings(**overrides)
        if cfg.dense.smoothing_alpha is not None:
            raise ValueError(
                f"{caller('StandardsIndex.as_retriever')}: smoothing_alpha={cfg.dense.smoothing_alpha} smooths every "
                "unit's embedding over the graph, which an index served by its store does not hold in the process; "
                "drop smoothing_alpha, or build the index in memory (StandardsIndex.from_documents(docs)) to smooth."
            )
        self.config = cfg
        for name, value in cfg.settings().items():
            setattr(self, name, value)
        self.lexical, self.dense, self.fusion, self.expansion, self.rerank, self.fitting = (
            cfg.lexical,
            cfg.dense,
            cfg.fusion,
            cfg.expansion,
            cfg.rerank,
            cfg.fitting,
        )
        self._units, self._docstore = units, docstore
        self._tokenizer = BM25Tokenizer()
        self._dense = _QueryEmbedder(resolve_embed_model(embed_model))  # type: ignore[assignment]
        with public_call(caller("StructureAwareRetriever")):
            self.filters = check_filters(filters)
        self._mask = None
        super(StructureAwareRetriever, self).__init__(callback_manager=callback_manager, verbose=verbose)

    @property
    def graph(self) -> StandardsGraph:
        raise ValueError(
            "StandardsIndex served by its store holds no graph in the process (each query reads the records of "
            "the units it reaches); build the index in memory for the whole StandardsGraph."
        )

    def persist(self, persist_dir: Any) -> None:
        raise ValueError(
            "a retriever of a StandardsIndex served by its store has nothing to persist: the index is in its "
            "stores; reopen it with StandardsIndex.from_vector_store(...)."
        )

    # ---- the stages' reads, from the store ------------------------------------------------
    def _facts(self, qvec: np.ndarray) -> QueryFacts:
        return StoreFacts(self._units, self._docstore, qvec, self.filters)

    def _unit_count(self) -> Optional[int]:
        return None

    def _prefilter(self, terms: "Counter[str]", k: Optional[int]) -> Tuple[List[str], Dict[str, float]]:
        lx = self.lexical
        want = self._units.count() if k is None else int(k) + TIE_MARGIN
        (ids, scores), seen = self._units.bm25(terms, want, lx.bm25_k1, lx.bm25_b, self.filters)
        _saw(seen)
        best = sorted(((-s, DescStr(u)) for u, s in zip(ids, scores) if s > 0))
        best = best if k is None else best[: int(k)]
        return [str(u) for _, u in best], {str(u): -s for s, u in best}

    def _dense_candidates(self, qvec: np.ndarray, facts: QueryFacts, k: int) -> List[str]:
        """The best ``k`` units by cosine (the ranks the in-memory retriever's full ranking uses)."""
        (ids, _), seen = self._units.dense(qvec, k + TIE_MARGIN, self.filters)
        _saw(seen)
        return list(ids)

    def _by_cosine(self, cand: List[str], facts: QueryFacts) -> List[str]:
        assert isinstance(facts, StoreFacts)
        facts.read_cosines(cand)
        return super()._by_cosine([u for u in cand if u in facts._cos], facts)

    def query_evidence(self) -> QueryEvidence:
        return QueryEvidence(terms=self._tokenizer, idf=self._units.idf)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """The in-memory retriever's ranking over the store's answers, read again if a write
        landed between its statements (each statement reads the tables' write counter)."""
        attempt = 0
        while True:
            attempt += 1
            seen: List[int] = []
            token = _SEEN.set(seen)
            try:
                out = super()._retrieve(query_bundle)
            finally:
                _SEEN.reset(token)
            if len(set(seen)) <= 1 or attempt == READS:
                if len(set(seen)) > 1:
                    logger.warning("StandardsIndex: writes kept landing during a query; answered from the last read.")
                return out
            logger.info("StandardsIndex: a write landed during a query (counters %s); reading it again.", seen)


__all__ = ["RECORD_KEYS", "ServedStructureAwareRetriever", "StoreFacts", "served_rows", "unit_records"]
