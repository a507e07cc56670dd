"""What a :class:`CausalGraphIndex` holds, as one object an update replaces in one assignment.

:class:`CausalGraphState` is the graph, the units and every embedding queries read;
:class:`UpdateData` is what an update reuses instead of paying again: each unit's
extraction, the embedding of each entity name, and every judged gate pair (judged "no"
included). Retrievers are made from one state, so a query never mixes two.

:func:`write_state_files` / :func:`read_state_files` are the files of a state besides its
units (graph, entity and module vectors, update data, statistics, parameters), shared by the
in-memory folder and the folder a store-backed index keeps in its kvstore.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode

from llama_index_ext_causalrag.causal_graph.extract import ExtractedEntity, ExtractedRelation, UnitExtraction
from llama_index_ext_causalrag.causal_graph.gates import Judgement
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph
from llama_index_ext_causalrag.causal_graph.titles import TitleLinks, present_title_links
from llama_index_ext_causalrag.causal_graph.units import MemoryUnits, StoredUnits, TermPostings, unit_texts
from llama_index_ext_causalrag.storage.persistence import IndexWriter, PersistedIndex, array_dim, stable_model_name

Pair = Tuple[str, str]
UPDATE_FILE = "update.json"
EXTRACTIONS_FILE = "extractions.json"
NAMES_FILE = "name_embeddings.npy"
# extractors that are a cheap, deterministic function of the text: re-run, not persisted
REPRODUCIBLE_EXTRACTORS = {"OfflineEntityExtractor"}


def stores_extractions(params: Dict[str, Any]) -> bool:
    """Whether ``persist`` keeps the per-unit extractions (any extractor but the offline one)."""
    return params.get("extractor") not in REPRODUCIBLE_EXTRACTORS


class UpdateData:
    """Per-unit extractions (None: the extractor is cheap and deterministic, so an update
    re-runs it on a loaded index), entity name -> unit-norm embedding, judged gate pairs."""

    def __init__(
        self,
        extractions: Optional[Dict[str, UnitExtraction]],
        names: Dict[str, np.ndarray],
        judgements: Dict[Pair, Judgement],
    ) -> None:
        self.extractions, self.names, self.judgements = extractions, names, judgements

    # ---- JSON (no pickle) --------------------------------------------------------------
    def to_files(
        self, graph: CausalGraph, entity_embeddings: np.ndarray, keep_extractions: bool
    ) -> Tuple[Dict[str, Any], np.ndarray, Optional[Dict[str, Any]]]:
        """(update.json, name_embeddings.npy, extractions.json or None). Names of entities are
        stored once, in ``entity_embeddings``; only the other names get rows here."""
        rep = {e.name for e in graph.entities.values()}
        extra = sorted(n for n in self.names if n not in rep)
        dim = entity_embeddings.shape[1] if entity_embeddings.ndim == 2 else 0
        rows = (
            np.stack([self.names[n] for n in extra]).astype(np.float32)
            if extra
            else np.zeros((0, dim), dtype=np.float32)
        )
        judged = [[a, b, j.yes, j.score, j.reason] for (a, b), j in sorted(self.judgements.items()) if not j.failed]
        ex = None
        if keep_extractions and self.extractions is not None:
            ex = {
                uid: {
                    "ok": x.ok,
                    "entities": [[e.name, e.type, e.description] for e in x.entities],
                    "relations": [[r.source, r.target, r.description, r.weight] for r in x.relations],
                }
                for uid, x in sorted(self.extractions.items())
            }
        return {"names": extra, "judgements": judged}, rows, ex

    @classmethod
    def from_files(
        cls,
        update: Dict[str, Any],
        rows: np.ndarray,
        graph: CausalGraph,
        entity_ids: Sequence[str],
        entity_embeddings: np.ndarray,
        extractions: Optional[Dict[str, Any]],
    ) -> "UpdateData":
        names = {graph.entities[e].name: entity_embeddings[i] for i, e in enumerate(entity_ids)}
        names.update(zip(update["names"], rows))
        judged = {(a, b): Judgement(bool(y), float(s), r) for a, b, y, s, r in update["judgements"]}
        ex = (
            None
            if extractions is None
            else {
                uid: UnitExtraction(
                    uid,
                    [ExtractedEntity(*e) for e in d["entities"]],
                    [ExtractedRelation(*r) for r in d["relations"]],
                    d["ok"],
                )
                for uid, d in extractions.items()
            }
        )
        return cls(ex, names, judged)


class CausalGraphState:
    """The graph, the units, entity/module embeddings, ``build_stats``, unit embeddings once
    computed, and :class:`UpdateData`. Never changed after an update has replaced it.

    ``units`` is a list of nodes (in memory) or a :class:`~.units.StoredUnits` (on stores: the
    state holds the unit ids and their term postings, not their text or vectors; ``units`` and
    ``unit_embeddings`` then read every unit from the stores, for updates and exports, and keep
    nothing)."""

    def __init__(
        self,
        graph: CausalGraph,
        units: "Sequence[BaseNode] | StoredUnits",
        entity_embeddings: np.ndarray,
        module_embeddings: np.ndarray,
        build_stats: Dict[str, Any],
        update: Optional[UpdateData] = None,
        unit_embeddings: Optional[np.ndarray] = None,
    ) -> None:
        self.graph = graph
        self._stored: Optional[StoredUnits] = units if isinstance(units, StoredUnits) else None
        self._units: Optional[List[BaseNode]] = None if self._stored is not None else list(units)  # type: ignore[arg-type]
        self.unit_ids: List[str] = (
            list(self._stored.ids) if self._stored is not None else [u.node_id for u in self._units]
        )  # type: ignore[union-attr]
        self.entity_ids = graph.entity_ids()
        self.module_ids = graph.module_ids()
        if entity_embeddings.shape[0] != len(self.entity_ids) or module_embeddings.shape[0] != len(self.module_ids):
            raise ValueError(
                f"embedding rows ({entity_embeddings.shape[0]} entities, {module_embeddings.shape[0]} modules) "
                f"do not match the graph ({len(self.entity_ids)}, {len(self.module_ids)}); rebuild the index."
            )
        self.entity_embeddings = entity_embeddings
        self.module_embeddings = module_embeddings
        self.build_stats = build_stats
        self.update = update
        self._unit_embeddings: Optional[np.ndarray] = None
        self._postings: Optional[TermPostings] = self._stored.postings if self._stored is not None else None
        self._source: Optional[MemoryUnits] = None
        self._titles: Optional[TitleLinks] = None
        self._lock = threading.Lock()
        if unit_embeddings is not None:
            self.set_unit_embeddings(unit_embeddings)

    @property
    def in_stores(self) -> bool:
        """True if the units' text and vectors are read from the stores, not held."""
        return self._stored is not None

    @property
    def units(self) -> List[BaseNode]:
        """The text units in index order (on stores: read from the docstore, not kept)."""
        return self._stored.all_nodes() if self._stored is not None else self._units  # type: ignore[return-value]

    @property
    def unit_by_id(self) -> Dict[str, BaseNode]:
        return {u.node_id: u for u in self.units}

    @property
    def stored_unit_embeddings(self) -> Optional[np.ndarray]:
        """The unit embeddings if computed, else None (nothing is embedded); on stores, read from
        the vector store (what an update reuses)."""
        if self._stored is not None:
            return self._stored.all_embeddings()
        return self._unit_embeddings

    def unit_embeddings(self, embed_model: BaseEmbedding) -> np.ndarray:
        """(n_units, d) unit-norm rows in ``units`` order, computed on first use (on stores: read)."""
        from llama_index_ext_causalrag.causal_graph.retriever import embed_units

        if self._stored is not None:
            return self._stored.all_embeddings()
        with self._lock:
            if self._unit_embeddings is None:
                self._unit_embeddings = embed_units(self, embed_model)
            return self._unit_embeddings

    def set_unit_embeddings(self, embeddings: np.ndarray) -> None:
        if self._stored is not None:
            raise ValueError(
                "the units of a store-backed index keep their vectors in the vector store; "
                "set_unit_embeddings applies to an in-memory index."
            )
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(self.unit_ids):
            raise ValueError(f"unit embeddings must have shape (n_units={len(self.unit_ids)}, dim), got {emb.shape}.")
        self._unit_embeddings = emb
        self._source = None

    def unit_postings(self) -> TermPostings:
        """Term -> unit positions of the units' text (``terms_of`` terms), computed once."""
        from llama_index_ext_causalrag.causal_graph.retriever import terms_of

        with self._lock:
            if self._postings is None:
                self._postings = TermPostings.from_texts(unit_texts(self._units or []), terms_of)
            return self._postings

    def title_links(self) -> TitleLinks:
        """The title links of the units (their metadata ``"title"``, :mod:`.titles`), computed once
        per state: the first retriever that needs them reads every unit (on stores, the docstore)."""
        with self._lock:
            if self._titles is None:
                units = self._stored.present_nodes() if self._stored is not None else self._units or []
                self._titles = present_title_links(units)
            return self._titles

    def unit_source(self, embed_model: BaseEmbedding) -> "MemoryUnits | StoredUnits":
        """What a retriever scores units with: the stores' units, or the units and vectors in memory."""
        if self._stored is not None:
            return self._stored
        emb = self.unit_embeddings(embed_model)
        postings = self.unit_postings()
        with self._lock:
            if self._source is None:
                self._source = MemoryUnits(self._units or [], emb, postings)
            return self._source

    def keep_in_stores(self, stored: StoredUnits) -> None:
        """Drop the units and their vectors (written to the stores ``stored`` reads); before the
        state is published only."""
        if stored.ids != self.unit_ids:
            raise ValueError("keep_in_stores: the stored units are not this state's units.")
        self._stored, self._units, self._unit_embeddings, self._source = stored, None, None, None
        self._postings = stored.postings


def write_state_files(w: IndexWriter, st: CausalGraphState, params: Dict[str, Any], keep_extractions: bool) -> None:
    """``graph.json``, ``stats.json``, entity/module vectors, the update data and the parameters
    of ``st`` (not its units, nor their embeddings) into the folder of ``w``."""
    params = dict(params)
    for key in ("llm", "embed_model"):  # no machine paths in the folder
        if isinstance(params.get(key), str):
            params[key] = stable_model_name(params[key])
    w.write_json("graph.json", st.graph.to_dict(), ensure_ascii=False, sort_keys=True)
    w.write_json("stats.json", st.build_stats, indent=1, sort_keys=True)
    w.save_array("entity_embeddings.npy", st.entity_embeddings)
    w.save_array("module_embeddings.npy", st.module_embeddings)
    if st.update is not None:
        upd, rows, ex = st.update.to_files(st.graph, st.entity_embeddings, keep_extractions)
        w.write_json(UPDATE_FILE, upd, ensure_ascii=False)
        w.save_array(NAMES_FILE, rows)
        if ex is not None:
            w.write_json(EXTRACTIONS_FILE, ex, ensure_ascii=False)
    w.rows.update(units=len(st.unit_ids), entities=len(st.entity_ids), modules=len(st.module_ids))
    w.params.update(
        params=params,
        unit_ids=list(st.unit_ids),
        embed_model=params.get("embed_model"),
        embed_dim=array_dim(st.entity_embeddings) or array_dim(st.module_embeddings),
    )


def read_state_files(
    persisted: PersistedIndex,
) -> Tuple[CausalGraph, np.ndarray, np.ndarray, Optional[UpdateData], Dict[str, Any]]:
    """(graph, entity vectors, module vectors, update data or None, build stats) of a folder
    :func:`write_state_files` wrote."""
    graph = CausalGraph.from_dict(persisted.json("graph.json"))
    ent_emb = persisted.array("entity_embeddings.npy")
    data = None
    if persisted.has(UPDATE_FILE):
        data = UpdateData.from_files(
            persisted.json(UPDATE_FILE),
            persisted.array(NAMES_FILE),
            graph,
            graph.entity_ids(),
            ent_emb,
            persisted.json(EXTRACTIONS_FILE) if persisted.has(EXTRACTIONS_FILE) else None,
        )
    return graph, ent_emb, persisted.array("module_embeddings.npy"), data, persisted.json("stats.json")
