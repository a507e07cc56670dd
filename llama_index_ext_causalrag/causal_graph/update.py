"""Incremental updates of :class:`CausalGraphIndex`: ``insert``, ``insert_nodes``,
``delete_ref_doc``, ``refresh_ref_docs``.

An update extracts the new units only (the other units' extractions are kept), then runs the
build stages on the whole corpus with what it may reuse. Entities are merged by the same
canonicalisation (a name embedded before is not embedded again); an entity stays while it has
a mention, and under ``max_entities`` a new name joins by being found in more units than the
least frequent one kept (so an updated index may exceed the cap a little; a rebuild applies
it exactly). The hierarchy keeps every
entity that existed before in its communities (Leiden starts from the previous hierarchy with
them fixed, so a delete only removes members), and the new entities get a Leiden hierarchy
of their own, added beside the old modules. A module with the same level and members as
before, none of which lost a mention, is *unchanged*: it keeps its id, title, summary and
embedding, and a pair of unchanged modules keeps its gate judgement. Only the other modules
are summarised and embedded, and only candidate pairs involving them are judged. A delete
removes the document's units, hence its mentions and the entities left with none; modules
whose entities lost mentions are summarised again, so no summary quotes a deleted document.

Unlike a rebuild, new entities never join old communities: after many inserts, rebuild to
let Leiden partition the whole graph again.

The new state is complete before it replaces the old one, in one assignment (with
``persist_dir``, after it was written there; built into stores, after the stores were
changed, which is undone on a failure), so a failure part-way leaves the index as it was and
a query running meanwhile answers from the old state or the new one.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
from llama_index.core.schema import BaseNode, Document, MetadataMode

from llama_index_ext_causalrag.causal_graph import build_stages
from llama_index_ext_causalrag.causal_graph.build_stages import split_units
from llama_index_ext_causalrag.causal_graph.extract import LLMEntityExtractor, OfflineEntityExtractor, UnitExtraction
from llama_index_ext_causalrag.causal_graph.gates import LLMGateJudge, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph, Module
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy, module_paths
from llama_index_ext_causalrag.causal_graph.keyphrases import normalize_name
from llama_index_ext_causalrag.causal_graph.presets import CausalGraphBuildConfig
from llama_index_ext_causalrag.causal_graph.stages import HierarchyConfig
from llama_index_ext_causalrag.causal_graph.state import CausalGraphState, UpdateData
from llama_index_ext_causalrag.causal_graph.summaries import ExtractiveSummarizer, LLMSummarizer
from llama_index_ext_causalrag.llm.cache import CostTracker
from llama_index_ext_causalrag.llm.resolve import model_name_of, resolve_llm
from llama_index_ext_causalrag.storage import update_plan
from llama_index_ext_causalrag.storage.index_backend import IndexBackend
from llama_index_ext_causalrag.validation import check_documents, check_keywords, public_method

logger = logging.getLogger(__name__)

OWNER = "CausalGraphIndex"
# the keywords the update verbs take besides their documents, nodes or id
UPDATE_OPTIONS = ("persist_dir",)
_MODULE_ID = re.compile(r"^L(\d+)_(\d+)$")


def component_params(extractor: Any, summarizer: Any, gate_judge: Any) -> Dict[str, Dict[str, Any]]:
    """Settings of the offline steps, so that a loaded index updates with the same ones."""
    out: Dict[str, Dict[str, Any]] = {}
    if isinstance(extractor, OfflineEntityExtractor):
        out["extractor"] = {
            "max_words": extractor.max_words,
            "max_entities_per_sentence": extractor.max_entities_per_sentence,
        }
    if isinstance(summarizer, ExtractiveSummarizer):
        out["summarizer"] = {"num_sentences": summarizer.num_sentences}
    if isinstance(gate_judge, OfflineGateJudge):
        out["gate_judge"] = {"min_evidence": gate_judge.min_evidence, "min_lift": gate_judge.min_lift}
    return out


def update_components(
    llm: Any, extractor: Any, summarizer: Any, gate_judge: Any, cache_dir: Optional[str]
) -> Dict[str, Any]:
    """What a loaded index's updates use: the steps given (the others follow the recorded kinds)."""
    given = {
        "llm": llm,
        "extractor": extractor,
        "summarizer": summarizer,
        "gate_judge": gate_judge,
        "cache_dir": cache_dir,
    }
    return {k: v for k, v in given.items() if v is not None}


def match_modules(old: CausalGraph, new: Sequence[Module], affected: Set[str]) -> Tuple[Dict[str, Module], Set[str]]:
    """The new hierarchy, with the old id, title and summary for every unchanged module.

    Unchanged: same level and members as an old module, none of them in ``affected``. Any
    other module gets an id never used before (``L<level>_<n>``, ``n`` past the old ones).
    Returns (modules by id, ids of the unchanged modules).
    """
    by_key = {(m.level, frozenset(m.members)): m for m in old.modules.values()}
    top: Dict[int, int] = {}
    for mid in old.modules:
        hit = _MODULE_ID.match(mid)
        if hit:
            top[int(hit[1])] = max(top.get(int(hit[1]), -1), int(hit[2]))
    rename: Dict[str, str] = {}
    kept: Set[str] = set()
    for m in new:
        o = by_key.get((m.level, frozenset(m.members)))
        if o is not None and affected.isdisjoint(m.members):
            rename[m.id] = o.id
            kept.add(o.id)
        else:
            top[m.level] = top.get(m.level, -1) + 1
            rename[m.id] = f"L{m.level}_{top[m.level]:06d}"
    out: Dict[str, Module] = {}
    for m in new:
        mid = rename[m.id]
        o = old.modules[mid] if mid in kept else None
        out[mid] = Module(
            mid,
            m.level,
            list(m.members),
            rename[m.parent] if m.parent else None,
            [rename[c] for c in m.children],
            o.title if o else "",
            o.summary if o else "",
        )
    return out, kept


def starting_paths(old: CausalGraph, entities: Sequence[str], key_to_id: Dict[str, str]) -> Dict[str, List[str]]:
    """Entity -> its old modules, top first (an entity renamed by canonicalisation inherits the
    path of the old entity named after one of its keys)."""
    paths = module_paths(list(old.modules.values()))
    out = {e: paths[e] for e in entities if e in paths}
    for key, eid in sorted(key_to_id.items()):
        if eid not in out and "E:" + key in paths:
            out[eid] = paths["E:" + key]
    return out


def updated_hierarchy(
    graph: CausalGraph, initial: Dict[str, List[str]], hierarchy: HierarchyConfig
) -> Tuple[List[Module], List[str]]:
    """The old hierarchy, every old entity fixed in its communities (deleted ones gone), plus
    the Leiden hierarchy of the new entities among themselves, as modules of their own."""
    edges = [(r.source, r.target, r.weight) for r in graph.relations]
    old_ents = [e for e in graph.entity_ids() if e in initial]
    new_ents = [e for e in graph.entity_ids() if e not in initial]
    modules: List[Module] = []
    messages: List[str] = []
    for ents, start in ((old_ents, initial), (new_ents, None)):
        if not ents:
            continue
        inside = set(ents)
        mods, msgs = leiden_hierarchy(
            ents,
            [x for x in edges if x[0] in inside and x[1] in inside],
            **hierarchy.model_dump(),
            initial=start,
            moved=set(),
        )
        tag = "new:" if start is None else ""  # the two runs number their modules alike
        modules += [
            Module(tag + m.id, m.level, m.members, tag + m.parent if m.parent else None, [tag + c for c in m.children])
            for m in mods
        ]
        messages += msgs
    return modules, messages


class CausalGraphUpdates:
    """The update verbs of :class:`CausalGraphIndex` (a mixin), with LlamaIndex's signatures.

    Each takes ``persist_dir=`` among its keyword arguments (the updated index is written there
    before it replaces the one in memory); any other keyword is a ``TypeError`` naming it."""

    _state: CausalGraphState
    _components: Dict[str, Any]
    _update_lock: Any
    _backend: IndexBackend
    params: Dict[str, Any]
    embed_model: Any

    # ---- the verbs ------------------------------------------------------------------------
    @public_method
    def insert(self, document: "Document | Sequence[Document]", **insert_kwargs: Any) -> None:
        """Split, extract and index ``document`` (or a list of documents; a document whose id is
        indexed is refreshed: replaced in place if its hash changed, else left alone)."""
        persist_dir = _persist_dir(insert_kwargs)
        documents = [document] if isinstance(document, Document) else document
        self._refresh(documents, persist_dir, "insert")

    @public_method
    def refresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> List[bool]:
        """Re-index the documents that are new or whose hash changed; one bool per document."""
        return self._refresh(documents, _persist_dir(update_kwargs), "refresh_ref_docs")

    def _refresh(self, documents: Sequence[Document], persist_dir: "Optional[str | Path]", verb: str) -> List[bool]:
        documents = check_documents(documents)
        todo, flags = update_plan.changed_documents(documents, update_plan.known_docs(self._state.units))
        if todo:
            split = CausalGraphBuildConfig.from_params(self.params).units  # as the index was built
            units = _with_text(split_units(todo, split.chunk_size, split.chunk_overlap))
            gone = [d.doc_id for d in todo if d.doc_id not in update_plan.known_docs(units)]  # emptied documents
            self._apply(units, gone, persist_dir, verb)
        return flags

    @public_method
    def insert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        """Add text units (nodes with ``ref_doc_id``); units of an indexed document replace all
        of its units."""
        persist_dir = _persist_dir(insert_kwargs)
        units = _with_text(list(nodes))
        if units:
            self._apply(units, [], persist_dir, "insert_nodes")

    @public_method
    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> None:
        """Remove every unit of ``ref_doc_id``, its mentions and the entities left with none;
        an unknown id logs a warning and does nothing.

        ``delete_from_docstore`` is accepted for LlamaIndex's signature and changes nothing: the
        document's units always leave the index's own docstore (in memory, or the docstore of
        the ``storage_context`` it was built into), as the graph cannot keep units it no longer
        indexes."""
        persist_dir = _persist_dir(delete_kwargs)
        if ref_doc_id not in update_plan.known_docs(self._state.units):
            update_plan.unknown_ref_doc(ref_doc_id)
            return
        self._apply([], [ref_doc_id], persist_dir, "delete_ref_doc")

    # ---- what an update needs ---------------------------------------------------------------
    def _update_data(self) -> UpdateData:
        data = self._state.update
        if data is None:
            raise ValueError(
                f"this {OWNER} was persisted without the data updates reuse (update.json: an older "
                "package version); rebuild it with CausalGraphIndex.from_documents and persist it again."
            )
        return data

    def _resolved(self) -> Dict[str, Any]:
        """extractor, summarizer, gate_judge: those of the build, else the recorded kinds."""
        c, p = dict(self._components), self.params
        conf, cache = p.get("components", {}), c.get("cache_dir")

        def llm_for(kind: str) -> Any:
            llm = resolve_llm(c.get("llm"), f"{OWNER} update", "steps (none: this index was built with an LLM)")
            if llm is None:
                raise ValueError(
                    f"this {OWNER} was built with an LLM {kind} ({p.get('llm')!r}); an update needs an LLM: load "
                    "it with CausalGraphIndex.from_persist_dir(persist_dir, llm=...) or set Settings.llm."
                )
            if p.get("llm") and model_name_of(llm) != p.get("llm"):
                logger.warning(
                    "%s: built with LLM %r, updated with %r; new summaries and judgements come from another model.",
                    OWNER,
                    p.get("llm"),
                    model_name_of(llm),
                )
            c["llm"] = llm
            return llm

        kinds = {
            "extractor": {
                "OfflineEntityExtractor": lambda: OfflineEntityExtractor(**conf.get("extractor", {})),
                "LLMEntityExtractor": lambda: LLMEntityExtractor(llm_for("extractor"), cache_dir=cache),
            },
            "summarizer": {
                "extractive": lambda: ExtractiveSummarizer(**conf.get("summarizer", {})),
                "llm": lambda: LLMSummarizer(llm_for("summarizer"), cache_dir=cache),
            },
            "gate_judge": {
                "offline": lambda: OfflineGateJudge(**conf.get("gate_judge", {})),
                "llm": lambda: LLMGateJudge(llm_for("gate judge"), cache_dir=cache),
            },
        }
        for role, makers in kinds.items():
            if c.get(role) is None:
                if p.get(role) not in makers:
                    raise ValueError(
                        f"this {OWNER} was built with a custom {role} ({p.get(role)!r}); pass it again to "
                        f"update: CausalGraphIndex.from_persist_dir(persist_dir, {role}=...)."
                    )
                c[role] = makers[p[role]]()
        self._components = c
        return c

    # ---- the update ---------------------------------------------------------------------------
    def _apply(
        self, new_units: List[BaseNode], drop: Sequence[str], persist_dir: "Optional[str | Path]", verb: str
    ) -> None:
        with self._update_lock:  # one update at a time; queries never wait
            self._apply_locked(new_units, drop, persist_dir, verb)

    def _apply_locked(
        self, new_units: List[BaseNode], drop: Sequence[str], persist_dir: "Optional[str | Path]", verb: str
    ) -> None:
        st, data = self._state, self._update_data()
        plan = update_plan.merge_plan(st.units, new_units, drop)
        if not plan:
            raise update_plan.cannot_empty(", ".join(drop))
        update_plan.check_insert_embedder(self.params.get("embed_model"), self.embed_model)
        comps = self._resolved()
        replaced = {update_plan.doc_key(u) for u in new_units} | set(drop)
        removed = {u.node_id for u in st.units if update_plan.doc_key(u) in replaced}
        cost = CostTracker()
        with cost.timed("extract") as sc:
            fresh = comps["extractor"].extract(new_units, cost=sc, num_workers=comps.get("num_workers"))
            kept_old = [st.units[i] for side, i in plan if side == "old"]
            known = (
                data.extractions
                if data.extractions is not None
                else {x.unit_id: x for x in comps["extractor"].extract(kept_old)}
            )  # a loaded offline index
        extractions = [known[st.units[i].node_id] if side == "old" else fresh[i] for side, i in plan]
        units = update_plan.in_plan_order(plan, st.units, new_units)
        new = self._rebuild(
            st, data, units=units, extractions=extractions, removed=removed, comps=comps, cost=cost, verb=verb
        )
        emb = st.stored_unit_embeddings
        if emb is not None:
            rows = (
                build_stages.unit_rows(
                    np.asarray(
                        self.embed_model.get_text_embedding_batch(
                            [u.get_content(metadata_mode=MetadataMode.EMBED) for u in new_units]
                        ),
                        dtype=np.float32,
                    )
                )
                if new_units
                else emb[:0]
            )
            new.set_unit_embeddings(np.stack([emb[i] if side == "old" else rows[i] for side, i in plan]))
        new.build_stats["update"]["units_extracted"] = len(new_units)
        if self.params.get("titled") is False and any(u.metadata.get("title") for u in new_units):
            self.params = {**self.params, "titled": True}  # title links from now on (an older index: always)
        # the backend holds the new state first (a failure leaves it, and the index, as they were)
        self._backend.commit(self.params, st, new, new_units=new_units, replaced=replaced, persist_dir=persist_dir)
        self._state = new  # one assignment: queries see the old or the new state

    def _rebuild(
        self,
        st: CausalGraphState,
        data: UpdateData,
        *,
        units: List[BaseNode],
        extractions: List[UnitExtraction],
        removed: Set[str],
        comps: Dict[str, Any],
        cost: CostTracker,
        verb: str,
    ) -> CausalGraphState:
        cfg = CausalGraphBuildConfig.from_params(self.params)
        workers = comps.get("num_workers")

        def embed(texts: List[str]) -> np.ndarray:
            return np.asarray(self.embed_model.get_text_embedding_batch(texts), dtype=np.float32)

        names = build_stages.NameVectors(embed, data.names)
        held = {normalize_name(n) for e in st.graph.entities.values() for n in (e.name, *e.aliases)}
        entities = cfg.resolved_entities(comps["extractor"].default_min_entity_units)
        entity_graph = build_stages.entity_graph(units, extractions, names, entities=entities, cost=cost, held=held)
        g, old = entity_graph.graph, st.graph
        affected = {e for e, ent in old.entities.items() if removed.intersection(ent.unit_ids)}
        with cost.timed("hierarchy"):
            modules, messages = updated_hierarchy(
                g, starting_paths(old, g.entity_ids(), entity_graph.key_to_id), cfg.hierarchy
            )
            g.modules, kept = match_modules(old, modules, affected)
        changed = [m for m in g.modules.values() if m.id not in kept]
        with cost.timed("summaries") as sc:
            build_stages.summarise(
                entity_graph,
                changed,
                summarizer=comps["summarizer"],
                cost=sc,
                show_progress=False,
                budget=None,
                num_workers=workers,
            )
        with cost.timed("embed_summaries"):
            mids = g.module_ids()
            old_row = {m: st.module_embeddings[i] for i, m in enumerate(st.module_ids)}
            todo = [m for m in mids if m not in kept]
            dim = (
                entity_graph.entity_embeddings.shape[1]
                if entity_graph.entity_embeddings.size
                else st.module_embeddings.shape[1]
            )
            # an index persisted before module_embedding existed embedded its summaries
            mode = self.params.get("module_embedding", "summary")
            rows = dict(
                zip(
                    todo,
                    build_stages.embed_modules(
                        g, todo, embed, dim=dim, mode=mode, entity_embeddings=entity_graph.entity_embeddings
                    ),
                )
            )
            mod_emb = (
                np.stack([old_row[m] if m in kept else rows[m] for m in mids]).astype(np.float32)
                if mids
                else np.zeros((0, dim), dtype=np.float32)
            )
        judge = build_stages.RecordingJudge(
            comps["gate_judge"], {k: j for k, j in data.judgements.items() if k[0] in kept and k[1] in kept}
        )
        with cost.timed("gates") as sc:
            g.gates, gate_stats = build_stages.causal_gates(
                entity_graph,
                mod_emb,
                judge,
                candidates_per_module=cfg.modules.gate_candidates_per_module,
                cost=sc,
                show_progress=False,
                budget=None,
                num_workers=workers,
            )
        g.sort()
        stats = build_stages.build_stats(units, entity_graph, cost, gate_stats, messages)
        stats["update"] = {
            "verb": verb,
            "entity_names_embedded": names.embedded,
            "modules_kept": len(kept),
            "modules_changed": len(changed),
            "pairs_judged": judge.judged,
            "pairs_reused": len(judge.record) - judge.judged,
        }
        used = {e.name for e in g.entities.values()} | set(names.used)
        update = UpdateData(
            {x.unit_id: x for x in extractions}, {n: v for n, v in names.vectors.items() if n in used}, judge.record
        )
        return CausalGraphState(g, units, entity_graph.entity_embeddings, mod_emb, stats, update)


def _persist_dir(kwargs: Dict[str, Any]) -> "Optional[str | Path]":
    """The ``persist_dir=`` of an update verb's keyword arguments; another keyword is a ``TypeError``."""
    check_keywords(kwargs, UPDATE_OPTIONS)
    return kwargs.get("persist_dir")


def _with_text(nodes: Sequence[BaseNode]) -> List[BaseNode]:
    return [n for n in nodes if n.get_content(metadata_mode=MetadataMode.NONE).strip()]


__all__ = ["CausalGraphUpdates", "component_params", "match_modules", "starting_paths", "update_components"]
