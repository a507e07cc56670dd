"""``CausalGraphIndex``: the offline half of CausalRAG2 (entity graph, Leiden hierarchy,
module summaries, causal gates), with cost accounting, JSON/NumPy persistence and
incremental updates (``update.py``)."""

from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, Document, MetadataMode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_causalrag.causal_graph import build, stages
from llama_index_ext_causalrag.causal_graph.facade import CausalGraphQueryMixin
from llama_index_ext_causalrag.causal_graph.extract import (
    CausalGraphExtractor,
    LLMEntityExtractor,
    OfflineEntityExtractor,
)
from llama_index_ext_causalrag.causal_graph.gates import LLMGateJudge, OfflineGateJudge
from llama_index_ext_causalrag.causal_graph.graph import CausalGraph
from llama_index_ext_causalrag.causal_graph.hierarchy import leiden_hierarchy, validate_hierarchy_params
from llama_index_ext_causalrag.causal_graph.stages import GraphConfig, NameVectors, RecordingJudge
from llama_index_ext_causalrag.causal_graph.state import (
    CausalGraphState,
    UpdateData,
    read_state_files,
    write_state_files,
)
from llama_index_ext_causalrag.causal_graph.summaries import ExtractiveSummarizer, LLMSummarizer
from llama_index_ext_causalrag.causal_graph.update import (
    CausalGraphUpdates,
    component_params,
    stores_extractions,
    update_components,
)
from llama_index_ext_causalrag.embeddings.defaults import resolve_embed_model
from llama_index_ext_causalrag.llm.resolve import model_name_of, resolve_llm
from llama_index_ext_causalrag.llm.cache import DEFAULT_CACHE_DIR, CostTracker, StageCost
from llama_index_ext_causalrag.llm.io import LLMBudget, LLMBudgetExceeded, LLMCallError, RetryPolicy
from llama_index_ext_causalrag.storage.persistence import check_embedder, open_persisted, persist_to
from llama_index_ext_causalrag.text.tokens import count_tokens
from llama_index_ext_causalrag.validation import check_documents

logger = logging.getLogger(__name__)

OFFLINE_ALTERNATIVE = "keyphrase extractor, extractive summaries and cue-sentence gate judge"
# How a module gets its vector: "members", the normalised mean of its entities' name vectors (no
# model call); "summary", the embedded "title. summary" text (one text per module).
MODULE_EMBEDDINGS = ("members", "summary")
DEFAULT_MODULE_EMBEDDING = "members"
member_embeddings = stages.member_embeddings


def split_units(documents: Sequence[Document], chunk_size: int, chunk_overlap: int) -> List[BaseNode]:
    """``SentenceSplitter`` units with stable ids ``<doc_id>::<i>`` (a rebuild gives the same graph)."""
    return SentenceSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, id_func=lambda i, doc: f"{doc.doc_id}::{i}"
    ).get_nodes_from_documents(documents)


def _from_state(name: str, doc: str) -> property:
    return property(lambda self: getattr(self._state, name), doc=doc)


class CausalGraphIndex(CausalGraphUpdates, CausalGraphQueryMixin):
    """Entity graph + Leiden hierarchy H0..HL + module summaries + causal gates over text units.

    Build with :meth:`from_documents` (or :meth:`from_nodes`); without an LLM every step
    has an offline alternative. ``build_stats`` holds per-stage seconds, LLM calls and tokens,
    and gate statistics per level. Persist with :meth:`persist`, load with :meth:`from_persist_dir`,
    or build into LlamaIndex stores (``storage_context=``, ``kvstore=``) and reopen with
    :meth:`from_vector_store`; update with ``insert``, ``insert_nodes``, ``delete_ref_doc``,
    ``refresh_ref_docs``.
    """

    graph = _from_state("graph", "The :class:`CausalGraph` (entities, relations, modules, gates).")
    units = _from_state("units", "The text units, in index order.")
    unit_by_id = _from_state("unit_by_id", "node id -> unit.")
    entity_ids = _from_state("entity_ids", "Sorted entity ids (rows of ``entity_embeddings``).")
    module_ids = _from_state("module_ids", "Sorted module ids (rows of ``module_embeddings``).")
    entity_embeddings = _from_state("entity_embeddings", "(n_entities, d) unit rows of the entity names.")
    module_embeddings = _from_state("module_embeddings", "(n_modules, d) unit rows of title + summary.")
    build_stats = _from_state("build_stats", "Sizes, per-stage cost and gate statistics of the last build or update.")

    def __init__(self, graph: CausalGraph, units: Sequence[BaseNode], entity_embeddings: np.ndarray,
                 module_embeddings: np.ndarray, params: Dict[str, Any], build_stats: Dict[str, Any],
                 embed_model: Optional[BaseEmbedding] = None, update_data: Optional[UpdateData] = None) -> None:
        self._state = CausalGraphState(graph, units, entity_embeddings, module_embeddings, build_stats, update_data)
        self.params = params
        self._embed_model = embed_model
        self._components: Dict[str, Any] = {}  # what updates use: extractor, summarizer, gate_judge, llm, ...
        self._store: Optional[Dict[str, Any]] = None  # set by causal_graph.store: vector store, docstore, kvstate
        self._update_lock = threading.Lock()

    def snapshot(self) -> "CausalGraphIndex":
        """A shallow copy on the current state; updates replace the state, never change it."""
        return copy.copy(self)

    @property
    def embed_model(self) -> BaseEmbedding:
        """Resolved lazily: loading an index does not load the embedding model."""
        if self._embed_model is None:
            self._embed_model = resolve_embed_model(None)
        return self._embed_model

    # ------------------------------------------------------------------ build
    @classmethod
    def from_documents(cls, documents: Sequence[Document], llm: Optional[LLM] = None,
                       embed_model: Optional[BaseEmbedding] = None, extractor: Optional[CausalGraphExtractor] = None,
                       gate_judge: Optional[object] = None, show_progress: bool = True, chunk_size: int = 256,
                       chunk_overlap: int = 0, storage_context: Optional[Any] = None, kvstore: Optional[Any] = None,
                       namespace: Optional[str] = None, **kwargs: Any) -> "CausalGraphIndex":
        """Split ``documents`` into units (``SentenceSplitter(chunk_size, chunk_overlap)``), then build
        (:meth:`from_nodes`, which also explains ``storage_context``, ``kvstore`` and ``namespace``)."""
        documents = check_documents(documents, "CausalGraphIndex.from_documents", invisible="skip")
        if not documents:
            raise ValueError("CausalGraphIndex.from_documents got an empty corpus (0 documents); "
                             "pass at least one Document with text.")
        units = split_units(documents, chunk_size, chunk_overlap)
        return cls.from_nodes(units, llm=llm, embed_model=embed_model, extractor=extractor, gate_judge=gate_judge,
                              show_progress=show_progress, storage_context=storage_context, kvstore=kvstore,
                              namespace=namespace, _extra_params={"chunk_size": chunk_size,
                                                                  "chunk_overlap": chunk_overlap}, **kwargs)

    @classmethod
    def from_nodes(cls, nodes: Sequence[BaseNode], llm: Optional[LLM] = None,
                   embed_model: Optional[BaseEmbedding] = None, extractor: Optional[CausalGraphExtractor] = None,
                   gate_judge: Optional[object] = None, summarizer: Optional[object] = None,
                   show_progress: bool = True, max_cluster_size: int = 10, max_levels: int = 4,
                   resolution: float = 1.0, seed: int = 42, gate_candidates_per_module: int = 5,
                   min_entity_units: Optional[int] = None, max_entities: Optional[int] = 8000,
                   string_threshold: float = 0.92, embed_threshold: float = 0.95,
                   cache_dir: Optional[str] = None, num_workers: Optional[int] = None,
                   max_llm_calls: Optional[int] = None, max_llm_tokens: Optional[int] = None,
                   retry_policy: Optional[RetryPolicy] = None, module_embedding: str = DEFAULT_MODULE_EMBEDDING,
                   storage_context: Optional[Any] = None, kvstore: Optional[Any] = None,
                   namespace: Optional[str] = None,
                   _extra_params: Optional[Dict[str, Any]] = None) -> "CausalGraphIndex":
        """Build from text units (nodes with ``ref_doc_id`` and char spans).

        ``num_workers``: concurrent LLM calls per stage (default 8 for an LLM with real
        ``acomplete``, else 1); the graph does not depend on it. ``max_llm_calls`` /
        ``max_llm_tokens`` cap what this build may spend: it stops before exceeding a cap with
        :class:`~llama_index_ext_causalrag.llm.io.LLMBudgetExceeded`, every answer received is
        cached, and rerunning the same build resumes. ``retry_policy`` (backoff, per-call timeout)
        goes to the default LLM steps. ``module_embedding``: ``"members"`` (default) gives a module
        the normalised mean of its entities' vectors, with no model call; ``"summary"`` embeds each
        module's title and summary.

        With ``storage_context`` (``StorageContext.from_defaults(vector_store=..., docstore=...)``)
        the units go to its docstore and, with their embeddings, to its vector store; with
        ``kvstore`` (a ``BaseKVStore``; collection ``namespace``, by default the vector store's
        table name) the graph, entity and module vectors, update data and parameters go there
        (docs/stores.md). The stores are checked before anything is embedded.
        """
        validate_hierarchy_params(max_cluster_size, max_levels, resolution)
        if module_embedding not in MODULE_EMBEDDINGS:
            raise ValueError(f"module_embedding must be one of {MODULE_EMBEDDINGS}, got {module_embedding!r}.")
        if not isinstance(gate_candidates_per_module, int) or gate_candidates_per_module < 0:
            raise ValueError(f"gate_candidates_per_module must be an int >= 0, got {gate_candidates_per_module!r}; "
                             "use 0 to build no gates.")
        stores = None
        if storage_context is not None:
            from llama_index_ext_causalrag.causal_graph.store import open_stores

            stores = open_stores(storage_context, embed_model, kvstore, namespace)
            embed_model = stores.model
        elif kvstore is not None or namespace is not None:
            raise ValueError("kvstore= and namespace= keep the state of an index built into stores; pass "
                             "storage_context= too.")
        units = [n for n in nodes if n.get_content(metadata_mode=MetadataMode.NONE).strip()]
        if not units:
            raise ValueError(f"CausalGraphIndex got an empty corpus ({len(list(nodes))} nodes, none with text); "
                             "pass at least one node with text.")
        needs_llm = extractor is None or gate_judge is None or summarizer is None
        llm = resolve_llm(llm, "CausalGraphIndex build", OFFLINE_ALTERNATIVE) if needs_llm else llm
        rp = {"cache_dir": cache_dir, "retry_policy": retry_policy}
        extractor = extractor or (LLMEntityExtractor(llm, **rp) if llm else OfflineEntityExtractor())
        summarizer = summarizer or (LLMSummarizer(llm, **rp) if llm else ExtractiveSummarizer())
        gate_judge = gate_judge or (LLMGateJudge(llm, **rp) if llm else OfflineGateJudge())
        embed_model = resolve_embed_model(embed_model)
        min_units = min_entity_units if min_entity_units is not None else extractor.default_min_entity_units
        cost = CostTracker()
        budget = LLMBudget(max_llm_calls, max_llm_tokens)
        cfg = GraphConfig(max_cluster_size, max_levels, resolution, seed, gate_candidates_per_module, min_units,
                          max_entities, string_threshold, embed_threshold)
        try:
            index = cls._build(units, llm, embed_model, extractor, summarizer, gate_judge, show_progress, cfg,
                               cost, budget, num_workers, {**(_extra_params or {}), "module_embedding": module_embedding})
            index._components = {"llm": llm, "extractor": extractor, "summarizer": summarizer,
                                 "gate_judge": gate_judge, "num_workers": num_workers}
        except (LLMBudgetExceeded, LLMCallError) as e:
            where = cache_dir or getattr(getattr(extractor, "_cache", None), "cache_dir", None) or DEFAULT_CACHE_DIR
            stage = next((k for k, st in reversed(list(cost.stages.items()))), "?")
            made = cost.total_calls
            if isinstance(e, LLMBudgetExceeded):
                try:
                    left = cls._estimate_units(units, llm, extractor, max_cluster_size, gate_candidates_per_module,
                                               cache_dir=cache_dir)["total_calls"]
                except Exception:  # noqa: BLE001 - the estimate is only advice here
                    left = "?"
                raise LLMBudgetExceeded(
                    f"CausalGraphIndex build stopped before exceeding its LLM budget ({e}) in stage {stage!r}: "
                    f"{made} LLM call(s) made, about {left} remaining (estimate()). Every answer received is "
                    f"cached in {str(where)!r}; to resume, rerun the same build with a higher max_llm_calls / "
                    "max_llm_tokens (or none): cached answers cost no call.", e.calls, e.tokens) from e
            raise LLMCallError(
                f"CausalGraphIndex build stopped in stage {stage!r}: {e}. The {made} answer(s) received were "
                f"cached in {str(where)!r}; rerun the same build to resume (cached answers cost no call).") from e
        if stores is not None:
            from llama_index_ext_causalrag.causal_graph.store import write_build

            write_build(index, stores, show_progress)
        return index

    @classmethod
    def _build(cls, units: List[BaseNode], llm: Optional[LLM], embed_model: BaseEmbedding, extractor: Any,
               summarizer: Any, gate_judge: Any, show_progress: bool, cfg: GraphConfig, cost: CostTracker,
               budget: LLMBudget, num_workers: Optional[int],
               _extra_params: Optional[Dict[str, Any]]) -> "CausalGraphIndex":

        def embed(texts: List[str]) -> np.ndarray:
            return np.asarray(embed_model.get_text_embedding_batch(texts, show_progress=show_progress), dtype=np.float32)

        with cost.timed("extract") as st:
            extractions = extractor.extract(units, show_progress=show_progress, cost=st, budget=budget,
                                            num_workers=num_workers)
        names = NameVectors(embed)
        eg = stages.entity_graph(units, extractions, names, cfg, cost)
        graph, ent_emb = eg.graph, eg.entity_embeddings
        messages: List[str] = []
        if not graph.entities:
            messages.append(f"no entities were extracted from {len(units)} units (min_entity_units="
                            f"{cfg.min_entity_units}); the index has no graph. Lower min_entity_units or check "
                            "the extractor.")
        with cost.timed("hierarchy"):
            modules, msgs = leiden_hierarchy(graph.entity_ids(), [(r.source, r.target, r.weight) for r in graph.relations],
                                             cfg.max_cluster_size, cfg.max_levels, cfg.resolution, cfg.seed)
            messages += msgs if graph.entities else []
            graph.modules = {m.id: m for m in modules}
        for m in messages:
            logger.warning("CausalGraphIndex: %s", m)
        with cost.timed("summaries") as st:
            stages.summarise(eg, list(graph.modules.values()), summarizer, st, show_progress, budget, num_workers)
        small = sum(len(m.members) < getattr(summarizer, "min_members", 0) for m in graph.modules.values())
        if small:
            messages.append(f"{small} module(s) smaller than min_members={summarizer.min_members} were "
                            "summarised from their entities' descriptions, without an LLM call.")
            logger.info("CausalGraphIndex: %s", messages[-1])
        with cost.timed("embed_summaries"):
            mod_emb = stages.embed_modules(graph, graph.module_ids(), embed, ent_emb.shape[1] if ent_emb.size else 0,
                                           (_extra_params or {}).get("module_embedding", DEFAULT_MODULE_EMBEDDING),
                                           ent_emb)
        judge = RecordingJudge(gate_judge)
        with cost.timed("gates") as st:
            graph.gates, gate_stats = stages.causal_gates(eg, mod_emb, judge, cfg, st, show_progress, budget,
                                                          num_workers)
        graph.sort()
        params = {
            **(_extra_params or {}), "max_cluster_size": cfg.max_cluster_size, "max_levels": cfg.max_levels,
            "resolution": cfg.resolution, "seed": cfg.seed, "gate_candidates_per_module": cfg.gate_candidates_per_module,
            "min_entity_units": cfg.min_entity_units, "max_entities": cfg.max_entities,
            "string_threshold": cfg.string_threshold, "embed_threshold": cfg.embed_threshold,
            "extractor": extractor.class_name(),
            "summarizer": getattr(summarizer, "name", type(summarizer).__name__),
            "gate_judge": getattr(gate_judge, "name", type(gate_judge).__name__),
            "components": component_params(extractor, summarizer, gate_judge),
            "llm": model_name_of(llm) if llm is not None else None, "embed_model": model_name_of(embed_model),
        }
        stats = stages.build_stats(units, eg, cost, gate_stats, messages)
        data = UpdateData({x.unit_id: x for x in extractions}, names.vectors, judge.record)
        return cls(graph, units, ent_emb, mod_emb, params, stats, embed_model, data)

    # --------------------------------------------------------------- estimate
    @classmethod
    def estimate(cls, documents: Sequence[Document], llm: Optional[LLM] = None,
                 extractor: Optional[CausalGraphExtractor] = None, chunk_size: int = 256, chunk_overlap: int = 0,
                 max_cluster_size: int = 10, gate_candidates_per_module: int = 5, entities_per_unit: float = 8.0,
                 completion_tokens_per_unit: int = 250, cache_dir: Optional[str] = None) -> Dict[str, Any]:
        """Expected LLM calls and tokens of a build, before anything is spent.

        Extraction is exact (one call per distinct unit text not yet in the cache, prompt tokens
        counted);
        summaries and gate judgements are predicted from the number of entities and the
        hierarchy/gate parameters. The number of entities is ``entities_per_unit`` x units
        (typical LLM extraction yield after merging) before anything is spent, and the real
        count of distinct entity names once every unit's extraction is in the cache
        (``basis`` says which). Summaries and judgements are predicted whether or not they are
        already cached (their prompts depend on the hierarchy, which needs a build), so for a
        build whose answers are all cached this overstates what remains. With no LLM all
        counts are 0.
        """
        return cls._estimate_units(split_units(list(documents), chunk_size, chunk_overlap), llm, extractor,
                                   max_cluster_size, gate_candidates_per_module, entities_per_unit,
                                   completion_tokens_per_unit, cache_dir)

    @classmethod
    def _estimate_units(cls, units: Sequence[BaseNode], llm: Optional[LLM], extractor: Optional[Any],
                        max_cluster_size: int = 10, gate_candidates_per_module: int = 5,
                        entities_per_unit: float = 8.0, completion_tokens_per_unit: int = 250,
                        cache_dir: Optional[str] = None) -> Dict[str, Any]:
        if extractor is None and llm is not None:
            extractor = LLMEntityExtractor(llm, cache_dir=cache_dir)
        # a text that occurs twice (a duplicated article) is extracted once: the second is a cache hit
        distinct = list({u.get_content(metadata_mode=MetadataMode.LLM): u for u in units}.values())
        n_ent = entities_per_unit * len(distinct)
        out: Dict[str, Any] = {"units": len(units), "distinct_units": len(distinct),
                               "basis": f"entities_per_unit={entities_per_unit:g}"}
        if not isinstance(extractor, LLMEntityExtractor):
            out["extract"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            todo = [u for u in distinct if not extractor.is_cached(u)]
            if units and not todo:  # all extractions paid for: count their entities (no LLM call)
                keys = build.collect_keys(extractor.extract(units, cost=StageCost()))
                n_ent = len(build.select_keys(keys, extractor.default_min_entity_units, None))
                out["basis"] = f"cached extractions ({n_ent} distinct entity names)"
            out["extract"] = {
                "calls": len(todo), "cached_units": len(distinct) - len(todo),
                "prompt_tokens": sum(count_tokens(extractor.prompt_for(u.get_content(metadata_mode=MetadataMode.LLM)))
                                     for u in todo),
                "completion_tokens": completion_tokens_per_unit * len(todo)}
        if llm is None:
            out["summaries"] = out["gates"] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        else:
            leaves = n_ent / max(1.0, max_cluster_size / 2.0)
            modules = int(round(leaves * 1.25))
            judged = int(round(modules * gate_candidates_per_module * 0.7))
            out["summaries"] = {"calls": modules, "prompt_tokens": modules * 600, "completion_tokens": modules * 90}
            out["gates"] = {"calls": judged, "prompt_tokens": judged * 250, "completion_tokens": judged * 25}
        for k in ("calls", "prompt_tokens", "completion_tokens"):
            out["total_" + k] = sum(out[s][k] for s in ("extract", "summaries", "gates"))
        return out

    # ------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | Path) -> None:
        """graph.json, docstore.json, params.json, stats.json, entity/module (and, once computed,
        unit) embeddings .npy, what updates reuse (update.json, name_embeddings.npy and, for an
        LLM extractor, extractions.json) and manifest.json, swapped in atomically (no pickle). Built
        in stores: all but the units and their vectors (the stores hold them; reopen with
        :meth:`from_vector_store`)."""
        if self._store is not None:
            from llama_index_ext_causalrag.causal_graph.store import write_folder

            return write_folder(self, self._state, persist_dir)
        self._persist_state(self._state, persist_dir)

    def _persist_state(self, st: CausalGraphState, persist_dir: str | Path) -> None:
        with persist_to(persist_dir, "CausalGraphIndex") as w:
            write_state_files(w, st, self.params, stores_extractions(self.params))
            ds = SimpleDocumentStore()
            ds.add_documents(st.units, allow_update=True)
            ds.persist(str(w.dir / "docstore.json"))
            if st.stored_unit_embeddings is not None:  # computed by as_retriever: saved, never recomputed
                w.save_array("unit_embeddings.npy", st.stored_unit_embeddings)

    @classmethod
    def from_persist_dir(cls, persist_dir: str | Path, embed_model: Optional[BaseEmbedding] = None,
                         llm: Optional[LLM] = None, extractor: Optional[CausalGraphExtractor] = None,
                         summarizer: Optional[object] = None, gate_judge: Optional[object] = None,
                         cache_dir: Optional[str] = None) -> "CausalGraphIndex":
        """Load without re-embedding; an ``embed_model`` given is checked against the stored
        dimension (none given: resolved lazily, on first use). ``llm``, ``extractor``,
        ``summarizer`` and ``gate_judge`` are what later updates use (default: the kinds the
        index was built with, the LLM ones on ``llm`` or ``Settings.llm`` with the answer cache
        ``cache_dir``)."""
        ix = open_persisted(persist_dir, "CausalGraphIndex", "index.persist(persist_dir)")
        meta = ix.params
        if embed_model is not None:
            check_embedder(meta, embed_model, ix.dir, "CausalGraphIndex")
        graph, ent_emb, mod_emb, data, stats = read_state_files(ix)
        ds = SimpleDocumentStore.from_persist_path(str(ix.path("docstore.json")))
        units = [ds.get_node(i) for i in meta["unit_ids"]]
        ix.check_rows("units", len(units))
        index = cls(graph, units, ent_emb, mod_emb, meta["params"], stats, embed_model, data)
        if ix.has("unit_embeddings.npy"):
            index.set_unit_embeddings(ix.array("unit_embeddings.npy"))
        index._components = update_components(llm, extractor, summarizer, gate_judge, cache_dir)
        return index

    @classmethod
    def from_vector_store(cls, vector_store: Any, docstore: Any, persist_dir: Optional[str | Path] = None,
                          embed_model: Optional[BaseEmbedding] = None, kvstore: Optional[Any] = None,
                          namespace: Optional[str] = None, llm: Optional[LLM] = None,
                          extractor: Optional[CausalGraphExtractor] = None, summarizer: Optional[object] = None,
                          gate_judge: Optional[object] = None, cache_dir: Optional[str] = None) -> "CausalGraphIndex":
        """Reopen an index built with ``storage_context=``, without embedding anything: units from
        ``docstore``, their vectors from ``vector_store``, the graph, entity and module vectors and
        update data from the ``kvstore`` it was built with (collection ``namespace``) or from
        ``persist_dir`` (written by ``index.persist``). ``embed_model`` only embeds queries (and
        the units of later updates); ``llm`` ... ``cache_dir`` as in :meth:`from_persist_dir`."""
        from llama_index_ext_causalrag.causal_graph.store import open_from_store

        return open_from_store(cls, vector_store, docstore, persist_dir, embed_model, kvstore, namespace,
                               update_components(llm, extractor, summarizer, gate_judge, cache_dir))
