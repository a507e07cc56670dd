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

    def __init__(self, extractions: Optional[Dict[str, UnitExtraction]], names: Dict[str, np.ndarray],
                 judgements: Dict[Pair, Judgement]) -> None:
        self.extractions, self.names, self.judgements = extractions, names, judgements

    # ---- JSON (no pickle) --------------------------------------------------------------
    def to_files(self, graph: CausalGraph, entity_embeddings: np.ndarray,
                 keep_extractions: bool) -> Tuple[Dict[str, Any], np.ndarray, Optional[Dict[str, Any]]]:
        """(update.json, name_embeddings.npy, extractions.json or None). Names of entities are
        stored once, in ``entity_embeddings``; only the other names get rows here."""
        rep = {e.name for e in graph.entities.values()}
        extra = sorted(n for n in self.names if n not in rep)
        dim = entity_embeddings.shape[1] if entity_embeddings.ndim == 2 else 0
        rows = np.stack([self.names[n] for n in extra]).astype(np.float32) if extra \
            else np.zeros((0, dim), dtype=np.float32)
        judged = [[a, b, j.yes, j.score, j.reason] for (a, b), j in sorted(self.judgements.items()) if not j.failed]
        ex = None
        if keep_extractions and self.extractions is not None:
            ex = {uid: {"ok": x.ok, "entities": [[e.name, e.type, e.description] for e in x.entities],
                        "relations": [[r.source, r.target, r.description, r.weight] for r in x.relations]}
                  for uid, x in sorted(self.extractions.items())}
        return {"names": extra, "judgements": judged}, rows, ex

    @classmethod
    def from_files(cls, update: Dict[str, Any], rows: np.ndarray, graph: CausalGraph, entity_ids: Sequence[str],
                   entity_embeddings: np.ndarray, extractions: Optional[Dict[str, Any]]) -> "UpdateData":
        names = {graph.entities[e].name: entity_embeddings[i] for i, e in enumerate(entity_ids)}
        names.update(zip(update["names"], rows))
        judged = {(a, b): Judgement(bool(y), float(s), r) for a, b, y, s, r in update["judgements"]}
        ex = None if extractions is None else {
            uid: UnitExtraction(uid, [ExtractedEntity(*e) for e in d["entities"]],
                                [ExtractedRelation(*r) for r in d["relations"]], d["ok"])
            for uid, d in extractions.items()}
        return cls(ex, names, judged)


class CausalGraphState:
    """The graph, the units, entity/module embeddings, ``build_stats``, unit embeddings once
    computed, and :class:`UpdateData`. Never changed after an update has replaced it."""

    def __init__(self, graph: CausalGraph, units: Sequence[BaseNode], entity_embeddings: np.ndarray,
                 module_embeddings: np.ndarray, build_stats: Dict[str, Any],
                 update: Optional[UpdateData] = None, unit_embeddings: Optional[np.ndarray] = None) -> None:
        self.graph = graph
        self.units: List[BaseNode] = list(units)
        self.unit_by_id = {u.node_id: u for u in self.units}
        self.entity_ids = graph.entity_ids()
        self.module_ids = graph.module_ids()
        if entity_embeddings.shape[0] != len(self.entity_ids) or module_embeddings.shape[0] != len(self.module_ids):
            raise ValueError(
                f"embedding rows ({entity_embeddings.shape[0]} entities, {module_embeddings.shape[0]} modules) "
                f"do not match the graph ({len(self.entity_ids)}, {len(self.module_ids)}); rebuild the index.")
        self.entity_embeddings = entity_embeddings
        self.module_embeddings = module_embeddings
        self.build_stats = build_stats
        self.update = update
        self._unit_embeddings: Optional[np.ndarray] = None
        self._lock = threading.Lock()
        if unit_embeddings is not None:
            self.set_unit_embeddings(unit_embeddings)

    @property
    def stored_unit_embeddings(self) -> Optional[np.ndarray]:
        """The unit embeddings if computed, else None (nothing is embedded)."""
        return self._unit_embeddings

    def unit_embeddings(self, embed_model: BaseEmbedding) -> np.ndarray:
        """(n_units, d) unit-norm rows in ``units`` order, computed on first use."""
        from llama_index_ext_causalrag.causal_graph.retriever import embed_units

        with self._lock:
            if self._unit_embeddings is None:
                self._unit_embeddings = embed_units(self, embed_model)
            return self._unit_embeddings

    def set_unit_embeddings(self, embeddings: np.ndarray) -> None:
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(self.units):
            raise ValueError(f"unit embeddings must have shape (n_units={len(self.units)}, dim), got {emb.shape}.")
        self._unit_embeddings = emb


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
    w.rows.update(units=len(st.units), entities=len(st.entity_ids), modules=len(st.module_ids))
    w.params.update(params=params, unit_ids=[u.node_id for u in st.units], embed_model=params.get("embed_model"),
                    embed_dim=array_dim(st.entity_embeddings) or array_dim(st.module_embeddings))


def read_state_files(ix: PersistedIndex) -> Tuple[CausalGraph, np.ndarray, np.ndarray, Optional[UpdateData], Dict[str, Any]]:
    """(graph, entity vectors, module vectors, update data or None, build stats) of a folder
    :func:`write_state_files` wrote."""
    graph = CausalGraph.from_dict(ix.json("graph.json"))
    ent_emb = ix.array("entity_embeddings.npy")
    data = None
    if ix.has(UPDATE_FILE):
        data = UpdateData.from_files(ix.json(UPDATE_FILE), ix.array(NAMES_FILE), graph, graph.entity_ids(), ent_emb,
                                     ix.json(EXTRACTIONS_FILE) if ix.has(EXTRACTIONS_FILE) else None)
    return graph, ent_emb, ix.array("module_embeddings.npy"), data, ix.json("stats.json")
